// compare.h — how the GPU tests compare a backend's output with the CPU backend's (C and C++).
#pragma once
#include <math.h>
#include <stddef.h>

// max |a - r| / max |r| over n elements; NaN anywhere fails (returns NaN/inf-like values that exceed any tol)
static inline double cmp_rel(const float* a, const float* r, size_t n) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - r[i]);
        if (!(d <= md)) md = d;
        if (fabs(r[i]) > mr) mr = fabs(r[i]);
    }
    return md / (mr + 1e-30);
}
// log-sum-exp rows: -inf must match exactly; finite values |diff| / max(1, |ref|)
static inline double cmp_lse(const float* a, const float* r, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(r[i]) || isinf(a[i])) { if (a[i] != r[i]) return INFINITY; continue; }
        double d = fabs((double)a[i] - r[i]) / fmax(1.0, fabs(r[i]));
        if (!(d <= w)) w = d;
    }
    return w;
}
