// json.h — a strict JSON reader (RFC 8259) over a byte buffer, for the readers that need more than data/meta.c's
// flat object: JSON Lines records (data/jsonl.h) and tokenizer.json (data/tokenizer.h). A cursor walks the text;
// the caller reads the parts it needs (strings decoded to UTF-8, integers) and skips the rest. Every function returns
// 0, or 1 with one line in the cursor's err: "<where>: <what> at byte N".
// Strings: escapes decoded; a \u escape of a lone UTF-16 surrogate becomes U+FFFD (counted in cur->lone); raw bytes
// must be UTF-8 (no overlong forms, no surrogates) and no control characters.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct { unsigned char* p; size_t n, cap; } JsonBuf;

typedef struct {
    const unsigned char* s; size_t n, i;   // the text and the position
    const char* where;                     // the error messages' prefix
    char* err; size_t errlen;
    int64_t lone;                          // \u escapes of lone surrogates replaced so far
} JsonCur;

#define JSON_MAX_DEPTH 64                  // objects and arrays nested deeper are refused

int json_bad(JsonCur* c, const char* what);                  // the error (always 1)
void json_ws(JsonCur* c);                                     // skip whitespace
int json_peek(JsonCur* c);                                    // the next byte after whitespace, -1 at the end
int json_expect(JsonCur* c, char ch, const char* what);       // whitespace, then ch (else the error "WHAT")
int json_string(JsonCur* c, JsonBuf* out);                    // a string, appended to out (NULL: checked only)
int json_value(JsonCur* c, int depth);                        // any value, checked and skipped
int json_int(JsonCur* c, long long* v);                       // an integer (no fraction or exponent)
int json_word(JsonCur* c, const char* w);                     // 0 when the text continues with w (consumed)
// Objects and arrays, a member at a time: json_open(c, '{', &more) reads the '{' (more = 0 for an empty object);
// per member json_key(c, &key) reads "key": (decoded into key, replacing its content), then the caller reads or
// skips the value, then json_next(c, '}', &more) reads ',' (more = 1) or the closing '}' (more = 0). Arrays the same
// with '[' and ']', without json_key.
int json_open(JsonCur* c, char open, int* more);
int json_key(JsonCur* c, JsonBuf* key);
int json_next(JsonCur* c, char close, int* more);
int json_buf_put(JsonBuf* b, const void* s, size_t n);        // 0, or 1 out of memory
void json_buf_free(JsonBuf* b);
