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
// segment). Segments are row ranges of a rank's tokens: the layout's chunks (window sharding), or with
// ring_configure(runs = 1) runs of consecutive positions (document sharding, where a rank holds pieces of many
// documents; runs shorter than RING_SHORT_RUN rows are merged, no segment is longer than the layout's chunk). For
// each segment the ring keeps, per document, the lowest and highest position it holds there. A pair is skipped when
// no document of the query segment has a query at or after a key of the same document in the key segment (no
// visible pair: exact), computed without mask when both hold one and the same document and every key is at or before
// every query, and with the mask (causal, and documents) otherwise. No fully masked block is computed.
//
// The pruned schedule (ring_configure(prune = 1)): every rank knows every rank's positions and document ids (one
// all-gather per micro-batch), so before a call it knows which ranks can see which blocks. A block travels on to
// ring distance d only while some rank at distance >= d can see one of its keys (a block nobody else can see never
// leaves its rank; forward and backward K/V alike), and only its rows up to the last key segment another rank computes
// with (K rows then V rows, packed: the visible slice, when the rows others see come first — document sharding puts
// the rows of documents split over ranks first); its dK/dV accumulator (the same rows) travels the whole ring home when
// the block left its rank, and not at all otherwise. A hop one side skips or shortens the other does alike (both
// decide from the same table); the computation is the same as the full schedule's, so results are bit-identical.
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
    long long sends, pruned;    // blocks (K/V or dK/dV) this rank sent, and those the pruned schedule did not send
} RingStats;

enum { RING_SKIP = 0, RING_NOMASK = 1, RING_CAUSAL = 2 };
#define RING_SHORT_RUN 64       // runs mode: runs of consecutive positions shorter than this are merged into a segment

typedef struct { int doc, lo, hi; } RingSpan;   // a document's lowest and highest position in a segment (doc 0: no ids)

// The ring's decisions for one micro-batch, from every rank's positions and document ids: what each rank computes
// against each block, and which hops the schedule sends. Pure (no communication): the ring keeps one, and a planner
// can make its own for any layout of tokens.
typedef struct {
    int P, B, Tl;
    int runs, nseg_fixed, seg;  // segments: runs (at most seg rows each), or nseg_fixed of seg rows
    int prune;                  // 1: the pruned schedule; 0: every block travels the whole ring
    const int *pos, *doc;       // [P, B, Tl] every rank's positions and document ids (doc NULL: no document masking)
    int* nseg;                  // [P * B] segments of rank j's rows of sequence b
    int* seg0;                  // [P * B, Tl + 1] their first rows, and the end
    int* span0;                 // [P * B, Tl + 1] the first span of each segment, and the end
    RingSpan* span;             // [P * B, Tl] per segment, one per document, by increasing id
    unsigned char* vis;         // [B, P (src), P (dst)]: some key of src's block is visible to some query of dst
    unsigned char* need;        // [B, P (src), P (distance d)]: src's block is sent on to the rank at distance d >= 1
    int* keep;                  // [B, P (src)]: the rows of src's block that leave it: up to the last key segment another
                                // rank computes with (pruned schedule; 0: none), Tl (full schedule); 0 for P = 1
} RingMap;

void ringmap_init(RingMap* m, int P, int B, int Tl, int nseg, int runs);
void ringmap_free(RingMap* m);
// Decide from pos, doc (kept as pointers: they must stay valid while the map is used). O(P^2 segments^2).
void ringmap_set(RingMap* m, const int* pos, const int* doc, int prune);
// RING_SKIP / RING_NOMASK / RING_CAUSAL for query segment qs of rank dst against key segment ks of rank src
int ringmap_classify(const RingMap* m, int b, int dst, int qs, int src, int ks);
static inline int ringmap_visible(const RingMap* m, int b, int src, int dst) { return m->vis[((size_t)b * m->P + src) * m->P + dst]; }
// whether src's block of sequence b is sent to the rank at distance d (1 <= d < P) in the forward and backward K/V
// hops; its dK/dV accumulator travels iff ringmap_need(m, b, src, 1)
static inline int ringmap_need(const RingMap* m, int b, int src, int d) { return m->need[((size_t)b * m->P + src) * m->P + d]; }
static inline int ringmap_keep(const RingMap* m, int b, int src) { return m->keep[(size_t)b * m->P + src]; }
static inline int ringmap_nseg(const RingMap* m, int j, int b) { return m->nseg[(size_t)j * m->B + b]; }
static inline const int* ringmap_seg0(const RingMap* m, int j, int b) { return m->seg0 + ((size_t)j * m->B + b) * (m->Tl + 1); }

typedef struct {
    const Group* g;
    int P, r, layout;
    int T, Tl, nseg, seg;       // sequence length, local tokens, the layout's segments per rank and their length
    int B;                      // sequences per micro-batch
    int Hk;                     // nkv * hd of the largest call planned
    int qrows;                  // query rows per kernel call between progress polls (the backend's tuning)
    float *kv[2], *dkv[2];      // [2 * Tl * Hk]: k rows then v rows, double-buffered
    int* pos_host;              // [P, B, Tl] positions of every ring rank's tokens of each sequence
    int* pos_dev;               // backend copy
    int docs;                   // document masking: the last ring_set_positions gave document ids
    int* doc_host;              // [P, B, Tl] document ids of every ring rank's tokens (docs = 1)
    int* doc_dev;               // backend copy
    RingMap map;                // the decisions of the micro-batch (ring_set_positions)
    double xfer_s;              // calibrated time of one un-overlapped hop
    long long blocks;           // kernel calls
    long long pairs[3];         // segment pairs skipped, computed without mask, computed with the mask
    long long sends, pruned;    // blocks sent; blocks the pruned schedule did not send
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
// Collective over the ring; calibrates xfer_s. The full schedule and the layout's segments until ring_configure.
void ring_init(Ring* R, const Group* g, int layout, int T, int B, int Hk, int nseg);
// runs = 1: segments are runs of consecutive positions (document sharding); prune = 1: the pruned schedule. Before
// ring_set_positions.
void ring_configure(Ring* R, int runs, int prune);
void ring_free(Ring* R);
// Exchange the positions of this rank's tokens, host [B, Tl], and their document ids (host [B, Tl], or NULL:
// no document masking; every rank of the ring must agree on which) with the whole ring (once per micro-batch), and
// decide the micro-batch's work and hops. Positions need only increase within a document (attention.h).
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
