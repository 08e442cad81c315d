// ring.c — the ring schedule over the attention block kernels (see ring.h).
#include "attention/ring.h"
#include "common/util.h"
#include <stdlib.h>
#include <string.h>

int ring_layout_parse(const char* s) {
    if (!strcmp(s, "zigzag")) return CP_ZIGZAG;
    if (!strcmp(s, "contiguous")) return CP_CONTIGUOUS;
    return -1;
}

void ring_positions(int layout, int P, int r, int T, int* pos) {
    if (layout == CP_CONTIGUOUS) {
        int n = T / P;
        for (int i = 0; i < n; i++) pos[i] = r * n + i;
        return;
    }
    int c = T / (2 * P);
    for (int i = 0; i < c; i++) { pos[i] = r * c + i; pos[c + i] = (2 * P - 1 - r) * c + i; }
}

// time of one un-overlapped ring hop of a K/V block (median of 5), for the hidden-fraction estimate. comm_wait may
// only order the backend's queue after the hop (a GPU transport enqueues a stream wait and returns): be_sync waits
// until the block has arrived before the clock is read.
static double calibrate(Ring* R) {
    if (R->P == 1) return 0;
    size_t n = (size_t)2 * R->Tl * R->Hk;
    double t[5];
    for (int i = 0; i < 5; i++) {
        be_sync();
        ctl_barrier(R->g);
        double t0 = now_s();
        comm_hop(R->g, R->kv[0], R->kv[1], n, R->rq);
        comm_wait(R->rq);
        be_sync();
        t[i] = now_s() - t0;
    }
    return ctl_max(R->g, median(t, 5));
}

void ring_init(Ring* R, const Group* g, int layout, int T, int B, int Hk, int nseg) {
    memset(R, 0, sizeof *R);
    R->g = g; R->P = group_size(g); R->r = group_rank(g); R->layout = layout;
    R->T = T; R->Tl = T / R->P; R->Hk = Hk;
    R->qrows = be_tuning()->ring_query_rows;
    R->rq = comm_req_create();
    R->nseg = nseg > 0 ? nseg : layout == CP_ZIGZAG ? 2 : 1;
    R->seg = R->Tl / R->nseg;
    size_t n = (size_t)2 * R->Tl * Hk;
    for (int i = 0; i < 2; i++) { R->kv[i] = be_alloc(n * sizeof(float)); R->dkv[i] = be_alloc(n * sizeof(float)); }
    R->B = B;
    R->pos_host = calloc((size_t)R->P * B * R->Tl, sizeof(int));
    R->pos_dev = be_alloc((size_t)R->P * B * R->Tl * sizeof(int));
    R->doc_host = calloc((size_t)R->P * B * R->Tl, sizeof(int));
    R->doc_dev = be_alloc((size_t)R->P * B * R->Tl * sizeof(int));
    attn_host_mirror(R->pos_dev, R->pos_host, (size_t)R->P * B * R->Tl);   // the backend plans blocks from these
    attn_host_mirror(R->doc_dev, R->doc_host, (size_t)R->P * B * R->Tl);
    R->xfer_s = calibrate(R);
    R->compute = be_timer_create(0);
    R->wait = be_timer_create(R->xfer_s);
}

void ring_free(Ring* R) {
    for (int i = 0; i < 2; i++) { be_free(R->kv[i]); be_free(R->dkv[i]); }
    attn_host_mirror(R->pos_dev, NULL, 0);
    attn_host_mirror(R->doc_dev, NULL, 0);
    free(R->pos_host); be_free(R->pos_dev);
    free(R->doc_host); be_free(R->doc_dev);
    be_timer_free(R->compute); be_timer_free(R->wait);
    comm_req_free(R->rq);
    memset(R, 0, sizeof *R);
}

size_t ring_buffer_bytes_for(int Tl, int Hk) { return (size_t)4 * 2 * Tl * Hk * sizeof(float); }
size_t ring_buffer_bytes(const Ring* R) { return ring_buffer_bytes_for(R->Tl, R->Hk); }

RingStats ring_stats(const Ring* R) {
    BeTimes c = be_timer_read(R->compute), w = be_timer_read(R->wait);
    return (RingStats){ .compute_s = c.wall_s, .work_s = c.work_s, .wait_s = w.wall_s, .xfer_s = R->xfer_s,
                        .exposed_s = w.clamped_s, .transfers = w.regions, .blocks = R->blocks,
                        .skipped = R->pairs[0], .unmasked = R->pairs[1], .masked = R->pairs[2] };
}

