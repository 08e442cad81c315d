// jsonl.c — JSON Lines records (see jsonl.h): zlib's gz* reader (plain files read through it unchanged), a line
// buffer that grows to the longest line, and a strict JSON parser that decodes one top-level string field.
#include "data/jsonl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define MAX_LINE ((size_t)1 << 30)   // a longer line is refused (a record of more than 1 GiB of text)
#define MAX_DEPTH 64                 // objects and arrays nested deeper are refused
#define READ_CHUNK (1 << 20)

typedef struct { unsigned char* p; size_t n, cap; } Buf;

struct JsonlReader {
    gzFile gz;
    char* path;
    char* field; size_t field_len;
    unsigned char* buf; size_t cap, len, pos, scan;   // buf[pos, len) not yet returned; scan: searched for '\n' up to
    int eof;
    int64_t line;
    Buf text, key;
    char fields[200];                                 // the record's field names, for a missing-field message
    int64_t lone;
};

static int buf_put(Buf* b, const void* s, size_t n) {
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

int jsonl_name(const char* name) {
    static const char* SUFFIX[] = { ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz", ".ndjson.gz" };
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof SUFFIX / sizeof SUFFIX[0]; i++) {
        size_t k = strlen(SUFFIX[i]);
        if (n > k && !strcmp(name + n - k, SUFFIX[i])) return 1;
    }
    return 0;
}

int jsonl_open(JsonlReader** out, const char* path, const char* field, char* err, size_t errlen) {
    JsonlReader* r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path)) || !(r->field = strdup(field))) {
        if (r) { free(r->path); free(r); }
        snprintf(err, errlen, "out of memory opening '%s'", path);
        return 1;
    }
    r->field_len = strlen(field);
    errno = 0;
    r->gz = gzopen(path, "rb");
    if (!r->gz) {
        snprintf(err, errlen, "cannot read '%s': %s", path, errno ? strerror(errno) : "out of memory");
        jsonl_close(r);
        return 1;
    }
    gzbuffer(r->gz, 1 << 17);
    *out = r;
    return 0;
}

void jsonl_close(JsonlReader* r) {
    if (!r) return;
    if (r->gz) gzclose(r->gz);
    free(r->buf); free(r->text.p); free(r->key.p); free(r->path); free(r->field);
    free(r);
}

int64_t jsonl_lone_surrogates(const JsonlReader* r) { return r->lone; }

// a zlib error after a read (a corrupt or truncated gzip stream) as one line; 0 when there is none
static int gz_failed(JsonlReader* r, char* err, size_t errlen) {
    int code = Z_OK;
    const char* msg = gzerror(r->gz, &code);
    if (code == Z_OK || code == Z_STREAM_END) return 0;
    if (code == Z_ERRNO) snprintf(err, errlen, "cannot read '%s': %s", r->path, strerror(errno));
    else {
        size_t k = strlen(r->path);                     // (zlib's message starts with the path)
        if (msg && !strncmp(msg, r->path, k) && !strncmp(msg + k, ": ", 2)) msg += k + 2;
        snprintf(err, errlen, "'%s' cannot be decompressed (gzip: %s): a corrupt or truncated file?", r->path,
                 msg && *msg ? msg : "error");
    }
    return 1;
}

// the next line (without its '\n') in *s, *n: 1, 0 at the end, -1 with err
static int next_line(JsonlReader* r, const unsigned char** s, size_t* n, char* err, size_t errlen) {
    for (;;) {
        unsigned char* nl = r->scan < r->len ? memchr(r->buf + r->scan, '\n', r->len - r->scan) : NULL;
        if (nl || (r->eof && r->pos < r->len)) {
            size_t end = nl ? (size_t)(nl - r->buf) : r->len;
            *s = r->buf + r->pos;
            *n = end - r->pos;
            r->pos = r->scan = nl ? end + 1 : end;
            r->line++;
            return 1;
        }
        if (r->eof) return 0;
        r->scan = r->len;
        if (r->pos) {                                   // what is left to the front
            memmove(r->buf, r->buf + r->pos, r->len - r->pos);
            r->len -= r->pos; r->scan -= r->pos; r->pos = 0;
        }
        if (r->len > MAX_LINE) {
            snprintf(err, errlen, "%s:%lld: a line longer than %zu MiB: not JSON Lines?", r->path, (long long)r->line + 1,
                     MAX_LINE >> 20);
            return -1;
        }
        if (r->cap - r->len < READ_CHUNK) {
            size_t cap = r->cap ? 2 * r->cap : 2 * READ_CHUNK;
            while (cap - r->len < READ_CHUNK) cap *= 2;
            unsigned char* q = realloc(r->buf, cap);
            if (!q) { snprintf(err, errlen, "out of memory reading '%s'", r->path); return -1; }
            r->buf = q; r->cap = cap;
        }
        int k = gzread(r->gz, r->buf + r->len, READ_CHUNK);
        if (k < 0 || (k == 0 && gz_failed(r, err, errlen))) {
            if (k < 0 && !gz_failed(r, err, errlen)) snprintf(err, errlen, "cannot read '%s'", r->path);
            return -1;
        }
        if (k == 0) r->eof = 1;
        r->len += (size_t)k;
    }
}

