// pack.c — document-aware training windows and length upsampling (see pack.h).
#include "data/pack.h"
#include "common/util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int pk_fail(char* err, size_t n, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(err, n, "data: ");
    vsnprintf(err + k, n - (size_t)k, fmt, ap);
    va_end(ap);
    return 1;
}

int pack_mode(const char* s) {
    return !strcmp(s, "stream") ? PACK_STREAM : !strcmp(s, "doc_start") ? PACK_DOC_START
         : !strcmp(s, "best_fit") ? PACK_BEST_FIT : -1;
}
const char* pack_mode_name(int m) { return m == PACK_DOC_START ? "doc_start" : m == PACK_BEST_FIT ? "best_fit" : "stream"; }

// ---- documents: starts at eod tokens (and at source boundaries) ----
typedef struct { int64_t* start; int64_t* len; int* src; int64_t n, cap, eods; } Docs;   // eods: eod tokens seen

static int docs_add(Docs* d, int64_t s, int64_t len, int src) {
    if (d->n == d->cap) {
        int64_t cap = d->cap ? 2 * d->cap : 1024;
        int64_t *a = realloc(d->start, (size_t)cap * sizeof(int64_t)), *b = a ? realloc(d->len, (size_t)cap * sizeof(int64_t)) : NULL;
        if (a) d->start = a;
        if (b) d->len = b;
        int* c = b ? realloc(d->src, (size_t)cap * sizeof(int)) : NULL;
        if (!c) return 1;
        d->src = c; d->cap = cap;
    }
    d->start[d->n] = s; d->len[d->n] = len; d->src[d->n] = src; d->n++;
    return 0;
}

static void docs_free(Docs* d) { free(d->start); free(d->len); free(d->src); memset(d, 0, sizeof *d); }

// one pass over the stream in chunks; a document ends before the next eod or at a source's end
static int docs_scan(Docs* d, int eod, int64_t n_tokens, const int64_t* src_first, int n_src, PackRead rd,
                     void* ctx, char* err, size_t errlen) {
    const int64_t CH = 1 << 20;
    int32_t* buf = malloc((size_t)CH * sizeof(int32_t));
    if (!buf) return pk_fail(err, errlen, "out of memory reading documents");
    int64_t cur = 0;   // start of the open document
    int s = 0;
    for (int64_t pos = 0; pos < n_tokens; pos += CH) {
        int64_t n = n_tokens - pos < CH ? n_tokens - pos : CH;
        if (rd(ctx, pos, n, buf)) { free(buf); return 1; }
        for (int64_t i = 0; i < n; i++) {
            int64_t p = pos + i;
            int at_src = n_src > 1 && s + 1 < n_src && p == src_first[s + 1];
            d->eods += buf[i] == eod;
            if ((buf[i] == eod || at_src) && p > cur) {
                if (docs_add(d, cur, p - cur, s)) { free(buf); return pk_fail(err, errlen, "out of memory reading documents"); }
                cur = p;
            }
            if (at_src) s++;
        }
    }
    free(buf);
    if (n_tokens > cur && docs_add(d, cur, n_tokens - cur, s)) return pk_fail(err, errlen, "out of memory reading documents");
    return 0;
}

// ---- the table under construction ----
typedef struct { Pack* p; int64_t nseg, capseg, capwin; } Table;

static int tb_seg(Table* t, int64_t start, int64_t len, int64_t slot) {
    if (t->nseg == t->capseg) {
        int64_t cap = t->capseg ? 2 * t->capseg : 4096;
        PackSeg* s = realloc(t->p->seg, (size_t)cap * sizeof(PackSeg));
        if (!s) return 1;
        t->p->seg = s; t->capseg = cap;
    }
    t->p->seg[t->nseg++] = (PackSeg){ start, (int32_t)len, (int32_t)slot };
    return 0;
}

// close the window whose segments are seg[first[n_win] .. nseg): the next one starts here
static int tb_close(Table* t) {
    Pack* p = t->p;
    if (p->n_win + 2 > t->capwin) {
        int64_t cap = t->capwin ? 2 * t->capwin : 1024;
        int64_t* f = realloc(p->first, (size_t)cap * sizeof(int64_t));
        if (!f) return 1;
        p->first = f; t->capwin = cap;
        if (p->n_win == 0) p->first[0] = 0;
    }
    p->first[++p->n_win] = t->nseg;
    return 0;
}

