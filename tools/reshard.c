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
#include "checkpoint/validate.h"
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
"usage: [mpirun -np P] build/reshard --info CKPT [--timeout_s S]\n"
"       [mpirun -np P] build/reshard --verify CKPT [--timeout_s S]\n"
"       [mpirun -np P] build/reshard --tp N --cp N --dp N --out NEW [--dtype keep|fp32|bf16] [--model-only]\n"
"                                    [--force] [--timeout_s S] CKPT\n"
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
"                 reserved on disk, written, read back against its checksums and renamed to NEW at the\n"
"                 end; CKPT is never modified (an --out whose NEW.tmp would be CKPT is refused).\n"
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
"\n"
"every mode:\n"
"  --timeout_s S  the watchdog: a wait for other ranks (or one rank's file work in a collective phase) longer\n"
"                 than S seconds ends the job with one line naming the ranks (default 600; 0: none; as\n"
"                 build/train's); raise it for multi-GB checkpoints on a slow file system\n"
"  -h, --help     this text\n"
"\n"
"Errors (missing or truncated file, not HDF5, corrupt HDF5 metadata, not a ringlm checkpoint, another\n"
"format_version, step/data_cursor/tokens_seen/adam_t out of range or altered, a missing dataset, a checksum\n"
"mismatch, bad options, NEW exists, not enough space for NEW) are one line on stderr and exit status 1.\n"
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
    double timeout_s;       // --timeout_s: the watchdog (comm_set_timeout)
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
    o->timeout_s = 600;
    // --name value or --name=value, dashes and underscores alike (config_argv: --model-only reads as --model_only)
    static const char* const FLAGS[] = { "--info", "--verify", "--model_only", "--force", "--help", "-h", NULL };
    static const char* const OPTS[] = { "info", "verify", "out", "tp", "cp", "dp", "dtype", "model-only", "force", "timeout_s", "help", NULL };
    char err[512];
    argc = config_argv(argc, argv, FLAGS, &argv, err, sizeof err);
    if (argc < 0) return FAIL("reshard: %s", err);
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
        else if (!strcmp(a, "--timeout_s")) {
            if (grid_parse_timeout("reshard", v, &o->timeout_s, msg, sizeof msg)) return 1;
            i++;
        }
        else if (!strcmp(a, "--model_only")) o->model_only = o->layout_given = 1;
        else if (!strcmp(a, "--force")) o->force = o->layout_given = 1;
        else if (a[0] == '-' && a[1]) {
            const char* near = strncmp(a, "--", 2) ? NULL : config_nearest(a + 2, 0, OPTS);
            return FAIL("reshard: unknown option '%s'%s%s%s (see --help)", a, near ? " — did you mean '--" : "",
                        near ? near : "", near ? "'?" : "");
        }
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
    int rc = h5_attr_read_str(x->g, key, v, sizeof v);
    if (rc) {   // a missing training key keeps its default
        if (is_model || rc == -2) x->bad = FAIL("reshard: '%s' %s the %sconfig key /config:%s", x->path,
                                                rc == -1 ? "lacks" : "has a malformed", is_model ? "model " : "", key);
        return;
    }
    char err[1024];
    if (config_set(x->c, key, v, "checkpoint /config", err, sizeof err)) x->bad = FAIL("reshard: '%s': %s", x->path, err);
}

// the root attributes (checked: checkpoint/validate.h) and /config (into k->c)
static int read_header(Ckpt* k) {
    CkptState s;
    char err[2048];
    if (ckpt_read_state(k->f, "reshard", k->path, &s, err, sizeof err)) return FAIL("%s", err);
    k->step = s.step; k->cursor = s.cursor; k->tokens = s.tokens; k->adam_t = s.adam_t;
    if (!h5_exists(k->f, "/config")) return FAIL("reshard: '%s' lacks the group /config", k->path);
    config_defaults(&k->c);
    CfgCtx x = { H5Gopen2(k->f, "/config", H5P_DEFAULT), &k->c, 0, k->path };
    if (x.g < 0) return FAIL("reshard: '%s': the group /config cannot be opened (corrupt file)", k->path);
    config_each_key(read_key, &x);
    H5Gclose(x.g);
    if (x.bad) return 1;
    if (config_validate(&k->c, err, sizeof err)) return FAIL("reshard: '%s' holds an invalid /config: %s", k->path, err);
    return 0;
}

