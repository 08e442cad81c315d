// tbevents.c — see tbevents.h.
#include "common/tbevents.h"
#include "common/files.h"
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// ---- CRC-32C (reflected polynomial 0x82F63B78), table-driven ----
static uint32_t crc_table[256];
static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}
uint32_t tb_masked_crc(const void* data, size_t n) {
    if (!crc_table[1]) crc_init();
    const unsigned char* p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    c ^= 0xFFFFFFFFu;
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

void tb_tag(const char* key, char* out, size_t n) {
    static const char* const GROUPS[][2] = { { "loss", "loss" }, { "val_loss", "loss" }, { "lr", "optim" },
        { "grad_norm", "optim" }, { "tokens_per_s", "speed" }, { "gflops", "speed" }, { "step_ms", "speed" },
        { "tokens_seen", "speed" }, { "cp_", "ring" }, { "sent_", "traffic" }, { "verify_", "verify" } };
    const char* g = "other";
    for (size_t i = 0; i < sizeof GROUPS / sizeof GROUPS[0]; i++) {
        const char* k = GROUPS[i][0];
        size_t l = strlen(k);
        if (k[l - 1] == '_' ? !strncmp(key, k, l) : !strcmp(key, k)) { g = GROUPS[i][1]; break; }
    }
    snprintf(out, n, "%s/%s", g, key);
}

// ---- protobuf pieces into a growing buffer ----
typedef struct { unsigned char* p; size_t n, cap; int oom; } Buf;
static void put(Buf* b, const void* d, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        unsigned char* q = realloc(b->p, cap);
        if (!q) { b->oom = 1; return; }
        b->p = q; b->cap = cap;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void varint(Buf* b, uint64_t v) {
    unsigned char t[10];
    int k = 0;
    do { t[k] = (unsigned char)(v & 0x7F); v >>= 7; if (v) t[k] |= 0x80; k++; } while (v);
    put(b, t, k);
}
static void le(Buf* b, uint64_t v, int bytes) {
    unsigned char t[8];
    for (int i = 0; i < bytes; i++) t[i] = (unsigned char)(v >> (8 * i));
    put(b, t, bytes);
}
static void field_bytes(Buf* b, int field, const void* d, size_t n) { varint(b, (uint64_t)field << 3 | 2); varint(b, n); put(b, d, n); }
static void field_double(Buf* b, int field, double v) { uint64_t u; memcpy(&u, &v, 8); varint(b, (uint64_t)field << 3 | 1); le(b, u, 8); }
static void field_float(Buf* b, int field, float v) { uint32_t u; memcpy(&u, &v, 4); varint(b, (uint64_t)field << 3 | 5); le(b, u, 4); }
static void field_varint(Buf* b, int field, uint64_t v) { varint(b, (uint64_t)field << 3 | 0); varint(b, v); }

// one TFRecord around an Event's bytes
static int write_record(TbWriter* w, const Buf* ev) {
    if (ev->oom) { errno = ENOMEM; return 1; }
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)ev->n >> (8 * i));
    uint32_t c1 = tb_masked_crc(len, 8), c2 = tb_masked_crc(ev->p, ev->n);
    unsigned char k1[4], k2[4];
    for (int i = 0; i < 4; i++) { k1[i] = (unsigned char)(c1 >> (8 * i)); k2[i] = (unsigned char)(c2 >> (8 * i)); }
    if (fwrite(len, 1, 8, w->f) != 8 || fwrite(k1, 1, 4, w->f) != 4 || fwrite(ev->p, 1, ev->n, w->f) != ev->n ||
        fwrite(k2, 1, 4, w->f) != 4 || fflush(w->f))
        return 1;
    return 0;
}

static const char SUFFIX[] = ".ringlm-train";

int tb_other_runs(const char* dir, const char* run_id, char* other, size_t n) {
    DIR* d = opendir(dir);
    int count = 0;
    if (n) other[0] = 0;
    if (!d) return 0;
    struct dirent* e;
    size_t ls = strlen(SUFFIX), lr = strlen(run_id);
    while ((e = readdir(d))) {
        const char* f = e->d_name;
        size_t lf = strlen(f);
        if (strncmp(f, "events.out.tfevents.", 20) || lf < ls || strcmp(f + lf - ls, SUFFIX)) continue;
        // ...<pid>.<run id>.ringlm-train: the run id is the component before the suffix (older files end <pid>)
        size_t end = lf - ls, b = end;
        while (b > 0 && f[b - 1] != '.') b--;
        int named = end - b > 8 && memchr(f + b, '-', end - b) != NULL;   // a run id: YYYYMMDD-HHMMSS-xxxxxxxx
        if (named && end - b == lr && !strncmp(f + b, run_id, lr)) continue;
        count++;
        if (named && n && !other[0]) snprintf(other, n, "run id %.*s", (int)(end - b), f + b);
    }
    closedir(d);
    return count;
}

