// verify.c — ring attention versus one-process attention on the same inputs (see verify.h).
#include "train/verify.h"
#include "model/backend.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// copy columns [c0, c0 + w) of a backend [n, ld] matrix into host [n, w]
static void take_cols(float* dst, const float* src, int n, int ld, int c0, int w) {
    float* row = malloc((size_t)ld * sizeof(float));
    for (int i = 0; i < n; i++) {
        be_download(row, src + (size_t)i * ld, (size_t)ld * sizeof(float));
        memcpy(dst + (size_t)i * w, row + c0, (size_t)w * sizeof(float));
    }
    free(row);
}

// scatter rank-ordered gathered rows [P, Tl, w] into sequence order [T, w] by the gathered positions
static void to_sequence(float* seq, const float* gathered, const int* pos, int n, int w) {
    for (int i = 0; i < n; i++) memcpy(seq + (size_t)pos[i] * w, gathered + (size_t)i * w, (size_t)w * sizeof(float));
}

static void diff(const float* a, const float* ref, size_t n, double* max_abs, double* max_ref) {
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= *max_abs)) *max_abs = d;
        if (fabs(ref[i]) > *max_ref) *max_ref = fabs(ref[i]);
    }
}

VerifyResult verify_ring_attention(Model* m, const Grid* g, int step) {
    VerifyResult res = { .checked = 1 };
    Ring* R = m->ring;
    int Tl = m->T, P = R->P, T = Tl * P, hd = m->hd;
    int group = m->nh / m->nkv, nq = group < 4 ? group : 4;   // query heads of KV head 0
    int wq = nq * hd, wk = hd, Hq = m->nh * hd, Hk = m->nkv * hd;
    LayerActs* a = &m->acts[0];
    // this rank's slices (host), then in backend memory for the ring
    float *q = malloc((size_t)Tl * wq * 4), *k = malloc((size_t)Tl * wk * 4), *v = malloc((size_t)Tl * wk * 4);
    float* dout = malloc((size_t)Tl * wq * 4);
    int* pos = malloc((size_t)Tl * sizeof(int));
    take_cols(q, a->q, Tl, Hq, 0, wq); take_cols(k, a->k, Tl, Hk, 0, wk); take_cols(v, a->v, Tl, Hk, 0, wk);
    be_download(pos, m->pos, (size_t)Tl * sizeof(int));
    for (int i = 0; i < Tl; i++)
        for (int j = 0; j < wq; j++)
            dout[(size_t)i * wq + j] = (float)params_normal((uint64_t)step, "verify_attention", (uint64_t)pos[i] * wq + j);
    size_t nq_el = (size_t)Tl * wq, nk_el = (size_t)Tl * wk;
    float* dev = be_alloc((2 * nq_el + 2 * nk_el + 2 * nq_el + (size_t)Tl * nq + (size_t)Tl * nq + 2 * nk_el) * 4);
    float *dq_ = dev, *dout_ = dq_ + nq_el, *k_ = dout_ + nq_el, *v_ = k_ + nk_el, *out_ = v_ + nk_el,
          *q_ = out_ + nq_el, *lse_ = q_ + nq_el, *D_ = lse_ + (size_t)Tl * nq, *dk_ = D_ + (size_t)Tl * nq,
          *dv_ = dk_ + nk_el;
    be_upload(q_, q, nq_el * 4); be_upload(k_, k, nk_el * 4); be_upload(v_, v, nk_el * 4); be_upload(dout_, dout, nq_el * 4);
    float scale = 1.0f / sqrtf((float)hd);
    ring_attention_forward(R, 0, out_, lse_, q_, k_, v_, nq, 1, hd, scale);
    attn_backward_begin(D_, dout_, out_, Tl, nq, hd);
    ring_attention_backward(R, 0, dq_, dk_, dv_, dout_, q_, k_, v_, lse_, D_, nq, 1, hd, scale);
    // everything to the ring's first rank: inputs q k v dout, results out dq dk dv, and positions
    size_t row = (size_t)2 * wq + 2 * wk + wq + wq + 2 * wk;   // q dout k v | out dq dk dv per token
    float* mine = malloc((size_t)Tl * row * 4);
    float* host_res = malloc((nq_el * 2 + nk_el * 2) * 4);
    be_download(host_res, out_, nq_el * 4); be_download(host_res + nq_el, dq_, nq_el * 4);
    be_download(host_res + 2 * nq_el, dk_, nk_el * 4); be_download(host_res + 2 * nq_el + nk_el, dv_, nk_el * 4);
    for (int i = 0; i < Tl; i++) {
        float* r = mine + (size_t)i * row;
        memcpy(r, q + (size_t)i * wq, wq * 4); r += wq;
        memcpy(r, dout + (size_t)i * wq, wq * 4); r += wq;
        memcpy(r, k + (size_t)i * wk, wk * 4); r += wk;
        memcpy(r, v + (size_t)i * wk, wk * 4); r += wk;
        memcpy(r, host_res + (size_t)i * wq, wq * 4); r += wq;
        memcpy(r, host_res + nq_el + (size_t)i * wq, wq * 4); r += wq;
        memcpy(r, host_res + 2 * nq_el + (size_t)i * wk, wk * 4); r += wk;
        memcpy(r, host_res + 2 * nq_el + nk_el + (size_t)i * wk, wk * 4);
    }
    float* all = R->r == 0 ? malloc((size_t)T * row * 4) : NULL;
    int* allpos = R->r == 0 ? malloc((size_t)T * sizeof(int)) : NULL;
    comm_gather(R->g, mine, all, (size_t)Tl * row * 4, 0);
    comm_gather(R->g, pos, allpos, (size_t)Tl * sizeof(int), 0);
    double stats[2] = {0, 0};
    if (R->r == 0) {
        float* seq = malloc((size_t)T * row * 4);
        to_sequence(seq, all, allpos, T, (int)row);
        // unpack columns into contiguous sequence-ordered arrays
        size_t off[8] = {0, wq, 2 * wq, 2 * wq + wk, 2 * wq + 2 * wk, 3 * wq + 2 * wk, 4 * wq + 2 * wk, 4 * wq + 3 * wk};
        int wid[8] = {wq, wq, wk, wk, wq, wq, wk, wk};
        float* col[8];
        for (int c = 0; c < 8; c++) {
            col[c] = malloc((size_t)T * wid[c] * 4);
            for (int i = 0; i < T; i++) memcpy(col[c] + (size_t)i * wid[c], seq + (size_t)i * row + off[c], wid[c] * 4);
        }
        int* spos = malloc((size_t)T * sizeof(int));
        for (int i = 0; i < T; i++) spos[i] = i;
        size_t N1 = (size_t)T * wq, N2 = (size_t)T * wk;
        float* rdev = be_alloc((N1 * 2 + N2 * 2 + N1 * 2 + (size_t)T * nq * 2 + N2 * 2) * 4 + (size_t)T * sizeof(int));
        float *rq = rdev, *rdo = rq + N1, *rk = rdo + N1, *rv = rk + N2, *ro = rv + N2, *rdq = ro + N1,
              *rl = rdq + N1, *rD = rl + (size_t)T * nq, *rdk = rD + (size_t)T * nq, *rdv = rdk + N2;
        int* rp = (int*)(rdv + N2);
        be_upload(rq, col[0], N1 * 4); be_upload(rdo, col[1], N1 * 4); be_upload(rk, col[2], N2 * 4);
        be_upload(rv, col[3], N2 * 4); be_upload(rp, spos, (size_t)T * sizeof(int));
        attn_forward_begin(ro, rl, T, nq, hd);
        attn_block_forward(ro, rl, rq, rp, T, rk, rv, rp, T, nq, 1, hd, scale, ATTN_MASK_CAUSAL);
        attn_backward_begin(rD, rdo, ro, T, nq, hd);
        attn_block_backward(rdq, rdk, rdv, rdo, rq, rl, rD, rp, T, rk, rv, rp, T, nq, 1, hd, scale, ATTN_MASK_CAUSAL);
        float* ref = malloc(N1 * 4);
        double mabs = 0, mref = 0, worst_rel = 0;
        const float* refs[4] = { ro, rdq, rdk, rdv };
        size_t ns[4] = { N1, N1, N2, N2 };
        for (int c = 0; c < 4; c++) {
            double ma = 0, mr = 0;
            be_download(ref, refs[c], ns[c] * 4);
            diff(col[4 + c], ref, ns[c], &ma, &mr);
            if (ma > mabs) mabs = ma;
            if (mr > mref) mref = mr;
            double rel = ma / (mr + 1e-30);
            if (!(rel <= worst_rel)) worst_rel = rel;
        }
        stats[0] = mabs; stats[1] = worst_rel;
        free(ref); be_free(rdev); free(spos); free(seq);
        for (int c = 0; c < 8; c++) free(col[c]);
    }
    comm_broadcast(R->g, stats, sizeof stats, 0);
    // every ring (each TP index and replica checks its own) reports; the worst is logged
    res.max_abs = comm_max_double(&g->world_g, stats[0]);
    res.max_rel = comm_max_double(&g->world_g, stats[1]);
    if (g->rank == 0) {
        printf("verify_attention step %d: ring vs one process (layer 0, %d heads, %d tokens, worst of %d ring%s): "
               "max abs diff %.3e, max rel diff %.3e (out, dq, dk, dv)\n", step, nq, T, g->world / P,
               g->world / P > 1 ? "s" : "", res.max_abs, res.max_rel);
        if (!(res.max_rel <= 1e-4))
            printf("WARNING: ring attention differs from one-process attention by %.3e relative at step %d; "
                   "stop and investigate before a long run\n", res.max_rel, step);
        fflush(stdout);
    }
    be_free(dev); free(q); free(k); free(v); free(dout); free(pos); free(mine); free(host_res);
    free(all); free(allpos);
    return res;
}