// fill shape, stored type, layout and checksum of an open dataset; 1 (msg) when it cannot be a tensor
static int describe(Ckpt* k, Dset* d) {
    hid_t fs = H5Dget_space(d->in), ft = H5Dget_type(d->in), pl = H5Dget_create_plist(d->in);
    hsize_t dims[2] = { 0, 1 };
    d->ndim = fs < 0 ? -1 : H5Sget_simple_extent_ndims(fs);
    if ((d->ndim == 1 || d->ndim == 2) && H5Sget_simple_extent_dims(fs, dims, NULL) < 0) d->ndim = -1;
    d->rows = (long)dims[0]; d->cols = d->ndim == 2 ? (long)dims[1] : 1;
    H5T_class_t cl = ft < 0 ? H5T_NO_CLASS : H5Tget_class(ft);
    size_t sz = ft < 0 ? 0 : H5Tget_size(ft);
    d->bf16 = cl == H5T_INTEGER && sz == 2;
    int fp32 = cl == H5T_FLOAT && sz == 4;
    H5D_layout_t lay = pl < 0 ? H5D_LAYOUT_ERROR : H5Pget_layout(pl);
    d->chunked = lay == H5D_CHUNKED;
    if (d->chunked && H5Pget_chunk(pl, 2, d->chunk) < 0) lay = H5D_LAYOUT_ERROR;
    int rc = h5_attr_read_u64(d->in, "checksum", &d->want);
    d->has_sum = rc == 0;
    if (fs >= 0) H5Sclose(fs);
    if (ft >= 0) H5Tclose(ft);
    if (pl >= 0) H5Pclose(pl);
    if (fs < 0 || ft < 0 || lay == H5D_LAYOUT_ERROR) return FAIL("reshard: '%s': %s is malformed (corrupt file)", k->path, d->path);
    if (rc == -2) return FAIL("reshard: '%s': %s has a malformed checksum attribute (a uint64 expected)", k->path, d->path);
    if (d->ndim != 1 && d->ndim != 2) return FAIL("reshard: '%s': %s has %d dimensions (1 or 2 expected)", k->path, d->path, d->ndim);
    if (!d->bf16 && !fp32) return FAIL("reshard: '%s': %s is neither fp32 nor bf16 (uint16)", k->path, d->path);
    return 0;
}

static int open_dataset(Ckpt* k, Dset* d) {
    d->in = d->out = H5I_INVALID_HID;
    if (!h5_exists(k->f, d->path)) return FAIL("reshard: '%s' lacks the dataset %s", k->path, d->path);
    d->in = H5Dopen2(k->f, d->path, H5P_DEFAULT);
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
    int bad = H5Ovisit2(k->f, H5_INDEX_NAME, H5_ITER_INC, visit, &w, H5O_INFO_BASIC) < 0
              && FAIL("reshard: '%s': its objects cannot be listed (corrupt file)", k->path);
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

static void close_ckpt(Ckpt* k) {
    for (int i = 0; i < k->nd; i++) {
        if (k->d[i].in >= 0) H5Dclose(k->d[i].in);
        if (k->d[i].out >= 0) H5Dclose(k->d[i].out);
        k->d[i].in = k->d[i].out = H5I_INVALID_HID;
    }
    free(k->d);
    k->d = NULL; k->nd = 0;
    if (k->f >= 0) H5Fclose(k->f);
    k->f = H5I_INVALID_HID;
}

// open CKPT on every rank and check it is a complete ringlm checkpoint (collective); 0, or 1 with msg on
// every rank and nothing left open. `check`: first the structure check of the whole file (rank 0, in a
// child process: checkpoint/validate.h).
static int open_ckpt_rc(Ckpt* k, const char* path, int check) {
    memset(k, 0, sizeof *k);
    k->path = path;
    k->f = H5I_INVALID_HID;
    struct stat st;
    int bad = 0;
    if (stat(path, &st)) bad = FAIL("reshard: '%s' does not exist", path);
    else if (!S_ISREG(st.st_mode)) bad = FAIL("reshard: '%s' is not a regular file", path);
    if (sync_fail(bad)) return 1;
    if (check && group_rank(W) == 0) bad = ckpt_check_file("reshard", path, msg, sizeof msg);
    if (sync_fail(bad)) return 1;
    hid_t fapl = file_access();
    k->f = fapl < 0 ? H5I_INVALID_HID : H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    bad = k->f < 0 && FAIL("reshard: '%s' cannot be opened as HDF5 (not an HDF5 file, truncated or corrupt)", path);
    if (!sync_fail(bad) && !sync_fail(read_header(k)) && !sync_fail(open_expected(k)) && !sync_fail(open_extras(k))) return 0;
    close_ckpt(k);
    return 1;
}
// the same, exiting (one line) on failure
static void open_ckpt(Ckpt* k, const char* path) { if (open_ckpt_rc(k, path, 1)) grid_check(W, 1, msg); }

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

// the file dataspace of dataset `ds` with rows [r0, r1) selected (H5I_INVALID_HID on an HDF5 error)
static hid_t rows_space(hid_t ds, long cols, long r0, long r1) {
    hid_t fs = H5Dget_space(ds);
    hsize_t start[2] = { (hsize_t)r0, 0 }, count[2] = { (hsize_t)(r1 - r0), (hsize_t)cols };
    if (fs >= 0 && H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) < 0) { H5Sclose(fs); return H5I_INVALID_HID; }
    return fs;
}

