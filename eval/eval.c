// eval.c — build/eval: perplexity by position in the context, and passkey retrieval, for checkpoints, under
// any (tp, cp, dp) layout — the training machinery run forward only.
//
//   [mpirun -np N] build/eval --ckpt PATH [--rope SPEC ...] [--label TEXT] [--ckpt PATH ...] --data PATTERN --seq_len L ...
//   [mpirun -np N] build/eval --passkey --ckpt PATH [--passkey_lens 256,512] [--passkey_depths 0,0.5,1] ...
//
// Each series is one checkpoint with one RoPE setting, drawn on one plot: every --ckpt starts a series whose RoPE is
// as the checkpoint was trained; a --rope (or --rope_* key, or --label) applies to the series of the --ckpt it follows,
// and each further --rope after one --ckpt adds a series of that checkpoint. With --data, the data's meta.json
// (data/meta.h) gives the default --eod, and a checkpoint that recorded its training data's tokens must be
// evaluated on the same tokens. Documents are the data's documents (split at the end-of-document token) of at least
// L + 1 tokens; each contributes its first L targets, position p in the context = p-th target. With
// --stride S (sliding windows, the YaRN paper's protocol) documents are scored up to --doc_len tokens with
// windows of L tokens every S tokens, only the tokens new to a window scored; positions are then positions
// in the document. With --doc_mask the data is scored as packed windows instead — consecutive windows of L + 1
// tokens of the stream, as training sees them — with attention kept inside each document (documents start at the
// eod token), each target booked at its position in its document (the context it sees). Buckets: --bucket W
// (fixed width) or --log_buckets (powers of two). Each bucket also gets the standard error of its mean loss
// over the documents (packed: windows) that have tokens in it, in the CSV and as a shaded band in the SVG.
#include "backend/backend.h"
#include "checkpoint/ckpt.h"
#include "comm/grid.h"
#include "common/files.h"
#include "common/util.h"
#include "data/meta.h"
#include "data/shards.h"
#include "data/pack.h"
#include "eval/doclen.h"
#include "eval/passkey.h"
#include "eval/report.h"
#include "model/model.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_SERIES 32
static char msg[4096];

typedef struct {   // one RoPE setting; scaling "" = as saved in the checkpoint
    char scaling[16];
    double factor, orig, theta;   // <= 0: as saved
    char text[64];
} Rope;

// the model keys evaluation may change: given as --KEY VALUE, applied through the config key table
static const char* ALLOW[] = { "rope_scaling", "rope_factor", "rope_original_max_seq_len", "rope_theta", "max_seq_len",
                               "seq_len", NULL };
enum { NOVERRIDE = 4 };   // the first four of ALLOW can be given on the command line

typedef struct {   // one series: a checkpoint, its RoPE (as trained unless given) and its legend label
    const char* ckpt;
    const char* label;                  // NULL: file name (+ the RoPE when one is given)
    Rope rope;                          // --rope (text "": none given)
    const char* overrides[NOVERRIDE];   // --rope_scaling / --rope_factor / ... (NULL: as saved)
} SeriesArg;

typedef struct {
    SeriesArg ser[MAX_SERIES]; int ns;
    const char* data; int seq_len, docs, bucket, log_buckets, stride, doc_len, eod, force, data_meta;
    int doc_mask, doc_positions;        // packed windows with document masking; RoPE restarts (-1: the checkpoint's)
    int tp, cp; char layout[16]; const char* comm;
    char shard[16]; int shard_min;      // --cp_shard window | document, --cp_shard_min (as the training keys)
    const char* out; const char* name;
    int passkey, trials; long long seed;
    int doc_lengths;                    // --doc_lengths: the data's document length distribution (no checkpoint)
    double timeout_s;                   // --timeout_s: the watchdog (comm_set_timeout)
    int lens[64], nlens; double depths[64]; int ndepths;
} Args;

static void usage(FILE* f) {
    fprintf(f,
        "usage: [mpirun -np N] build/eval --ckpt PATH [--rope SPEC ...] [--label TEXT] [--ckpt PATH ...] --data PATTERN\n"
        "                                  --seq_len L [options]\n"
        "       [mpirun -np N] build/eval --passkey --ckpt PATH [--passkey_lens A,B,..] [--passkey_depths x,y,..]\n"
        "Perplexity by position in the context (table on stdout, OUT/NAME.csv, OUT/NAME.svg), or passkey retrieval\n"
        "accuracy over context lengths x depths: documents with all 5 digits right, and digits right (OUT/NAME_passkey.csv,\n"
        "OUT/NAME_passkey.svg).\n"
        "  --ckpt PATH            checkpoint file, or a directory (its latest); each --ckpt starts a series, with\n"
        "                         the RoPE the checkpoint was trained with\n"
        "  --label TEXT           legend label of the series of the --ckpt or --rope it follows (default: file\n"
        "                         name, + the RoPE when one is given)\n"
        "  --data PATTERN         held-out token shards (glob, directory or file; a prepared directory, one with a\n"
        "                         meta.json: its val_*.bin, else its train_*.bin); their directory's meta.json\n"
        "                         (written by build/prepare, tools/prepare_hf) gives the default --eod, and a\n"
        "                         checkpoint that recorded its training data's tokenizer must match it\n"
        "  --data_meta 0|1        0: ignore meta.json and the checkpoint's recorded data description (default 1)\n"
        "  --seq_len L            context length to evaluate at (may exceed the trained one; divisible by 2*cp)\n"
        "  --docs N               documents to evaluate (default 16; 0 = all that are long enough; a note says\n"
        "                         when the data has fewer)\n"
        "  --bucket W             fixed-width position buckets of W tokens (default: L/16)\n"
        "  --log_buckets          buckets [0,1) [1,2) [2,4) ... instead\n"
        "  --stride S             sliding windows every S tokens, only new tokens scored (YaRN protocol)\n"
        "  --doc_mask             score packed windows (consecutive windows of the stream, as in training; --docs\n"
        "                         counts windows) with attention kept inside each document (starting at --eod);\n"
        "                         positions are positions in the document; --doc_positions 0|1 restarts RoPE\n"
        "                         positions at each document (default: as the checkpoint was trained)\n"
        "  --doc_len D            with --stride: score the first D tokens of each document (default 4 L)\n"
        "  --eod ID               end-of-document (separator) token of the data, e.g. the one tools/prepare_hf\n"
        "                         printed (default: the data's meta.json eod_id, else 256 for the byte\n"
        "                         tokenizer's vocab 257, else -1; -1: no documents, consecutive windows of the\n"
        "                         stream); a value that contradicts meta.json is refused; --passkey starts its\n"
        "                         documents with it\n"
        "  --rope SPEC            RoPE of the series of the --ckpt it follows: none | linear:F | yarn:F[:L]\n"
        "                         (original length L); more --rope after one --ckpt add series of that checkpoint\n"
        "                         (compare settings of one model on one plot: --ckpt a.h5 --rope none --rope yarn:4);\n"
        "                         the table, CSV and legend give each series' RoPE, and a WARNING says when one\n"
        "                         replaces the scaling its checkpoint was trained with\n"
        "  --rope_scaling S --rope_factor F --rope_original_max_seq_len L --rope_theta B\n"
        "                         override one key of the RoPE of the series they follow (as --rope)\n"
        "  --tp N --cp N          layout (dp = ranks / (tp cp)); --cp_layout zigzag|contiguous\n"
        "  --cp_shard window|document [--cp_shard_min N]\n"
        "                         how each window is split over the cp ranks (document: with --doc_mask, by\n"
        "                         documents balanced by attention work, as the training keys; docs/cp_balance.md)\n"
        "  --comm NAME            data transport: auto | mpi | nccl (as the training key comm)\n"
        "  --out DIR              output directory (default out/eval); --name NAME file stem (default ppl)\n"
        "  --force                replace existing output files\n"
        "  --timeout_s S          the watchdog: a wait for other ranks longer than S seconds ends the job with one\n"
        "                         line naming the ranks that did not arrive (default 600; 0: none; as build/train's)\n"
        "  --doc_lengths          the --data's document length distribution instead (no checkpoint): a table,\n"
        "                         OUT/NAME_doclen.csv and .svg (log2 buckets; with --seq_len, what fits a window)\n"
        "  --passkey              passkey retrieval instead of perplexity (one series; byte-level text: refused\n"
        "                         for a checkpoint trained on data of another tokenizer)\n"
        "  --passkey_lens LIST    context lengths (default 256,512,1024)\n"
        "  --passkey_depths LIST  needle depths in [0,1] (default 0,0.25,0.5,0.75,1)\n"
        "  --passkey_trials N     documents per cell (default 4); --seed S generator seed (default 1)\n"
        "Options may also be written --name=value, and dashes may stand for underscores (--seq-len=1024).\n");
}