// ---- doc_start ----
static int build_doc_start(Table* t, const Docs* d, const int64_t* order, int64_t n, int W) {
    int T = W - 1;
    int64_t i = 0, off = 0;
    while (i < n) {
        const int64_t a = order[i];
        int64_t take = d->len[a] - off < W ? d->len[a] - off : W;
        if (tb_seg(t, d->start[a] + off, take, 0)) return 1;
        if (off + take < d->len[a]) { off += T; if (tb_close(t)) return 1; continue; }   // continues
        int64_t slot = take;
        i++; off = 0;
        while (slot < W && i < n) {   // fill the tail; a document that does not fit starts the next window over
            const int64_t b = order[i];
            int64_t tk = d->len[b] < W - slot ? d->len[b] : W - slot;
            if (tb_seg(t, d->start[b], tk, slot)) return 1;
            slot += tk;
            if (tk < d->len[b]) { t->p->st.repeated += tk; break; }
            i++;
        }
        if (tb_close(t)) return 1;
    }
    return 0;
}

// ---- best_fit: free room of the open windows in a bitset over 0..W, a stack of windows per room ----
static int cmp_len_desc(const void* x, const void* y, void* lens) {
    const int64_t* L = lens;
    int64_t a = *(const int64_t*)x, b = *(const int64_t*)y;
    if (L[a] != L[b]) return L[a] > L[b] ? -1 : 1;
    return a < b ? -1 : a > b;
}

