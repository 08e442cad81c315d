// tokenizer.c — tokenizer.json's byte-level decoding (tokenizer.h) and SHA-256 (FIPS 180-4) of its bytes.
#include "data/tokenizer.h"
#include "data/json.h"
#include "data/meta.h"
#include "common/files.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ERR(...) do { snprintf(err, errlen, __VA_ARGS__); return 1; } while (0)
#define TOKENIZER_MAX ((size_t)256 << 20)   // a tokenizer.json larger than this is refused
#define MAX_IDS (1 << 26)

// ---------------------------------------------------------------------------------------------------- SHA-256

typedef struct { uint32_t h[8]; uint64_t len; unsigned char buf[64]; size_t nbuf; } Sha256;

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
    0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
    0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
    0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2 };

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha_block(Sha256* s, const unsigned char* p) {
    uint32_t w[64], v[8];
    for (int i = 0; i < 16; i++) w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(v, s->h, sizeof v);
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = v[7] + (ror(v[4], 6) ^ ror(v[4], 11) ^ ror(v[4], 25)) + ((v[4] & v[5]) ^ (~v[4] & v[6])) + K256[i] + w[i];
        uint32_t t2 = (ror(v[0], 2) ^ ror(v[0], 13) ^ ror(v[0], 22)) + ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
        memmove(v + 1, v, 7 * sizeof(uint32_t));
        v[4] += t1;
        v[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++) s->h[i] += v[i];
}

static void sha_init(Sha256* s) {
    static const uint32_t H0[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
    memcpy(s->h, H0, sizeof H0);
    s->len = 0;
    s->nbuf = 0;
}

static void sha_update(Sha256* s, const unsigned char* p, size_t n) {
    s->len += n;
    while (n) {
        size_t k = 64 - s->nbuf < n ? 64 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, k);
        s->nbuf += k; p += k; n -= k;
        if (s->nbuf == 64) { sha_block(s, s->buf); s->nbuf = 0; }
    }
}

static void sha_hex(Sha256* s, char hex[65]) {
    uint64_t bits = s->len * 8;
    unsigned char pad = 0x80, zero = 0, lenb[8];
    sha_update(s, &pad, 1);
    while (s->nbuf != 56) sha_update(s, &zero, 1);
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)(bits >> (56 - 8 * i));
    sha_update(s, lenb, 8);
    for (int i = 0; i < 8; i++) snprintf(hex + 8 * i, 9, "%08x", s->h[i]);
}

int sha256_file(const char* path, char hex[65], char* err, size_t errlen) {
    int fd;
    if (open_regular(NULL, "a regular file", path, &fd, err, errlen)) return 1;
    Sha256 s;
    sha_init(&s);
    static unsigned char buf[1 << 16];
    for (;;) {
        ssize_t k = read(fd, buf, sizeof buf);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) { int e = errno; close(fd); ERR("cannot read '%s': %s", path, strerror(e)); }
        if (k == 0) break;
        sha_update(&s, buf, (size_t)k);
    }
    close(fd);
    sha_hex(&s, hex);
    return 0;
}

// ---------------------------------------------------------------------------------------------------- tokenizer.json

typedef struct { int64_t id; JsonBuf text; int special; } Tok;
typedef struct { Tok* v; size_t n, cap; } Toks;

static int toks_add(Toks* t, int64_t id, const JsonBuf* text, int special) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 1024;
        Tok* q = realloc(t->v, cap * sizeof(Tok));
        if (!q) return 1;
        t->v = q;
        t->cap = cap;
    }
    Tok* k = &t->v[t->n++];
    memset(k, 0, sizeof *k);
    k->id = id;
    k->special = special;
    return json_buf_put(&k->text, text->p ? text->p : (const unsigned char*)"", text->n);
}

static void toks_free(Toks* t) {
    for (size_t i = 0; i < t->n; i++) json_buf_free(&t->v[i].text);
    free(t->v);
}

// model: {"type": ..., "vocab": {token: id, ...}, ...}
static int read_model(JsonCur* c, Toks* vocab, char* type, size_t ntype, int* have_vocab) {
    JsonBuf key = {0}, s = {0};
    int more, rc = json_open(c, '{', &more);
    while (!rc && more) {
        rc = json_key(c, &key);
        if (rc) break;
        if (key.n == 4 && !memcmp(key.p, "type", 4) && json_peek(c) == '"') {
            s.n = 0;
            rc = json_string(c, &s);
            if (!rc) snprintf(type, ntype, "%.*s", (int)s.n, (const char*)s.p);
        } else if (key.n == 5 && !memcmp(key.p, "vocab", 5) && json_peek(c) == '{') {
            int m;
            *have_vocab = 1;
            rc = json_open(c, '{', &m);
            while (!rc && m) {
                long long id;
                rc = json_key(c, &s) || json_int(c, &id);
                if (!rc && (id < 0 || id >= MAX_IDS)) rc = json_bad(c, "a token id outside [0, 2^26)");
                if (!rc && toks_add(vocab, id, &s, 0)) rc = json_bad(c, "out of memory");
                rc = rc || json_next(c, '}', &m);
            }
        } else rc = json_value(c, 1);
        rc = rc || json_next(c, '}', &more);
    }
    json_buf_free(&key);
    json_buf_free(&s);
    return rc;
}