void ring_set_positions(Ring* R, const int* local_pos, const int* local_doc) {
    size_t n = (size_t)R->B * R->Tl;
    ctl_allgather(R->g, local_pos, R->pos_host, n * sizeof(int));
    be_upload(R->pos_dev, R->pos_host, (size_t)R->P * n * sizeof(int));
    R->docs = local_doc != NULL;
    if (!R->docs) return;
    ctl_allgather(R->g, local_doc, R->doc_host, n * sizeof(int));
    be_upload(R->doc_dev, R->doc_host, (size_t)R->P * n * sizeof(int));
}

// positions of rank j's tokens of sequence b
static size_t pos_at(const Ring* R, int j, int b) { return ((size_t)j * R->B + b) * R->Tl; }

// ---- what to compute for a (query segment, key segment) pair, from positions and document ids ----
enum { SKIP = 0, NOMASK = 1, CAUSAL = 2 };
static void min_max(const int* x, int n, int* mn, int* mx) {
    *mn = *mx = x[0];
    for (int i = 1; i < n; i++) { if (x[i] < *mn) *mn = x[i]; if (x[i] > *mx) *mx = x[i]; }
}
// qd, kd: document ids, or NULL (one document). A visible pair needs kpos <= qpos and the same document, so
// disjoint ranges of either rule out every pair; no pair is masked when every key is at or before every
// query and all of both segments is one document.
static int classify(const int* qp, const int* kp, const int* qd, const int* kd, int n) {
    int qmin, qmax, kmin, kmax;
    min_max(qp, n, &qmin, &qmax);
    min_max(kp, n, &kmin, &kmax);
    if (qmax < kmin) return SKIP;
    int one_doc = 1;
    if (qd) {
        int qdmin, qdmax, kdmin, kdmax;
        min_max(qd, n, &qdmin, &qdmax);
        min_max(kd, n, &kdmin, &kdmax);
        if (qdmax < kdmin || kdmax < qdmin) return SKIP;
        one_doc = qdmin == qdmax && kdmin == kdmax && qdmin == kdmin;
    }
    if (qmin >= kmax && one_doc) return NOMASK;
    return CAUSAL;
}

typedef struct {   // one block's worth of kernel arguments
    Ring* R; int b, nh, nkv, hd; float scale; int src;
    const float *q, *dout, *lse, *D;  // local query side
    float *out, *olse, *dq;
    const float *k, *v;               // the K/V block (from rank src)
    float *dk, *dv;                   // its gradient accumulators (backward)
    int polling;                      // a hop is in flight while computing: drive it between calls
} Work;

// All (query segment, key segment) pairs of the block; query rows in chunks with progress polls between.
static void compute_block(Work* w, int backward) {
    Ring* R = w->R;
    int Hq = w->nh * w->hd, Hk = w->nkv * w->hd;
    const int* qpos = R->pos_dev + pos_at(R, R->r, w->b);
    const int* kpos = R->pos_dev + pos_at(R, w->src, w->b);
    const int* qpos_h = R->pos_host + pos_at(R, R->r, w->b);
    const int* kpos_h = R->pos_host + pos_at(R, w->src, w->b);
    const int* qdoc = R->docs ? R->doc_dev + pos_at(R, R->r, w->b) : NULL;
    const int* kdoc = R->docs ? R->doc_dev + pos_at(R, w->src, w->b) : NULL;
    const int* qdoc_h = R->docs ? R->doc_host + pos_at(R, R->r, w->b) : NULL;
    const int* kdoc_h = R->docs ? R->doc_host + pos_at(R, w->src, w->b) : NULL;
    be_timer_begin(R->compute);
    for (int a = 0; a < R->nseg; a++)
        for (int b = 0; b < R->nseg; b++) {
            int q0 = a * R->seg, k0 = b * R->seg;
            int cls = classify(qpos_h + q0, kpos_h + k0, qdoc_h ? qdoc_h + q0 : NULL, kdoc_h ? kdoc_h + k0 : NULL, R->seg);
            R->pairs[cls]++;
            if (cls == SKIP) continue;
            int mask = cls == CAUSAL ? ATTN_MASK_CAUSAL : ATTN_MASK_NONE;
            // an unmasked pair is one document: the kernels need no document ids for it
            const int* qd = cls == CAUSAL && qdoc ? qdoc + q0 : NULL;
            const int* kd = cls == CAUSAL && kdoc ? kdoc + k0 : NULL;
            for (int i0 = q0; i0 < q0 + R->seg; i0 += R->qrows) {
                int n = q0 + R->seg - i0 < R->qrows ? q0 + R->seg - i0 : R->qrows;
                const int* qdi = qd ? qd + (i0 - q0) : NULL;
                if (!backward)
                    attn_block_forward(w->out + (size_t)i0 * Hq, w->olse + (size_t)i0 * w->nh,
                                       w->q + (size_t)i0 * Hq, qpos + i0, qdi, n,
                                       w->k + (size_t)k0 * Hk, w->v + (size_t)k0 * Hk, kpos + k0, kd, R->seg,
                                       w->nh, w->nkv, w->hd, w->scale, mask);
                else
                    attn_block_backward(w->dq + (size_t)i0 * Hq, w->dk + (size_t)k0 * Hk, w->dv + (size_t)k0 * Hk,
                                        w->dout + (size_t)i0 * Hq, w->q + (size_t)i0 * Hq,
                                        w->lse + (size_t)i0 * w->nh, w->D + (size_t)i0 * w->nh, qpos + i0, qdi, n,
                                        w->k + (size_t)k0 * Hk, w->v + (size_t)k0 * Hk, kpos + k0, kd, R->seg,
                                        w->nh, w->nkv, w->hd, w->scale, mask);
                R->blocks++;
                if (w->polling) comm_test(R->rq);
            }
        }
    be_timer_end(R->compute);
}

