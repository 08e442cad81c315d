// shards.c — llm.c token shards and the deterministic, random-access sequence loader (see shards.h).
//
// File layout (little-endian):
//   int32 header[256] = { magic, version, n_tokens, 0, ... }     1024 bytes
//   tokens[n_tokens]  uint16 (magic 20240520) or uint32 (magic 20240521)
// so a valid shard has exactly 1024 + n_tokens * token_bytes bytes.
//
// The loader keeps every shard open (one fd each) and reads windows with pread, so it holds no buffer
// and any sequence can be fetched at any time, from any thread that owns its output buffer.
#include "common/files.h"
#include "common/util.h"
#include "data/shards.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * (int64_t)sizeof(int32_t))

// ----------------------------------------------------------------------------------------------------
// errors: one line in ld->err, prefixed "data: "

static int ld_fail(Loader* ld, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(ld->err, sizeof(ld->err), "data: ");
    vsnprintf(ld->err + k, sizeof(ld->err) - k, fmt, ap);
    va_end(ap);
    for (char* c = ld->err; *c; c++) if (*c == '\n' || *c == '\r') *c = ' ';   // keep it one line
    return -1;
}

// ----------------------------------------------------------------------------------------------------
// low-level I/O: full pread / write loops (short counts and EINTR retried)

static int64_t pread_full(int fd, void* buf, int64_t n, int64_t off) {
    char* p = buf;
    int64_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, p + done, (size_t)(n - done), (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;                                   // EOF: short read
        done += r;
    }
    return done;
}

static int write_full(int fd, const void* buf, int64_t n) {
    const char* p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, (size_t)n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        p += w; n -= w;
    }
    return 0;
}

// ----------------------------------------------------------------------------------------------------
// shard_write

int shard_write(const char* path, const uint32_t* tokens, int64_t n, int token_bytes) {
    if ((token_bytes != 2 && token_bytes != 4) || n < 0 || n > INT32_MAX) { errno = EINVAL; return -1; }
    if (token_bytes == 2) {
        for (int64_t i = 0; i < n; i++) if (tokens[i] > 0xFFFF) { errno = ERANGE; return -1; }
    }
    int32_t header[SHARD_HEADER_INTS] = {0};
    header[0] = token_bytes == 2 ? SHARD_MAGIC_U16 : SHARD_MAGIC_U32;
    header[1] = SHARD_VERSION;
    header[2] = (int32_t)n;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    int rc = write_full(fd, header, sizeof(header));
    // tokens, converted through a small buffer (uint16) or written as they are (uint32)
    if (rc == 0 && token_bytes == 4) rc = write_full(fd, tokens, n * 4);
    uint16_t buf[4096];
    for (int64_t i = 0; rc == 0 && token_bytes == 2 && i < n; i += 4096) {
        int64_t m = n - i < 4096 ? n - i : 4096;
        for (int64_t j = 0; j < m; j++) buf[j] = (uint16_t)tokens[i + j];
        rc = write_full(fd, buf, m * 2);
    }
    int saved = errno;
    if (close(fd) != 0 && rc == 0) { rc = -1; saved = errno; }
    errno = saved;
    return rc;
}

// ----------------------------------------------------------------------------------------------------
// shuffle: perm(seed, epoch, i), a bijection of [0, n) computed in O(1) memory.
// A 6-round Feistel network on 2k bits (4^k >= n, k >= 1), keyed by hash(seed, epoch), maps [0, 4^k) onto
// itself; cycle-walking (re-encrypt while the value is >= n) restricts it to a bijection of [0, n).
// Since 4^k < 4n, the expected walk is under 4 steps.

#define FEISTEL_ROUNDS 6

static uint64_t feistel(uint64_t x, int k, uint64_t key) {
    uint64_t mask = (k >= 64) ? ~0ull : ((1ull << k) - 1);
    uint64_t l = (x >> k) & mask, r = x & mask;
    for (int round = 0; round < FEISTEL_ROUNDS; round++) {
        uint64_t f = mix64(r ^ mix64(key + (uint64_t)round)) & mask;
        uint64_t t = l ^ f;
        l = r; r = t;
    }
    return (l << k) | r;
}

