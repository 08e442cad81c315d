// compare.h — how the GPU tests compare a backend's output with the CPU backend's (C and C++).
//
// The strict comparison is cmp_rows: the error of every row (a row of a [rows, len] matrix, or one head's slice
// of a row) is normalised by that row's own largest reference value, and the worst row counts. A row whose
// values are 1e-3 of the others is then held to the same relative tolerance as the rest: a global max-normalised
// error (cmp_rel) would let it be wrong by 100 % and still pass a 1e-3 tolerance. The denominator has a floor,
// floor_rel * (largest |ref| of the whole array), so that rows whose reference is exactly zero (masked rows, empty
// slices) are compared with an absolute tolerance instead of dividing by zero. NaN or inf where the reference is
// finite fails every comparison (the error is +inf).
// Also here: the host roundings that make a CPU reference see the same inputs as tensor cores do (bf16, tf32).
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// ---- roundings (the values the tensor cores multiply) ----
static inline uint32_t cmp_bits_(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float cmp_float_(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
// bf16, to nearest even (cvt.rn.bf16.f32, __float2bfloat16_rn)
static inline float round_bf16(float x) {
    uint32_t u = cmp_bits_(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return x;
    return cmp_float_((u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u);
}
// bf16, toward zero (dropping the low 16 bits)
static inline float round_bf16_rz(float x) { return isnan(x) ? x : cmp_float_(cmp_bits_(x) & 0xffff0000u); }
// tf32 (10-bit mantissa), to nearest, ties away from zero (cvt.rna.tf32.f32)
static inline float round_tf32(float x) {
    uint32_t u = cmp_bits_(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;
    return cmp_float_((u + 0x1000u) & ~0x1fffu);
}
// tf32, toward zero (the low 13 bits ignored, as a tensor core fed raw fp32 bits does)
static inline float round_tf32_rz(float x) { return isnan(x) ? x : cmp_float_(cmp_bits_(x) & ~0x1fffu); }

// ---- comparisons ----
typedef struct {
    double err;   // worst normalised error
    long row;     // the row where it is (-1: none)
    int nan;      // a NaN / inf in a where ref is finite, or a mismatched -inf
} CmpRes;

static inline double cmp_absmax(const float* r, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) if (fabs((double)r[i]) > m) m = fabs((double)r[i]);
    return m;
}

// Rows of len elements (row i = a[i*len .. i*len+len-1]). err = max over rows of
// max_j |a - r| / max(max_j |r|, floor_rel * max |r| over everything, rowfloor[i]). rowfloor (may be NULL): a
// per-row lower bound of the denominator, for rows whose reference is only as accurate as the size of the terms
// it was computed from (cancellation: the caller passes a fraction of that size).
static inline CmpRes cmp_rows_ex(const float* a, const float* r, size_t nrows, size_t len, double floor_rel,
                                 const double* rowfloor) {
    CmpRes res = { 0.0, -1, 0 };
    double g = cmp_absmax(r, nrows * len), fl = floor_rel * g;
    if (fl <= 0) fl = 1e-30;
    for (size_t i = 0; i < nrows; i++) {
        const float *ai = a + i * len, *ri = r + i * len;
        double md = 0, mr = 0;
        int bad = 0;
        for (size_t j = 0; j < len; j++) {
            double d = fabs((double)ai[j] - ri[j]);
            if (isnan(d) || isinf(d)) bad = 1;
            else if (d > md) md = d;
            if (fabs((double)ri[j]) > mr) mr = fabs((double)ri[j]);
        }
        double den = mr > fl ? mr : fl;
        if (rowfloor && rowfloor[i] > den) den = rowfloor[i];
        double e = bad ? INFINITY : md / den;
        if (bad) res.nan = 1;
        if (res.row < 0 || e > res.err) { res.err = e; res.row = (long)i; }
    }
    return res;
}
static inline CmpRes cmp_rows(const float* a, const float* r, size_t nrows, size_t len, double floor_rel) {
    return cmp_rows_ex(a, r, nrows, len, floor_rel, NULL);
}

// log-sum-exp values: -inf must match exactly; finite ones by |a - r| (an absolute error of the natural-log
// normaliser is the relative error of the softmax weights it produces)
static inline CmpRes cmp_lse_abs(const float* a, const float* r, size_t n) {
    CmpRes res = { 0.0, -1, 0 };
    for (size_t i = 0; i < n; i++) {
        double e;
        if (isinf(r[i]) || isinf(a[i]) || isnan(a[i])) e = a[i] == r[i] ? 0.0 : INFINITY;
        else e = fabs((double)a[i] - r[i]);
        if (isinf(e)) res.nan = 1;
        if (res.row < 0 || e > res.err) { res.err = e; res.row = (long)i; }
    }
    return res;
}

// The conditioning of attention's dq and dk: dS = P (dP - D) cancels where D is close to dP (a query that sees one
// key has dS = 0 exactly), and there any implementation is only accurate to the size of the terms dP and D are summed
// from. Per row of dq (query i, head h) the floor of cmp_rows_ex's denominator is kappa * max_d sqrt(sum_j (scale P_ij
// (sum_e |dO_ie v_je| + sum_e |dO_ie O_ie|) k_jd)^2), the size of the rounding errors of dS that reach dq (errors
// of independent terms add like a random walk); dk alike with q in place of k. q, dout, o [Tq, nh*hd], k, v
// [Tk, nkv*hd], l [Tq, nh] (natural log); the keys query i sees: vlist[voff[i] .. voff[i+1]). In double.
static inline void cmp_attn_floors(double* fq, double* fk, int Tq, int Tk, int nh, int nkv, int hd, const float* q,
                                   const float* k, const float* v, const float* dout, const float* o, const float* l,
                                   const size_t* voff, const int* vlist, float sc, double kappa) {
    int grp = nh / nkv;
    double* mq = (double*)calloc((size_t)Tq * nh * hd, sizeof(double));
    double* mk = (double*)calloc((size_t)Tk * nkv * hd, sizeof(double));
    for (int i = 0; i < Tq; i++)
        for (int h = 0; h < nh; h++) {
            size_t r = (size_t)i * nh + h;
            if (l[r] == -INFINITY) continue;
            int g = h / grp;
            const float *qi = q + r * hd, *gi = dout + r * hd, *oi = o + r * hd;
            double dsz = 0;
            for (int d = 0; d < hd; d++) dsz += fabs((double)gi[d] * oi[d]);
            for (size_t e = voff[i]; e < voff[i + 1]; e++) {
                int j = vlist[e];
                const float *kj = k + ((size_t)j * nkv + g) * hd, *vj = v + ((size_t)j * nkv + g) * hd;
                double s = 0, dpsz = 0;
                for (int d = 0; d < hd; d++) { s += (double)qi[d] * kj[d]; dpsz += fabs((double)gi[d] * vj[d]); }
                double t = sc * exp(sc * s - l[r]) * (dpsz + dsz);
                double *mqi = mq + r * hd, *mkj = mk + ((size_t)j * nkv + g) * hd;
                for (int d = 0; d < hd; d++) { mqi[d] += t * t * kj[d] * kj[d]; mkj[d] += t * t * qi[d] * qi[d]; }
            }
        }
    for (size_t r = 0; r < (size_t)Tq * nh; r++) {
        double m = 0;
        for (int d = 0; d < hd; d++) m = fmax(m, mq[r * hd + d]);
        fq[r] = kappa * sqrt(m);
    }
    for (size_t r = 0; r < (size_t)Tk * nkv; r++) {
        double m = 0;
        for (int d = 0; d < hd; d++) m = fmax(m, mk[r * hd + d]);
        fk[r] = kappa * sqrt(m);
    }
    free(mq); free(mk);
}

// bit-for-bit equality of two arrays (NaN payloads included)
static inline int cmp_same_bits(const void* a, const void* b, size_t bytes) { return memcmp(a, b, bytes) == 0; }
// any NaN in n floats
static inline int cmp_has_nan(const float* a, size_t n) {
    for (size_t i = 0; i < n; i++) if (isnan(a[i])) return 1;
    return 0;
}

// ---- the old global comparisons (kept for callers that want them) ----
// max |a - r| / max |r| over n elements; NaN anywhere fails (inf)
static inline double cmp_rel(const float* a, const float* r, size_t n) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - r[i]);
        if (isnan(d)) return INFINITY;   // (a NaN must not be overwritten by a later finite difference)
        if (d > md) md = d;
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
        if (isnan(d)) return INFINITY;
        if (d > w) w = d;
    }
    return w;
}