static int parse_rope(const char* s, Rope* r) {
    memset(r, 0, sizeof *r);
    snprintf(r->text, sizeof r->text, "%s", s);
    char buf[64]; snprintf(buf, sizeof buf, "%s", s);
    char* f = strchr(buf, ':');
    if (f) *f++ = 0;
    if (strcmp(buf, "none") && strcmp(buf, "linear") && strcmp(buf, "yarn")) return 1;
    snprintf(r->scaling, sizeof r->scaling, "%.15s", buf);
    if (!strcmp(buf, "none")) { r->factor = 1; return f != NULL; }
    if (!f) return 1;
    char* l = strchr(f, ':');
    if (l) *l++ = 0;
    char* end;
    r->factor = strtod(f, &end);
    if (*end || !(r->factor > 0 && r->factor <= 1e6)) return 1;   // (NaN and inf fail too)
    if (l) {
        r->orig = strtod(l, &end);
        if (*end || !(r->orig >= 2 && r->orig <= 2147483647.0) || r->orig != floor(r->orig) || strcmp(buf, "yarn")) return 1;
    }
    return 0;
}

static int parse_list(const char* s, double* out, int max) {
    int n = 0;
    char buf[1024]; snprintf(buf, sizeof buf, "%s", s);
    for (char* t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        char* end;
        if (n == max) return -1;
        out[n++] = strtod(t, &end);
        if (*end) return -1;
    }
    return n;
}

// every option's name, for the nearest one to an unknown option (the RoPE overrides included)
static const char* const OPTIONS[] = { "ckpt", "label", "data", "seq_len", "docs", "bucket", "log_buckets", "stride",
    "doc_mask", "doc_positions", "doc_len", "eod", "data_meta", "rope", "rope_scaling", "rope_factor", "rope_original_max_seq_len",
    "rope_theta", "tp", "cp", "cp_layout", "cp_shard", "cp_shard_min", "comm", "out", "name", "force", "passkey", "passkey_lens", "passkey_depths",
    "passkey_trials", "seed", "timeout_s", "help", NULL };

static int to_int(const char* s, int* v) { char* e; long x = strtol(s, &e, 10); *v = (int)x; return *e || e == s; }

