// test_shard.c — attention/shard.c (which tokens of a window each cp rank holds) and the ring's decisions on them
// (attention/ring.h's RingMap), against brute force over the elements, on random windows of short and long documents,
// one long document beside many short ones, power-law lengths, padding tails and windows without an eod, at P = 2, 4,
// 8 in both layouts:
//   document sharding: every position exactly once, the same on a second call; a document of at least min_len tokens
//   in the layout's chunks (zigzag: chunks r and 2P - 1 - r on rank r, sizes differing by at most one); a rank's rows
//   of documents over several ranks first, each part in increasing position; the work per rank (visible pairs) equal
//   to a brute-force count; the zigzag work balanced within SHARD_BALANCE unless no whole document of 2P tokens is left
//   to split; window sharding = ring_positions;
//   the ring's map: every (query segment, key segment) decision equals the brute-force one (no visible pair: skip;
//   all visible: unmasked; else masked); the segments cover the rows, none longer than the layout's chunk; which
//   blocks travel how far (need) and which of their rows (keep) equal brute force: no row beyond keep(src) is visible
//   to another rank, the last key segment before it is; with the full schedule everything travels.
#include "attention/ring.h"
#include "attention/shard.h"
#include "tests/testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EOD 256
static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }

enum { MIX_SHORT, MIX_LONG_SHORT, MIX_POWER, MIX_PAD, MIX_NO_EOD, NMIX };
static const char* MIXNAME[] = { "short", "long+short", "power-law", "padding tail", "no eod" };

// a window of T input tokens (+ 1 target slot)
static void make_window(int mix, int T, int32_t* w) {
    int p = 0;
    if (mix == MIX_NO_EOD) { for (; p <= T; p++) w[p] = (int32_t)(rnd() % 200); return; }
    if (rnd() % 2) { int n = 1 + (int)(rnd() % 20); for (; p < n && p <= T; p++) w[p] = (int32_t)(rnd() % 200); }   // a tail
    while (p <= T) {
        int L;
        if (mix == MIX_SHORT) L = 1 + (int)(rnd() % 12);
        else if (mix == MIX_LONG_SHORT) L = p < 4 ? 3 * T / 4 : 2 + (int)(rnd() % 10);
        else if (mix == MIX_PAD && p > T / 2) { for (; p <= T; p++) w[p] = -2; break; }   // PACK_PAD
        else { double u = (double)(rnd() % 1000000 + 1) / 1000001.0; L = (int)(2 / pow(u, 1 / 1.1)); if (L > T) L = T; }
        w[p++] = EOD;
        for (int k = 1; k < L && p <= T; k++) w[p++] = (int32_t)(rnd() % 200);
    }
}

static int docstart(const int32_t* w, int p) { while (p > 0 && w[p] != EOD && w[p] >= 0) p--; return p; }

