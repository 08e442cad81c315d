// ring.h — ring attention: exact causal attention over a sequence split across the P ranks of a ring.
//
// Each rank holds Tl = T / P tokens of every sequence (their rows of q, k, v and their positions). K/V
// blocks (only the n_kv_head heads, k and v packed into one buffer) travel r -> r+1 for P-1 hops; the
// hop of the next block is started before the current block is computed (double buffering) and the
// transport is driven (comm_test) between query chunks while computing. Each partial result is merged into
// fp32 (out, lse). Backward keeps dQ local and sends fp32 dK/dV accumulators around the ring with the K/V,
// so after P hops every rank holds the exact dK, dV of its own tokens.
//
// Layouts (which tokens a rank holds; positions are explicit, so the kernels only see positions):
//   zigzag (default): the sequence is cut into 2P chunks; rank r holds chunks r and 2P-1-r (balanced).
//   contiguous:       rank r holds chunk r of P (rank P-1 does ~2x the average work).
// Work is decided from positions and, with document masking, document ids, per pair of (query segment, key
// segment) — segments are the layout's chunks: a pair is skipped when every key is later than every query or
// (documents) the id ranges of the two are disjoint — a key segment wholly from earlier documents —, computed
// without mask when every key is at or before every query and both hold one and the same document, and with
// the mask (causal, and documents) otherwise. No fully masked block is computed.
#pragma once
#include "comm/comm.h"

enum { CP_ZIGZAG = 0, CP_CONTIGUOUS = 1 };

#include "backend/backend.h"

typedef struct {   // totals since ring_init, on the backend's clock
    double compute_s;           // wall time in attention kernels
    double work_s;              // work in attention kernels (CPU: CPU time of all threads, robust to oversubscription)
    double wait_s;              // time blocked waiting for the ring
    double xfer_s;              // calibrated time of one un-overlapped block transfer
    double exposed_s;           // communication not hidden: per wait, min(wait, xfer_s)
    long long transfers;        // block transfers waited for (forward + backward)
    long long blocks;           // kernel calls
    long long skipped, unmasked, masked;   // (query segment, key segment) pairs so decided (forward + backward)
} RingStats;

typedef struct {
    const Group* g;
    int P, r, layout;
    int T, Tl, nseg, seg;       // sequence length, local tokens, segments per rank and their length
    int B;                      // sequences per micro-batch
    int Hk;                     // nkv * hd of the largest call planned
    int qrows;                  // query rows per kernel call between progress polls (the backend's tuning)
    float *kv[2], *dkv[2];      // [2 * Tl * Hk]: k rows then v rows, double-buffered
    int* pos_host;              // [P, B, Tl] positions of every ring rank's tokens of each sequence
    int* pos_dev;               // backend copy
    int docs;                   // document masking: the last ring_set_positions gave document ids
    int* doc_host;              // [P, B, Tl] document ids of every ring rank's tokens (docs = 1)
    int* doc_dev;               // backend copy
    double xfer_s;              // calibrated time of one un-overlapped hop
    long long blocks;           // kernel calls
    long long pairs[3];         // segment pairs skipped, computed without mask, computed with the mask
    BeTimer *compute, *wait;    // attention kernels; waits for hops (clamped at xfer_s)
    CommReq* rq;                // the hops in flight
} Ring;

// Positions of rank r's tokens for a sequence of T tokens (host, [T / P]).
void ring_positions(int layout, int P, int r, int T, int* pos);
// Parse "zigzag" / "contiguous"; -1 when unknown.
int ring_layout_parse(const char* s);

// Plan buffers for micro-batches of B sequences of T tokens and K/V widths up to Hk = nkv * hd. nseg: the runs of
// consecutive positions in a rank's tokens, the unit of the work decisions (0: the layout's, 2 for zigzag and 1 for
// contiguous; a rank holding the tokens of an all-to-all group of U ranks has U times as many).
// Collective over the ring; calibrates xfer_s.
void ring_init(Ring* R, const Group* g, int layout, int T, int B, int Hk, int nseg);
void ring_free(Ring* R);
// Exchange the positions of this rank's tokens, host [B, Tl], and their document ids (host [B, Tl], or NULL:
// no document masking; every rank of the ring must agree on which) with the whole ring (once per micro-batch).
// Positions need only increase within a document (attention.h).
void ring_set_positions(Ring* R, const int* local_pos, const int* local_doc);
// Totals so far (reads the backend's timers: call at step boundaries, not inside the step).
RingStats ring_stats(const Ring* R);
// Bytes of the ring's buffers.
size_t ring_buffer_bytes(const Ring* R);
// the same for a ring chunk of Tl tokens of K/V width Hk (the planner)
size_t ring_buffer_bytes_for(int Tl, int Hk);

// Sequence b of the micro-batch: q [Tl, nh*hd], k, v [Tl, nkv*hd] -> out [Tl, nh*hd], lse [Tl, nh] (overwritten).
void ring_attention_forward(Ring* R, int b, float* out, float* lse, const float* q, const float* k, const float* v,
                            int nh, int nkv, int hd, float scale);
// dq, dk, dv (overwritten) from dout, the forward inputs, the final lse and D = rowsum(dout * out).
void ring_attention_backward(Ring* R, int b, float* dq, float* dk, float* dv, const float* dout,
                             const float* q, const float* k, const float* v, const float* lse, const float* D,
                             int nh, int nkv, int hd, float scale);
