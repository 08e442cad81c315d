// comm_mpi.c — groups, the control collectives of comm.h over MPI (host memory, every backend), and the
// watchdog that every blocking wait of the layer goes through.
#include "comm/comm_mpi.h"
#include "common/util.h"
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_GROUPS 64
static Group* registry[MAX_GROUPS];   // by id: the side channel's answers look groups up here
static int next_id = 0;
static const Group* world_g;          // the group of MPI_COMM_WORLD (the phase thread's report names it)

Group* group_from_mpi(MPI_Comm comm) {
    Group* g = calloc(1, sizeof *g);
    if (!g) { fprintf(stderr, "comm: out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    g->comm = comm;
    MPI_Comm_rank(comm, &g->rank);
    MPI_Comm_size(comm, &g->size);
    int id = next_id;   // an id every member agrees on (and new on each): the largest of the members' next ids
    snprintf(g->name, sizeof g->name, "%s", comm == MPI_COMM_WORLD ? "world" : "split");
    if (g->size > 1) {   // (under the watchdog: a member that never arrives ends the job)
        MPI_Request rq;
        g->id = -1;
        MPI_Iallreduce(MPI_IN_PLACE, &id, 1, MPI_INT, MPI_MAX, comm, &rq);
        comm_watch_wait(g, 1, &rq, "a new group's id (allreduce)", NULL);
    }
    g->id = id;
    next_id = id + 1;
    if (id < MAX_GROUPS) registry[id] = g;
    if (comm == MPI_COMM_WORLD && !world_g) world_g = g;
    return g;
}
void group_set_name(Group* g, const char* name) { snprintf(g->name, sizeof g->name, "%s", name); }
MPI_Comm group_mpi(const Group* g) { return g->comm; }
int group_rank(const Group* g) { return g->rank; }
int group_size(const Group* g) { return g->size; }

size_t mpi_max_count(void) {
    static size_t m = 0;
    if (!m) {
        const char* e = getenv("RINGLM_COMM_MAX_COUNT");
        long long v = e ? atoll(e) : 0;
        m = v > 0 && v < INT_MAX ? (size_t)v : (size_t)INT_MAX;
    }
    return m;
}

// ---- the watchdog --------------------------------------------------------------------------------------
// Every blocking wait polls its requests: spinning for the first SPIN_S (a collective of ranks in step
// completes within that), then sleeping between polls for 1/16 of the time waited so far (NAP_MIN..NAP_MAX),
// so that a rank waiting for a slow or stopped peer uses almost no CPU. Past the timeout the rank asks every
// other rank over a side channel (a duplicate of the world communicator, polled by waiting ranks) how far it
// got; one rank prints the answer as one line and aborts the job.
// A phase (comm_phase_begin: a checkpoint's save or load) is watched also where the layer does not wait: HDF5's
// collective I/O blocks inside MPI-IO, and one rank's file work keeps the others waiting. A thread of its own then
// answers the side channel for this rank whenever the main thread is not in a wait of the layer, and ends the job
// the same way when the main thread has stayed out of the layer's waits for timeout_s.
#define SPIN_S 1e-3
#define NAP_MIN 20e-6
#define NAP_MAX 2e-3
#define STAGGER_S 0.02   // lower world ranks ask first: rank r waits r * STAGGER_S (at most 50 of them)
#define ASK_S 2.0        // how long a rank that timed out waits for the answers
#define GRACE_S 10.0     // a rank told that a lower rank is reporting waits this long before reporting itself
#define PHASE_POLL_S 0.05   // the phase thread's poll of the side channel
enum { TAG_ASK = 1, TAG_ANSWER = 2 };

static double timeout_s = 600;
static MPI_Comm side = MPI_COMM_NULL;
static int side_rank = 0, side_size = 1;
static const Group* cur_g;         // where this rank waits now (for the answers)
static const char* cur_what;
static int asked_by = -1;          // the lowest rank that asked us: it reports (unless it is higher than us)
static double asked_at = 0;

// the phase: its name ("" outside one), when the main thread last entered or left a wait of the layer, and whether
// it is in one now; guarded by ph_mu. side_mu: one thread at a time on the side channel (answering, or the
// report's questions). reporting: a thread of this rank is writing the report (the other keeps quiet).
static pthread_mutex_t ph_mu = PTHREAD_MUTEX_INITIALIZER, side_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ph_cv = PTHREAD_COND_INITIALIZER;
static char phase[128];
static double phase_t;
static int in_wait, ph_thread;     // ph_thread: the phase thread runs (MPI_THREAD_MULTIPLE was provided)
static int reporting;

typedef struct { long long entered; char where[160]; } Answer;

void comm_set_timeout(double seconds) { timeout_s = seconds > 0 ? seconds : 0; }

static void* phase_watch(void* arg);
void comm_watch_init(int thread_level) {
    MPI_Comm_dup(MPI_COMM_WORLD, &side);
    MPI_Comm_rank(side, &side_rank);
    MPI_Comm_size(side, &side_size);
    if (thread_level < MPI_THREAD_MULTIPLE) return;   // (phases are then watched only in the layer's waits)
    pthread_t t;
    sigset_t all, old;   // the thread takes no signal: they stay the main thread's
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    ph_thread = pthread_create(&t, NULL, phase_watch, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (ph_thread) pthread_detach(t);
}

void comm_watch_started(const Group* g) { ((Group*)g)->seq++; }

void comm_phase_begin(const char* name) {
    pthread_mutex_lock(&ph_mu);
    snprintf(phase, sizeof phase, "%s", name);
    phase_t = now_s();
    pthread_cond_signal(&ph_cv);
    pthread_mutex_unlock(&ph_mu);
}
void comm_phase_end(void) {
    pthread_mutex_lock(&ph_mu);
    phase[0] = 0;
    pthread_mutex_unlock(&ph_mu);
}
void comm_watch_shutdown(void) {
    if (!ph_thread) return;
    comm_phase_end();
    pthread_mutex_lock(&side_mu);   // (held from now on: the thread, between polls or about to, touches MPI no more)
    ph_thread = 0;
}
static void set_in_wait(int on) {
    pthread_mutex_lock(&ph_mu);
    in_wait = on;
    phase_t = now_s();
    pthread_mutex_unlock(&ph_mu);
}
// " while NAME" during a phase, else "" (into buf)
static const char* phase_suffix(char* buf, size_t n) {
    pthread_mutex_lock(&ph_mu);
    if (phase[0]) snprintf(buf, n, " while %s", phase); else buf[0] = 0;
    pthread_mutex_unlock(&ph_mu);
    return buf;
}

static void nap(double s) {
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    nanosleep(&ts, NULL);
}

// answer every question waiting on the side channel: how many collectives this rank started on the asked
// group, and where it is now (waiting in the layer, or working in a phase)
static void answer(void) {
    if (side == MPI_COMM_NULL) return;
    pthread_mutex_lock(&side_mu);
    for (;;) {
        int flag = 0, gid = -1;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_ASK, side, &flag, &st);
        if (!flag) break;
        MPI_Recv(&gid, 1, MPI_INT, st.MPI_SOURCE, TAG_ASK, side, MPI_STATUS_IGNORE);
        Answer a;
        memset(&a, 0, sizeof a);
        a.entered = gid >= 0 && gid < MAX_GROUPS && registry[gid] ? registry[gid]->seq : -1;
        pthread_mutex_lock(&ph_mu);
        if (in_wait || !phase[0])
            snprintf(a.where, sizeof a.where, "waiting in %s on the %s group", cur_what ? cur_what : "?", cur_g ? cur_g->name : "?");
        else snprintf(a.where, sizeof a.where, "in HDF5 or file I/O for %.0f s", now_s() - phase_t);
        pthread_mutex_unlock(&ph_mu);
        MPI_Send(&a, sizeof a, MPI_BYTE, st.MPI_SOURCE, TAG_ANSWER, side);
        if (asked_by < 0 || st.MPI_SOURCE < asked_by) { if (asked_by < 0) asked_at = now_s(); asked_by = st.MPI_SOURCE; }
    }
    pthread_mutex_unlock(&side_mu);
}

static int append(char* s, size_t n, const char* fmt, const char* a, int r, const char* b, const char* c) {
    size_t l = strlen(s);
    if (l + 160 >= n) { if (l + 4 < n && !strstr(s, "...")) strcat(s, ", ..."); return 0; }
    snprintf(s + l, n - l, fmt, a, r, b, c);
    return 1;
}

// The wait on g has not finished within the timeout: find out which ranks did not arrive, print one line and
// abort the job. Returns (without reporting) when yield is set and a lower rank turns out to be reporting, or when
// the other thread of this rank is reporting already. rq, peer: NULL from the phase thread (no request of its own).
static void stalled(const Group* g, int n, MPI_Request* rq, const char* what, const int* peer, int yield) {
    if (__atomic_exchange_n(&reporting, 1, __ATOMIC_ACQ_REL)) return;
    int me = side_rank, W = side_size, P = g->size;
    // the members of g as world ranks, and which point-to-point transfers are still pending
    int* grank = malloc(P * sizeof(int)), *wrank = malloc(P * sizeof(int));
    char* pending = calloc(P, 1);
    MPI_Group gg, wg;
    MPI_Comm_group(g->comm, &gg);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    for (int i = 0; i < P; i++) grank[i] = i;
    MPI_Group_translate_ranks(gg, P, grank, wg, wrank);
    if (peer)
        for (int i = 0; i < n; i++) {
            int f = 0;
            if (rq[i] != MPI_REQUEST_NULL) MPI_Test(&rq[i], &f, MPI_STATUS_IGNORE);
            if (!f && peer[i] >= 0 && peer[i] < P) pending[peer[i]] = 1;
        }
    // lower world ranks ask first; a question from one of them while we wait means it reports
    double t = now_s(), stagger = (me < 50 ? me : 50) * STAGGER_S;
    while (yield && now_s() - t < stagger) {
        answer();
        if (asked_by >= 0 && asked_by < me) goto out;
        nap(1e-3);
    }
    // ask every other rank how many collectives it started on g, and where it is
    Answer* ans = calloc(W, sizeof *ans);
    MPI_Request* rr = malloc(2 * (size_t)W * sizeof(MPI_Request));
    char* got = calloc(W, 1);
    int gid = g->id, left = 0;
    if (side != MPI_COMM_NULL)
        for (int r = 0; r < W; r++) {
            rr[2 * r] = rr[2 * r + 1] = MPI_REQUEST_NULL;
            if (r == me) continue;
            MPI_Irecv(&ans[r], sizeof(Answer), MPI_BYTE, r, TAG_ANSWER, side, &rr[2 * r]);
            MPI_Isend(&gid, 1, MPI_INT, r, TAG_ASK, side, &rr[2 * r + 1]);
            left++;
        }
    t = now_s();
    while (left > 0 && now_s() - t < ASK_S) {
        for (int r = 0; r < W; r++) {
            if (r == me || got[r]) continue;
            int f = 0;
            MPI_Test(&rr[2 * r], &f, MPI_STATUS_IGNORE);
            if (f) { got[r] = 1; left--; }
        }
        answer();
        if (yield && asked_by >= 0 && asked_by < me) goto out;   // (the requests stay posted: the job ends)
        nap(1e-3);
    }
    // the line: every member that did not arrive (for a transfer: every peer it is still pending with)
    char who[1024] = "";
    int k = 0;
    for (int i = 0; i < P; i++) {
        int r = wrank[i];
        if (r == me || (peer && !pending[i])) continue;
        const char* sep = k ? ", " : "";
        char where[sizeof ans[r].where + 4];
        if (side == MPI_COMM_NULL) snprintf(where, sizeof where, " (unknown)");
        else if (!got[r]) snprintf(where, sizeof where, " (no answer: stopped, hung or dead)");
        else if (!peer && ans[r].entered >= g->seq) continue;   // arrived
        else { ans[r].where[sizeof ans[r].where - 1] = 0; snprintf(where, sizeof where, " (%s)", ans[r].where); }
        append(who, sizeof who, "%srank %d%s%s", sep, r, where, "");
        k++;
    }
    // ranks outside g that did not answer either: the cause when members of g wait for them in another group
    char also[400] = "";
    int na = 0;
    for (int r = 0; r < W && side != MPI_COMM_NULL; r++) {
        int member = 0;
        for (int i = 0; i < P && !member; i++) member = wrank[i] == r;
        if (r == me || member || got[r]) continue;
        size_t l = strlen(also);
        if (l + 16 < sizeof also) snprintf(also + l, sizeof also - l, "%s%d", na++ ? ", " : "", r);
    }
    char tail[460] = "";
    if (na) snprintf(tail, sizeof tail, "; rank%s %s, outside the group, do%s not answer either (stopped, hung or dead)",
                     na > 1 ? "s" : "", also, na > 1 ? "" : "es");
    char line[2300], ph[160];
    phase_suffix(ph, sizeof ph);
    if (k)
        snprintf(line, sizeof line, "comm: %s on the %s group (%d ranks) did not finish within timeout_s = %g s%s: %s "
                 "did not arrive%s; rank %d aborts the job", what, g->name, P, timeout_s, ph, who, tail, me);
    else
        snprintf(line, sizeof line, "comm: %s on the %s group (%d ranks) did not finish within timeout_s = %g s%s although "
                 "every rank arrived (%s); rank %d aborts the job", what, g->name, P, timeout_s, ph,
                 rq ? "an MPI or network fault?" : "a file system or MPI-IO that does not answer?", me);
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
out:
    free(grank); free(wrank); free(pending);
    MPI_Group_free(&gg); MPI_Group_free(&wg);
    __atomic_store_n(&reporting, 0, __ATOMIC_RELEASE);
}

// the phase thread: sleeps outside phases; in one, answers the side channel for this rank while the main thread is
// not in a wait of the layer (a wait answers for itself), and reports once the main thread has been out of the
// layer's waits for timeout_s
static void* phase_watch(void* arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&ph_mu);
        while (!phase[0]) pthread_cond_wait(&ph_cv, &ph_mu);
        int waiting = in_wait || !ph_thread;
        double idle = now_s() - phase_t;
        pthread_mutex_unlock(&ph_mu);
        if (!waiting) {
            answer();
            int mine = asked_by < 0 || asked_by > side_rank;
            if (timeout_s > 0 && idle > timeout_s && world_g && (mine || now_s() - asked_at > GRACE_S))
                stalled(world_g, 0, NULL, "checkpoint I/O (HDF5, MPI-IO, the file system)", NULL, mine);
        }
        nap(PHASE_POLL_S);
    }
    return NULL;
}