// added_tokens: [{"id": N, "content": "...", "special": true, ...}, ...]
static int read_added(JsonCur* c, Toks* added) {
    JsonBuf key = {0}, content = {0};
    int more, rc = json_open(c, '[', &more);
    while (!rc && more) {
        int m, special = 0, have_id = 0, have_content = 0;
        long long id = -1;
        content.n = 0;
        rc = json_open(c, '{', &m);
        while (!rc && m) {
            rc = json_key(c, &key);
            if (rc) break;
            if (key.n == 2 && !memcmp(key.p, "id", 2)) { rc = json_int(c, &id); have_id = 1; }
            else if (key.n == 7 && !memcmp(key.p, "content", 7)) { rc = json_string(c, &content); have_content = 1; }
            else if (key.n == 7 && !memcmp(key.p, "special", 7)) {
                if (!json_word(c, "true")) special = 1;
                else if (json_word(c, "false")) rc = json_bad(c, "\"special\" must be true or false");
            } else rc = json_value(c, 2);
            rc = rc || json_next(c, '}', &m);
        }
        if (!rc && (!have_id || !have_content)) rc = json_bad(c, "an added token without \"id\" and \"content\"");
        if (!rc && (id < 0 || id >= MAX_IDS)) rc = json_bad(c, "an added token's id outside [0, 2^26)");
        if (!rc && toks_add(added, id, &content, special)) rc = json_bad(c, "out of memory");
        rc = rc || json_next(c, ']', &more);
    }
    json_buf_free(&key);
    json_buf_free(&content);
    return rc;
}

// the inverse of GPT-2's byte-to-unicode table: code point -> byte (-1: none)
static void byte_table(int inv[324]) {
    for (int i = 0; i < 324; i++) inv[i] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        inv[printable ? b : 256 + extra++] = b;
    }
}

// a token's bytes: its characters through the table, or (a character outside it) its UTF-8 bytes themselves
static size_t token_bytes(const int inv[324], const unsigned char* s, size_t n, unsigned char* out) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned cp, b = s[i];
        int len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;   // (valid UTF-8: json_string checked it)
        cp = len == 1 ? b : b & (0x7F >> len);
        for (int j = 1; j < len; j++) cp = cp << 6 | (s[i + j] & 63);
        i += (size_t)len;
        if (cp >= 324 || inv[cp] < 0) { memcpy(out, s, n); return n; }
        out[k++] = (unsigned char)inv[cp];
    }
    return k;
}

