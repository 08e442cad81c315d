// reshard.c — build/reshard: inspect, verify and convert ringlm checkpoints (format: checkpoint/FORMAT.md).
//
//   build/reshard --info CKPT          the file's state, config and datasets (shape, dtype, chunking, checksum)
//   build/reshard --verify CKPT        recompute every dataset's xsum64 and compare with its attribute
//   build/reshard --tp N --cp N --dp N --out NEW [--dtype keep|fp32|bf16] [--model-only] [--force] CKPT
//                                      write NEW for another layout: chunked along its shard boundaries
//
// Runs on one process or under mpirun; every rank takes part (parallel HDF5 over MPI-IO on
// the world). The work is a list of units — row blocks [r0, r1) of datasets, each at most
// BLOCK_BYTES of fp32 — handed out to ranks greedily; every rank reads (and writes) its own units with
// independent I/O, sums the checksum terms of what it read (and wrote), and one all-reduce gives every
// dataset's checksum (xsum64 is a sum). Metadata (opening, creating, attributes) is done by every rank in
// the same order, as parallel HDF5 requires of anything that changes the file's structure. At most one
// unit's buffers are in memory per rank: never a whole tensor above BLOCK_BYTES, never the whole model.
//
// Output chunking (the target layout's shard boundaries, so that each rank's load reads whole chunks):
//   2-D SPLIT_ROWS / SPLIT_VOCAB   [min(ceil(rows_padded / tp), rows), cols]
//   2-D SPLIT_COLS                 [rows, cols / tp]
//   replicated and 1-D             the whole tensor as one chunk
// HDF5 limits a chunk to 4 GiB: a taller chunk is cut into equal row parts until it fits.
#include "checkpoint/ckpt.h"
#include "checkpoint/h5util.h"
#include "comm/grid.h"
#include "common/files.h"
#include "common/util.h"
#include "model/config.h"
#include "model/params.h"
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BLOCK_BYTES (64LL << 20)           // largest unit of work (fp32 bytes); env RINGLM_RESHARD_BLOCK_BYTES
#define CHUNK_MAX_BYTES 0xFFFFFFFFULL      // HDF5's limit on one chunk

static const char* USAGE =
"usage: [mpirun -np P] build/reshard --info CKPT\n"
"       [mpirun -np P] build/reshard --verify CKPT\n"
"       [mpirun -np P] build/reshard --tp N --cp N --dp N --out NEW [--dtype keep|fp32|bf16] [--model-only]\n"
"                                    [--force] CKPT\n"
"\n"
"Inspects, verifies and converts ringlm checkpoints (HDF5, format: checkpoint/FORMAT.md). Runs on one\n"
"process or under mpirun: tensors, or row blocks of large tensors, are divided among the ranks.\n"
"\n"
"modes:\n"
"  --info         print format and version, step, data_cursor, tokens_seen, adam_t, the saved layout, the\n"
"                 model config keys and every dataset: shape, dtype (fp32 or bf16), chunking (contiguous\n"
"                 or the chunk dims) and its checksum: ok, MISMATCH or missing. Verifies every checksum,\n"
"                 so it exits 1 when one does not verify.\n"
"  --verify       recompute every dataset's xsum64 checksum, streaming, and compare with its 'checksum'\n"
"                 attribute: one line on stderr per mismatch or missing checksum, naming file and\n"
"                 dataset, and exit 1; otherwise a summary line and exit 0.\n"
"  --out NEW      convert: write NEW for the layout --tp/--cp/--dp. Root attributes and /config are copied\n"
"                 unchanged except saved_tp/cp/dp (the target) and saved_zero (0). Every dataset keeps its\n"
"                 logical shape and is chunked along the target's shard boundaries: q/k/v/gate/up and the\n"
"                 vocabulary rows [ceil(rows_padded/tp), cols], o/down [rows, cols/tp], norms and other\n"
"                 replicated tensors whole. The input's checksums are verified while it is read (a mismatch\n"
"                 aborts and nothing is written); the output's are computed for what is stored. NEW.tmp is\n"
"                 written and renamed to NEW at the end; CKPT is never modified.\n"
"\n"
"convert options:\n"
"  --tp N         target tensor-parallel degree: must divide n_head, n_kv_head and d_ff (default 1)\n"
"  --cp N         target context-parallel degree, >= 1 (recorded; weights are replicated over it; default 1)\n"
"  --dp N         target data-parallel degree, >= 1 (recorded; default 1)\n"
"  --dtype D      storage of the /model datasets: keep (default: as in CKPT), fp32, or bf16 (uint16 bit\n"
"                 patterns, fp32 rounded to nearest even, attribute dtype = \"bf16\"). AdamW moments are\n"
"                 always fp32.\n"
"  --model-only   omit /optimizer: resuming from NEW starts the AdamW moments at zero\n"
"  --force        replace an existing NEW (otherwise an error)\n"
"  -h, --help     this text\n"
"\n"
"Errors (missing or truncated file, not HDF5, not a ringlm checkpoint, another format_version, a missing\n"
"dataset, a checksum mismatch, bad options, NEW exists) are one line on stderr and exit status 1.\n"
"Environment: RINGLM_RESHARD_BLOCK_BYTES (default 67108864) bounds the fp32 bytes of one unit of work\n"
"(a row block); HDF5_USE_FILE_LOCKING overrides the tool's choice of no HDF5 file locking.\n";

