// ring.c — the ring schedule over the attention block kernels (see ring.h).
#include "attention/ring.h"
#include "common/util.h"
#include <stdlib.h>
#include <stdio.h>
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
    ringmap_init(&R->map, R->P, B, R->Tl, R->nseg, 0);
    attn_host_mirror(R->pos_dev, R->pos_host, (size_t)R->P * B * R->Tl);   // the backend plans blocks from these
    attn_host_mirror(R->doc_dev, R->doc_host, (size_t)R->P * B * R->Tl);
    R->xfer_s = calibrate(R);
    R->compute = be_timer_create(0);
    R->wait = be_timer_create(R->xfer_s);
}

void ring_configure(Ring* R, int runs, int prune) { R->map.runs = runs; R->map.prune = prune; }

void ring_free(Ring* R) {
    for (int i = 0; i < 2; i++) { be_free(R->kv[i]); be_free(R->dkv[i]); }
    attn_host_mirror(R->pos_dev, NULL, 0);
    attn_host_mirror(R->doc_dev, NULL, 0);
    free(R->pos_host); be_free(R->pos_dev);
    free(R->doc_host); be_free(R->doc_dev);
    ringmap_free(&R->map);
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
                        .skipped = R->pairs[0], .unmasked = R->pairs[1], .masked = R->pairs[2],
                        .sends = R->sends, .pruned = R->pruned };
}

void ring_set_positions(Ring* R, const int* local_pos, const int* local_doc) {
    size_t n = (size_t)R->B * R->Tl;
    ctl_allgather(R->g, local_pos, R->pos_host, n * sizeof(int));
    be_upload(R->pos_dev, R->pos_host, (size_t)R->P * n * sizeof(int));
    R->docs = local_doc != NULL;
    if (R->docs) {
        ctl_allgather(R->g, local_doc, R->doc_host, n * sizeof(int));
        be_upload(R->doc_dev, R->doc_host, (size_t)R->P * n * sizeof(int));
    }
    ringmap_set(&R->map, R->pos_host, R->docs ? R->doc_host : NULL, R->map.prune);
}

// positions of rank j's tokens of sequence b
static size_t pos_at(const Ring* R, int j, int b) { return ((size_t)j * R->B + b) * R->Tl; }

// ---- the decisions: segments, spans, what to compute for a (query segment, key segment) pair, which hops to send ----
void ringmap_init(RingMap* m, int P, int B, int Tl, int nseg, int runs) {
    memset(m, 0, sizeof *m);
    m->P = P; m->B = B; m->Tl = Tl; m->nseg_fixed = nseg; m->seg = Tl / nseg; m->runs = runs;
    size_t n = (size_t)P * B;
    m->nseg = calloc(n, sizeof(int));
    m->seg0 = calloc(n * (Tl + 1), sizeof(int));
    m->span0 = calloc(n * (Tl + 1), sizeof(int));
    m->span = calloc(n * Tl, sizeof(RingSpan));
    m->vis = calloc((size_t)B * P * P, 1);
    m->need = calloc((size_t)B * P * P, 1);
    m->keep = calloc((size_t)B * P, sizeof(int));
    if (!m->nseg || !m->seg0 || !m->span0 || !m->span || !m->vis || !m->need || !m->keep) {
        fprintf(stderr, "ring: out of host memory for the decisions of %d ranks x %d sequences x %d tokens\n", P, B, Tl);
        exit(1);
    }
}

void ringmap_free(RingMap* m) {
    free(m->nseg); free(m->seg0); free(m->span0); free(m->span); free(m->vis); free(m->need); free(m->keep);
    memset(m, 0, sizeof *m);
}

// the segments of one rank's rows pos [Tl] (doc: their document ids, or NULL): boundaries into s0, their number
// returned. Runs mode: a run — rows of consecutive positions in one document — of at least min(RING_SHORT_RUN, seg)
// rows stands alone, cut into pieces of at most seg rows; shorter runs are merged with their neighbours up to seg rows.
static int make_segments(const RingMap* m, const int* pos, const int* doc, int* s0) {
    int Tl = m->Tl, seg = m->seg, n = 0;
    if (!m->runs) { for (int a = 0; a <= m->nseg_fixed; a++) s0[a] = a * seg; return m->nseg_fixed; }
    int longrun = RING_SHORT_RUN < seg ? RING_SHORT_RUN : seg;
    s0[0] = 0;
    for (int i = 0; i < Tl;) {   // s0[n] .. i: the open segment
        int j = i + 1;
        while (j < Tl && pos[j] == pos[j - 1] + 1 && (!doc || doc[j] == doc[j - 1])) j++;
        if (j - i >= longrun) {
            if (s0[n] < i) s0[++n] = i;
            for (int a = i; a < j; a += seg) s0[++n] = a + seg < j ? a + seg : j;
        } else if (j - s0[n] > seg) s0[++n] = i;
        i = j;
    }
    if (s0[n] < Tl) s0[++n] = Tl;
    return n;
}

