// attention.h — blockwise (FlashAttention-2 style) causal attention, the unit ring attention is built on.
//
// One call = one block of queries of ONE sequence against one block of keys/values of the same sequence,
// all heads at once. Ring attention calls exactly these with K/V blocks received from other ranks.
//
// Layouts (row-major, fp32, contiguous, no padding):
//   q, dq        [Tq, nh  * hd]   query rows (head h occupies columns h*hd .. h*hd+hd-1)
//   k, v, dk, dv [Tk, nkv * hd]   key/value rows; query head h uses kv head h / (nh / nkv)  (GQA)
//   out, dout    [Tq, nh  * hd]
//   lse, D       [Tq, nh]         log-sum-exp (natural log) of the scaled logits, per row and head
//   qpos [Tq], kpos [Tk]          absolute token positions (never implied by the row index)
//   qdoc [Tq], kdoc [Tk]          document ids (document masking), or both NULL: one document
// Logits are S = scale * q.k. Key j is visible to query i iff
//   (mask == ATTN_MASK_NONE || kpos[j] <= qpos[i])  &&  (qdoc == NULL || kdoc[j] == qdoc[i])
// (mask modes: ATTN_MASK_NONE, ATTN_MASK_CAUSAL). Document ids are only compared for equality; positions only
// need to increase within a document (RoPE positions that restart at each document work). Tiles whose
// position or document ranges exclude every pair are skipped, so ids that increase along the sequence (the
// index of the document in a packed window) also save the work of cross-document tiles. A query row whose
// visible set is empty in a block is left unchanged (never NaN); one that sees no key at all keeps lse = -inf
// and out = 0, and contributes nothing to dq/dk/dv. A sub-range of query rows is passed by offsetting
// q/out/lse/dq/dout/D/qpos/qdoc pointers.
//
// The kernels never allocate after attn_init(); they use per-thread scratch planned there.
// All pointers are backend ("device") memory; on the CPU backend that is host memory.
//
// Engines. A backend may compute blocks in more than one way (the CUDA backend: its own kernels, or cuDNN's fused
// attention as the "fast" engine, see docs/attention_engine.md). The schedule never chooses: the run says once,
// after attn_init, what its calls look like (attn_engine_select), and may register host copies of the position and
// document-id arrays it passes (attn_host_mirror), from which a backend plans each block on the host without
// reading device memory. A block whose arrays have no host copy runs on the own kernels.
#pragma once
#include <stddef.h>

enum { ATTN_MASK_NONE = 0, ATTN_MASK_CAUSAL = 1 };

// Plan scratch for head dims up to max_hd. Call once at start-up (safe to call again; grows only).
void attn_init(int max_hd);

// out = 0, lse = -inf for Tq rows: the empty running result.
void attn_forward_begin(float* out, float* lse, int Tq, int nh, int hd);

// Attend q to this block of k/v and merge the block's (o, lse) into the running (out, lse) in place with the
// numerically stable LSE merge (a row with no visible key in the block is left unchanged; a row that has
// seen no key anywhere keeps out = 0, lse = -inf). Blocks may arrive in any order.
void attn_block_forward(float* out, float* lse,
                        const float* q, const int* qpos, const int* qdoc, int Tq,
                        const float* k, const float* v, const int* kpos, const int* kdoc, int Tk,
                        int nh, int nkv, int hd, float scale, int mask);

// D[i,h] = sum_d dout[i,h,d] * out[i,h,d] — per-row scalar of the backward pass (needs the FINAL out).
void attn_backward_begin(float* D, const float* dout, const float* out, int Tq, int nh, int hd);

// Gradient contribution of this k/v block, given the FINAL lse and D of the query rows:
// dq += ..., dk += ..., dv += ... (fp32 accumulation; each block's contribution is independent).
void attn_block_backward(float* dq, float* dk, float* dv,
                         const float* dout, const float* q, const float* lse, const float* D,
                         const int* qpos, const int* qdoc, int Tq,
                         const float* k, const float* v, const int* kpos, const int* kdoc, int Tk,
                         int nh, int nkv, int hd, float scale, int mask);

// ---- engines ----
enum { ATTN_ENGINE_OWN = 0, ATTN_ENGINE_FAST = 1 };
typedef struct {
    int nh, nkv, hd;   // heads and head dim of the run's block calls
    int docs;          // the calls pass document ids
} AttnRunShape;
// Choose the engine of each class of block the run will use (class = mask kind: ATTN_MASK_NONE, ATTN_MASK_CAUSAL).
// engine: "own" (the own kernels), "auto" (each class verified at start-up against the own kernels on seeded inputs;
// the fast engine where it passes), or the fast engine's name ("cudnn": a failing class is an error). On return bit
// c of *fast is set when class c is verified for the fast engine; report gets one line per class (which engine,
// and why). 0, or 1 with one line in err. Nothing runs on the fast engine before attn_engine_use.
int attn_engine_select(const char* engine, const AttnRunShape* s, unsigned* fast, char* report, size_t reportlen,
                       char* err, size_t errlen);
// Run the classes in mask on the fast engine (the caller ANDs the masks of every rank: one numerics per job).
void attn_engine_use(unsigned fast);
// dev [n] (backend memory) holds the same ints as host [n], now and whenever a block call passes (a part of) dev:
// the caller updates both together. Registering dev again replaces its host copy; host NULL (n 0) forgets dev
// (before its memory is freed).
void attn_host_mirror(const int* dev, const int* host, size_t n);
// Blocks (pieces of block calls) computed so far by each engine: counts[ATTN_ENGINE_OWN], counts[ATTN_ENGINE_FAST].
void attn_engine_counts(long long counts[2]);

// Merge a partial result (o2, lse2) into (o1, lse1) in place: both over disjoint key sets. Exact, any order;
// -inf on either side means "take the other side". For a caller that computes a block's partial result
// apart from the running one; the ring today lets attn_block_forward merge in place and does not call it.
void attn_merge(float* o1, float* lse1, const float* o2, const float* lse2, int Tq, int nh, int hd);