static int64_t shuffle_index(uint64_t seed, int64_t epoch, int64_t i, int64_t n) {
    if (n <= 1) return 0;
    int k = 1;
    while (k < 31 && ((int64_t)1 << (2 * k)) < n) k++;       // n < 2^62 (stream of int64 tokens)
    uint64_t key = mix64(seed ^ mix64((uint64_t)epoch ^ 0x5DEECE66Dull));
    uint64_t x = (uint64_t)i;
    do { x = feistel(x, k, key); } while (x >= (uint64_t)n);
    return (int64_t)x;
}

// ----------------------------------------------------------------------------------------------------
// collecting the file list: glob pattern, directory (*.bin sorted by name) or one file

typedef struct { char** v; int n, cap; } PathList;

static int paths_add(PathList* pl, const char* s) {
    if (pl->n == pl->cap) {
        int cap = pl->cap ? 2 * pl->cap : 16;
        char** v = realloc(pl->v, (size_t)cap * sizeof(char*));
        if (!v) return -1;
        pl->v = v; pl->cap = cap;
    }
    if (!(pl->v[pl->n] = strdup(s))) return -1;
    pl->n++;
    return 0;
}

static void paths_free(PathList* pl) {
    for (int i = 0; i < pl->n; i++) free(pl->v[i]);
    free(pl->v);
    memset(pl, 0, sizeof(*pl));
}


// a directory: its *.bin shards; a prepared one (it holds a meta.json, as build/prepare and tools/prepare_hf write)
// means one split: its SPLIT_*.bin (train_data: the training split, never val_*.bin)
static int list_dir(Loader* ld, const char* dir, const char* split, PathList* pl) {
    DIR* d = opendir(dir);
    if (!d) return ld_fail(ld, "cannot open directory '%s': %s", dir, strerror(errno));
    struct dirent* e;
    size_t dl = strlen(dir);
    const char* sep = (dl > 0 && dir[dl - 1] == '/') ? "" : "/";
    char path[4096], prefix[32];
    snprintf(path, sizeof path, "%s%smeta.json", dir, sep);
    struct stat st;
    int prepared = lstat(path, &st) == 0;
    char want[8];   // "val|train": the first split the directory has
    char alts[8] = "";
    const char* bar = strchr(split, '|');
    snprintf(want, sizeof want, "%.*s", (int)(bar ? bar - split : (long)strlen(split)), split);
    if (bar) snprintf(alts, sizeof alts, "%.7s", bar + 1);
    const char* alt = alts[0] ? alts : NULL;
    if (prepared && alt) {
        int have = 0;
        snprintf(prefix, sizeof prefix, "%s_", want);
        for (struct dirent* x; !have && (x = readdir(d));) have = !strncmp(x->d_name, prefix, strlen(prefix)) && ends_with(x->d_name, ".bin");
        rewinddir(d);
        if (!have) snprintf(want, sizeof want, "%s", alt);
    }
    if (prepared) snprintf(ld->split, sizeof ld->split, "%s", want);
    split = want;
    snprintf(prefix, sizeof prefix, "%s_", split);
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (e->d_name[0] == '.' || !ends_with(e->d_name, ".bin")) continue;
        if (prepared && strncmp(e->d_name, prefix, strlen(prefix))) continue;
        snprintf(path, sizeof(path), "%s%s%s", dir, sep, e->d_name);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (paths_add(pl, path) != 0) rc = ld_fail(ld, "out of memory listing '%s'", dir);
    }
    closedir(d);
    if (rc == 0 && pl->n == 0 && prepared)
        return ld_fail(ld, "'%s' holds a meta.json but no %s_*.bin: a prepared directory means its %s split (prepared "
                       "with --val-frac 0?); give the shards' pattern instead", dir, split,
                       !strcmp(split, "train") ? "training" : "validation");
    if (rc == 0 && pl->n == 0) return ld_fail(ld, "no *.bin shards in directory '%s'", dir);
    if (pl->n > 1) qsort(pl->v, (size_t)pl->n, sizeof(char*), cmp_str);
    return rc;
}

static int list_glob(Loader* ld, const char* pattern, PathList* pl) {
    glob_t g;
    int r = glob(pattern, 0, NULL, &g);
    if (r == GLOB_NOMATCH) return ld_fail(ld, "no files match '%s'", pattern);
    if (r != 0) { globfree(&g); return ld_fail(ld, "cannot expand pattern '%s' (glob error %d)", pattern, r); }
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++)       // glob sorts the names
        if (paths_add(pl, g.gl_pathv[i]) != 0) rc = ld_fail(ld, "out of memory expanding '%s'", pattern);
    globfree(&g);
    return rc;
}

