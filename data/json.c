// json.c — the strict JSON reader of json.h.
#include "data/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int json_buf_put(JsonBuf* b, const void* s, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        unsigned char* q = realloc(b->p, cap);
        if (!q) return 1;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

void json_buf_free(JsonBuf* b) { free(b->p); memset(b, 0, sizeof *b); }

int json_bad(JsonCur* c, const char* what) {
    snprintf(c->err, c->errlen, "%s: %s at byte %zu", c->where, what, c->i + 1);
    return 1;
}

void json_ws(JsonCur* c) {
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\r' || c->s[c->i] == '\n')) c->i++;
}

int json_peek(JsonCur* c) { json_ws(c); return c->i < c->n ? c->s[c->i] : -1; }

int json_expect(JsonCur* c, char ch, const char* what) {
    if (json_peek(c) != (unsigned char)ch) return json_bad(c, what);
    c->i++;
    return 0;
}

// the length of the UTF-8 sequence at s[0..n) (1..4), 0 when it is not one (overlong, a surrogate, above U+10FFFF)
static int utf8_len(const unsigned char* s, size_t n) {
    unsigned b = s[0];
    int k = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (!k || (size_t)k > n) return 0;
    for (int j = 1; j < k; j++) if ((s[j] & 0xC0) != 0x80) return 0;
    if (b == 0xE0 && s[1] < 0xA0) return 0;          // overlong
    if (b == 0xED && s[1] >= 0xA0) return 0;         // a surrogate
    if (b == 0xF0 && s[1] < 0x90) return 0;          // overlong
    if (b == 0xF4 && s[1] >= 0x90) return 0;         // above U+10FFFF
    return k;
}

static int hex4(JsonCur* c, unsigned* v) {
    if (c->i + 4 > c->n) return json_bad(c, "a \\u escape cut short");
    *v = 0;
    for (int j = 0; j < 4; j++) {
        unsigned h = c->s[c->i + j];
        unsigned d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 16;
        if (d == 16) return json_bad(c, "a \\u escape without 4 hex digits");
        *v = *v * 16 + d;
    }
    c->i += 4;
    return 0;
}

static int put_cp(JsonCur* c, JsonBuf* out, unsigned cp) {
    unsigned char u[4];
    int k;
    if (cp < 0x80) { u[0] = (unsigned char)cp; k = 1; }
    else if (cp < 0x800) { u[0] = 0xC0 | (cp >> 6); u[1] = 0x80 | (cp & 63); k = 2; }
    else if (cp < 0x10000) { u[0] = 0xE0 | (cp >> 12); u[1] = 0x80 | ((cp >> 6) & 63); u[2] = 0x80 | (cp & 63); k = 3; }
    else { u[0] = 0xF0 | (cp >> 18); u[1] = 0x80 | ((cp >> 12) & 63); u[2] = 0x80 | ((cp >> 6) & 63); u[3] = 0x80 | (cp & 63); k = 4; }
    if (out && json_buf_put(out, u, (size_t)k)) return json_bad(c, "out of memory");
    return 0;
}

int json_string(JsonCur* c, JsonBuf* out) {
    if (json_peek(c) != '"') return json_bad(c, "a string expected");
    c->i++;
    for (;;) {
        if (c->i >= c->n) return json_bad(c, "a string without its closing quote");
        unsigned ch = c->s[c->i];
        if (ch == '"') { c->i++; return 0; }
        if (ch < 0x20) return json_bad(c, "a control character inside a string (it must be escaped)");
        if (ch == '\\') {
            if (++c->i >= c->n) return json_bad(c, "an escape cut short");
            unsigned e = c->s[c->i++];
            static const char FROM[] = "\"\\/bfnrt", TO[] = "\"\\/\b\f\n\r\t";
            const char* hit = e ? strchr(FROM, (int)e) : NULL;
            if (hit) {
                if (out && json_buf_put(out, &TO[hit - FROM], 1)) return json_bad(c, "out of memory");
                continue;
            }
            if (e != 'u') return json_bad(c, "an unknown escape");
            unsigned cp;
            if (hex4(c, &cp)) return 1;
            if (cp >= 0xD800 && cp <= 0xDBFF && c->i + 6 <= c->n && c->s[c->i] == '\\' && c->s[c->i + 1] == 'u') {
                size_t at = c->i;
                unsigned lo;
                c->i += 2;
                if (hex4(c, &lo)) return 1;
                if (lo >= 0xDC00 && lo <= 0xDFFF) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else c->i = at;                          // a high surrogate alone; the next escape is read on its own
            }
            if (cp >= 0xD800 && cp <= 0xDFFF) { cp = 0xFFFD; c->lone++; }
            if (put_cp(c, out, cp)) return 1;
            continue;
        }
        int k = utf8_len(c->s + c->i, c->n - c->i);
        if (!k) return json_bad(c, "bytes that are not UTF-8 (JSON text is UTF-8)");
        if (out && json_buf_put(out, c->s + c->i, (size_t)k)) return json_bad(c, "out of memory");
        c->i += (size_t)k;
    }
}