static int build_best_fit(Table* t, const Docs* d, const int64_t* order, int64_t n, int W, int buffer) {
    int T = W - 1;
    int64_t nw = (W + 64) / 64;
    uint64_t* bits = calloc((size_t)nw, sizeof(uint64_t));
    int64_t* head = malloc((size_t)(W + 1) * sizeof(int64_t));          // room -> first open window with it
    int64_t* items = malloc((size_t)(buffer > 0 ? buffer : 1) * sizeof(int64_t));
    // per open window of a round: its segments (linked), its room, the next window of the same room
    int64_t capw = 0, caps = 0;
    int64_t *wroom = NULL, *wnext = NULL, *wseg0 = NULL, *snext = NULL, *sdoc = NULL, *sslot = NULL, *soff = NULL, *slen = NULL;
    int rc = 0;
    if (!bits || !head || !items) { rc = 1; goto out; }
    for (int64_t r0 = 0; r0 < n && !rc; r0 += buffer) {
        int64_t rn = n - r0 < buffer ? n - r0 : buffer, nwin = 0, nsg = 0;
        for (int64_t k = 0; k <= W; k++) head[k] = -1;
        memset(bits, 0, (size_t)nw * sizeof(uint64_t));
        // windows of a round; segments as a linked list per window (in placement order)
        int64_t need_w = 0, need_s = 0;
        for (int64_t k = 0; k < rn; k++) { int64_t L = d->len[order[r0 + k]]; need_w += L > W ? (L - 1) / T + 1 : 1; need_s += L > W ? (L - 1) / T + 1 : 1; }
        if (need_w > capw) {
            capw = need_w;
            int64_t *a = realloc(wroom, capw * sizeof(int64_t)), *b = realloc(wnext, capw * sizeof(int64_t)), *c = realloc(wseg0, capw * sizeof(int64_t));
            if (a) wroom = a;
            if (b) wnext = b;
            if (c) wseg0 = c;
            if (!a || !b || !c) { rc = 1; break; }
        }
        if (need_s > caps) {
            caps = need_s;
            int64_t *a = realloc(snext, caps * sizeof(int64_t)), *b = realloc(sdoc, caps * sizeof(int64_t)),
                    *c = realloc(sslot, caps * sizeof(int64_t)), *e = realloc(soff, caps * sizeof(int64_t)), *f = realloc(slen, caps * sizeof(int64_t));
            if (a) snext = a;
            if (b) sdoc = b;
            if (c) sslot = c;
            if (e) soff = e;
            if (f) slen = f;
            if (!a || !b || !c || !e || !f) { rc = 1; break; }
        }
        int64_t ni = 0;
#define NEW_WIN(room) (wroom[nwin] = (room), wseg0[nwin] = -1, nwin++)
#define ADD_SEG(w, doc, off, len, slot) do { sdoc[nsg] = (doc); soff[nsg] = (off); slen[nsg] = (len); sslot[nsg] = (slot); \
            snext[nsg] = -1; if (wseg0[w] < 0) wseg0[w] = nsg; else { int64_t q = wseg0[w]; while (snext[q] >= 0) q = snext[q]; snext[q] = nsg; } nsg++; } while (0)
        for (int64_t k = 0; k < rn; k++) {
            int64_t a = order[r0 + k], L = d->len[a];
            if (L <= W) { items[ni++] = a; continue; }
            int64_t off = 0;
            for (; off + W < L; off += T) { int64_t w = NEW_WIN(0); ADD_SEG(w, a, off, W, 0); }   // whole windows
            int64_t rem = L - off;                                                                // the remainder
            int64_t w = NEW_WIN(W - rem);
            ADD_SEG(w, a, off, rem, 0);
            if (W - rem > 0) { wnext[w] = head[W - rem]; head[W - rem] = w; bits[(W - rem) / 64] |= 1ull << ((W - rem) % 64); }
        }
        // the documents that fit, longest first (ties: stream order)
        qsort_r(items, (size_t)ni, sizeof(int64_t), cmp_len_desc, d->len);
        for (int64_t k = 0; k < ni; k++) {
            int64_t a = items[k], L = d->len[a], room = -1;
            for (int64_t wd = L / 64; wd < nw && room < 0; wd++) {   // the least room >= L
                uint64_t m = bits[wd];
                if (wd == L / 64) m &= ~0ull << (L % 64);
                if (m) room = wd * 64 + __builtin_ctzll(m);
            }
            int64_t w;
            if (room < 0) { w = NEW_WIN(W); room = W; }
            else {
                w = head[room]; head[room] = wnext[w];
                if (head[room] < 0) bits[room / 64] &= ~(1ull << (room % 64));
            }
            ADD_SEG(w, a, 0, L, W - room);
            int64_t left = room - L;
            wroom[w] = left;
            if (left > 0) { wnext[w] = head[left]; head[left] = w; bits[left / 64] |= 1ull << (left % 64); }
        }
#undef NEW_WIN
#undef ADD_SEG
        for (int64_t w = 0; w < nwin && !rc; w++) {
            for (int64_t q = wseg0[w]; q >= 0 && !rc; q = snext[q]) rc = tb_seg(t, d->start[sdoc[q]] + soff[q], slen[q], sslot[q]);
            if (!rc) rc = tb_close(t);
        }
    }
out:
    free(bits); free(head); free(items);
    free(wroom); free(wnext); free(wseg0); free(snext); free(sdoc); free(sslot); free(soff); free(slen);
    return rc;
}

// ---- statistics of a finished table ----
static void table_stats(Pack* p, const Docs* d, int W, const int64_t* uses) {
    PackStats* st = &p->st;
    st->windows = p->n_win; st->slots = p->n_win * (int64_t)W;
    int64_t filled = 0;
    for (int64_t s = 0; s < p->first[p->n_win]; s++) filled += p->seg[s].len;
    st->pad = st->slots - filled;
    st->used_tokens = filled;
    // a short document is whole in some window when a segment starts at its start with its whole length
    unsigned char* whole = calloc((size_t)(d->n ? d->n : 1), 1);
    if (whole) {
        for (int64_t s = 0; s < p->first[p->n_win]; s++) {
            int64_t lo = 0, hi = d->n - 1, x = p->seg[s].start;   // the document holding the segment's start
            while (lo < hi) { int64_t mid = (lo + hi + 1) / 2; if (d->start[mid] <= x) lo = mid; else hi = mid - 1; }
            if (d->start[lo] == x && d->len[lo] == p->seg[s].len) whole[lo] = 1;
            st->src_used[d->src[lo] < 8 ? d->src[lo] : 7] += p->seg[s].len - 1;   // targets inside the segment
        }
        for (int64_t i = 0; i < d->n; i++) {
            if (!uses[i]) { st->left_out++; continue; }   // (the weights left it out: not cut)
            if (d->len[i] <= W && !whole[i]) st->short_cut++;
        }
        free(whole);
    }
}

