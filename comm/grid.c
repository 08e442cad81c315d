// grid.c — building the 3-D process grid and its communicators.
#include "comm/grid.h"
#include "comm/comm_mpi.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

// this process's rank as the launcher set it (MPI is not up yet); 0 when none says
static int launch_rank(void) {
    const char* vars[] = { "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID" };
    for (int i = 0; i < 4; i++) if (getenv(vars[i])) return atoi(getenv(vars[i]));
    return 0;
}

// MPI's start-up waits for every rank without a watchdog (the comm layer's needs MPI): a timer ends this rank with
// one line when it has not finished after RINGLM_INIT_TIMEOUT_S (default 600 s; 0: none; fractions of a second are
// kept), rank r r x 2 s later (the lowest rank still waiting says it; mpirun then ends the others)
static char init_line[256];
static size_t init_len;
static void on_init_alarm(int sig) {
    (void)sig;
    if (write(2, init_line, init_len) < 0) {}
    _exit(1);
}

// before MPI is up no rank can tell the others: launch rank 0 says it, the others exit quietly
static void pre_init_fail(int r, const char* line) {
    if (r == 0) { fprintf(stderr, "%s\n", line); fflush(stderr); }
    exit(1);
}

// RINGLM_INIT_TIMEOUT_S: unset or empty 600, "0" none, else a number of seconds in (0, 1e6]; a value that is none
// of these (ten, inf, -1, 1e9) ends the job with one line
static double init_timeout(int r) {
    const char* e = getenv("RINGLM_INIT_TIMEOUT_S");
    if (!e || !*e) return 600;
    char* end;
    errno = 0;
    double t = strtod(e, &end);
    int none = end == e;
    while (*end == ' ') end++;
    if (none || *end || errno || !(t >= 0 && t <= 1e6)) {
        char line[256];
        snprintf(line, sizeof line, "ringlm: RINGLM_INIT_TIMEOUT_S = '%.60s' must be a number of seconds above 0 and at "
                 "most 1e6 (0 turns the start-up limit off; unset: 600)", e);
        pre_init_fail(r, line);
    }
    return t;
}

static void arm_timer(double s) {
    struct itimerval it = { { 0, 0 }, { (time_t)s, (suseconds_t)((s - (double)(time_t)s) * 1e6) } };
    if (s > 0 && !it.it_value.tv_sec && !it.it_value.tv_usec) it.it_value.tv_usec = 1;
    setitimer(ITIMER_REAL, &it, NULL);
}

// a numeric environment variable, -1 when unset or not a whole number
static long env_long(const char* name) {
    const char* v = getenv(name);
    if (!v || !*v) return -1;
    char* end;
    errno = 0;
    long x = strtol(v, &end, 10);
    return *end || errno || x < 0 ? -1 : x;
}

// Launched by srun itself (a job step's task: SLURM_STEP_ID a step's number, not the batch script's or a special
// step's; not under mpirun, whose own daemons srun may start: OMPI_COMM_WORLD_SIZE): the step's task count
// (SLURM_STEP_NUM_TASKS, or SLURM_NTASKS) must be the MPI world's size. Tasks that srun started without a PMI
// plug-in (MpiDefault = none, no --mpi) are singletons, each a world of 1: launch rank (SLURM_PROCID) 0 says so.
static void slurm_check(int had_ompi_world, int r) {
    long step = env_long("SLURM_STEP_ID");
    if (step < 0) step = env_long("SLURM_STEPID");
    long n = env_long("SLURM_STEP_NUM_TASKS");
    if (n < 0) n = env_long("SLURM_NTASKS");
    if (had_ompi_world || step < 0 || step >= 0xfffffff0L || n < 1) return;
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world == n) return;
    if (r == 0)
        fprintf(stderr, "ringlm: srun started %ld tasks but MPI sees a world of %d rank%s: %s; launch with srun "
                "--mpi=pmix (or --mpi=pmi2: `srun --mpi=list` shows what the cluster has; docs/scale.md, PMI)\n", n, world,
                world == 1 ? "" : "s", world == 1 ? "the tasks started as singletons, without a PMI plug-in to join them"
                                             : "the step's tasks and the MPI job differ");
    fflush(stderr);
    MPI_Finalize();
    exit(1);
}