static void watch_wait(const Group* g, int n, MPI_Request* rq, const char* what, const int* peer);
void comm_watch_wait(const Group* g, int n, MPI_Request* rq, const char* what, const int* peer) {
    if (n <= 0) return;
    // in a phase every wait, also one that completes at once, is progress: the phase thread's clock starts over
    int in_phase = ph_thread && __atomic_load_n(&phase[0], __ATOMIC_RELAXED);
    if (in_phase) set_in_wait(1);
    watch_wait(g, n, rq, what, peer);
    if (in_phase) set_in_wait(0);
}
static void watch_wait(const Group* g, int n, MPI_Request* rq, const char* what, const int* peer) {
    int done = 0;
    MPI_Testall(n, rq, &done, MPI_STATUSES_IGNORE);
    if (done) return;
    const Group* pg = cur_g;
    const char* pw = cur_what;
    cur_g = g; cur_what = what;
    double t0 = now_s();
    for (;;) {
        MPI_Testall(n, rq, &done, MPI_STATUSES_IGNORE);
        if (done) break;
        double t = now_s(), waited = t - t0;
        if (waited < SPIN_S) continue;
        answer();
        if (timeout_s > 0 && waited > timeout_s) {
            if (asked_by < 0 || asked_by > side_rank) stalled(g, n, rq, what, peer, 1);
            else if (t - asked_at > GRACE_S) stalled(g, n, rq, what, peer, 0);   // the reporter did not
        }
        double s = waited / 16;
        nap(s < NAP_MIN ? NAP_MIN : s > NAP_MAX ? NAP_MAX : s);
    }
    cur_g = pg; cur_what = pw;
}

