// backend.h — the contract between the model graph and the hardware: memory, numeric kernels, a clock.
//
// The model, the optimizer, the ring schedule, checkpoints and evaluation call only these functions (and
// attention.h) and never dereference backend memory themselves: host data crosses with be_upload /
// be_download. A backend is a folder backend/<name>/ selected at build time (`make BACKEND=<name>`); this
// header names no implementation.
// Conventions: row-major fp32, except the activations a backend may store in bf16 (act_dtype: the arguments typed
// void* with a BeDtype beside them); "+=" in a comment means the kernel accumulates into its output. Token ids,
// targets and positions are int32 arrays in backend memory. Kernels may run asynchronously (in order on
// one queue): a host value produced by a kernel is valid after be_download (which waits) or be_sync.
#pragma once
#include <stddef.h>
#include "backend/attention.h"   // the attention block kernels are part of this interface

// ---- life cycle ----
// Start the backend: once per process, from main, right after the process grid is built and before any
// other be_ call. local_rank = this process's index among the processes of its node (a GPU backend picks
// its device by it). Returns 0, or 1 with one line in err (e.g. no device).
int be_init(int local_rank, char* err, size_t errlen);
const char* be_name(void);
void be_sync(void);   // wait until every queued kernel and copy has finished
// Bytes of backend memory this process can still allocate, when node_ranks processes of its node share
// the node (CPU: the host's MemAvailable / node_ranks; a GPU: the device's free memory, divided among the
// ranks that share the device). For the capacity check before the arenas are allocated.
double be_memory_available(int node_ranks);
// Bytes: the most memory this process used since it started or since the last reset (CPU: the resident set's
// high-water mark, VmHWM, restarted through /proc/self/clear_refs; where that cannot be written, the peak since the
// start. A GPU: what the backend held at most: allocations + scratch + the cuBLAS workspace). reset = 1 starts a new
// period after reading: a training step's peak is read at its end, the period started at its beginning. reset = 2
// also forgets every peak so far, the process's over its whole run included (RINGLM_CUDA_MEMORY's, the CPU's
// VmHWM): after a start-up measurement whose memory is not the run's (train/mfu.h).
double be_memory_peak(int reset);

// The training step's boundaries, for a backend that reports what one step costs (the CUDA backend's step anatomy,
// RINGLM_CUDA_ANATOMY; the CPU ignores them). model_flops: the step's model FLOPs per process (6N + attention);
// about: one line describing the model and layout.
void be_step_begin(long long step, double model_flops, const char* about);
void be_step_end(void);

// Sizes that are the backend's tuning, not the model's: the model and the ring ask, never assume.
typedef struct {
    int ring_query_rows;   // query rows per attention call while a ring transfer is in flight: the ring
                           // drives communication progress between calls (CPU: 256)
    int head_rows;         // rows per LM-head chunk: bounds the [rows, vocab] logits buffer (CPU: 1024)
    int norm_groups;       // row groups of an RMSNorm weight gradient's partial sums (be_rmsnorm_backward; CPU: 1)
} BeTuning;

// ---- element types: activations are fp32, or bf16 (act_dtype) on a backend that stores and multiplies bf16 ----
typedef enum { BE_F32 = 0, BE_BF16 = 1 } BeDtype;
static inline size_t be_dtype_size(BeDtype t) { return t == BE_BF16 ? 2 : 4; }
// 1 when the backend keeps bf16 tensors (activations, the weights' bf16 copies) and feeds them to its matmuls with
// bf16 precision; a backend without (the CPU, the reference) runs everything in fp32.
int be_has_bf16(void);
const BeTuning* be_tuning(void);
// The row groups of an RMSNorm backward over N rows: norm_groups, at most one per 64 rows, at least 1
static inline int be_norm_groups(long N) {
    long g = be_tuning()->norm_groups, most = (N + 63) / 64;
    return (int)(g < most ? (g > 0 ? g : 1) : (most > 0 ? most : 1));
}

