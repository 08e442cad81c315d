// ckpt.c — saving and loading checkpoints (see ckpt.h and checkpoint/FORMAT.md).
#include "checkpoint/ckpt.h"
#include "checkpoint/h5util.h"
#include "checkpoint/validate.h"
#include "backend/backend.h"
#include "common/files.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

enum { KIND_MODEL = 0, KIND_M = 1, KIND_V = 2 };
static const char* GROUP[3] = { "/model", "/optimizer/m", "/optimizer/v" };

void ckpt_init(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }
void ckpt_shutdown(void) { H5close(); }

#define ERR(...) do { snprintf(err, errlen, __VA_ARGS__); } while (0)

// ---- one pass over the datasets, shared by save and load ------------------------------------------------
typedef struct {
    const ParamTable* t;
    const AdamW* o;
    const Grid* g;
    const ZeroUnits* zu;   // the model's ZeRO units
    int sharded[3];     // per kind: this rank holds only its owned slices, packed (moments under ZeRO; parameters
                        // under ZeRO-3)
    size_t len[3];      // elements of each staging buffer
    float* host[3];     // staging: parameters [total, or the packed shard]; moments m, v [the packed shard]
    uint64_t* sums;     // [3 * n] checksum terms of the elements this rank counts
    long long* nonfinite;   // [3 * n] inf/NaN elements among those (reads)
    hid_t dxpl;
} Pass;

// ---- who holds what --------------------------------------------------------------------------------
// need_range: the part [a, b) (row-major elements of this rank's shard of tensor p) this rank holds in
// memory: the whole shard, or for a ZeRO-sharded kind the owned part.
static void need_range(const Pass* ps, int kind, const ParamSpec* p, long long* a, long long* b) {
    *a = 0; *b = (long long)p->numel;
    if (!ps->sharded[kind]) return;
    size_t lo, hi;
    if (!zero_owned(ps->zu, p, &lo, &hi)) { *b = 0; return; }
    *a = (long long)(lo - p->offset); *b = (long long)(hi - p->offset);
}
// counts: whether this rank's needed part is the one written to the file and counted in the checksum —
// every element of a logical tensor has exactly one such rank. Replicated over TP: TP rank 0; replicated
// over dp x cp: the (cp 0, dp 0) rank, except ZeRO-sharded kinds, whose owned ranges partition the shard.
static int counts(const Pass* ps, int kind, const ParamSpec* p) {
    if (p->split == SPLIT_REPLICATED && ps->g->tp_rank != 0) return 0;
    if (ps->sharded[kind]) return 1;
    return ps->g->cp_rank == 0 && ps->g->dp_rank == 0;
}
// offset of shard element a of tensor p in this rank's host buffer of `kind`
static size_t buf_index(const Pass* ps, int kind, const ParamSpec* p, long long a) {
    return ps->sharded[kind] ? zero_index(ps->zu, p->offset + (size_t)a) : p->offset + (size_t)a;
}

// checksum terms of shard elements [a, b) with stored bit patterns (fp32 bits, or bf16 in the low 16);
// *nonfinite (may be NULL) counts the elements that are inf or NaN
static uint64_t xsum_range(const ParamSpec* p, long long a, long long b, const uint32_t* bits, int bf16, long long* nonfinite) {
    long lc = p->lshape[1];
    long valid_rows = p->shape[0] - p->row0 < p->lshape[0] ? p->shape[0] - p->row0 : p->lshape[0];
    if (b > (long long)valid_rows * lc) b = (long long)valid_rows * lc;
    uint32_t em = bf16 ? 0x7F80u : 0x7F800000u;   // all exponent bits set: inf or NaN
    uint64_t s = 0;
    long long bad = 0;
    for (long long j = a; j < b; j++) {
        uint64_t idx = (uint64_t)(p->row0 + j / lc) * p->shape[1] + p->col0 + j % lc;
        s += h5_xsum_term(idx, bits[j - a]);
        bad += (bits[j - a] & em) == em;
    }
    if (nonfinite) *nonfinite = bad;
    return s;
}

static hid_t logical_space(const ParamSpec* p) {
    hsize_t dims[2] = { (hsize_t)p->shape[0], (hsize_t)p->shape[1] };
    return H5Screate_simple(p->ndim, dims, NULL);
}

static long long select_part(hid_t fs, const ParamSpec* p, long long a, long long b) {
    return h5_select_shard_range(fs, p->shape[0], p->shape[1], p->row0, p->col0, p->lshape[0], p->lshape[1], a, b);
}

// memory space for n selected elements of shard range [a, b): the whole shard as a 2-D block of the same
// shape as the file selection (so HDF5 moves whole rows, also for chunked datasets), else a flat run
static hid_t mem_space(const ParamSpec* p, long long a, long long b, long long n) {
    long valid_rows = p->shape[0] - p->row0 < p->lshape[0] ? p->shape[0] - p->row0 : p->lshape[0];
    if (p->ndim == 2 && n > 0 && a == 0 && b >= (long long)valid_rows * p->lshape[1]) {
        hsize_t d2[2] = { (hsize_t)valid_rows, (hsize_t)p->lshape[1] };
        return H5Screate_simple(2, d2, NULL);
    }
    hsize_t d = n > 0 ? (hsize_t)n : 1;
    hid_t ms = H5Screate_simple(1, &d, NULL);
    if (ms >= 0 && n <= 0 && H5Sselect_none(ms) < 0) { H5Sclose(ms); return H5I_INVALID_HID; }
    return ms;
}

static int pass_open(Pass* ps, const Model* m, const AdamW* o, const Grid* g) {
    memset(ps, 0, sizeof *ps);
    ps->t = &m->pt; ps->o = o; ps->g = g; ps->zu = &m->zu;
    ps->sharded[KIND_MODEL] = m->zero == 3;
    ps->sharded[KIND_M] = ps->sharded[KIND_V] = o->zg != NULL;
    ps->len[KIND_MODEL] = m->zero == 3 ? m->zu.shard : m->pt.total;
    ps->len[KIND_M] = ps->len[KIND_V] = o->shard;
    for (int k = 0; k < 3; k++) ps->host[k] = calloc(ps->len[k] ? ps->len[k] : 1, sizeof(float));
    ps->sums = calloc(3 * (size_t)m->pt.n, sizeof(uint64_t));
    ps->nonfinite = calloc(3 * (size_t)m->pt.n, sizeof(long long));
    if (!ps->host[0] || !ps->host[1] || !ps->host[2] || !ps->sums || !ps->nonfinite) {
        fprintf(stderr, "checkpoint: out of memory staging the checkpoint\n");
        exit(1);
    }
    ps->dxpl = h5_dxpl(strcmp(m->cfg.ckpt_io, "independent") != 0);
    return ps->dxpl < 0;
}
static void pass_close(Pass* ps) {
    for (int k = 0; k < 3; k++) free(ps->host[k]);
    free(ps->sums);
    free(ps->nonfinite);
    if (ps->dxpl >= 0) H5Pclose(ps->dxpl);
}