// one collective started on g (request rq), completed under the watchdog
static void coll_wait(const Group* g, MPI_Request* rq, const char* what) { comm_watch_wait(g, 1, rq, what, NULL); }

void mpi_allreduce_named(const Group* g, void* buf, size_t n, MPI_Datatype t, int size, MPI_Op op, const char* what) {
    if (g->size == 1) return;
    for (size_t o = 0; o < n; o += mpi_max_count()) {
        size_t k = n - o < mpi_max_count() ? n - o : mpi_max_count();
        MPI_Request rq;
        comm_watch_started(g);
        MPI_Iallreduce(MPI_IN_PLACE, (char*)buf + o * size, (int)k, t, op, g->comm, &rq);
        coll_wait(g, &rq, what);
    }
}
static CommTraffic traffic;
CommTraffic comm_traffic(void) { return traffic; }
static void add(int kind, double bytes, double messages) {
    traffic.bytes[kind] += bytes;
    traffic.messages[kind] += messages;
}
void comm_traffic_count(int kind, const Group* g, size_t n, int root) {
    double P = g->size, b = 4.0 * n;
    if (P <= 1 || !n) return;
    switch (kind) {
    case TRAFFIC_HOP: add(kind, b, 1); break;
    case TRAFFIC_A2A: case TRAFFIC_PARTS: add(kind, (P - 1) * b, P - 1); break;
    case TRAFFIC_ALLREDUCE: add(kind, 2 * (P - 1) * b / P, 2 * (P - 1)); break;
    case TRAFFIC_BCAST: if (g->rank == root) add(kind, b, P - 1); break;
    }
}