static int list_shards(Loader* ld, const char* pattern, const char* split, PathList* pl) {
    struct stat st;
    if (stat(pattern, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return list_dir(ld, pattern, split, pl);
        if (paths_add(pl, pattern) != 0) return ld_fail(ld, "out of memory");
        return 0;
    }
    if (!strpbrk(pattern, "*?["))                            // a plain path that does not exist
        return ld_fail(ld, "cannot open shard '%s': %s", pattern, strerror(errno));
    return list_glob(ld, pattern, pl);
}

// ----------------------------------------------------------------------------------------------------
// validating one shard: opens it into sh (fd kept open on success)

static int shard_open(Loader* ld, const char* path, Shard* sh) {
    sh->fd = -1;
    size_t len = strlen(path);
    if (len >= sizeof(sh->path)) return ld_fail(ld, "shard path too long: '%s'", path);
    memcpy(sh->path, path, len + 1);
    int fd;
    char e[1200];
    if (open_regular(NULL, "a regular file (a shard)", path, &fd, e, sizeof e)) return ld_fail(ld, "%s", e);
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return ld_fail(ld, "cannot read shard '%s': %s", path, strerror(errno)); }
    sh->dev = st.st_dev; sh->ino = st.st_ino;
    int64_t size = (int64_t)st.st_size;
    int32_t h[SHARD_HEADER_INTS];
    if (size < SHARD_HEADER_BYTES || pread_full(fd, h, SHARD_HEADER_BYTES, 0) != SHARD_HEADER_BYTES) {
        close(fd);
        return ld_fail(ld, "shard '%s' is truncated: the file has %lld bytes, less than the %lld-byte header",
                       path, (long long)size, (long long)SHARD_HEADER_BYTES);
    }
    int tb = h[0] == SHARD_MAGIC_U16 ? 2 : h[0] == SHARD_MAGIC_U32 ? 4 : 0;
    if (!tb || h[1] != SHARD_VERSION || h[2] <= 0) close(fd);
    if (!tb) return ld_fail(ld, "shard '%s' has bad magic %d (expected %d for uint16 or %d for uint32 tokens)",
                            path, h[0], SHARD_MAGIC_U16, SHARD_MAGIC_U32);
    if (h[1] != SHARD_VERSION)
        return ld_fail(ld, "shard '%s' has unsupported version %d (expected %d)", path, h[1], SHARD_VERSION);
    if (h[2] <= 0) return ld_fail(ld, "shard '%s' has token count %d in its header (must be > 0)", path, h[2]);
    int64_t expect = SHARD_HEADER_BYTES + (int64_t)h[2] * tb;
    if (size != expect) {
        close(fd);
        return ld_fail(ld, "shard '%s' is %s: header says %d tokens (%lld bytes) but the file has %lld bytes",
                       path, size < expect ? "truncated" : "too long", h[2], (long long)expect, (long long)size);
    }
    sh->n_tokens = h[2];
    sh->token_bytes = tb;
    sh->fd = fd;
    return 0;
}

// ----------------------------------------------------------------------------------------------------
// loader

void loader_close(Loader* ld) {
    for (int i = 0; i < ld->n_shards; i++) if (ld->shards[i].fd >= 0) close(ld->shards[i].fd);
    pack_free(&ld->pack);
    free(ld->shards);
    ld->shards = NULL;
    ld->n_shards = 0;
    ld->n_tokens = 0;
    ld->n_seq = 0;
}

// one source's shards, appended to ld->shards
static int open_source(Loader* ld, const char* pattern, const char* split) {
    PathList pl = {0};
    if (list_shards(ld, pattern, split, &pl) != 0) { paths_free(&pl); return -1; }
    Shard* sh = realloc(ld->shards, (size_t)(ld->n_shards + pl.n) * sizeof(Shard));
    if (!sh) { paths_free(&pl); return ld_fail(ld, "out of memory opening '%s'", pattern); }
    ld->shards = sh;
    int rc = 0;
    for (int i = 0; rc == 0 && i < pl.n; i++) {
        Shard* x = &ld->shards[ld->n_shards];
        rc = shard_open(ld, pl.v[i], x);
        if (rc != 0) break;
        x->first = ld->n_tokens;
        ld->n_tokens += x->n_tokens;
        ld->n_shards++;
    }
    paths_free(&pl);
    return rc;
}