static int parse_args(int argc, char** argv, Args* a) {
    memset(a, 0, sizeof *a);
    a->docs = 16; a->eod = -2; a->data_meta = 1; a->doc_positions = -1; a->tp = 1; a->cp = 1; snprintf(a->layout, sizeof a->layout, "zigzag");
    snprintf(a->shard, sizeof a->shard, "window"); a->shard_min = -1;
    a->out = "out/eval"; a->name = "ppl"; a->trials = 4; a->seed = 1; a->comm = "auto"; a->timeout_s = 600;
    int lens[3] = { 256, 512, 1024 };
    for (int i = 0; i < 3; i++) a->lens[i] = lens[i];
    a->nlens = 3;
    double depths[5] = { 0, 0.25, 0.5, 0.75, 1 };
    for (int i = 0; i < 5; i++) a->depths[i] = depths[i];
    a->ndepths = 5;
    // --name value or --name=value, dashes for underscores (config_argv); the options without a value:
    static const char* const FLAGS[] = { "--log_buckets", "--force", "--passkey", "--doc_mask", "--doc_lengths", "--help", "-h", NULL };
    char err0[512];
    argc = config_argv(argc, argv, FLAGS, &argv, err0, sizeof err0);
    if (argc < 0) { snprintf(msg, sizeof msg, "eval: %s", err0); return 1; }
    int roped = 0;   // the last --ckpt has had a --rope: a further one starts another series of it
    for (int i = 1; i < argc; i++) {
        const char* k = argv[i];
        if (!strcmp(k, "--log_buckets")) { a->log_buckets = 1; continue; }
        if (!strcmp(k, "--force")) { a->force = 1; continue; }
        if (!strcmp(k, "--passkey")) { a->passkey = 1; continue; }
        if (!strcmp(k, "--doc_mask")) { a->doc_mask = 1; continue; }
        if (!strcmp(k, "--doc_lengths")) { a->doc_lengths = 1; continue; }
        if (!strncmp(k, "--", 2) && i + 1 >= argc) { snprintf(msg, sizeof msg, "eval: option '%s' needs a value (see --help)", k); return 1; }
        const char* v = argv[i + 1];
        int bad = 0;
        SeriesArg* cur = a->ns ? &a->ser[a->ns - 1] : NULL;   // the series an option that follows a --ckpt applies to
        int per_series = !strcmp(k, "--rope") || !strcmp(k, "--label");
        for (int o = 0; o < NOVERRIDE; o++) per_series |= !strncmp(k, "--", 2) && !strcmp(k + 2, ALLOW[o]);
        if (per_series && !cur) {
            snprintf(msg, sizeof msg, "eval: %s %s comes before any --ckpt: put it after the --ckpt it belongs to (it applies "
                     "to the series of the --ckpt it follows)", k, v);
            return 1;
        }
        if (!strcmp(k, "--ckpt") || (!strcmp(k, "--rope") && roped)) {   // a new series
            if (a->ns == MAX_SERIES) {
                snprintf(msg, sizeof msg, "eval: at most %d series (each --ckpt, and each further --rope after one, is one)", MAX_SERIES);
                return 1;
            }
            SeriesArg* n = &a->ser[a->ns++];
            memset(n, 0, sizeof *n);
            n->ckpt = cur && strcmp(k, "--ckpt") ? cur->ckpt : v;
            if (!strcmp(k, "--ckpt")) { roped = 0; i++; continue; }
            cur = n;
        }
        if (!strcmp(k, "--ckpt")) {}
        else if (!strcmp(k, "--rope")) { bad = parse_rope(v, &cur->rope); roped = 1; }
        else if (!strcmp(k, "--label")) {
            if (cur->label) {
                snprintf(msg, sizeof msg, "eval: two --label for one series ('%s' and '%s', series %d of --ckpt %s): a --label "
                         "names the series of the --ckpt or --rope it follows", cur->label, v, a->ns, cur->ckpt);
                return 1;
            }
            cur->label = v;
        }
        else if (!strcmp(k, "--data")) a->data = v;
        else if (!strcmp(k, "--data_meta")) bad = to_int(v, &a->data_meta) || a->data_meta < 0 || a->data_meta > 1;
        else if (!strcmp(k, "--seq_len")) bad = to_int(v, &a->seq_len) || a->seq_len <= 1;
        else if (!strcmp(k, "--docs")) bad = to_int(v, &a->docs) || a->docs < 0;
        else if (!strcmp(k, "--bucket")) bad = to_int(v, &a->bucket) || a->bucket <= 0;
        else if (!strcmp(k, "--stride")) bad = to_int(v, &a->stride) || a->stride <= 0;
        else if (!strcmp(k, "--doc_len")) bad = to_int(v, &a->doc_len) || a->doc_len <= 0;
        else if (!strcmp(k, "--eod")) bad = to_int(v, &a->eod) || a->eod < -1;
        else if (!strcmp(k, "--doc_positions")) bad = to_int(v, &a->doc_positions) || a->doc_positions < 0 || a->doc_positions > 1;
        else if (!strcmp(k, "--tp")) bad = to_int(v, &a->tp) || a->tp <= 0;
        else if (!strcmp(k, "--cp")) bad = to_int(v, &a->cp) || a->cp <= 0;
        else if (!strcmp(k, "--cp_layout")) { snprintf(a->layout, sizeof a->layout, "%s", v); bad = ring_layout_parse(v) < 0; }
        else if (!strcmp(k, "--cp_shard")) { snprintf(a->shard, sizeof a->shard, "%s", v); bad = shard_mode_parse(v) < 0; }
        else if (!strcmp(k, "--cp_shard_min")) bad = to_int(v, &a->shard_min);
        else if (!strcmp(k, "--comm")) a->comm = v;
        else if (!strcmp(k, "--timeout_s")) { if (grid_parse_timeout("eval", v, &a->timeout_s, msg, sizeof msg)) return 1; }
        else if (!strcmp(k, "--out")) a->out = v;
        else if (!strcmp(k, "--name")) {
            a->name = v;
            if (!*v || strchr(v, '/') || !strcmp(v, ".") || !strcmp(v, "..")) {
                snprintf(msg, sizeof msg, "eval: --name '%s' must be a plain file name (no '/'): the outputs go into --out", v);
                return 1;
            }
        }
        else if (!strcmp(k, "--passkey_trials")) bad = to_int(v, &a->trials) || a->trials <= 0;
        else if (!strcmp(k, "--seed")) { char* e; a->seed = strtoll(v, &e, 10); bad = *e != 0; }
        else if (!strcmp(k, "--passkey_lens")) {
            double tmp[64]; int n = parse_list(v, tmp, 64);
            bad = n <= 0;
            for (int j = 0; j < n; j++) { a->lens[j] = (int)tmp[j]; bad |= tmp[j] != (int)tmp[j] || tmp[j] < 2; }
            a->nlens = n;
        }
        else if (!strcmp(k, "--passkey_depths")) {
            int n = parse_list(v, a->depths, 64);
            bad = n <= 0;
            for (int j = 0; j < n; j++) bad |= !(a->depths[j] >= 0 && a->depths[j] <= 1);   // (NaN fails)
            a->ndepths = n;
        }
        else {
            int o = 0;
            while (o < NOVERRIDE && (strncmp(k, "--", 2) || strcmp(k + 2, ALLOW[o]))) o++;
            if (o == NOVERRIDE) {
                const char* near = strncmp(k, "--", 2) ? NULL : config_nearest(k + 2, 0, OPTIONS);
                snprintf(msg, sizeof msg, "eval: unknown option or override '%s'%s%s%s (only the RoPE keys rope_scaling, "
                         "rope_factor, rope_original_max_seq_len, rope_theta may change at evaluation; see --help)", k,
                         near ? " — did you mean '--" : "", near ? near : "", near ? "'?" : "");
                return 1;
            }
            Config probe;   // the key table checks the value
            config_defaults(&probe);
            char err[1024];
            if (config_set(&probe, ALLOW[o], v, "command line", err, sizeof err)) { snprintf(msg, sizeof msg, "eval: %s", err); return 1; }
            cur->overrides[o] = v;
        }
        if (bad) { snprintf(msg, sizeof msg, "eval: invalid value '%s' for %s (see --help)", v, k); return 1; }
        i++;
    }
    if (a->doc_lengths) {
        if (a->ns || a->passkey) { snprintf(msg, sizeof msg, "eval: --doc_lengths describes --data alone: give no --ckpt or --passkey"); return 1; }
        if (!a->data) { snprintf(msg, sizeof msg, "eval: --doc_lengths needs --data (the token shards to describe)"); return 1; }
        return 0;
    }
    if (!a->ns) { snprintf(msg, sizeof msg, "eval: no --ckpt given (a checkpoint file or a directory with 'latest')"); return 1; }
    if (!a->passkey && !a->data) { snprintf(msg, sizeof msg, "eval: no --data given (held-out token shards)"); return 1; }
    if (!a->passkey && !a->seq_len) { snprintf(msg, sizeof msg, "eval: no --seq_len given (the context length to evaluate at)"); return 1; }
    if (a->bucket && a->log_buckets) { snprintf(msg, sizeof msg, "eval: --bucket and --log_buckets exclude each other"); return 1; }
    if (!a->passkey && a->bucket > (a->stride ? (a->doc_len ? a->doc_len : 4 * a->seq_len) : a->seq_len)) {
        snprintf(msg, sizeof msg, "eval: --bucket %d is larger than the context %d", a->bucket, a->seq_len); return 1;
    }
    if (a->doc_mask && a->stride) { snprintf(msg, sizeof msg, "eval: --doc_mask (packed windows) and --stride exclude each other"); return 1; }
    if (!strcmp(a->shard, "document") && !a->doc_mask) {
        snprintf(msg, sizeof msg, "eval: --cp_shard document needs --doc_mask (it deals the tokens by the documents the mask "
                 "keeps apart)");
        return 1;
    }
    if (strcmp(a->shard, "document") && a->shard_min != -1) {
        snprintf(msg, sizeof msg, "eval: --cp_shard_min %d is read only with --cp_shard document (this evaluation: --cp_shard "
                 "%s)", a->shard_min, a->shard);
        return 1;
    }
    if (a->doc_positions >= 0 && !a->doc_mask) { snprintf(msg, sizeof msg, "eval: --doc_positions needs --doc_mask"); return 1; }
    if (a->stride && a->stride > a->seq_len) { snprintf(msg, sizeof msg, "eval: --stride %d exceeds --seq_len %d", a->stride, a->seq_len); return 1; }
    if (!a->doc_len) a->doc_len = 4 * a->seq_len;
    if (a->stride && a->doc_len < a->seq_len) { snprintf(msg, sizeof msg, "eval: --doc_len %d is shorter than --seq_len %d", a->doc_len, a->seq_len); return 1; }
    if (a->passkey && a->ns > 1) {
        snprintf(msg, sizeof msg, "eval: --passkey evaluates one series (one --ckpt, at most one --rope), not %d: run it once "
                 "per checkpoint or setting", a->ns);
        return 1;
    }
    return 0;
}

// ---- one series: a model from a checkpoint, with RoPE overrides ----------------------------------------

static void apply_rope(Config* c, const Rope* r) {
    if (r->scaling[0]) snprintf(c->rope_scaling, sizeof c->rope_scaling, "%s", r->scaling);
    if (r->factor > 0) c->rope_factor = (float)r->factor;
    if (r->orig > 0) c->rope_original_max_seq_len = (int)r->orig;
    if (r->theta > 0) c->rope_theta = (float)r->theta;
}

typedef struct { Model m; int Tl; } Net;
static int series_eod(const Args* a, const Grid* g, const Config* c, const char* ckpt, int passkey);

static DataMeta g_meta;   // the --data's meta.json (found = 0: none, --passkey, or --data_meta 0)
// rank 0, for the perplexity plot: what a token is ("byte": the data's meta.json names the byte tokenizer, or without
// one the byte tokenizer's vocab 257; else "token") and what the standard errors are over (eval_series)
static const char *g_per = "token", *g_units = "units";

// a RoPE setting as text: none | linear:F | yarn:F:L (F, L: the values used), then " theta B" when show_theta
static void rope_text(const Config* c, int show_theta, char* out, size_t n) {
    char f[32], th[32];
    config_format(c, "rope_factor", f, sizeof f);
    config_format(c, "rope_theta", th, sizeof th);
    int k;
    if (!strcmp(c->rope_scaling, "yarn")) k = snprintf(out, n, "yarn:%s:%d", f, c->rope_original_max_seq_len);
    else if (!strcmp(c->rope_scaling, "linear")) k = snprintf(out, n, "linear:%s", f);
    else k = snprintf(out, n, "none");
    if (show_theta && k >= 0 && (size_t)k < n) snprintf(out + k, n - k, " theta %s", th);
}

// the RoPE a series runs with against the one its checkpoint was trained with: their texts (theta shown in both when
// it differs), and whether a trained scaling (linear or yarn) was replaced by another scaling, factor or length
typedef struct { char rope[64], trained[64]; int replaced; } RopeUse;
static void rope_use(const Config* trained, const Config* c, RopeUse* u) {
    int th = trained->rope_theta != c->rope_theta;
    rope_text(c, th, u->rope, sizeof u->rope);
    rope_text(trained, th, u->trained, sizeof u->trained);
    char x[64], y[64];
    rope_text(c, 0, x, sizeof x);
    rope_text(trained, 0, y, sizeof y);
    u->replaced = strcmp(trained->rope_scaling, "none") && strcmp(x, y);
}

