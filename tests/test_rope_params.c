// test_rope_params.c — YaRN/linear RoPE frequencies against the formula's worked case, YaRN at long original
// contexts (the ramp's upper end between d/2 and d - 1, or clamped at d - 1) against Hugging Face's formula, the
// cos/sin table, and the parameter table: HF names/shapes, layout-independent init (TP shards equal slices of the
// whole).
#include "model/config.h"
#include "model/params.h"
#include "model/rope.h"
#include "tests/testutil.h"
#include <stdlib.h>
#include <string.h>

static void test_yarn_worked_case(void) {
    Config c; config_defaults(&c);
    strcpy(c.rope_scaling, "yarn");
    c.rope_theta = 10000; c.rope_factor = 4; c.rope_original_max_seq_len = 4096;
    double inv[32], low = -1, high = -1;
    double a = rope_inv_freq(&c, 64, inv, &low, &high);
    CHECK(low == 10 && high == 23, "yarn d64 b1e4 s4 L4096: correction range low %g high %g (want 10, 23)", low, high);
    int ok_lo = 1, ok_hi = 1, ok_mid = 1;
    for (int i = 0; i < 32; i++) {
        double th = pow(10000.0, -2.0 * i / 64);
        if (i <= 10 && fabs(inv[i] - th) > 1e-15 * th) ok_lo = 0;
        if (i >= 23 && fabs(inv[i] - th / 4) > 1e-15 * th) ok_hi = 0;
        if (i > 10 && i < 23) {   // linear ramp between the two
            double r = (i - 10) / 13.0, want = th / 4 * r + th * (1 - r);
            if (fabs(inv[i] - want) > 1e-12 * th || !(inv[i] < th && inv[i] > th / 4)) ok_mid = 0;
        }
    }
    CHECK(ok_lo, "yarn: indices 0-10 keep theta_i");
    CHECK(ok_hi, "yarn: indices 23-31 are theta_i / 4");
    CHECK(ok_mid, "yarn: indices 11-22 follow the linear ramp strictly between");
    CHECK(fabs(a - 1.1386) < 5e-5 && fabs(a - (0.1 * log(4.0) + 1)) < 1e-15, "yarn attention factor %.6f (1.1386)", a);

    c.rope_factor = 1;   // s = 1: no scaling at all, factor 1
    a = rope_inv_freq(&c, 64, inv, &low, &high);
    CHECK(a == 1.0 && fabs(inv[31] - pow(1e4, -62.0 / 64)) < 1e-18, "yarn s=1 is plain RoPE with factor 1");
}

