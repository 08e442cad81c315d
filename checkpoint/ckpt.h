// ckpt.h — HDF5 checkpoints: one file per checkpoint, full logical tensors under HF names, written in
// parallel (MPI-IO, collective) from whatever (tp, cp, dp, ZeRO) layout runs, and read back into any other.
//
// File layout (format "ringlm-checkpoint", version 1; see checkpoint/FORMAT.md):
//   /                      attributes: format, format_version, step, tokens_seen, data_cursor, adam_t,
//                          seed, saved_tp, saved_cp, saved_dp, saved_zero, config (the resolved config text),
//                          run_id, data_tokens
//   /config                one string attribute per config key
//   /model/<HF name>       fp32 (or bf16 stored as uint16 with attribute dtype = "bf16"), logical shape
//   /optimizer/m/<HF name> AdamW first moments, fp32, logical shape (absent in model-only checkpoints)
//   /optimizer/v/<HF name> AdamW second moments
//   every dataset:         attribute checksum (uint64, xsum64: sum over elements of mix64(index, bits))
#pragma once
#include <stddef.h>
#include "comm/grid.h"
#include "model/model.h"
#include "optim/adamw.h"

#define CKPT_FORMAT "ringlm-checkpoint"
#define CKPT_VERSION 1

typedef struct {
    long long step;         // optimizer steps completed (the LR schedule position)
    long long cursor;       // global data cursor: sequences consumed
    long long tokens_seen;
    long long seq_len;      // loaded: the checkpoint's seq_len (the length the cursor counts in)
    long long data_tokens;  // the training data's size in tokens when saved (0: unknown, older files)
    char run_id[40];        // the run (out_dir) that saved it ("" : unknown, older files)
    const char* data_meta;  // save: the training data's meta.json text (data/meta.h), stored as the root attribute
                            // data_meta (NULL: none); ckpt_read_data_meta reads it back
} TrainState;

// The root attribute data_meta of checkpoint `path` (the training data's meta.json text) into buf: 0 when read,
// -1 when the file has none (older files, data without meta.json), 1 + err when the file cannot be read.
int ckpt_read_data_meta(const char* path, char* buf, size_t n, char* err, size_t errlen);

// Disable HDF5's own error printing and file locking (NFS-like file systems), unless the user set
// HDF5_USE_FILE_LOCKING. Call once before any other ckpt function.
void ckpt_init(void);

// Save a checkpoint of the model, the optimizer and the state as OUT_DIR/ckpt_STEP.h5 (collective over the
// world). Parameters or moments holding inf/NaN are refused. NAME.tmp is reserved on disk (ckpt_reserve),
// written (every write and the close agreed on by all ranks), fsynced, opened again and read back in full
// (state attributes and every checksum must equal what was written); only then is it renamed to NAME and
// OUT_DIR/latest pointed at it, and only then are all but the newest keep_last checkpoints deleted
// (keep_last <= 0 keeps all). Returns 0, or 1 with err (the same on every rank); on a failure NAME.tmp is
// removed and `latest` and every earlier checkpoint are as they were.
int ckpt_save(const char* out_dir, int keep_last, const Model* m, const AdamW* o, const Grid* g,
              const TrainState* st, char* err, size_t errlen);

// Serial (one rank): reserve `bytes` of disk for the file `path` beyond its end (fallocate with
// FALLOC_FL_KEEP_SIZE; `create` creates or empties the file first), so that writing it cannot run out of
// space half-way; where the file system cannot reserve, its free space must be at least `bytes`.
// RINGLM_TEST_CKPT_NO_RESERVE=1 (a test hook) skips this. 0, or 1 with err naming `who`, the file, the
// space needed and the space free.
int ckpt_reserve(const char* who, const char* path, long long bytes, int create, char* err, size_t errlen);

// Close the HDF5 library (whatever is still open) while MPI still runs: call on every rank before exiting
// after a failed save, so that HDF5's own clean-up does not run inside MPI's finalize. HDF5 reopens itself
// if used again.
void ckpt_shutdown(void);

// Resolve a --resume argument: "latest" (OUT_DIR/latest), a directory (its latest) or a file.
int ckpt_resolve(const char* spec, const char* out_dir, char* path, size_t n, char* err, size_t errlen);
// After reading checkpoint `path`, resolved from `spec` (failed: this rank's read failed): 1 on every rank when a
// read failed because the file is gone and spec named it through a 'latest' pointer (an out_dir whose run's
// keep_last deleted it meanwhile): resolve spec again and read once more. Collective over g. (The readers' own
// message says that a file was deleted while it was being read.)
int ckpt_retry_vanished(const Group* g, int failed, const char* spec, const char* path);

// Load a checkpoint into the model, optimizer and state for this rank's layout (collective over the world):
// the file's structure and training state are checked first (checkpoint/validate.h); every rank reads the
// hyperslabs its shard needs; checksums are verified, inf/NaN values refused; a model config that differs
// from the run's is refused naming the keys. On success `notes` (may be NULL) receives a one-line summary
// of training keys that changed and of what was not in the file (e.g. no optimizer state). Nothing is
// copied into the model unless everything was read and verified.
// o = NULL loads the parameters only (evaluation). allow (NULL-terminated, may be NULL) names model keys
// that may differ from the file's (evaluation's RoPE overrides).
int ckpt_load(const char* path, Model* m, AdamW* o, const Grid* g, TrainState* st, const char* const* allow,
              char* err, size_t errlen, char* notes, size_t noteslen);

// Read the config a checkpoint was saved with (every key of /config; serial, any rank), after the file's
// structure was checked (checkpoint/validate.h). 0 or 1 + err.
int ckpt_read_config(const char* path, Config* c, char* err, size_t errlen);