// ---- timing on the backend's own clock (CPU: wall and CPU time; a GPU: events on its queue) ----
// A timer sums regions begin..end. clamped_s sums min(region wall time, clamp_s) (the ring's estimate of
// exposed communication: at most one un-overlapped transfer per wait). work_s measures the work done in
// the regions (CPU: CPU time of all threads, robust to oversubscribed cores; a GPU: = wall_s).
typedef struct BeTimer BeTimer;
typedef struct { double wall_s, work_s, clamped_s; long long regions; } BeTimes;
BeTimer* be_timer_create(double clamp_s);
void be_timer_free(BeTimer* t);
void be_timer_begin(BeTimer* t);
void be_timer_end(BeTimer* t);
BeTimes be_timer_read(BeTimer* t);   // totals of every region ended so far (waits for them on a GPU)

// ---- memory ----
void* be_alloc(size_t bytes);                                     // zero-filled; exits with one line on OOM
void  be_free(void* p);
// host -> backend, queued: returns without waiting for the device (the host buffer may be reused at once: a GPU stages
// it through pinned memory), so uploads inside a step cost no host synchronisation
void  be_upload(void* dst, const void* host_src, size_t bytes);
void  be_download(void* host_dst, const void* src, size_t bytes); // backend -> host (waits for the data)
void  be_zero(void* p, size_t bytes);
void  be_copy(void* dst, const void* src, size_t bytes);          // backend -> backend

// ---- host memory beside the backend's, and a copy queue (activation offload) ----
// be_host_alloc: host memory that copies to and from backend memory run on asynchronously (a GPU: pinned, page-locked),
// its contents undefined (the caller writes before it reads); exits with one line when the host has none left. be_host_bytes: what this process holds of it now.
void*  be_host_alloc(size_t bytes);
void   be_host_free(void* p);
size_t be_host_bytes(void);
// A copy queue runs beside the compute queue. be_copy_*_async copy `bytes` between backend memory and be_host_alloc
// memory on it: the copy starts after everything queued on the compute queue before the call, and `done` is recorded
// when it has finished; the compute queue goes on meanwhile. be_wait_event: whatever is queued on the compute queue
// after the call waits for `done` (the host does not block). The CPU backend copies at once (there is no queue).
typedef struct BeEvent BeEvent;
BeEvent* be_event_create(void);
void be_event_free(BeEvent* e);
void be_copy_to_host_async(void* host, const void* src, size_t bytes, BeEvent* done);
void be_copy_from_host_async(void* dst, const void* host, size_t bytes, BeEvent* done);
void be_wait_event(BeEvent* e);

// ---- dense ----
// Matmul precision: "bf16" | "tf32" (tensor cores, fp32 accumulation) | "fp32". A backend without such
// modes (the CPU) computes fp32 whatever is set. 0, or 1 for an unknown name.
int be_set_matmul_precision(const char* name);
// C[m,n] = alpha * op(A) op(B) + beta * C; op(A) is [m,k] (A is [k,m] when transA), op(B) is [k,n].
void be_matmul(float* C, const float* A, const float* B, int m, int n, int k,
               int transA, int transB, float alpha, float beta);
// The same with element types and leading dimensions (elements; 0: packed): C (ct) = alpha op(A) (at) op(B) (bt) +
// beta C, fp32 accumulation. bf16 operands (A and B both) need be_has_bf16 and the bf16 matmul precision.
void be_matmul_ex(void* C, BeDtype ct, int ldc, const void* A, BeDtype at, int lda, const void* B, BeDtype bt, int ldb,
                  int m, int n, int k, int transA, int transB, float alpha, float beta);
