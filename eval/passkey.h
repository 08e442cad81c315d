// passkey.h — synthetic passkey-retrieval documents for the byte-level tokenizer (token = byte value
// 0..255, token 256 = end-of-document, which prepare.c places before every document).
//
// Document of exactly len tokens:
//   [256] filler_a needle filler_b question
//   needle   = "The pass key is NNNNN. Remember it. NNNNN is the pass key. "         (59 tokens)
//   question = "What is the pass key? The pass key is NNNNN"                          (43 tokens)
// so the answer digits are the last PASSKEY_DIGITS tokens. The needle starts at
//   needle_pos = round(depth * (len - 59 - 43 - 1)) + 1
// (depth 0: right after token 256; depth 1: right before the question). Fillers repeat the neutral text
// "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "; each filler
// is the END of that repetition (it stops at a sentence boundary, so the needle and the question follow a
// complete sentence) and is cut at its start, mid-sentence if needed. Everything but token 0 is printable
// ASCII (32..126).
#pragma once
#include <stdint.h>

#define PASSKEY_DIGITS 5
#define PASSKEY_NEEDLE_LEN 59
#define PASSKEY_QUESTION_LEN 43
#define PASSKEY_MIN_LEN (1 + PASSKEY_NEEDLE_LEN + PASSKEY_QUESTION_LEN)   // 103: no filler at all

// Build the document into tokens[len]. The key is a 5-digit number 10000..99999, a pure function of seed
// (splitmix64). key (NUL-terminated) and needle_pos may be NULL. Returns 0, or 1 (tokens untouched) when
// len < PASSKEY_MIN_LEN or depth is not within [0, 1].
int passkey_make(uint64_t seed, int len, double depth, int* tokens, char key[PASSKEY_DIGITS + 1], int* needle_pos);