static int by_doc(const void* a, const void* b) {
    int x = ((const RingSpan*)a)->doc, y = ((const RingSpan*)b)->doc;
    return (x > y) - (x < y);
}

void ringmap_set(RingMap* m, const int* pos, const int* doc, int prune) {
    int P = m->P, B = m->B, Tl = m->Tl;
    m->pos = pos; m->doc = doc; m->prune = prune;
    for (int j = 0; j < P; j++)
        for (int b = 0; b < B; b++) {
            size_t jb = (size_t)j * B + b, o = jb * Tl;
            const int *p = pos + o, *d = doc ? doc + o : NULL;
            int *s0 = m->seg0 + jb * (Tl + 1), *sp0 = m->span0 + jb * (Tl + 1);
            RingSpan* sp = m->span + o;
            int n = make_segments(m, p, d, s0), ns = 0;
            m->nseg[jb] = n;
            for (int a = 0; a < n; a++) {   // per segment, per document: the lowest and highest position, by document id
                sp0[a] = ns;
                int first = ns, sorted = 1;
                for (int i = s0[a]; i < s0[a + 1]; i++) {
                    int di = d ? d[i] : 0;
                    if (ns == first || sp[ns - 1].doc != di) {
                        if (ns > first && di < sp[ns - 1].doc) sorted = 0;
                        sp[ns++] = (RingSpan){ di, p[i], p[i] };
                    } else {
                        if (p[i] < sp[ns - 1].lo) sp[ns - 1].lo = p[i];
                        if (p[i] > sp[ns - 1].hi) sp[ns - 1].hi = p[i];
                    }
                }
                if (!sorted) {   // (rows of documents over several ranks, then whole ones: ids out of order) sort, merge
                    qsort(sp + first, ns - first, sizeof(RingSpan), by_doc);
                    int k = first;
                    for (int i = first + 1; i < ns; i++) {
                        if (sp[i].doc != sp[k].doc) { sp[++k] = sp[i]; continue; }
                        if (sp[i].lo < sp[k].lo) sp[k].lo = sp[i].lo;
                        if (sp[i].hi > sp[k].hi) sp[k].hi = sp[i].hi;
                    }
                    ns = k + 1;
                }
            }
            sp0[n] = ns;
        }
    for (int b = 0; b < B; b++)
        for (int src = 0; src < P; src++) {
            const int* ks0 = ringmap_seg0(m, src, b);
            int rows = 0;   // the rows of src's block any other rank computes with: up to its last key segment they see
            for (int dst = 0; dst < P; dst++) {
                int v = 0;
                for (int c = ringmap_nseg(m, src, b) - 1; !v && c >= 0; c--) {
                    for (int a = 0; !v && a < ringmap_nseg(m, dst, b); a++) v = ringmap_classify(m, b, dst, a, src, c) != RING_SKIP;
                    if (v && dst != src && ks0[c + 1] > rows) rows = ks0[c + 1];
                }
                m->vis[((size_t)b * P + src) * P + dst] = (unsigned char)v;
            }
            m->keep[(size_t)b * P + src] = P == 1 ? 0 : prune ? rows : Tl;
            unsigned char* nd = m->need + ((size_t)b * P + src) * P;
            int later = 0;   // some rank at this distance or further can see the block
            for (int d = P - 1; d >= 1; d--) {
                later |= ringmap_visible(m, b, src, (src + d) % P);
                nd[d] = (unsigned char)(prune ? later : 1);
            }
            nd[0] = 1;
        }
}