// All-to-all of host memory: block j (n floats at send + j n) to rank j, block i of recv from rank i. Pairwise
// exchange: in step s = 1 .. P - 1 rank r sends to r + s and receives from r - s (one transfer each way in flight,
// split into calls of at most mpi_max_count() floats), its own block copied; every wait under the watchdog.
void mpi_alltoall(const Group* g, const float* send, float* recv, size_t n, const char* what) {
    int P = g->size, r = g->rank;
    if (n) memcpy(recv + (size_t)r * n, send + (size_t)r * n, n * sizeof(float));
    if (P == 1 || !n) return;
    comm_watch_started(g);
    size_t m = mpi_max_count();
    for (int s = 1; s < P; s++) {
        int to = (r + s) % P, from = (r - s + P) % P;
        for (size_t o = 0; o < n; o += m) {
            int k = (int)(n - o < m ? n - o : m);
            MPI_Request rq[2];
            int peer[2] = { from, to };
            MPI_Irecv(recv + (size_t)from * n + o, k, MPI_FLOAT, from, 3, g->comm, &rq[0]);
            MPI_Isend(send + (size_t)to * n + o, k, MPI_FLOAT, to, 3, g->comm, &rq[1]);
            comm_watch_wait(g, 2, rq, what, peer);
        }
    }
}