enum { MODE_NONE = 0, MODE_INFO, MODE_VERIFY, MODE_CONVERT };
enum { DT_KEEP = 0, DT_FP32, DT_BF16 };
enum { KIND_MODEL = 0, KIND_M, KIND_V, KIND_EXTRA };
static const char* GROUP[3] = { "/model", "/optimizer/m", "/optimizer/v" };

typedef struct {
    int mode;
    const char* in;
    const char* out;
    int tp, cp, dp;
    int dtype;              // DT_*
    int model_only, force;
    int layout_given;       // any of --tp/--cp/--dp/--dtype/--model-only/--force
} Opts;

typedef struct {
    char path[256];         // /model/<HF name>, /optimizer/{m,v}/<HF name>, or a dataset outside the format
    int kind;               // KIND_*
    int ndim;               // 1 or 2
    long rows, cols;        // logical shape; cols = 1 for 1-D
    int bf16;               // stored as uint16 bf16 (else fp32)
    int chunked;            // the stored layout (for --info)
    hsize_t chunk[2];
    int has_sum;            // the checksum attribute
    uint64_t want;
    int out_bf16;           // convert: the output's storage and chunk dims
    hsize_t out_chunk[2];
    hid_t in, out;
} Dset;

typedef struct { int d; long r0, r1; int rank; } Unit;   // rows [r0, r1) of dataset d, done by `rank`

typedef struct {
    const char* path;
    hid_t f;
    Config c;
    long long step, cursor, tokens, adam_t;
    int have_opt;           // /optimizer present
    Dset* d;
    int nd;
} Ckpt;

static const Group* W;      // the world
static char msg[8192];      // the current one-line error

// ---- errors ------------------------------------------------------------------------------------------

#define FAIL(...) (snprintf(msg, sizeof msg, __VA_ARGS__), 1)

// Collective: 1 on every rank when `failed` on any, with msg set everywhere to the lowest failing rank's.
static int sync_fail(int failed) { return grid_agree(W, failed, msg, sizeof msg); }

// ---- options -----------------------------------------------------------------------------------------

static int parse_degree(const char* opt, const char* v, int* out) {
    char* end = NULL;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || end == v || *end || errno || x < 1 || x > 65536)
        return FAIL("reshard: %s needs an integer >= 1, got '%s'", opt, v ? v : "");
    *out = (int)x;
    return 0;
}

static int parse_args(int argc, char** argv, Opts* o) {
    memset(o, 0, sizeof *o);
    o->tp = o->cp = o->dp = 1;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        int mode = 0;
        if (!strcmp(a, "--info")) mode = MODE_INFO;
        else if (!strcmp(a, "--verify")) mode = MODE_VERIFY;
        else if (!strcmp(a, "--out")) {
            if (!v || !*v) return FAIL("reshard: --out needs a file name");
            o->out = v; i++; mode = MODE_CONVERT;
        }
        else if (!strcmp(a, "--tp") || !strcmp(a, "--cp") || !strcmp(a, "--dp")) {
            int* dst = a[2] == 't' ? &o->tp : a[2] == 'c' ? &o->cp : &o->dp;
            if (parse_degree(a, v, dst)) return 1;
            i++; o->layout_given = 1;
        }
        else if (!strcmp(a, "--dtype")) {
            if (v && !strcmp(v, "keep")) o->dtype = DT_KEEP;
            else if (v && !strcmp(v, "fp32")) o->dtype = DT_FP32;
            else if (v && !strcmp(v, "bf16")) o->dtype = DT_BF16;
            else return FAIL("reshard: --dtype must be keep, fp32 or bf16, got '%s'", v ? v : "");
            i++; o->layout_given = 1;
        }
        else if (!strcmp(a, "--model-only")) o->model_only = o->layout_given = 1;
        else if (!strcmp(a, "--force")) o->force = o->layout_given = 1;
        else if (a[0] == '-' && a[1]) return FAIL("reshard: unknown option '%s' (see --help)", a);
        else {
            if (o->in) return FAIL("reshard: one checkpoint expected, got '%s' and '%s'", o->in, a);
            o->in = a;
        }
        if (mode) {
            if (o->mode && o->mode != mode) return FAIL("reshard: choose one of --info, --verify and --out");
            o->mode = mode;
        }
    }
    if (!o->mode) return FAIL("reshard: nothing to do: give --info, --verify or --out NEW (see --help)");
    if (!o->in) return FAIL("reshard: no checkpoint file given (see --help)");
    if (o->mode != MODE_CONVERT && o->layout_given)
        return FAIL("reshard: --tp/--cp/--dp/--dtype/--model-only/--force only apply when converting (--out)");
    return 0;
}

// ---- opening and checking the input ------------------------------------------------------------------

// MPI-IO on the world; metadata reads independent, since ranks read different datasets' data on their own
static hid_t file_access(void) {
    hid_t fapl = h5_fapl(W);
    H5Pset_all_coll_metadata_ops(fapl, 0);
    return fapl;
}

typedef struct { hid_t g; Config* c; int bad; const char* path; } CfgCtx;
static void read_key(const char* key, int is_model, void* vctx) {
    CfgCtx* x = vctx;
    char v[CFG_STR + 32];
    if (x->bad) return;
    if (h5_attr_read_str(x->g, key, v, sizeof v)) {   // a missing training key keeps its default
        if (is_model) x->bad = FAIL("reshard: '%s' lacks the model config key /config:%s", x->path, key);
        return;
    }
    char err[1024];
    if (config_set(x->c, key, v, "checkpoint /config", err, sizeof err)) x->bad = FAIL("reshard: '%s': %s", x->path, err);
}

