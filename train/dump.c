// dump.c — writing the test dump format (see dump.h).
#include "train/dump.h"
#include "model/backend.h"
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

void dump_arena(FILE* f, const Model* m, const char* prefix, const float* arena) {
    float* host = malloc(m->pt.total * sizeof(float));
    be_download(host, arena, m->pt.total * sizeof(float));
    char name[160];
    for (int i = 0; i < m->pt.n; i++) {
        const ParamSpec* p = &m->pt.p[i];
        int dims[2] = { (int)p->shape[0], (int)p->shape[1] };
        snprintf(name, sizeof name, "%s/%s", prefix, p->name);
        dump_record(f, name, 0, p->ndim, dims, host + p->offset);
    }
    free(host);
}
