// zero.c — the ZeRO units of the parameter arena (see zero.h).
#include "model/zero.h"
#include "backend/backend.h"
#include "model/model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// the unit of a tensor by its name: the embedding, layer N, or the rest
static int unit_of_name(const char* name, int n) {
    if (!strcmp(name, "model.embed_tokens.weight")) return 0;
    int l;
    if (sscanf(name, "model.layers.%d.", &l) == 1) return 1 + l;
    return n - 1;
}

void zero_units(ZeroUnits* z, ParamTable* t, int P, int rank) {
    memset(z, 0, sizeof *z);
    z->P = P > 1 ? P : 1;
    z->rank = z->P > 1 ? rank : 0;
    int layers = 0, l;
    for (int i = 0; i < t->n; i++)
        if (sscanf(t->p[i].name, "model.layers.%d.", &l) == 1 && l + 1 > layers) layers = l + 1;
    z->n = z->P > 1 ? layers + 2 : 1;
    z->off = calloc(z->n, sizeof(size_t)); z->len = calloc(z->n, sizeof(size_t)); z->own = calloc(z->n, sizeof(size_t));
    if (!z->off || !z->len || !z->own) { fprintf(stderr, "zero: out of memory\n"); exit(1); }
    if (z->P == 1) { z->len[0] = z->shard = t->total; return; }
    // the table lists the units in order (embedding, layers, the rest): pad at each change of unit
    size_t at = 0;
    int u = 0;
    for (int i = 0; i < t->n; i++) {
        int ui = unit_of_name(t->p[i].name, z->n);
        if (ui < u) { fprintf(stderr, "zero: tensor %s is out of the unit order\n", t->p[i].name); exit(1); }
        for (; u < ui; u++) {   // close unit u
            z->len[u] = (at - z->off[u] + z->P - 1) / z->P * z->P;
            z->off[u + 1] = at = z->off[u] + z->len[u];
        }
        t->p[i].offset = at;
        at += t->p[i].numel;
    }
    for (; u < z->n; u++) {
        z->len[u] = (at - z->off[u] + z->P - 1) / z->P * z->P;
        at = z->off[u] + z->len[u];
        if (u + 1 < z->n) z->off[u + 1] = at;
    }
    t->total = at;
    for (u = 0; u < z->n; u++) {
        z->own[u] = z->shard;
        z->shard += zero_slice(z, u);
    }
}

void zero_units_free(ZeroUnits* z) { free(z->off); free(z->len); free(z->own); memset(z, 0, sizeof *z); }

int zero_unit_of(const ZeroUnits* z, size_t e) {
    int lo = 0, hi = z->n - 1;   // the last unit whose offset is at most e
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (z->off[mid] <= e) lo = mid; else hi = mid - 1;
    }
    return lo;
}

int zero_owned(const ZeroUnits* z, const ParamSpec* p, size_t* a, size_t* b) {
    int u = zero_unit_of(z, p->offset);
    size_t s = zero_slice(z, u), lo = z->off[u] + s * z->rank, hi = lo + s;
    *a = p->offset > lo ? p->offset : lo;
    *b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
    return *a < *b;
}

size_t zero_index(const ZeroUnits* z, size_t e) {
    int u = zero_unit_of(z, e);
    return z->own[u] + (e - z->off[u] - zero_slice(z, u) * z->rank);
}

// ---- ZeRO inside the model graph (model.h) ----

// stage 3: unit u's parameter buffer (holds[] index) and its memory
static int slot_of(const Model* m, int u) { return u == 0 ? 2 : u == m->zu.n - 1 ? (m->io_rest ? 3 : 2) : (u - 1) % 2; }
static float* slot_buf(const Model* m, int s) { return s < 2 ? m->punit[s] : m->pio + (s == 3 ? m->io_rest : 0); }

// a gathered slot's bf16 copy (bf16 weights: the matmuls read it; the same offset from wbase in wbf)
static void cast_slot(Model* m, int s) {
    if (!m->wbf) return;
    float* buf = slot_buf(m, s);
    be_cast(m->wbf + (buf - m->wbase), BE_BF16, buf, m->zu.len[m->holds[s]]);
}
static void finish_pending(Model* m) {
    if (m->pending < 0) return;
    comm_wait(m->zreq);
    cast_slot(m, m->pending);
    m->pending = -1;
}
// this rank's slice of unit u into its place in slot s, then every rank's (async: completed by finish_pending)
static void start_gather(Model* m, int u, int s, int async) {
    finish_pending(m);   // one gather in flight at a time
    float* buf = slot_buf(m, s);
    size_t n = zero_slice(&m->zu, u);
    be_copy(buf + n * m->zu.rank, m->pshard + m->zu.own[u], n * sizeof(float));
    m->holds[s] = u;
    if (async) { comm_allgather_start(m->zg, buf, n, m->zreq); m->pending = s; }
    else { comm_allgather(m->zg, buf, n); cast_slot(m, s); }
}

void zero_gather(Model* m, int u) {
    if (m->zero < 3) return;
    int s = slot_of(m, u);
    if (m->holds[s] != u) start_gather(m, u, s, 0);
    else if (m->pending == s) finish_pending(m);
}
void zero_prefetch(Model* m, int u) {
    if (m->zero < 3) return;
    int s = slot_of(m, u);
    if (m->holds[s] != u) start_gather(m, u, s, 1);
}
void zero_invalidate(Model* m) {
    if (m->zero < 3) return;
    finish_pending(m);
    for (int i = 0; i < 4; i++) m->holds[i] = -1;
}

void zero_reduce(Model* m, int u) {
    if (m->zero < 2) return;
    float* buf = u == 0 ? m->gio : u == m->zu.n - 1 ? m->gio + m->io_rest : m->gunit;
    size_t n = zero_slice(&m->zu, u);
    comm_reduce_scatter_sum(m->zg, buf, n);
    be_add(m->gshard + m->zu.own[u], buf + n * m->zu.rank, n);
    be_zero(buf, m->zu.len[u] * sizeof(float));
}

void zero_reduce_arena(Model* m, float* arena) {
    for (int u = 0; u < m->zu.n && m->zg; u++) comm_reduce_scatter_sum(m->zg, arena + m->zu.off[u], zero_slice(&m->zu, u));
}
void zero_allgather_arena(Model* m, float* arena) {
    for (int u = 0; u < m->zu.n && m->zg; u++) comm_allgather(m->zg, arena + m->zu.off[u], zero_slice(&m->zu, u));
}

float* zero_whole(const Model* m, const float* src, int packed) {
    float* whole = be_alloc(m->arena * sizeof(float));
    if (!m->zg) { be_copy(whole, src, m->arena * sizeof(float)); return whole; }
    for (int u = 0; u < m->zu.n; u++) {
        size_t n = zero_slice(&m->zu, u), at = m->zu.off[u] + n * m->zu.rank;
        be_copy(whole + at, src + (packed ? m->zu.own[u] : at), n * sizeof(float));
        comm_allgather(m->zg, whole + m->zu.off[u], n);
    }
    return whole;
}