void grid_mpi_init(int* argc, char*** argv) {
    int provided, r = launch_rank(), had_ompi_world = getenv("OMPI_COMM_WORLD_SIZE") != NULL;
    double t = init_timeout(r);
    const char* stop = getenv("RINGLM_TEST_STOP_BEFORE_INIT");   // test hook: this rank stops (SIGSTOP) before MPI starts
    if (stop && *stop && atoi(stop) == r) raise(SIGSTOP);
    if (t > 0) {
        init_len = (size_t)snprintf(init_line, sizeof init_line, "ringlm: rank %d: MPI's start-up did not finish within %g s: "
                                    "another rank did not start or stopped (stopped, hung, or its host is gone); this rank "
                                    "ends the job\n", r, t);
        signal(SIGALRM, on_init_alarm);
        arm_timer(t + 2 * (r < 50 ? r : 50));
    }
    // (several threads: the watchdog's phase thread answers and reports while the main thread is in HDF5's MPI-IO)
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    slurm_check(had_ompi_world, r);
    comm_watch_init(provided);
    group_world();   // group ids are agreed at creation: the world's first, on every rank
    if (t > 0) { arm_timer(0); signal(SIGALRM, SIG_DFL); }
    const char* stop2 = getenv("RINGLM_TEST_STOP_AFTER_INIT");   // test hook: this rank stops once MPI is up
    if (stop2 && *stop2 && atoi(stop2) == r) raise(SIGSTOP);
}

int grid_parse_timeout(const char* who, const char* v, double* out, char* err, size_t errlen) {
    char* end;
    errno = 0;
    double t = v ? strtod(v, &end) : 0;
    if (!v || end == v || *end || errno || !(t >= 0 && t <= 1e9)) {
        snprintf(err, errlen, "%s: --timeout_s '%.60s' must be a number of seconds >= 0 and at most 1e9 (the watchdog's "
                 "limit on a wait for other ranks; 0: no watchdog; default 600)", who, v ? v : "");
        return 1;
    }
    *out = t;
    return 0;
}

const Group* group_world(void) {
    static Group* w = NULL;
    if (!w) w = group_from_mpi(MPI_COMM_WORLD);
    return w;
}

static Group* make_group(int color, int key, const char* name) {
    MPI_Comm c;
    MPI_Comm_split(MPI_COMM_WORLD, color, key, &c);
    Group* g = group_from_mpi(c);
    group_set_name(g, name);
    return g;
}

// every group ready for data collectives (a device transport makes its communicators); 0 or 1 + err,
// the same on every rank
static int attach_all(Grid* g, char* err, size_t errlen) {
    Group* gs[] = { g->world_g, g->tp_g, g->cp_g, g->dp_g, g->dpcp_g, g->a2a_g, g->ring_g != g->cp_g ? g->ring_g : NULL };
    int fail = 0;
    for (int i = 0; i < 7 && !fail; i++)
        if (gs[i]) fail = grid_agree(g->world_g, comm_data_attach(gs[i], err, errlen), err, errlen);
    return fail;
}

int grid_build(Grid* g, int tp, int cp, int a2a, char* err, size_t errlen) {
    memset(g, 0, sizeof *g);
    MPI_Comm_size(MPI_COMM_WORLD, &g->world);
    MPI_Comm_rank(MPI_COMM_WORLD, &g->rank);
    if (tp <= 0 || cp <= 0) { snprintf(err, errlen, "grid: tp = %d and cp = %d must be >= 1", tp, cp); return 1; }
    if (g->world % (tp * cp)) {
        snprintf(err, errlen, "grid: world size %d is not divisible by tp * cp = %d * %d; launch a multiple of %d ranks",
                 g->world, tp, cp, tp * cp);
        return 1;
    }
    if (a2a < 1 || cp % a2a) {
        snprintf(err, errlen, "grid: the all-to-all degree %d must divide cp = %d", a2a, cp);
        return 1;
    }
    g->tp = tp; g->cp = cp; g->dp = g->world / (tp * cp); g->a2a = a2a;
    g->tp_rank = g->rank % tp;
    g->cp_rank = (g->rank / tp) % cp;
    g->dp_rank = g->rank / (tp * cp);
    ctl_barrier(group_world());   // (under the watchdog: MPI_Comm_split is not) every rank is here
    g->world_g = make_group(0, g->rank, "world");
    g->tp_g = make_group(g->cp_rank + cp * g->dp_rank, g->tp_rank, "tp");
    g->cp_g = make_group(g->tp_rank + tp * g->dp_rank, g->cp_rank, a2a > 1 ? "cp" : "ring");
    g->ring_g = g->cp_g;
    if (a2a > 1) {   // all-to-all groups: a2a consecutive cp ranks; rings: the ranks at one index of their a2a group
        int R = cp / a2a;
        g->a2a_g = make_group(g->tp_rank + tp * (g->cp_rank / a2a + R * g->dp_rank), g->cp_rank % a2a, "a2a");
        g->ring_g = R > 1 ? make_group(g->tp_rank + tp * (g->cp_rank % a2a + a2a * g->dp_rank), g->cp_rank / a2a, "ring")
                          : NULL;
    }
    g->dp_g = make_group(g->tp_rank + tp * g->cp_rank, g->dp_rank, "dp");
    g->dpcp_g = make_group(g->tp_rank, g->cp_rank + cp * g->dp_rank, "dp x cp");
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &g->local_rank);
    MPI_Comm_free(&node);
    return attach_all(g, err, errlen);
}