// Move dataset (kind, tensor i) between the open dataset d and this rank's staging: a write moves only
// the elements this rank counts, a read everything this rank needs (bf16 datasets are widened). Sets the
// counted elements' checksum terms (and, reading, their count of non-finite values). 0, or -1 on an HDF5 error.
static int move_dataset(Pass* ps, hid_t d, int kind, int i, int write, int bf16) {
    const ParamSpec* p = &ps->t->p[i];
    int counted = counts(ps, kind, p);
    long long a, b;
    need_range(ps, kind, p, &a, &b);
    if (write && !counted) b = a;                      // written by another rank
    hid_t fs = logical_space(p);
    long long n = fs < 0 ? -1 : select_part(fs, p, a, b);
    hid_t ms = n < 0 ? H5I_INVALID_HID : mem_space(p, a, b, n);
    if (ms < 0) { if (fs >= 0) H5Sclose(fs); return -1; }
    float* buf = ps->host[kind] + buf_index(ps, kind, p, a);
    int bad;
    uint32_t* bits = (uint32_t*)buf;
    if (write) bad = H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, ps->dxpl, buf) < 0;
    else if (!bf16) bad = H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, ps->dxpl, buf) < 0;
    else {   // the checksum covers the stored 16-bit patterns
        uint16_t* raw = malloc((n > 0 ? n : 1) * sizeof(uint16_t));
        bits = malloc((n > 0 ? n : 1) * sizeof(uint32_t));
        bad = !raw || !bits || H5Dread(d, H5T_NATIVE_UINT16, ms, fs, ps->dxpl, raw) < 0;
        for (long long j = 0; j < n && !bad; j++) { buf[j] = h5_bf16_to_f32(raw[j]); bits[j] = raw[j]; }
        free(raw);
    }
    int idx = kind * ps->t->n + i;
    if (!bad && n > 0 && counted) ps->sums[idx] = xsum_range(p, a, b, bits, bf16, &ps->nonfinite[idx]);
    if (bits != (uint32_t*)buf) free(bits);
    H5Sclose(ms); H5Sclose(fs);
    return bad ? -1 : 0;
}

// ---- saving ------------------------------------------------------------------------------------------

static int read_datasets(hid_t f, const char* path, Pass* ps, int kinds, char* err, size_t errlen);

// Collective: 1 on every rank when `bad` on any, err then holds the lowest failing rank's line everywhere
static int agree(const Grid* g, int bad, char* err, size_t errlen) { return grid_agree(g->world_g, bad != 0, err, errlen); }

typedef struct { hid_t g; const Config* c; int bad; } KeyCtx;
static void write_key(const char* key, int is_model, void* vctx) {
    (void)is_model;
    KeyCtx* ctx = vctx;
    char buf[CFG_STR + 32];
    config_get(ctx->c, key, buf, sizeof buf);
    if (h5_attr_write_str(ctx->g, key, buf)) ctx->bad = 1;
}
static int write_config(hid_t f, const Config* c) {
    KeyCtx ctx = { H5Gcreate2(f, "/config", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), c, 0 };
    if (ctx.g < 0) return 1;
    config_each_key(write_key, &ctx);
    if (H5Gclose(ctx.g) < 0) ctx.bad = 1;
    return ctx.bad;
}