void mpi_allreduce(const Group* g, void* buf, size_t n, MPI_Datatype t, int size, MPI_Op op) {
    mpi_allreduce_named(g, buf, n, t, size, op, "allreduce");
}

// ---- control collectives ----
void ctl_sum_f64(const Group* g, double* x, size_t n) { mpi_allreduce_named(g, x, n, MPI_DOUBLE, sizeof(double), MPI_SUM, "ctl_sum (allreduce)"); }
void ctl_max_f64(const Group* g, double* x, size_t n) { mpi_allreduce_named(g, x, n, MPI_DOUBLE, sizeof(double), MPI_MAX, "ctl_max (allreduce)"); }
void ctl_sum_u64(const Group* g, uint64_t* x, size_t n) { mpi_allreduce_named(g, x, n, MPI_UINT64_T, sizeof(uint64_t), MPI_SUM, "ctl_sum_u64 (allreduce)"); }
double ctl_sum(const Group* g, double x) { ctl_sum_f64(g, &x, 1); return x; }
double ctl_max(const Group* g, double x) { ctl_max_f64(g, &x, 1); return x; }
int ctl_any(const Group* g, int flag) {
    mpi_allreduce_named(g, &flag, 1, MPI_INT, sizeof(int), MPI_MAX, "ctl_any (allreduce)");
    return flag != 0;
}
void ctl_bcast(const Group* g, void* buf, size_t bytes, int root) {
    if (g->size == 1) return;
    for (size_t o = 0; o < bytes; o += mpi_max_count()) {
        size_t k = bytes - o < mpi_max_count() ? bytes - o : mpi_max_count();
        MPI_Request rq;
        comm_watch_started(g);
        MPI_Ibcast((char*)buf + o, (int)k, MPI_BYTE, root, g->comm, &rq);
        coll_wait(g, &rq, "ctl_bcast");
    }
}
void ctl_barrier(const Group* g) {
    if (g->size == 1) return;
    MPI_Request rq;
    comm_watch_started(g);
    MPI_Ibarrier(g->comm, &rq);
    coll_wait(g, &rq, "ctl_barrier");
}

static int small_count(size_t n, const char* what) {   // control messages are small: one call
    if (n > INT_MAX) {
        fprintf(stderr, "comm: %s of %zu bytes per rank exceeds MPI's int count\n", what, n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return (int)n;
}
void ctl_gather(const Group* g, const void* send, void* recv, size_t bytes, int root) {
    int k = small_count(bytes, "gather");
    MPI_Request rq;
    comm_watch_started(g);
    MPI_Igather(send, k, MPI_BYTE, recv, k, MPI_BYTE, root, g->comm, &rq);
    coll_wait(g, &rq, "ctl_gather");
}
void ctl_allgather(const Group* g, const void* send, void* recv, size_t bytes) {
    int k = small_count(bytes, "allgather");
    MPI_Request rq;
    comm_watch_started(g);
    MPI_Iallgather(send, k, MPI_BYTE, recv, k, MPI_BYTE, g->comm, &rq);
    coll_wait(g, &rq, "ctl_allgather");
}
