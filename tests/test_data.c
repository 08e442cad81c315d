// test_data.c — data/shards.c: shard_write format, loader windows across shards, the shuffle permutation,
// epoch wrap-around and every loader error (with the file named in the message).
#include "data/shards.h"
#include "tests/testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_tmp[256];                  // temp directory, removed at the end

static char* tpath(const char* name) {   // returns a fresh heap path inside g_tmp
    char* p = malloc(strlen(g_tmp) + strlen(name) + 2);
    sprintf(p, "%s/%s", g_tmp, name);
    return p;
}

static int64_t file_size(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

static void patch_int(const char* path, int index, int32_t value) {   // overwrite header[index]
    int fd = open(path, O_WRONLY);
    if (fd < 0 || pwrite(fd, &value, 4, index * 4) != 4) printf("cannot patch %s\n", path);
    if (fd >= 0) close(fd);
}

static int one_line(const char* s) { return strchr(s, '\n') == NULL && strlen(s) > 0; }

// error `err` is one line and contains every non-NULL needle
static int err_has(const char* err, const char* a, const char* b, const char* c) {
    return one_line(err) && strstr(err, a) && (!b || strstr(err, b)) && (!c || strstr(err, c));
}

static int write_shard(const char* name, const uint32_t* t, int64_t n, int tb) {
    char* p = tpath(name);
    int rc = shard_write(p, t, n, tb);
    free(p);
    return rc;
}

// ----------------------------------------------------------------------------------------------------

static void test_write_format(void) {
    uint32_t t[5] = {0, 1, 256, 65535, 7};
    char* p = tpath("fmt16.bin");
    CHECK(shard_write(p, t, 5, 2) == 0, "shard_write u16");
    CHECK(file_size(p) == 1024 + 10, "u16 shard size 1034 (got %lld)", (long long)file_size(p));
    FILE* f = fopen(p, "rb");
    int32_t h[256]; uint16_t u[5];
    int ok = f && fread(h, 4, 256, f) == 256 && fread(u, 2, 5, f) == 5;
    if (f) fclose(f);
    int zeros = 1;
    for (int i = 3; i < 256; i++) zeros &= h[i] == 0;
    CHECK(ok && h[0] == SHARD_MAGIC_U16 && h[1] == 1 && h[2] == 5 && zeros, "u16 header magic/version/n, rest 0");
    CHECK(ok && u[0] == 0 && u[1] == 1 && u[2] == 256 && u[3] == 65535 && u[4] == 7, "u16 payload");
    free(p);

    uint32_t t32[3] = {70000, 0, 4000000000u};
    p = tpath("fmt32.bin");
    CHECK(shard_write(p, t32, 3, 4) == 0, "shard_write u32");
    f = fopen(p, "rb");
    uint32_t v[3];
    ok = f && fread(h, 4, 256, f) == 256 && fread(v, 4, 3, f) == 3;
    if (f) fclose(f);
    CHECK(ok && h[0] == SHARD_MAGIC_U32 && h[1] == 1 && h[2] == 3 && file_size(p) == 1024 + 12, "u32 header and size");
    CHECK(ok && v[0] == 70000 && v[1] == 0 && v[2] == 4000000000u, "u32 payload");
    free(p);

    uint32_t big[2] = {1, 65536};
    p = tpath("bad16.bin");
    errno = 0;
    CHECK(shard_write(p, big, 2, 2) != 0 && errno == ERANGE, "u16 shard_write rejects id 65536 (ERANGE)");
    CHECK(shard_write(p, big, 2, 3) != 0 && errno == EINVAL, "token_bytes 3 rejected (EINVAL)");
    CHECK(shard_write("/nonexistent_dir_ringlm/x.bin", big, 1, 4) != 0 && errno == ENOENT, "unwritable path -> ENOENT");
    free(p);
}

// a directory with a u16 shard (1000 tokens) then a u32 shard (537 tokens): windows over the concatenation
static void test_windows(void) {
    enum { NA = 1000, NB = 537, N = NA + NB, S = 64 };
    static uint32_t stream[N];
    for (int i = 0; i < N; i++) stream[i] = i < NA ? (uint32_t)(i * 7 % 60000) : 60000u + (uint32_t)(i * 13 % 9000);
    char* dir = tpath("mixed");
    mkdir(dir, 0755);
    CHECK(write_shard("mixed/b_001.bin", stream + NA, NB, 4) == 0 && write_shard("mixed/a_000.bin", stream, NA, 2) == 0,
          "write mixed u16 + u32 shards");
    char* junk = tpath("mixed/notes.txt");          // not *.bin: ignored in directory mode
    FILE* f = fopen(junk, "w"); if (f) { fputs("x", f); fclose(f); }
    free(junk);

    const char* patterns[3] = {"mixed", "mixed/*.bin", "mixed/"};
    for (int k = 0; k < 3; k++) {
        char* pat = tpath(patterns[k]);
        Loader ld;
        int rc = loader_open(&ld, pat, S, 70000, 0, 0);
        CHECK(rc == 0, "open '%s' (%s)", patterns[k], rc ? ld.err : "ok");
        if (rc) { free(pat); continue; }
        CHECK(ld.n_shards == 2 && ld.n_tokens == N && ld.n_seq == (N - 1) / S,
              "'%s': 2 shards, %d tokens, n_seq %d (got %d, %lld, %lld)", patterns[k], N, (N - 1) / S, ld.n_shards,
              (long long)ld.n_tokens, (long long)ld.n_seq);
        CHECK(ld.shards[0].token_bytes == 2 && ld.shards[1].token_bytes == 4 && ld.shards[1].first == NA,
              "'%s': sorted by name (u16 first), second shard starts at %d", patterns[k], NA);
        int32_t tok[S + 1];
        int all = 1, crossed = 0;
        for (int64_t i = 0; i < ld.n_seq; i++) {
            if (loader_get(&ld, i, tok) != 0) { all = 0; break; }
            for (int j = 0; j <= S; j++) all &= tok[j] == (int32_t)stream[i * S + j];
            crossed |= i * S < NA && i * S + S >= NA;
        }
        CHECK(all && crossed, "'%s': every window equals the stream slice (incl. one crossing the boundary)", patterns[k]);
        int64_t b = NA / S;                         // the window that crosses the shard boundary
        int ok = loader_get(&ld, b, tok) == 0;
        CHECK(ok && b * S < NA && b * S + S >= NA && tok[NA - b * S - 1] == (int32_t)stream[NA - 1] &&
              tok[NA - b * S] == (int32_t)stream[NA], "'%s': window %lld spans the two shards", patterns[k], (long long)b);
        ok = loader_get(&ld, ld.n_seq + 3, tok) == 0;
        CHECK(ok && tok[0] == (int32_t)stream[3 * S] && tok[S] == (int32_t)stream[4 * S],
              "'%s': unshuffled g = n_seq + 3 wraps to sequence 3", patterns[k]);
        CHECK(loader_get(&ld, -1, tok) != 0 && one_line(ld.err), "'%s': negative g rejected: %s", patterns[k], ld.err);
        loader_close(&ld);
        loader_close(&ld);                          // idempotent
        free(pat);
    }
    // a single file
    char* one = tpath("mixed/a_000.bin");
    Loader ld;
    int rc = loader_open(&ld, one, 10, 70000, 0, 0);
    int32_t tok[11];
    CHECK(rc == 0 && ld.n_shards == 1 && ld.n_seq == (NA - 1) / 10 && loader_get(&ld, 5, tok) == 0 &&
          tok[0] == (int32_t)stream[50] && tok[10] == (int32_t)stream[60], "single file: n_seq and a window");
    if (rc == 0) loader_close(&ld);
    // exactly seq_len + 1 tokens: one sequence
    rc = loader_open(&ld, one, NA - 1, 70000, 1, 5);
    CHECK(rc == 0 && ld.n_seq == 1, "n_tokens == seq_len + 1 gives n_seq 1");
    if (rc == 0) loader_close(&ld);
    free(one);
    free(dir);
}

// stream[k] = k (u32, split over 2 shards) so a window's first token / seq_len is its sequence index
static int make_identity(const char* name, int64_t n_tokens) {
    uint32_t* t = malloc(n_tokens * sizeof(uint32_t));
    for (int64_t i = 0; i < n_tokens; i++) t[i] = (uint32_t)i;
    char a[128], b[128];
    snprintf(a, sizeof(a), "%s_0.bin", name);
    snprintf(b, sizeof(b), "%s_1.bin", name);
    int64_t h = n_tokens / 2 > 0 ? n_tokens / 2 : 1;
    int rc = write_shard(a, t, h, 4);
    if (rc == 0 && n_tokens > h) rc = write_shard(b, t + h, n_tokens - h, 4);
    free(t);
    return rc;
}

// order[i] = sequence visited at g = base + i, for i < n; returns 0 on success
static int visit(Loader* ld, int64_t base, int64_t n, int64_t* order) {
    int32_t* tok = malloc((ld->seq_len + 1) * sizeof(int32_t));
    int rc = 0;
    for (int64_t i = 0; rc == 0 && i < n; i++) {
        rc = loader_get(ld, base + i, tok);
        order[i] = tok[0] / ld->seq_len;
        if (tok[0] % ld->seq_len) rc = -1;
    }
    free(tok);
    return rc;
}

static int is_perm(const int64_t* order, int64_t n) {
    char* seen = calloc(n, 1);
    int ok = 1;
    for (int64_t i = 0; i < n && ok; i++) {
        if (order[i] < 0 || order[i] >= n || seen[order[i]]) ok = 0;
        else seen[order[i]] = 1;
    }
    free(seen);
    return ok;
}

static int same(const int64_t* a, const int64_t* b, int64_t n) { return memcmp(a, b, n * sizeof(int64_t)) == 0; }

static int is_identity(const int64_t* a, int64_t n) {
    for (int64_t i = 0; i < n; i++) if (a[i] != i) return 0;
    return 1;
}

static void test_shuffle(void) {
    const int64_t sizes[] = {1, 2, 3, 4, 5, 7, 16, 17, 100, 255, 1000, 4097, 65537};
    const int seq_lens[] = {1, 3};
    for (int si = 0; si < 2; si++) {
        int S = seq_lens[si];
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            int64_t n = sizes[k];
            char name[64], pat[96];
            snprintf(name, sizeof(name), "id_%d_%lld", S, (long long)n);
            snprintf(pat, sizeof(pat), "%s_*.bin", name);
            char* full = tpath(pat);
            if (make_identity(name, n * S + 1) != 0) { CHECK(0, "write identity stream n=%lld", (long long)n); continue; }
            Loader ld, ld2, ld3;
            int rc = loader_open(&ld, full, S, 1 << 30, 1, 1234);
            rc |= loader_open(&ld2, full, S, 1 << 30, 1, 1234);
            rc |= loader_open(&ld3, full, S, 1 << 30, 1, 99);
            CHECK(rc == 0 && ld.n_seq == n, "open shuffled identity stream seq_len %d n_seq %lld", S, (long long)n);
            if (rc) { free(full); continue; }
            int64_t* e0 = malloc(n * sizeof(int64_t)); int64_t* e1 = malloc(n * sizeof(int64_t));
            int64_t* r0 = malloc(n * sizeof(int64_t)); int64_t* s0 = malloc(n * sizeof(int64_t));
            int64_t* e5 = malloc(n * sizeof(int64_t));
            rc = visit(&ld, 0, n, e0) | visit(&ld, n, n, e1) | visit(&ld, 5 * n, n, e5);
            rc |= visit(&ld2, 0, n, r0) | visit(&ld3, 0, n, s0);
            CHECK(rc == 0 && is_perm(e0, n) && is_perm(e1, n) && is_perm(e5, n) && is_perm(s0, n),
                  "seq_len %d n_seq %lld: epochs 0, 1, 5 and another seed are permutations", S, (long long)n);
            CHECK(rc == 0 && same(e0, r0, n), "n_seq %lld: same seed -> same order (fresh loader)", (long long)n);
            if (n >= 100) {
                CHECK(!same(e0, e1, n) && !same(e0, e5, n), "n_seq %lld: order differs by epoch", (long long)n);
                CHECK(!same(e0, s0, n), "n_seq %lld: order differs by seed", (long long)n);
                CHECK(!is_identity(e0, n), "n_seq %lld: shuffled order is not the identity", (long long)n);
            }
            // random access: g in epoch 1 fetched directly equals the sequential visit
            int64_t one;
            CHECK(visit(&ld2, n + n / 2, 1, &one) == 0 && one == e1[n / 2], "n_seq %lld: random access g = %lld",
                  (long long)n, (long long)(n + n / 2));
            loader_close(&ld); loader_close(&ld2); loader_close(&ld3);
            // shuffle off: identity in every epoch
            rc = loader_open(&ld, full, S, 1 << 30, 0, 1234);
            rc = rc || visit(&ld, 2 * n, n, e0);
            CHECK(rc == 0 && is_identity(e0, n), "n_seq %lld: shuffle off visits in order (epoch 2)", (long long)n);
            loader_close(&ld);
            free(e0); free(e1); free(r0); free(s0); free(e5); free(full);
        }
    }
}

