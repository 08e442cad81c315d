// shard.h — which tokens of a window each context-parallel rank holds (cp_shard = window | document).
//
// A window is seq_len input tokens (positions 0 .. seq_len - 1); each of the P ranks of a sequence holds Tl = seq_len / P
// of them, at explicit positions (the attention kernels and the ring decide from positions and document ids, so any
// assignment computes the same model).
//   window:   the layout's cut of the whole window (ring_positions): zigzag, 2P chunks, rank r holds chunks r and
//             2P - 1 - r; contiguous, rank r holds chunk r. One long document beside many short ones, or documents
//             ending mid-chunk, can leave most of the visible attention work on a few ranks.
//   document: the window is cut into its documents at the eod token (tokens before the first eod form one; a padding
//             slot reads as eod, a document of one token). The work of a document of L tokens is its visible
//             query-key pairs, L (L + 1) / 2 (a token at offset i in its document sees i + 1 keys).
//               1. a document of at least `min_len` tokens is split into the layout's chunks (zigzag: 2P, rank r takes
//                  chunks r and 2P - 1 - r, so every rank gets the same share of its work; contiguous: P, rank r takes
//                  chunk r); the tokens that do not divide evenly go one each to the chunks whose ranks have the most
//                  room left;
//               2. the other documents (and runs of one-token documents, as one unit of work = length) are placed
//                  whole, most work first, each on the rank with the least work that has room for it (longest
//                  processing time first); one that fits on no rank is cut into pieces over the ranks with room
//                  (least work first), in the order of its tokens;
//               3. zigzag: while the work's imbalance (max / mean over the ranks) exceeds SHARD_BALANCE and a whole
//                  document of at least 2P tokens remains, the one with the most work is split as in 1. too, and 2. is
//                  redone.
//             Documents placed whole are seen by no other rank: with document masking the ring neither computes nor
//             (pruned schedule, ring.h) sends their keys. A rank's rows are the rows of documents over several ranks
//             first, then those of documents it holds whole, each part in increasing position: the rows other ranks
//             see are a prefix, the slice the pruned schedule sends.
// The assignment depends only on the window's tokens, P, the layout and min_len: every rank computes the same one,
// for any (tp, cp, dp) layout and on resume. Window mode: each rank's positions increase.
#pragma once
#include <stdint.h>

enum { SHARD_WINDOW = 0, SHARD_DOCUMENT = 1 };
#define SHARD_BALANCE 1.05

typedef struct {
    int mode, layout;     // SHARD_*, CP_ZIGZAG | CP_CONTIGUOUS (ring.h)
    int P, T, Tl;         // ranks, tokens per window, per rank
    int min_len;          // document: split documents of at least this many tokens
    int eod;              // the end-of-document token (a negative window entry, padding, reads as it)
    // scratch (document mode), sized for T
    int *start, *len, *order, *owner, *split, *cut, *cnt, *room, *csize;
    double *work, *uw;
    // of the last shard_window: documents (units of work), those split, the work per rank
    int n_units, n_split;
} CpShard;

// "window" | "document" -> SHARD_*; -1 when unknown.
int shard_mode_parse(const char* s);
// Plan for windows of T tokens over P ranks (T divisible by the layout's chunks: 2P zigzag, P contiguous).
void shard_init(CpShard* s, int mode, int layout, int P, int T, int min_len, int eod);
void shard_free(CpShard* s);
// pos [P, Tl]: the positions each rank holds of the window whose input tokens are win[0 .. T - 1] (PACK_PAD or any
// negative entry reads as eod), in the order above. work (may be NULL) [P]: each rank's visible query-key pairs (document
// masking).
void shard_window(CpShard* s, const int32_t* win, int* pos, double* work);
// doc [T]: the document id of each position of the window (the number of eod tokens at or before it; a negative entry
// counts as one), as the model gives them with doc_mask.
void shard_doc_ids(const int32_t* win, int T, int eod, int* doc);
