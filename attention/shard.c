// shard.c — which tokens of a window each context-parallel rank holds (see shard.h).
#include "attention/shard.h"
#include "attention/ring.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int shard_mode_parse(const char* s) {
    if (!strcmp(s, "window")) return SHARD_WINDOW;
    if (!strcmp(s, "document")) return SHARD_DOCUMENT;
    return -1;
}

static void* alloc(size_t n, size_t size) {
    void* p = calloc(n ? n : 1, size);
    if (!p) { fprintf(stderr, "shard: out of host memory (%zu x %zu bytes)\n", n, size); exit(1); }
    return p;
}

void shard_init(CpShard* s, int mode, int layout, int P, int T, int min_len, int eod) {
    memset(s, 0, sizeof *s);
    s->mode = mode; s->layout = layout; s->P = P; s->T = T; s->Tl = T / P; s->min_len = min_len; s->eod = eod;
    s->start = alloc(T, sizeof(int)); s->len = alloc(T, sizeof(int)); s->order = alloc(T, sizeof(int));
    s->owner = alloc(T, sizeof(int)); s->split = alloc(T, sizeof(int)); s->cut = alloc(T, sizeof(int)); s->cnt = alloc(P, sizeof(int));
    s->room = alloc(P, sizeof(int)); s->csize = alloc(2 * (size_t)P, sizeof(int)); s->work = alloc(P, sizeof(double)); s->uw = alloc(T, sizeof(double));
}

void shard_free(CpShard* s) {
    free(s->start); free(s->len); free(s->order); free(s->owner); free(s->split); free(s->cut); free(s->cnt); free(s->room); free(s->csize);
    free(s->work); free(s->uw);
    memset(s, 0, sizeof *s);
}

static int is_eod(int32_t t, int eod) { return t < 0 || (eod >= 0 && t == eod); }

void shard_doc_ids(const int32_t* win, int T, int eod, int* doc) {
    for (int p = 0, d = 0; p < T; p++) { d += is_eod(win[p], eod); doc[p] = d; }
}

// ---- units of work: documents, and runs of one-token documents (padding) taken together ----
// unit u covers positions [start, start + len); a document's token at offset i sees i + 1 keys, a one-token document's 1
static int fill_unit(const CpShard* s, int u) { return s->split[u] < 0; }   // split[u] = -1 marks a run of one-token documents
static double piece_work(const CpShard* s, int u, int a, int b) {            // offsets [a, b) of unit u
    return fill_unit(s, u) ? (double)(b - a) : ((double)b * (b + 1) - (double)a * (a + 1)) / 2;
}

static int parse_units(CpShard* s, const int32_t* win) {
    int n = 0, eod = s->eod;
    for (int p = 0; p < s->T;) {
        int q = p + 1;
        while (q < s->T && !is_eod(win[q], eod)) q++;
        if (q - p == 1 && n > 0 && s->split[n - 1] < 0) { s->len[n - 1]++; p = q; continue; }   // one more one-token document
        s->start[n] = p; s->len[n] = q - p; s->split[n] = q - p == 1 ? -1 : 0;
        n++;
        p = q;
    }
    for (int u = 0; u < n; u++) s->uw[u] = piece_work(s, u, 0, s->len[u]);
    return n;
}

static void give(CpShard* s, int u, int a, int b, int r) {   // offsets [a, b) of unit u to rank r
    for (int p = s->start[u] + a; p < s->start[u] + b; p++) s->owner[p] = r;
    s->room[r] -= b - a;
    s->work[r] += piece_work(s, u, a, b);
}

static int chunk_rank(const CpShard* s, int c) { return c < s->P ? c : 2 * s->P - 1 - c; }
// a document cut into the layout's K chunks (zigzag: chunk c to rank c or 2P - 1 - c; contiguous: rank c); the remainder
// tokens one each to the chunks whose ranks have the most room
static void place_split(CpShard* s, int u) {
    int P = s->P, K = s->layout == CP_ZIGZAG ? 2 * P : P, L = s->len[u], q = L / K, rem = L % K;
    int *size = s->csize, *left = s->cnt;   // left: each rank's room after the even part
    for (int c = 0; c < K; c++) size[c] = q;
    for (int r = 0; r < P; r++) left[r] = s->room[r] - (K / P) * q;
    for (int i = 0; i < rem; i++) {
        int best = -1;
        for (int c = 0; c < K; c++)
            if (size[c] == q && (best < 0 || left[chunk_rank(s, c)] > left[chunk_rank(s, best)])) best = c;
        size[best]++;
        left[chunk_rank(s, best)]--;
    }
    for (int c = 0, off = 0; c < K; off += size[c], c++) give(s, u, off, off + size[c], chunk_rank(s, c));
}