// the root attributes and /config (into k->c)
static int read_header(Ckpt* k) {
    char fmt[64] = "";
    long long ver = -1;
    if (h5_attr_read_str(k->f, "format", fmt, sizeof fmt) || strcmp(fmt, CKPT_FORMAT))
        return FAIL("reshard: '%s' is not a ringlm checkpoint (attribute 'format' is %s%s%s)", k->path, fmt[0] ? "'" : "",
                    fmt[0] ? fmt : "missing or not a fixed-length string", fmt[0] ? "'" : "");
    if (h5_attr_read_i64(k->f, "format_version", &ver) || ver != CKPT_VERSION)
        return FAIL("reshard: '%s' has format_version %lld; this build reads version %d", k->path, ver, CKPT_VERSION);
    const char* names[4] = { "step", "data_cursor", "tokens_seen", "adam_t" };
    long long* vals[4] = { &k->step, &k->cursor, &k->tokens, &k->adam_t };
    for (int i = 0; i < 4; i++)
        if (h5_attr_read_i64(k->f, names[i], vals[i])) return FAIL("reshard: '%s' lacks the attribute '%s'", k->path, names[i]);
    if (!h5_exists(k->f, "/config")) return FAIL("reshard: '%s' lacks the group /config", k->path);
    config_defaults(&k->c);
    CfgCtx x = { H5Gopen2(k->f, "/config", H5P_DEFAULT), &k->c, 0, k->path };
    config_each_key(read_key, &x);
    H5Gclose(x.g);
    if (x.bad) return 1;
    char err[1024];
    if (config_validate(&k->c, err, sizeof err)) return FAIL("reshard: '%s' holds an invalid /config: %s", k->path, err);
    return 0;
}

// fill shape, stored type, layout and checksum of an open dataset; 1 (msg) when it cannot be a tensor
static int describe(Ckpt* k, Dset* d) {
    hid_t fs = H5Dget_space(d->in), ft = H5Dget_type(d->in), pl = H5Dget_create_plist(d->in);
    hsize_t dims[2] = { 0, 1 };
    d->ndim = H5Sget_simple_extent_ndims(fs);
    if (d->ndim == 1 || d->ndim == 2) H5Sget_simple_extent_dims(fs, dims, NULL);
    d->rows = (long)dims[0]; d->cols = d->ndim == 2 ? (long)dims[1] : 1;
    H5T_class_t cl = H5Tget_class(ft);
    size_t sz = H5Tget_size(ft);
    d->bf16 = cl == H5T_INTEGER && sz == 2;
    int fp32 = cl == H5T_FLOAT && sz == 4;
    d->chunked = H5Pget_layout(pl) == H5D_CHUNKED;
    if (d->chunked) H5Pget_chunk(pl, 2, d->chunk);
    d->has_sum = h5_attr_read_u64(d->in, "checksum", &d->want) == 0;
    H5Sclose(fs); H5Tclose(ft); H5Pclose(pl);
    if (d->ndim != 1 && d->ndim != 2) return FAIL("reshard: '%s': %s has %d dimensions (1 or 2 expected)", k->path, d->path, d->ndim);
    if (!d->bf16 && !fp32) return FAIL("reshard: '%s': %s is neither fp32 nor bf16 (uint16)", k->path, d->path);
    return 0;
}

static int open_dataset(Ckpt* k, Dset* d) {
    if (!h5_exists(k->f, d->path)) return FAIL("reshard: '%s' lacks the dataset %s", k->path, d->path);
    d->in = H5Dopen2(k->f, d->path, H5P_DEFAULT);
    d->out = H5I_INVALID_HID;
    if (d->in < 0) return FAIL("reshard: '%s': cannot open %s (corrupt file?)", k->path, d->path);
    return describe(k, d);
}

// the expected datasets, from the parameter table of the file's own config (tp = 1: logical shapes)
static int open_expected(Ckpt* k) {
    ParamTable t;
    params_build(&t, &k->c, 1, 0);
    k->have_opt = h5_exists(k->f, "/optimizer");
    int ngroups = k->have_opt ? 3 : 1;
    k->d = calloc((size_t)t.n * ngroups, sizeof(Dset));
    k->nd = 0;
    int bad = 0;
    for (int kind = 0; kind < ngroups && !bad; kind++)
        for (int i = 0; i < t.n && !bad; i++) {
            const ParamSpec* p = &t.p[i];
            Dset* d = &k->d[k->nd++];
            snprintf(d->path, sizeof d->path, "%s/%s", GROUP[kind], p->name);
            d->kind = kind;
            bad = open_dataset(k, d);
            if (!bad && (d->ndim != p->ndim || d->rows != p->shape[0] || d->cols != p->shape[1]))
                bad = FAIL("reshard: '%s': %s has shape [%ld, %ld], the config needs [%ld, %ld]", k->path, d->path,
                           d->rows, d->cols, p->shape[0], p->shape[1]);
        }
    params_free(&t);
    return bad;
}