// the root attributes and the groups; 0, or 1 when any write failed
static int write_header(hid_t f, const Config* c, const AdamW* o, const Grid* g, const TrainState* st) {
    char* cfgtext = NULL; size_t cfglen = 0;
    FILE* mem = open_memstream(&cfgtext, &cfglen);
    if (!mem) return 1;
    config_write_exact(c, mem); fclose(mem);
    int bad = 0;
    bad |= h5_attr_write_str(f, "format", CKPT_FORMAT);
    bad |= h5_attr_write_i64(f, "format_version", CKPT_VERSION);
    bad |= h5_attr_write_i64(f, "step", st->step);
    bad |= h5_attr_write_i64(f, "tokens_seen", st->tokens_seen);
    bad |= h5_attr_write_i64(f, "data_cursor", st->cursor);
    bad |= h5_attr_write_i64(f, "adam_t", o->t);
    bad |= h5_attr_write_u64(f, "state_checksum", ckpt_state_checksum(CKPT_VERSION, st->step, st->cursor, st->tokens_seen, o->t));
    bad |= h5_attr_write_i64(f, "seed", c->seed);
    bad |= h5_attr_write_str(f, "rng", "counter-based: initial weights and data order are pure functions of seed");
    bad |= h5_attr_write_i64(f, "saved_tp", g->tp);
    bad |= h5_attr_write_i64(f, "saved_cp", g->cp);
    bad |= h5_attr_write_i64(f, "saved_dp", g->dp);
    bad |= h5_attr_write_i64(f, "saved_zero", o->zg ? o->stage : 0);
    bad |= h5_attr_write_i64(f, "data_tokens", st->data_tokens);   // the run's identity and data set size
    if (st->run_id[0]) bad |= h5_attr_write_str(f, "run_id", st->run_id);
    if (st->data_meta && st->data_meta[0]) bad |= h5_attr_write_str(f, "data_meta", st->data_meta);
    bad |= h5_attr_write_str(f, "config", cfgtext);
    free(cfgtext);
    bad |= write_config(f, c);
    const char* groups[] = { "/model", "/optimizer", "/optimizer/m", "/optimizer/v" };
    for (int i = 0; i < 4; i++) {
        hid_t gr = H5Gcreate2(f, groups[i], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (gr < 0 || H5Gclose(gr) < 0) bad = 1;
    }
    return bad != 0;
}

// Every dataset with its checksum attribute (collective); ds[3n] receives the open datasets (closed here).
// 0, or 1 with err on every rank. Each dataset's creation and write are agreed on before the next, so that
// no rank enters a collective HDF5 call the others left.
static int write_datasets(hid_t f, Pass* ps, const char* tmp, char* err, size_t errlen) {
    const ParamTable* t = ps->t;
    int nd = 3 * t->n, bad = 0;
    const char* slow = getenv("RINGLM_TEST_CKPT_SLOW_MS");   // test hook: widen the window for kill -9
    // test hook: this rank stops itself (SIGSTOP) as the others enter the collective write of the first dataset
    const char* stop = getenv("RINGLM_TEST_CKPT_STOP_RANK");
    int stop_rank = stop && *stop ? atoi(stop) : -1;
    for (int kind = 0; kind < 3 && !bad; kind++)
        for (int i = 0; i < t->n && !bad; i++) {
            char path[256];
            snprintf(path, sizeof path, "%s/%s", GROUP[kind], t->p[i].name);
            hid_t fs = logical_space(&t->p[i]);
            hid_t d = fs < 0 ? H5I_INVALID_HID : H5Dcreate2(f, path, H5T_IEEE_F32LE, fs, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            if (fs >= 0) H5Sclose(fs);
            if (d < 0) ERR("checkpoint: creating %s in '%s' failed (disk full?)", path, tmp);
            if (agree(ps->g, d < 0, err, errlen)) { if (d >= 0) H5Dclose(d); bad = 1; break; }
            if (stop_rank >= 0 && stop_rank == ps->g->rank && kind == 0 && i == 0) raise(SIGSTOP);
            int wbad = move_dataset(ps, d, kind, i, 1, 0) != 0;
            if (wbad) ERR("checkpoint: writing %s to '%s' failed (disk full?)", path, tmp);
            if (H5Dclose(d) < 0 && !wbad) { wbad = 1; ERR("checkpoint: closing %s in '%s' failed (disk full?)", path, tmp); }
            bad = agree(ps->g, wbad, err, errlen);
            if (slow) { struct timespec ts = { 0, atoi(slow) * 1000000L }; nanosleep(&ts, NULL); }
        }
    if (bad) return 1;
    ctl_sum_u64(ps->g->world_g, ps->sums, nd);
    for (int kind = 0; kind < 3 && !bad; kind++)
        for (int i = 0; i < t->n && !bad; i++) {
            char path[256];
            snprintf(path, sizeof path, "%s/%s", GROUP[kind], t->p[i].name);
            hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
            int abad = d < 0 || h5_attr_write_u64(d, "checksum", ps->sums[kind * t->n + i]) != 0;
            if (d >= 0 && H5Dclose(d) < 0) abad = 1;
            if (abad) { ERR("checkpoint: writing the checksum of %s in '%s' failed (disk full?)", path, tmp); bad = 1; }
        }
    return agree(ps->g, bad, err, errlen);
}

// The first tensor holding inf or NaN among the elements this rank would write: "GROUP/NAME", or NULL
static const char* first_nonfinite(const Pass* ps, char* buf, size_t n) {
    const ParamTable* t = ps->t;
    for (int kind = 0; kind < 3; kind++)
        for (int i = 0; i < t->n; i++) {
            const ParamSpec* p = &t->p[i];
            if (!counts(ps, kind, p)) continue;
            long long a, b, bad = 0;
            need_range(ps, kind, p, &a, &b);
            if (b <= a) continue;
            xsum_range(p, a, b, (const uint32_t*)(ps->host[kind] + buf_index(ps, kind, p, a)), 0, &bad);
            if (bad) { snprintf(buf, n, "%s/%s", GROUP[kind], p->name); return buf; }
        }
    return NULL;
}

// bytes to reserve for a checkpoint of table t: the fp32 data of the parameters and both moments, and
// generous room for HDF5's metadata (object headers, links, attributes, the config text)
static long long file_bytes(const ParamTable* t) {
    long long data = 0;
    for (int i = 0; i < t->n; i++) data += (long long)t->p[i].shape[0] * (t->p[i].ndim == 2 ? t->p[i].shape[1] : 1);
    return 3 * 4 * data + 3LL * t->n * 512 + (64LL << 10);   // (measured: ~180 bytes per dataset + 10 KiB)
}

int ckpt_reserve(const char* who, const char* path, long long bytes, int create, char* err, size_t errlen) {
    const char* skip = getenv("RINGLM_TEST_CKPT_NO_RESERVE");
    if (skip && *skip && strcmp(skip, "0")) return 0;
    int fd = open(path, O_WRONLY | (create ? O_CREAT | O_TRUNC : 0), 0644);
    if (fd < 0) {
        ERR("%s: cannot create '%s': %s", who, path, strerror(errno));
        return 1;
    }
    int rc = fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)bytes), e = rc ? errno : 0;
    close(fd);
    struct statvfs sv;
    double free_mib = statvfs(path, &sv) ? -1 : (double)sv.f_bavail * sv.f_frsize / 1048576.0;
    if (rc && e != ENOSPC && e != EDQUOT) {   // no reservation here (EOPNOTSUPP, ...): at least the free space
        if (free_mib < 0 || free_mib * 1048576.0 >= (double)bytes) return 0;
        e = ENOSPC;
    }
    if (!rc) return 0;
    ERR("%s: not enough space for '%s': it needs about %.1f MiB, %.1f MiB are free there (%s)", who, path,
        bytes / 1048576.0, free_mib, e == EDQUOT ? "quota exceeded" : "disk full");
    return 1;
}