// list the groups of one kind: ranks sharing `fixed` coordinates, varying one coordinate (kind 0 tp, 1 cp, 2 dp,
// 3 the all-to-all groups inside cp, 4 the rings across them)
static void print_groups(const Grid* g, const char* name, int kind) {
    printf("  %-5s groups:", name);
    int n = g->world, U = g->a2a, R = g->cp / g->a2a;
    char* seen = calloc(n, 1);
    for (int r = 0; r < n; r++) {
        if (seen[r]) continue;
        int t = r % g->tp, c = (r / g->tp) % g->cp, d = r / (g->tp * g->cp);
        int size = kind == 0 ? g->tp : kind == 1 ? g->cp : kind == 2 ? g->dp : kind == 3 ? U : R;
        printf(" {");
        for (int i = 0; i < size; i++) {
            int ci = kind == 3 ? c / U * U + i : kind == 4 ? c % U + U * i : i;   // the cp index of member i
            int rr = kind == 0 ? i + g->tp * (c + g->cp * d) : kind == 1 || kind >= 3 ? t + g->tp * (ci + g->cp * d)
                                                                                          : t + g->tp * (c + g->cp * i);
            seen[rr] = 1;
            printf(i ? ",%d" : "%d", rr);
        }
        printf("}");
    }
    printf("\n");
    free(seen);
}

void grid_print(const Grid* g) {
    if (g->rank) return;
    printf("grid: world %d = dp %d x cp %d x tp %d (rank = tp_rank + tp * (cp_rank + cp * dp_rank))\n",
           g->world, g->dp, g->cp, g->tp);
    print_groups(g, "tp", 0);
    if (g->a2a > 1) {
        print_groups(g, "cp", 1);
        print_groups(g, "a2a", 3);
        if (g->cp / g->a2a > 1) print_groups(g, "ring", 4);
    } else print_groups(g, "ring", 1);
    print_groups(g, "dp", 2);
    fflush(stdout);
}

void grid_check(const Group* g, int failed, const char* msg) {
    int first = failed ? g->rank : g->size;
    mpi_allreduce_named(g, &first, 1, MPI_INT, sizeof(int), MPI_MIN, "grid_check (allreduce)");
    if (first == g->size) return;
    if (g->rank == first) { fprintf(stderr, "%s\n", msg); fflush(stderr); }
    grid_exit(1);
}

int grid_agree(const Group* g, int failed, char* msg, size_t n) {
    int first = failed ? g->rank : g->size;
    mpi_allreduce_named(g, &first, 1, MPI_INT, sizeof(int), MPI_MIN, "grid_agree (allreduce)");
    if (first == g->size) return 0;
    ctl_bcast(g, msg, n, first);
    return 1;
}

static void (*exit_fns[8])(void);
static int n_exit_fns;
// the stop line of grid_stop_on_signals (below); emptied once the program ends by itself
static char stop_line[200];
static size_t stop_len;
void grid_on_exit(void (*fn)(void)) { if (n_exit_fns < 8) exit_fns[n_exit_fns++] = fn; }

// test hook: RINGLM_TEST_HOLD_IN_EXIT=FILE holds launch rank 0 inside grid_exit, after its stop line was cleared,
// until FILE (which it creates) is removed (at most 600 s): a test sends its signal at that moment, deterministically
static void test_hold_in_exit(void) {
    const char* f = getenv("RINGLM_TEST_HOLD_IN_EXIT");
    if (!f || !*f || launch_rank() != 0) return;
    FILE* h = fopen(f, "w");
    if (!h) return;
    fclose(h);
    for (int i = 0; i < 60000 && !access(f, F_OK); i++) usleep(10000);
}

void grid_exit(int status) {
    // ending anyway: a SIGTERM from the launcher (mpirun stops the other ranks once one has exited non-zero) must not
    // add a second line to the one that said why
    stop_len = 0;
    test_hold_in_exit();
    for (int i = n_exit_fns - 1; i >= 0; i--) exit_fns[i]();
    ctl_barrier(group_world());   // MPI_Finalize waits for every rank without a watchdog: wait here first
    comm_watch_shutdown();
    MPI_Finalize();
    exit(status);
}

// the stop line (rank 0 of the launch, from the launcher's environment: MPI is not up yet), written by the handler
static void on_stop(int sig) {
    (void)sig;
    if (stop_len && write(2, stop_line, stop_len) < 0) {}
    _exit(1);
}
void grid_stop_on_signals(const char* who) {
    if (launch_rank() == 0)
        stop_len = (size_t)snprintf(stop_line, sizeof stop_line, "%s: stopped by SIGTERM or SIGUSR1 (a preemption, Ctrl-C "
                                    "through tools/preemptible): nothing more is written\n", who);
    signal(SIGTERM, on_stop);
    signal(SIGUSR1, on_stop);
}
