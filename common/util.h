// util.h — small helpers every part of ringlm shares: one copy each (checksums, initial weights and the
// data order depend on the hash functions being identical everywhere).
#pragma once
#include <stddef.h>
#include <stdint.h>

// splitmix64 finaliser: a bijective 64-bit mixer (initial weights, data order, checksums, passkeys)
static inline uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

// FNV-1a over the bytes of a string
static inline uint64_t fnv1a64(const char* s) {
    uint64_t h = 0xCBF29CE484222325ULL;
    for (const unsigned char* p = (const unsigned char*)s; *p; p++) h = (h ^ *p) * 0x100000001B3ULL;
    return h;
}

double now_s(void);   // monotonic wall clock, seconds
// the clock of progress lines (elapsed times, ETAs): now_s(); with RINGLM_TEST_PROGRESS_TICK=S (tests) a counter that
// advances S seconds per reading, so that the tests of progress lines do not depend on the machine's speed
double progress_now(void);
// "42.0 s", "12m05s", "3h07m": a duration for progress lines
void fmt_duration(double s, char* out, size_t n);
// stdout line-buffered when it is not a terminal (a file, a pipe, mpirun's forwarding), so that each line appears
// when it is printed; every program calls it first
void stdout_lines(void);
double cpu_s(void);   // CPU time of the whole process (all threads), seconds
double wall_s(void);  // the real-time clock, seconds since the epoch (TensorBoard's wall times)

int cmp_str(const void* a, const void* b);        // qsort comparator for an array of char*
int cmp_double(const void* a, const void* b);     // qsort comparator for an array of double
int ends_with(const char* s, const char* suffix);
double median(double* x, int n);                  // sorts x in place
// a field of /proc/meminfo ("MemTotal", "MemAvailable") in bytes; 0 when it cannot be read
double meminfo_bytes(const char* field);
