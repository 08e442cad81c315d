// util.c — see util.h.
#include "common/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double clock_s(clockid_t id) { struct timespec t; clock_gettime(id, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
double now_s(void) { return clock_s(CLOCK_MONOTONIC); }
double cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }
double wall_s(void) { return clock_s(CLOCK_REALTIME); }

double progress_now(void) {
    static long reads = 0;
    const char* tick = getenv("RINGLM_TEST_PROGRESS_TICK");
    return tick && *tick ? atof(tick) * (double)++reads : now_s();
}

void fmt_duration(double s, char* out, size_t n) {
    if (!(s >= 0)) s = 0;
    long long r = (long long)(s + 0.5);
    if (s < 60) snprintf(out, n, "%.1f s", s);
    else if (r < 3600) snprintf(out, n, "%lldm%02llds", r / 60, r % 60);
    else snprintf(out, n, "%lldh%02lldm", r / 3600, r / 60 % 60);
}

void stdout_lines(void) {
    if (!isatty(STDOUT_FILENO)) setvbuf(stdout, NULL, _IOLBF, 0);
}

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