// YaRN at long original contexts, against Hugging Face's formula written out here independently
// (_compute_yarn_parameters: find_correction_range clamps [floor(corr(32)), ceil(corr(1))] to [0, dim - 1], the
// ramp runs over dim/2 frequencies). Cases whose upper end lies between d/2 and d - 1 (or is clamped at d - 1) are
// the ones a clamp at d/2 - 1 would get wrong; the others are controls.
static double hf_corr_dim(double rot, int dim, double base, double L) {
    return dim * log(L / (rot * 2 * M_PI)) / (2 * log(base));
}
static void test_yarn_long_original(void) {
    static const struct { int hd; double base, L, s; int low, high; } cs[] = {
        { 64, 1e4, 65536, 4, 20, 33 },      // the case: high 33 > d/2 - 1 = 31
        { 64, 1e4, 131072, 8, 22, 35 },
        { 96, 1e4, 65536, 2, 30, 49 },
        { 128, 1e4, 65536, 16, 40, 65 },
        { 32, 100, 8192, 4, 12, 25 },
        { 16, 10, 1024, 4, 5, 15 },         // ceil(corr(1)) = 18, clamped at d - 1 = 15
        { 64, 1e4, 32768, 4, 17, 30 },      // controls: high below d/2
        { 128, 5e5, 131072, 8, 31, 49 },
        { 64, 1e4, 4096, 4, 10, 23 },
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        Config c; config_defaults(&c);
        strcpy(c.rope_scaling, "yarn");
        c.rope_theta = cs[k].base; c.rope_factor = cs[k].s; c.rope_original_max_seq_len = (int)cs[k].L;
        int d = cs[k].hd;
        double inv[64], low = -1, high = -1;
        double a = rope_inv_freq(&c, d, inv, &low, &high);
        // Hugging Face
        double lo = floor(hf_corr_dim(32, d, cs[k].base, cs[k].L)), hi = ceil(hf_corr_dim(1, d, cs[k].base, cs[k].L));
        lo = lo < 0 ? 0 : lo; hi = hi > d - 1 ? d - 1 : hi;
        if (lo == hi) hi += 0.001;
        double worst = 0;
        for (int i = 0; i < d / 2; i++) {
            double extrap = 1.0 / pow(cs[k].base, 2.0 * i / d), interp = extrap / cs[k].s;
            double ramp = fmin(fmax((i - lo) / (hi - lo), 0.0), 1.0), e = 1.0 - ramp;
            double want = interp * (1 - e) + extrap * e;
            worst = fmax(worst, fabs(inv[i] - want) / want);
        }
        CHECK(lo == cs[k].low && hi == cs[k].high && low == lo && high == hi,
              "yarn d%d base %g L %g: correction range low %g high %g (HF %g %g, by hand %d %d)", d, cs[k].base, cs[k].L,
              low, high, lo, hi, cs[k].low, cs[k].high);
        CHECK(worst < 1e-13, "yarn d%d base %g L %g s %g: every inv_freq equals HF's (max rel err %.1e)", d, cs[k].base,
              cs[k].L, cs[k].s, worst);
        CHECK(fabs(a - (0.1 * log(cs[k].s) + 1)) < 1e-15, "yarn d%d s %g: attention factor %.6f", d, cs[k].s, a);
    }
    // the case by hand: i = 31 (the last frequency) is only 11/13 of the way down the ramp, not divided by s
    Config c; config_defaults(&c);
    strcpy(c.rope_scaling, "yarn"); c.rope_theta = 1e4; c.rope_factor = 4; c.rope_original_max_seq_len = 65536;
    double inv[32];
    rope_inv_freq(&c, 64, inv, NULL, NULL);
    double th = pow(1e4, -62.0 / 64), r = 11.0 / 13.0;
    CHECK(fabs(inv[31] - (th / 4 * r + th * (1 - r))) < 1e-15 * th && fabs(inv[20] - pow(1e4, -40.0 / 64)) < 1e-15,
          "yarn d64 L65536: i 20 keeps theta_i, i 31 = theta/4 * 11/13 + theta * 2/13 (%.6e)", inv[31]);
}

static void test_linear_and_table(void) {
    Config c; config_defaults(&c);
    strcpy(c.rope_scaling, "linear"); c.rope_factor = 2; c.rope_theta = 500000;
    double inv[8];
    double a = rope_inv_freq(&c, 16, inv, NULL, NULL);
    int ok = a == 1.0;
    for (int i = 0; i < 8; i++) ok &= fabs(inv[i] - pow(500000.0, -2.0 * i / 16) / 2) < 1e-15;
    CHECK(ok, "linear scaling divides every frequency by the factor");

    strcpy(c.rope_scaling, "yarn"); c.rope_factor = 8; c.rope_original_max_seq_len = 64; c.rope_theta = 10000;
    float tab[100 * 16];
    rope_table(&c, 16, 100, tab);
    a = rope_inv_freq(&c, 16, inv, NULL, NULL);
    double err = 0;
    for (int p = 0; p < 100; p++)
        for (int i = 0; i < 8; i++) {
            err = fmax(err, fabs(tab[p * 16 + i] - a * cos(p * inv[i])));
            err = fmax(err, fabs(tab[p * 16 + 8 + i] - a * sin(p * inv[i])));
        }
    CHECK(err < 1e-6, "cos/sin table carries the attention factor (max err %.2e)", err);
}

