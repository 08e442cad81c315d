// backend.h — the one interface between the model graph and the hardware.
//
// The model, the optimizer and (later) ring attention call only these functions and never dereference
// backend memory themselves. A backend supplies memory and numeric kernels: backend_cpu.c (OpenMP +
// OpenBLAS) now, a CUDA backend (cuBLAS + own kernels) later with the same declarations.
// Conventions: row-major fp32; "+=" in a comment means the kernel accumulates into its output.
// Token ids, targets and positions are int32 arrays in backend memory.
#pragma once
#include <stddef.h>
#include "attention/attention.h"   // the attention block kernels are part of this interface

// ---- memory ----
void* be_alloc(size_t bytes);                                  // zero-filled; exits with a message on OOM
void  be_free(void* p);
void  be_upload(void* dst, const void* host_src, size_t bytes);   // host -> backend
void  be_download(void* host_dst, const void* src, size_t bytes); // backend -> host
void  be_zero(void* p, size_t bytes);
void  be_copy(void* dst, const void* src, size_t bytes);        // backend -> backend
const char* be_name(void);
// Start the backend before any large allocation (CPU: makes OpenBLAS allocate its work buffers now, so that
// running out of memory later fails cleanly in be_alloc instead of inside a BLAS call).
void be_init(void);

// ---- dense ----
// C[m,n] = alpha * op(A) op(B) + beta * C; op(A) is [m,k] (A is [k,m] when transA), op(B) is [k,n].
void be_matmul(float* C, const float* A, const float* B, int m, int n, int k,
               int transA, int transB, float alpha, float beta);
void be_add(float* y, const float* x, size_t n);               // y += x
void be_scale(float* x, float s, size_t n);                     // x *= s
double be_sumsq(const float* x, size_t n);                      // sum of squares, deterministic, to host

// ---- embedding (rows v0 .. v0+nv-1 of the vocabulary live here; others give zero rows) ----
// out[N,C] = wte[tok - v0]                         wte [nv, C]
void be_embedding_forward(float* out, const int* tok, const float* wte, int N, int C, int v0, int nv);
// dwte[tok - v0] += dout[N,C]
void be_embedding_backward(float* dwte, const float* dout, const int* tok, int N, int C, int v0, int nv);

// ---- RMSNorm: out = x / sqrt(mean(x^2) + eps) * w ----
// x, out [N,C]; w [C]; rstd [N] saved for backward
void be_rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps);
// dx += ..., dw += ...
void be_rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                         const float* rstd, int N, int C);

// ---- rotary embedding, rotate_half layout, in place ----
// x [N, nh*hd]; pos [N]; cos_sin [max_pos, hd] = (cos[hd/2], sin[hd/2]) per position, attention factor
// already multiplied in. forward: x' = x cos + rot(x) sin; backward applies the transpose to dx.
void be_rope_forward(float* x, const int* pos, const float* cos_sin, int N, int nh, int hd);
void be_rope_backward(float* dx, const int* pos, const float* cos_sin, int N, int nh, int hd);

// ---- SwiGLU: h = silu(g) * u ----
void be_swiglu_forward(float* h, const float* g, const float* u, size_t n);
// dg = dh * u * silu'(g), du = dh * silu(g)   (overwrite)
void be_swiglu_backward(float* dg, float* du, const float* dh, const float* g, const float* u, size_t n);

// ---- softmax cross-entropy over a (local slice of the) vocabulary ----
// logits [N, ld]: columns 0..nv-1 hold vocabulary ids v0 .. v0+nv-1; columns nv..ld-1 are padding (a
// vocabulary padded to a multiple of tp) and are never counted or predicted. Target -1 = ignored.
// lse[N] = log sum exp(logits row) over the nv real columns                    (local slice)
void be_xent_lse(float* lse, const float* logits, int N, int ld, int nv);
// tl[N] = logits[i, targets[i]-v0] if the target is in this slice, else 0
void be_xent_target_logit(float* tl, const float* logits, const int* targets, int N, int ld, int nv, int v0);
// losses[i] = lse[i] - tl[i] for valid targets, 0 for ignored ones
void be_xent_loss(float* losses, const float* lse, const float* tl, const int* targets, int N);
// in place: logits -> dlogits = scale * (softmax - onehot) with the (global) lse; padding columns and
// rows with an ignored target -> 0
void be_xent_backward(float* logits, const float* lse, const int* targets, int N, int ld, int nv, int v0, float scale);
// mx[N] = max over the nv real columns (-inf when nv = 0); hit[i] = 1 when the target's logit tl[i] is the
// row maximum mx[i] (greedy prediction correct), else 0 (ignored targets: 0)
void be_row_max(float* mx, const float* logits, int N, int ld, int nv);
void be_argmax_hit(float* hit, const float* mx, const float* tl, const int* targets, int N);
// combining per-slice LSEs across ranks: x = exp(x - m) (x = -inf gives 0); lse = m + log(s)
void be_exp_sub(float* x, const float* m, int N);
void be_log_add(float* lse, const float* s, const float* m, int N);

// ---- AdamW on n contiguous elements ----
// m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p -= lr (mhat / (sqrt(vhat) + eps) + wd p)
// with mhat = m / bc1, vhat = v / bc2 (bias corrections passed in); g is read as g * gscale (clipping).
void be_adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float b1, float b2,
              float eps, float wd, float bc1, float bc2, float gscale);
