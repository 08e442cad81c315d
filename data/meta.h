// meta.h — DIR/meta.json, the description build/prepare and tools/prepare_hf write beside their shards: which
// tokenizer made the tokens (and its hash), the vocabulary size, the end-of-document id, the token type, counts and
// the command. build/train and build/eval take vocab_size and eod from it as defaults and refuse values that
// contradict it; checkpoints record the training data's (root attribute data_meta). Format (JSON):
//   {"format": "ringlm-data-1", "tokenizer": "bytes" | PATH, "tokenizer_sha256": null | HEX, "vocab_size": N,
//    "eod_id": N, "bos_id": null | N, "dtype": "uint16" | "uint32", "documents": {"train": N, "val": N},
//    "tokens": {...}, "shards": {...}, "command": "..."}
// Errors follow the library convention: 0, or 1 with one line in err.
#pragma once
#include <stddef.h>

typedef struct DataMeta {
    int found;                    // 1: a meta.json was read
    char path[1024];              // the file read (with several directories: the first)
    char tokenizer[1024];         // "bytes" or the tokenizer.json's path
    char sha256[72];              // tokenizer_sha256 ("" for null)
    int vocab_size, eod_id, bos_id;   // -1: absent or null
    char dtype[16];
    long long docs[2], tokens[2], shards[2];   // [train, val]; -1 when absent
    char* text;                   // the file's text (NUL-terminated, malloc'd), for checkpoints
} DataMeta;

// Read the meta.json of the directory (or directories) that a shard pattern or path names: DIR/train_*.bin, a shard
// file, or a directory. With several directories (a glob over directories) every one that has a meta.json must
// describe the same tokens (tokenizer, hash, vocab_size, eod_id); without any, found = 0. 1 + err for a meta.json
// that is not valid JSON of this format, not a regular file (a FIFO, a directory, a link to nothing), or whose
// shard and token counts differ from the directory's train_*.bin / val_*.bin; or directories that disagree.
int data_meta_read(const char* pattern, DataMeta* m, char* err, size_t errlen);
// Parse meta.json text (e.g. a checkpoint's data_meta attribute; `where` names it in errors).
int data_meta_parse(const char* text, const char* where, DataMeta* m, char* err, size_t errlen);
void data_meta_free(DataMeta* m);
// Do two descriptions name the same tokens (tokenizer identity: the hash when both have one, else the name; and
// vocab_size and eod_id)? 1 when they do; else 0 with the first difference in why ("tokenizer 'a' vs 'b'").
int data_meta_same_tokens(const DataMeta* a, const DataMeta* b, char* why, size_t n);