static void test_param_table(void) {
    Config c; config_defaults(&c);
    c.vocab_size = 101; c.d_model = 32; c.n_layer = 2; c.n_head = 4; c.n_kv_head = 2; c.d_ff = 48;
    ParamTable t; params_build(&t, &c, 1, 0);
    CHECK(t.n == 3 + 9 * 2, "table has embed + 9 per layer + norm + lm_head = %d entries", t.n);
    const ParamSpec* k = params_find(&t, "model.layers.1.self_attn.k_proj.weight");
    CHECK(k && k->shape[0] == 16 && k->shape[1] == 32 && k->split == SPLIT_ROWS && k->decay,
          "k_proj is [n_kv_head*hd, C] = [16, 32], column-parallel, decayed");
    const ParamSpec* o = params_find(&t, "model.layers.0.self_attn.o_proj.weight");
    CHECK(o && o->split == SPLIT_COLS && o->shape[0] == 32 && o->shape[1] == 32, "o_proj is row-parallel [C, nh*hd]");
    const ParamSpec* n = params_find(&t, "model.norm.weight");
    CHECK(n && n->ndim == 1 && !n->decay && n->split == SPLIT_REPLICATED, "norm weight: 1-D, replicated, no decay");
    CHECK(params_find(&t, "lm_head.weight") != NULL, "untied model has lm_head.weight");
    float* whole = malloc(t.total * sizeof(float));
    params_init(&t, 42, whole);
    float* again = malloc(t.total * sizeof(float));
    params_init(&t, 42, again);
    CHECK(!memcmp(whole, again, t.total * sizeof(float)), "init is deterministic for a seed");
    params_init(&t, 43, again);
    CHECK(memcmp(whole, again, t.total * sizeof(float)) != 0, "a different seed gives different weights");
    double s = 0, s2 = 0; const ParamSpec* q = params_find(&t, "model.layers.0.self_attn.q_proj.weight");
    for (size_t i = 0; i < q->numel; i++) { s += whole[q->offset + i]; s2 += whole[q->offset + i] * whole[q->offset + i]; }
    double sd = sqrt(s2 / q->numel - (s / q->numel) * (s / q->numel));
    CHECK(fabs(sd - 0.02) < 0.002, "q_proj init std %.4f ~ init_std 0.02", sd);

    // TP shards (tp = 2, 4) equal the matching slices of the 1-rank weights; padded vocab rows are zero
    for (int tp = 2; tp <= 4; tp += 2) {
        int ok = 1;
        for (int r = 0; r < tp; r++) {
            ParamTable ts; params_build(&ts, &c, tp, r);
            float* sh = malloc(ts.total * sizeof(float));
            params_init(&ts, 42, sh);
            for (int i = 0; i < ts.n; i++) {
                const ParamSpec* ps = &ts.p[i];
                const ParamSpec* pw = params_find(&t, ps->name);
                for (long rr = 0; rr < ps->lshape[0]; rr++)
                    for (long cc = 0; cc < ps->lshape[1]; cc++) {
                        long gr = ps->row0 + rr, gc = ps->col0 + cc;
                        float want = gr < pw->shape[0] ? whole[pw->offset + gr * pw->shape[1] + gc] : 0.0f;
                        if (sh[ps->offset + rr * ps->lshape[1] + cc] != want) ok = 0;
                    }
            }
            free(sh); params_free(&ts);
        }
        CHECK(ok, "tp=%d shards are bit-identical slices of the 1-rank init (vocab 101 padded)", tp);
    }
    free(whole); free(again); params_free(&t);
    c.tie_embeddings = 1;
    params_build(&t, &c, 1, 0);
    CHECK(params_find(&t, "lm_head.weight") == NULL && t.n == 2 + 9 * 2, "tied model has no lm_head.weight");
    params_free(&t);
}

int main(void) {
    test_yarn_worked_case();
    test_yarn_long_original();
    test_linear_and_table();
    test_param_table();
    return tu_finish();
}