int tb_open(TbWriter* w, const char* dir, const char* run_id, double wall_time, long long first_step, char* err, size_t errlen) {
    w->f = NULL;
    if (make_dirs("train: tensorboard_dir", dir, err, errlen)) return 1;
    char host[256] = "host";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    // seconds.microseconds: names sort in time order (TensorBoard reads a directory's files in name order, and a
    // resumed run's file must come after the one it supersedes, also when both start within a second)
    long long us = (long long)(wall_time * 1e6);
    snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%06lld.%s.%d.%s%s", dir, us / 1000000,
             us % 1000000, host, (int)getpid(), run_id, SUFFIX);
    w->f = fopen(w->path, "wbx");   // a new file: never one that is there
    if (!w->f) { snprintf(err, errlen, "train: cannot create the TensorBoard event file '%s': %s", w->path, strerror(errno)); return 1; }
    Buf ev = {0};
    field_double(&ev, 1, wall_time);
    field_bytes(&ev, 3, "brain.Event:2", 13);
    int fail = write_record(w, &ev);
    // SessionLog START at the first step: TensorBoard drops the events of earlier files from that step on (a resume
    // after a later checkpoint's steps, or a new run in the same directory)
    Buf start = {0}, ev2 = {0};
    field_varint(&start, 1, 1);   // status = START
    field_double(&ev2, 1, wall_time);
    field_varint(&ev2, 2, (uint64_t)first_step);
    if (start.oom) ev2.oom = 1;
    else field_bytes(&ev2, 7, start.p, start.n);
    if (!fail) fail = write_record(w, &ev2);
    free(ev.p); free(start.p); free(ev2.p);
    if (fail) {
        snprintf(err, errlen, "train: cannot write the TensorBoard event file '%s': %s", w->path, strerror(errno));
        fclose(w->f); w->f = NULL;
    }
    return fail;
}

int tb_write_record(TbWriter* w, double wall_time, long long step, const char* json) {
    Buf sum = {0}, ev = {0};
    const char* p = json;
    // a flat object of "key": value pairs; values are numbers (also bare nan / inf / -inf) or strings (left out)
    while ((p = strchr(p, '"'))) {
        const char* k = ++p;
        const char* e = strchr(k, '"');
        if (!e) break;
        p = e + 1;
        while (*p == ' ' || *p == ':') p++;
        if (*p == '"') {   // a string value: skip it
            const char* q = strchr(p + 1, '"');
            if (!q) break;
            p = q + 1;
            continue;
        }
        char key[128], tag[160];
        size_t kl = (size_t)(e - k) < sizeof key - 1 ? (size_t)(e - k) : sizeof key - 1;
        memcpy(key, k, kl); key[kl] = 0;
        char* end;
        double v = strtod(p, &end);
        if (end == p) continue;
        p = end;
        if (!strcmp(key, "step")) continue;
        tb_tag(key, tag, sizeof tag);
        Buf val = {0};
        field_bytes(&val, 1, tag, strlen(tag));
        if (isfinite(v) && fabs(v) > FLT_MAX) v = copysign(INFINITY, v);   // beyond float32: inf, as the conversion tool
        field_float(&val, 2, (float)v);
        if (val.oom) sum.oom = 1;
        else field_bytes(&sum, 1, val.p, val.n);
        free(val.p);
    }
    field_double(&ev, 1, wall_time);
    field_varint(&ev, 2, (uint64_t)step);
    if (sum.oom) ev.oom = 1;
    else field_bytes(&ev, 5, sum.p, sum.n);
    int fail = write_record(w, &ev);
    free(sum.p); free(ev.p);
    return fail;
}

int tb_close(TbWriter* w) {
    if (!w->f) return 0;
    int fail = fclose(w->f) != 0;
    w->f = NULL;
    return fail;
}