// datasets anywhere in the file that the format does not name (listed and verified by --info/--verify)
typedef struct { Ckpt* k; char (*paths)[256]; int n, cap; } Walk;
static herr_t visit(hid_t obj, const char* name, const H5O_info_t* info, void* vw) {
    (void)obj;
    Walk* w = vw;
    if (info->type != H5O_TYPE_DATASET) return 0;
    char p[256];
    snprintf(p, sizeof p, "/%s", name);
    for (int i = 0; i < w->k->nd; i++) if (!strcmp(w->k->d[i].path, p)) return 0;
    if (w->n == w->cap) { w->cap = w->cap ? 2 * w->cap : 8; w->paths = realloc(w->paths, w->cap * sizeof *w->paths); }
    memcpy(w->paths[w->n++], p, sizeof p);
    return 0;
}
static int open_extras(Ckpt* k) {
    Walk w = { k, NULL, 0, 0 };
    H5Ovisit2(k->f, H5_INDEX_NAME, H5_ITER_INC, visit, &w, H5O_INFO_BASIC);
    int bad = 0;
    if (w.n) k->d = realloc(k->d, (k->nd + w.n) * sizeof(Dset));
    for (int i = 0; i < w.n && !bad; i++) {
        Dset* d = &k->d[k->nd++];
        memset(d, 0, sizeof *d);
        snprintf(d->path, sizeof d->path, "%s", w.paths[i]);
        d->kind = KIND_EXTRA;
        bad = open_dataset(k, d);
    }
    free(w.paths);
    return bad;
}

// open CKPT on every rank and check it is a complete ringlm checkpoint; exits (one line) otherwise
static void open_ckpt(Ckpt* k, const char* path) {
    memset(k, 0, sizeof *k);
    k->path = path;
    k->f = H5I_INVALID_HID;
    struct stat st;
    int bad = 0;
    if (stat(path, &st)) bad = FAIL("reshard: '%s' does not exist", path);
    else if (!S_ISREG(st.st_mode)) bad = FAIL("reshard: '%s' is not a regular file", path);
    grid_check(W, bad, msg);
    hid_t fapl = file_access();
    k->f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    bad = k->f < 0 && FAIL("reshard: '%s' cannot be opened as HDF5 (not an HDF5 file, truncated or corrupt)", path);
    grid_check(W, bad, msg);
    bad = read_header(k);
    grid_check(W, bad, msg);
    bad = open_expected(k);
    grid_check(W, bad, msg);
    bad = open_extras(k);
    grid_check(W, bad, msg);
}

static void close_ckpt(Ckpt* k) {
    for (int i = 0; i < k->nd; i++) {
        if (k->d[i].in >= 0) H5Dclose(k->d[i].in);
        if (k->d[i].out >= 0) H5Dclose(k->d[i].out);
    }
    free(k->d);
    if (k->f >= 0) H5Fclose(k->f);
}

// ---- units of work -----------------------------------------------------------------------------------

static long long block_bytes(void) {
    const char* e = getenv("RINGLM_RESHARD_BLOCK_BYTES");
    long long b = e ? atoll(e) : BLOCK_BYTES;
    return b > 0 ? b : BLOCK_BYTES;
}

// Row blocks of every dataset: at most `bytes` of fp32 each (one row at least), never across a boundary
// of `group` rows (the output's chunk rows; when a block holds several such groups it is a whole number of
// them). Each block goes to the rank with the fewest elements so far (the same plan on every rank).
static Unit* plan_units(const Dset* ds, int nd, int convert, int nranks, int* nu) {
    int cap = 64, n = 0;
    Unit* u = malloc(cap * sizeof(Unit));
    long long* load = calloc(nranks, sizeof(long long));
    long long bytes = block_bytes();
    for (int i = 0; i < nd; i++) {
        const Dset* d = &ds[i];
        long b = (long)(bytes / (4LL * d->cols));
        if (b < 1) b = 1;
        long group = convert ? (long)d->out_chunk[0] : d->rows, sub = b;
        if (group < 1) group = 1;
        if (b >= group) group = sub = b / group * group;
        for (long g0 = 0; g0 < d->rows; g0 += group)
            for (long r0 = g0; r0 < g0 + group && r0 < d->rows; r0 += sub) {
                long r1 = r0 + sub;
                if (r1 > g0 + group) r1 = g0 + group;
                if (r1 > d->rows) r1 = d->rows;
                int best = 0;
                for (int r = 1; r < nranks; r++) if (load[r] < load[best]) best = r;
                load[best] += (long long)(r1 - r0) * d->cols;
                if (n == cap) { cap *= 2; u = realloc(u, cap * sizeof(Unit)); }
                u[n++] = (Unit){ i, r0, r1, best };
            }
    }
    free(load);
    *nu = n;
    return u;
}

// xsum64 terms of n stored values whose first element has logical row-major index i0
static uint64_t xsum_f32(const float* x, long long n, uint64_t i0) {
    const uint32_t* b = (const uint32_t*)x;
    uint64_t s = 0;
    #pragma omp parallel for reduction(+:s) schedule(static) if (n > 65536)
    for (long long j = 0; j < n; j++) s += h5_xsum_term(i0 + (uint64_t)j, b[j]);
    return s;
}
static uint64_t xsum_u16(const uint16_t* x, long long n, uint64_t i0) {
    uint64_t s = 0;
    #pragma omp parallel for reduction(+:s) schedule(static) if (n > 65536)
    for (long long j = 0; j < n; j++) s += h5_xsum_term(i0 + (uint64_t)j, x[j]);
    return s;
}

// the file dataspace of dataset `ds` with rows [r0, r1) selected
static hid_t rows_space(hid_t ds, long cols, long r0, long r1) {
    hid_t fs = H5Dget_space(ds);
    hsize_t start[2] = { (hsize_t)r0, 0 }, count[2] = { (hsize_t)(r1 - r0), (hsize_t)cols };
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    return fs;
}