// dst[n] (dt) = src[n] rounded to dt (bf16: to nearest even): the weights' bf16 copies, once per optimizer step
void be_cast(void* dst, BeDtype dt, const float* src, size_t n);
void be_add(float* y, const float* x, size_t n);                  // y += x
// Column blocks to row blocks and back: the exchange between a sequence shard of all heads and all tokens of a
// head shard (the all-to-all of context parallelism). src/dst [R, ld] hold nb blocks of w columns; block j < P of
// the packed side is block b_j = j * nb / P (P >= nb: P / nb consecutive j share a block, e.g. a KV head needed by
// several query-head shards).
// split: dst[j, r, 0:w] = src[r, b_j w : b_j w + w]                           dst [P, R, w]
// merge: dst[r, b_j w : b_j w + w] += src[j, r, 0:w] in j order (accumulate), or = (accumulate = 0; needs nb = P)
void be_split_cols(float* dst, const float* src, int R, int ld, int w, int P, int nb);
void be_merge_cols(float* dst, const float* src, int R, int ld, int w, int P, int nb, int accumulate);
// Sums of squares of segments of x, accumulated per class: out[c] (backend memory) = sum over the segments of class c.
// One pass, deterministic (independent of thread count and schedule), nothing read back. The gradient norm.
typedef struct { size_t offset, n; int cls; } BeSegment;
void be_sumsq_segments(double* out, int nclass, const float* x, const BeSegment* seg, int nseg);
// acc[0] += sum of x[0..n) (backend memory, summed in double in a fixed order): the step's loss on the backend
void be_sum(double* acc, const float* x, size_t n);
// Gradient clipping by the global norm (torch's clip_grad_norm_ rule), on the backend: scale[0] = min(1, clip /
// (sqrt(sum of sumsq[0..n)) + 1e-6)), or 1 when clip <= 0
void be_clip_scale(float* scale, const double* sumsq, int n, float clip);

// ---- embedding (rows v0 .. v0+nv-1 of the vocabulary live here; others give zero rows) ----
// out[N,C] = wte[tok - v0]                         wte [nv, C]
void be_embedding_forward(float* out, const int* tok, const float* wte, int N, int C, int v0, int nv);
// dwte[tok - v0] += dout[N,C]
void be_embedding_backward(float* dwte, const float* dout, const int* tok, int N, int C, int v0, int nv);

// ---- RMSNorm: out = x / sqrt(mean(x^2) + eps) * w, in fp32, stored in dt (the cast of a matmul's input fused) ----
// x [N,C] fp32; w [C]; out [N,C] (dt); rstd [N] saved for backward
void be_rmsnorm_forward(void* out, BeDtype dt, float* rstd, const float* x, const float* w, int N, int C, float eps);
// The residual add with the next norm, one pass: y = x + r (fp32, the residual stream), out = RMSNorm(y) w (dt),
// rstd. The norm's arithmetic is be_rmsnorm_forward's on y (a recomputation from y gives the same bits).
void be_residual_rmsnorm(float* y, void* out, BeDtype dt, float* rstd, const float* x, const float* r, const float* w,
                         int N, int C, float eps);
// Backward: dx [N,C] += ... (fp32, the residual stream's gradient); dx_dt (NULL: none) = the new dx in dt (the next
// matmul's operand); dw_part [G, C] = this call's partial sums of dw over G = be_tuning()->norm_groups fixed groups
// of rows (overwritten; be_rmsnorm_dw adds them up)
void be_rmsnorm_backward(float* dx, void* dx_dt, BeDtype dt, float* dw_part, const float* dout, const float* x,
                         const float* w, const float* rstd, int N, int C);
// The norms' weight gradients from their partials, one call for n norms: base[off[i] + c] (+= with accumulate, else =)
// sum over g < G of part[(i G + g) C + c], g in order. off: backend memory, [n] element offsets.
void be_rmsnorm_dw(float* base, const long long* off, const float* part, int n, int G, int C, int accumulate);

// ---- q, k, v: one matmul's output split, with RoPE (rotate_half layout) applied as q and k are written ----
// qkv [N, (nh + 2 nkv) hd] (dt) -> q [N, nh hd], k, v [N, nkv hd] (fp32: attention's inputs); pos [N];
// cos_sin [max_pos, hd] = (cos[hd/2], sin[hd/2]) per position, attention factor already multiplied in:
// x' = x cos + rot(x) sin.
void be_qkv_rope(float* q, float* k, float* v, const void* qkv, BeDtype dt, const int* pos, const float* cos_sin, int N,
                 int nh, int nkv, int hd);
