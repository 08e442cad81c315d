// test_decode.c — model/decode.c's sampler against probabilities computed here from the definitions: greedy and
// its ties, temperature, top-k, top-p (nucleus), their combination, the vocabulary bound, and the seed.
// Frequencies over many draws must lie within 5 standard deviations of the exact probabilities (a fixed seed: the
// outcome is deterministic, the bound is what a correct sampler meets with room to spare).
#include "model/decode.h"
#include "tests/testutil.h"

#include <stdlib.h>
#include <string.h>

#define NV 7
static const float L[NV] = { 1.0f, 2.5f, -0.5f, 2.0f, 0.3f, 1.7f, -3.0f };

// the exact distribution: softmax(L / T) over the top_k largest, then the smallest prefix (by probability, largest
// first) whose mass reaches top_p, renormalised
static void expected(double T, int top_k, double top_p, double* q) {
    int order[NV];
    for (int i = 0; i < NV; i++) order[i] = i;
    for (int i = 0; i < NV; i++)            // selection sort, descending (no ties in L)
        for (int j = i + 1; j < NV; j++)
            if (L[order[j]] > L[order[i]]) { int t = order[i]; order[i] = order[j]; order[j] = t; }
    int k = top_k > 0 ? top_k : NV;
    double w[NV] = { 0 }, s = 0;
    for (int i = 0; i < k; i++) { w[i] = exp(L[order[i]] / T); s += w[i]; }
    int keep = k;
    if (top_p < 1) {
        double c = 0;
        for (int i = 0; i < k; i++) { c += w[i] / s; if (c >= top_p) { keep = i + 1; break; } }
    }
    double s2 = 0;
    for (int i = 0; i < keep; i++) s2 += w[i];
    for (int i = 0; i < NV; i++) q[i] = 0;
    for (int i = 0; i < keep; i++) q[order[i]] = w[i] / s2;
}

// draws n samples; worst |freq - q| in standard deviations, and whether any id with q = 0 was drawn
static double worst_sigma(double T, int top_k, double top_p, int n, uint64_t seed, int* outside) {
    double q[NV];
    expected(T, top_k, top_p, q);
    long cnt[NV] = { 0 };
    uint64_t rng = seed;
    for (int i = 0; i < n; i++) cnt[sample_logits(L, NV, (float)T, top_k, (float)top_p, &rng)]++;
    double worst = 0;
    *outside = 0;
    for (int i = 0; i < NV; i++) {
        if (q[i] == 0) { if (cnt[i]) *outside = 1; continue; }
        double sd = sqrt(n * q[i] * (1 - q[i])) + 1e-9, z = fabs(cnt[i] - n * q[i]) / sd;
        if (z > worst) worst = z;
    }
    return worst;
}

int main(void) {
    uint64_t rng = 1;
    CHECK(sample_logits(L, NV, 0.0f, 0, 1.0f, &rng) == 1 && rng == 1, "greedy (temperature 0): the largest logit, the rng untouched");
    float tie[4] = { 0.5f, 3.0f, 3.0f, 1.0f };
    CHECK(sample_logits(tie, 4, 0.0f, 0, 1.0f, &rng) == 1, "greedy ties go to the lowest id");
    CHECK(sample_logits(L, 3, 0.0f, 0, 1.0f, &rng) == 1 && sample_logits(L, 1, 0.0f, 0, 1.0f, &rng) == 0,
          "only ids below nv are considered");

    struct { double T; int k; double p; const char* what; } cases[] = {
        { 1.0, 0, 1.0, "temperature 1: softmax(logits)" },
        { 0.6, 0, 1.0, "temperature 0.6: softmax(logits / 0.6)" },
        { 2.0, 0, 1.0, "temperature 2" },
        { 1.0, 3, 1.0, "top_k 3: the three largest, renormalised" },
        { 1.0, 0, 0.6, "top_p 0.6: the smallest set reaching 0.6" },
        { 1.0, 0, 0.9, "top_p 0.9" },
        { 0.8, 4, 0.7, "temperature 0.8, top_k 4 and top_p 0.7 together" },
        { 1.0, 1, 1.0, "top_k 1 is greedy" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int outside;
        double z = worst_sigma(cases[c].T, cases[c].k, cases[c].p, 200000, 12345 + c, &outside);
        CHECK(z < 5 && !outside, "%s: 200000 draws, worst deviation %.2f sd, none outside the set", cases[c].what, z);
    }
    // a short vocabulary: the padded logits past nv must never be drawn, even when they are the largest
    float pad[6] = { 0.1f, 0.2f, 0.3f, 9.0f, 9.0f, 9.0f };
    int hit = 0;
    rng = 7;
    for (int i = 0; i < 20000; i++) hit |= sample_logits(pad, 3, 1.0f, 0, 1.0f, &rng) >= 3;
    CHECK(!hit, "ids >= nv are never drawn");
    // the seed: the same state gives the same draws, another state other draws
    uint64_t r1 = 99, r2 = 99, r3 = 100;
    int same = 1, differ = 0;
    for (int i = 0; i < 200; i++) {
        int a = sample_logits(L, NV, 1.0f, 0, 1.0f, &r1), b = sample_logits(L, NV, 1.0f, 0, 1.0f, &r2);
        int c = sample_logits(L, NV, 1.0f, 0, 1.0f, &r3);
        same &= a == b;
        differ |= a != c;
    }
    CHECK(same && differ, "the same seed repeats its draws; another seed draws otherwise");
    return tu_finish();
}
