// pack.h — document-aware training windows (pack = doc_start | best_fit) and length upsampling.
//
// A data set's stream is cut into documents at the end-of-document token (each document starts with it; tokens
// before the first eod form a document of their own). A window has T + 1 slots (inputs are slots 0..T-1, targets
// slots 1..T); slots no document fills are padding (PACK_PAD: the target there is ignored, the input is the eod).
//   doc_start  windows start at a document's start. A document longer than a window continues in the next window
//              (which then starts with its continuation, one token overlapping as in the stream); after a document
//              ends, the window's remaining slots take the following documents, and the first one that does not
//              fit whole is cut there and starts the next window over (so its beginning is seen twice).
//   best_fit   documents longer than a window are cut into whole windows (overlapping by one token as in the
//              stream) and a remainder; remainders start windows of their own (slot 0: their first target is not
//              an end of document), and the documents that fit a window are placed, longest first, into the open
//              window with the least room that holds them (best-fit decreasing), over a buffer of `buffer`
//              documents at a time; so no document shorter than a window is ever cut.
// Upsampling: each document is used m times, m = the weight of its source (train_data 'GLOB@W;GLOB@W') times
// `factor` when it is longer than `threshold` tokens; a fractional part is one more use with that probability (a
// seeded hash of the document). With any m != 1 the documents (with their repeats) are visited in a seeded
// permutation before packing, so repeats spread over the data set.
// The table of windows depends only on the data, T, the options and the seed: every rank builds the same one, so
// every (tp, cp, dp) layout reads the same windows in the same order, and a checkpoint's cursor stays valid.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define PACK_STREAM 0
#define PACK_DOC_START 1
#define PACK_BEST_FIT 2
#define PACK_PAD (-2)            // a padding slot in a window (a target < 0 is ignored)

typedef struct { int64_t start; int32_t len, slot; } PackSeg;   // stream tokens [start, start+len) -> slots

typedef struct {
    int64_t docs, docs_short;           // documents; those that fit one window (len <= T + 1)
    int64_t short_cut;                  // short documents that no window holds whole
    int64_t stream_cut;                 // ... and those stream windows (window i = tokens [iT, iT + T]) would cut
    int64_t windows, slots, pad;        // windows, their slots (windows x (T + 1)), padding slots
    int64_t repeated;                   // slots holding a token a second time (doc_start's cut fillers)
    int64_t used_tokens;                // document tokens placed (with upsampling's repeats)
    int64_t left_out;                   // documents the source weights (below 1) leave out: never placed, not cut
    int64_t eods;                       // end-of-document tokens in the stream (none: each source is one document)
    double src_tokens[8], src_used[8];  // per source: targets inside its documents, and inside the placed segments
    int n_src;
} PackStats;

typedef struct {
    int mode;                    // PACK_DOC_START or PACK_BEST_FIT
    int T;                       // window = T + 1 slots
    int64_t n_win;
    int64_t* first;              // [n_win + 1]: window w holds seg[first[w] .. first[w + 1])
    PackSeg* seg;
    PackStats st;
} Pack;

typedef struct {
    int mode, T, eod, buffer;    // buffer: documents per best-fit round
    int64_t threshold;           // upsampling: documents longer than this many tokens ...
    double factor;               // ... are used `factor` times as often (1: off)
    const double* weight;        // per source (NULL: all 1)
    const int64_t* src_first;    // [n_src + 1]: source s covers stream tokens [src_first[s], src_first[s + 1])
    int n_src;
    uint64_t seed;
    double max_bytes;            // the memory the table may take (0: the host's MemAvailable); a plan past it is refused
} PackOpts;

// A document is used at most this many times (source weight times upsample_factor).
#define PACK_MAX_USES 1000

// read_fn(ctx, pos, n, out) reads stream tokens [pos, pos + n) as int32 (0 or non-zero with its own error).
typedef int (*PackRead)(void* ctx, int64_t pos, int64_t n, int32_t* out);

// Build the table from a stream of n_tokens. 0, or 1 with one line in err (also when the documents' uses, planned
// first, would need more memory than max_bytes: the message says how much).
int pack_build(Pack* p, const PackOpts* o, int64_t n_tokens, PackRead read_fn, void* ctx, char* err, size_t errlen);
void pack_free(Pack* p);
// The same statistics for plain stream windows (window i = tokens [iT, iT + T]) of the documents.
int pack_stream_stats(PackStats* st, int T, int eod, int64_t n_tokens, PackRead read_fn, void* ctx, char* err,
                      size_t errlen);
// The lengths of the stream's documents (malloc'd into *lens, *n of them). 0, or 1 with err.
int pack_doc_lengths(int64_t n_tokens, int eod, PackRead read_fn, void* ctx, int64_t** lens, int64_t* n, char* err,
                     size_t errlen);
// Fill window w (0 <= w < n_win) of T + 1 slots: tokens, PACK_PAD elsewhere.
int pack_window(const Pack* p, int64_t w, PackRead read_fn, void* ctx, int32_t* out);
// "stream" | "doc_start" | "best_fit" -> PACK_*; -1 when unknown.
int pack_mode(const char* name);
const char* pack_mode_name(int mode);