// the data description a checkpoint recorded (its training data's meta.json) against --passkey and the --data's
// meta.json; collective: a mismatch ends the job with one line. Nothing with --data_meta 0.
static void check_tokens(const Args* a, const Grid* g, const char* path, const Config* c) {
    if (!a->data_meta) return;
    static char text[1 << 16];
    char e[1200], why[600];
    int fail = 0, have = 0;
    DataMeta old;
    int rc = ckpt_read_data_meta(path, text, sizeof text, e, sizeof e);
    if (rc == 1) { snprintf(msg, sizeof msg, "eval: %s", e); fail = 1; }
    if (rc == 0) {
        if (data_meta_parse(text, "the checkpoint's data_meta", &old, e, sizeof e)) {
            snprintf(msg, sizeof msg, "eval: '%s': %s", path, e);
            fail = 1;
        } else have = 1;
    }
    if (fail) {
    } else if (have && a->passkey && strcmp(old.tokenizer, "bytes")) {
        snprintf(msg, sizeof msg, "eval: --passkey writes byte-level text (token = byte value), but checkpoint %s was trained "
                 "with tokenizer %s, whose tokens are not bytes: measure it by perplexity by position (build/eval --data) on "
                 "data made with that tokenizer (tools/prepare_hf), or give --data_meta 0 if its tokens 0..255 are bytes",
                 path, old.tokenizer);
        fail = 1;
    } else if (have && g_meta.found && !data_meta_same_tokens(&old, &g_meta, why, sizeof why)) {
        char both[1100] = "";   // name both tokenizers, also when they agree and vocab_size or eod_id differ
        if (strncmp(why, "tokenizer ", 10)) snprintf(both, sizeof both, "tokenizer %s for both, but ", old.tokenizer);
        snprintf(msg, sizeof msg, "eval: checkpoint %s was trained on other tokens than data '%s' (%s%s: the checkpoint's vs "
                 "the data's, from %s): evaluate on data made with the checkpoint's tokenizer, or give --data_meta 0 if you "
                 "are sure", path, a->data, both, why, g_meta.path);
        fail = 1;
    } else if (!have && g_meta.found && g_meta.vocab_size > c->vocab_size) {
        snprintf(msg, sizeof msg, "eval: data '%s' was made with tokenizer %s of vocabulary %d (%s), larger than checkpoint "
                 "%s's vocab_size %d: evaluate on data made with the checkpoint's tokenizer, or give --data_meta 0 if you "
                 "are sure", a->data, g_meta.tokenizer, g_meta.vocab_size, g_meta.path, path, c->vocab_size);
        fail = 1;
    }
    if (have) data_meta_free(&old);
    grid_check(g->world_g, fail, msg);
}

// build the model of series sa for contexts of T tokens and load the checkpoint's parameters (collective); the
// resolved checkpoint file into path (2048), the config run into c_out, the RoPE used against the trained one into u
static void net_open(Net* n, const SeriesArg* sa, const Args* a, const Grid* g, int T, Config* c_out, RopeUse* u,
                     char* path) {
    const Group* world = g->world_g;
    Config c;
    int fail;
    path[0] = 0;
    for (int tries = 0;; tries++) {   // once more when a live run's keep_last deleted the checkpoint meanwhile
        fail = ckpt_resolve(sa->ckpt, sa->ckpt, path, 2048, msg, sizeof msg) || ckpt_read_config(path, &c, msg, sizeof msg);
        if (tries || !ckpt_retry_vanished(world, fail, sa->ckpt, path)) break;
    }
    grid_check(world, fail, msg);
    check_tokens(a, g, path, &c);
    Config trained = c;
    for (int o = 0; o < NOVERRIDE; o++)   // values were checked by the parser
        if (sa->overrides[o]) config_set(&c, ALLOW[o], sa->overrides[o], "command line", msg, sizeof msg);
    apply_rope(&c, &sa->rope);
    rope_use(&trained, &c, u);
    if (a->doc_mask) {   // packed windows, attention inside documents (RoPE restarts as trained, unless given)
        c.eod = series_eod(a, g, &c, path, 0);
        c.doc_mask = 1;
        if (a->doc_positions >= 0) c.doc_positions = a->doc_positions;
    } else {
        c.doc_mask = 0; c.doc_positions = 0;
    }
    c.seq_len = T;
    if (c.max_seq_len < T) c.max_seq_len = T;
    c.tp = a->tp; c.cp = a->cp; snprintf(c.cp_layout, sizeof c.cp_layout, "%s", a->layout);
    snprintf(c.cp_shard, sizeof c.cp_shard, "%s", a->shard); c.cp_shard_min = a->shard_min;
    snprintf(c.cp_comm, sizeof c.cp_comm, "ring"); c.cp_a2a = 0; c.tp_sp = 0;   // eval's own layout: the ring
    c.micro_batch = 1; c.batch_size = g->dp; c.zero = 0; c.mlp_tile = 0; snprintf(c.offload, sizeof c.offload, "none");
    char err[1024];
    fail = config_validate(&c, err, sizeof err);
    if (fail) snprintf(msg, sizeof msg, "eval: %s (checkpoint %s, context %d)", err, path, T);
    grid_check(world, fail, msg);
    memset(n, 0, sizeof *n);
    n->Tl = T / g->cp;
    ModelGroups mg = { g->tp > 1 ? g->tp_g : NULL, g->cp_g, NULL, NULL, g->cp_g };
    model_build(&n->m, &c, 1, T, &mg);
    TrainState ts;
    for (int tries = 0;; tries++) {   // (the same: a newer checkpoint of the same run)
        fail = ckpt_load(path, &n->m, NULL, g, &ts, ALLOW, msg, sizeof msg, NULL, 0);
        if (tries || !ckpt_retry_vanished(world, fail, sa->ckpt, path)) break;
        grid_check(world, ckpt_resolve(sa->ckpt, sa->ckpt, path, 2048, msg, sizeof msg), msg);
    }
    grid_check(world, fail, msg);
    *c_out = c;
}

static void net_close(Net* n) { model_free(&n->m); }

// run one context window: win[0..T] tokens (T+1), score[t] = whether target t counts; adds this rank's
// scored losses (and greedy hits) into sum/cnt/hit at index base + t (book: base + book[t] instead, or NULL)
static void run_window(Net* n, const int32_t* win, const unsigned char* score, double* sum, double* cnt,
                       double* hit, long long base, const int* book) {
    model_set_windows(&n->m, win, 0, score);
    model_forward(&n->m, 0.0f, NULL);
    const float* l = model_token_losses(&n->m);
    const float* h = model_token_hits(&n->m);
    const int *pos = model_positions(&n->m), *tgt = model_targets(&n->m);
    for (int i = 0; i < n->Tl; i++) {
        if (tgt[i] < 0) continue;
        long long at = base + (book ? book[pos[i]] : pos[i]);
        sum[at] += l[i];
        cnt[at] += 1;
        if (hit) hit[at] += h[i];
    }
}

// ---- documents ---------------------------------------------------------------------------------------
typedef struct { long long start, len; } Doc;

