// testutil.h — tiny assertion helpers for C tests; each test binary ends with "N passed, N failed".
#pragma once
#include <stdio.h>
#include <math.h>

static int tu_passed = 0, tu_failed = 0;

// Record one named check. Prints a line per failure and a compact line per pass.
#define CHECK(cond, ...) do { if (cond) { tu_passed++; printf("ok   "); printf(__VA_ARGS__); printf("\n"); } \
    else { tu_failed++; printf("FAIL "); printf(__VA_ARGS__); printf("  [%s:%d]\n", __FILE__, __LINE__); } } while (0)

// max |a-b| / (max|b| + tiny) over n elements: relative to the reference's scale
static inline double tu_rel_err(const float* a, const double* ref, long n) {
    double md = 0, mr = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (d != d) return INFINITY;       // a NaN anywhere fails (not lost behind a later finite element)
        if (d > md) md = d;
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    return md / (mr + 1e-30);
}

static inline int tu_finish(void) {
    printf("%d passed, %d failed\n", tu_passed, tu_failed);
    return tu_failed ? 1 : 0;
}
