// balance.c — the context-parallel attention work and ring traffic of a run's windows (see balance.h).
#include "model/balance.h"
#include "attention/ring.h"
#include "attention/shard.h"
#include "data/meta.h"
#include "data/shards.h"
#include "model/model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void* zalloc(size_t n, size_t size) {
    void* p = calloc(n ? n : 1, size);
    if (!p) { fprintf(stderr, "plan: out of host memory (%zu x %zu bytes)\n", n, size); exit(1); }
    return p;
}

void balance_free(Balance* b) {
    free(b->work); free(b->sent); free(b->full); free(b->dead); free(b->step_rank0);
    memset(b, 0, sizeof *b);
}

// the run's training windows: the loader as build/train opens it (meta.json's vocab_size and eod unless data_meta = 0)
static int open_windows(Loader* ld, Config* c, Balance* b, char* err, size_t errlen) {
    DataMeta meta;
    memset(&meta, 0, sizeof meta);
    if (c->data_meta && data_meta_read(c->train_data, &meta, err, errlen)) return 1;
    if (meta.found) {
        if (meta.vocab_size > 0) c->vocab_size = meta.vocab_size;
        if (meta.eod_id >= 0) c->eod = meta.eod_id;
    }
    data_meta_free(&meta);
    if (loader_open(ld, c->train_data, c->seq_len, c->vocab_size, c->shuffle, (uint64_t)c->seed)) {
        snprintf(err, errlen, "plan: train_data: %s", ld->err);
        return 1;
    }
    int mode = pack_mode(c->pack);
    if (mode != PACK_STREAM && loader_pack(ld, mode, config_eod(c), c->pack_buffer, c->upsample_len, c->upsample_factor, 0)) {
        snprintf(err, errlen, "plan: train_data: %s", ld->err);
        loader_close(ld);
        return 1;
    }
    snprintf(b->data_note, sizeof b->data_note, "%s (%lld tokens, %lld windows of %d, pack %s, eod %d)", c->train_data,
             (long long)ld->n_tokens, (long long)ld->n_seq, c->seq_len, c->pack, config_eod(c));
    return 0;
}