// documents of at least `need` tokens (each starting at its end-of-document token), at most `max` (0: all)
static int find_docs(Loader* ld, int eod, long long need, int max, Doc** out, long long* longest) {
    int n = 0, cap = 64;
    Doc* d = malloc(cap * sizeof(Doc));
    *longest = 0;
    if (eod < 0) {   // no document structure: consecutive windows of the stream
        for (long long s = 0; s + need <= ld->n_tokens && (!max || n < max); s += need - 1) {
            if (n == cap) d = realloc(d, (cap *= 2) * sizeof(Doc));
            d[n].start = s; d[n].len = need; n++;
        }
        *longest = ld->n_tokens;
        *out = d;
        return n;
    }
    const long long CH = 1 << 20;
    int32_t* buf = malloc(CH * sizeof(int32_t));
    long long cur = -1;
    for (long long s = 0; s < ld->n_tokens; s += CH) {
        long long m = ld->n_tokens - s < CH ? ld->n_tokens - s : CH;
        if (loader_read(ld, s, m, buf)) { free(buf); free(d); return -1; }
        for (long long i = 0; i <= m; i++) {
            int boundary = i == m ? (s + m == ld->n_tokens) : buf[i] == eod;
            if (!boundary) continue;
            long long at = s + i;
            if (cur >= 0) {
                long long len = at - cur;
                if (len > *longest) *longest = len;
                if (len >= need && (!max || n < max)) {
                    if (n == cap) d = realloc(d, (cap *= 2) * sizeof(Doc));
                    d[n].start = cur; d[n].len = len; n++;
                }
            }
            cur = i == m ? -1 : at;
        }
    }
    free(buf);
    *out = d;
    return n;
}

// progress lines on stderr (rank 0): "WHAT: DONE/TOTAL, ELAPSED s elapsed, ETA S s" after each unit on a terminal
// (rewritten in place), else at every quarter, at the end, and whenever PROGRESS_S seconds passed since the last
// line; inside a unit (one long window takes minutes at 100K tokens) a line after a layer of its forward pass when
// PROGRESS_S passed: "WHAT: DONE/TOTAL, in DONE+1: [window W/NW, ]layer L/NL, ..."; the ETA from the fraction done
#define PROGRESS_S 10.0
typedef struct {
    const char* what;
    int rank, done, total, win, nwin;   // units done of total; inside the next: window win of nwin (sliding windows)
    double t0, t_line;                  // progress clock: the start, the last line
} Progress;

static void progress_start(Progress* p, int rank, const char* what, int total) {
    *p = (Progress){ .what = what, .rank = rank, .total = total, .nwin = 1 };
    if (!rank) p->t0 = p->t_line = progress_now();
}

static void progress_line(Progress* p, double now, double frac, const char* inside, int tty, int end) {
    double el = now - p->t0, eta = frac > 0 ? el / frac * (1 - frac) : 0;
    fprintf(stderr, "%s%s: %d/%d%s, %.1f s elapsed, ETA %.1f s%s", tty ? "\r" : "", p->what, p->done, p->total, inside,
            el, eta, end ? "\n" : "");
    p->t_line = now;
}

static void progress(Progress* p, int done) {
    p->done = done;
    if (p->rank) return;
    double now = progress_now();
    int tty = isatty(2), total = p->total;
    if (tty || done == total || (total >= 4 && done % (total / 4 ? total / 4 : 1) == 0) || now - p->t_line >= PROGRESS_S)
        progress_line(p, now, (double)done / total, "", tty, !tty || done == total);
}

// Model.layer_done: inside a unit, after a layer of the forward pass
static void progress_layer(void* ctx, int l, int nl) {
    Progress* p = ctx;
    if (p->rank) return;
    double now = progress_now();
    if (now - p->t_line < PROGRESS_S) return;
    char inside[96], w[48] = "";
    if (p->nwin > 1) snprintf(w, sizeof w, "window %d/%d, ", p->win + 1, p->nwin);
    snprintf(inside, sizeof inside, ", in %d: %slayer %d/%d", p->done + 1, w, l, nl);
    int tty = isatty(2);
    progress_line(p, now, (p->done + (p->win + (double)l / nl) / p->nwin) / p->total, inside, tty, !tty);
}

static int out_file(const Args* a, char* path, size_t n, const char* suffix) {
    snprintf(path, n, "%s/%s%s", a->out, a->name, suffix);
    struct stat st;
    if (!a->force && stat(path, &st) == 0) { snprintf(msg, sizeof msg, "eval: '%s' exists; pass --force to replace it", path); return 1; }
    return 0;
}


// the trained config of a checkpoint argument (file or directory), or 1 when it cannot be read
static int ckpt_read_config_quiet(const char* ckpt, Config* c) {
    char path[2048], err[512];
    return ckpt_resolve(ckpt, ckpt, path, sizeof path, err, sizeof err) || ckpt_read_config(path, c, err, sizeof err);
}

// a series' legend label: its --label, else the checkpoint's file name, with the RoPE when one was given (the --rope
// as written, or the setting the --rope_* keys made)
static void series_label(const SeriesArg* sa, const RopeUse* u, char* out, size_t n) {
    if (sa->label) { snprintf(out, n, "%s", sa->label); return; }
    const char* base = strrchr(sa->ckpt, '/');
    base = base && base[1] ? base + 1 : sa->ckpt;
    int keys = 0;
    for (int o = 0; o < NOVERRIDE; o++) keys |= sa->overrides[o] != NULL;
    if (sa->rope.text[0] && !keys) snprintf(out, n, "%s, rope %s", base, sa->rope.text);
    else if (sa->rope.text[0] || keys) snprintf(out, n, "%s, rope %s", base, u->rope);
    else snprintf(out, n, "%s", base);
}

// one WARNING line (stderr, rank 0) when a series runs with another scaling than its checkpoint was trained with
static void warn_rope(const Grid* g, const char* what, const RopeUse* u, const char* path) {
    if (g->rank == 0 && u->replaced)
        fprintf(stderr, "WARNING: %s: evaluated with RoPE %s, not the %s that checkpoint %s was trained with (an override: "
                "the series runs as trained unless a --rope or --rope_* key follows its --ckpt)\n", what, u->rope, u->trained, path);
}

// ---- perplexity by position ---------------------------------------------------------------------------
// the documents of a series' data long enough to score (collective: a failure ends the job with one line)
static int series_docs(const Args* a, const Grid* g, Loader* ld, int eod, long long need, Doc** docs) {
    long long longest;
    int nd = find_docs(ld, eod, need, a->docs, docs, &longest);
    if (nd < 0) snprintf(msg, sizeof msg, "eval: %s", ld->err);
    else if (nd == 0)
        snprintf(msg, sizeof msg, "eval: data '%s' has no %s of %lld tokens (the longest has %lld, split at eod %d); use a "
                 "shorter --seq_len%s%s", a->data, eod >= 0 ? "document" : "window", need, longest, eod,
                 a->stride ? " or --doc_len" : "", eod >= 0 && longest == 0 ? ", or check --eod: no token of the data "
                 "follows it (data of another tokenizer?)" : "");
    grid_check(g->world_g, nd <= 0, msg);
    static int noted_nd = -1, noted_eod;   // said once for a data set's count (several series share the data)
    if (a->docs && nd < a->docs && g->rank == 0 && (nd != noted_nd || eod != noted_eod)) {
        printf("note: data '%s' has only %d %s %lld tokens, fewer than --docs %d: the results cover those %d\n",
               a->data, nd, eod >= 0 ? "documents of at least" : a->stride ? "stretches of" : "windows of", need, a->docs, nd);
        noted_nd = nd; noted_eod = eod;
    }
    return nd;
}

// --doc_mask: consecutive windows of seq_len + 1 tokens of the stream (window i starts at i * seq_len, as training's
// sequences), at most --docs of them (0: all); collective: no window ends the job with one line
static int packed_windows(const Args* a, const Grid* g, Loader* ld, Doc** docs) {
    long long n = (ld->n_tokens - 1) / a->seq_len;
    if (a->docs && n > a->docs) n = a->docs;
    if (n <= 0)
        snprintf(msg, sizeof msg, "eval: data '%s' has %lld tokens, fewer than one window of %d + 1", a->data,
                 (long long)ld->n_tokens, a->seq_len);
    grid_check(g->world_g, n <= 0, msg);
    static int noted;
    if (a->docs && n < a->docs && g->rank == 0 && !noted++)
        printf("note: data '%s' has only %lld packed windows of %d + 1 tokens, fewer than --docs %d: the results cover "
               "those %lld\n", a->data, n, a->seq_len, a->docs, n);
    *docs = malloc((size_t)n * sizeof(Doc));
    for (long long i = 0; i < n; i++) { (*docs)[i].start = i * a->seq_len; (*docs)[i].len = a->seq_len + 1; }
    return (int)n;
}