// read (write = 0) or write rows [r0, r1) of ds from/to buf, independent I/O; 0 or -1. The memory space
// has the selection's shape: otherwise HDF5 maps a chunked dataset's elements to chunks one at a time.
static int rows_io(int write, hid_t ds, hid_t memtype, long cols, long r0, long r1, void* buf) {
    hid_t fs = rows_space(ds, cols, r0, r1);
    if (fs < 0) return -1;
    hsize_t dims[2] = { (hsize_t)(r1 - r0), (hsize_t)cols };
    int nd = H5Sget_simple_extent_ndims(fs);
    hid_t ms = nd < 1 ? H5I_INVALID_HID : H5Screate_simple(nd, dims, NULL);
    herr_t rc = ms < 0 ? -1 : write ? H5Dwrite(ds, memtype, ms, fs, H5P_DEFAULT, buf) : H5Dread(ds, memtype, ms, fs, H5P_DEFAULT, buf);
    if (ms >= 0) H5Sclose(ms);
    H5Sclose(fs);
    return rc < 0 ? -1 : 0;
}

// One unit: read it, add its checksum terms to *sin; when converting store it as d->out_bf16 says and
// add the stored values' terms to *sout. Returns 0, -1 (reading failed) or -2 (writing failed).
static int do_unit(const Dset* d, const Unit* u, int convert, uint64_t* sin, uint64_t* sout, uint64_t* nonfin) {
    long long n = (long long)(u->r1 - u->r0) * d->cols;
    uint64_t i0 = (uint64_t)u->r0 * d->cols;
    void* in = malloc((size_t)n * (d->bf16 ? 2 : 4));
    if (!in) { fprintf(stderr, "reshard: out of memory\n"); exit(1); }
    int rc = rows_io(0, d->in, d->bf16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_FLOAT, d->cols, u->r0, u->r1, in);
    uint64_t s = 0;
    if (!rc) s = d->bf16 ? xsum_u16(in, n, i0) : xsum_f32(in, n, i0);
    *sin += s;
    if (!rc) {   // inf or NaN: every reader refuses such a checkpoint, so --verify and a conversion do too
        uint64_t bad = 0;
        if (d->bf16) { const uint16_t* x = in; for (long long j = 0; j < n; j++) bad += (x[j] & 0x7f80u) == 0x7f80u; }
        else { const uint32_t* x = in; for (long long j = 0; j < n; j++) bad += (x[j] & 0x7f800000u) == 0x7f800000u; }
        *nonfin += bad;
    }
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
    rc = rows_io(1, d->out, d->out_bf16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_FLOAT, d->cols, u->r0, u->r1, out) ? -2 : 0;
    if (out != in) free(out);
    free(in);
    return rc;
}

