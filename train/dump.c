// dump.c — writing the test dump format (see dump.h).
#include "train/dump.h"
#include "backend/backend.h"
#include <stdlib.h>
#include <string.h>

FILE* dump_open(const char* path) {
    FILE* f = fopen(path, "wb");
    if (f) fwrite("RLMDUMP1", 1, 8, f);
    return f;
}

void dump_record(FILE* f, const char* name, int dtype, int ndim, const int* dims, const void* data) {
    int len = (int)strlen(name);
    long n = 1;
    for (int i = 0; i < ndim; i++) n *= dims[i];
    fwrite(&len, 4, 1, f); fwrite(name, 1, len, f);
    fwrite(&dtype, 4, 1, f); fwrite(&ndim, 4, 1, f); fwrite(dims, 4, ndim, f);
    fwrite(data, dtype == 2 ? 1 : 4, n, f);
}

// assemble tensor p of the logical model from the TP shards gathered in rank order: shard r covers rows
// [row0_r, row0_r + lrows) or columns [col0_r, ...) of the logical tensor; padded vocabulary rows are cut
static void assemble(float* full, const float* shards, const ParamSpec* p, int tp) {
    long R = p->shape[0], Cc = p->shape[1], lr = p->lshape[0], lc = p->lshape[1];
    for (int r = 0; r < tp; r++) {
        const float* sh = shards + (size_t)r * p->numel;
        long row0 = p->split == SPLIT_ROWS || p->split == SPLIT_VOCAB ? lr * r : 0;
        long col0 = p->split == SPLIT_COLS ? lc * r : 0;
        for (long i = 0; i < lr; i++) {
            if (row0 + i >= R) break;
            memcpy(full + (size_t)(row0 + i) * Cc + col0, sh + (size_t)i * lc, lc * sizeof(float));
        }
        if (p->split == SPLIT_REPLICATED) break;
    }
}

void dump_arena(FILE* f, const Model* m, const char* prefix, const float* arena) {
    int tp = m->tp;
    float* host = malloc(m->pt.total * sizeof(float));
    be_download(host, arena, m->pt.total * sizeof(float));
    char name[160];
    for (int i = 0; i < m->pt.n; i++) {
        const ParamSpec* p = &m->pt.p[i];
        float* shards = m->tp_rank == 0 ? malloc((size_t)tp * p->numel * sizeof(float)) : NULL;
        if (tp > 1) ctl_gather(m->tp_g, host + p->offset, shards, p->numel * sizeof(float), 0);
        else memcpy(shards, host + p->offset, p->numel * sizeof(float));
        if (f) {
            float* full = malloc((size_t)p->shape[0] * p->shape[1] * sizeof(float));
            assemble(full, shards, p, tp);
            int dims[2] = { (int)p->shape[0], (int)p->shape[1] };
            snprintf(name, sizeof name, "%s/%s", prefix, p->name);
            dump_record(f, name, 0, p->ndim, dims, full);
            free(full);
        }
        free(shards);
    }
    free(host);
}