// --eod ID against the data's meta.json: 1 + msg when it contradicts meta.json's eod_id (or is no token of its
// vocabulary)
static int eod_contradicts_meta(const Args* a) {
    if (a->eod < 0 || !g_meta.found) return 0;
    if (g_meta.eod_id >= 0 && a->eod != g_meta.eod_id)
        snprintf(msg, sizeof msg, "eval: --eod %d (command line) contradicts the data's end-of-document id %d (%s): drop --eod "
                 "to take the data's value, or give --data_meta 0 to ignore meta.json", a->eod, g_meta.eod_id, g_meta.path);
    else if (a->eod >= g_meta.vocab_size)
        snprintf(msg, sizeof msg, "eval: --eod %d is not a token of the data (vocab_size %d, %s)", a->eod, g_meta.vocab_size,
                 g_meta.path);
    else return 0;
    return 1;
}

// the end-of-document (separator) token of a series: --eod ID, else the byte tokenizer's 256 for vocab 257, else
// none (-1: consecutive windows; perplexity notes it once). Passkey documents are byte-level text and need a
// separator. A separator outside the checkpoint's vocabulary ends the job with one line.
static int series_eod(const Args* a, const Grid* g, const Config* c, const char* ckpt, int passkey) {
    static int noted, noted_meta;
    int meta_eod = !passkey && g_meta.found ? g_meta.eod_id : -1;   // the data's meta.json, then the checkpoint's eod key
    int eod = a->eod != -2 ? a->eod : meta_eod >= 0 ? meta_eod : config_eod(c), fail = 0;
    if (eod >= c->vocab_size) {
        if (a->eod != -2 || meta_eod < 0)
            snprintf(msg, sizeof msg, "eval: --eod %d is not a token of checkpoint %s (vocab_size %d)", eod, ckpt, c->vocab_size);
        else
            snprintf(msg, sizeof msg, "eval: the data's end-of-document id %d (%s) is not a token of checkpoint %s (vocab_size "
                     "%d): evaluate on data made with the checkpoint's tokenizer", eod, g_meta.path, ckpt, c->vocab_size);
        fail = 1;
    } else if (!passkey && eod_contradicts_meta(a)) {
        fail = 1;
    } else if (passkey && a->eod == -1) {
        snprintf(msg, sizeof msg, "eval: --passkey starts each document with a separator token, and --eod -1 means none: "
                 "drop --eod (the byte tokenizer's 256) or give the separator's id");
        fail = 1;
    } else if (passkey && (eod < 0 || c->vocab_size < 127)) {
        snprintf(msg, sizeof msg, "eval: --passkey writes byte-level text (token = byte value) after a separator token; "
                 "checkpoint %s has vocab_size %d, not the byte tokenizer's 257: give --eod ID (its separator) if its "
                 "tokens 0..255 are bytes", ckpt, c->vocab_size);
        fail = 1;
    } else if (!passkey && eod < 0 && a->eod == -2 && g->rank == 0 && !noted++)
        printf("note: checkpoint %s has vocab_size %d (not the byte tokenizer's 257) and no --eod was given: the data "
               "is scored as consecutive windows, not documents; --eod ID (the separator tools/prepare_hf printed) "
               "splits documents\n", ckpt, c->vocab_size);
    grid_check(g->world_g, fail, msg);
    if (!passkey && g_meta.found && g->rank == 0 && !noted_meta++) {
        char eods[96];
        if (g_meta.eod_id < 0) snprintf(eods, sizeof eods, "no eod");
        else snprintf(eods, sizeof eods, "eod %d", g_meta.eod_id);
        printf("data: %s: tokenizer %s, vocab_size %d, %s (%s)\n", g_meta.path, g_meta.tokenizer, g_meta.vocab_size, eods,
               a->eod == -1 ? "--eod -1: consecutive windows, documents not split" : a->eod >= 0 ? "eod as given"
               : meta_eod >= 0 ? "eod taken" : "the checkpoint's eod");
    }
    return eod;
}

// score one document: its first T targets, or sliding windows over its first doc_len tokens (model
// positions are window positions; losses are booked at document positions). 0, or 1 on a read error.
static int score_doc(const Args* a, Net* n, Loader* ld, long long start, int32_t* win, unsigned char* score,
                     double* sum, double* cnt, int eod, int* book, Progress* pr) {
    int T = a->seq_len, fail = 0;
    if (a->doc_mask) {   // a packed window: each target booked at its position in its document
        fail |= loader_read(ld, start, T + 1, win);
        memset(score, 1, T);
        for (int t = 0, s = 0; t < T; t++) { if (win[t] == eod) s = t; book[t] = t - s; }
        run_window(n, win, score, sum, cnt, NULL, 0, book);
        return fail;
    }
    if (!a->stride) {
        fail |= loader_read(ld, start, T + 1, win);
        memset(score, 1, T);
        run_window(n, win, score, sum, cnt, NULL, 0, NULL);
        return fail;
    }
    pr->nwin = (int)((a->doc_len - T) / a->stride + 1);
    for (long long w = 0; w + T <= a->doc_len; w += a->stride) {
        pr->win = (int)(w / a->stride);
        fail |= loader_read(ld, start + w, T + 1, win);
        for (int t = 0; t < T; t++) score[t] = w == 0 || t >= T - a->stride;
        run_window(n, win, score, sum, cnt, NULL, w, NULL);
    }
    return fail;
}

// the note for a series evaluated with plain RoPE past the trained context: where perplexity usually rises (the
// trained RoPE's own range: its original context when it was trained with scaling) and the --rope to compare, in
// that range's units (a model trained with yarn:4:1024 at 2048 is compared with yarn:4:1024 and yarn:8:1024 at 8192)
static void rope_hint(int T, const Config* saved) {
    int scaled = strcmp(saved->rope_scaling, "none") != 0;
    int base = scaled ? saved->rope_original_max_seq_len : saved->seq_len, need = (T + base - 1) / base;
    if (!scaled) {
        printf("note: context %d exceeds the trained %d with plain RoPE; perplexity usually rises past %d "
               "(compare --rope yarn:%d:%d)\n", T, saved->seq_len, base, need, base);
        return;
    }
    char f[32], as[96] = "", was[64], more[64];
    config_format(saved, "rope_factor", f, sizeof f);
    int yarn = !strcmp(saved->rope_scaling, "yarn"), trained = (int)(saved->rope_factor + 0.5f);
    // the --rope spellings: yarn:F:L, linear:F
    if (yarn) { snprintf(was, sizeof was, "yarn:%s:%d", f, base); snprintf(more, sizeof more, "yarn:%d:%d", need, base); }
    else { snprintf(was, sizeof was, "%s:%s", saved->rope_scaling, f); snprintf(more, sizeof more, "%s:%d", saved->rope_scaling, need); }
    if (need > trained) snprintf(as, sizeof as, ", or %s to cover %d", more, T);
    printf("note: context %d exceeds the trained %d with plain RoPE, and the model was trained with %s x%s over %d "
           "tokens: perplexity usually rises past %d (compare --rope %s as trained%s)\n", T, saved->seq_len,
           saved->rope_scaling, f, base, base, was, as);
}

// a prepared directory as --data without a validation split: said once (its training split is scored)
static void note_split(const Grid* g, const Args* a, const Loader* ld) {
    static int noted;
    if (g->rank == 0 && !noted++ && !strcmp(ld->split, "train"))
        printf("note: '%s' holds no val_*.bin (prepared with --val-frac 0?): its train_*.bin are read, the training data\n", a->data);
}

