// test_ckpt_ranges.c — which elements of a checkpoint dataset a rank reads and writes: h5_select_shard_range
// (checkpoint/h5util.c) against a brute-force count of the logical elements of a shard's row-major range, and the
// ZeRO ranges of every tensor (zero_units + adamw_owned: model/zero.c, optim/adamw.c) over a tp x (dp x cp) layout whose
// slice boundaries fall mid-row inside column-split tensors (o_proj, down_proj) at a non-zero TP column offset.
//   1. random shards (row, column and vocabulary splits, padded rows, 1-D tensors) and random ranges [a, b):
//      the selection holds exactly the elements (row0 + j / lc, col0 + j % lc), a <= j < b, below row R, and the
//      returned count is their number;
//   2. tp 2 x ZeRO over 4 (tp 2 x cp 2 x dp 2) with d_ff 64 and d_ff 18 (tests/test_mutants_gaps.sh: a slice boundary
//      at row 57, column 16 of o_proj's 32 columns at TP rank 1): the ranges of all 8 ranks select every element of
//      every logical tensor exactly once, for the parameters (whole shards) and for the moments (ZeRO-owned ranges);
//      at d_ff 18 ranges start mid-row, and end mid-row, in a column-split tensor at column offset > 0.
#include "checkpoint/h5util.h"
#include "model/config.h"
#include "model/params.h"
#include "optim/adamw.h"
#include "tests/testutil.h"
#include <stdlib.h>
#include <string.h>

static unsigned long long rng = 88172645463325252ULL;
static long rnd(long n) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (long)(rng % (unsigned long long)n); }

// the selected elements of a 2-D (or 1-D) dataspace as a mask [R * Cc]; -1 on an HDF5 error
static long selected(hid_t sp, long R, long Cc, unsigned char* mask) {
    memset(mask, 0, (size_t)R * Cc);
    int nd = H5Sget_simple_extent_ndims(sp);
    hssize_t nb = H5Sget_select_hyper_nblocks(sp);
    if (nb < 0) return H5Sget_select_npoints(sp) == 0 ? 0 : -1;
    hsize_t* bl = malloc((size_t)(nb ? nb : 1) * 2 * nd * sizeof(hsize_t));
    if (nb && H5Sget_select_hyper_blocklist(sp, 0, (hsize_t)nb, bl) < 0) { free(bl); return -1; }
    long n = 0;
    for (hssize_t k = 0; k < nb; k++) {
        hsize_t* s = bl + k * 2 * nd;   // start coords, then end coords (inclusive)
        long r0 = (long)s[0], r1 = (long)s[nd], c0 = nd == 2 ? (long)s[1] : 0, c1 = nd == 2 ? (long)s[3] : 0;
        for (long r = r0; r <= r1; r++)
            for (long c = c0; c <= c1; c++) { if (mask[r * Cc + c]++) n = -1000000; n++; }   // overlap: fail
    }
    free(bl);
    return n;
}

static void test_random_ranges(void) {
    int bad = 0, cases = 0, mid = 0;
    char first[256] = "";
    unsigned char *got = malloc(64 * 64), *want = malloc(64 * 64);
    for (int it = 0; it < 3000; it++) {
        int tp = 1 << rnd(3), rank = (int)rnd(tp), kind = (int)rnd(4);   // 0 rows, 1 cols, 2 vocab (padded), 3 1-D
        long lr = 1 + rnd(7), lc = 1 + rnd(7), R, Cc, row0 = 0, col0 = 0;
        if (kind == 0) { R = lr * tp; Cc = lc; row0 = lr * rank; }
        else if (kind == 1) { R = lr; Cc = lc * tp; col0 = lc * rank; }
        else if (kind == 2) { R = lr * tp - rnd(lr < tp ? lr : tp); Cc = lc; row0 = lr * rank; }   // padded rows
        else { lc = 1; R = lr; Cc = 1; }
        long long n = (long long)lr * lc, a = rnd(n + 1), b = a + rnd(n - a + 1);
        hsize_t dims[2] = { (hsize_t)R, (hsize_t)Cc };
        hid_t sp = H5Screate_simple(kind == 3 ? 1 : 2, dims, NULL);
        long long cnt = h5_select_shard_range(sp, R, Cc, row0, col0, lr, lc, a, b);
        long have = selected(sp, R, Cc, got);
        H5Sclose(sp);
        memset(want, 0, (size_t)R * Cc);
        long nw = 0;
        for (long long j = a; j < b; j++) {
            long r = row0 + (long)(j / lc), c = col0 + (long)(j % lc);
            if (r < R) { want[r * Cc + c] = 1; nw++; }
        }
        if (col0 > 0 && (a % lc || b % lc)) mid++;
        cases++;
        if (cnt != nw || have != nw || memcmp(got, want, (size_t)R * Cc)) {
            if (!bad++)
                snprintf(first, sizeof first, "R %ld C %ld shard rows %ld+%ld cols %ld+%ld range [%lld, %lld): returned %lld, "
                         "selected %ld, want %ld", R, Cc, row0, lr, col0, lc, a, b, cnt, have, nw);
        }
    }
    CHECK(bad == 0, "h5_select_shard_range selects exactly the range's logical elements: %d random shards and ranges "
          "(%d start or end mid-row at a column offset > 0), %d wrong%s%s", cases, mid, bad, bad ? ": first " : "", first);
    free(got); free(want);
}

