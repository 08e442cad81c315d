// ckpt.c — saving and loading checkpoints (see ckpt.h and checkpoint/FORMAT.md).
#include "checkpoint/ckpt.h"
#include "checkpoint/h5util.h"
#include "backend/backend.h"
#include "common/files.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { KIND_MODEL = 0, KIND_M = 1, KIND_V = 2 };
static const char* GROUP[3] = { "/model", "/optimizer/m", "/optimizer/v" };

void ckpt_init(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

#define ERR(...) do { snprintf(err, errlen, __VA_ARGS__); } while (0)

// ---- who holds what --------------------------------------------------------------------------------
// need_range: the part [a, b) (row-major elements of this rank's shard of tensor p) this rank holds in
// memory: the whole shard for parameters; for AdamW moments the owned part (all of it without ZeRO-1).
static void need_range(int kind, const ParamSpec* p, const AdamW* o, long long* a, long long* b) {
    *a = 0; *b = (long long)p->numel;
    if (kind == KIND_MODEL) return;
    size_t lo, hi;
    if (!adamw_owned(o, p, &lo, &hi)) { *b = 0; return; }
    *a = (long long)(lo - p->offset); *b = (long long)(hi - p->offset);
}
// counts: whether this rank's needed part is the one written to the file and counted in the checksum —
// every element of a logical tensor has exactly one such rank. Replicated over TP: TP rank 0; replicated
// over dp x cp: the (cp 0, dp 0) rank, except ZeRO-sharded moments, whose owned ranges partition the shard.
static int counts(int kind, const ParamSpec* p, const AdamW* o, const Grid* g) {
    if (p->split == SPLIT_REPLICATED && g->tp_rank != 0) return 0;
    if (kind != KIND_MODEL && o->zg) return 1;
    return g->cp_rank == 0 && g->dp_rank == 0;
}
// offset of shard element a of tensor p in this rank's host buffer of `kind`
static size_t buf_index(int kind, const ParamSpec* p, const AdamW* o, long long a) {
    return p->offset + (size_t)a - (kind == KIND_MODEL ? 0 : o->lo);
}

// checksum terms of shard elements [a, b) with stored bit patterns (fp32 bits, or bf16 in the low 16)
static uint64_t xsum_range(const ParamSpec* p, long long a, long long b, const uint32_t* bits) {
    long lc = p->lshape[1];
    long valid_rows = p->shape[0] - p->row0 < p->lshape[0] ? p->shape[0] - p->row0 : p->lshape[0];
    if (b > (long long)valid_rows * lc) b = (long long)valid_rows * lc;
    uint64_t s = 0;
    for (long long j = a; j < b; j++) {
        uint64_t idx = (uint64_t)(p->row0 + j / lc) * p->shape[1] + p->col0 + j % lc;
        s += h5_xsum_term(idx, bits[j - a]);
    }
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
    if (n <= 0) H5Sselect_none(ms);
    return ms;
}

// ---- one pass over the datasets, shared by save and load ------------------------------------------------
typedef struct {
    const ParamTable* t;
    const AdamW* o;
    const Grid* g;
    float* host[3];     // staging: parameters [total]; moments m, v [hi - lo]
    uint64_t* sums;     // [3 * n] checksum terms of the elements this rank counts
    hid_t dxpl;
} Pass;

static void pass_open(Pass* ps, const Model* m, const AdamW* o, const Grid* g) {
    memset(ps, 0, sizeof *ps);
    ps->t = &m->pt; ps->o = o; ps->g = g;
    size_t own = o->hi - o->lo;
    ps->host[KIND_MODEL] = calloc(m->pt.total, sizeof(float));
    ps->host[KIND_M] = calloc(own ? own : 1, sizeof(float));
    ps->host[KIND_V] = calloc(own ? own : 1, sizeof(float));
    ps->sums = calloc(3 * (size_t)m->pt.n, sizeof(uint64_t));
    ps->dxpl = h5_dxpl(strcmp(m->cfg.ckpt_io, "independent") != 0);
}
static void pass_close(Pass* ps) {
    for (int k = 0; k < 3; k++) free(ps->host[k]);
    free(ps->sums);
    H5Pclose(ps->dxpl);
}

// Move dataset (kind, tensor i) between the open dataset d and this rank's staging: a write moves only
// the elements this rank counts, a read everything this rank needs (bf16 datasets are widened). Adds the
// counted elements' checksum terms. 0, or -1 on an HDF5 error.
static int move_dataset(Pass* ps, hid_t d, int kind, int i, int write, int bf16) {
    const ParamSpec* p = &ps->t->p[i];
    int counted = counts(kind, p, ps->o, ps->g);
    long long a, b;
    need_range(kind, p, ps->o, &a, &b);
    if (write && !counted) b = a;                      // written by another rank
    hid_t fs = logical_space(p);
    long long n = select_part(fs, p, a, b);
    float* buf = ps->host[kind] + buf_index(kind, p, ps->o, a);
    hid_t ms = mem_space(p, a, b, n);
    int bad;
    uint32_t* bits = (uint32_t*)buf;
    if (write) bad = H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, ps->dxpl, buf) < 0;
    else if (!bf16) bad = H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, ps->dxpl, buf) < 0;
    else {   // the checksum covers the stored 16-bit patterns
        uint16_t* raw = malloc((n > 0 ? n : 1) * sizeof(uint16_t));
        bits = malloc((n > 0 ? n : 1) * sizeof(uint32_t));
        bad = H5Dread(d, H5T_NATIVE_UINT16, ms, fs, ps->dxpl, raw) < 0;
        for (long long j = 0; j < n; j++) { buf[j] = h5_bf16_to_f32(raw[j]); bits[j] = raw[j]; }
        free(raw);
    }
    if (!bad && n > 0 && counted) ps->sums[kind * ps->t->n + i] = xsum_range(p, a, b, bits);
    if (bits != (uint32_t*)buf) free(bits);
    H5Sclose(ms); H5Sclose(fs);
    return bad ? -1 : 0;
}