// one series: per-position NLL sums and counts over the documents (summed over every rank), in buckets
static void eval_series(const Args* a, const Grid* g, int s, const Buckets* b, Series* se, double* sum, double* cnt) {
    int T = a->seq_len, ns = a->ns;
    long long span = a->stride ? a->doc_len : T;          // positions reported
    const SeriesArg* sa = &a->ser[s];
    Config c;
    Net n;
    RopeUse u;
    char ckpt[2048], label[128], what[256];
    net_open(&n, sa, a, g, T, &c, &u, ckpt);
    series_label(sa, &u, label, sizeof label);
    snprintf(what, sizeof what, "series %d (%s)", s + 1, label);
    warn_rope(g, what, &u, ckpt);
    Loader ld;
    int fail = loader_open_split(&ld, a->data, "val|train", 1, c.vocab_size, 0, 0);
    if (fail) snprintf(msg, sizeof msg, "eval: %s", ld.err);
    grid_check(g->world_g, fail, msg);
    note_split(g, a, &ld);
    int eod = a->doc_mask ? c.eod : series_eod(a, g, &c, ckpt, 0);
    Doc* docs = NULL;
    int nd = a->doc_mask ? packed_windows(a, g, &ld, &docs) : series_docs(a, g, &ld, eod, span + 1, &docs);
    memset(sum, 0, span * sizeof(double)); memset(cnt, 0, span * sizeof(double));
    int32_t* win = malloc((T + 1) * sizeof(int32_t));
    unsigned char* score = malloc(T);
    int* book = malloc(T * sizeof(int));
    // per unit (document, or packed window) and bucket: NLL sums and token counts, for the standard errors
    int nb = b->n;
    double *usum = calloc((size_t)nd * nb, sizeof(double)), *ucnt = calloc((size_t)nd * nb, sizeof(double));
    double *dsum = malloc(span * sizeof(double)), *dcnt = malloc(span * sizeof(double));
    snprintf(what, sizeof what, "eval series %d/%d", s + 1, ns);
    Progress pr;   // this series' own clock: its elapsed time and its rate give its ETA
    progress_start(&pr, g->rank, what, nd);
    n.m.layer_done = progress_layer;
    n.m.layer_done_ctx = &pr;
    for (int j = 0; j < nd; j++) {
        if (j % g->dp == g->dp_rank) {   // documents are dealt round-robin to the data-parallel replicas
            memset(dsum, 0, span * sizeof(double)); memset(dcnt, 0, span * sizeof(double));
            fail |= score_doc(a, &n, &ld, docs[j].start, win, score, dsum, dcnt, eod, book, &pr);
            for (long long p = 0; p < span; p++) {
                if (!dcnt[p]) continue;
                sum[p] += dsum[p]; cnt[p] += dcnt[p];
                int k = bucket_of(b, p);
                if (k >= 0) { usum[(size_t)j * nb + k] += dsum[p]; ucnt[(size_t)j * nb + k] += dcnt[p]; }
            }
        }
        progress(&pr, j + 1);
    }
    if (fail) snprintf(msg, sizeof msg, "eval: %s", ld.err);
    grid_check(g->world_g, fail, msg);
    ctl_sum_f64(g->dpcp_g, sum, span);
    ctl_sum_f64(g->dpcp_g, cnt, span);
    ctl_sum_f64(g->dpcp_g, usum, (size_t)nd * nb);
    ctl_sum_f64(g->dpcp_g, ucnt, (size_t)nd * nb);
    series_init(se, b, label);
    snprintf(se->rope, sizeof se->rope, "%s", u.rope);
    snprintf(se->rope_trained, sizeof se->rope_trained, "%s", u.trained);
    for (long long p = 0; p < span; p++) series_add(se, b, p, sum[p], (long long)cnt[p]);
    for (int j = 0; j < nd; j++)
        for (int k = 0; k < nb; k++) series_add_unit(se, k, usum[(size_t)j * nb + k], ucnt[(size_t)j * nb + k]);
    free(usum); free(ucnt); free(dsum); free(dcnt); free(book);
    Config saved;
    if (g->rank == 0) {
        // the units scored: packed windows; documents; or, without an end-of-document token, consecutive windows
        // of the stream (with --stride: consecutive stretches of doc_len tokens, each scored by sliding windows)
        const char* unit = a->doc_mask ? "windows" : eod >= 0 ? "documents" : a->stride ? "stretches" : "windows";
        const char* how = a->doc_mask ? (c.doc_positions ? "packed windows, document-masked, RoPE positions restarted per document"
                                                         : "packed windows, document-masked")
                        : eod >= 0 ? (a->stride ? "sliding windows" : "first tokens of each document")
                        : a->stride ? "sliding windows over consecutive stretches of the stream; no end-of-document token"
                                    : "consecutive windows of the stream; no end-of-document token";
        char rope[160];
        report_rope_text(se->rope, se->rope_trained, rope, sizeof rope);
        printf("series %d: %s [RoPE %s] — %d %s at context %d (%s)\n", s + 1, se->label, rope, nd, unit, T, how);
        int have = !ckpt_read_config_quiet(ckpt, &saved);
        if (have && T > saved.seq_len && !strcmp(c.rope_scaling, "none")) rope_hint(T, &saved);
        if (have) se->trained_len = saved.seq_len;   // (the plot marks it)
        g_units = unit;
        g_per = (g_meta.found ? !strcmp(g_meta.tokenizer, "bytes") : c.vocab_size == 257) ? "byte" : "token";
    }
    free(win); free(score); free(docs);
    loader_close(&ld);
    net_close(&n);
}

static void eval_ppl(const Args* a, const Grid* g) {
    const Group* world = g->world_g;
    int rank0 = g->rank == 0, T = a->seq_len;
    long long span = a->stride ? a->doc_len : T;          // positions reported
    char csv[1200], svg[1200];
    int fail = 0;
    for (int i = 1; i < a->ns && rank0 && !fail; i++) {   // one table and plot: the series must read the same text
        Config c0, ci;
        if (ckpt_read_config_quiet(a->ser[0].ckpt, &c0) || ckpt_read_config_quiet(a->ser[i].ckpt, &ci)) break;   // (said later)
        if (c0.vocab_size != ci.vocab_size) {
            snprintf(msg, sizeof msg, "eval: checkpoints %s (vocab_size %d) and %s (vocab_size %d) have different vocabularies: "
                     "the same data is different text to them, so they cannot share one table and plot; evaluate each on "
                     "data of its own tokenizer, in separate runs", a->ser[0].ckpt, c0.vocab_size, a->ser[i].ckpt,
                     ci.vocab_size);
            fail = 1;
        }
    }
    grid_check(world, fail, msg);
    if (rank0) fail = make_dirs("eval", a->out, msg, sizeof msg) || out_file(a, csv, sizeof csv, ".csv") || out_file(a, svg, sizeof svg, ".svg");
    grid_check(world, fail, msg);
    Buckets b;
    fail = a->log_buckets ? buckets_log(&b, span) : buckets_fixed(&b, span, a->bucket ? a->bucket : (span >= 16 ? span / 16 : 1));
    if (fail) snprintf(msg, sizeof msg, "eval: cannot make buckets for %lld positions", span);
    grid_check(world, fail, msg);
    int ns = a->ns;
    Series* series = calloc(ns, sizeof(Series));
    double* sum = calloc(span, sizeof(double));
    double* cnt = calloc(span, sizeof(double));
    for (int s = 0; s < ns; s++) eval_series(a, g, s, &b, &series[s], sum, cnt);
    if (rank0) {
        report_table(stdout, &b, series, ns);
        fail = report_csv(csv, &b, series, ns, msg, sizeof msg);
        char title[256];
        snprintf(title, sizeof title, "perplexity by position (context %d%s)", T,
                 a->doc_mask ? ", packed windows, document-masked" : a->stride ? ", sliding windows" : "");
        PplPlot po = { title, a->log_buckets, g_per, g_units };
        if (!fail) fail = report_svg_ppl(svg, &b, series, ns, &po, msg, sizeof msg);
        if (!fail) printf("wrote %s and %s\n", csv, svg);
    }
    grid_check(world, fail, msg);
    for (int s = 0; s < ns; s++) series_free(&series[s]);
    free(series); free(sum); free(cnt);
    buckets_free(&b);
}