// read (write = 0) or write rows [r0, r1) of ds from/to buf, independent I/O; 0 or -1. The memory space
// has the selection's shape: otherwise HDF5 maps a chunked dataset's elements to chunks one at a time.
static int rows_io(int write, hid_t ds, hid_t memtype, long cols, long r0, long r1, void* buf) {
    hid_t fs = rows_space(ds, cols, r0, r1);
    hsize_t dims[2] = { (hsize_t)(r1 - r0), (hsize_t)cols };
    hid_t ms = H5Screate_simple(H5Sget_simple_extent_ndims(fs), dims, NULL);
    herr_t rc = write ? H5Dwrite(ds, memtype, ms, fs, H5P_DEFAULT, buf) : H5Dread(ds, memtype, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms); H5Sclose(fs);
    return rc < 0 ? -1 : 0;
}

// One unit: read it, add its checksum terms to *sin; when converting store it as d->out_bf16 says and
// add the stored values' terms to *sout. Returns 0 or -1 (an I/O error).
static int do_unit(const Dset* d, const Unit* u, int convert, uint64_t* sin, uint64_t* sout) {
    long long n = (long long)(u->r1 - u->r0) * d->cols;
    uint64_t i0 = (uint64_t)u->r0 * d->cols;
    void* in = malloc((size_t)n * (d->bf16 ? 2 : 4));
    if (!in) return -1;
    int rc = rows_io(0, d->in, d->bf16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_FLOAT, d->cols, u->r0, u->r1, in);
    uint64_t s = 0;
    if (!rc) s = d->bf16 ? xsum_u16(in, n, i0) : xsum_f32(in, n, i0);
    *sin += s;
    if (rc || !convert) { free(in); return rc; }
    void* out = in;                                  // same storage: the same bits, the same checksum
    if (d->out_bf16 && !d->bf16) {                   // fp32 -> bf16, round to nearest even
        uint16_t* o = malloc((size_t)n * 2);
        for (long long j = 0; j < n; j++) o[j] = h5_f32_to_bf16(((const float*)in)[j]);
        s = xsum_u16(o, n, i0);
        out = o;
    } else if (!d->out_bf16 && d->bf16) {            // bf16 -> fp32, exact
        float* o = malloc((size_t)n * 4);
        for (long long j = 0; j < n; j++) o[j] = h5_bf16_to_f32(((const uint16_t*)in)[j]);
        s = xsum_f32(o, n, i0);
        out = o;
    }
    *sout += s;
    rc = rows_io(1, d->out, d->out_bf16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_FLOAT, d->cols, u->r0, u->r1, out);
    if (out != in) free(out);
    free(in);
    return rc;
}

// Every rank does its units; then sin[i] (and sout[i]) hold dataset i's whole checksum on every rank.
// Returns 1 (msg) when an I/O error happened on any rank.
static int run_units(Ckpt* k, int convert, uint64_t* sin, uint64_t* sout) {
    int nu;
    Unit* u = plan_units(k->d, k->nd, convert, group_size(W), &nu);
    int bad = 0;
    for (int i = 0; i < nu && !bad; i++) {
        if (u[i].rank != group_rank(W)) continue;
        const Dset* d = &k->d[u[i].d];
        if (do_unit(d, &u[i], convert, &sin[u[i].d], &sout[u[i].d]))
            bad = FAIL("reshard: '%s': %s %s rows [%ld, %ld) failed (truncated file or disk full?)", k->path,
                       convert ? "copying" : "reading", d->path, u[i].r0, u[i].r1);
    }
    free(u);
    ctl_sum_u64(W, sin, k->nd);
    ctl_sum_u64(W, sout, k->nd);
    return sync_fail(bad);
}

// ---- --info and --verify -----------------------------------------------------------------------------

static const char* sum_state(const Dset* d, uint64_t got) { return !d->has_sum ? "missing" : d->want == got ? "ok" : "MISMATCH"; }

typedef struct { hid_t g; } KeyPrint;
static void print_key(const char* key, int is_model, void* vctx) {
    char v[CFG_STR + 32];
    if (is_model && !h5_attr_read_str(((KeyPrint*)vctx)->g, key, v, sizeof v)) printf("  %-26s = %s\n", key, v);
}