// ---- saving ------------------------------------------------------------------------------------------

typedef struct { hid_t g; const Config* c; } KeyCtx;
static void write_key(const char* key, int is_model, void* vctx) {
    (void)is_model;
    KeyCtx* ctx = vctx;
    char buf[CFG_STR + 32];
    config_get(ctx->c, key, buf, sizeof buf);
    h5_attr_write_str(ctx->g, key, buf);
}
static int write_config(hid_t f, const Config* c) {
    KeyCtx ctx = { H5Gcreate2(f, "/config", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), c };
    if (ctx.g < 0) return 1;
    config_each_key(write_key, &ctx);
    H5Gclose(ctx.g);
    return 0;
}

// the root attributes and the groups; 0, or 1 when any write failed
static int write_header(hid_t f, const Config* c, const AdamW* o, const Grid* g, const TrainState* st) {
    char* cfgtext = NULL; size_t cfglen = 0;
    FILE* mem = open_memstream(&cfgtext, &cfglen);
    config_write(c, mem); fclose(mem);
    int bad = 0;
    bad |= h5_attr_write_str(f, "format", CKPT_FORMAT);
    bad |= h5_attr_write_i64(f, "format_version", CKPT_VERSION);
    bad |= h5_attr_write_i64(f, "step", st->step);
    bad |= h5_attr_write_i64(f, "tokens_seen", st->tokens_seen);
    bad |= h5_attr_write_i64(f, "data_cursor", st->cursor);
    bad |= h5_attr_write_i64(f, "adam_t", o->t);
    bad |= h5_attr_write_i64(f, "seed", c->seed);
    bad |= h5_attr_write_str(f, "rng", "counter-based: initial weights and data order are pure functions of seed");
    bad |= h5_attr_write_i64(f, "saved_tp", g->tp);
    bad |= h5_attr_write_i64(f, "saved_cp", g->cp);
    bad |= h5_attr_write_i64(f, "saved_dp", g->dp);
    bad |= h5_attr_write_i64(f, "saved_zero", o->zg != NULL);
    bad |= h5_attr_write_str(f, "config", cfgtext);
    free(cfgtext);
    bad |= write_config(f, c);
    const char* groups[] = { "/model", "/optimizer", "/optimizer/m", "/optimizer/v" };
    for (int i = 0; i < 4; i++) {
        hid_t gr = H5Gcreate2(f, groups[i], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (gr < 0) bad = 1; else H5Gclose(gr);
    }
    return bad != 0;
}

// every dataset with its checksum attribute; 0, or 1 when any write failed on this rank
static int write_datasets(hid_t f, Pass* ps) {
    const ParamTable* t = ps->t;
    int nd = 3 * t->n, bad = 0;
    hid_t* ds = malloc(nd * sizeof(hid_t));
    const char* slow = getenv("RINGLM_TEST_CKPT_SLOW_MS");   // test hook: widen the window for kill -9
    for (int kind = 0; kind < 3; kind++)
        for (int i = 0; i < t->n; i++) {
            char path[256];
            snprintf(path, sizeof path, "%s/%s", GROUP[kind], t->p[i].name);
            hid_t fs = logical_space(&t->p[i]);
            hid_t d = H5Dcreate2(f, path, H5T_IEEE_F32LE, fs, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            H5Sclose(fs);
            if (d < 0 || move_dataset(ps, d, kind, i, 1, 0)) bad = 1;
            ds[kind * t->n + i] = d;
            if (slow) { struct timespec ts = { 0, atoi(slow) * 1000000L }; nanosleep(&ts, NULL); }
        }
    ctl_sum_u64(ps->g->world_g, ps->sums, nd);
    for (int i = 0; i < nd; i++)
        if (ds[i] >= 0) { bad |= h5_attr_write_u64(ds[i], "checksum", ps->sums[i]); H5Dclose(ds[i]); }
    free(ds);
    return bad;
}

// rank 0: publish tmp as final, point `latest` at it, drop old checkpoints
static int publish(const char* out_dir, const char* tmp, const char* final, const char* name, int keep_last,
                   char* err, size_t errlen) {
    if (fsync_path(tmp)) { ERR("checkpoint: cannot fsync '%s': %s", tmp, strerror(errno)); return 1; }
    if (rename(tmp, final)) { ERR("checkpoint: cannot rename '%s' to '%s': %s", tmp, final, strerror(errno)); return 1; }
    fsync_path(out_dir);
    char lt[CFG_STR + 32], lf[CFG_STR + 32];
    snprintf(lt, sizeof lt, "%s/latest.tmp", out_dir);
    snprintf(lf, sizeof lf, "%s/latest", out_dir);
    FILE* f = fopen(lt, "w");
    if (!f || fprintf(f, "%s\n", name) < 0 || fflush(f) || fsync(fileno(f))) {
        ERR("checkpoint: cannot write '%s': %s", lt, strerror(errno));
        if (f) fclose(f);
        return 1;
    }
    fclose(f);
    if (rename(lt, lf)) { ERR("checkpoint: cannot rename '%s': %s", lt, strerror(errno)); return 1; }
    fsync_path(out_dir);
    DIR* d = opendir(out_dir);                 // old checkpoints go only after the new one is complete
    if (!d) return 0;
    char* names[4096]; int n = 0;
    struct dirent* e;
    while ((e = readdir(d)) && n < 4096) {
        if (strncmp(e->d_name, "ckpt_", 5)) continue;
        if (ends_with(e->d_name, ".h5.tmp")) {   // a killed save's leftover
            char p[CFG_STR + 300];
            snprintf(p, sizeof p, "%s/%s", out_dir, e->d_name);
            unlink(p);
            continue;
        }
        if (ends_with(e->d_name, ".h5")) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof(char*), cmp_str);
    for (int i = 0; i < n; i++) {
        if (keep_last > 0 && i < n - keep_last && strcmp(names[i], name)) {
            char p[CFG_STR + 300];
            snprintf(p, sizeof p, "%s/%s", out_dir, names[i]);
            unlink(p);
        }
        free(names[i]);
    }
    return 0;
}

int ckpt_save(const char* out_dir, int keep_last, const Model* m, const AdamW* o, const Grid* g,
              const TrainState* st, char* err, size_t errlen) {
    char name[64], tmp[CFG_STR + 160], final[CFG_STR + 80];
    snprintf(name, sizeof name, "ckpt_%08lld.h5", st->step);
    snprintf(final, sizeof final, "%s/%s", out_dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", final);
    if (g->rank == 0) unlink(tmp);             // a stale one from a killed save
    ctl_barrier(g->world_g);
    Pass ps;
    pass_open(&ps, m, o, g);
    size_t own = o->hi - o->lo;
    be_download(ps.host[KIND_MODEL], m->params, m->pt.total * sizeof(float));
    be_download(ps.host[KIND_M], o->m, own * sizeof(float));
    be_download(ps.host[KIND_V], o->v, own * sizeof(float));

    hid_t fapl = h5_fapl(g->world_g);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (ctl_any(g->world_g, f < 0)) {
        ERR("checkpoint: cannot create '%s' (is out_dir writable and on a file system every rank sees?)", tmp);
        if (f >= 0) H5Fclose(f);
        pass_close(&ps);
        return 1;
    }
    int bad = write_header(f, &m->cfg, o, g, st);
    bad |= write_datasets(f, &ps);
    if (H5Fclose(f) < 0) bad = 1;
    pass_close(&ps);
    if (ctl_any(g->world_g, bad)) { ERR("checkpoint: writing '%s' failed (disk full?); the previous checkpoint is untouched", tmp); return 1; }
    int rc = 0;
    if (g->rank == 0) rc = publish(out_dir, tmp, final, name, keep_last, err, errlen);
    ctl_bcast(g->world_g, &rc, sizeof rc, 0);
    if (rc) ctl_bcast(g->world_g, err, errlen, 0);
    return rc;
}

// ---- loading -----------------------------------------------------------------------------------------

int ckpt_resolve(const char* spec, const char* out_dir, char* path, size_t n, char* err, size_t errlen) {
    char dir[CFG_STR + 16];
    struct stat st;
    if (!strcmp(spec, "latest")) snprintf(dir, sizeof dir, "%s", out_dir);
    else if (stat(spec, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(dir, sizeof dir, "%s", spec);
    else {
        if (stat(spec, &st)) { ERR("checkpoint: '%s' does not exist", spec); return 1; }
        snprintf(path, n, "%s", spec);
        return 0;
    }
    char lf[CFG_STR + 32], name[512] = "";
    snprintf(lf, sizeof lf, "%s/latest", dir);
    FILE* f = fopen(lf, "r");
    if (!f) { ERR("checkpoint: '%s' has no 'latest' pointer (no completed checkpoint there)", dir); return 1; }
    if (!fgets(name, sizeof name, f)) name[0] = 0;
    fclose(f);
    name[strcspn(name, "\r\n")] = 0;
    if (!name[0] || strchr(name, '/')) { ERR("checkpoint: '%s' is empty or malformed", lf); return 1; }
    snprintf(path, n, "%s/%s", dir, name);
    if (stat(path, &st)) { ERR("checkpoint: '%s' points at '%s', which does not exist", lf, path); return 1; }
    return 0;
}

typedef struct { long long step, cursor, tokens, adam_t; } Header;

// format, version and the training state; 0 or 1 + err
static int read_header(hid_t f, const char* path, Header* h, char* err, size_t errlen) {
    char fmt[64] = "";
    long long ver = -1;
    if (h5_attr_read_str(f, "format", fmt, sizeof fmt) || strcmp(fmt, CKPT_FORMAT)) {
        ERR("checkpoint: '%s' is not a ringlm checkpoint (attribute 'format' is '%s')", path, fmt);
        return 1;
    }
    if (h5_attr_read_i64(f, "format_version", &ver) || ver != CKPT_VERSION) {
        ERR("checkpoint: '%s' has format_version %lld; this build reads version %d", path, ver, CKPT_VERSION);
        return 1;
    }
    const char* miss = NULL;
    if (h5_attr_read_i64(f, "step", &h->step)) miss = "step";
    else if (h5_attr_read_i64(f, "data_cursor", &h->cursor)) miss = "data_cursor";
    else if (h5_attr_read_i64(f, "tokens_seen", &h->tokens)) miss = "tokens_seen";
    else if (h5_attr_read_i64(f, "adam_t", &h->adam_t)) miss = "adam_t";
    if (miss) { ERR("checkpoint: '%s' lacks the attribute '%s'", path, miss); return 1; }
    return 0;
}

struct Cmp { hid_t grp; const Config* c; char* diff_model; char* diff_train; int missing; char* missing_key;
             const char* const* allow; };
// keys that say how this run is launched, not what it trains: never reported as changed
static const char* OPERATIONAL[] = { "resume", "out_dir", "dump_weights", "tp", "cp", "cp_layout", "zero", "ckpt_io", "comm",
                                     "log_every", "verify_attention", "ckpt_every", "keep_last", NULL };
static void compare_key(const char* key, int is_model, void* vctx) {
    struct Cmp* x = vctx;
    for (int i = 0; OPERATIONAL[i]; i++) if (!strcmp(key, OPERATIONAL[i])) return;
    for (int i = 0; x->allow && x->allow[i]; i++) if (!strcmp(key, x->allow[i])) return;
    char want[CFG_STR + 32], have[CFG_STR + 32];
    config_get(x->c, key, want, sizeof want);
    if (h5_attr_read_str(x->grp, key, have, sizeof have)) {
        if (is_model && !x->missing) { x->missing = 1; snprintf(x->missing_key, 128, "%s", key); }
        return;
    }
    if (!strcmp(want, have)) return;
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
    struct Cmp x = { cg, c, dm, diff_train, 0, mk, allow };
    config_each_key(compare_key, &x);
    H5Gclose(cg);
    if (x.missing) { ERR("checkpoint: '%s' lacks the model config key /config:%s", path, mk); return 1; }
    if (dm[0]) { ERR("checkpoint: '%s' was saved for another model: %s", path, dm); return 1; }
    return 0;
}

// open dataset (kind, tensor p) and check its shape; the dataset, or -1 with err
static hid_t open_dataset(hid_t f, const char* path, int kind, const ParamSpec* p, char* err, size_t errlen) {
    char dpath[256];
    snprintf(dpath, sizeof dpath, "%s/%s", GROUP[kind], p->name);
    if (!h5_exists(f, dpath)) { ERR("checkpoint: '%s' lacks the dataset %s", path, dpath); return -1; }
    hid_t d = H5Dopen2(f, dpath, H5P_DEFAULT);
    hid_t fs = H5Dget_space(d);
    hsize_t dims[2] = { 0, 1 };
    int nd_file = H5Sget_simple_extent_ndims(fs);
    H5Sget_simple_extent_dims(fs, dims, NULL);
    H5Sclose(fs);
    if (nd_file != p->ndim || dims[0] != (hsize_t)p->shape[0] || (p->ndim == 2 && dims[1] != (hsize_t)p->shape[1])) {
        ERR("checkpoint: '%s': %s has shape [%llu%s%llu], the model needs [%ld%s%ld]", path, dpath,
            (unsigned long long)dims[0], nd_file == 2 ? ", " : "", nd_file == 2 ? (unsigned long long)dims[1] : 0ULL,
            p->shape[0], p->ndim == 2 ? ", " : "", p->ndim == 2 ? p->shape[1] : 0L);
        H5Dclose(d);
        return -1;
    }
    return d;
}

// read every dataset of the first `kinds` kinds into the staging and verify the checksums; 0 or 1 + err
static int read_datasets(hid_t f, const char* path, Pass* ps, int kinds, char* err, size_t errlen) {
    const ParamTable* t = ps->t;
    int nd = 3 * t->n, rc = 0;
    uint64_t* want = calloc(nd, sizeof(uint64_t));
    for (int kind = 0; kind < kinds && !rc; kind++)
        for (int i = 0; i < t->n && !rc; i++) {
            hid_t d = open_dataset(f, path, kind, &t->p[i], err, errlen);
            if (d < 0) { rc = 1; break; }
            if (h5_attr_read_u64(d, "checksum", &want[kind * t->n + i])) {
                ERR("checkpoint: '%s': %s/%s has no checksum attribute", path, GROUP[kind], t->p[i].name);
                H5Dclose(d); rc = 1; break;
            }
            hid_t ft = H5Dget_type(d);
            int bf16 = H5Tget_size(ft) == 2;
            H5Tclose(ft);
            int bad = move_dataset(ps, d, kind, i, 0, bf16);
            H5Dclose(d);
            if (ctl_any(ps->g->world_g, bad)) { ERR("checkpoint: '%s': reading %s/%s failed (truncated file?)", path, GROUP[kind], t->p[i].name); rc = 1; }
        }
    rc = ctl_any(ps->g->world_g, rc);
    if (!rc) {
        ctl_sum_u64(ps->g->world_g, ps->sums, nd);
        for (int kind = 0; kind < kinds && !rc; kind++)
            for (int i = 0; i < t->n; i++)
                if (ps->sums[kind * t->n + i] != want[kind * t->n + i]) {
                    ERR("checkpoint: '%s': checksum mismatch in %s/%s (the file is corrupt)", path, GROUP[kind], t->p[i].name);
                    rc = 1; break;
                }
    }
    free(want);
    return rc;
}

// the one-line summary of a successful load: layouts, changed training keys, missing optimizer state
static void load_notes(hid_t f, const Grid* g, const AdamW* o, int had_opt, const char* diff_train, char* notes, size_t n) {
    long long stp = 0, scp = 0, sdp = 0, sz = 0;
    h5_attr_read_i64(f, "saved_tp", &stp); h5_attr_read_i64(f, "saved_cp", &scp);
    h5_attr_read_i64(f, "saved_dp", &sdp); h5_attr_read_i64(f, "saved_zero", &sz);
    int k = snprintf(notes, n, "saved with tp %lld cp %lld dp %lld zero %lld, loaded into tp %d cp %d dp %d zero %d",
                     stp, scp, sdp, sz, g->tp, g->cp, g->dp, o->zg != NULL);
    if (diff_train[0] && k < (int)n) k += snprintf(notes + k, n - k, "; training keys changed on resume: %s", diff_train);
    if (!had_opt && k < (int)n) snprintf(notes + k, n - k, "; no optimizer state in the checkpoint: AdamW moments start at zero");
}

int ckpt_load(const char* path, Model* m, AdamW* o, const Grid* g, TrainState* st, const char* const* allow,
              char* err, size_t errlen, char* notes, size_t noteslen) {
    AdamW none = {0};   // parameters only: no moments are read
    int params_only = o == NULL;
    if (params_only) o = &none;
    if (notes) notes[0] = 0;
    hid_t fapl = h5_fapl(g->world_g);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (ctl_any(g->world_g, f < 0)) {
        ERR("checkpoint: '%s' cannot be opened as HDF5 (truncated, corrupt or not a checkpoint)", path);
        if (f >= 0) H5Fclose(f);
        return 1;
    }
    Header h;
    char dt[2048] = "";
    int rc = read_header(f, path, &h, err, errlen) || check_config(f, path, &m->cfg, allow, dt, err, errlen);
    int have_opt = !params_only && h5_exists(f, "/optimizer/m") && h5_exists(f, "/optimizer/v");
    Pass ps;
    pass_open(&ps, m, o, g);
    if (!rc) rc = read_datasets(f, path, &ps, have_opt ? 3 : 1, err, errlen);
    if (!rc) {   // everything read and verified: only now does the run's state change
        size_t own = o->hi - o->lo;
        be_upload(m->params, ps.host[KIND_MODEL], m->pt.total * sizeof(float));
        if (have_opt) { be_upload(o->m, ps.host[KIND_M], own * sizeof(float)); be_upload(o->v, ps.host[KIND_V], own * sizeof(float)); }
        else if (!params_only) { be_zero(o->m, own * sizeof(float)); be_zero(o->v, own * sizeof(float)); }
        o->t = have_opt ? h.adam_t : 0;
        st->step = h.step; st->cursor = h.cursor; st->tokens_seen = h.tokens;
        if (notes) load_notes(f, g, o, have_opt || params_only, dt, notes, noteslen);
    }
    pass_close(&ps);
    H5Fclose(f);
    return rc;
}

int ckpt_read_config(const char* path, Config* c, char* err, size_t errlen) {
    struct stat sb;
    if (stat(path, &sb)) { ERR("checkpoint: '%s' does not exist", path); return 1; }
    hid_t fapl = h5_fapl(NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (f < 0) { ERR("checkpoint: '%s' cannot be opened as HDF5 (truncated, corrupt or not a checkpoint)", path); return 1; }
    char fmt[64] = "";
    if (h5_attr_read_str(f, "format", fmt, sizeof fmt) || strcmp(fmt, CKPT_FORMAT) || !h5_exists(f, "/config")) {
        ERR("checkpoint: '%s' is not a ringlm checkpoint", path);
        H5Fclose(f); return 1;
    }
    config_defaults(c);
    hid_t grp = H5Gopen2(f, "/config", H5P_DEFAULT);
    hsize_t n = 0;
    H5O_info_t info;
    H5Oget_info(grp, &info);
    n = info.num_attrs;
    int rc = 0;
    for (hsize_t i = 0; i < n && !rc; i++) {
        char key[256], val[CFG_STR + 32];
        H5Aget_name_by_idx(grp, ".", H5_INDEX_NAME, H5_ITER_INC, i, key, sizeof key, H5P_DEFAULT);
        if (h5_attr_read_str(grp, key, val, sizeof val)) continue;
        if (config_key_kind(key) == 0) continue;           // a key this build does not know: ignore
        if (config_set(c, key, val, path, err, errlen)) rc = 1;
    }
    H5Gclose(grp);
    H5Fclose(f);
    return rc;
}