// Write and verify NAME.tmp (collective); 0, or 1 with err on every rank and NAME.tmp removed. The file is
// reserved on disk before it is written, every write and the close are agreed on, and then the closed file is
// fsynced, opened again and read back in full: the state attributes and every dataset's checksum must equal
// what was written.
static int write_verified(const char* tmp, const Model* m, const AdamW* o, const Grid* g, const TrainState* st,
                          Pass* ps, char* err, size_t errlen) {
    int r0 = g->rank == 0, bad = 0;
    long long need = file_bytes(ps->t);
    // 1. the probe: enough space for the whole file, before HDF5 touches it
    if (r0) bad = ckpt_reserve("checkpoint", tmp, need, 1, err, errlen);
    if (agree(g, bad, err, errlen)) goto fail;
    // 2. create, and hold the space for this file
    hid_t fapl = h5_fapl(g->world_g);
    hid_t f = fapl < 0 ? H5I_INVALID_HID : H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (f < 0) ERR("checkpoint: cannot create '%s' (is out_dir writable and on a file system every rank sees?)", tmp);
    if (agree(g, f < 0, err, errlen)) { if (f >= 0) H5Fclose(f); goto fail; }
    if (r0) bad = ckpt_reserve("checkpoint", tmp, need, 0, err, errlen);
    bad = agree(g, bad, err, errlen);
    // 3. the header and the datasets
    if (!bad) {
        bad = write_header(f, &m->cfg, o, g, st);
        if (bad) ERR("checkpoint: writing the attributes of '%s' failed (disk full?)", tmp);
        bad = agree(g, bad, err, errlen);
    }
    if (!bad) bad = write_datasets(f, ps, tmp, err, errlen);
    // 4. one rank: HDF5's metadata goes to disk now, while a failure can still be undone (a close that fails
    // leaves HDF5 unable to shut down: it would crash when MPI finalizes). Not on several ranks: a rank whose
    // flush fails leaves the others in the flush's MPI-IO file sync (HDF5 1.10); there the reservation keeps the
    // metadata writes from failing, and a close that fails half-way still returns on every rank.
    if (!bad && g->world == 1) {
        bad = H5Fflush(f, H5F_SCOPE_GLOBAL) < 0;
        if (bad) ERR("checkpoint: writing the metadata of '%s' failed (disk full?)", tmp);
        bad = agree(g, bad, err, errlen);
    }
    if (bad) {
        // a failed file is deleted anyway: give its space back first, so that closing it (HDF5 writes its
        // metadata then, on every rank together) cannot fail for lack of space
        if (r0 && truncate(tmp, 0)) {}
        ctl_barrier(g->world_g);
        H5Fclose(f);
        goto fail;
    }
    // 5. close; a failed close is a failed save on every rank
    bad = H5Fclose(f) < 0;
    if (bad) ERR("checkpoint: closing '%s' failed (disk full?)", tmp);
    if (agree(g, bad, err, errlen)) goto fail;
    // 6. release what was reserved beyond the end; fsync; then read everything back
    if (r0) {
        struct stat sb;
        bad = stat(tmp, &sb) || truncate(tmp, sb.st_size) || fsync_path(tmp);
        if (bad) ERR("checkpoint: cannot fsync '%s': %s", tmp, strerror(errno));
    }
    if (agree(g, bad, err, errlen)) goto fail;
    uint64_t* want = malloc(3 * (size_t)ps->t->n * sizeof(uint64_t));
    if (!want) { fprintf(stderr, "checkpoint: out of memory\n"); exit(1); }
    memcpy(want, ps->sums, 3 * (size_t)ps->t->n * sizeof(uint64_t));
    memset(ps->sums, 0, 3 * (size_t)ps->t->n * sizeof(uint64_t));
    char verr[1024] = "";
    fapl = h5_fapl(g->world_g);
    f = fapl < 0 ? H5I_INVALID_HID : H5Fopen(tmp, H5F_ACC_RDONLY, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    bad = f < 0;
    if (bad) snprintf(verr, sizeof verr, "it cannot be opened");
    if (!agree(g, bad, verr, sizeof verr)) {
        CkptState s;
        char serr[1024];
        bad = ckpt_read_state(f, "checkpoint", tmp, &s, serr, sizeof serr);
        if (bad) snprintf(verr, sizeof verr, "%s", serr);
        else if (s.step != st->step || s.cursor != st->cursor || s.tokens != st->tokens_seen || s.adam_t != o->t || !s.have_sum)
            bad = 1, snprintf(verr, sizeof verr, "the training state read back differs");
        if (!agree(g, bad, verr, sizeof verr)) {
            bad = read_datasets(f, tmp, ps, 3, verr, sizeof verr);
            for (int i = 0; i < 3 * ps->t->n && !bad; i++)
                if (ps->sums[i] != want[i]) {
                    bad = 1;
                    snprintf(verr, sizeof verr, "%s/%s reads back other values than were written", GROUP[i / ps->t->n], ps->t->p[i % ps->t->n].name);
                }
        }
        if (H5Fclose(f) < 0 && !bad) { bad = 1; snprintf(verr, sizeof verr, "closing it after reading failed"); }
        bad = agree(g, bad, verr, sizeof verr);
    }
    free(want);
    if (!bad) return 0;
    char pre[CFG_STR + 200];   // the reader's own "checkpoint: 'NAME.tmp'" prefix is said once
    snprintf(pre, sizeof pre, "checkpoint: '%s'", tmp);
    const char* why = verr;
    if (!strncmp(why, pre, strlen(pre))) { why += strlen(pre); why += *why == ':' ? 2 : *why == ' ' ? 1 : 0; }
    ERR("checkpoint: '%s' did not verify after writing (%s); it was not used", tmp, why);
fail:
    if (r0) unlink(tmp);
    ctl_barrier(g->world_g);
    return 1;
}

// ckpt_NNNNNNNN.h5: the name the trainer gives a checkpoint (the first len characters of s: exactly that)
static int trainer_name(const char* s, size_t len) {
    if (len != 16 || strncmp(s, "ckpt_", 5) || strncmp(s + 13, ".h5", 3)) return 0;
    for (int i = 5; i < 13; i++) if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

// the run ids of checkpoint files, by (path, inode, size, mtime): each file is read once (this run's own saves
// not at all)
static struct { char name[CFG_STR + 300]; ino_t ino; off_t size; struct timespec mt; char id[40]; int bad; } memo[64];
static int n_memo;
static void memo_put(const char* p, const struct stat* st, const char* id, int bad) {
    int k = -1;
    for (int i = 0; i < n_memo && k < 0; i++) if (!strcmp(memo[i].name, p)) k = i;
    if (k < 0) k = n_memo < 64 ? n_memo++ : (int)(st->st_ino % 64);
    snprintf(memo[k].name, sizeof memo[k].name, "%s", p);
    memo[k].ino = st->st_ino; memo[k].size = st->st_size; memo[k].mt = st->st_mtim;
    snprintf(memo[k].id, sizeof memo[k].id, "%s", id);
    memo[k].bad = bad;
}

// does checkpoint file p carry run id `id`?
static int same_run(const char* p, const char* id) {
    struct stat st;
    if (stat(p, &st)) return 0;
    for (int i = 0; i < n_memo; i++)
        if (!strcmp(memo[i].name, p) && memo[i].ino == st.st_ino && memo[i].size == st.st_size &&
            memo[i].mt.tv_sec == st.st_mtim.tv_sec && memo[i].mt.tv_nsec == st.st_mtim.tv_nsec)
            return !memo[i].bad && !strcmp(memo[i].id, id);
    char got[40] = "";
    int bad = ckpt_file_run_id(p, got, sizeof got);
    memo_put(p, &st, bad ? "" : got, bad);
    return !bad && !strcmp(got, id);
}

// rank 0: publish tmp as final, point `latest` at it, then drop old checkpoints. On a failure nothing that
// existed before changes (the new file is removed, `latest` still names the previous checkpoint).
static int publish(const char* out_dir, const char* tmp, const char* final, const char* name, int keep_last,
                   const char* run_id, char* err, size_t errlen) {
    if (rename(tmp, final)) { ERR("checkpoint: cannot rename '%s' to '%s': %s", tmp, final, strerror(errno)); unlink(tmp); return 1; }
    fsync_path(out_dir);
    struct stat fst;
    if (!stat(final, &fst)) memo_put(final, &fst, run_id, 0);   // (this run wrote it: no need to read its id)
    char lt[CFG_STR + 32], lf[CFG_STR + 32];
    snprintf(lt, sizeof lt, "%s/latest.tmp", out_dir);
    snprintf(lf, sizeof lf, "%s/latest", out_dir);
    FILE* f = fopen(lt, "w");
    int bad = !f || fprintf(f, "%s\n", name) < 0 || fflush(f) || fsync(fileno(f));
    int e = errno;
    if (f && fclose(f)) { bad = 1; e = errno; }
    if (bad || rename(lt, lf)) {
        ERR("checkpoint: cannot write '%s': %s; 'latest' still names the previous checkpoint", bad ? lt : lf, strerror(bad ? e : errno));
        unlink(lt);
        unlink(final);
        return 1;
    }
    fsync_path(out_dir);
    DIR* d = opendir(out_dir);                 // old checkpoints go only after the new one is verified and named
    if (!d) return 0;
    char* names[4096]; int n = 0;
    struct dirent* de;
    while ((de = readdir(d)) && n < 4096) {
        size_t l = strlen(de->d_name);
        if (l == 20 && trainer_name(de->d_name, 16) && !strcmp(de->d_name + 16, ".tmp")) {   // a killed save's leftover
            char p[CFG_STR + 300];
            snprintf(p, sizeof p, "%s/%s", out_dir, de->d_name);
            unlink(p);
            continue;
        }
        if (l == 16 && trainer_name(de->d_name, 16)) names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof(char*), cmp_str);
    // keep_last counts and deletes only this run's checkpoints: the trainer's names, carrying this run's id (one
    // that lacks it or carries another is never deleted, nor counted)
    int ours = 0;
    for (int i = n - 1; i >= 0; i--) {
        char p[CFG_STR + 300];
        snprintf(p, sizeof p, "%s/%s", out_dir, names[i]);
        int mine = !strcmp(names[i], name) || (keep_last > 0 && run_id[0] && same_run(p, run_id));
        if (mine && ++ours > keep_last && keep_last > 0) unlink(p);
        free(names[i]);
    }
    return 0;
}

static int save_(const char* out_dir, int keep_last, const Model* m, const AdamW* o, const Grid* g,
                 const TrainState* st, char* err, size_t errlen);
// the watchdog covers the whole save (HDF5's collective I/O, rank 0's file work): comm_phase_begin
int ckpt_save(const char* out_dir, int keep_last, const Model* m, const AdamW* o, const Grid* g,
              const TrainState* st, char* err, size_t errlen) {
    char ph[64];
    snprintf(ph, sizeof ph, "saving ckpt_%08lld.h5", st->step);
    comm_phase_begin(ph);
    int rc = save_(out_dir, keep_last, m, o, g, st, err, errlen);
    comm_phase_end();
    return rc;
}
static int save_(const char* out_dir, int keep_last, const Model* m, const AdamW* o, const Grid* g,
                 const TrainState* st, char* err, size_t errlen) {
    char name[64], tmp[CFG_STR + 160], final[CFG_STR + 80];
    snprintf(name, sizeof name, "ckpt_%08lld.h5", st->step);
    snprintf(final, sizeof final, "%s/%s", out_dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", final);
    if (g->rank == 0) unlink(tmp);             // a stale one from a killed save
    ctl_barrier(g->world_g);
    Pass ps;
    int bad = pass_open(&ps, m, o, g);
    if (bad) ERR("checkpoint: HDF5 cannot make a transfer property list");
    if (agree(g, bad, err, errlen)) { pass_close(&ps); return 1; }
    be_download(ps.host[KIND_MODEL], m->zero == 3 ? m->pshard : m->params, ps.len[KIND_MODEL] * sizeof(float));
    be_download(ps.host[KIND_M], o->m, ps.len[KIND_M] * sizeof(float));
    be_download(ps.host[KIND_V], o->v, ps.len[KIND_V] * sizeof(float));
    // non-finite parameters or moments are never saved (nor named by `latest`)
    char which[256];
    bad = first_nonfinite(&ps, which, sizeof which) != NULL;
    if (bad) ERR("checkpoint: not saving step %lld: %s holds inf or NaN (training diverged: lower lr, check the data); "
                 "the previous checkpoint is untouched", st->step, which);
    if (agree(g, bad, err, errlen) || write_verified(tmp, m, o, g, st, &ps, err, errlen)) {
        pass_close(&ps);
        if (!strstr(err, "previous checkpoint")) {
            size_t l = strlen(err);
            snprintf(err + l, errlen - l, "; the previous checkpoint is untouched");
        }
        return 1;
    }
    pass_close(&ps);
    int rc = 0;
    if (g->rank == 0) rc = publish(out_dir, tmp, final, name, keep_last, st->run_id, err, errlen);
    return agree(g, rc, err, errlen);
}

// ---- loading -----------------------------------------------------------------------------------------

// after a failed read of path: when the file is gone, say that instead (keep_last of a run still writing there)
static int vanished(const char* path, int failed, char* err, size_t errlen) {
    struct stat st;
    if (failed && stat(path, &st) && errno == ENOENT)
        ERR("checkpoint: '%s' was deleted while it was being read (by keep_last of a run still writing there?): give a "
            "checkpoint that run keeps, or its out_dir for the newest", path);
    return failed;
}

int ckpt_retry_vanished(const Group* g, int failed, const char* spec, const char* path) {
    struct stat st;
    double v[2] = { failed != 0, failed && path[0] && strcmp(path, spec) && stat(path, &st) && errno == ENOENT };
    ctl_max_f64(g, v, 2);
    return v[0] && v[1];
}

int ckpt_resolve(const char* spec, const char* out_dir, char* path, size_t n, char* err, size_t errlen) {
    char dir[CFG_STR + 16];
    struct stat st;
    if (!strcmp(spec, "latest")) snprintf(dir, sizeof dir, "%s", out_dir);
    else if (stat(spec, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(dir, sizeof dir, "%s", spec);
    else {
        if (stat(spec, &st)) { ERR("checkpoint: '%s' does not exist", spec); return 1; }
        const char* base = strrchr(spec, '/');
        if (!S_ISREG(st.st_mode) || strcmp(base ? base + 1 : spec, "latest")) { snprintf(path, n, "%s", spec); return 0; }
        // the pointer file OUT_DIR/latest itself: the checkpoint it names, as for OUT_DIR
        if (!base) snprintf(dir, sizeof dir, ".");
        else if (base == spec) snprintf(dir, sizeof dir, "/");
        else snprintf(dir, sizeof dir, "%.*s", (int)(base - spec), spec);
    }
    char lf[CFG_STR + 32], name[512] = "";
    snprintf(lf, sizeof lf, "%s/latest", dir);
    struct stat ls;
    if (lstat(lf, &ls)) { ERR("checkpoint: '%s' has no 'latest' pointer (no completed checkpoint there)", dir); return 1; }
    int fd;   // (a FIFO or a link to nothing named latest is one line, never a hang)
    if (open_regular("checkpoint", "a regular file (the 'latest' pointer)", lf, &fd, err, errlen)) return 1;
    ssize_t k = read(fd, name, sizeof name - 1);
    close(fd);
    name[k > 0 ? k : 0] = 0;
    name[strcspn(name, "\r\n")] = 0;
    if (!name[0] || strchr(name, '/')) { ERR("checkpoint: '%s' is empty or malformed", lf); return 1; }
    snprintf(path, n, "%s/%s", dir, name);
    if (stat(path, &st)) { ERR("checkpoint: '%s' points at '%s', which does not exist", lf, path); return 1; }
    // test hook: a shell command run once, right after the first resolution (what a live run's keep_last does then)
    static int hooked;
    const char* hook = getenv("RINGLM_TEST_CKPT_RESOLVED_CMD");
    if (hook && *hook && !hooked++ && system(hook)) {}
    return 0;
}

struct Cmp { hid_t grp; const Config* c; char* diff_model; char* diff_train; int missing; char* missing_key;
             int malformed; const char* const* allow; };
// keys that say how this run is launched, not what it trains: never reported as changed
static const char* OPERATIONAL[] = { "resume", "out_dir", "dump_weights", "tp", "cp", "cp_layout", "cp_shard", "cp_shard_min", "cp_prune", "zero", "ckpt_io", "comm", "timeout_s",
                                     "log_every", "peak_tflops", "verify_attention", "ckpt_every", "keep_last", "save_final", "recompute", NULL };
static void compare_key(const char* key, int is_model, void* vctx) {
    struct Cmp* x = vctx;
    for (int i = 0; OPERATIONAL[i]; i++) if (!strcmp(key, OPERATIONAL[i])) return;
    for (int i = 0; x->allow && x->allow[i]; i++) if (!strcmp(key, x->allow[i])) return;
    if (!config_key_used(x->c, key)) return;   // (a value the run's model does not use; another rope_scaling is reported)
    char want[CFG_STR + 32], have[CFG_STR + 32];
    config_get(x->c, key, want, sizeof want);
    int rc = h5_attr_read_str(x->grp, key, have, sizeof have);
    if (rc) {
        if ((is_model || rc == -2) && !x->missing) { x->missing = 1; x->malformed = rc == -2; snprintf(x->missing_key, 128, "%s", key); }
        return;
    }
    if (!strcmp(want, have)) return;
    // the same value written another way (a float as "1e-05" and as "9.99999975e-06", as another writer may):
    // equal when the saved text reads back to the run's value
    static Config tmp;
    char canon[CFG_STR + 32], e[CFG_STR + 256];
    tmp = *x->c;
    int readable = !config_set(&tmp, key, have, "checkpoint /config", e, sizeof e);
    if (readable && !config_get(&tmp, key, canon, sizeof canon) && !strcmp(canon, want)) return;
    if (readable) config_format(&tmp, key, have, sizeof have);   // both in the shortest text that reads back
    config_format(x->c, key, want, sizeof want);
    char* out = is_model ? x->diff_model : x->diff_train;
    size_t l = strlen(out);
    if (l < 1500) snprintf(out + l, 2048 - l, "%s%s (checkpoint %s, run %s)", l ? ", " : "", key, have, want);
}

// the saved config against the run's: model keys must agree (except `allow`); training keys that changed
// are listed in diff_train. 0 or 1 + err
static int check_config(hid_t f, const char* path, const Config* c, const char* const* allow, char* diff_train,
                        char* err, size_t errlen) {
    if (!h5_exists(f, "/config")) { ERR("checkpoint: '%s' lacks the group /config", path); return 1; }
    char dm[2048] = "", mk[128] = "";
    hid_t cg = H5Gopen2(f, "/config", H5P_DEFAULT);
    if (cg < 0) { ERR("checkpoint: '%s': the group /config cannot be opened (corrupt file)", path); return 1; }
    struct Cmp x = { cg, c, dm, diff_train, 0, mk, 0, allow };
    config_each_key(compare_key, &x);
    H5Gclose(cg);
    if (x.missing) { ERR("checkpoint: '%s' %s the config key /config:%s", path, x.malformed ? "has a malformed" : "lacks", mk); return 1; }
    if (dm[0]) { ERR("checkpoint: '%s' was saved for another model: %s", path, dm); return 1; }
    return 0;
}

// open dataset (kind, tensor p) and check its shape and type; the dataset and *bf16, or -1 with err
static hid_t open_dataset(hid_t f, const char* path, int kind, const ParamSpec* p, int* bf16, char* err, size_t errlen) {
    char dpath[256];
    snprintf(dpath, sizeof dpath, "%s/%s", GROUP[kind], p->name);
    if (!h5_exists(f, dpath)) { ERR("checkpoint: '%s' lacks the dataset %s", path, dpath); return -1; }
    hid_t d = H5Dopen2(f, dpath, H5P_DEFAULT);
    if (d < 0) { ERR("checkpoint: '%s': the dataset %s cannot be opened (corrupt file)", path, dpath); return -1; }
    hid_t fs = H5Dget_space(d), ft = H5Dget_type(d);
    hsize_t dims[2] = { 0, 1 };
    int nd_file = fs < 0 ? -1 : H5Sget_simple_extent_ndims(fs);
    if ((nd_file == 1 || nd_file == 2) && H5Sget_simple_extent_dims(fs, dims, NULL) < 0) nd_file = -1;
    H5T_class_t cl = ft < 0 ? H5T_NO_CLASS : H5Tget_class(ft);
    size_t es = ft < 0 ? 0 : H5Tget_size(ft);
    if (fs >= 0) H5Sclose(fs);
    if (ft >= 0) H5Tclose(ft);
    *bf16 = cl == H5T_INTEGER && es == 2;
    if (!(cl == H5T_FLOAT && es == 4) && !*bf16) {
        ERR("checkpoint: '%s': %s is neither fp32 nor bf16 (corrupt file)", path, dpath);
        H5Dclose(d);
        return -1;
    }
    if (nd_file != p->ndim || dims[0] != (hsize_t)p->shape[0] || (p->ndim == 2 && dims[1] != (hsize_t)p->shape[1])) {
        if (nd_file < 1 || nd_file > 2) ERR("checkpoint: '%s': %s has %d dimensions, the model needs %d", path, dpath, nd_file, p->ndim);
        else ERR("checkpoint: '%s': %s has shape [%llu%s%llu], the model needs [%ld%s%ld]", path, dpath,
            (unsigned long long)dims[0], nd_file == 2 ? ", " : "", nd_file == 2 ? (unsigned long long)dims[1] : 0ULL,
            p->shape[0], p->ndim == 2 ? ", " : "", p->ndim == 2 ? p->shape[1] : 0L);
        H5Dclose(d);
        return -1;
    }
    return d;
}

// read every dataset of the first `kinds` kinds into the staging and verify the checksums and that every
// value is finite (collective); 0 or 1 + err (the same on every rank)
static int read_datasets(hid_t f, const char* path, Pass* ps, int kinds, char* err, size_t errlen) {
    const ParamTable* t = ps->t;
    int nd = 3 * t->n, rc = 0;
    uint64_t* want = calloc(nd, sizeof(uint64_t));
    if (!want) { fprintf(stderr, "checkpoint: out of memory\n"); exit(1); }
    for (int kind = 0; kind < kinds && !rc; kind++)
        for (int i = 0; i < t->n && !rc; i++) {
            int bf16 = 0, bad = 0, arc = 0;
            hid_t d = open_dataset(f, path, kind, &t->p[i], &bf16, err, errlen);
            if (d < 0) bad = 1;
            else if ((arc = h5_attr_read_u64(d, "checksum", &want[kind * t->n + i]))) {
                ERR("checkpoint: '%s': %s/%s %s checksum attribute", path, GROUP[kind], t->p[i].name,
                    arc == -1 ? "has no" : "has a malformed");
                bad = 1;
            }
            // every rank opened the same dataset and reads it (collective transfers) only when all could
            if (!agree(ps->g, bad, err, errlen)) {
                bad = move_dataset(ps, d, kind, i, 0, bf16) != 0;
                if (bad) ERR("checkpoint: '%s': reading %s/%s failed (truncated file?)", path, GROUP[kind], t->p[i].name);
                rc = agree(ps->g, bad, err, errlen);
            } else rc = 1;
            if (d >= 0) H5Dclose(d);
        }
    if (!rc) {
        ctl_sum_u64(ps->g->world_g, ps->sums, nd);
        ctl_sum_u64(ps->g->world_g, (uint64_t*)ps->nonfinite, nd);
        for (int kind = 0; kind < kinds && !rc; kind++)
            for (int i = 0; i < t->n; i++) {
                if (ps->sums[kind * t->n + i] != want[kind * t->n + i]) {
                    ERR("checkpoint: '%s': checksum mismatch in %s/%s (the file is corrupt)", path, GROUP[kind], t->p[i].name);
                    rc = 1; break;
                }
                if (ps->nonfinite[kind * t->n + i]) {
                    ERR("checkpoint: '%s': %s/%s holds %lld inf or NaN values (a diverged run, or a file made elsewhere); no ringlm program loads it", path, GROUP[kind],
                        t->p[i].name, ps->nonfinite[kind * t->n + i]);
                    rc = 1; break;
                }
            }
    }
    free(want);
    return rc;
}

// the one-line summary of a successful load: layouts, changed training keys, missing optimizer state
static void load_notes(hid_t f, const Grid* g, const AdamW* o, int had_opt, const char* diff_train, char* notes, size_t n) {
    long long stp = -1, scp = -1, sdp = -1, sz = -1;
    h5_attr_read_i64(f, "saved_tp", &stp); h5_attr_read_i64(f, "saved_cp", &scp);
    h5_attr_read_i64(f, "saved_dp", &sdp); h5_attr_read_i64(f, "saved_zero", &sz);
    int k = snprintf(notes, n, "saved with tp %lld cp %lld dp %lld zero %lld, loaded into tp %d cp %d dp %d zero %d",
                     stp, scp, sdp, sz, g->tp, g->cp, g->dp, o->zg ? o->stage : 0);
    if (diff_train[0] && k < (int)n) k += snprintf(notes + k, n - k, "; training keys changed on resume: %s", diff_train);
    if (!had_opt && k < (int)n) snprintf(notes + k, n - k, "; no optimizer state in the checkpoint: AdamW moments start at zero");
}

static int load_(const char* path, Model* m, AdamW* o, const Grid* g, TrainState* st, const char* const* allow,
                 char* err, size_t errlen, char* notes, size_t noteslen);
int ckpt_load(const char* path, Model* m, AdamW* o, const Grid* g, TrainState* st, const char* const* allow,
              char* err, size_t errlen, char* notes, size_t noteslen) {
    char ph[300];
    const char* base = strrchr(path, '/');
    snprintf(ph, sizeof ph, "loading %.250s", base ? base + 1 : path);
    comm_phase_begin(ph);
    int rc = load_(path, m, o, g, st, allow, err, errlen, notes, noteslen);
    comm_phase_end();
    return rc;
}
static int load_(const char* path, Model* m, AdamW* o, const Grid* g, TrainState* st, const char* const* allow,
                 char* err, size_t errlen, char* notes, size_t noteslen) {
    AdamW none = {0};   // parameters only: no moments are read
    int params_only = o == NULL;
    if (params_only) o = &none;
    if (notes) notes[0] = 0;
    // the whole file's structure first, in a child process: nothing below reads metadata it has not read
    int bad = g->rank == 0 && vanished(path, ckpt_check_file("checkpoint", path, err, errlen), err, errlen);
    if (agree(g, bad, err, errlen)) return 1;
    hid_t fapl = h5_fapl(g->world_g);
    hid_t f = fapl < 0 ? H5I_INVALID_HID : H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (f < 0) ERR("checkpoint: '%s' cannot be opened as HDF5 (truncated, corrupt or not a checkpoint)", path);
    if (agree(g, vanished(path, f < 0, err, errlen), err, errlen)) {
        if (f >= 0) H5Fclose(f);
        return 1;
    }
    CkptState h;
    char dt[2048] = "";
    int rc = ckpt_read_state(f, "checkpoint", path, &h, err, errlen) || check_config(f, path, &m->cfg, allow, dt, err, errlen);
    int have_opt = !params_only && h5_exists(f, "/optimizer/m") && h5_exists(f, "/optimizer/v");
    rc = agree(g, rc, err, errlen);
    Pass ps;
    if (!rc) {
        rc = pass_open(&ps, m, o, g);
        if (rc) ERR("checkpoint: HDF5 cannot make a transfer property list");
        rc = agree(g, rc, err, errlen);
        if (!rc) rc = read_datasets(f, path, &ps, have_opt ? 3 : 1, err, errlen);
        if (!rc) {   // everything read and verified: only now does the run's state change
            size_t own = ps.len[KIND_M];
            be_upload(m->zero == 3 ? m->pshard : m->params, ps.host[KIND_MODEL], ps.len[KIND_MODEL] * sizeof(float));
            model_params_changed(m);   // the weights' bf16 copy (ZeRO-3: the gathered buffers stale)
            if (have_opt) { be_upload(o->m, ps.host[KIND_M], own * sizeof(float)); be_upload(o->v, ps.host[KIND_V], own * sizeof(float)); }
            else if (!params_only) { be_zero(o->m, own * sizeof(float)); be_zero(o->v, own * sizeof(float)); }
            o->t = have_opt ? h.adam_t : 0;
            st->step = h.step; st->cursor = h.cursor; st->tokens_seen = h.tokens;
            st->seq_len = h.seq_len;   // (older files lack these two: unknown)
            if (h5_attr_read_i64(f, "data_tokens", &st->data_tokens)) st->data_tokens = 0;
            if (h5_attr_read_str(f, "run_id", st->run_id, sizeof st->run_id)) st->run_id[0] = 0;
            if (notes) load_notes(f, g, o, have_opt || params_only, dt, notes, noteslen);
        }
        pass_close(&ps);
    }
    H5Fclose(f);
    return rc;
}

typedef struct { hid_t g; Config* c; const char* path; char* err; size_t errlen; int bad; } ReadCfg;
static void read_key(const char* key, int is_model, void* vctx) {
    (void)is_model;
    ReadCfg* x = vctx;
    char val[CFG_STR + 32];
    if (x->bad) return;
    int rc = h5_attr_read_str(x->g, key, val, sizeof val);
    if (rc == -1) return;                          // a key the file does not have keeps its default
    char* err = x->err; size_t errlen = x->errlen;
    if (rc) { ERR("checkpoint: '%s' has a malformed config key /config:%s", x->path, key); x->bad = 1; return; }
    char e[1024];
    if (config_set(x->c, key, val, "checkpoint /config", e, sizeof e)) { ERR("checkpoint: '%s': %s", x->path, e); x->bad = 1; }
}

// ckpt_check_file, then H5Fopen of path for reading (serial); the file, or -1 with err
static hid_t open_checked(const char* path, char* err, size_t errlen) {
    if (vanished(path, ckpt_check_file("checkpoint", path, err, errlen), err, errlen)) return H5I_INVALID_HID;
    hid_t fapl = h5_fapl(NULL);
    hid_t f = fapl < 0 ? H5I_INVALID_HID : H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (f < 0) ERR("checkpoint: '%s' cannot be opened as HDF5 (truncated, corrupt or not a checkpoint)", path);
    vanished(path, f < 0, err, errlen);
    return f;
}

int ckpt_read_data_meta(const char* path, char* buf, size_t n, char* err, size_t errlen) {
    hid_t f = open_checked(path, err, errlen);
    if (f < 0) return 1;
    int rc = h5_attr_read_str(f, "data_meta", buf, n);
    H5Fclose(f);
    if (rc == -2) { ERR("checkpoint: '%s' has a malformed root attribute data_meta", path); return 1; }
    return rc;
}

int ckpt_read_config(const char* path, Config* c, char* err, size_t errlen) {
    hid_t f = open_checked(path, err, errlen);
    if (f < 0) return 1;
    config_defaults(c);
    hid_t grp = h5_exists(f, "/config") ? H5Gopen2(f, "/config", H5P_DEFAULT) : H5I_INVALID_HID;
    ReadCfg x = { grp, c, path, err, errlen, 0 };
    if (grp < 0) { ERR("checkpoint: '%s' lacks the group /config", path); x.bad = 1; }
    else { config_each_key(read_key, &x); H5Gclose(grp); }
    H5Fclose(f);
    return x.bad;
}
