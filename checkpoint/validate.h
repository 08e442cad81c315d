// validate.h — a checkpoint's metadata is checked before anything trusts it (checkpoint/FORMAT.md):
//   - the training state in the root attributes: types, ranges, their consistency and `state_checksum`;
//   - the HDF5 structure of the whole file (every object, attribute, datatype, dataspace and dataset storage),
//     walked in a child process, so that a malformed file on which the HDF5 library itself crashes, aborts
//     or loops becomes one line instead of a crash of the job.
// Errors follow the library convention: 0, or 1 with one line in err, prefixed with `who` ("checkpoint",
// "reshard") and naming the file.
#pragma once
#include <hdf5.h>
#include <stdint.h>
#include <stddef.h>

typedef struct {
    long long step;         // optimizer steps completed: 0 .. CKPT_MAX_STEP
    long long cursor;       // data_cursor: sequences consumed, >= 0
    long long tokens;       // tokens_seen = data_cursor x seq_len (seq_len of the file's /config), <= CKPT_MAX_TOKENS
    long long adam_t;       // AdamW's step count: 0 .. step
    long long seq_len;      // /config:seq_len
    int have_sum;           // state_checksum present (files of earlier builds lack it)
} CkptState;

#define CKPT_MAX_STEP 2147483646LL           // the trainer counts steps in an int
#define CKPT_MAX_TOKENS (1LL << 62)           // room to keep counting without overflowing int64

// state_checksum: sum mod 2^64 of mix64(i x golden + value_i) over (format_version, step, data_cursor,
// tokens_seen, adam_t) for i = 0..4, the values as 64-bit two's complement bit patterns
uint64_t ckpt_state_checksum(long long version, long long step, long long cursor, long long tokens, long long adam_t);

// Read and check the root attributes of the open file f: `format`, `format_version`, the training state
// (each a one-value 64-bit integer), /config:seq_len, the ranges above, tokens_seen = data_cursor x seq_len
// and, when present, `state_checksum`. 0, or 1 with err.
int ckpt_read_state(hid_t f, const char* who, const char* path, CkptState* s, char* err, size_t errlen);

// Serial, any one rank: the whole-file structure check, run in a child process (a crash, an abort, more
// than RINGLM_CKPT_CHECK_TIMEOUT_S seconds (default 120) or more than 4 GiB of new memory become one line).
// Checks: the file opens as HDF5; ckpt_read_state; every root attribute reads; /config is a group of
// one-line string attributes that parse as config values and validate; /model (and /optimizer/{m,v} when
// /optimizer exists) are groups; every object in the file is a group or a dataset; every dataset is fp32
// or uint16 (bf16), 1-D or 2-D, with a one-value uint64 `checksum` when it has one, and storage that covers
// its elements and lies inside the file. 0, or 1 with err.
int ckpt_check_file(const char* who, const char* path, char* err, size_t errlen);

// Serial: the root attribute run_id of the checkpoint file `path` into id, read in a child process (as
// ckpt_check_file; the file may be anyone's): 0 (id = "" when the file has none), or 1 when the file cannot be
// opened or its run_id is malformed.
int ckpt_file_run_id(const char* path, char* id, size_t n);