static void print_info(const Ckpt* k, const uint64_t* sums) {
    long long saved[4] = { -1, -1, -1, -1 }, seed = 0;
    const char* sk[4] = { "saved_tp", "saved_cp", "saved_dp", "saved_zero" };
    for (int i = 0; i < 4; i++) h5_attr_read_i64(k->f, sk[i], &saved[i]);
    h5_attr_read_i64(k->f, "seed", &seed);
    printf("checkpoint    %s\n", k->path);
    printf("format        %s, version %d\n", CKPT_FORMAT, CKPT_VERSION);
    printf("step          %lld\ndata_cursor   %lld\ntokens_seen   %lld\nadam_t        %lld\nseed          %lld\n",
           k->step, k->cursor, k->tokens, k->adam_t, seed);
    printf("saved layout  tp %lld cp %lld dp %lld zero %lld\n", saved[0], saved[1], saved[2], saved[3]);
    printf("optimizer     %s\n", k->have_opt ? "AdamW moments (/optimizer/m, /optimizer/v)" : "none (model-only)");
    printf("config (model keys):\n");
    KeyPrint kp = { H5Gopen2(k->f, "/config", H5P_DEFAULT) };
    config_each_key(print_key, &kp);
    H5Gclose(kp.g);
    int w = 8;
    for (int i = 0; i < k->nd; i++) if ((int)strlen(k->d[i].path) > w) w = (int)strlen(k->d[i].path);
    printf("datasets (%d):\n  %-*s  %-12s  %-5s  %-18s  %s\n", k->nd, w, "name", "shape", "dtype", "chunking", "checksum");
    long long elems = 0, bytes = 0;
    int good = 0;
    for (int i = 0; i < k->nd; i++) {
        const Dset* d = &k->d[i];
        char shape[64], chunk[64];
        if (d->ndim == 2) snprintf(shape, sizeof shape, "[%ld, %ld]", d->rows, d->cols);
        else snprintf(shape, sizeof shape, "[%ld]", d->rows);
        if (!d->chunked) snprintf(chunk, sizeof chunk, "contiguous");
        else if (d->ndim == 2) snprintf(chunk, sizeof chunk, "chunks [%llu, %llu]", (unsigned long long)d->chunk[0], (unsigned long long)d->chunk[1]);
        else snprintf(chunk, sizeof chunk, "chunks [%llu]", (unsigned long long)d->chunk[0]);
        const char* state = sum_state(d, sums[i]);
        printf("  %-*s  %-12s  %-5s  %-18s  %s%s\n", w, d->path, shape, d->bf16 ? "bf16" : "fp32", chunk, state,
               d->kind == KIND_EXTRA ? "  (not part of the format)" : "");
        elems += (long long)d->rows * d->cols;
        bytes += (long long)d->rows * d->cols * (d->bf16 ? 2 : 4);
        good += !strcmp(state, "ok");
    }
    printf("total         %d datasets, %lld elements, %.2f MiB; checksums: %d ok, %d not\n", k->nd, elems,
           bytes / 1048576.0, good, k->nd - good);
}

// rank 0 reports every mismatch on stderr; returns the number of datasets that did not verify
static int report_sums(const Ckpt* k, const uint64_t* sums) {
    int n = 0;
    for (int i = 0; i < k->nd; i++) {
        const Dset* d = &k->d[i];
        if (d->has_sum && d->want == sums[i]) continue;
        n++;
        if (group_rank(W)) continue;
        if (!d->has_sum) fprintf(stderr, "reshard: '%s': %s has no checksum attribute\n", k->path, d->path);
        else fprintf(stderr, "reshard: '%s': checksum mismatch in %s (stored %016llx, computed %016llx)\n", k->path,
                     d->path, (unsigned long long)d->want, (unsigned long long)sums[i]);
    }
    return n;
}

static int inspect(const Opts* o) {
    Ckpt k;
    open_ckpt(&k, o->in);
    uint64_t* sums = calloc(k.nd, sizeof(uint64_t));
    uint64_t* unused = calloc(k.nd, sizeof(uint64_t));
    int bad = run_units(&k, 0, sums, unused);
    if (bad) { close_ckpt(&k); grid_check(W, 1, msg); }
    if (o->mode == MODE_INFO && group_rank(W) == 0) print_info(&k, sums);
    fflush(stdout);
    int n = report_sums(&k, sums);
    long long elems = 0;
    for (int i = 0; i < k.nd; i++) elems += (long long)k.d[i].rows * k.d[i].cols;
    if (o->mode == MODE_VERIFY && group_rank(W) == 0) {
        if (n) printf("%s: %d of %d datasets FAILED verification\n", k.path, n, k.nd);
        else printf("%s: %d datasets, %lld elements: all checksums ok\n", k.path, k.nd, elems);
    }
    fflush(stdout); fflush(stderr);
    close_ckpt(&k);
    free(sums); free(unused);
    return n ? 1 : 0;
}

// ---- convert -----------------------------------------------------------------------------------------

// the target layout must give every TP rank whole heads and an equal share of d_ff
static int check_target(const Ckpt* k, const Opts* o) {
    const Config* c = &k->c;
    if (c->n_head % o->tp) return FAIL("reshard: --tp %d does not divide n_head = %d (each TP rank owns whole heads)", o->tp, c->n_head);
    if (c->n_kv_head % o->tp) return FAIL("reshard: --tp %d does not divide n_kv_head = %d (each TP rank owns whole KV heads)", o->tp, c->n_kv_head);
    if (c->d_ff % o->tp) return FAIL("reshard: --tp %d does not divide d_ff = %d", o->tp, c->d_ff);
    if (c->vocab_size < o->tp) return FAIL("reshard: --tp %d exceeds vocab_size = %d", o->tp, c->vocab_size);
    return 0;
}