// ---------------------------------------------------------------------------------------------------- the parser

typedef struct { const unsigned char* s; size_t n, i; JsonlReader* r; char* err; size_t errlen; } P;

static int bad(P* p, const char* what) {
    snprintf(p->err, p->errlen, "%s:%lld: not a valid JSON record: %s at byte %zu", p->r->path, (long long)p->r->line,
             what, p->i + 1);
    return 1;
}

static void ws(P* p) { while (p->i < p->n && strchr(" \t\r\n", p->s[p->i]) && p->s[p->i]) p->i++; }

// the length of the UTF-8 sequence at s[0..n) (1..4), 0 when it is not one (overlong, a surrogate, above U+10FFFF)
static int utf8_len(const unsigned char* s, size_t n) {
    unsigned c = s[0];
    int k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!k || (size_t)k > n) return 0;
    for (int j = 1; j < k; j++) if ((s[j] & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && s[1] < 0xA0) return 0;          // overlong
    if (c == 0xED && s[1] >= 0xA0) return 0;         // a surrogate
    if (c == 0xF0 && s[1] < 0x90) return 0;          // overlong
    if (c == 0xF4 && s[1] >= 0x90) return 0;         // above U+10FFFF
    return k;
}

static int hex4(P* p, unsigned* v) {
    if (p->i + 4 > p->n) return bad(p, "a \\u escape cut short");
    *v = 0;
    for (int j = 0; j < 4; j++) {
        unsigned c = p->s[p->i + j];
        unsigned d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 16;
        if (d == 16) return bad(p, "a \\u escape without 4 hex digits");
        *v = *v * 16 + d;
    }
    p->i += 4;
    return 0;
}

static int put_cp(P* p, Buf* out, unsigned cp) {
    unsigned char u[4];
    int k;
    if (cp < 0x80) { u[0] = (unsigned char)cp; k = 1; }
    else if (cp < 0x800) { u[0] = 0xC0 | (cp >> 6); u[1] = 0x80 | (cp & 63); k = 2; }
    else if (cp < 0x10000) { u[0] = 0xE0 | (cp >> 12); u[1] = 0x80 | ((cp >> 6) & 63); u[2] = 0x80 | (cp & 63); k = 3; }
    else { u[0] = 0xF0 | (cp >> 18); u[1] = 0x80 | ((cp >> 12) & 63); u[2] = 0x80 | ((cp >> 6) & 63); u[3] = 0x80 | (cp & 63); k = 4; }
    if (out && buf_put(out, u, (size_t)k)) return bad(p, "out of memory");
    return 0;
}

// a string at s[i] == '"': decoded into out (NULL: only checked)
static int string(P* p, Buf* out) {
    p->i++;
    for (;;) {
        if (p->i >= p->n) return bad(p, "a string without its closing quote");
        unsigned c = p->s[p->i];
        if (c == '"') { p->i++; return 0; }
        if (c < 0x20) return bad(p, "a control character inside a string (it must be escaped)");
        if (c == '\\') {
            if (++p->i >= p->n) return bad(p, "an escape cut short");
            unsigned e = p->s[p->i++];
            const char* from = "\"\\/bfnrt";
            const char* to = "\"\\/\b\f\n\r\t";
            const char* hit = e ? strchr(from, (int)e) : NULL;
            if (hit) { char ch = to[hit - from]; if (out && buf_put(out, &ch, 1)) return bad(p, "out of memory"); continue; }
            if (e != 'u') return bad(p, "an unknown escape");
            unsigned cp;
            if (hex4(p, &cp)) return 1;
            if (cp >= 0xD800 && cp <= 0xDBFF && p->i + 6 <= p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
                size_t at = p->i;
                unsigned lo;
                p->i += 2;
                if (hex4(p, &lo)) return 1;
                if (lo >= 0xDC00 && lo <= 0xDFFF) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else p->i = at;                        // a high surrogate alone; the next escape is read on its own
            }
            if (cp >= 0xD800 && cp <= 0xDFFF) { cp = 0xFFFD; p->r->lone++; }
            if (put_cp(p, out, cp)) return 1;
            continue;
        }
        int k = utf8_len(p->s + p->i, p->n - p->i);
        if (!k) return bad(p, "bytes that are not UTF-8 (JSON text is UTF-8)");
        if (out && buf_put(out, p->s + p->i, (size_t)k)) return bad(p, "out of memory");
        p->i += (size_t)k;
    }
}

static int digits(P* p) {
    size_t at = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    return p->i > at;
}

static int number(P* p) {
    if (p->s[p->i] == '-') p->i++;
    if (p->i < p->n && p->s[p->i] == '0') p->i++;
    else if (!digits(p)) return bad(p, "an unexpected character");
    if (p->i < p->n && p->s[p->i] == '.') { p->i++; if (!digits(p)) return bad(p, "a number without digits after '.'"); }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (!digits(p)) return bad(p, "a number without digits in its exponent");
    }
    return 0;
}