int tokdec_load(TokDecoder* t, const char* spec, char* err, size_t errlen) {
    memset(t, 0, sizeof *t);
    char path[4200];
    struct stat st;
    if (stat(spec, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(path, sizeof path, "%s/tokenizer.json", spec);
    else snprintf(path, sizeof path, "%s", spec);
    int fd;
    if (open_regular(NULL, "a tokenizer.json (a regular file)", path, &fd, err, errlen)) return 1;
    if (fstat(fd, &st) || (size_t)st.st_size > TOKENIZER_MAX) {
        close(fd);
        ERR("'%s' is larger than %zu MiB: not a tokenizer.json", path, TOKENIZER_MAX >> 20);
    }
    unsigned char* text = malloc((size_t)st.st_size + 1);
    size_t n = 0;
    while (text && n < (size_t)st.st_size) {
        ssize_t k = read(fd, text + n, (size_t)st.st_size - n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        n += (size_t)k;
    }
    close(fd);
    if (!text || n != (size_t)st.st_size) { free(text); ERR("cannot read '%s'%s", path, text ? " (it changed while read?)" : ": out of memory"); }
    Sha256 sh;
    sha_init(&sh);
    sha_update(&sh, text, n);
    sha_hex(&sh, t->sha256);

    char where[4300], dtype[64] = "", mtype[64] = "";
    snprintf(where, sizeof where, "'%s' is not a valid tokenizer.json", path);
    JsonCur c = { text, n, 0, where, err, errlen, 0 };
    Toks vocab = {0}, added = {0};
    JsonBuf key = {0}, s = {0};
    int more, have_vocab = 0, have_decoder = 0;
    int rc = json_open(&c, '{', &more);
    while (!rc && more) {
        rc = json_key(&c, &key);
        if (rc) break;
        if (key.n == 5 && !memcmp(key.p, "model", 5) && json_peek(&c) == '{') rc = read_model(&c, &vocab, mtype, sizeof mtype, &have_vocab);
        else if (key.n == 12 && !memcmp(key.p, "added_tokens", 12) && json_peek(&c) == '[') rc = read_added(&c, &added);
        else if (key.n == 7 && !memcmp(key.p, "decoder", 7) && json_peek(&c) == '{') {
            int m;
            have_decoder = 1;
            rc = json_open(&c, '{', &m);
            while (!rc && m) {
                rc = json_key(&c, &s);
                if (rc) break;
                if (s.n == 4 && !memcmp(s.p, "type", 4) && json_peek(&c) == '"') {
                    JsonBuf v = {0};
                    rc = json_string(&c, &v);
                    if (!rc) snprintf(dtype, sizeof dtype, "%.*s", (int)v.n, (const char*)v.p);
                    json_buf_free(&v);
                } else rc = json_value(&c, 2);
                rc = rc || json_next(&c, '}', &m);
            }
        } else rc = json_value(&c, 1);
        rc = rc || json_next(&c, '}', &more);
    }
    if (!rc && json_peek(&c) >= 0) rc = json_bad(&c, "more after the closing '}'");
    json_buf_free(&key);
    json_buf_free(&s);
    free(text);
    if (!rc && strcmp(dtype, "ByteLevel")) {
        snprintf(err, errlen, "'%s': the decoder is %s%s%s, not ByteLevel: ringlm decodes byte-level BPE tokenizers only "
                 "(GPT-2, Llama 3 style); print ids (--ids) and decode them with the tokenizers library", path,
                 have_decoder ? "'" : "", have_decoder ? (dtype[0] ? dtype : "without a type") : "none", have_decoder ? "'" : "");
        rc = 1;
    }
    if (!rc && !have_vocab) { snprintf(err, errlen, "'%s' has no model.vocab {token: id} (model type '%s')", path, mtype); rc = 1; }
    int64_t max = -1;
    size_t total = 0;
    for (size_t i = 0; !rc && i < vocab.n + added.n; i++) {
        const Tok* k = i < vocab.n ? &vocab.v[i] : &added.v[i - vocab.n];
        if (k->id > max) max = k->id;
        total += k->text.n;
    }
    int* which = NULL;                                       // per id: the token (added ones win, as in tokenizers)
    if (!rc) {
        t->n_ids = (int)(max + 1);
        which = malloc((size_t)(t->n_ids ? t->n_ids : 1) * sizeof(int));
        t->off = malloc((size_t)(t->n_ids + 1) * sizeof(int64_t));
        t->special = calloc((size_t)(t->n_ids ? t->n_ids : 1), 1);
        t->bytes = malloc(total ? total : 1);
        if (!which || !t->off || !t->special || !t->bytes) { snprintf(err, errlen, "out of memory reading '%s'", path); rc = 1; }
    }
    if (!rc) {
        for (int i = 0; i < t->n_ids; i++) which[i] = -1;
        for (size_t i = 0; i < vocab.n + added.n; i++) which[i < vocab.n ? vocab.v[i].id : added.v[i - vocab.n].id] = (int)i;
        int inv[324];
        byte_table(inv);
        int64_t k = 0;
        for (int id = 0; id < t->n_ids; id++) {
            t->off[id] = k;
            if (which[id] < 0) continue;
            const Tok* tk = (size_t)which[id] < vocab.n ? &vocab.v[which[id]] : &added.v[which[id] - (int)vocab.n];
            t->special[id] = (unsigned char)tk->special;
            k += (int64_t)token_bytes(inv, tk->text.p, tk->text.n, t->bytes + k);
        }
        t->off[t->n_ids] = k;
    }
    free(which);
    toks_free(&vocab);
    toks_free(&added);
    if (rc) tokdec_free(t);
    return rc;
}

const unsigned char* tokdec_bytes(const TokDecoder* t, int id, size_t* len) {
    if (id < 0 || id >= t->n_ids) { *len = 0; return t->bytes; }
    *len = (size_t)(t->off[id + 1] - t->off[id]);
    return t->bytes + t->off[id];
}

void tokdec_free(TokDecoder* t) {
    free(t->bytes); free(t->off); free(t->special);
    memset(t, 0, sizeof *t);
}

int tokdec_for_meta(TokDecoder* t, const DataMeta* m, char* why, size_t n) {
    memset(t, 0, sizeof *t);
    why[0] = 0;
    if (!m->tokenizer[0] || !strcmp(m->tokenizer, "bytes")) return 0;
    char path[2200];
    const char* slash = strrchr(m->path, '/');
    if (m->tokenizer[0] != '/' && slash && !strcmp(slash + 1, "meta.json"))   // relative to the meta.json's directory
        snprintf(path, sizeof path, "%.*s/%s", (int)(slash - m->path), m->path, m->tokenizer);
    else snprintf(path, sizeof path, "%s", m->tokenizer);
    struct stat st;
    if (stat(path, &st) != 0) { snprintf(why, n, "the tokenizer '%s' the data was prepared with is missing", path); return 0; }
    char e[1200];
    if (tokdec_load(t, path, e, sizeof e)) { snprintf(why, n, "%s", e); return 0; }
    if (m->sha256[0] && strcmp(m->sha256, t->sha256)) {
        snprintf(why, n, "the tokenizer '%s' has changed since the data was prepared (SHA-256 %.12s..., recorded %.12s...)", path,
                 t->sha256, m->sha256);
        tokdec_free(t);
        return 0;
    }
    return 1;
}
