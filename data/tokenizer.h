// tokenizer.h — ids to text through a Hugging Face tokenizer.json with a byte-level decoder (GPT-2 and Llama 3 style
// byte-level BPE, e.g. what tools/train_tokenizer writes), for build/sample and training's sample_every.
//
// Each id's token (model.vocab and added_tokens, special or not) decodes to bytes as the tokenizers library's
// ByteLevel decoder does: every character of the token through the inverse of GPT-2's byte-to-unicode table (the
// 188 printable bytes stand for themselves, the other 68 bytes for U+0100..U+0143 in byte order); a token with a
// character outside that table stands for its own UTF-8 bytes. The text of a sequence is its tokens' bytes
// concatenated: a character whose UTF-8 bytes are split over tokens comes out whole (tokenizers then reads the
// concatenation as UTF-8, replacing invalid sequences by U+FFFD; these functions give the bytes themselves). An id
// that no token has decodes to nothing (as tokenizers drops it). Errors follow the library convention: 0, or 1 with
// one line in err.
#pragma once
#include <stddef.h>
#include <stdint.h>

struct DataMeta;

typedef struct {
    int n_ids;                   // ids 0 .. n_ids - 1 have a slot
    unsigned char* bytes;        // the tokens' bytes, concatenated
    int64_t* off;                // [n_ids + 1]: id i decodes to bytes[off[i] .. off[i + 1])
    unsigned char* special;      // [n_ids]: 1 for a special added token (the document separator, ...)
    char sha256[65];             // SHA-256 of the file's bytes (lower-case hex)
} TokDecoder;

// Read PATH (a tokenizer.json, or a directory holding one). Refused in one line: a file that is not JSON, a decoder
// other than ByteLevel (another tokenizer: print ids with --ids), a model.vocab that is not {token: id}.
int tokdec_load(TokDecoder* t, const char* path, char* err, size_t errlen);
// The bytes id decodes to (*len of them; none for an id outside the tokenizer).
const unsigned char* tokdec_bytes(const TokDecoder* t, int id, size_t* len);
void tokdec_free(TokDecoder* t);
// The tokenizer a data description names (data/meta.h: meta.json, or a checkpoint's data_meta): 1 with t loaded when
// it names a tokenizer.json (absolute, or relative to the meta.json's directory) whose SHA-256 is the recorded one and
// whose decoder is byte-level; else 0 with why (one clause: "'X' is missing", "'X' has changed since the data was
// prepared (SHA-256 ...)", the loader's error), or why "" when the description names the byte tokenizer.
int tokdec_for_meta(TokDecoder* t, const struct DataMeta* meta, char* why, size_t n);
// SHA-256 of a file's bytes as 64 hex digits into hex[65]: 0, or 1 with err.
int sha256_file(const char* path, char hex[65], char* err, size_t errlen);