static int word(P* p, const char* w) {
    size_t k = strlen(w);
    if (p->i + k > p->n || memcmp(p->s + p->i, w, k)) return 1;
    p->i += k;
    return 0;
}

static int value(P* p, int depth) {
    ws(p);
    if (p->i >= p->n) return bad(p, "a value missing");
    unsigned c = p->s[p->i];
    if (c == '"') return string(p, NULL);
    if (c == 't' || c == 'f' || c == 'n') {
        if (word(p, "true") && word(p, "false") && word(p, "null")) return bad(p, "an unexpected word");
        return 0;
    }
    if (c != '{' && c != '[') return number(p);
    if (depth >= MAX_DEPTH) return bad(p, "objects or arrays nested more than 64 deep");
    char close = c == '{' ? '}' : ']';
    p->i++;
    ws(p);
    if (p->i < p->n && p->s[p->i] == close) { p->i++; return 0; }
    for (;;) {
        if (c == '{') {
            ws(p);
            if (p->i >= p->n || p->s[p->i] != '"') return bad(p, "a key missing (expected '\"')");
            if (string(p, NULL)) return 1;
            ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') return bad(p, "':' missing after a key");
            p->i++;
        }
        if (value(p, depth + 1)) return 1;
        ws(p);
        if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
        if (p->i < p->n && p->s[p->i] == close) { p->i++; return 0; }
        return bad(p, close == '}' ? "',' or '}' missing" : "',' or ']' missing");
    }
}

static const char* kind(unsigned c) {
    return c == '{' ? "an object" : c == '[' ? "an array" : c == 't' || c == 'f' ? "a boolean" : "a number";
}

// the record on this line: its field's text into r->text
static int record(JsonlReader* r, const unsigned char* s, size_t n, char* err, size_t errlen) {
    P p = { s, n, 0, r, err, errlen };
    ws(&p);
    if (p.i >= n || s[p.i] != '{') return bad(&p, "a record must be a JSON object ('{' expected)");
    p.i++;
    r->text.n = 0;
    r->fields[0] = 0;
    int found = 0;
    ws(&p);
    if (p.i < n && s[p.i] == '}') p.i++;
    else for (;;) {
        ws(&p);
        if (p.i >= n || s[p.i] != '"') return bad(&p, "a key missing (expected '\"')");
        r->key.n = 0;
        if (string(&p, &r->key)) return 1;
        size_t fl = strlen(r->fields);
        if (fl + r->key.n + 8 < sizeof r->fields) snprintf(r->fields + fl, sizeof r->fields - fl, "%s%.*s", fl ? ", " : "", (int)r->key.n, (const char*)r->key.p);
        else if (fl + 6 < sizeof r->fields && !strstr(r->fields, "...")) strcat(r->fields, ", ...");
        ws(&p);
        if (p.i >= n || s[p.i] != ':') return bad(&p, "':' missing after a key");
        p.i++;
        ws(&p);
        if (r->key.n == r->field_len && !memcmp(r->key.p, r->field, r->field_len)) {
            if (found) {
                snprintf(err, errlen, "%s:%lld: the record has the field '%s' twice", r->path, (long long)r->line, r->field);
                return 1;
            }
            found = 1;
            if (p.i < n && s[p.i] == '"') { if (string(&p, &r->text)) return 1; }
            else if (word(&p, "null")) {
                if (p.i >= n) return bad(&p, "a value missing");
                snprintf(err, errlen, "%s:%lld: the record's field '%s' is %s, not a string (text)", r->path,
                         (long long)r->line, r->field, kind(s[p.i]));
                return 1;
            }
        } else if (value(&p, 1)) return 1;
        ws(&p);
        if (p.i < n && s[p.i] == ',') { p.i++; continue; }
        if (p.i < n && s[p.i] == '}') { p.i++; break; }
        return bad(&p, "',' or '}' missing");
    }
    ws(&p);
    if (p.i < n) return bad(&p, "more after the record's closing '}' (one record per line)");
    if (!found) {
        snprintf(err, errlen, "%s:%lld: the record has no field '%s' (its fields: %s): name the text field with --jsonl-field",
                 r->path, (long long)r->line, r->field, r->fields[0] ? r->fields : "none");
        return 1;
    }
    return 0;
}

int jsonl_next(JsonlReader* r, const unsigned char** text, size_t* len, int64_t* line, char* err, size_t errlen) {
    for (;;) {
        const unsigned char* s;
        size_t n;
        int rc = next_line(r, &s, &n, err, errlen);
        if (rc <= 0) return rc;
        size_t i = 0;
        while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) i++;
        if (i == n) continue;                            // a blank line: no record
        if (record(r, s, n, err, errlen)) return -1;
        *text = r->text.p;
        *len = r->text.n;
        *line = r->line;
        return 1;
    }
}