int ringmap_classify(const RingMap* m, int b, int dst, int qs, int src, int ks) {
    size_t qo = ((size_t)dst * m->B + b), ko = ((size_t)src * m->B + b);
    const int *qsp = m->span0 + qo * (m->Tl + 1), *ksp = m->span0 + ko * (m->Tl + 1);
    const RingSpan *Q = m->span + qo * m->Tl + qsp[qs], *K = m->span + ko * m->Tl + ksp[ks];
    int nq = qsp[qs + 1] - qsp[qs], nk = ksp[ks + 1] - ksp[ks];
    int qmin = Q[0].lo, qmax = Q[0].hi, kmin = K[0].lo, kmax = K[0].hi;
    for (int i = 1; i < nq; i++) { if (Q[i].lo < qmin) qmin = Q[i].lo; if (Q[i].hi > qmax) qmax = Q[i].hi; }
    for (int i = 1; i < nk; i++) { if (K[i].lo < kmin) kmin = K[i].lo; if (K[i].hi > kmax) kmax = K[i].hi; }
    if (qmax < kmin) return RING_SKIP;
    int one_doc = 1;
    if (m->doc) {   // a document of both with a key at or before a query (spans by increasing id)
        int vis = 0;
        for (int i = 0, j = 0; i < nq && j < nk && !vis;) {
            if (Q[i].doc < K[j].doc) i++;
            else if (Q[i].doc > K[j].doc) j++;
            else { vis = Q[i].hi >= K[j].lo; i++; j++; }
        }
        if (!vis) return RING_SKIP;
        one_doc = nq == 1 && nk == 1 && Q[0].doc == K[0].doc;
    }
    return qmin >= kmax && one_doc ? RING_NOMASK : RING_CAUSAL;
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
    const RingMap* m = &R->map;
    int Hq = w->nh * w->hd, Hk = w->nkv * w->hd;
    const int* qpos = R->pos_dev + pos_at(R, R->r, w->b);
    const int* kpos = R->pos_dev + pos_at(R, w->src, w->b);
    const int* qdoc = R->docs ? R->doc_dev + pos_at(R, R->r, w->b) : NULL;
    const int* kdoc = R->docs ? R->doc_dev + pos_at(R, w->src, w->b) : NULL;
    const int *qs0 = ringmap_seg0(m, R->r, w->b), *ks0 = ringmap_seg0(m, w->src, w->b);
    int nq = ringmap_nseg(m, R->r, w->b), nk = ringmap_nseg(m, w->src, w->b);
    be_timer_begin(R->compute);
    for (int a = 0; a < nq; a++)
        for (int c = 0; c < nk; c++) {
            int q0 = qs0[a], q1 = qs0[a + 1], k0 = ks0[c], kn = ks0[c + 1] - k0;
            int cls = ringmap_classify(m, w->b, R->r, a, w->src, c);
            R->pairs[cls]++;
            if (cls == RING_SKIP) continue;
            int mask = cls == RING_CAUSAL ? ATTN_MASK_CAUSAL : ATTN_MASK_NONE;
            // an unmasked pair is one document: the kernels need no document ids for it
            const int* qd = cls == RING_CAUSAL && qdoc ? qdoc + q0 : NULL;
            const int* kd = cls == RING_CAUSAL && kdoc ? kdoc + k0 : NULL;
            for (int i0 = q0; i0 < q1; i0 += R->qrows) {
                int n = q1 - i0 < R->qrows ? q1 - i0 : R->qrows;
                const int* qdi = qd ? qd + (i0 - q0) : NULL;
                if (!backward)
                    attn_block_forward(w->out + (size_t)i0 * Hq, w->olse + (size_t)i0 * w->nh,
                                       w->q + (size_t)i0 * Hq, qpos + i0, qdi, n,
                                       w->k + (size_t)k0 * Hk, w->v + (size_t)k0 * Hk, kpos + k0, kd, kn,
                                       w->nh, w->nkv, w->hd, w->scale, mask);
                else
                    attn_block_backward(w->dq + (size_t)i0 * Hq, w->dk + (size_t)k0 * Hk, w->dv + (size_t)k0 * Hk,
                                        w->dout + (size_t)i0 * Hq, w->q + (size_t)i0 * Hq,
                                        w->lse + (size_t)i0 * w->nh, w->D + (size_t)i0 * w->nh, qpos + i0, qdi, n,
                                        w->k + (size_t)k0 * Hk, w->v + (size_t)k0 * Hk, kpos + k0, kd, kn,
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

// One hop of step t: the block in hand (from src = r - t; keep(src) rows of K then of V, packed) on to the next rank
// when the schedule sends it that far, and the previous rank's (from src - 1) into recv when it comes here; the
// dK/dV accumulators (accumulator = 1) travel whenever their block left its rank. 1 when anything moves. A block
// that does not come here is one no query of this rank can see (every pair skipped: its buffer is never read).
static int hop(Ring* R, int b, int t, float* send, float* recv, int Hk, int accumulator) {
    int P = R->P, src = (R->r - t + P) % P, prev = (src - 1 + P) % P, d = accumulator ? 1 : t + 1;
    int snd = ringmap_need(&R->map, b, src, d) && ringmap_keep(&R->map, b, src) > 0;
    int rcv = ringmap_need(&R->map, b, prev, d) && ringmap_keep(&R->map, b, prev) > 0;
    if (snd) R->sends++; else R->pruned++;
    if (!snd && !rcv) return 0;
    comm_hop_sized(R->g, send, snd ? (size_t)2 * ringmap_keep(&R->map, b, src) * Hk : 0,
                   recv, rcv ? (size_t)2 * ringmap_keep(&R->map, b, prev) * Hk : 0, R->rq);
    return 1;
}

// rows [0, n) of k and v packed into dst [2, n, Hk] (n = Tl: the whole block)
static void pack_rows(float* dst, const float* k, const float* v, int n, int Hk) {
    if (dst != k) be_copy(dst, k, (size_t)n * Hk * sizeof(float));
    be_copy(dst + (size_t)n * Hk, v, (size_t)n * Hk * sizeof(float));
}

// The block of step t: this rank's own (t = 0: its k, v as given) or the one received (packed, keep(src) rows).
static void block_at(Ring* R, int b, int t, const float* k, const float* v, int Hk, const float** kk, const float** vv) {
    int src = (R->r - t + R->P) % R->P, n = ringmap_keep(&R->map, b, src);
    const float* cur = R->kv[t % 2];
    if (t == 0) { *kk = k; *vv = v; }
    else { *kk = cur; *vv = cur + (size_t)n * Hk; }
}

void ring_attention_forward(Ring* R, int b, float* out, float* lse, const float* q, const float* k, const float* v,
                            int nh, int nkv, int hd, float scale) {
    int P = R->P, Hk = nkv * hd, own = ringmap_keep(&R->map, b, R->r);
    attn_forward_begin(out, lse, R->Tl, nh, hd);
    if (own > 0) pack_rows(R->kv[0], k, v, own, Hk);   // what leaves this rank: the rows others see
    for (int t = 0; t < P; t++) {
        int moving = t + 1 < P && hop(R, b, t, R->kv[t % 2], R->kv[(t + 1) % 2], Hk, 0);   // next block travels meanwhile
        Work w = { .R = R, .b = b, .nh = nh, .nkv = nkv, .hd = hd, .scale = scale, .src = (R->r - t + P) % P,
                   .q = q, .out = out, .olse = lse, .polling = moving };
        block_at(R, b, t, k, v, Hk, &w.k, &w.v);
        compute_block(&w, 0);
        wait_ring(R, moving);
    }
}

void ring_attention_backward(Ring* R, int b, float* dq, float* dk, float* dv, const float* dout,
                             const float* q, const float* k, const float* v, const float* lse, const float* D,
                             int nh, int nkv, int hd, float scale) {
    int P = R->P, Tl = R->Tl, Hk = nkv * hd, own = ringmap_keep(&R->map, b, R->r);
    size_t nkv_el = (size_t)Tl * Hk;
    be_zero(dq, (size_t)Tl * nh * hd * sizeof(float));
    if (own > 0) pack_rows(R->kv[0], k, v, own, Hk);
    be_zero(R->dkv[0], 2 * nkv_el * sizeof(float));
    for (int t = 0; t < P; t++) {
        float *dcur = R->dkv[t % 2];
        int src = (R->r - t + P) % P, n = ringmap_keep(&R->map, b, src);
        // the K/V block can travel on while its gradient is being computed
        int moving = t + 1 < P && hop(R, b, t, R->kv[t % 2], R->kv[(t + 1) % 2], Hk, 0);
        Work w = { .R = R, .b = b, .nh = nh, .nkv = nkv, .hd = hd, .scale = scale, .src = src,
                   .q = q, .dout = dout, .lse = lse, .D = D, .dq = dq, .dk = dcur, .dv = dcur + (t ? (size_t)n * Hk : nkv_el),
                   .polling = moving };
        block_at(R, b, t, k, v, Hk, &w.k, &w.v);
        compute_block(&w, 1);
        if (t == 0) {   // this rank's own dK, dV: complete but for the rows others see, which travel (packed) round the ring
            be_copy(dk, dcur, nkv_el * sizeof(float));
            be_copy(dv, dcur + nkv_el, nkv_el * sizeof(float));
            if (own > 0 && own < Tl) pack_rows(dcur, dcur, dv, own, Hk);
        }
        // the accumulator moves on after this rank's contribution: P hops bring it home
        if (P > 1) moving |= hop(R, b, t, dcur, R->dkv[(t + 1) % 2], Hk, 1);
        wait_ring(R, moving);
    }
    if (P == 1 || own == 0) return;
    const float* home = R->dkv[P % 2];   // after P hops: this rank's own rows [0, own) of dK | dV, packed
    be_copy(dk, home, (size_t)own * Hk * sizeof(float));
    be_copy(dv, home + (size_t)own * Hk, (size_t)own * Hk * sizeof(float));
}