// Every rank does its units; then sin[i] (and sout[i]) hold dataset i's whole checksum on every rank.
// Returns 1 (msg) when an I/O error happened on any rank.
static int run_units(Ckpt* k, int convert, uint64_t* sin, uint64_t* sout, uint64_t* nonfin, const char* out) {
    int nu;
    Unit* u = plan_units(k->d, k->nd, convert, group_size(W), &nu);
    int bad = 0;
    for (int i = 0; i < nu && !bad; i++) {
        if (u[i].rank != group_rank(W)) continue;
        const Dset* d = &k->d[u[i].d];
        int rc = do_unit(d, &u[i], convert, &sin[u[i].d], &sout[u[i].d], &nonfin[u[i].d]);
        if (rc == -1)
            bad = FAIL("reshard: '%s': reading %s rows [%ld, %ld) failed (truncated or corrupt file?)", k->path, d->path, u[i].r0, u[i].r1);
        else if (rc)
            bad = FAIL("reshard: writing %s rows [%ld, %ld) to '%s' failed (disk full?)", d->path, u[i].r0, u[i].r1, out);
    }
    free(u);
    ctl_sum_u64(W, sin, k->nd);
    ctl_sum_u64(W, sout, k->nd);
    ctl_sum_u64(W, nonfin, k->nd);
    return sync_fail(bad);
}

// ---- --info and --verify -----------------------------------------------------------------------------

static const char* sum_state(const Dset* d, uint64_t got) { return !d->has_sum ? "missing" : d->want == got ? "ok" : "MISMATCH"; }