static void doc_stats(PackStats* st, const Docs* d, int W, int n_src, int64_t n_tokens) {
    st->docs = d->n; st->n_src = n_src < 8 ? n_src : 8; st->eods = d->eods;
    int64_t T = W - 1, nwin = (n_tokens - 1) / T;
    for (int64_t i = 0; i < d->n; i++) {
        st->docs_short += d->len[i] <= W;
        if (d->len[i] <= W) {   // whole in stream window k = floor(start / T) when it ends by kT + T
            int64_t k = d->start[i] / T;
            st->stream_cut += !(k < nwin && d->start[i] + d->len[i] - 1 <= k * T + T);
        }
        st->src_tokens[d->src[i] < 8 ? d->src[i] : 7] += (double)(d->len[i] - 1);
    }
}

// bytes as "12.3 MiB" or "4.56 GiB"
static void mib_gib(double b, char* out, size_t n) {
    if (b < 1073741824.0) snprintf(out, n, "%.1f MiB", b / 1048576.0);
    else snprintf(out, n, "%.2f GiB", b / 1073741824.0);
}

int pack_build(Pack* p, const PackOpts* o, int64_t n_tokens, PackRead rd, void* ctx, char* err, size_t errlen) {
    memset(p, 0, sizeof *p);
    p->mode = o->mode; p->T = o->T;
    if (o->mode != PACK_DOC_START && o->mode != PACK_BEST_FIT) return pk_fail(err, errlen, "pack: unknown mode %d", o->mode);
    if (o->eod < 0) return pk_fail(err, errlen, "pack = %s needs the end-of-document token: set eod (or use data with a "
                                   "meta.json)", pack_mode_name(o->mode));
    int W = o->T + 1;
    Docs d = {0};
    int64_t src0[2] = { 0, n_tokens };
    const int64_t* sf = o->n_src > 1 ? o->src_first : src0;
    int nsrc = o->n_src > 1 ? o->n_src : 1;
    if (docs_scan(&d, o->eod, n_tokens, sf, nsrc, rd, ctx, err, errlen)) { docs_free(&d); return 1; }
    // the visiting order, with upsampling's repeats: each document's uses first (a plan: what the table will need)
    int up = o->factor != 1.0;
    double most = o->factor;   // the largest number of uses of one document
    for (int s = 0; s < nsrc && o->weight; s++) {
        up |= o->weight[s] != 1.0;
        if (o->weight[s] * (o->factor > 1 ? o->factor : 1) > most) most = o->weight[s] * (o->factor > 1 ? o->factor : 1);
    }
    if (most > PACK_MAX_USES) {
        docs_free(&d);
        return pk_fail(err, errlen, "pack: a source weight times upsample_factor uses a document up to %g times, more than "
                       "%d: lower the weights ('GLOB@W') or upsample_factor", most, PACK_MAX_USES);
    }
    int64_t* uses = malloc((size_t)(d.n ? d.n : 1) * sizeof(int64_t)), ndocs = d.n;
    int64_t n = 0, segs = 0;
    for (int64_t i = 0; uses && i < d.n; i++) {
        double m = (o->weight ? o->weight[d.src[i]] : 1.0) * (d.len[i] > o->threshold ? o->factor : 1.0);
        int64_t k = (int64_t)floor(m);
        double u = (double)(mix64(o->seed ^ mix64((uint64_t)i + 0x51ED)) >> 11) * 0x1.0p-53;
        if (u < m - (double)k) k++;
        uses[i] = k;
        n += k;
        segs += k * (d.len[i] > W ? (d.len[i] - 1) / o->T + 1 : 1);
    }
    // bytes: the order (8 per use), the segments (16 each, and best_fit's 40 per segment of a round), the windows
    double need = 8.0 * (double)n + 56.0 * (double)segs + 8.0 * (double)segs;
    double avail = o->max_bytes > 0 ? o->max_bytes : meminfo_bytes("MemAvailable");
    char needs[32], avails[32];
    mib_gib(need, needs, sizeof needs);
    mib_gib(avail, avails, sizeof avails);
    if (uses && avail > 0 && need > avail) {
        free(uses); docs_free(&d);
        return pk_fail(err, errlen, "pack: %lld uses of %lld documents (source weights and upsample_factor) need about %s "
                       "for the table of windows, more than the %s available: lower the weights ('GLOB@W') or "
                       "upsample_factor", (long long)n, (long long)ndocs, needs, avails);
    }
    int64_t* order = uses ? malloc((size_t)(n ? n : 1) * sizeof(int64_t)) : NULL;
    if (!order) {
        free(uses); docs_free(&d);
        return pk_fail(err, errlen, "out of memory packing %lld uses of %lld documents (about %s)", (long long)n,
                       (long long)ndocs, needs);
    }
    for (int64_t i = 0, j = 0; i < d.n; i++) for (int64_t r = 0; r < uses[i]; r++) order[j++] = i;
    if (up) {   // a seeded permutation (Fisher-Yates) spreads the repeats
        uint64_t x = mix64(o->seed ^ 0xD0C5);
        for (int64_t i = n - 1; i > 0; i--) {
            x = mix64(x);
            int64_t j = (int64_t)(x % (uint64_t)(i + 1)), tmp = order[i];
            order[i] = order[j]; order[j] = tmp;
        }
    }
    if (n == 0) { free(order); free(uses); docs_free(&d); return pk_fail(err, errlen, "pack: the source weights and upsampling leave no document to train on (a weight below 1 "
                                   "uses each document with that probability)"); }
    Table t = { p, 0, 0, 0 };
    int rc = o->mode == PACK_DOC_START ? build_doc_start(&t, &d, order, n, W) : build_best_fit(&t, &d, order, n, W, o->buffer > 0 ? o->buffer : 1);
    if (!rc && p->n_win == 0) rc = 1;
    if (!rc) { doc_stats(&p->st, &d, W, nsrc, n_tokens); table_stats(p, &d, W, uses); }
    free(order); free(uses); docs_free(&d);
    if (rc) {
        pack_free(p);
        return pk_fail(err, errlen, "out of memory packing the windows of %lld uses of %lld documents (about %s)",
                       (long long)n, (long long)ndocs, needs);
    }
    return 0;
}