// the same file (device and inode: also through a link) as two shards of the stream; 0 when none
static int refuse_twice(Loader* ld, const char* pattern) {
    for (int i = 0; i < ld->n_shards; i++)
        for (int j = i + 1; j < ld->n_shards; j++) {
            const Shard *a = &ld->shards[i], *b = &ld->shards[j];
            if (a->dev != b->dev || a->ino != b->ino) continue;
            int sa = 0, sb = 0;
            while (sa + 1 < ld->n_src && ld->src_first[sa + 1] <= a->first) sa++;
            while (sb + 1 < ld->n_src && ld->src_first[sb + 1] <= b->first) sb++;
            if (sa != sb)
                return ld_fail(ld, "'%s' is in '%s' twice (sources %d and %d): each shard is read once; a source's "
                               "weight ('GLOB@W') uses it more often", b->path, pattern, sa + 1, sb + 1);
            return ld_fail(ld, "'%s' and '%s' are the same file (a link): its tokens would be in the stream twice; give "
                           "each shard once", a->path, b->path);
        }
    return 0;
}

int loader_open(Loader* ld, const char* pattern, int seq_len, int vocab_size, int shuffle, uint64_t seed) {
    return loader_open_split(ld, pattern, "train", seq_len, vocab_size, shuffle, seed);
}

int loader_open_split(Loader* ld, const char* pattern, const char* split, int seq_len, int vocab_size, int shuffle,
                      uint64_t seed) {
    memset(ld, 0, sizeof(*ld));
    ld->seq_len = seq_len;
    ld->shuffle = shuffle;
    ld->seed = seed;
    ld->vocab_size = vocab_size;
    if (seq_len <= 0) return ld_fail(ld, "seq_len must be > 0 (got %d)", seq_len);
    if (vocab_size <= 0) return ld_fail(ld, "vocab_size must be > 0 (got %d)", vocab_size);
    int rc = 0;
    const char* p = pattern;
    do {   // sources separated by ';', each 'PATTERN[@WEIGHT]'
        const char* semi = strchr(p, ';');
        size_t n = semi ? (size_t)(semi - p) : strlen(p);
        if (ld->n_src == LOADER_MAX_SOURCES) { rc = ld_fail(ld, "more than %d sources in '%s'", LOADER_MAX_SOURCES, pattern); break; }
        char* part = &ld->src_pattern[ld->n_src][0];
        if (n >= sizeof ld->src_pattern[0]) { rc = ld_fail(ld, "source pattern too long in '%s'", pattern); break; }
        memcpy(part, p, n); part[n] = 0;
        double w = 1.0;
        char* at = strrchr(part, '@');   // 'GLOB@W': a weight when all after the last '@' is a number
        if (at) {
            char* end;
            double x = strtod(at + 1, &end);
            if (end != at + 1 && !*end) {
                if (!(x >= 0 && x <= 1000)) { rc = ld_fail(ld, "source '%s': its weight %s must be in [0, 1000]", part, at + 1); break; }
                w = x;
                *at = 0;
            }
        }
        if (!part[0]) { rc = ld_fail(ld, "an empty source in '%s'", pattern); break; }
        ld->weight[ld->n_src] = w;
        ld->src_first[ld->n_src] = ld->n_tokens;
        if ((rc = open_source(ld, part, split)) != 0) break;
        ld->n_src++;
        ld->src_first[ld->n_src] = ld->n_tokens;
        p = semi ? semi + 1 : NULL;
    } while (p);
    if (rc == 0) rc = refuse_twice(ld, pattern);
    if (rc == 0 && ld->n_tokens < (int64_t)seq_len + 1)
        rc = ld_fail(ld, "'%s' has %lld tokens, fewer than seq_len + 1 = %lld needed for one sequence",
                     pattern, (long long)ld->n_tokens, (long long)seq_len + 1);
    if (rc != 0) { loader_close(ld); return rc; }
    ld->n_seq = (ld->n_tokens - 1) / seq_len;
    return 0;
}

int loader_weighted(const Loader* ld) {
    for (int s = 0; s < ld->n_src; s++) if (ld->weight[s] != 1.0) return 1;
    return 0;
}

int loader_read_fn(void* ld, int64_t pos, int64_t n, int32_t* out) { return loader_read(ld, pos, n, out); }

