// util.c — see util.h.
#include "common/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_s(clockid_t id) { struct timespec t; clock_gettime(id, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
double now_s(void) { return clock_s(CLOCK_MONOTONIC); }
double cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

int cmp_str(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }
int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}
int ends_with(const char* s, const char* suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}
double median(double* x, int n) {
    qsort(x, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

double meminfo_bytes(const char* field) {
    FILE* f = fopen("/proc/meminfo", "r");
    double kb = 0;
    char line[256];
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':') { kb = atof(line + n + 1); break; }
    if (f) fclose(f);
    return kb * 1024;
}
