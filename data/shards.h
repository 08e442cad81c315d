// shards.h — llm.c token shards and the deterministic, random-access sequence loader.
//
// Shard format (llm.c, unchanged): header of 256 int32 — [0] magic, [1] version, [2] number of tokens —
// then the tokens. magic 20240520 + version 1: uint16 tokens (llm.c). magic 20240521 + version 1: uint32
// tokens (ringlm's variant for vocabularies above 65535). Remaining header ints are 0.
//
// Order: the shards of a data set (files matching a glob pattern, or all *.bin files of a directory,
// sorted by name) are concatenated into one token stream of n_tokens. Sequence i (0-based) is the window
// stream[i*seq_len .. i*seq_len + seq_len] (seq_len + 1 tokens: inputs are the first seq_len, targets the
// last seq_len). There are n_seq = (n_tokens - 1) / seq_len sequences. With shuffle on, epoch e visits
// them in a seeded pseudo-random permutation (a bijection of [0, n_seq) that depends only on seed and e);
// off, in order. The loader's entire state is one global cursor: the index g of the next sequence, with
// epoch = g / n_seq and sequence = perm_e(g % n_seq). Any rank can fetch any g, so a run on any number
// of ranks continues the same order.
#pragma once
#include <stdint.h>
#include <stddef.h>
#include "data/pack.h"

#define LOADER_MAX_SOURCES 8

#define SHARD_MAGIC_U16 20240520
#define SHARD_MAGIC_U32 20240521
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256

typedef struct {
    char path[1024];
    int64_t n_tokens;
    int token_bytes;     // 2 or 4
    int64_t first;       // index of this shard's first token in the concatenated stream
    int fd;
    uint64_t dev, ino;   // the file's identity (the same file twice is refused)
} Shard;

typedef struct {
    Shard* shards;
    int n_shards;
    int64_t n_tokens;    // total tokens of the stream
    int seq_len;
    int64_t n_seq;       // sequences per epoch
    int shuffle;
    uint64_t seed;
    int vocab_size;      // tokens >= vocab_size are rejected when read
    // sources: a pattern 'GLOB@W;GLOB@W' lists several, each with an upsampling weight W (default 1)
    int n_src;
    int64_t src_first[LOADER_MAX_SOURCES + 1];   // source s covers stream tokens [src_first[s], src_first[s + 1])
    double weight[LOADER_MAX_SOURCES];
    char src_pattern[LOADER_MAX_SOURCES][256];
    Pack pack;           // pack.n_win > 0: sequences are the packed windows (loader_pack)
    char err[1200];      // last error, one line naming the file / value
    char split[8];       // the split a prepared directory was read as ("train", "val"; "" for none)
} Loader;

// Open all shards of `pattern` (glob pattern, a directory, or a single file; or several of them separated by ';',
// each optionally ending in '@W', a source's upsampling weight for loader_pack) and validate headers and sizes.
// Returns 0 on success; non-zero with ld->err set (missing, truncated, wrong magic/version, no files,
// fewer than seq_len + 1 tokens).
// A directory that holds a meta.json (a prepared data set: build/prepare, tools/prepare_hf) means its training split,
// DIR/train_*.bin; a plain directory, its *.bin. The same file twice (in two sources, or through a link) is refused.
int loader_open(Loader* ld, const char* pattern, int seq_len, int vocab_size, int shuffle, uint64_t seed);
// loader_open, a prepared directory meaning its split `split`: "train", "val" (validation data), or "val|train"
// (evaluation data: its validation split, else its training split; ld->split says which was read)
int loader_open_split(Loader* ld, const char* pattern, const char* split, int seq_len, int vocab_size, int shuffle,
                      uint64_t seed);
void loader_close(Loader* ld);

// Replace the stream's windows by packed ones (data/pack.h; mode PACK_DOC_START or PACK_BEST_FIT): n_seq becomes
// the number of packed windows, and loader_get returns them (PACK_PAD in padding slots); max_bytes: PackOpts's.
// 0 or non-zero + err.
int loader_pack(Loader* ld, int mode, int eod, int buffer, int64_t upsample_len, double upsample_factor, double max_bytes);
// Source weights other than 1 were given ('@W').
int loader_weighted(const Loader* ld);

// Fetch global sequence g into tokens[seq_len+1] (int32). Returns 0, or non-zero with ld->err set
// (read error, token id >= vocab_size naming file and offset).
int loader_get(Loader* ld, int64_t g, int32_t* tokens);

// Read tokens [pos, pos+n) of the concatenated stream (any span, across shards) into tokens[n] (int32).
// Returns 0, or non-zero with ld->err set (out of range, read error, token id >= vocab_size).
int loader_read(Loader* ld, int64_t pos, int64_t n, int32_t* tokens);
// loader_read with the Loader as a void* (data/pack.h's PackRead)
int loader_read_fn(void* ld, int64_t pos, int64_t n, int32_t* tokens);

// Write a shard. token_bytes 2 or 4 (chooses the magic). Returns 0 or non-zero (errno preserved).
int shard_write(const char* path, const uint32_t* tokens, int64_t n, int token_bytes);