// wait for this step's hops (started: whether any was started — it may already have completed while
// compute_block polled, and still counts as a transfer). At most one un-overlapped hop of a wait is
// communication (the wait timer clamps at xfer_s); the rest is waiting for a slower peer.
static void wait_ring(Ring* R, int started) {
    if (!started) return;
    be_timer_begin(R->wait);
    comm_wait(R->rq);
    be_timer_end(R->wait);
}

void ring_attention_forward(Ring* R, int b, float* out, float* lse, const float* q, const float* k, const float* v,
                            int nh, int nkv, int hd, float scale) {
    int P = R->P, Tl = R->Tl, Hk = nkv * hd;
    size_t nkv_el = (size_t)Tl * Hk;
    attn_forward_begin(out, lse, Tl, nh, hd);
    be_copy(R->kv[0], k, nkv_el * sizeof(float));
    be_copy(R->kv[0] + nkv_el, v, nkv_el * sizeof(float));
    for (int t = 0; t < P; t++) {
        float* cur = R->kv[t % 2];
        int hop = t + 1 < P;
        if (hop) comm_hop(R->g, cur, R->kv[(t + 1) % 2], 2 * nkv_el, R->rq);   // next block travels meanwhile
        Work w = { .R = R, .b = b, .nh = nh, .nkv = nkv, .hd = hd, .scale = scale, .src = (R->r - t + P) % P,
                   .q = q, .out = out, .olse = lse, .k = cur, .v = cur + nkv_el, .polling = hop };
        compute_block(&w, 0);
        wait_ring(R, hop);
    }
}

void ring_attention_backward(Ring* R, int b, float* dq, float* dk, float* dv, const float* dout,
                             const float* q, const float* k, const float* v, const float* lse, const float* D,
                             int nh, int nkv, int hd, float scale) {
    int P = R->P, Tl = R->Tl, Hk = nkv * hd;
    size_t nkv_el = (size_t)Tl * Hk;
    be_zero(dq, (size_t)Tl * nh * hd * sizeof(float));
    be_copy(R->kv[0], k, nkv_el * sizeof(float));
    be_copy(R->kv[0] + nkv_el, v, nkv_el * sizeof(float));
    be_zero(R->dkv[0], 2 * nkv_el * sizeof(float));
    for (int t = 0; t < P; t++) {
        float *cur = R->kv[t % 2], *dcur = R->dkv[t % 2];
        Work w = { .R = R, .b = b, .nh = nh, .nkv = nkv, .hd = hd, .scale = scale, .src = (R->r - t + P) % P,
                   .q = q, .dout = dout, .lse = lse, .D = D, .dq = dq, .k = cur, .v = cur + nkv_el,
                   .dk = dcur, .dv = dcur + nkv_el, .polling = t + 1 < P };
        // the K/V block can travel on while its gradient is being computed
        if (t + 1 < P) comm_hop(R->g, cur, R->kv[(t + 1) % 2], 2 * nkv_el, R->rq);
        compute_block(&w, 1);
        // the accumulator moves on after this rank's contribution: P hops bring it home
        if (P > 1) comm_hop(R->g, dcur, R->dkv[(t + 1) % 2], 2 * nkv_el, R->rq);
        wait_ring(R, P > 1);
    }
    float* home = R->dkv[P > 1 ? P % 2 : 0];   // after P hops: this rank's own dK | dV
    be_copy(dk, home, nkv_el * sizeof(float));
    be_copy(dv, home + nkv_el, nkv_el * sizeof(float));
}