static void test_zero_layout(int d_ff, int want_mid) {
    Config c; config_defaults(&c);
    c.vocab_size = 257; c.d_model = 64; c.n_layer = 2; c.n_head = 8; c.n_kv_head = 4; c.d_ff = d_ff;
    const int tp = 2, zg = 4;   // tp 2 x cp 2 x dp 2: the moments sharded over dp x cp = 4
    ParamTable full; params_build(&full, &c, 1, 0);
    unsigned char** cover[2];
    for (int kind = 0; kind < 2; kind++) {
        cover[kind] = calloc(full.n, sizeof(unsigned char*));
        for (int i = 0; i < full.n; i++) cover[kind][i] = calloc(full.p[i].numel, 1);
    }
    int mid_start = 0, mid_end = 0, errors = 0, ranges = 0;
    unsigned char* mask = malloc(257 * 64);
    for (int tr = 0; tr < tp; tr++) {
        ParamTable t; params_build(&t, &c, tp, tr);
        ZeroUnits z;
        zero_units(&z, &t, zg, 0);   // the arena in units, each padded to a multiple of 4
        for (int zr = 0; zr < zg; zr++) {
            AdamW o; memset(&o, 0, sizeof o);
            z.rank = zr; o.zu = &z;
            for (int i = 0; i < t.n; i++) {
                const ParamSpec* p = &t.p[i];
                for (int kind = 0; kind < 2; kind++) {   // 0: parameters (the whole shard, from ZeRO rank 0), 1: moments
                    long long a = 0, b = (long long)p->numel;
                    if (kind == 0 && zr) continue;
                    if (kind == 1) {
                        size_t lo, hi;
                        if (!adamw_owned(&o, p, &lo, &hi)) continue;
                        a = (long long)(lo - p->offset); b = (long long)(hi - p->offset);
                        if (p->split == SPLIT_COLS && p->col0 > 0 && a % p->lshape[1]) mid_start++;
                        if (p->split == SPLIT_COLS && p->col0 > 0 && b % p->lshape[1] && b / p->lshape[1] > a / p->lshape[1]) mid_end++;
                    }
                    if (p->split == SPLIT_REPLICATED && tr) continue;   // written by TP rank 0
                    hsize_t dims[2] = { (hsize_t)p->shape[0], (hsize_t)p->shape[1] };
                    hid_t sp = H5Screate_simple(p->ndim, dims, NULL);
                    long long n = h5_select_shard_range(sp, p->shape[0], p->shape[1], p->row0, p->col0, p->lshape[0],
                                                        p->lshape[1], a, b);
                    long have = selected(sp, p->shape[0], p->shape[1], mask);
                    H5Sclose(sp);
                    ranges++;
                    if (n != have) errors++;
                    for (long e = 0; e < p->shape[0] * p->shape[1]; e++) cover[kind][i][e] += mask[e];
                }
            }
        }
        params_free(&t);
        zero_units_free(&z);
    }
    for (int kind = 0; kind < 2; kind++) {
        int once = 1; char which[256] = "";
        for (int i = 0; i < full.n; i++)
            for (size_t e = 0; e < full.p[i].numel; e++)
                if (cover[kind][i][e] != 1 && once) {
                    once = 0;
                    snprintf(which, sizeof which, ": %.100s element (%zu, %zu) selected %d times", full.p[i].name,
                             e / full.p[i].shape[1], e % full.p[i].shape[1], cover[kind][i][e]);
                }
        CHECK(once && !errors, "tp 2 x ZeRO 4 (d_ff %d), %s: %d ranges select every logical element exactly once%s",
              d_ff, kind ? "moments (ZeRO-owned ranges)" : "parameters (whole shards)", ranges, which);
    }
    if (want_mid)
        CHECK(mid_start > 0 && mid_end > 0, "d_ff %d: %d ZeRO ranges start mid-row, %d end mid-row after their first row, "
              "in a column-split tensor at TP column offset > 0", d_ff, mid_start, mid_end);
    for (int kind = 0; kind < 2; kind++) { for (int i = 0; i < full.n; i++) free(cover[kind][i]); free(cover[kind]); }
    free(mask);
    params_free(&full);
}

int main(void) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    test_random_ranges();
    test_zero_layout(64, 0);
    test_zero_layout(18, 1);
    return tu_finish();
}