// ---- passkey retrieval --------------------------------------------------------------------------------
static void eval_passkey(const Args* a, const Grid* g) {
    const Group* world = g->world_g;
    int rank0 = g->rank == 0, fail = 0;
    char csv[1200], svg[1200];
    if (rank0) fail = make_dirs("eval", a->out, msg, sizeof msg) || out_file(a, csv, sizeof csv, "_passkey.csv") || out_file(a, svg, sizeof svg, "_passkey.svg");
    grid_check(world, fail, msg);
    double* acc = calloc(a->nlens * a->ndepths, sizeof(double));
    double* digits = calloc(a->nlens * a->ndepths, sizeof(double));
    int total = a->nlens * a->ndepths * a->trials, done = 0;
    Progress pr;
    progress_start(&pr, g->rank, "passkey", total);
    for (int li = 0; li < a->nlens; li++) {
        int T = a->lens[li];
        Config c;
        Net n;
        RopeUse u;
        char ckpt[2048];
        net_open(&n, &a->ser[0], a, g, T, &c, &u, ckpt);
        n.m.want_hits = 1;
        n.m.layer_done = progress_layer;
        n.m.layer_done_ctx = &pr;
        int sep = series_eod(a, g, &c, ckpt, 1);   // token 0 of every passkey document
        if (li == 0) {
            warn_rope(g, "passkey", &u, ckpt);
            char rope[160];
            report_rope_text(u.rope, u.trained, rope, sizeof rope);
            if (rank0) printf("passkey: %s, RoPE %s\n", ckpt, rope);
        }
        int32_t* doc = malloc((T + 1) * sizeof(int32_t));
        int* tokens = malloc((T + 1) * sizeof(int));
        unsigned char* score = calloc(T, 1);
        double *sum = calloc(T, sizeof(double)), *cnt = calloc(T, sizeof(double)), *hit = calloc(T, sizeof(double));
        for (int di = 0; di < a->ndepths; di++) {
            int correct = 0, right = 0;
            for (int t = 0; t < a->trials; t++) {
                char key[PASSKEY_DIGITS + 1];
                int needle;
                uint64_t seed = (uint64_t)a->seed * 1000003ULL + (uint64_t)li * 7919ULL + (uint64_t)di * 104729ULL + t;
                fail = passkey_make(seed, T + 1, a->depths[di], tokens, key, &needle);
                tokens[0] = sep;
                if (fail) snprintf(msg, sizeof msg, "eval: passkey length %d is too short for the needle and question", T);
                grid_check(world, fail, msg);
                for (int i = 0; i <= T; i++) doc[i] = tokens[i];
                memset(score, 0, T);
                for (int i = T - PASSKEY_DIGITS; i < T; i++) score[i] = 1;   // the answer digits
                memset(sum, 0, T * sizeof(double)); memset(cnt, 0, T * sizeof(double)); memset(hit, 0, T * sizeof(double));
                run_window(&n, doc, score, sum, cnt, hit, 0, NULL);
                ctl_sum_f64(g->cp_g, hit, T);
                int all = 1;
                for (int i = T - PASSKEY_DIGITS; i < T; i++) { all &= hit[i] > 0.5; right += hit[i] > 0.5; }
                correct += all;
                progress(&pr, ++done);
            }
            acc[li * a->ndepths + di] = (double)correct / a->trials;
            digits[li * a->ndepths + di] = (double)right / (a->trials * PASSKEY_DIGITS);
        }
        free(doc); free(tokens); free(score); free(sum); free(cnt); free(hit);
        net_close(&n);
    }
    if (rank0) {
        PasskeyGrid pg = { a->nlens, a->ndepths, a->lens, a->depths, acc, digits };
        report_passkey_table(stdout, &pg);
        fail = report_passkey_csv(csv, &pg, msg, sizeof msg);
        if (!fail) fail = report_svg_heatmap(svg, &pg, "passkey retrieval accuracy", msg, sizeof msg);
        if (!fail) printf("wrote %s and %s\n", csv, svg);
    }
    grid_check(world, fail, msg);
    free(acc); free(digits);
}

// --doc_lengths: rank 0 scans the data's documents (at the eod of --eod, meta.json or the byte tokenizer's 256)
static void eval_doc_lengths(const Args* a, const Grid* g) {
    int fail = 0, eod = a->eod >= 0 ? a->eod : g_meta.found && g_meta.eod_id >= 0 ? g_meta.eod_id : 256;
    int none = a->eod == -1;
    if (none)
        snprintf(msg, sizeof msg, "eval: --doc_lengths splits the data at its end-of-document token, and --eod -1 means "
                 "none: drop --eod (the data's meta.json eod_id, else the byte tokenizer's 256) or give the separator's id");
    grid_check(g->world_g, none || eod_contradicts_meta(a), msg);
    if (g->rank == 0) {
        Loader ld;
        int vocab = g_meta.found && g_meta.vocab_size > 0 ? g_meta.vocab_size : 1 << 30;
        char csv[1200], svg[1200], title[1100], e[1300] = "";
        int64_t* lens = NULL, n = 0;
        fail = loader_open_split(&ld, a->data, "val|train", 1, vocab, 0, 0);
        if (fail) snprintf(msg, sizeof msg, "eval: %s", ld.err);
        else {
            if (pack_doc_lengths(ld.n_tokens, eod, loader_read_fn, &ld, &lens, &n, e, sizeof e))
                { snprintf(msg, sizeof msg, "eval: %s", ld.err[0] ? ld.err : e); fail = 1; }
            else if (n <= 1)
                printf("WARNING: the end-of-document token %d occurs nowhere inside '%s': the data is one document of all "
                       "its tokens; check --eod\n", eod, a->data);
            loader_close(&ld);
        }
        if (!fail) fail = make_dirs("eval", a->out, msg, sizeof msg) || out_file(a, csv, sizeof csv, "_doclen.csv") ||
                          out_file(a, svg, sizeof svg, "_doclen.svg");
        if (!fail) {
            snprintf(title, sizeof title, "document lengths: %s (eod %d)", a->data, eod);
            fail = doclen_report(stdout, lens, n, a->seq_len, title, csv, svg, e, sizeof e);
            if (fail) snprintf(msg, sizeof msg, "eval: %s", e);
            else printf("wrote %s and %s\n", csv, svg);
        }
        free(lens);
        fflush(stdout);
    }
    grid_check(g->world_g, fail, msg);
}

int main(int argc, char** argv) {
    stdout_lines();   // each line appears when printed, also into a file or pipe
    grid_stop_on_signals("eval");
    grid_mpi_init(&argc, &argv);
    const Group* world = group_world();
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { if (!group_rank(world)) usage(stdout); grid_exit(0); }
    Args a;
    int fail = parse_args(argc, argv, &a);
    if (!fail) comm_set_timeout(a.timeout_s);   // (every rank parses the same options: the first wait has it too)
    grid_check(world, fail, msg);
    fail = comm_set_transport(a.comm, msg, sizeof msg);
    grid_check(world, fail, msg);
    Grid g;
    fail = grid_build(&g, a.tp, a.cp, 1, msg, sizeof msg);
    grid_check(world, fail, msg);
    fail = be_init(g.local_rank, msg, sizeof msg);
    grid_check(world, fail, msg);
    ckpt_init();
    if (!a.passkey && a.data_meta) {   // the data's description: the default --eod, the tokens checkpoints must match
        char e[1500];
        fail = data_meta_read(a.data, &g_meta, e, sizeof e);
        if (fail) snprintf(msg, sizeof msg, "eval: --data: %s", e);
        grid_check(world, fail, msg);
    }
    if (a.doc_lengths) { eval_doc_lengths(&a, &g); grid_exit(0); }
    if (!a.passkey) {
        int parts = strcmp(a.layout, "zigzag") == 0 ? 2 * a.cp : a.cp;
        if (a.seq_len % parts) {
            snprintf(msg, sizeof msg, "eval: --seq_len %d is not divisible by %d (cp %d, %s layout)", a.seq_len, parts, a.cp, a.layout);
            grid_check(world, 1, msg);
        }
        eval_ppl(&a, &g);
    } else {
        for (int i = 0; i < a.nlens; i++)
            if (a.lens[i] % (strcmp(a.layout, "zigzag") == 0 ? 2 * a.cp : a.cp)) {
                snprintf(msg, sizeof msg, "eval: passkey length %d is not divisible by 2 * cp", a.lens[i]);
                grid_check(world, 1, msg);
            }
        eval_passkey(&a, &g);
    }
    grid_exit(0);
}