typedef struct { hid_t g; Config saved; } KeyPrint;   // saved: the defaults and the checkpoint's rope_scaling
// a model key as config.txt shows it (floats in their shortest text: norm_eps = 1e-05, not the stored exact
// 9.99999975e-06; a key the model does not use left out, config_key_used); the stored text when it does not parse
static void print_key(const char* key, int is_model, void* vctx) {
    char v[CFG_STR + 32], shown[CFG_STR + 32], e[256];
    KeyPrint* kp = vctx;
    if (!is_model || !config_key_used(&kp->saved, key) || h5_attr_read_str(kp->g, key, v, sizeof v)) return;
    Config c;
    config_defaults(&c);
    if (config_set(&c, key, v, "checkpoint /config", e, sizeof e) || config_format(&c, key, shown, sizeof shown))
        snprintf(shown, sizeof shown, "%s", v);
    printf("  %-26s = %s\n", key, shown);
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
    static KeyPrint kp;
    kp.g = H5Gopen2(k->f, "/config", H5P_DEFAULT);
    config_defaults(&kp.saved);
    char rs[CFG_STR + 32], e[256];
    if (kp.g >= 0 && !h5_attr_read_str(kp.g, "rope_scaling", rs, sizeof rs))
        config_set(&kp.saved, "rope_scaling", rs, "checkpoint /config", e, sizeof e);
    if (kp.g >= 0) { config_each_key(print_key, &kp); H5Gclose(kp.g); }
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
    uint64_t* unused = calloc(k.nd, sizeof(uint64_t)), *nonfin = calloc(k.nd, sizeof(uint64_t));
    int bad = run_units(&k, 0, sums, unused, nonfin, NULL);
    if (bad) { close_ckpt(&k); grid_check(W, 1, msg); }
    if (o->mode == MODE_INFO && group_rank(W) == 0) print_info(&k, sums);
    fflush(stdout);
    int n = report_sums(&k, sums);
    for (int i = 0; i < k.nd; i++) {   // values no program accepts: the file does not verify
        if (!nonfin[i]) continue;
        n++;
        if (!group_rank(W)) fprintf(stderr, "reshard: '%s': %s holds %llu inf or NaN values (no ringlm program loads it)\n",
                                    k.path, k.d[i].path, (unsigned long long)nonfin[i]);
    }
    long long elems = 0;
    for (int i = 0; i < k.nd; i++) elems += (long long)k.d[i].rows * k.d[i].cols;
    if (o->mode == MODE_VERIFY && group_rank(W) == 0) {
        if (n) printf("%s: %d of %d datasets FAILED verification\n", k.path, n, k.nd);
        else printf("%s: %d datasets, %lld elements: all checksums ok\n", k.path, k.nd, elems);
    }
    fflush(stdout); fflush(stderr);
    close_ckpt(&k);
    free(sums); free(unused); free(nonfin);
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

// rank 0: NEW must not exist (unless --force) and must not be CKPT itself; nor may NEW.tmp, which is
// written first (and a stale one removed), be CKPT
static int check_out(const Opts* o) {
    struct stat si, so, st;
    char tmp[4096], dir[4096];
    size_t lo = strlen(o->out);
    if (o->out[lo - 1] == '/' || (!stat(o->out, &so) && S_ISDIR(so.st_mode)))
        return FAIL("reshard: --out '%s' names a directory; give the new checkpoint's file name, e.g. --out %s%sckpt.h5", o->out,
                    o->out, o->out[lo - 1] == '/' ? "" : "/");
    const char* slash = strrchr(o->out, '/');   // the directory it goes in must exist
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - o->out) : 1, slash ? (slash == o->out ? "/" : o->out) : ".");
    if (stat(dir, &st) || !S_ISDIR(st.st_mode))
        return FAIL("reshard: --out '%s': the directory '%s' %s; create it first", o->out, dir,
                    stat(dir, &st) ? "does not exist" : "is not a directory");
    snprintf(tmp, sizeof tmp, "%s.tmp", o->out);
    if (!strcmp(tmp, o->in) || (!stat(o->in, &si) && !stat(tmp, &st) && si.st_dev == st.st_dev && si.st_ino == st.st_ino))
        return FAIL("reshard: --out '%s' would be written as '%s', which is the input checkpoint; choose another --out", o->out, tmp);
    if (stat(o->out, &so)) return 0;
    if (!stat(o->in, &si) && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        return FAIL("reshard: --out '%s' is the input checkpoint; write somewhere else", o->out);
    if (!o->force) return FAIL("reshard: '%s' exists; pass --force to replace it", o->out);
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
    hid_t a = H5Aopen(src, name, H5P_DEFAULT);
    hid_t t = a < 0 ? H5I_INVALID_HID : H5Aget_type(a), s = a < 0 ? H5I_INVALID_HID : H5Aget_space(a);
    hssize_t n = s < 0 ? -1 : H5Sget_select_npoints(s);
    size_t es = t < 0 ? 0 : H5Tget_size(t);
    void* buf = n >= 0 && es ? calloc((size_t)(n > 0 ? n : 1), es) : NULL;
    hid_t b = H5I_INVALID_HID;
    int read = buf && H5Aread(a, t, buf) >= 0;
    if (!read || (b = H5Acreate2(x->dst, name, t, s, H5P_DEFAULT, H5P_DEFAULT)) < 0 || H5Awrite(b, t, buf) < 0) x->bad = 1;
    if (read && (H5Tdetect_class(t, H5T_VLEN) > 0 || H5Tis_variable_str(t) > 0)) H5Dvlen_reclaim(t, s, H5P_DEFAULT, buf);
    if (b >= 0 && H5Aclose(b) < 0) x->bad = 1;
    free(buf);
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    return x->bad ? -1 : 0;
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
    bad |= src < 0 || dst < 0 || copy_attrs(src, dst, NULL);
    if (src >= 0) H5Gclose(src);
    if (dst >= 0 && H5Gclose(dst) < 0) bad = 1;
    int with_opt = k->have_opt && !o->model_only;
    const char* groups[4] = { "/model", "/optimizer", "/optimizer/m", "/optimizer/v" };
    for (int i = 0; i < (with_opt ? 4 : 1); i++) {
        hid_t g = H5Gcreate2(f, groups[i], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (g < 0 || H5Gclose(g) < 0) bad = 1;
    }
    return bad;
}

// create dataset d in f: logical shape, chunked as planned, space allocated now, no fill; dtype attribute
static int create_dataset(hid_t f, Dset* d) {
    hsize_t dims[2] = { (hsize_t)d->rows, (hsize_t)d->cols };
    hid_t sp = H5Screate_simple(d->ndim, dims, NULL), pl = H5Pcreate(H5P_DATASET_CREATE);
    int bad = sp < 0 || pl < 0 || H5Pset_chunk(pl, d->ndim, d->out_chunk) < 0 || H5Pset_alloc_time(pl, H5D_ALLOC_TIME_EARLY) < 0
              || H5Pset_fill_time(pl, H5D_FILL_TIME_NEVER) < 0;
    if (!bad) d->out = H5Dcreate2(f, d->path, d->out_bf16 ? H5T_STD_U16LE : H5T_IEEE_F32LE, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
    if (pl >= 0) H5Pclose(pl);
    if (sp >= 0) H5Sclose(sp);
    if (bad || d->out < 0) return 1;
    return h5_attr_write_str(d->out, "dtype", d->out_bf16 ? "bf16" : "fp32") != 0;
}

// bytes to reserve for the output: every dataset's allocated chunks (edge chunks whole) and room for the
// metadata (object headers, chunk indexes, attributes)
static long long output_bytes(const Ckpt* k) {
    long long b = 256LL << 10;
    for (int i = 0; i < k->nd; i++) {
        const Dset* d = &k->d[i];
        long long c0 = (long long)d->out_chunk[0], c1 = d->ndim == 2 ? (long long)d->out_chunk[1] : 1;
        long long n0 = (d->rows + c0 - 1) / c0, n1 = (d->cols + c1 - 1) / c1;
        b += n0 * n1 * (c0 * c1 * (d->out_bf16 ? 2 : 4) + 128) + 4096;
    }
    return b;
}

// rank 0: NEW.tmp (fsynced) -> NEW, durably
static int publish(const char* tmp, const char* out) {
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

// Write the output file `tmp` (collective): reserve its space, header, datasets, data, checksums, close.
// sout[i] receives the checksum of output dataset i (named paths[i]). 1 (msg, every rank) when anything
// failed, including a checksum mismatch in the input. Closes the input.
static int write_output(Ckpt* k, const Opts* o, const char* tmp, char (*paths)[256], uint64_t* sout) {
    int r0 = group_rank(W) == 0, bad = 0;
    if (r0) unlink(tmp);                                // a stale one from a killed run (check_out: not CKPT)
    char err[2048];
    long long need = output_bytes(k);
    if (r0 && ckpt_reserve("reshard", tmp, need, 1, err, sizeof err)) bad = FAIL("%s", err);
    if (sync_fail(bad)) { close_ckpt(k); return 1; }
    hid_t fapl = file_access();
    hid_t f = fapl < 0 ? H5I_INVALID_HID : H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (sync_fail(f < 0 && FAIL("reshard: cannot create '%s' (directory missing or not writable?)", tmp))) {
        if (f >= 0) H5Fclose(f);
        close_ckpt(k);
        return 1;
    }
    if (r0 && ckpt_reserve("reshard", tmp, need, 0, err, sizeof err)) bad = FAIL("%s", err);
    bad = sync_fail(bad);
    if (!bad) {
        bad = write_header(k, o, f);
        for (int i = 0; i < k->nd; i++) bad |= create_dataset(f, &k->d[i]);
        bad = sync_fail(bad && FAIL("reshard: cannot create the datasets of '%s' (disk full?)", tmp));
    }
    uint64_t* sin = calloc(k->nd, sizeof(uint64_t)), *nonfin = calloc(k->nd, sizeof(uint64_t));
    if (!bad) bad = run_units(k, 1, sin, sout, nonfin, tmp);
    for (int i = 0; i < k->nd && !bad; i++)     // the sums are the same on every rank
        if (sin[i] != k->d[i].want)
            bad = FAIL("reshard: '%s': checksum mismatch in %s (the input is corrupt); nothing written", k->path, k->d[i].path);
    for (int i = 0; i < k->nd && !bad; i++)
        if (nonfin[i])
            bad = FAIL("reshard: '%s': %s holds %llu inf or NaN values (no ringlm program loads it); nothing written",
                       k->path, k->d[i].path, (unsigned long long)nonfin[i]);
    for (int i = 0; i < k->nd && !bad; i++)
        bad = h5_attr_write_u64(k->d[i].out, "checksum", sout[i]) != 0 &&
              FAIL("reshard: writing the checksum of %s in '%s' failed (disk full?)", k->d[i].path, tmp);
    for (int i = 0; i < k->nd; i++) memcpy(paths[i], k->d[i].path, 256);
    free(sin); free(nonfin);
    bad = sync_fail(bad);
    // a failed output is deleted anyway: its space goes back first, so that closing it (HDF5 writes the
    // metadata then, on every rank together) cannot fail for lack of space
    if (bad && r0 && truncate(tmp, 0)) {}
    ctl_barrier(W);
    close_ckpt(k);                              // the output datasets too
    if (H5Fclose(f) < 0) bad = bad || FAIL("reshard: closing '%s' failed (disk full?)", tmp);
    return sync_fail(bad);
}

// The closed output, fsynced, opened again and read in full: every dataset's stored checksum must match
// its data and what was written (sout). 0, or 1 with msg on every rank.
static int verify_output(const char* tmp, int nd, char (*paths)[256], const uint64_t* sout) {
    int bad = 0;
    if (group_rank(W) == 0) {
        struct stat sb;   // releases what was reserved beyond the end, then fsync
        if (stat(tmp, &sb) || truncate(tmp, sb.st_size) || fsync_path(tmp)) bad = FAIL("reshard: cannot fsync '%s': %s", tmp, strerror(errno));
    }
    if (sync_fail(bad)) return 1;
    Ckpt v;
    if (open_ckpt_rc(&v, tmp, 0)) {
        char e[2048];
        snprintf(e, sizeof e, "%.2000s", msg);
        return FAIL("reshard: the output did not verify after writing (%s); it was removed", e);
    }
    uint64_t* sums = calloc(v.nd + 1, sizeof(uint64_t));
    uint64_t* unused = calloc(v.nd + 1, sizeof(uint64_t));
    uint64_t* nf = calloc(v.nd + 1, sizeof(uint64_t));
    bad = run_units(&v, 0, sums, unused, nf, NULL);
    free(nf);
    if (!bad && v.nd != nd) bad = FAIL("reshard: '%s' holds %d datasets after writing, %d were written; it was removed", tmp, v.nd, nd);
    for (int i = 0; i < v.nd && !bad; i++)
        if (strcmp(v.d[i].path, paths[i]) || !v.d[i].has_sum || v.d[i].want != sums[i] || sums[i] != sout[i])
            bad = FAIL("reshard: %s in '%s' reads back other values than were written; it was removed", v.d[i].path, tmp);
    free(sums); free(unused);
    close_ckpt(&v);
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
    char (*paths)[256] = calloc(nd + 1, 256);
    uint64_t* sout = calloc(nd + 1, sizeof(uint64_t));
    int bad = write_output(&k, o, tmp, paths, sout);
    if (!bad) bad = verify_output(tmp, nd, paths, sout);
    if (!bad && group_rank(W) == 0) bad = publish(tmp, o->out);
    bad = sync_fail(bad);
    if (bad && group_rank(W) == 0) unlink(tmp);
    free(paths); free(sout);
    grid_check(W, bad, msg);
    if (group_rank(W) == 0) {
        printf("reshard: %s -> %s: layout tp %d cp %d dp %d, %s, %s; %d datasets, %lld elements, %.2f MiB; "
               "input checksums ok, output verified (%d rank%s, %.2f s)\n", o->in, o->out, o->tp, o->cp, o->dp,
               o->dtype == DT_BF16 ? "model bf16" : o->dtype == DT_FP32 ? "model fp32" : "model dtype kept",
               have_opt ? "with optimizer state" : "model only (no optimizer state)", nd, elems,
               bytes / 1048576.0, group_size(W), group_size(W) > 1 ? "s" : "", now_s() - t0);
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char** argv) {
    stdout_lines();   // each line appears when printed, also into a file or pipe
    grid_mpi_init(&argc, &argv);
    W = group_world();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);     // errors are ours, one line each
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            if (group_rank(W) == 0) fputs(USAGE, stdout);
            grid_exit(0);
        }
    Opts o;
    int fail = parse_args(argc, argv, &o);
    if (!fail) comm_set_timeout(o.timeout_s);   // (every rank parses the same options: the first wait has it too)
    grid_check(W, fail, msg);
    char ph[300];   // HDF5's collective I/O and one rank's file work under the watchdog (comm_phase_begin)
    snprintf(ph, sizeof ph, "%s %.250s", o.mode == MODE_CONVERT ? "converting" : "reading", o.in);
    comm_phase_begin(ph);
    int rc = o.mode == MODE_CONVERT ? convert(&o) : inspect(&o);
    comm_phase_end();
    grid_exit(rc);
    return rc;
}
