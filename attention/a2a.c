// a2a.c — the all-to-all of context parallelism (see a2a.h).
#include "attention/a2a.h"
#include "backend/backend.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t a2a_buffer_bytes_for(int U, int T, int widest) { return (size_t)U * T * widest * sizeof(float); }

void a2a_init(A2A* x, const Group* g, int T, int widest) {
    memset(x, 0, sizeof *x);
    x->g = g;
    x->U = g ? group_size(g) : 1;
    x->r = g ? group_rank(g) : 0;
    x->T = T;
    x->cap = (size_t)x->U * T * widest;
    x->buf = be_alloc(x->cap * sizeof(float));
}

void a2a_free(A2A* x) {
    if (x->buf) be_free(x->buf);
    memset(x, 0, sizeof *x);
}

static void need(const A2A* x, int w) {
    if ((size_t)x->U * x->T * w > x->cap) {
        fprintf(stderr, "a2a: an exchange of %d columns exceeds the planned scratch (%zu floats)\n", w, x->cap);
        exit(1);
    }
}

void a2a_to_heads(A2A* x, float* dst, const float* src, int ld, int w, int nb) {
    need(x, w);
    // [U, T, w]: block j for member j, then block i of dst from member i
    be_split_cols(x->buf, src, x->T, ld, w, x->U, nb);
    comm_alltoall(x->g, x->buf, dst, (size_t)x->T * w);
}

void a2a_to_tokens(A2A* x, float* dst, const float* src, int ld, int w, int nb, int accumulate) {
    need(x, w);
    // src's rows [u T, (u + 1) T) are member u's tokens: they go back to member u; what arrives from member u is
    // this rank's tokens in member u's block
    comm_alltoall(x->g, src, x->buf, (size_t)x->T * w);
    be_merge_cols(dst, x->buf, x->T, ld, w, x->U, nb, accumulate);
}
