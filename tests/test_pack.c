// test_pack.c — data/pack.c's windows against properties checked here by brute force on synthetic streams:
// best_fit never cuts a document shorter than a window and places every target exactly once; doc_start starts
// every window at a document's start or a long document's continuation; padding is counted from the windows
// themselves and sits only at a window's end; the table is deterministic; stream statistics equal a brute-force
// count; upsampling's proportions are within sampling error of the configured ones.
#include "data/pack.h"
#include "tests/testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EOD 999
static int32_t* S;                 // the stream
static int64_t NS;

static int rd(void* ctx, int64_t pos, int64_t n, int32_t* out) {
    (void)ctx;
    if (pos < 0 || pos + n > NS) return 1;
    memcpy(out, S + pos, (size_t)n * sizeof(int32_t));
    return 0;
}

static uint64_t rs = 88172645463325252ull;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }

// a stream of nd documents (eod + content) with lengths drawn from a heavy-tailed mix; returns starts/lens
static void make_stream(int nd, int64_t* st, int64_t* ln, int maxlen) {
    NS = 0;
    for (int i = 0; i < nd; i++) {
        uint64_t r = rnd() % 100;
        int64_t L = r < 70 ? 2 + (int64_t)(rnd() % 40) : r < 95 ? 40 + (int64_t)(rnd() % 100) : 100 + (int64_t)(rnd() % maxlen);
        st[i] = NS; ln[i] = L; NS += L;
    }
    S = malloc((size_t)NS * sizeof(int32_t));
    for (int i = 0; i < nd; i++) {
        S[st[i]] = EOD;
        for (int64_t k = 1; k < ln[i]; k++) S[st[i] + k] = (int32_t)(rnd() % 500);
    }
}

// every target of every document exactly once: within a segment, slot j predicts the token at j + 1; the
// stream position of each predicted token (inside its own document) is counted
static int targets_once(const Pack* p, int nd, const int64_t* st, const int64_t* ln, int allow_repeat, int64_t* twice) {
    int* cnt = calloc((size_t)NS, sizeof(int));
    for (int64_t s = 0; s < p->first[p->n_win]; s++)
        for (int64_t k = 1; k < p->seg[s].len; k++) cnt[p->seg[s].start + k]++;
    int ok = 1;
    *twice = 0;
    for (int i = 0; i < nd; i++)
        for (int64_t k = 1; k < ln[i]; k++) {
            int c = cnt[st[i] + k];
            if (c == 0 || (c > 1 && !allow_repeat)) ok = 0;
            if (c > 1) *twice += c - 1;
        }
    free(cnt);
    return ok;
}

// best-fit decreasing by brute force, one round over all documents: a longer document than the window fills whole
// windows and leaves its remainder's room; each shorter one, longest first, goes to the open window with the least
// room that holds it (a new window when none does). Windows and padding (the rooms left) do not depend on which of
// several windows with equal room is taken
static void bfd_reference(const int64_t* ln, int nd, int W, int64_t* nwin, int64_t* pad) {
    int T = W - 1;
    int64_t* room = malloc(((size_t)nd * 8 + 8) * sizeof(int64_t));
    int64_t nr = 0, nw = 0;
    int64_t* idx = malloc((size_t)nd * sizeof(int64_t));
    int ni = 0;
    for (int i = 0; i < nd; i++) {
        if (ln[i] <= W) { idx[ni++] = i; continue; }
        int64_t off = 0;
        for (; off + W < ln[i]; off += T) nw++;
        nw++; room[nr++] = W - (ln[i] - off);
    }
    for (int a = 1; a < ni; a++)   // longest first, ties in stream order (insertion sort: stable)
        for (int b = a; b > 0 && ln[idx[b]] > ln[idx[b - 1]]; b--) { int64_t x = idx[b]; idx[b] = idx[b - 1]; idx[b - 1] = x; }
    for (int k = 0; k < ni; k++) {
        int64_t L = ln[idx[k]], best = -1;
        for (int64_t r = 0; r < nr; r++) if (room[r] >= L && (best < 0 || room[r] < room[best])) best = r;
        if (best < 0) { nw++; room[nr++] = W - L; } else room[best] -= L;
    }
    *pad = 0;
    for (int64_t r = 0; r < nr; r++) *pad += room[r];
    *nwin = nw;
    free(room); free(idx);
}