int main(void) {
    int Ps[3] = { 2, 4, 8 };
    long long windows = 0, units = 0, split = 0, pair_checks = 0;
    int ok_perm = 1, ok_det = 1, ok_chunks = 1, ok_order = 1, ok_work = 1, ok_bal = 1, ok_win = 1;
    int ok_cls = 1, ok_seg = 1, ok_need = 1, ok_keep = 1, ok_full = 1;
    double worst_imb = 0;
    char where[160] = "";
    for (int pi = 0; pi < 3; pi++)
        for (int layout = 0; layout < 2; layout++)
            for (int mix = 0; mix < NMIX; mix++)
                for (int rep = 0; rep < 6; rep++) {
                    int P = Ps[pi], K = layout == CP_ZIGZAG ? 2 * P : P, T = K * (3 + (int)(rnd() % 38)), Tl = T / P;
                    int min_len = rep % 2 ? T / P : K + (int)(rnd() % (T / 2));
                    int32_t* w = malloc((T + 1) * sizeof(int32_t));
                    int *pos = malloc(T * sizeof(int)), *pos2 = malloc(T * sizeof(int)), *own = malloc(T * sizeof(int));
                    int *doc = malloc(T * sizeof(int)), *rdoc = malloc(T * sizeof(int));
                    double *work = malloc(P * sizeof(double));
                    make_window(mix, T, w);
                    snprintf(where, sizeof where, "P=%d %s %s T=%d min_len=%d", P, layout ? "contiguous" : "zigzag", MIXNAME[mix], T, min_len);
                    CpShard s, s2;
                    shard_init(&s, SHARD_DOCUMENT, layout, P, T, min_len, EOD);
                    shard_window(&s, w, pos, work);
                    shard_init(&s2, SHARD_DOCUMENT, layout, P, T, min_len, EOD);
                    shard_window(&s2, w, pos2, NULL);
                    windows++; units += s.n_units; split += s.n_split;
                    if (memcmp(pos, pos2, T * sizeof(int))) { ok_det = 0; printf("  not deterministic: %s\n", where); }
                    for (int p = 0; p < T; p++) own[p] = -1;
                    for (int i = 0; i < T; i++) {
                        if (pos[i] < 0 || pos[i] >= T || own[pos[i]] >= 0) { ok_perm = 0; break; }
                        own[pos[i]] = i / Tl;
                    }
                    if (!ok_perm) { printf("  not a permutation: %s\n", where); break; }
                    shard_doc_ids(w, T, EOD, doc);
                    // documents: start, length, ranks holding them
                    double bw[8] = { 0 };
                    int whole_left = 0;
                    for (int p0 = 0; p0 < T;) {
                        int p1 = p0 + 1;
                        while (p1 < T && doc[p1] == doc[p0]) p1++;
                        int L = p1 - p0, nranks = 0, seen[8] = { 0 };
                        for (int p = p0; p < p1; p++) if (!seen[own[p]]++) nranks++;
                        if (nranks == 1 && L >= 2 * P) whole_left = 1;
                        if (L >= min_len && L >= K) {   // split into the layout's chunks: runs of ranks 0..P-1(..0)
                            int q = L / K, nr = 0, runr[64], runn[64];
                            for (int p = p0; p < p1; p++) {
                                if (nr && runr[nr - 1] == own[p]) runn[nr - 1]++;
                                else if (nr < 64) { runr[nr] = own[p]; runn[nr++] = 1; }
                                else nr = 65;
                            }
                            int want = layout == CP_ZIGZAG ? 2 * P - 1 : P;
                            if (nr != want) ok_chunks = 0;
                            for (int i = 0; i < nr && i < want && ok_chunks; i++) {
                                int r = i < P ? i : 2 * P - 2 - i, mid = layout == CP_ZIGZAG && i == P - 1;
                                int lo = mid ? 2 * q : q, hi = mid ? 2 * q + 2 : q + 1;
                                if (runr[i] != r || runn[i] < lo || runn[i] > hi) ok_chunks = 0;
                            }
                            if (!ok_chunks) { printf("  chunks of the document at %d (%d tokens): %s\n", p0, L, where); break; }
                        }
                        p0 = p1;
                    }
                    // rows: documents over several ranks first, each part increasing
                    for (int r = 0; r < P && ok_order; r++) {
                        int part = 1, last = -1;
                        for (int i = 0; i < Tl; i++) {
                            int p = pos[r * Tl + i], shared = 0;
                            for (int x = 0; x < T && !shared; x++) shared = doc[x] == doc[p] && own[x] != r;
                            if (shared > part) { ok_order = 0; break; }
                            if (shared < part) { part = 0; last = -1; }
                            if (p <= last) { ok_order = 0; break; }
                            last = p;
                        }
                        if (!ok_order) printf("  row order of rank %d: %s\n", r, where);
                    }
                    // work: visible pairs per rank
                    for (int r = 0; r < P; r++) {
                        double x = 0;
                        for (int i = 0; i < Tl; i++) { int p = pos[r * Tl + i]; x += p - docstart(w, p) + 1; }
                        if (x != work[r]) { ok_work = 0; printf("  work of rank %d %.0f, brute force %.0f: %s\n", r, work[r], x, where); }
                        bw[r] = x;
                    }
                    double mx = 0, sum = 0;
                    for (int r = 0; r < P; r++) { sum += bw[r]; if (bw[r] > mx) mx = bw[r]; }
                    double imb = mx * P / sum;
                    if (layout == CP_ZIGZAG && imb > SHARD_BALANCE && whole_left) {
                        ok_bal = 0;
                        printf("  imbalance %.3f with a whole document of 2P tokens left: %s\n", imb, where);
                    }
                    if (layout == CP_ZIGZAG && imb > worst_imb && !whole_left) worst_imb = imb;
                    // the ring's map on these rows (one sequence, ring = the cp ranks)
                    for (int i = 0; i < T; i++) rdoc[i] = doc[pos[i]];
                    for (int prune = 1; prune >= 0; prune--) {
                        RingMap m;
                        ringmap_init(&m, P, 1, Tl, layout == CP_ZIGZAG ? 2 : 1, 1);
                        ringmap_set(&m, pos, rdoc, prune);
                        for (int j = 0; j < P; j++) {
                            const int* s0 = ringmap_seg0(&m, j, 0);
                            int n = ringmap_nseg(&m, j, 0);
                            if (s0[0] != 0 || s0[n] != Tl) ok_seg = 0;
                            for (int a = 0; a < n; a++) if (s0[a + 1] <= s0[a] || s0[a + 1] - s0[a] > m.seg) ok_seg = 0;
                        }
                        for (int src = 0; src < P; src++) {
                            int vis_d[8] = { 0 }, rows = 0;   // any visible pair at distance d; rows seen by others
                            for (int dst = 0; dst < P; dst++) {
                                const int *qs0 = ringmap_seg0(&m, dst, 0), *ks0 = ringmap_seg0(&m, src, 0);
                                for (int a = 0; a < ringmap_nseg(&m, dst, 0); a++)
                                    for (int c = 0; c < ringmap_nseg(&m, src, 0); c++) {
                                        long long v = 0, all = 0;
                                        for (int i = qs0[a]; i < qs0[a + 1]; i++)
                                            for (int k = ks0[c]; k < ks0[c + 1]; k++) {
                                                int qi = dst * Tl + i, kj = src * Tl + k;
                                                v += pos[kj] <= pos[qi] && rdoc[kj] == rdoc[qi];
                                                all++;
                                            }
                                        int want = v == 0 ? RING_SKIP : v == all ? RING_NOMASK : RING_CAUSAL;
                                        pair_checks++;
                                        if (ringmap_classify(&m, 0, dst, a, src, c) != want) {
                                            if (ok_cls) printf("  pair (%d:%d, %d:%d) decided %d, brute force %d: %s\n", dst, a, src, c,
                                                               ringmap_classify(&m, 0, dst, a, src, c), want, where);
                                            ok_cls = 0;
                                        }
                                        if (v && dst != src) { vis_d[(dst - src + P) % P] = 1; if (ks0[c + 1] > rows) rows = ks0[c + 1]; }
                                    }
                            }
                            for (int d = 1; d < P; d++) {
                                int later = 0;
                                for (int e = d; e < P; e++) later |= vis_d[e];
                                if (ringmap_need(&m, 0, src, d) != (prune ? later : 1)) ok_need = 0;
                            }
                            int keep = ringmap_keep(&m, 0, src);
                            if (prune && keep != rows) { ok_keep = 0; printf("  keep(%d) = %d, brute force %d: %s\n", src, keep, rows, where); }
                            if (!prune && keep != Tl) ok_full = 0;
                            for (int k = keep; prune && k < Tl; k++)   // no row past keep is visible to another rank
                                for (int i = 0; i < T; i++)
                                    if (i / Tl != src && pos[src * Tl + k] <= pos[i] && rdoc[src * Tl + k] == rdoc[i]) ok_keep = 0;
                        }
                        ringmap_free(&m);
                    }
                    // window sharding: the layout's positions
                    CpShard sw;
                    shard_init(&sw, SHARD_WINDOW, layout, P, T, min_len, EOD);
                    shard_window(&sw, w, pos2, NULL);
                    for (int r = 0; r < P; r++) {
                        int* lp = malloc(Tl * sizeof(int));
                        ring_positions(layout, P, r, T, lp);
                        if (memcmp(lp, pos2 + r * Tl, Tl * sizeof(int))) ok_win = 0;
                        free(lp);
                    }
                    shard_free(&sw); shard_free(&s); shard_free(&s2);
                    free(w); free(pos); free(pos2); free(own); free(doc); free(rdoc); free(work);
                }
    printf("# %lld windows, %lld units of work, %lld split, %lld segment pairs checked\n", windows, units, split, pair_checks);
    CHECK(ok_perm, "document sharding: every position on exactly one rank, T / P on each");
    CHECK(ok_det, "document sharding: the same assignment when computed again");
    CHECK(ok_chunks, "a document of at least min_len tokens is in the layout's chunks (zigzag: r and 2P-1-r on rank r), "
          "chunk sizes floor(L / K) or one more");
    CHECK(ok_order, "a rank's rows: documents over several ranks first, then whole ones, each part increasing");
    CHECK(ok_work, "the work per rank equals the brute-force count of visible pairs");
    CHECK(ok_bal, "zigzag: the work's imbalance is within %.2f whenever a whole document of 2P tokens was left to split "
          "(worst otherwise: %.3f)", SHARD_BALANCE, worst_imb);
    CHECK(ok_win, "window sharding: the layout's positions (ring_positions)");
    CHECK(ok_seg, "the ring's segments (runs within a document) cover every row, none longer than the layout's chunk");
    CHECK(ok_cls, "every (query segment, key segment) decision equals brute force: skip / unmasked / masked");
    CHECK(ok_need, "the pruned schedule sends a block to distance d iff a rank at distance >= d sees one of its keys");
    CHECK(ok_keep, "the rows sent (keep) end at the last key segment another rank computes with; no later row is "
          "visible to another rank");
    CHECK(ok_full, "the full schedule (prune 0) sends every block whole to every distance");
    return tu_finish();
}
