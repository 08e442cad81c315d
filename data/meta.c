// meta.c — reading DIR/meta.json (see meta.h): a small JSON reader for one flat object whose values are strings,
// numbers, null, booleans, or objects of numbers (documents / tokens / shards).
#include "data/meta.h"

#include "common/files.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <glob.h>
#include <libgen.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ERR(...) do { snprintf(err, errlen, __VA_ARGS__); return 1; } while (0)

typedef struct { const char* s; size_t i; } Cur;

static void ws(Cur* c) { while (c->s[c->i] && isspace((unsigned char)c->s[c->i])) c->i++; }

// a JSON string into out (escapes \" \\ \/ \b \f \n \r \t and \uXXXX below 0x80; others become '?')
static int jstr(Cur* c, char* out, size_t n) {
    if (c->s[c->i] != '"') return 1;
    c->i++;
    size_t k = 0;
    for (;;) {
        char ch = c->s[c->i++];
        if (!ch) return 1;
        if (ch == '"') break;
        if (ch == '\\') {
            char e = c->s[c->i++];
            switch (e) {
            case '"': case '\\': case '/': ch = e; break;
            case 'b': ch = '\b'; break; case 'f': ch = '\f'; break; case 'n': ch = '\n'; break;
            case 'r': ch = '\r'; break; case 't': ch = '\t'; break;
            case 'u': {
                unsigned v = 0;
                for (int j = 0; j < 4; j++) {
                    char h = c->s[c->i++];
                    if (!isxdigit((unsigned char)h)) return 1;
                    v = v * 16 + (unsigned)(isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
                }
                ch = v < 0x80 ? (char)v : '?';
                break;
            }
            default: return 1;
            }
        }
        if (k + 1 < n) out[k++] = ch;
    }
    if (n) out[k] = 0;
    return 0;
}

static int jnum(Cur* c, double* v) {
    char* e;
    errno = 0;
    *v = strtod(c->s + c->i, &e);
    if (e == c->s + c->i || errno) return 1;
    c->i = (size_t)(e - c->s);
    return 0;
}

static int word(Cur* c, const char* w) {
    size_t n = strlen(w);
    if (strncmp(c->s + c->i, w, n)) return 1;
    c->i += n;
    return 0;
}

// skip any JSON value (used for keys this reader does not need)
static int skip(Cur* c, int depth) {
    ws(c);
    char ch = c->s[c->i];
    char tmp[8];
    double d;
    if (depth > 16) return 1;
    if (ch == '"') return jstr(c, tmp, 0);
    if (ch == 'n') return word(c, "null");
    if (ch == 't') return word(c, "true");
    if (ch == 'f') return word(c, "false");
    if (ch == '{' || ch == '[') {
        char close = ch == '{' ? '}' : ']';
        c->i++;
        ws(c);
        if (c->s[c->i] == close) { c->i++; return 0; }
        for (;;) {
            if (ch == '{') {
                ws(c);
                if (jstr(c, tmp, 0)) return 1;
                ws(c);
                if (c->s[c->i++] != ':') return 1;
            }
            if (skip(c, depth + 1)) return 1;
            ws(c);
            if (c->s[c->i] == ',') { c->i++; continue; }
            if (c->s[c->i] == close) { c->i++; return 0; }
            return 1;
        }
    }
    return jnum(c, &d);
}

// an integer value in [0, max] or null (-1) into *v
static int jint(Cur* c, long long* v, long long max, int* bad) {
    ws(c);
    if (!word(c, "null")) { *v = -1; return 0; }
    double d;
    // (a double above 2^53 is no exact count, and its conversion to an integer would be undefined)
    if (jnum(c, &d) || !(d >= 0 && d <= (double)max && d <= 9007199254740992.0) || d != (double)(long long)d) { *bad = 1; return 1; }
    *v = (long long)d;
    return 0;
}

// {"train": N, "val": N} into v[2]
static int split_pair(Cur* c, long long v[2]) {
    ws(c);
    if (c->s[c->i] != '{') return 1;
    c->i++;
    for (;;) {
        ws(c);
        if (c->s[c->i] == '}') { c->i++; return 0; }
        char k[32];
        if (jstr(c, k, sizeof k)) return 1;
        ws(c);
        if (c->s[c->i++] != ':') return 1;
        int bad = 0;
        long long x;
        if (!strcmp(k, "train") || !strcmp(k, "val")) { if (jint(c, &x, LLONG_MAX, &bad)) return 1; v[strcmp(k, "train") ? 1 : 0] = x; }
        else if (skip(c, 1)) return 1;
        ws(c);
        if (c->s[c->i] == ',') c->i++;
    }
}

int data_meta_parse(const char* text, const char* where, DataMeta* m, char* err, size_t errlen) {
    memset(m, 0, sizeof *m);
    m->vocab_size = m->eod_id = m->bos_id = -1;
    m->docs[0] = m->docs[1] = m->tokens[0] = m->tokens[1] = m->shards[0] = m->shards[1] = -1;
    snprintf(m->path, sizeof m->path, "%s", where);
    Cur c = { text, 0 };
    char key[64], fmt[64] = "";
    ws(&c);
    if (c.s[c.i++] != '{') ERR("%s is not a JSON object (expected '{'): rewrite it with build/prepare or tools/prepare_hf", where);
    for (;;) {
        ws(&c);
        if (c.s[c.i] == '}') { c.i++; break; }
        if (jstr(&c, key, sizeof key)) ERR("%s: bad JSON near byte %zu (expected a key)", where, c.i);
        ws(&c);
        if (c.s[c.i++] != ':') ERR("%s: bad JSON near byte %zu (expected ':' after \"%s\")", where, c.i, key);
        ws(&c);
        int bad = 0, fail = 0;
        long long v;
        if (!strcmp(key, "format")) fail = jstr(&c, fmt, sizeof fmt);
        else if (!strcmp(key, "tokenizer")) fail = jstr(&c, m->tokenizer, sizeof m->tokenizer);
        else if (!strcmp(key, "tokenizer_sha256")) fail = word(&c, "null") && jstr(&c, m->sha256, sizeof m->sha256);
        else if (!strcmp(key, "dtype")) fail = jstr(&c, m->dtype, sizeof m->dtype);
        else if (!strcmp(key, "vocab_size")) { fail = jint(&c, &v, INT_MAX, &bad); m->vocab_size = (int)v; }
        else if (!strcmp(key, "eod_id")) { fail = jint(&c, &v, INT_MAX, &bad); m->eod_id = (int)v; }
        else if (!strcmp(key, "bos_id")) { fail = jint(&c, &v, INT_MAX, &bad); m->bos_id = (int)v; }
        else if (!strcmp(key, "documents")) fail = split_pair(&c, m->docs);
        else if (!strcmp(key, "tokens")) fail = split_pair(&c, m->tokens);
        else if (!strcmp(key, "shards")) fail = split_pair(&c, m->shards);
        else fail = skip(&c, 0);
        if (fail && bad && (!strcmp(key, "vocab_size") || !strcmp(key, "eod_id") || !strcmp(key, "bos_id")))
            ERR("%s: bad value of \"%s\" near byte %zu (expected a whole number in [0, %d] or null)", where, key, c.i, INT_MAX);
        int pair = !strcmp(key, "documents") || !strcmp(key, "tokens") || !strcmp(key, "shards");
        if (fail) ERR("%s: bad value of \"%s\" near byte %zu%s", where, key, c.i, pair ? " (expected {\"train\": N, \"val\": N}, "
                      "whole numbers >= 0 or null)" : bad ? " (expected a whole number >= 0 or null)" : "");
        ws(&c);
        if (c.s[c.i] == ',') { c.i++; continue; }
        if (c.s[c.i] == '}') { c.i++; break; }
        ERR("%s: bad JSON near byte %zu (expected ',' or '}')", where, c.i);
    }
    if (strcmp(fmt, "ringlm-data-1"))
        ERR("%s: \"format\" is '%s', not ringlm-data-1 (written by build/prepare and tools/prepare_hf)", where, fmt);
    if (!m->tokenizer[0]) ERR("%s: no \"tokenizer\"", where);
    if (m->vocab_size <= 0) ERR("%s: no \"vocab_size\" (a positive whole number)", where);
    if (m->eod_id >= m->vocab_size) ERR("%s: eod_id %d is not below vocab_size %d", where, m->eod_id, m->vocab_size);
    m->text = strdup(text);
    return 0;
}

// the shards DIR/SPLIT_*.bin: how many, and the tokens their headers count; 0, or 1 + err for one that is not a
// regular file. *ok = 0 when a header does not read as a shard's (the loader names that file when it opens it).
static int split_counts(const char* dir, const char* split, long long* files, long long* tokens, int* ok, char* err,
                        size_t errlen) {
    *files = *tokens = 0;
    DIR* d = opendir(dir);
    if (!d) return 0;
    char pat[32], p[1400];
    snprintf(pat, sizeof pat, "%s_*.bin", split);
    struct dirent* e;
    int fail = 0;
    while (!fail && (e = readdir(d))) {
        if (fnmatch(pat, e->d_name, 0)) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        int fd;
        if (open_regular(NULL, "a regular file (a shard)", p, &fd, err, errlen)) { fail = 1; break; }
        int32_t h[3];
        if (pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h || (h[0] != 20240520 && h[0] != 20240521) || h[2] < 0) *ok = 0;
        else *tokens += h[2];
        close(fd);
        ++*files;
    }
    closedir(d);
    return fail;
}

// the directory's train_*.bin and val_*.bin against the counts its meta.json gives (when it gives them)
static int check_counts(const char* dir, const DataMeta* m, char* err, size_t errlen) {
    static const char* SPLIT[2] = { "train", "val" };
    for (int s = 0; s < 2; s++) {
        if (m->shards[s] < 0 && m->tokens[s] < 0) continue;
        long long files, tokens;
        int ok = 1;
        if (split_counts(dir, SPLIT[s], &files, &tokens, &ok, err, errlen)) return 1;
        if (!ok) continue;
        if ((m->shards[s] >= 0 && files != m->shards[s]) || (m->tokens[s] >= 0 && tokens != m->tokens[s]))
            ERR("%s says %lld %s shard%s of %lld tokens, but '%s' holds %lld %s_*.bin of %lld tokens: the directory "
                "changed after it was prepared (a shard added, removed or rewritten); prepare it again, or set data_meta "
                "= 0 to ignore meta.json", m->path, m->shards[s], SPLIT[s], m->shards[s] == 1 ? "" : "s", m->tokens[s],
                dir, files, SPLIT[s], tokens);
    }
    return 0;
}

static int read_dir(const char* dir, DataMeta* m, int* found, char* err, size_t errlen) {
    char p[1100];
    snprintf(p, sizeof p, "%s/meta.json", dir);
    struct stat st;
    *found = 0;
    if (lstat(p, &st) != 0) return 0;   // none (a link to nothing is said below)
    int fd;
    if (open_regular(NULL, "a regular file (a data description)", p, &fd, err, errlen)) return 1;
    size_t max = 1 << 20, n = 0;
    char* t = malloc(max + 2);
    if (!t) { close(fd); ERR("out of memory reading %s", p); }
    for (;;) {   // at most 1 MiB (+ 1 byte: then it is too large)
        ssize_t k = read(fd, t + n, max + 1 - n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) { int e = errno; free(t); close(fd); ERR("cannot read %s: %s", p, strerror(e)); }
        if (k == 0 || (n += (size_t)k) > max) break;
    }
    close(fd);
    if (n > max) { free(t); ERR("%s is larger than 1 MiB: not a data description", p); }
    t[n] = 0;
    int fail = data_meta_parse(t, p, m, err, errlen);
    free(t);
    if (!fail && check_counts(dir, m, err, errlen)) { data_meta_free(m); fail = 1; }
    if (!fail) { m->found = 1; *found = 1; }
    return fail;
}

int data_meta_same_tokens(const DataMeta* a, const DataMeta* b, char* why, size_t n) {
    if (a->sha256[0] && b->sha256[0] ? strcmp(a->sha256, b->sha256) : strcmp(a->tokenizer, b->tokenizer)) {
        snprintf(why, n, "tokenizer '%s'%s%.12s vs '%s'%s%.12s", a->tokenizer, a->sha256[0] ? " sha256 " : "", a->sha256,
                 b->tokenizer, b->sha256[0] ? " sha256 " : "", b->sha256);
        return 0;
    }
    if (a->vocab_size != b->vocab_size) { snprintf(why, n, "vocab_size %d vs %d", a->vocab_size, b->vocab_size); return 0; }
    if (a->eod_id != b->eod_id) { snprintf(why, n, "eod_id %d vs %d", a->eod_id, b->eod_id); return 0; }
    return 1;
}

// the first description found becomes m; a later one must name the same tokens (x is consumed). 1 + err if not.
static int merge(DataMeta* m, DataMeta* x, const char* what, const char* pattern, char* err, size_t errlen) {
    if (!m->found) { *m = *x; return 0; }
    char why[512];
    int same = data_meta_same_tokens(m, x, why, sizeof why);
    if (!same) snprintf(err, errlen, "'%s' %s describe different tokens (%s: %s and %s): train on one tokenizer's data",
                        pattern, what, why, m->path, x->path);
    data_meta_free(x);
    return !same;
}

static int read_pattern(const char* pattern, DataMeta* m, char* err, size_t errlen) {
    memset(m, 0, sizeof *m);
    m->vocab_size = m->eod_id = m->bos_id = -1;
    if (!pattern || !*pattern) return 0;
    struct stat st;
    if (stat(pattern, &st) == 0 && S_ISDIR(st.st_mode)) { int f; return read_dir(pattern, m, &f, err, errlen); }
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0) return 0;   // nothing matches: the data loader says so
    char last[1024] = "";
    int fail = 0;
    for (size_t i = 0; i < g.gl_pathc && !fail; i++) {
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s", g.gl_pathv[i]);
        const char* d = dirname(tmp);
        if (!strcmp(d, last)) continue;
        snprintf(last, sizeof last, "%s", d);
        DataMeta x;
        int found;
        fail = read_dir(d, &x, &found, err, errlen);
        if (fail || !found) continue;
        fail = merge(m, &x, "spans directories whose meta.json", pattern, err, errlen);
    }
    globfree(&g);
    if (fail) data_meta_free(m);
    return fail;
}

// several sources 'GLOB[@W];GLOB[@W]' (data/shards.h): each one's description, which must all name the same tokens
int data_meta_read(const char* pattern, DataMeta* m, char* err, size_t errlen) {
    if (!pattern || !strchr(pattern, ';')) return read_pattern(pattern, m, err, errlen);
    memset(m, 0, sizeof *m);
    m->vocab_size = m->eod_id = m->bos_id = -1;
    int fail = 0;
    for (const char* p = pattern; p && !fail;) {
        const char* semi = strchr(p, ';');
        char part[1024];
        snprintf(part, sizeof part, "%.*s", (int)(semi ? (size_t)(semi - p) : strlen(p)), p);
        char* at = strrchr(part, '@');
        if (at) { char* end; strtod(at + 1, &end); if (end != at + 1 && !*end) *at = 0; }
        p = semi ? semi + 1 : NULL;
        DataMeta x;
        if ((fail = read_pattern(part, &x, err, errlen)) || !x.found) continue;
        fail = merge(m, &x, "has sources whose meta.json", pattern, err, errlen);
    }
    if (fail) data_meta_free(m);
    return fail;
}

void data_meta_free(DataMeta* m) { free(m->text); m->text = NULL; }