// ----------------------------------------------------------------------------------------------------
// errors

static void expect_open_error(const char* what, const char* pattern, int seq_len, int vocab,
                              const char* a, const char* b, const char* c) {
    Loader ld;
    int rc = loader_open(&ld, pattern, seq_len, vocab, 0, 0);
    CHECK(rc != 0 && err_has(ld.err, a, b, c), "%s -> error: %s", what, rc ? ld.err : "(opened!)");
    if (rc == 0) loader_close(&ld);
    CHECK(ld.shards == NULL && ld.n_shards == 0, "%s: failed open holds no shards", what);
}

static void test_errors(void) {
    uint32_t t[100];
    for (int i = 0; i < 100; i++) t[i] = (uint32_t)i;

    char* missing = tpath("missing.bin");
    expect_open_error("missing file", missing, 4, 256, missing, "No such file", NULL);
    free(missing);

    char* nomatch = tpath("nothing_*.bin");
    expect_open_error("glob without matches", nomatch, 4, 256, nomatch, "no files match", NULL);
    free(nomatch);

    char* empty = tpath("emptydir");
    mkdir(empty, 0755);
    expect_open_error("directory without *.bin", empty, 4, 256, empty, "no *.bin", NULL);
    free(empty);

    char* trunc = tpath("trunc.bin");
    write_shard("trunc.bin", t, 100, 2);
    if (truncate(trunc, 1024 + 150) != 0) printf("truncate failed\n");
    expect_open_error("truncated shard", trunc, 4, 256, trunc, "truncated", "1224 bytes");
    Loader ld;
    if (loader_open(&ld, trunc, 4, 256, 0, 0) != 0) CHECK(strstr(ld.err, "1174 bytes") != NULL, "truncated: actual size 1174 named");
    if (truncate(trunc, 1000) != 0) printf("truncate failed\n");
    expect_open_error("shard shorter than its header", trunc, 4, 256, trunc, "truncated", "1000 bytes");
    free(trunc);

    char* longer = tpath("long.bin");
    write_shard("long.bin", t, 100, 2);
    if (truncate(longer, 1024 + 202) != 0) printf("truncate failed\n");
    expect_open_error("shard with trailing bytes", longer, 4, 256, longer, "1224 bytes", "1226 bytes");
    free(longer);

    char* magic = tpath("magic.bin");
    write_shard("magic.bin", t, 100, 2);
    patch_int(magic, 0, 12345);
    expect_open_error("wrong magic", magic, 4, 256, magic, "magic", "12345");
    free(magic);

    char* version = tpath("version.bin");
    write_shard("version.bin", t, 100, 4);
    patch_int(version, 1, 7);
    expect_open_error("wrong version", version, 4, 256, version, "version", "7");
    free(version);

    char* zero = tpath("zero.bin");
    write_shard("zero.bin", t, 0, 2);
    expect_open_error("zero tokens in header", zero, 4, 256, zero, "token count 0", NULL);
    free(zero);

    // a bad shard among good ones: the bad file is named, not the pattern
    char* dir = tpath("withbad");
    mkdir(dir, 0755);
    write_shard("withbad/a.bin", t, 100, 2);
    write_shard("withbad/b.bin", t, 100, 2);
    char* bad = tpath("withbad/b.bin");
    patch_int(bad, 0, 20240000);
    expect_open_error("bad second shard of a directory", dir, 4, 256, bad, "20240000", NULL);
    free(bad); free(dir);

    char* few = tpath("few.bin");
    write_shard("few.bin", t, 10, 2);
    expect_open_error("too few tokens", few, 10, 256, few, "10 tokens", "11");
    free(few);

    // token >= vocab_size: opens, then the window holding it fails naming file, offset and value
    uint32_t v[50];
    for (int i = 0; i < 50; i++) v[i] = (uint32_t)(i % 200);
    v[37] = 300;
    write_shard("vocab_a.bin", t, 20, 2);
    write_shard("vocab_b.bin", v, 50, 2);
    char* vp = tpath("vocab_*.bin");
    char* vb = tpath("vocab_b.bin");
    int rc = loader_open(&ld, vp, 10, 257, 0, 0);
    CHECK(rc == 0 && ld.n_seq == 6, "shards with an out-of-vocab id still open (n_seq 6)");
    if (rc == 0) {
        int32_t tok[11];
        CHECK(loader_get(&ld, 2, tok) == 0, "windows before the bad token read fine");
        rc = loader_get(&ld, 5, tok);               // tokens 50..60: stream 57 = vocab_b offset 37
        CHECK(rc != 0 && err_has(ld.err, vb, "300", "offset 37"), "token >= vocab_size -> error: %s", ld.err);
        CHECK(strstr(ld.err, "257") != NULL, "error names vocab_size 257");
        loader_close(&ld);
    }
    free(vp); free(vb);

    expect_open_error("seq_len 0", "whatever", 0, 256, "seq_len", NULL, NULL);
}

// ----------------------------------------------------------------------------------------------------

static void rm_tree(const char* dir) {
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
}

int main(void) {
    snprintf(g_tmp, sizeof(g_tmp), "%s/ringlm_test_data_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_tmp)) { printf("FAIL cannot create a temp dir\n0 passed, 1 failed\n"); return 1; }
    test_write_format();
    test_windows();
    test_shuffle();
    test_errors();
    rm_tree(g_tmp);
    return tu_finish();
}