static int digits(JsonCur* c) {
    size_t at = c->i;
    while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') c->i++;
    return c->i > at;
}

// a number; *integral = no fraction and no exponent
static int number(JsonCur* c, int* integral) {
    *integral = 1;
    if (c->s[c->i] == '-') c->i++;
    if (c->i < c->n && c->s[c->i] == '0') c->i++;
    else if (!digits(c)) return json_bad(c, "an unexpected character");
    if (c->i < c->n && c->s[c->i] == '.') {
        c->i++;
        *integral = 0;
        if (!digits(c)) return json_bad(c, "a number without digits after '.'");
    }
    if (c->i < c->n && (c->s[c->i] == 'e' || c->s[c->i] == 'E')) {
        c->i++;
        *integral = 0;
        if (c->i < c->n && (c->s[c->i] == '+' || c->s[c->i] == '-')) c->i++;
        if (!digits(c)) return json_bad(c, "a number without digits in its exponent");
    }
    return 0;
}

int json_int(JsonCur* c, long long* v) {
    if (json_peek(c) < 0) return json_bad(c, "a value missing");
    size_t at = c->i;
    int integral;
    if (number(c, &integral)) return 1;
    if (!integral || c->i - at > 18) { c->i = at; return json_bad(c, "an integer of at most 18 digits expected"); }
    *v = strtoll((const char*)c->s + at, NULL, 10);
    return 0;
}

int json_word(JsonCur* c, const char* w) {
    size_t k = strlen(w);
    json_ws(c);
    if (c->i + k > c->n || memcmp(c->s + c->i, w, k)) return 1;
    c->i += k;
    return 0;
}

int json_open(JsonCur* c, char open, int* more) {
    if (json_expect(c, open, open == '{' ? "an object expected ('{')" : "an array expected ('[')")) return 1;
    *more = 1;
    if (json_peek(c) == (open == '{' ? '}' : ']')) { c->i++; *more = 0; }
    return 0;
}

int json_key(JsonCur* c, JsonBuf* key) {
    if (json_peek(c) != '"') return json_bad(c, "a key missing (expected '\"')");
    key->n = 0;
    if (json_string(c, key)) return 1;
    return json_expect(c, ':', "':' missing after a key");
}

int json_next(JsonCur* c, char close, int* more) {
    int ch = json_peek(c);
    if (ch == ',') { c->i++; *more = 1; return 0; }
    if (ch == close) { c->i++; *more = 0; return 0; }
    return json_bad(c, close == '}' ? "',' or '}' missing" : "',' or ']' missing");
}

int json_value(JsonCur* c, int depth) {
    int ch = json_peek(c);
    if (ch < 0) return json_bad(c, "a value missing");
    if (ch == '"') return json_string(c, NULL);
    if (ch == 't' || ch == 'f' || ch == 'n') {
        if (json_word(c, "true") && json_word(c, "false") && json_word(c, "null")) return json_bad(c, "an unexpected word");
        return 0;
    }
    int integral;
    if (ch != '{' && ch != '[') return number(c, &integral);
    if (depth >= JSON_MAX_DEPTH) return json_bad(c, "objects or arrays nested more than 64 deep");
    char close = ch == '{' ? '}' : ']';
    int more;
    int rc = json_open(c, (char)ch, &more);
    while (!rc && more) {
        if (ch == '{') {
            if (json_peek(c) != '"') return json_bad(c, "a key missing (expected '\"')");
            rc = json_string(c, NULL) || json_expect(c, ':', "':' missing after a key");
        }
        rc = rc || json_value(c, depth + 1) || json_next(c, close, &more);
    }
    return rc;
}