void pack_free(Pack* p) { free(p->first); free(p->seg); p->first = NULL; p->seg = NULL; p->n_win = 0; }

int pack_stream_stats(PackStats* st, int T, int eod, int64_t n_tokens, PackRead rd, void* ctx, char* err, size_t errlen) {
    memset(st, 0, sizeof *st);
    Docs d = {0};
    int64_t src0[2] = { 0, n_tokens };
    if (docs_scan(&d, eod, n_tokens, src0, 1, rd, ctx, err, errlen)) { docs_free(&d); return 1; }
    int W = T + 1;
    doc_stats(st, &d, W, 1, n_tokens);
    st->windows = (n_tokens - 1) / T; st->slots = st->windows * W; st->used_tokens = st->slots;
    st->short_cut = st->stream_cut;
    docs_free(&d);
    return 0;
}

int pack_doc_lengths(int64_t n_tokens, int eod, PackRead rd, void* ctx, int64_t** lens, int64_t* n, char* err, size_t errlen) {
    Docs d = {0};
    int64_t src0[2] = { 0, n_tokens };
    *lens = NULL; *n = 0;
    if (docs_scan(&d, eod, n_tokens, src0, 1, rd, ctx, err, errlen)) { docs_free(&d); return 1; }
    *lens = d.len; *n = d.n;
    d.len = NULL;
    docs_free(&d);
    return 0;
}

int pack_window(const Pack* p, int64_t w, PackRead rd, void* ctx, int32_t* out) {
    int W = p->T + 1;
    for (int i = 0; i < W; i++) out[i] = PACK_PAD;
    for (int64_t s = p->first[w]; s < p->first[w + 1]; s++)
        if (rd(ctx, p->seg[s].start, p->seg[s].len, out + p->seg[s].slot)) return 1;
    return 0;
}