// backward: dqkv [N, (nh + 2 nkv) hd] (dt) = (RoPE^T dq, RoPE^T dk, dv)
void be_qkv_rope_backward(void* dqkv, BeDtype dt, const float* dq, const float* dk, const float* dv, const int* pos,
                          const float* cos_sin, int N, int nh, int nkv, int hd);

// ---- SwiGLU on one matmul's output gu [N, 2F] (dt): g = columns 0..F-1, u = F..2F-1 of each row ----
// h [N, F] (dt) = silu(g) * u
void be_swiglu_forward(void* h, const void* gu, BeDtype dt, int N, int F);
// dgu [N, 2F] (dt) = (dh * u * silu'(g), dh * silu(g)) (overwrite); h (NULL: none) = silu(g) * u again: the forward's
// h, which the model does not keep (the down projection's weight gradient needs it)
void be_swiglu_backward(void* dgu, void* h, const void* dh, const void* gu, BeDtype dt, int N, int F);

// ---- the attention output's row dots: D[i, h] = sum_d dout[i, h, d] * out[i, h, d] (out in dt) ----
void be_attn_rowdot(float* D, const float* dout, const void* out, BeDtype dt, int N, int nh, int hd);

// ---- softmax cross-entropy over a (local slice of the) vocabulary ----
// logits [N, ld] fp32: columns 0..nv-1 hold vocabulary ids v0 .. v0+nv-1; columns nv..ld-1 are padding (a
// vocabulary padded to a multiple of tp) and are never counted or predicted. Target -1 = ignored.
// One pass over each row: lse[N] = log sum exp over the nv real columns (the local slice), tl[N] = the target's
// logit if it is in this slice, else 0
void be_xent_stats(float* lse, float* tl, const float* logits, const int* targets, int N, int ld, int nv, int v0);
// With the (global) lse and tl: losses[i] = lse - tl (0 for ignored targets); scale != 0: the gradient in place,
// row i of logits -> scale (softmax - onehot) stored in dt over the row's first bytes (a bf16 row then has leading
// dimension 2 ld elements); padding columns and ignored rows -> 0
void be_xent_finish(float* losses, float* logits, BeDtype dt, const float* lse, const float* tl, const int* targets,
                    int N, int ld, int nv, int v0, float scale);
// Both at once, when the slice is the whole vocabulary (no tensor parallelism): lse, losses and the gradient, one
// pass over the logits per row.
void be_xent_fused(float* losses, float* lse, float* logits, BeDtype dt, const int* targets, int N, int ld, int nv,
                   int v0, float scale);
// mx[N] = max over the nv real columns (columns v0.. of the vocabulary) other than the row's target (-inf when
// none); hit[i] = 1 when the target's logit tl[i] is above every other logit mx[i] (greedy prediction correct;
// a tie is not a hit), else 0 (ignored targets: 0)
void be_row_max(float* mx, const float* logits, const int* targets, int N, int ld, int nv, int v0);
void be_argmax_hit(float* hit, const float* mx, const float* tl, const int* targets, int N);
// combining per-slice LSEs across ranks: x = exp(x - m) (x = -inf gives 0); lse = m + log(s)
void be_exp_sub(float* x, const float* m, int N);
void be_log_add(float* lse, const float* s, const float* m, int N);

// ---- AdamW over the elements of segments, one call per step ----
// m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p -= lr (mhat / (sqrt(vhat) + eps) + wd p)
// with mhat = m / bc1, vhat = v / bc2 (bias corrections passed in); g is read as g * gscale[0] (clipping; backend memory).
// p, g, m, v share offsets: segment i covers elements [seg[i].offset, + seg[i].n) of each; seg[i].cls = 1: decayed with
// wd, 0: not decayed (norm weights).
void be_adamw(float* p, const float* g, float* m, float* v, const BeSegment* seg, int nseg, float lr, float b1, float b2,
              float eps, float wd, float bc1, float bc2, const float* gscale);