// rank 0: NEW must not exist (unless --force) and must not be CKPT itself
static int check_out(const Opts* o) {
    struct stat si, so;
    if (stat(o->out, &so)) return 0;
    if (!stat(o->in, &si) && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        return FAIL("reshard: --out '%s' is the input checkpoint; write somewhere else", o->out);
    if (!o->force) return FAIL("reshard: '%s' exists; pass --force to replace it", o->out);
    if (S_ISDIR(so.st_mode)) return FAIL("reshard: '%s' is a directory", o->out);
    return 0;
}

// Output storage and chunk dims of every dataset (see the top of this file), from the parameter table
// built for the target tp.
static void plan_outputs(Ckpt* k, const Opts* o) {
    ParamTable t;
    params_build(&t, &k->c, o->tp, 0);
    for (int i = 0; i < k->nd; i++) {
        Dset* d = &k->d[i];
        const ParamSpec* p = d->kind == KIND_EXTRA ? NULL : params_find(&t, d->path + strlen(GROUP[d->kind]) + 1);
        d->out_bf16 = d->kind != KIND_MODEL ? 0 : o->dtype == DT_KEEP ? d->bf16 : o->dtype == DT_BF16;
        hsize_t c0 = (hsize_t)d->rows, c1 = (hsize_t)d->cols;
        if (p && d->ndim == 2 && (p->split == SPLIT_ROWS || p->split == SPLIT_VOCAB))
            c0 = (hsize_t)(p->lshape[0] < d->rows ? p->lshape[0] : d->rows);
        if (p && d->ndim == 2 && p->split == SPLIT_COLS) c1 = (hsize_t)p->lshape[1];
        hsize_t base = c0, es = d->out_bf16 ? 2 : 4;
        for (hsize_t parts = 2; c0 > 1 && c0 * c1 * es > CHUNK_MAX_BYTES; parts++) c0 = (base + parts - 1) / parts;
        d->out_chunk[0] = c0; d->out_chunk[1] = c1;
    }
    params_free(&t);
}

// copy every attribute of `src` to `dst` (same type and shape), except the names in `skip`
typedef struct { hid_t dst; const char* const* skip; int bad; } AttrCopy;
static herr_t copy_attr(hid_t src, const char* name, const H5A_info_t* info, void* vctx) {
    (void)info;
    AttrCopy* x = vctx;
    for (int i = 0; x->skip && x->skip[i]; i++) if (!strcmp(name, x->skip[i])) return 0;
    hid_t a = H5Aopen(src, name, H5P_DEFAULT), t = H5Aget_type(a), s = H5Aget_space(a);
    hssize_t n = H5Sget_select_npoints(s);
    void* buf = calloc((size_t)(n > 0 ? n : 1), H5Tget_size(t));
    hid_t b = H5I_INVALID_HID;
    if (H5Aread(a, t, buf) < 0 || (b = H5Acreate2(x->dst, name, t, s, H5P_DEFAULT, H5P_DEFAULT)) < 0 || H5Awrite(b, t, buf) < 0)
        x->bad = 1;
    if (H5Tdetect_class(t, H5T_VLEN) > 0 || H5Tis_variable_str(t) > 0) H5Dvlen_reclaim(t, s, H5P_DEFAULT, buf);
    if (b >= 0) H5Aclose(b);
    free(buf);
    H5Sclose(s); H5Tclose(t); H5Aclose(a);
    return 0;
}
static int copy_attrs(hid_t src, hid_t dst, const char* const* skip) {
    AttrCopy x = { dst, skip, 0 };
    hsize_t idx = 0;
    if (H5Aiterate2(src, H5_INDEX_NAME, H5_ITER_INC, &idx, copy_attr, &x) < 0) x.bad = 1;
    return x.bad;
}

// root attributes (saved_* for the target), /config and the groups; collective. 0 or 1.
static int write_header(const Ckpt* k, const Opts* o, hid_t f) {
    static const char* const saved[] = { "saved_tp", "saved_cp", "saved_dp", "saved_zero", NULL };
    int bad = copy_attrs(k->f, f, saved);
    bad |= h5_attr_write_i64(f, "saved_tp", o->tp);
    bad |= h5_attr_write_i64(f, "saved_cp", o->cp);
    bad |= h5_attr_write_i64(f, "saved_dp", o->dp);
    bad |= h5_attr_write_i64(f, "saved_zero", 0);
    hid_t src = H5Gopen2(k->f, "/config", H5P_DEFAULT), dst = H5Gcreate2(f, "/config", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    bad |= dst < 0 || copy_attrs(src, dst, NULL);
    H5Gclose(src);
    if (dst >= 0) H5Gclose(dst);
    int with_opt = k->have_opt && !o->model_only;
    const char* groups[4] = { "/model", "/optimizer", "/optimizer/m", "/optimizer/v" };
    for (int i = 0; i < (with_opt ? 4 : 1); i++) {
        hid_t g = H5Gcreate2(f, groups[i], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (g < 0) bad = 1; else H5Gclose(g);
    }
    return bad;
}

// create dataset d in f: logical shape, chunked as planned, space allocated now, no fill; dtype attribute
static int create_dataset(hid_t f, Dset* d) {
    hsize_t dims[2] = { (hsize_t)d->rows, (hsize_t)d->cols };
    hid_t sp = H5Screate_simple(d->ndim, dims, NULL), pl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(pl, d->ndim, d->out_chunk);
    H5Pset_alloc_time(pl, H5D_ALLOC_TIME_EARLY);
    H5Pset_fill_time(pl, H5D_FILL_TIME_NEVER);
    d->out = H5Dcreate2(f, d->path, d->out_bf16 ? H5T_STD_U16LE : H5T_IEEE_F32LE, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
    H5Pclose(pl); H5Sclose(sp);
    if (d->out < 0) return 1;
    return h5_attr_write_str(d->out, "dtype", d->out_bf16 ? "bf16" : "fp32") != 0;
}


// rank 0: NEW.tmp -> NEW, durably
static int publish(const char* tmp, const char* out) {
    if (fsync_path(tmp)) return FAIL("reshard: cannot fsync '%s': %s", tmp, strerror(errno));
    if (rename(tmp, out)) return FAIL("reshard: cannot rename '%s' to '%s': %s", tmp, out, strerror(errno));
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", out);
    fsync_path(dirname(dir));
    return 0;
}

// drop the datasets of /optimizer when --model-only
static void drop_optimizer(Ckpt* k) {
    int n = 0;
    for (int i = 0; i < k->nd; i++) {
        Dset* d = &k->d[i];
        if (d->kind == KIND_M || d->kind == KIND_V || (d->kind == KIND_EXTRA && !strncmp(d->path, "/optimizer/", 11))) {
            H5Dclose(d->in);
            continue;
        }
        k->d[n++] = *d;
    }
    k->nd = n;
}

// every check that can refuse the conversion before anything is written; exits (one line) on failure
static void check_convert(Ckpt* k, const Opts* o) {
    grid_check(W, check_target(k, o), msg);
    for (int i = 0; i < k->nd; i++)
        grid_check(W, k->d[i].kind == KIND_EXTRA && !(o->model_only && !strncmp(k->d[i].path, "/optimizer/", 11)) &&
                   FAIL("reshard: '%s' holds the dataset %s, which is not part of the format; not converting", k->path, k->d[i].path), msg);
    if (o->model_only) drop_optimizer(k);
    for (int i = 0; i < k->nd; i++)
        grid_check(W, !k->d[i].has_sum && FAIL("reshard: '%s': %s has no checksum attribute", k->path, k->d[i].path), msg);
    grid_check(W, group_rank(W) == 0 && check_out(o), msg);
}

// Write the output file `tmp` (collective): header, datasets, data, checksums. 1 (msg, every rank) when
// anything failed, including a checksum mismatch in the input. Closes the input.
static int write_output(Ckpt* k, const Opts* o, const char* tmp) {
    if (group_rank(W) == 0) unlink(tmp);               // a stale one from a killed run
    ctl_barrier(W);
    hid_t fapl = file_access();
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (sync_fail(f < 0 && FAIL("reshard: cannot create '%s' (directory missing or not writable?)", tmp))) {
        if (f >= 0) H5Fclose(f);
        close_ckpt(k);
        return 1;
    }
    int bad = write_header(k, o, f);
    for (int i = 0; i < k->nd; i++) bad |= create_dataset(f, &k->d[i]);
    if (bad) (void)FAIL("reshard: cannot create the datasets of '%s' (disk full?)", tmp);
    uint64_t* sin = calloc(k->nd, sizeof(uint64_t));
    uint64_t* sout = calloc(k->nd, sizeof(uint64_t));
    bad = sync_fail(bad);
    if (!bad) bad = run_units(k, 1, sin, sout);
    for (int i = 0; i < k->nd && !bad; i++)     // the sums are the same on every rank
        if (sin[i] != k->d[i].want)
            bad = FAIL("reshard: '%s': checksum mismatch in %s (the input is corrupt); nothing written", k->path, k->d[i].path);
    for (int i = 0; i < k->nd && !bad; i++)
        bad = h5_attr_write_u64(k->d[i].out, "checksum", sout[i]) != 0 &&
              FAIL("reshard: writing the checksum of %s in '%s' failed (disk full?)", k->d[i].path, tmp);
    free(sin); free(sout);
    close_ckpt(k);                              // the output datasets too
    if (H5Fclose(f) < 0) bad = bad || FAIL("reshard: closing '%s' failed (disk full?)", tmp);
    return sync_fail(bad);
}

static int convert(const Opts* o) {
    double t0 = now_s();
    Ckpt k;
    open_ckpt(&k, o->in);
    check_convert(&k, o);
    plan_outputs(&k, o);
    long long elems = 0, bytes = 0;
    for (int i = 0; i < k.nd; i++) {
        elems += (long long)k.d[i].rows * k.d[i].cols;
        bytes += (long long)k.d[i].rows * k.d[i].cols * (k.d[i].out_bf16 ? 2 : 4);
    }
    int nd = k.nd, have_opt = k.have_opt && !o->model_only;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", o->out);
    int bad = write_output(&k, o, tmp);
    if (!bad && group_rank(W) == 0) bad = publish(tmp, o->out);
    bad = sync_fail(bad);
    if (bad && group_rank(W) == 0) unlink(tmp);
    grid_check(W, bad, msg);
    if (group_rank(W) == 0) {
        printf("reshard: %s -> %s: layout tp %d cp %d dp %d, %s, %s; %d datasets, %lld elements, %.2f MiB; "
               "input checksums ok (%d rank%s, %.2f s)\n", o->in, o->out, o->tp, o->cp, o->dp,
               o->dtype == DT_BF16 ? "model bf16" : o->dtype == DT_FP32 ? "model fp32" : "model dtype kept",
               have_opt ? "with optimizer state" : "model only (no optimizer state)", nd, elems,
               bytes / 1048576.0, group_size(W), group_size(W) > 1 ? "s" : "", now_s() - t0);
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char** argv) {
    grid_mpi_init(&argc, &argv);
    W = group_world();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);     // errors are ours, one line each
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            if (group_rank(W) == 0) fputs(USAGE, stdout);
            grid_exit(0);
        }
    Opts o;
    grid_check(W, parse_args(argc, argv, &o), msg);
    int rc = o.mode == MODE_CONVERT ? convert(&o) : inspect(&o);
    grid_exit(rc);
    return rc;
}