int balance_run(Balance* b, const Config* c0, int dp, int windows, char* err, size_t errlen) {
    memset(b, 0, sizeof *b);
    Config c = *c0;
    Loader ld;
    if (open_windows(&ld, &c, b, err, errlen)) return 1;
    if (config_validate(&c, err, errlen)) { loader_close(&ld); return 1; }
    int T = c.seq_len, P = c.cp, U = config_a2a(&c), R = P / U, Tl = T / P, TlR = U * Tl;
    int layout = ring_layout_parse(c.cp_layout), docs = c.doc_mask, eod = docs ? config_eod(&c) : -1;
    int full_rc = recompute_mode(c.recompute) == RECOMPUTE_FULL;
    Model shape;   // this rank's K/V width on the ring (the model's own arithmetic)
    model_shape(&shape, &c, 1, T, c.tp, 0, P, 1, 0);   // (the ring carries fp32 K and V on either backend)
    double rowb = 2.0 * shape.kv_w * sizeof(float), hopb = rowb * TlR;   // one row of K and V; a whole block
    model_shape_free(&shape);
    if (windows <= 0 || windows > ld.n_seq) windows = (int)ld.n_seq;
    b->windows = windows; b->P = P; b->U = U; b->R = R;
    b->work = zalloc(P, sizeof(double)); b->sent = zalloc(P, sizeof(double));
    b->full = zalloc(P, sizeof(double)); b->dead = zalloc(P, sizeof(double));
    int per_replica = c.batch_size / (dp > 0 ? dp : 1);
    b->steps = windows / c.batch_size;
    b->step_rank0 = zalloc(b->steps, sizeof(double));
    CpShard sh;
    shard_init(&sh, shard_mode_parse(c.cp_shard), layout, P, T, config_shard_min(&c), eod);
    RingMap map;
    ringmap_init(&map, R, 1, TlR, (layout == CP_ZIGZAG ? 2 : 1) * U, P > 1 && sh.mode == SHARD_DOCUMENT);
    int32_t* win = zalloc((size_t)T + 1, sizeof(int32_t));
    int *pos = zalloc(T, sizeof(int)), *dall = zalloc(T, sizeof(int)), *rpos = zalloc(T, sizeof(int)), *rdoc = zalloc(T, sizeof(int));
    int *maxq = zalloc((size_t)R * (T + 1), sizeof(int)), *lastd = zalloc(T, sizeof(int));
    double *work = zalloc(P, sizeof(double)), *rs = zalloc(R, sizeof(double)), *rd = zalloc(R, sizeof(double));
    int fail = 0;
    for (int w = 0; w < windows && !fail; w++) {
        if (loader_get(&ld, w, win)) { snprintf(err, errlen, "plan: %s", ld.err); fail = 1; break; }
        shard_window(&sh, win, pos, work);
        b->split += sh.n_split; b->units += sh.n_units;
        if (docs) shard_doc_ids(win, T, eod, dall);
        for (int i = 0; i < T; i++) { rpos[i] = pos[i]; rdoc[i] = docs ? dall[pos[i]] : 0; }   // ring rank g: its group's rows
        ringmap_set(&map, rpos, docs ? rdoc : NULL, c.cp_prune);
        // work: a member of an all-to-all group computes 1/U of its group's heads over all of the group's tokens
        double mx = 0, sum = 0;
        for (int g = 0; g < R; g++) {
            double gw = 0;
            for (int u = 0; u < U; u++) gw += work[g * U + u];
            for (int u = 0; u < U; u++) {
                double x = gw / U;
                b->work[g * U + u] += x; sum += x;
                if (x > mx) mx = x;
            }
        }
        b->sum_max += mx; b->sum_mean += sum / P;
        if (sum > 0 && mx * P / sum > b->worst) b->worst = mx * P / sum;
        if (R < 2) continue;
        // how far each row is seen: the furthest ring distance at which a query of its document is at or after it
        for (int g = 0; g < R; g++) {
            int* mq = maxq + (size_t)g * (T + 1);
            for (int d = 0; d <= T; d++) mq[d] = -1;
            for (int i = 0; i < TlR; i++) { int d = rdoc[g * TlR + i]; if (rpos[g * TlR + i] > mq[d]) mq[d] = rpos[g * TlR + i]; }
        }
        for (int g = 0; g < R; g++)
            for (int i = 0; i < TlR; i++) {
                int d0 = rdoc[g * TlR + i], p = rpos[g * TlR + i], far = 0;
                for (int d = 1; d < R; d++) if (maxq[(size_t)((g + d) % R) * (T + 1) + d0] >= p) far = d;
                lastd[g * TlR + i] = far;
            }
        // what ring rank j sends: at step t the block in hand (from src = j - t; its first keep(src) rows) to distance
        // t + 1, forward (twice with recompute = full) and backward, and the dK/dV accumulator of src (every step, when it
        // travels)
        for (int j = 0; j < R; j++) {
            double sent = 0, dead = 0;
            for (int t = 0; t < R; t++) {
                int src = (j - t + R) % R, n = ringmap_keep(&map, 0, src);
                const int* ld_src = lastd + (size_t)src * TlR;
                if (n == 0) continue;
                if (t + 1 < R && ringmap_need(&map, 0, src, t + 1)) {
                    int blind = 0;
                    for (int i = 0; i < n; i++) blind += ld_src[i] < t + 1;
                    sent += (2 + full_rc) * n * rowb; dead += (2 + full_rc) * blind * rowb;
                }
                int alone = 0;
                for (int i = 0; i < n; i++) alone += ld_src[i] == 0;
                sent += n * rowb; dead += alone * rowb;
            }
            rs[j] = sent; rd[j] = dead;
        }
        for (int r = 0; r < P; r++) {
            b->sent[r] += rs[r / U]; b->dead[r] += rd[r / U];
            b->full[r] += ((R - 1) * (2.0 + full_rc) + R) * hopb;
        }
        for (int src = 0; src < R; src++)
            for (int d = 1; d < R; d++) {
                int later = 0;
                for (int e = d; e < R && !later; e++) later = ringmap_visible(&map, 0, src, (src + e) % R);
                b->kv_hops++; b->kv_blind += !later;
            }
        int s = w / c.batch_size;
        if (s < b->steps && w % c.batch_size < per_replica) b->step_rank0[s] += rs[0] * c.n_layer;
    }
    free(win); free(pos); free(dall); free(rpos); free(rdoc); free(maxq); free(lastd); free(work); free(rs); free(rd);
    ringmap_free(&map);
    shard_free(&sh);
    loader_close(&ld);
    if (fail) balance_free(b);
    return fail;
}
