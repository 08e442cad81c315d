// jsonl.c — JSON Lines records (see jsonl.h): zlib's gz* reader (plain files read through it unchanged), a line
// buffer that grows to the longest line, and data/json.h's reader for the record's top-level string field.
#include "data/jsonl.h"
#include "data/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define MAX_LINE ((size_t)1 << 30)   // a longer line is refused (a record of more than 1 GiB of text)
#define READ_CHUNK (1 << 20)

struct JsonlReader {
    gzFile gz;
    char* path;
    char* field; size_t field_len;
    unsigned char* buf; size_t cap, len, pos, scan;   // buf[pos, len) not yet returned; scan: searched for '\n' up to
    int eof;
    int64_t line;
    JsonBuf text, key;
    char fields[200];                                 // the record's field names, for a missing-field message
    int64_t lone;
};

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
    free(r->buf); json_buf_free(&r->text); json_buf_free(&r->key); free(r->path); free(r->field);
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

// ---------------------------------------------------------------------------------------------------- a record

static const char* kind(int c) {
    return c == '{' ? "an object" : c == '[' ? "an array" : c == 't' || c == 'f' ? "a boolean" : "a number";
}

// the record on this line: its field's text into r->text
static int record(JsonlReader* r, const unsigned char* s, size_t n, char* err, size_t errlen) {
    char where[1200];
    snprintf(where, sizeof where, "%s:%lld: not a valid JSON record", r->path, (long long)r->line);
    JsonCur c = { s, n, 0, where, err, errlen, 0 };
    int more, found = 0;
    r->text.n = 0;
    r->fields[0] = 0;
    if (json_peek(&c) != '{') return json_bad(&c, "a record must be a JSON object ('{' expected)");
    if (json_open(&c, '{', &more)) return 1;
    while (more) {
        if (json_key(&c, &r->key)) return 1;
        size_t fl = strlen(r->fields);
        if (fl + r->key.n + 8 < sizeof r->fields)
            snprintf(r->fields + fl, sizeof r->fields - fl, "%s%.*s", fl ? ", " : "", (int)r->key.n, (const char*)r->key.p);
        else if (fl + 6 < sizeof r->fields && !strstr(r->fields, "...")) strcat(r->fields, ", ...");
        if (r->key.n == r->field_len && !memcmp(r->key.p, r->field, r->field_len)) {
            if (found) {
                snprintf(err, errlen, "%s:%lld: the record has the field '%s' twice", r->path, (long long)r->line, r->field);
                return 1;
            }
            found = 1;
            int ch = json_peek(&c);
            if (ch == '"') { if (json_string(&c, &r->text)) return 1; }
            else if (json_word(&c, "null")) {
                if (ch < 0) return json_bad(&c, "a value missing");
                snprintf(err, errlen, "%s:%lld: the record's field '%s' is %s, not a string (text)", r->path,
                         (long long)r->line, r->field, kind(ch));
                return 1;
            }
        } else if (json_value(&c, 1)) return 1;
        if (json_next(&c, '}', &more)) return 1;
    }
    if (json_peek(&c) >= 0) return json_bad(&c, "more after the record's closing '}' (one record per line)");
    r->lone += c.lone;
    if (!found) {
        snprintf(err, errlen, "%s:%lld: the record has no field '%s' (its fields: %s): name the text field with --text-field",
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