int loader_pack(Loader* ld, int mode, int eod, int buffer, int64_t upsample_len, double upsample_factor, double max_bytes) {
    PackOpts o = { .mode = mode, .T = ld->seq_len, .eod = eod, .buffer = buffer,
                   .threshold = upsample_len > 0 ? upsample_len : INT64_MAX, .factor = upsample_len > 0 ? upsample_factor : 1.0,
                   .weight = ld->weight, .src_first = ld->src_first, .n_src = ld->n_src, .seed = ld->seed,
                   .max_bytes = max_bytes };
    char e[600] = "";
    ld->err[0] = 0;
    if (pack_build(&ld->pack, &o, ld->n_tokens, loader_read_fn, ld, e, sizeof e)) {
        if (!e[0] && ld->err[0]) return -1;   // a read error, already in ld->err
        return ld_fail(ld, "%s", strncmp(e, "data: ", 6) ? e : e + 6);
    }
    ld->n_seq = ld->pack.n_win;
    return 0;
}

// index of the shard holding stream position pos (binary search on .first)
static int find_shard(const Loader* ld, int64_t pos) {
    int lo = 0, hi = ld->n_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (ld->shards[mid].first <= pos) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// Read tokens [off, off+n) of one shard into out[0..n) as int32, validating against vocab_size.
// The raw bytes are read into the front of out and widened in place from the back (uint16 -> int32).
static int read_span(Loader* ld, const Shard* sh, int64_t off, int64_t n, int32_t* out) {
    int tb = sh->token_bytes;
    unsigned char* raw = (unsigned char*)out;
    int64_t want = n * tb;
    int64_t got = pread_full(sh->fd, raw, want, SHARD_HEADER_BYTES + off * tb);
    if (got != want)
        return ld_fail(ld, "cannot read shard '%s' at token %lld: %s", sh->path, (long long)off,
                       got < 0 ? strerror(errno) : "unexpected end of file");
    for (int64_t i = 0; i < n; i++) {                        // validate first: report the first bad id
        uint32_t v;
        if (tb == 2) { uint16_t u; memcpy(&u, raw + 2 * i, 2); v = u; }
        else memcpy(&v, raw + 4 * i, 4);
        if (v >= (uint32_t)ld->vocab_size)
            return ld_fail(ld, "shard '%s' has token id %u >= vocab_size %d at token offset %lld", sh->path,
                           v, ld->vocab_size, (long long)(off + i));
    }
    // uint32 ids (< vocab_size <= INT32_MAX) are already int32 in place; uint16 ids are widened from the back,
    // which never overwrites a byte still to be read (element i moves from bytes 2i.. to 4i..)
    if (tb == 2)
        for (int64_t i = n - 1; i >= 0; i--) { uint16_t u; memcpy(&u, raw + 2 * i, 2); out[i] = u; }
    return 0;
}

int loader_read(Loader* ld, int64_t pos, int64_t n, int32_t* tokens) {
    if (pos < 0 || n < 0 || pos + n > ld->n_tokens)
        return ld_fail(ld, "token range [%lld, %lld) is outside the stream of %lld tokens", (long long)pos,
                       (long long)(pos + n), (long long)ld->n_tokens);
    int64_t left = n;
    int32_t* out = tokens;
    for (int s = find_shard(ld, pos); left > 0; s++) {       // the span may cross shards
        const Shard* sh = &ld->shards[s];
        int64_t off = pos - sh->first;
        int64_t m = sh->n_tokens - off < left ? sh->n_tokens - off : left;
        if (read_span(ld, sh, off, m, out) != 0) return -1;
        out += m; pos += m; left -= m;
    }
    return 0;
}

int loader_get(Loader* ld, int64_t g, int32_t* tokens) {
    if (ld->n_seq <= 0) return ld_fail(ld, "loader is not open");
    if (g < 0) return ld_fail(ld, "sequence index %lld is negative", (long long)g);
    int64_t epoch = g / ld->n_seq, i = g % ld->n_seq;
    int64_t seq = ld->shuffle ? shuffle_index(ld->seed, epoch, i, ld->n_seq) : i;
    if (ld->pack.n_win > 0) return pack_window(&ld->pack, seq, loader_read_fn, ld, tokens);
    return loader_read(ld, seq * ld->seq_len, (int64_t)ld->seq_len + 1, tokens);
}