// the stream of documents of these lengths (eod + content)
static void set_stream(const int64_t* ln, int nd, int64_t* st) {
    free(S); NS = 0;
    for (int i = 0; i < nd; i++) { st[i] = NS; NS += ln[i]; }
    S = malloc((size_t)NS * sizeof(int32_t));
    for (int i = 0; i < nd; i++) { S[st[i]] = EOD; for (int64_t k = 1; k < ln[i]; k++) S[st[i] + k] = (int32_t)(rnd() % 500); }
}

int main(void) {
    enum { ND = 3000, T = 127, W = T + 1 };
    int64_t* st = malloc(ND * sizeof(int64_t));
    int64_t* ln = malloc(ND * sizeof(int64_t));
    make_stream(ND, st, ln, 600);
    int64_t nshort = 0;
    for (int i = 0; i < ND; i++) nshort += ln[i] <= W;
    char err[512];
    int32_t* win = malloc(W * sizeof(int32_t));

    // ---- best_fit ----
    PackOpts o = { .mode = PACK_BEST_FIT, .T = T, .eod = EOD, .buffer = 512, .factor = 1.0, .seed = 7 };
    Pack p;
    int rc = pack_build(&p, &o, NS, rd, NULL, err, sizeof err);
    CHECK(rc == 0, "best_fit builds: %lld windows from %d documents (%lld short)", (long long)p.n_win, ND, (long long)nshort);
    int64_t whole = 0, pad = 0, pad_inside = 0, twice;
    unsigned char* seen = calloc(ND, 1);
    for (int64_t w = 0; w < p.n_win; w++) {
        pack_window(&p, w, rd, NULL, win);
        int j = W;
        while (j > 0 && win[j - 1] == PACK_PAD) j--;
        pad += W - j;
        for (int k = 0; k < j; k++) pad_inside += win[k] == PACK_PAD;
        for (int64_t s = p.first[w]; s < p.first[w + 1]; s++)
            for (int i = 0; i < ND; i++)
                if (st[i] == p.seg[s].start && ln[i] == p.seg[s].len && !seen[i]) { seen[i] = 1; whole++; break; }
    }
    int64_t short_whole = 0;
    for (int i = 0; i < ND; i++) short_whole += seen[i] && ln[i] <= W;
    CHECK(short_whole == nshort && p.st.short_cut == 0, "best_fit: all %lld documents shorter than a window lie whole in one (stats: %lld cut)",
          (long long)nshort, (long long)p.st.short_cut);
    CHECK(targets_once(&p, ND, st, ln, 0, &twice), "best_fit: every target of every document exactly once");
    CHECK(pad == p.st.pad && pad_inside == 0, "best_fit: padding only at window ends, %lld slots = stats %lld (%.2f%% of %lld)",
          (long long)pad, (long long)p.st.pad, 100.0 * pad / (double)p.st.slots, (long long)p.st.slots);
    CHECK((double)pad / (double)p.st.slots < 0.05, "best_fit: padding %.2f%% < 5%% on this length mix", 100.0 * pad / (double)p.st.slots);
    int first_ok = 1;
    for (int64_t w = 0; w < p.n_win; w++) {   // a segment that is not a document's start sits at slot 0
        for (int64_t s = p.first[w]; s < p.first[w + 1]; s++)
            if (S[p.seg[s].start] != EOD && p.seg[s].slot != 0) first_ok = 0;
    }
    CHECK(first_ok, "best_fit: pieces that do not start a document (long documents' continuations) start their window");
    Pack q;
    pack_build(&q, &o, NS, rd, NULL, err, sizeof err);
    CHECK(q.n_win == p.n_win && !memcmp(q.first, p.first, (p.n_win + 1) * sizeof(int64_t)) &&
          !memcmp(q.seg, p.seg, p.first[p.n_win] * sizeof(PackSeg)), "best_fit: the same table when built again");
    pack_free(&q);
    o.buffer = 1;
    pack_build(&q, &o, NS, rd, NULL, err, sizeof err);
    CHECK(q.st.pad > p.st.pad, "best_fit over a buffer of 1 document pads more (%.2f%%) than over 512 (%.2f%%)",
          100.0 * q.st.pad / (double)q.st.slots, 100.0 * p.st.pad / (double)p.st.slots);
    pack_free(&q);
    // quality, not only validity: one round over all documents gives the windows and padding of best-fit decreasing
    // computed by brute force
    o.buffer = ND;
    pack_build(&q, &o, NS, rd, NULL, err, sizeof err);
    int64_t bw, bp;
    bfd_reference(ln, ND, W, &bw, &bp);
    CHECK(q.n_win == bw && q.st.pad == bp, "best_fit over one round of %d documents: %lld windows, %lld padding slots = brute-force "
          "best-fit decreasing %lld, %lld", ND, (long long)q.n_win, (long long)q.st.pad, (long long)bw, (long long)bp);
    pack_free(&q);
    pack_free(&p);

    // documents that pair up to fill windows exactly (room equal to a length, at bit-word edges 63/64/65 too): no
    // padding at all, whatever the order in the stream
    {
        int64_t pl[] = { 28, 100, 64, 64, 65, 63, 1, 127, 70, 58, 100, 28, 127, 1, 64, 64, 96, 32, 33, 95 };
        int npl = (int)(sizeof pl / sizeof pl[0]);
        int64_t pst[32];
        set_stream(pl, npl, pst);
        PackOpts e = o; e.buffer = npl;
        pack_build(&q, &e, NS, rd, NULL, err, sizeof err);
        bfd_reference(pl, npl, W, &bw, &bp);
        CHECK(q.n_win == npl / 2 && q.st.pad == 0 && bw == npl / 2 && bp == 0,
              "best_fit: %d documents that pair up to %d slots fill %lld windows with %lld padding (brute force %lld, %lld)",
              npl, W, (long long)q.n_win, (long long)q.st.pad, (long long)bw, (long long)bp);
        pack_free(&q);
        set_stream(ln, ND, st);   // back to the main stream (same lengths; new contents)
    }

    // ---- doc_start ----
    o.mode = PACK_DOC_START; o.buffer = 0;
    rc = pack_build(&p, &o, NS, rd, NULL, err, sizeof err);
    int start_ok = rc == 0, cont = 0;
    for (int64_t w = 0; w < p.n_win && start_ok; w++) {
        PackSeg f = p.seg[p.first[w]];
        if (f.slot != 0) start_ok = 0;
        if (S[f.start] != EOD) {   // a continuation: the previous window's first segment, T further on
            PackSeg g = p.seg[p.first[w - 1]];
            if (!(w > 0 && f.start == g.start + T && g.len == W)) start_ok = 0;
            cont++;
        }
        for (int64_t s = p.first[w] + 1; s < p.first[w + 1]; s++) if (S[p.seg[s].start] != EOD) start_ok = 0;
    }
    CHECK(start_ok && cont > 0, "doc_start: every window starts at a document or continues a long one (%d continuations)", cont);
    CHECK(targets_once(&p, ND, st, ln, 1, &twice) && twice <= p.st.repeated && twice >= p.st.repeated - p.n_win,
          "doc_start: every target at least once; %lld seen twice (cut fillers: stats' repeated %lld less one per filler)",
          (long long)twice, (long long)p.st.repeated);
    pad = 0;
    for (int64_t w = 0; w < p.n_win; w++) { pack_window(&p, w, rd, NULL, win); for (int k = 0; k < W; k++) pad += win[k] == PACK_PAD; }
    CHECK(pad == p.st.pad && pad < W, "doc_start: windows are full except the last (padding %lld = stats %lld)", (long long)pad,
          (long long)p.st.pad);
    pack_free(&p);

    // ---- stream statistics against a brute-force count ----
    PackStats ss;
    pack_stream_stats(&ss, T, EOD, NS, rd, NULL, err, sizeof err);
    int64_t nwin = (NS - 1) / T, cut = 0;
    for (int i = 0; i < ND; i++) {
        if (ln[i] > W) continue;
        int inside = 0;
        for (int64_t k = 0; k < nwin && !inside; k++) inside = st[i] >= k * T && st[i] + ln[i] <= k * T + W;
        cut += !inside;
    }
    CHECK(ss.short_cut == cut && ss.docs == ND && ss.docs_short == nshort,
          "stream: %lld of %lld short documents cut (%.1f%%) = brute force %lld", (long long)ss.short_cut,
          (long long)nshort, 100.0 * ss.short_cut / (double)nshort, (long long)cut);

    // ---- upsampling: documents longer than 100 tokens 3x, the second source 2.5x ----
    int64_t src[3] = { 0, st[ND / 2], NS };
    double wt[2] = { 1.0, 2.5 };
    PackOpts u = { .mode = PACK_BEST_FIT, .T = T, .eod = EOD, .buffer = 512, .threshold = 100, .factor = 3.0,
                   .weight = wt, .src_first = src, .n_src = 2, .seed = 11 };
    rc = pack_build(&p, &u, NS, rd, NULL, err, sizeof err);
    // expected targets per source: sum over documents of m x (len - 1) (every use places all of a document's
    // targets once: its pieces overlap by one token)
    double expect[2] = { 0, 0 }, var[2] = { 0, 0 };
    for (int i = 0; i < ND; i++) {
        int s = st[i] >= src[1];
        double m = wt[s] * (ln[i] > 100 ? 3.0 : 1.0), fr = m - (int)m;
        expect[s] += m * (double)(ln[i] - 1);
        var[s] += fr * (1 - fr) * (double)(ln[i] - 1) * (double)(ln[i] - 1);
    }
    for (int s = 0; s < 2; s++) {
        double z = (p.st.src_used[s] - expect[s]) / sqrt(var[s] + 1e-9);
        CHECK(rc == 0 && fabs(z) < 5 && (var[s] > 0 || p.st.src_used[s] == expect[s]),
              "upsampling, source %d (weight %.1f, > 100 tokens x3): %.0f targets placed, expected %.0f (%.1f sd)", s, wt[s],
              p.st.src_used[s], expect[s], z);
    }
    int64_t uses_long = 0, uses_short = 0, n_long = 0, n_short = 0;
    for (int i = 0; i < ND / 2; i++) { if (ln[i] > 100) n_long++; else n_short++; }
    for (int64_t s = 0; s < p.first[p.n_win]; s++) {
        if (p.seg[s].start >= src[1] || S[p.seg[s].start] != EOD) continue;   // source 0, document starts
        for (int i = 0; i < ND / 2; i++) if (st[i] == p.seg[s].start) { if (ln[i] > 100) uses_long++; else uses_short++; break; }
    }
    CHECK(uses_long == 3 * n_long && uses_short == n_short, "upsampling: source 0's %lld long documents start 3x each (%lld), "
          "its %lld short ones once (%lld)", (long long)n_long, (long long)uses_long, (long long)n_short, (long long)uses_short);
    pack_free(&p);
    o.mode = PACK_BEST_FIT; o.eod = -1;
    CHECK(pack_build(&p, &o, NS, rd, NULL, err, sizeof err) != 0 && strstr(err, "end-of-document"), "no eod: %s", err);

    // ---- weights below 1: the documents they leave out are counted as left out, never as cut (best_fit cuts none) ----
    double half[2] = { 0.5, 0.5 };
    PackOpts h = { .mode = PACK_BEST_FIT, .T = T, .eod = EOD, .buffer = 512, .threshold = INT64_MAX, .factor = 1.0,
                   .weight = half, .src_first = src, .n_src = 2, .seed = 5 };
    rc = pack_build(&p, &h, NS, rd, NULL, err, sizeof err);
    CHECK(rc == 0 && p.st.short_cut == 0 && p.st.left_out > ND / 3 && p.st.left_out < 2 * ND / 3,
          "weights 0.5: %lld of %d documents left out, %lld short ones cut (best_fit cuts none)", (long long)p.st.left_out, ND,
          (long long)p.st.short_cut);
    pack_free(&p);
    // ---- a document used more than PACK_MAX_USES times, and a table larger than the memory given: refused, planned ----
    double big[2] = { 100, 1 };
    h.weight = big; h.factor = 100; h.threshold = 1;
    CHECK(pack_build(&p, &h, NS, rd, NULL, err, sizeof err) != 0 && strstr(err, "up to 10000 times, more than 1000"),
          "weight 100 x upsample_factor 100: %s", err);
    h.weight = NULL; h.factor = 3; h.max_bytes = 1e5;
    CHECK(pack_build(&p, &h, NS, rd, NULL, err, sizeof err) != 0 && strstr(err, "9000 uses of 3000 documents") && strstr(err, "MiB for the table of windows, more than the 0.1 MiB available"),
          "upsample_factor 3 with 100 kB for the table: %s", err);
    // ---- eod tokens are counted (none: the packing warns that each source is one document) ----
    h.factor = 1; h.max_bytes = 0;
    int64_t eods = 0;
    for (int64_t i = 0; i < NS; i++) eods += S[i] == EOD;
    rc = pack_build(&p, &h, NS, rd, NULL, err, sizeof err);
    CHECK(rc == 0 && p.st.eods == eods && eods == ND, "eod tokens counted: %lld of %d documents", (long long)p.st.eods, ND);
    pack_free(&p);
    h.eod = 998;   // a token that never occurs
    rc = pack_build(&p, &h, NS, rd, NULL, err, sizeof err);
    CHECK(rc == 0 && p.st.eods == 0 && p.st.docs == 2, "an eod that never occurs: %lld eod tokens, %lld documents (one per source)",
          (long long)p.st.eods, (long long)p.st.docs);
    pack_free(&p);
    free(S); free(st); free(ln); free(win); free(seen);
    return tu_finish();
}