// a unit whole on the rank with the least work that has room for it; else in pieces over the ranks with room
static void place_whole(CpShard* s, int u) {
    int P = s->P, L = s->len[u], best = -1;
    for (int r = 0; r < P; r++)
        if (s->room[r] >= L && (best < 0 || s->work[r] < s->work[best])) best = r;
    if (best >= 0) { give(s, u, 0, L, best); return; }
    s->cut[u] = !fill_unit(s, u);   // its pieces see each other across ranks (one-token documents see only themselves)
    for (int off = 0; off < L;) {
        best = -1;
        for (int r = 0; r < P; r++)
            if (s->room[r] > 0 && (best < 0 || s->work[r] < s->work[best])) best = r;
        int k = L - off < s->room[best] ? L - off : s->room[best];
        give(s, u, off, off + k, best);
        off += k;
    }
}

static int by_work(const void* a, const void* b, void* ctx) {   // most work first, then the earlier unit
    const CpShard* s = ctx;
    int x = *(const int*)a, y = *(const int*)b;
    if (s->uw[x] != s->uw[y]) return s->uw[x] < s->uw[y] ? 1 : -1;
    return (x > y) - (x < y);
}

static double imbalance(const CpShard* s) {
    double mx = 0, sum = 0;
    for (int r = 0; r < s->P; r++) { sum += s->work[r]; if (s->work[r] > mx) mx = s->work[r]; }
    return sum > 0 ? mx * s->P / sum : 1.0;
}

static void shard_documents(CpShard* s, const int32_t* win) {
    int P = s->P, n = parse_units(s, win), K = s->layout == CP_ZIGZAG ? 2 * P : P;
    for (int u = 0; u < n; u++) if (s->split[u] == 0 && s->len[u] >= s->min_len && s->len[u] >= K) s->split[u] = 1;
    for (int u = 0; u < n; u++) s->order[u] = u;
    qsort_r(s->order, n, sizeof(int), by_work, s);
    for (;;) {
        for (int r = 0; r < P; r++) { s->room[r] = s->Tl; s->work[r] = 0; }
        for (int u = 0; u < n; u++) s->cut[u] = s->split[u] == 1;
        for (int u = 0; u < n; u++) if (s->split[u] == 1) place_split(s, u);
        for (int i = 0; i < n; i++) if (s->split[s->order[i]] != 1) place_whole(s, s->order[i]);
        if (s->layout != CP_ZIGZAG || imbalance(s) <= SHARD_BALANCE) break;
        int next = -1;   // the whole document with the most work (order is by work)
        for (int i = 0; i < n && next < 0; i++) if (s->split[s->order[i]] == 0 && s->len[s->order[i]] >= 2 * P) next = s->order[i];
        if (next < 0) break;
        s->split[next] = 1;
    }
    s->n_units = n;
    s->n_split = 0;
    for (int u = 0; u < n; u++) s->n_split += s->split[u] == 1;
    for (int r = 0; r < P; r++)
        if (s->room[r] != 0) { fprintf(stderr, "shard: internal error: rank %d of %d holds %d tokens, not %d\n", r, P, s->Tl - s->room[r], s->Tl); exit(1); }
}

void shard_window(CpShard* s, const int32_t* win, int* pos, double* work) {
    int P = s->P, Tl = s->Tl, T = s->T;
    if (s->mode == SHARD_DOCUMENT && P > 1) {
        shard_documents(s, win);
        for (int r = 0; r < P; r++) s->cnt[r] = 0;
        for (int pass = 1; pass >= 0; pass--)   // the rows of documents over several ranks first, then those held whole
            for (int u = 0; u < s->n_units; u++) {
                if (s->cut[u] != pass) continue;
                for (int p = s->start[u]; p < s->start[u] + s->len[u]; p++) { int r = s->owner[p]; pos[(size_t)r * Tl + s->cnt[r]++] = p; }
            }
    } else {
        for (int r = 0; r < P; r++) ring_positions(s->layout, P, r, T, pos + (size_t)r * Tl);
    }
    if (!work) return;
    // visible pairs: a token at offset i of its document sees i + 1 keys (document masking; eod < 0: one document)
    int* first = s->order;   // [T] scratch: the start of each position's document
    for (int p = 0, st = 0; p < T; p++) { if (p > 0 && is_eod(win[p], s->eod)) st = p; first[p] = st; }
    for (int r = 0; r < P; r++) {
        double w = 0;
        for (int i = 0; i < Tl; i++) { int p = pos[(size_t)r * Tl + i]; w += p - first[p] + 1; }
        work[r] = w;
    }
}
