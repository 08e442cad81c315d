// train.c — build/train: the training driver.
//   [mpirun -np WORLD] build/train -c CONFIG [--key value ...] [--force]
// One optimizer step = batch_size sequences (global), split over dp replicas, run as micro-batches of
// micro_batch sequences with gradient accumulation; each sequence is split over the cp ranks of a ring.
// The loss is the mean over every target token of the step.
#include "backend/backend.h"
#include "checkpoint/ckpt.h"
#include "comm/grid.h"
#include "common/files.h"
#include "common/rundir.h"
#include "common/tbevents.h"
#include "common/util.h"
#include "data/meta.h"
#include "data/tokenizer.h"
#include "data/shards.h"
#include "model/config.h"
#include "model/decode.h"
#include "model/model.h"
#include "model/plan.h"
#include "model/verify.h"
#include "optim/adamw.h"
#include "train/dump.h"
#include "train/mfu.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>
#include <time.h>
#include <omp.h>
#include <signal.h>

static void usage(FILE* f) {
    fprintf(f,
        "usage: [mpirun -np N] build/train -c CONFIG [--key value ...] [--init_from PATH] [--force]\n"
        "Trains a Llama-style model on token shards (see README). Every config key below can be given in the\n"
        "config file as `key = value` or overridden on the command line as `--key value` or `--key=value`;\n"
        "on the command line dashes may stand for underscores (--max-steps 20 is --max_steps 20).\n"
        "  -c FILE                     config file (plain `key = value` lines, '#' comments)\n"
        "  --force                     start over in an out_dir that holds an earlier run, or resume into another\n"
        "                              run's out_dir: its metrics records move to metrics.superseded.jsonl, its\n"
        "                              checkpoints and latest are renamed *.superseded (nothing is deleted); resume\n"
        "                              mid-epoch at another seq_len, seed or shuffle; never overrides a live run's lock\n"
        "  --init_from PATH            start a new run from a checkpoint's parameters only (a file, or a run\n"
        "                              directory's latest): step 0, fresh AdamW moments, new data cursor and\n"
        "                              schedule. Model keys not given are the checkpoint's; only rope_scaling,\n"
        "                              rope_factor, rope_original_max_seq_len, rope_theta and max_seq_len may\n"
        "                              differ (context extension). Not with resume (which continues a run)\n"
        "  --help                      this text\n"
        "Ranks: world = dp x cp x tp; dp = world / (tp * cp).\n"
        "config keys:\n");
    config_help(f);
}

static char msg[4096];   // the one-line error of the current check

// SIGUSR1 / SIGTERM (preemption, Slurm's --signal, mpirun forwarding): finish the current step, save a
// checkpoint, exit cleanly; `--resume latest` continues from there
static volatile sig_atomic_t stop_signal = 0;
static void on_stop_signal(int sig) { stop_signal = sig; }

// ---- --init_from: a new run from a checkpoint's parameters (fine-tuning, context extension) ----------------
static char init_from[CFG_STR + 600];        // the resolved checkpoint file ("" : not given)
static Config init_cfg;                      // the config it was saved with
static char init_changed[2048];              // allowed model keys that changed: "key old -> new, ..."
// the model keys a run started with --init_from may change; every other model key must be the checkpoint's
static const char* INIT_ALLOW[] = { "rope_scaling", "rope_factor", "rope_original_max_seq_len", "rope_theta",
                                    "max_seq_len", NULL };

static void init_copy_key(const char* key, int is_model, void* c) {
    char v[CFG_STR + 32], e[256];
    if (is_model && !config_get(&init_cfg, key, v, sizeof v)) config_set(c, key, v, init_from, e, sizeof e);
}
struct InitDiff { const Config* run; char refused[2048]; };
static void init_diff_key(const char* key, int is_model, void* vctx) {
    struct InitDiff* d = vctx;
    char was[CFG_STR + 32], now[CFG_STR + 32];
    if (!is_model || config_get(&init_cfg, key, was, sizeof was) || config_get(d->run, key, now, sizeof now) || !strcmp(was, now)) return;
    int allowed = 0;
    for (int i = 0; INIT_ALLOW[i]; i++) allowed |= !strcmp(key, INIT_ALLOW[i]);
    char* out = allowed ? init_changed : d->refused;
    size_t l = strlen(out);
    if (l < 1500) snprintf(out + l, 2048 - l, allowed ? "%s%s %s -> %s" : "%s%s (checkpoint %s, run %s)", l ? ", " : "", key, was, now);
}

// before the command line is applied: find --init_from, read its checkpoint's config and make its model keys
// the defaults (a config file or --key may still change them; init_check then judges the differences)
static int init_prepare(int argc, char** argv, Config* c) {
    const char* spec = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 0;
        if (!strcmp(argv[i], "--force")) continue;
        if (i + 1 < argc && !strcmp(argv[i], "--init_from")) spec = argv[i + 1];
        i++;
    }
    if (!spec) return 0;
    char e[2048];
    ckpt_init();
    if (!spec[0] || ckpt_resolve(spec, spec, init_from, sizeof init_from, e, sizeof e) ||
        ckpt_read_config(init_from, &init_cfg, e, sizeof e)) {
        snprintf(msg, sizeof msg, "train: --init_from '%s': %s", spec, spec[0] ? e : "empty path (a checkpoint file or a run directory)");
        return 1;
    }
    config_each_key(init_copy_key, c);
    return 0;
}

static int init_check(const Config* c) {
    if (c->resume[0]) {
        snprintf(msg, sizeof msg, "train: --init_from and resume exclude each other (--init_from starts a new run from a "
                 "checkpoint's parameters at step 0; resume continues a run exactly)");
        return 1;
    }
    struct InitDiff d = { c, "" };
    init_changed[0] = 0;
    config_each_key(init_diff_key, &d);
    if (d.refused[0]) {
        snprintf(msg, sizeof msg, "train: --init_from '%s': model keys differ from the checkpoint: %s; only rope_scaling, "
                 "rope_factor, rope_original_max_seq_len, rope_theta and max_seq_len may change", init_from, d.refused);
        return 1;
    }
    return 0;
}

// ---- the data's meta.json (data/meta.h): vocab_size and eod default to it; contradicting values are refused ----
static DataMeta g_meta;                      // the training data's (found = 0: none, or data_meta = 0)
static char meta_note[1400];                 // what was taken from it, for the banner

static const char* given_where(const Config* c, const char* key) {
    return config_given(c, key) == CFG_GIVEN_CLI ? "command line" : "config file";
}

static int apply_data_meta(Config* c) {
    char e[1500];
    if (data_meta_read(c->train_data, &g_meta, e, sizeof e)) { snprintf(msg, sizeof msg, "train: train_data: %s", e); return 1; }
    if (!g_meta.found) return 0;
    if (c->val_data[0]) {   // the validation data must be the same tokens
        DataMeta v;
        if (data_meta_read(c->val_data, &v, e, sizeof e)) { snprintf(msg, sizeof msg, "train: val_data: %s", e); return 1; }
        char why[600];
        int same = !v.found || data_meta_same_tokens(&g_meta, &v, why, sizeof why);
        if (!same) {
            snprintf(msg, sizeof msg, "train: val_data and train_data were made with different tokens (%s: %s and %s); "
                     "validate on data of the training tokenizer", why, v.path, g_meta.path);
        }
        data_meta_free(&v);
        if (!same) return 1;
    }
    const char* fix = "drop the key to take the data's value, or set data_meta = 0 to ignore meta.json";
    int k = snprintf(meta_note, sizeof meta_note, "data: %s: tokenizer %s, vocab_size %d, eod %d", g_meta.path,
                     g_meta.tokenizer, g_meta.vocab_size, g_meta.eod_id);
    if (!config_given(c, "vocab_size")) {
        c->vocab_size = g_meta.vocab_size;
        k += snprintf(meta_note + k, sizeof meta_note - k, " (vocab_size taken");
    } else if (c->vocab_size < g_meta.vocab_size) {
        snprintf(msg, sizeof msg, "train: vocab_size = %d (%s) is smaller than the training data's vocabulary of %d (%s, "
                 "tokenizer %s): %s", c->vocab_size, given_where(c, "vocab_size"), g_meta.vocab_size, g_meta.path,
                 g_meta.tokenizer, fix);
        return 1;
    } else k += snprintf(meta_note + k, sizeof meta_note - k, " (vocab_size %d as given", c->vocab_size);
    if (g_meta.eod_id >= 0) {
        if (!config_given(c, "eod")) {
            c->eod = g_meta.eod_id;
            snprintf(meta_note + k, sizeof meta_note - k, ", eod taken)");
        } else if (config_eod(c) != g_meta.eod_id) {
            snprintf(msg, sizeof msg, "train: eod = %d (%s) contradicts the training data's end-of-document id %d (%s): %s",
                     c->eod, given_where(c, "eod"), g_meta.eod_id, g_meta.path, fix);
            return 1;
        } else snprintf(meta_note + k, sizeof meta_note - k, ", eod as given)");
    } else snprintf(meta_note + k, sizeof meta_note - k, ")");
    return 0;
}

// a checkpoint's recorded data description against this run's data: the same tokens, or one line (every rank)
static void check_ckpt_tokens(const Grid* g, const char* cpath, const char* what) {
    int fail = 0;
    if (g_meta.found) {
        static char text[1 << 16];
        char e[1200];
        int rc = ckpt_read_data_meta(cpath, text, sizeof text, e, sizeof e);
        if (rc == 1) { snprintf(msg, sizeof msg, "train: %s", e); fail = 1; }
        if (rc == 0) {
            DataMeta old;
            char why[600];
            if (data_meta_parse(text, "the checkpoint's data_meta", &old, e, sizeof e)) {
                snprintf(msg, sizeof msg, "train: '%s': %s", cpath, e);
                fail = 1;
            } else if (!data_meta_same_tokens(&old, &g_meta, why, sizeof why)) {
                snprintf(msg, sizeof msg, "train: %s '%s' was trained on other tokens than this run's data (%s; checkpoint's "
                         "data %s, now %s): train on data of the checkpoint's tokenizer, or set data_meta = 0 if you are "
                         "sure", what, cpath, why, old.path, g_meta.path);
                fail = 1;
            }
            data_meta_free(&old);
        }
    }
    grid_check(g->world_g, fail, msg);
}

// parse the command line into c; 0 or 1 with msg set. *help set for --help.
// The command line is first put in the form `--key value` (config_argv: --key=value, dashes for underscores).
static int parse_args(int argc, char** argv, Config* c, int* force, int* help) {
    static const char* const FLAGS[] = { "--force", "--help", "-h", NULL };
    static const char* const OWN[] = { "force", "init_from", "help", NULL };   // options besides the config keys
    config_defaults(c);
    char e[512];
    argc = config_argv(argc, argv, FLAGS, &argv, e, sizeof e);
    if (argc < 0) { snprintf(msg, sizeof msg, "train: %s", e); return 1; }
    if (init_prepare(argc, argv, c)) return 1;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { *help = 1; return 0; }
        if (!strcmp(a, "--force")) { *force = 1; continue; }
        if (!strncmp(a, "--", 2) && strcmp(a, "--init_from") && !config_key_kind(a + 2)) {
            config_unknown("command line", a + 2, OWN, msg, sizeof msg);
            return 1;
        }
        if (i + 1 >= argc) { snprintf(msg, sizeof msg, "train: option '%s' needs a value (see --help)", a); return 1; }
        int rc = 0;
        if (!strcmp(a, "-c")) rc = config_load_file(c, argv[++i], msg, sizeof msg);
        else if (!strcmp(a, "--init_from")) i++;   // read by init_prepare
        else if (!strncmp(a, "--", 2)) rc = config_set(c, a + 2, argv[++i], "command line", msg, sizeof msg);
        else { snprintf(msg, sizeof msg, "train: unexpected argument '%s' (see --help)", a); return 1; }
        if (rc) return 1;
    }
    if (init_from[0] && init_check(c)) return 1;
    if (c->data_meta && apply_data_meta(c)) return 1;
    if (config_validate(c, msg, sizeof msg)) return 1;
    if (!(c->timeout_s >= 0)) { snprintf(msg, sizeof msg, "train: timeout_s = %g must be >= 0 (0: no watchdog)", c->timeout_s); return 1; }
    if (!c->train_data[0]) { snprintf(msg, sizeof msg, "train: train_data is not set (a shard pattern, directory or file)"); return 1; }
    if (c->val_data[0] && c->val_batches < 1) {
        snprintf(msg, sizeof msg, "train: val_batches = %d validates nothing (each validation uses val_batches x batch_size "
                 "sequences): give val_batches >= 1, or set val_data = \"\" (--val_data '') to train without validation",
                 c->val_batches);
        return 1;
    }
    return 0;
}

// ---- the run: everything main sets up once --------------------------------------------------------------
typedef struct {
    Config c;
    Grid g;
    int rank0, accum;               // world rank 0; micro-batches per step on each replica
    Loader train, val;
    int have_val;
    Model m;
    AdamW opt;
    TrainState ts;
    int metrics_fd;                 // rank 0: OUT_DIR/metrics.jsonl (-1: not open), written one whole record at a time
    long long metrics_end;          // its size after the last complete record
    int metrics_failed;             // rank 0: a write of it failed (msg says how); the run stops after the step
    int engine_logged;              // rank 0: a record named attention's engines
    char metrics_path[CFG_STR + 64];
    int32_t* win;                   // [batch_size, seq_len + 1] windows of the step (every rank fetches all)
    double flops_tok;               // model FLOPs per token (model_flops_per_token)
    double peak_flops;              // MFU's peak: the sum over the ranks of each one's matmul peak, FLOP/s (measure_peak)
    char peak_source[200];          // how it was found (the first metrics record, the banner)
    double peak_s;                  // the time its measurement took
    double mem_life;                // the largest step-period memory peak read so far (be_memory_peak), bytes
    double t_loop, t_line;          // rank 0, progress clock: the start of this run's steps; the last step line
    int records;                    // rank 0: records this process wrote (the first says how the run started)
    TbWriter tb;                    // rank 0: tensorboard_dir's event file (tb.f NULL: none, or given up after a failure)
} Run;


// every window of the step, or those of a validation pass: n windows from global index g0
static int fetch_windows(Loader* ld, long long g0, int n, int T, int32_t* win) {
    for (int i = 0; i < n; i++)
        if (loader_get(ld, g0 + i, win + (size_t)i * (T + 1))) { snprintf(msg, sizeof msg, "train: %s", ld->err); return 1; }
    return 0;
}

// targets in n windows (ignored targets are < 0)
static long long count_targets(const int32_t* win, int n, int T) {
    long long valid = 0;
    for (int i = 0; i < n; i++)
        for (int t = 1; t <= T; t++) valid += win[(size_t)i * (T + 1) + t] >= 0;
    return valid;
}

// mean validation loss over val_batches * batch_size sequences from the start of the validation set,
// split over the dp replicas like training
static double validate(Run* r) {
    const Config* c = &r->c;
    int B = c->micro_batch, T = c->seq_len, dp = r->g.dp;
    long long n = (long long)c->val_batches * c->batch_size;
    if (n > r->val.n_seq) n = r->val.n_seq;
    n = n / (B * dp) * (B * dp);
    if (n == 0) n = (long long)B * dp;   // loader_get wraps around a tiny validation set
    long long count = 0;
    model_loss_reset(&r->m);
    for (long long g0 = 0; g0 < n; g0 += (long long)B * dp) {
        int fail = fetch_windows(&r->val, g0, B * dp, T, r->win);
        grid_check(r->g.world_g, fail, msg);
        model_set_windows(&r->m, r->win + (size_t)r->g.dp_rank * B * (T + 1), T + 1, NULL);
        model_forward(&r->m, 0.0f, NULL);
        count += count_targets(r->win, B * dp, T);
    }
    double sum = ctl_sum(r->g.dpcp_g, model_loss_sum(&r->m));
    return sum / (double)(count ? count : 1);
}

// ---- one step --------------------------------------------------------------------------------------------
// dt: the step's wall time, mem: its memory peak (be_memory_peak), both the max over ranks
typedef struct { double loss, gnorm, dt, mem, vloss; float lr; VerifyResult vr; RingStats rs; CommTraffic tr; } StepResult;

static long step_slow_ms;   // RINGLM_TEST_STEP_SLOW_MS (a test hook): each step sleeps this long as well
static StepResult train_step(Run* r, int step, long long* cursor) {
    const Config* c = &r->c;
    int B = c->micro_batch, T = c->seq_len;
    StepResult s = { .vloss = NAN };
    r->mem_life = fmax(r->mem_life, be_memory_peak(1));   // (the period before: start-up, validation, a checkpoint)
    double t0 = now_s();
    model_ring_stats(&r->m, &s.rs);
    CommTraffic tr0 = comm_traffic();
    int fail = fetch_windows(&r->train, *cursor, c->batch_size, T, r->win);
    grid_check(r->g.world_g, fail, msg);
    long long valid = count_targets(r->win, c->batch_size, T);
    float gscale = 1.0f / (float)(valid ? valid : 1);
    // No host synchronisation until the step's end: batches are uploaded without waiting, the loss and the gradient
    // norm stay on the backend (model->scal), and one download reads them when everything is done.
    model_zero_grad(&r->m);
    model_loss_reset(&r->m);
    for (int a = 0; a < r->accum; a++) {
        int i0 = (r->g.dp_rank * r->accum + a) * B;
        model_set_windows(&r->m, r->win + (size_t)i0 * (T + 1), T + 1, NULL);
        model_forward(&r->m, gscale, NULL);
        model_backward(&r->m);
    }
    if (step_slow_ms > 0) {   // test hook (RINGLM_TEST_STEP_SLOW_MS): a step as long as a large model's
        struct timespec ts = { step_slow_ms / 1000, (step_slow_ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) && errno == EINTR) {}
    }
    // weights are replicated over the ring and the replicas: their gradients are summed over dp x cp
    adamw_reduce_grads(&r->opt, &r->m);
    adamw_clip(&r->opt, &r->m, c->grad_clip);
    s.lr = lr_at(c, step);
    AdamWHyper h = adamw_hyper(c, s.lr);
    adamw_step(&r->opt, &r->m, &h);
    double scal[3];   // the step's one host synchronisation: loss sum, the gradient's sums of squares
    be_download(scal, r->m.scal, sizeof scal);
    *cursor += c->batch_size;
    s.loss = ctl_sum(r->g.dpcp_g, scal[0]) / (double)(valid ? valid : 1);
    s.gnorm = adamw_norm_of(scal);
    if (!isfinite(s.loss) || !isfinite(s.gnorm)) {   // (read after the update: no checkpoint of it is written)
        snprintf(msg, sizeof msg, "train: step %d: loss %g, grad norm %g is not finite; lower lr or check the data",
                 step + 1, s.loss, s.gnorm);
        grid_check(r->g.world_g, 1, msg);
    }
    double tm[2] = { now_s() - t0, be_memory_peak(0) };
    ctl_max_f64(r->g.world_g, tm, 2);
    s.dt = tm[0]; s.mem = tm[1];
    s.tr = comm_traffic();   // what this rank sent in the step
    for (int k = 0; k < TRAFFIC_KINDS; k++) { s.tr.bytes[k] -= tr0.bytes[k]; s.tr.messages[k] -= tr0.messages[k]; }
    RingStats before = s.rs;
    if (model_ring_stats(&r->m, &s.rs)) {   // this step's part of the totals
        s.rs.compute_s -= before.compute_s; s.rs.work_s -= before.work_s; s.rs.wait_s -= before.wait_s;
        s.rs.exposed_s -= before.exposed_s; s.rs.transfers -= before.transfers; s.rs.blocks -= before.blocks;
        s.rs.sends -= before.sends; s.rs.pruned -= before.pruned;
    }
    return s;
}

// ring statistics of a step over the ring: load imbalance = max/mean attention work; hidden fraction =
// 1 - exposed communication / un-overlapped communication
typedef struct { double busy_max, busy_mean, wait_max, hidden; long long transfers, sends, pruned; } RingStep;
static RingStep ring_step_stats(const RingStats* st, const Group* cp) {
    RingStep s = {0};
    s.transfers = (long long)st->transfers;   // ring hops waited for by this rank in the step
    s.sends = st->sends; s.pruned = st->pruned;   // blocks it sent, and those the pruned schedule did not send
    s.busy_max = ctl_max(cp, st->work_s);
    s.busy_mean = ctl_sum(cp, st->work_s) / group_size(cp);
    s.wait_max = ctl_max(cp, st->wait_s);
    double comm_total = ctl_sum(cp, st->transfers * st->xfer_s), exposed_total = ctl_sum(cp, st->exposed_s);
    s.hidden = comm_total > 0 ? 1.0 - exposed_total / comm_total : 1.0;
    if (s.hidden < 0) s.hidden = 0;
    return s;
}

// ---- metrics.jsonl (rank 0): every record is appended whole; a write that fails stops the run ----------------
// the failure of a write (`what`) at `step` (err: errno, or 0): msg, and a cut-off record removed again
static void metrics_fail(Run* r, int step, const char* what, int err) {
    if (r->metrics_failed) return;
    r->metrics_failed = 1;
    char tail[600] = "";
    if (r->metrics_fd >= 0) {   // a partial record would be the file's last line: cut it off again
        struct stat st;
        if (fstat(r->metrics_fd, &st) == 0 && (long long)st.st_size > r->metrics_end) {
            if (ftruncate(r->metrics_fd, (off_t)r->metrics_end) == 0)
                snprintf(tail, sizeof tail, "; the cut-off record was removed: the last line is step %d's", step - 1);
            else snprintf(tail, sizeof tail, "; its last line is a cut-off record of step %d (removing it failed too: %s)",
                          step, strerror(errno));
        }
    }
    snprintf(msg, sizeof msg, "train: cannot write '%s' (%s, step %d)%s%s%s", r->metrics_path, what, step, err ? ": " : "",
             err ? strerror(err) : "", tail);
}

static void metrics_append(Run* r, int step, const char* rec, size_t len) {
    size_t done = 0;
    int err = 0;
    while (!r->metrics_failed && done < len) {
        ssize_t k = write(r->metrics_fd, rec + done, len - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) { err = k < 0 ? errno : ENOSPC; break; }
        done += (size_t)k;
    }
    if (done == len) r->metrics_end += (long long)len;
    else metrics_fail(r, step, "the record", err);
}

// rank 0: metrics.jsonl on disk (at checkpoints and at the end, after `step` steps); a failure is a failed write
static void metrics_sync(Run* r, int step) {
    if (r->metrics_fd >= 0 && !r->metrics_failed && fdatasync(r->metrics_fd) && errno != EINVAL)
        metrics_fail(r, step, "fdatasync", errno);
}

// a step line is printed at least every LINE_S seconds whatever log_every says: a run that logs rarely still shows
// that it is alive, and how far it has to go
#define LINE_S 30.0

// rank 0: the step line (every log_every steps, the last, validations, a stop, and LINE_S after the previous line),
// with the time since this run's first step and the time its remaining steps will take at its mean rate so far
static void log_line(Run* r, int step, const StepResult* s, const RingStep* rs, int have_ring, int step0, int stop) {
    const Config* c = &r->c;
    int T = c->seq_len, last = step + 1 == c->max_steps;
    double now = progress_now(), el = now - r->t_loop, eta = el / (step + 1 - step0) * (c->max_steps - step - 1);
    if (!((step + 1) % c->log_every == 0 || last || !isnan(s->vloss) || stop || now - r->t_line >= LINE_S)) return;
    r->t_line = now;
    double tps = (double)c->batch_size * T / s->dt, gflops = tps * r->flops_tok / 1e9;
    char els[32], etas[32];
    fmt_duration(el, els, sizeof els);
    fmt_duration(eta, etas, sizeof etas);
    printf("step %5d/%d | loss %.6f | lr %.3e | grad norm %.4f | %.0f tok/s | %.2f GFLOP/s | MFU %.3g%% | %.1f ms | "
           "peak mem %.1f MiB", step + 1, c->max_steps, s->loss, s->lr, s->gnorm, tps, gflops,
           100 * gflops * 1e9 / r->peak_flops, s->dt * 1e3, s->mem / 1048576.0);
    if (have_ring) printf(" | ring imbalance %.2f hidden %.0f%%", rs->busy_max / rs->busy_mean, 100 * rs->hidden);
    if (!isnan(s->vloss)) printf(" | val loss %.6f", s->vloss);
    printf(" | %s elapsed, ETA %s\n", els, etas);
    fflush(stdout);
}

// rank 0: the step's record in metrics.jsonl
static void log_record(Run* r, int step, const StepResult* s, const RingStep* rs, int have_ring, long long cursor) {
    const Config* c = &r->c;
    int T = c->seq_len;
    double tps = (double)c->batch_size * T / s->dt, gflops = tps * r->flops_tok / 1e9;
    double flops = r->flops_tok * c->batch_size * T;   // the step's model FLOPs, all ranks
    char* rec = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&rec, &len);   // the whole record first: it is written with one write, or not at all
    if (!f) { metrics_fail(r, step + 1, "formatting the record", errno); return; }
    fprintf(f, "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens_per_s\": %.3f, "
            "\"gflops\": %.4f, \"step_ms\": %.3f, \"tokens_seen\": %lld",
            step + 1, s->loss, s->lr, s->gnorm, tps, gflops, s->dt * 1e3, cursor * (long long)T);
    // MFU (docs/training.md): the step's model FLOPs over its time and the ranks' summed peak; its memory peak
    fprintf(f, ", \"model_flops\": %.9g, \"peak_flops\": %.9g, \"mfu\": %.9g, \"mem_peak_mib\": %.3f", flops,
            r->peak_flops, flops / s->dt / r->peak_flops, s->mem / 1048576.0);
    if (have_ring) fprintf(f, ", \"cp_busy_max_s\": %.6f, \"cp_busy_mean_s\": %.6f, \"cp_imbalance\": %.4f, "
                           "\"cp_wait_max_s\": %.6f, \"cp_hidden\": %.4f, \"cp_transfers\": %lld, \"cp_blocks_sent\": %lld, "
                           "\"cp_blocks_pruned\": %lld", rs->busy_max, rs->busy_mean, rs->busy_max / rs->busy_mean, rs->wait_max,
                           rs->hidden, rs->transfers, rs->sends, rs->pruned);
    // bytes and messages this rank sent (rank 0; comm.h's counting): ring hops, all-to-all, all-reduce,
    // all-gather + reduce-scatter
    fprintf(f, ", \"sent_hop_bytes\": %.0f, \"sent_a2a_bytes\": %.0f, \"sent_allreduce_bytes\": %.0f, "
            "\"sent_parts_bytes\": %.0f, \"sent_hop_msgs\": %.0f, \"sent_a2a_msgs\": %.0f",
            s->tr.bytes[TRAFFIC_HOP], s->tr.bytes[TRAFFIC_A2A], s->tr.bytes[TRAFFIC_ALLREDUCE], s->tr.bytes[TRAFFIC_PARTS],
            s->tr.messages[TRAFFIC_HOP], s->tr.messages[TRAFFIC_A2A]);
    // attention's engines: the blocks (pieces) each computed so far on this rank; the first record of a run names them
    long long ec[2];
    attn_engine_counts(ec);
    fprintf(f, ", \"attn_blocks_own\": %lld, \"attn_blocks_fast\": %lld", ec[ATTN_ENGINE_OWN], ec[ATTN_ENGINE_FAST]);
    if (!r->engine_logged) {
        fprintf(f, ", \"attn_engine\": \"");
        for (const char* p = r->m.attn_report; *p; p++) fputs(*p == '\n' ? "; " : *p == '"' ? "'" : (char[2]){ *p, 0 }, f);
        fprintf(f, "\"");
        r->engine_logged = 1;
    }
    if (!isnan(s->vloss)) fprintf(f, ", \"val_loss\": %.9g", s->vloss);
    if (!r->records++) {   // the first record of this process: how it started, on which layout (plot_metrics marks resumes)
        char zl[16] = "";
        if (c->zero) snprintf(zl, sizeof zl, ", zero %d", c->zero);
        fprintf(f, ", \"peak_source\": \"%s\", \"start\": \"%s\", \"layout\": \"tp %d x cp %d x dp %d%s\"", r->peak_source,
                c->resume[0] ? "resume" : init_from[0] ? "init_from" : "new", r->g.tp, r->g.cp, r->g.dp, zl);
    }
    if (s->vr.checked) fprintf(f, ", \"verify_max_abs\": %.3e, \"verify_max_rel\": %.3e", s->vr.max_abs, s->vr.max_rel);
    fprintf(f, "}\n");
    if (fclose(f)) { free(rec); metrics_fail(r, step + 1, "formatting the record", errno); return; }
    metrics_append(r, step + 1, rec, len);
    if (r->tb.f && tb_write_record(&r->tb, wall_s(), step + 1, rec)) {   // live curves are not worth stopping for
        printf("WARNING: cannot write the TensorBoard event file '%s' (%s): no more TensorBoard events in this run; "
               "metrics.jsonl goes on (tools/metrics_to_tensorboard.py converts it)\n", r->tb.path, strerror(errno));
        tb_close(&r->tb);
    }
    free(rec);
}

// ---- samples of the model's text during training (sample_every): every rank of a replica runs the decoder (its
// collectives span tp and cp), world rank 0 prints one line ----
static int sample_prompt_tokens(const Config* c, int* out, int cap, char* err, size_t n) {
    const char* p = c->sample_prompt;
    int k = 0;
    if (!p[0]) {
        if (config_eod(c) < 0) { snprintf(err, n, "sample_prompt is empty and this vocabulary has no eod token: give ids:1,2,3"); return -1; }
        out[k++] = config_eod(c);
        return k;
    }
    if (!strncmp(p, "ids:", 4)) {
        for (const char* q = p + 4; *q && k < cap;) {
            char* e;
            long v = strtol(q, &e, 10);
            if (e == q || v < 0 || v >= c->vocab_size || (*e && *e != ',')) {
                snprintf(err, n, "sample_prompt '%s': ids must be comma-separated token ids below vocab_size = %d", p, c->vocab_size);
                return -1;
            }
            out[k++] = (int)v;
            q = *e ? e + 1 : e;
        }
        return k;
    }
    if (c->vocab_size != 257) {
        snprintf(err, n, "sample_prompt is text, which needs the byte tokenizer (vocab_size 257, this model %d): give ids:1,2,3",
                 c->vocab_size);
        return -1;
    }
    for (; p[k] && k < cap; k++) out[k] = (unsigned char)p[k];
    return k;
}

static TokDecoder g_tokdec;                   // the training data's tokenizer, for the samples' text (n_ids 0: none)

static void put_escaped(FILE* f, int t) {              // a byte of a sample's text, on one line
    if (t == '\n') fputs("\\n", f);
    else if (t == '\\') fputs("\\\\", f);
    else if (t < 32 || t == 127) fprintf(f, "\\x%02x", t);
    else fputc(t, f);
}

// the tokens as text: bytes (the byte tokenizer), the bytes of their tokens (the data's tokenizer), else ids
static void print_sample(FILE* f, const int* tok, int n, int byte, int eod) {
    for (int i = 0; i < n; i++) {
        int t = tok[i];
        if (g_tokdec.n_ids) {
            size_t len;
            const unsigned char* b = tokdec_bytes(&g_tokdec, t, &len);
            for (size_t j = 0; j < len; j++) put_escaped(f, b[j]);
        } else if (!byte) fprintf(f, i ? ",%d" : "%d", t);
        else if (t == eod) fputs("<|eod|>", f);
        else put_escaped(f, t);
    }
}

static void train_sample(Run* r, int step) {
    const Config* c = &r->c;
    int cap = c->sample_tokens + 1 + (int)strlen(c->sample_prompt) + 4;
    int* tok = malloc((size_t)cap * sizeof(int));
    char e[600];
    int np = sample_prompt_tokens(c, tok, cap, e, sizeof e);   // (checked at start-up: np > 0 here)
    int n = np, room = c->max_seq_len - np;
    int want = c->sample_tokens < room ? c->sample_tokens : room;
    Decoder d;
    int cp = r->g.cp;
    decoder_init(&d, &r->m, (np + want) / cp + 2);
    uint64_t rng = mix64((uint64_t)c->seed ^ 0x73616d706c65ULL);   // the same draws at every step: comparable samples
    const float* lg = NULL;
    for (int i = 0; i < np; i++) lg = decoder_step(&d, tok[i], i);
    int made = 0;
    for (; made < want; made++) {
        int next = sample_logits(lg, c->vocab_size, c->sample_temperature, 0, 1.0f, &rng);
        tok[n++] = next;
        if (next == config_eod(c) || made + 1 == want) { made++; break; }
        lg = decoder_step(&d, next, n - 1);
    }
    decoder_free(&d);
    if (r->rank0) {
        int byte = c->vocab_size == 257, text = byte || g_tokdec.n_ids;
        printf("sample (step %d, %d tokens, temperature %g): %s", step, made, c->sample_temperature, text ? "\"" : "");
        print_sample(stdout, tok, n, byte, config_eod(c));
        printf("%s\n", text ? "\"" : "");
        fflush(stdout);
    }
    free(tok);
}

// at start-up: can this run print samples? (one line and exit when the prompt is bad; a note when the layout cannot)
static int sample_ready(const Run* r) {
    const Config* c = &r->c;
    if (!c->sample_every) return 0;
    int tok[4];
    char e[600];
    int fail = sample_prompt_tokens(c, tok, 1, e, sizeof e) < 0;
    if (fail) snprintf(msg, sizeof msg, "train: %s", e);
    grid_check(r->g.world_g, fail, msg);
    if (config_a2a(c) > 1) {
        if (r->rank0) printf("note: sample_every: samples need cp_comm = ring (the KV cache of the all-to-all layouts is not "
                             "written); no samples in this run (build/sample runs any checkpoint on a ring)\n");
        return 0;
    }
    if (c->zero == 3) {
        if (r->rank0) printf("note: sample_every: samples need every parameter on the rank (zero = 3 holds a shard); no "
                             "samples in this run (build/sample runs any checkpoint)\n");
        return 0;
    }
    char why[2400];   // the text of a tokenizer's tokens: the one the training data's meta.json names
    if (r->rank0 && g_meta.found && !tokdec_for_meta(&g_tokdec, &g_meta, why, sizeof why) && why[0])
        printf("note: sample_every: %s: the samples print token ids\n", why);
    if (r->rank0 && g_tokdec.n_ids) printf("sample_every: the samples' text through the tokenizer %s\n", g_meta.tokenizer);
    return 1;
}

// a checkpoint of the state after `step` steps (collective): 0, or 1 with err (the same on every rank)
static int try_save(Run* r, int step, long long cursor, char* err, size_t errlen) {
    r->ts.data_meta = g_meta.found ? g_meta.text : NULL;
    r->ts.step = step; r->ts.cursor = cursor; r->ts.tokens_seen = cursor * (long long)r->c.seq_len;
    double t1 = now_s();
    int fail = ckpt_save(r->c.out_dir, r->c.keep_last, &r->m, &r->opt, &r->g, &r->ts, err, errlen);
    if (fail) ckpt_shutdown();   // (the same on every rank) HDF5 winds down now, not inside MPI's finalize
    if (!fail && r->rank0) { printf("saved checkpoint %s/ckpt_%08d.h5 (%.2f s)\n", r->c.out_dir, step, now_s() - t1); fflush(stdout); }
    if (!fail && r->rank0) metrics_sync(r, step);   // the records up to the checkpoint are on disk with it
    return fail;
}

// the same; a failure ends the job with one line
static void save(Run* r, int step, long long cursor) {
    int fail = try_save(r, step, cursor, msg, sizeof msg);
    grid_check(r->g.world_g, fail, msg);
}

// every rank, after the step `step` was logged: when rank 0 could not write metrics.jsonl, save a checkpoint of
// this step (unless one was saved) and stop with one line, exit status 1
static void check_metrics(Run* r, int step, long long cursor, int saved) {
    if (!(int)ctl_max(r->g.world_g, r->rank0 && r->metrics_failed)) return;
    static char e[2048];
    int fail = saved ? 0 : try_save(r, step, cursor, e, sizeof e);
    if (r->rank0) {
        size_t l = strlen(msg);
        char lt[300] = "";
        if (fail) {
            char p[CFG_STR + 16];
            snprintf(p, sizeof p, "%s/latest", r->c.out_dir);
            FILE* f = fopen(p, "r");
            if (!f || !fgets(lt, sizeof lt, f)) snprintf(lt, sizeof lt, "no checkpoint");
            if (f) fclose(f);
            lt[strcspn(lt, "\r\n")] = 0;
        }
        if (!fail)
            snprintf(msg + l, sizeof msg - l, "; stopped after saving checkpoint ckpt_%08d.h5 (metrics.jsonl will lack the "
                     "record of step %d): make room (or fix the file system), then continue with --resume latest", step, step);
        else
            snprintf(msg + l, sizeof msg - l, "; stopped, and the checkpoint of step %d could not be saved either (%s); "
                     "'latest' names %s: make room, then continue with --resume latest", step, e, lt);
    }
    grid_check(r->g.world_g, r->rank0, msg);
}

// pack != stream: the training windows become packed documents (data/pack.h), the same table on every rank;
// rank 0 prints the packing's statistics and the token mixture of the sources (kept in pack_note for packing.json)
static char pack_note[2048];
static int pack_train(Run* r) {
    const Config* c = &r->c;
    int mode = pack_mode(c->pack);
    Loader* ld = &r->train;
    if (mode == PACK_STREAM) {
        if (loader_weighted(ld)) {
            snprintf(msg, sizeof msg, "train: train_data gives source weights ('@W'), which need pack = doc_start or "
                     "best_fit (stream windows do not see documents)");
            return 1;
        }
        return 0;
    }
    double t0 = now_s();
    // every rank of a node builds the same table: each may take its share of the host's memory
    double node_ranks = ctl_max(r->g.world_g, (double)r->g.local_rank) + 1;
    if (loader_pack(ld, mode, config_eod(c), c->pack_buffer, c->upsample_len, c->upsample_factor,
                    meminfo_bytes("MemAvailable") / node_ranks)) {
        snprintf(msg, sizeof msg, "train: %s", ld->err);
        return 1;
    }
    const PackStats* st = &ld->pack.st;
    int k = snprintf(pack_note, sizeof pack_note, "{\"pack\": \"%s\", \"pack_buffer\": %d, \"upsample_len\": %lld, "
                     "\"upsample_factor\": %.9g, \"windows\": %lld, \"window_slots\": %d, \"documents\": %lld, "
                     "\"documents_shorter_than_window\": %lld, \"short_cut\": %lld, \"short_cut_stream\": %lld, "
                     "\"left_out\": %lld, \"padding\": %.6f, \"repeated\": %.6f, \"sources\": [", c->pack, c->pack_buffer,
                     c->upsample_len, c->upsample_factor, (long long)st->windows, c->seq_len + 1, (long long)st->docs,
                     (long long)st->docs_short, (long long)st->short_cut, (long long)st->stream_cut, (long long)st->left_out,
                     st->slots ? (double)st->pad / (double)st->slots : 0.0,
                     st->slots ? (double)st->repeated / (double)st->slots : 0.0);
    double data = 0, used = 0;
    for (int s = 0; s < st->n_src; s++) { data += st->src_tokens[s]; used += st->src_used[s]; }
    for (int s = 0; s < st->n_src && k < (int)sizeof pack_note - 200; s++)
        k += snprintf(pack_note + k, sizeof pack_note - k, "%s{\"pattern\": \"%s\", \"weight\": %.9g, \"share_data\": %.6f, "
                      "\"share_trained\": %.6f}", s ? ", " : "", ld->src_pattern[s], ld->weight[s],
                      data > 0 ? st->src_tokens[s] / data : 0, used > 0 ? st->src_used[s] / used : 0);
    snprintf(pack_note + k, sizeof pack_note - k, "]}");
    if (r->rank0) {
        if (st->docs <= st->n_src)
            printf("WARNING: pack = %s: the end-of-document token %d occurs nowhere inside train_data, so each source is "
                   "one document of all its tokens: is eod right (meta.json's eod_id, the eod key)?\n", c->pack, config_eod(c));
        printf("packing: %s: %lld windows of %d tokens from %lld documents (%.2f s); of the %lld documents that fit a "
               "window, %lld are cut (%.1f%%; stream windows would cut %lld, %.1f%%); padding %.2f%% of the slots "
               "(never trained on)", c->pack, (long long)st->windows, c->seq_len + 1,
               (long long)st->docs, now_s() - t0, (long long)st->docs_short, (long long)st->short_cut,
               st->docs_short ? 100.0 * st->short_cut / st->docs_short : 0.0, (long long)st->stream_cut,
               st->docs_short ? 100.0 * st->stream_cut / st->docs_short : 0.0,
               st->slots ? 100.0 * st->pad / st->slots : 0.0);
        if (st->left_out) printf("; %lld documents left out by source weights below 1 (not cut: never trained on)",
                                 (long long)st->left_out);
        if (st->repeated) printf(", repeated %.2f%% (the cut beginnings of documents that start the next window)",
                                 100.0 * st->repeated / st->slots);
        printf("\n");
        if (st->n_src > 1 || c->upsample_len > 0) {
            printf("mixture:");
            for (int s = 0; s < st->n_src; s++)
                printf("%s %s (weight %g): %.1f%% of the data's tokens -> %.1f%% of those trained on", s ? ";" : "",
                       ld->src_pattern[s], ld->weight[s], data > 0 ? 100.0 * st->src_tokens[s] / data : 0,
                       used > 0 ? 100.0 * st->src_used[s] / used : 0);
            if (c->upsample_len > 0)
                printf("; documents longer than %lld tokens used %g times", c->upsample_len, c->upsample_factor);
            printf(" (%.3g epochs of the data per pass)\n", data > 0 ? used / data : 0);
        }
        fflush(stdout);
    }
    return 0;
}

// ---- setup -----------------------------------------------------------------------------------------------

// the grid, the backend, the data, the out_dir check; a failure ends the job with one line
static void setup_layout(Run* r, const Group* world) {
    Config* c = &r->c;
    int fail = comm_set_transport(c->comm, msg, sizeof msg);
    grid_check(world, fail, msg);
    fail = grid_build(&r->g, c->tp, c->cp, config_a2a(c), msg, sizeof msg);
    grid_check(world, fail, msg);
    fail = be_init(r->g.local_rank, msg, sizeof msg);
    grid_check(world, fail, msg);
    r->accum = c->batch_size / (c->micro_batch * r->g.dp);
    if (r->accum * c->micro_batch * r->g.dp != c->batch_size) {
        snprintf(msg, sizeof msg, "train: batch_size = %d is not a multiple of micro_batch * dp = %d * %d",
                 c->batch_size, c->micro_batch, r->g.dp);
        grid_check(world, 1, msg);
    }
    if (!strcmp(c->offload, "ckpt") && !strcmp(be_name(), "cpu")) {
        snprintf(msg, sizeof msg, "train: offload = ckpt moves saved activations from device to host memory, and the cpu "
                 "backend keeps them in host memory already: use offload = none (the CUDA backend offloads)");
        grid_check(world, 1, msg);
    }
    if (c->zero >= 2 && r->g.dp * r->g.cp == 1) {
        snprintf(msg, sizeof msg, "train: zero = %d shards gradients%s over the dp x cp ranks, and this layout has one "
                 "(dp 1 x cp 1): run on more ranks, or use zero = 0 or 1", c->zero, c->zero == 3 ? " and parameters" : "");
        grid_check(world, 1, msg);
    }
    r->rank0 = r->g.rank == 0;
    fail = loader_open(&r->train, c->train_data, c->seq_len, c->vocab_size, c->shuffle, (uint64_t)c->seed);
    if (fail) snprintf(msg, sizeof msg, "train: %s", r->train.err);
    grid_check(world, fail, msg);
    fail = pack_train(r);
    grid_check(world, fail, msg);
    r->have_val = c->val_data[0] != 0;
    fail = r->have_val && loader_open_split(&r->val, c->val_data, "val", c->seq_len, c->vocab_size, 0, 0);
    if (fail) snprintf(msg, sizeof msg, "train: %s", r->val.err);
    grid_check(world, fail, msg);
}

// what the out_dir checks decided (rank 0), for resume() and open_outputs()
static int run_force;            // --force
static int other_run;            // resuming into an out_dir that holds another run (only with --force)

// rank 0, a fresh run (not a resume): an out_dir holding an earlier run's checkpoints, `latest` or step records
// is refused (a new run would overwrite its checkpoints of the same steps, and keep_last and `latest` would act on
// them); --force sets them aside when the outputs are opened (fresh_aside). 1 + msg when refused.
static int fresh_aside;          // --force: open_outputs sets the earlier run's files aside (rundir_set_aside)
static int check_fresh_out_dir(Run* r, int force, const char* metrics_path) {
    const char* od = r->c.out_dir;
    RunFound fd;
    rundir_found(od, &fd);
    if (!fd.ckpts && !fd.latest && (!fd.has_metrics || fd.metrics_bytes == 0)) {
        if (fd.has_metrics) {   // a run that completed no step (and saved nothing)
            printf("note: out_dir '%s' holds a run that completed no step (empty metrics.jsonl, no checkpoint): this "
                   "run replaces it\n", od);
            fflush(stdout);
        }
        return 0;
    }
    char what[1024] = "", aside[256];
    int k = 0;
    if (fd.ckpts == 1) k += snprintf(what + k, sizeof what - k, "checkpoint ckpt_%08lld.h5", fd.ckpt_max);
    else if (fd.ckpts) k += snprintf(what + k, sizeof what - k, "%lld checkpoints ckpt_%08lld.h5 .. ckpt_%08lld.h5",
                                     fd.ckpts, fd.ckpt_min, fd.ckpt_max);
    if (fd.latest) k += snprintf(what + k, sizeof what - k, "%s'latest' (-> %s)", k ? ", " : "",
                                 fd.latest_name[0] ? fd.latest_name : "nothing");
    snprintf(aside, sizeof aside, "%s%s%s", fd.has_metrics ? "its records move to metrics.superseded.jsonl" : "",
             fd.has_metrics && (fd.ckpts || fd.latest) ? ", " : "",
             fd.ckpts || fd.latest ? "its checkpoints and latest are renamed *.superseded" : "");
    if (force) {
        fresh_aside = 1;
        printf("note: --force: out_dir '%s' holds an earlier run (%s%s%lld metrics records): %s; nothing is deleted\n",
               od, what, k ? ", " : "", fd.metrics, aside);
        fflush(stdout);
        return 0;
    }
    if (fd.has_metrics)
        snprintf(msg, sizeof msg, "train: '%s' exists from an earlier run (%lld bytes of step records%s%s); choose another "
                 "out_dir, resume it with --resume latest, or pass --force to start over here (%s)", metrics_path,
                 fd.metrics_bytes, k ? ", " : "", what, aside);
    else
        snprintf(msg, sizeof msg, "train: out_dir '%s' holds %s of another run (no metrics.jsonl): a new run would "
                 "overwrite or delete them; choose another out_dir, resume with --resume latest, or pass --force to start "
                 "over here (%s)", od, what, aside);
    return 1;
}

// out_dir: created, locked for this run (rank 0 holds OUT_DIR/train.lock until it exits) and checked now;
// nothing else in it is written until the checkpoint (if any) has loaded, so a refused resume leaves every
// existing file untouched
static void check_out_dir(Run* r, int force, const char* metrics_path) {
    int fail = 0;
    run_force = force;
    if (r->rank0) {
        char note[1200];
        fail = make_dirs("train: out_dir", r->c.out_dir, msg, sizeof msg) || rundir_lock(r->c.out_dir, note, sizeof note, msg, sizeof msg);
        grid_on_exit(rundir_unlock);   // (before any rank exits: mpirun may kill the rest as soon as one has)
        if (!fail && note[0]) { printf("note: %s\n", note); fflush(stdout); }
        if (!fail && !r->c.resume[0]) fail = check_fresh_out_dir(r, force, metrics_path);
    }
    grid_check(r->g.world_g, fail, msg);
}

// rank 0: is the out_dir another run's than the checkpoint's? (run ids, or for files of earlier builds:
// whether the checkpoint lies in the out_dir). 1 + msg when so and not --force.
static int check_run_id(Run* r, const char* cpath) {
    const char* od = r->c.out_dir;
    char dir_id[40], p[CFG_STR + 64];
    struct stat st;
    int have_id = rundir_read_id(od, dir_id, sizeof dir_id), has_run = have_id;
    snprintf(p, sizeof p, "%s/metrics.jsonl", od);
    has_run |= stat(p, &st) == 0;
    snprintf(p, sizeof p, "%s/latest", od);
    has_run |= stat(p, &st) == 0;
    int same = r->ts.run_id[0] && have_id ? !strcmp(r->ts.run_id, dir_id) : rundir_holds(od, cpath);
    if (!has_run || same) return 0;
    if (!run_force) {
        snprintf(msg, sizeof msg, "train: out_dir '%s' holds another run (run id %s) than the checkpoint '%s' (run id %s): "
                 "resuming would mix the two runs' metrics and checkpoints; resume into the checkpoint's own out_dir or a "
                 "new one, or pass --force to set the other run's metrics and checkpoints aside and continue here", od,
                 have_id ? dir_id : "unknown", cpath, r->ts.run_id[0] ? r->ts.run_id : "unknown");
        return 1;
    }
    other_run = 1;
    printf("note: --force: out_dir '%s' held another run (run id %s); its metrics.jsonl records move to "
           "metrics.superseded.jsonl and its checkpoints are renamed *.superseded\n", od, have_id ? dir_id : "unknown");
    return 0;
}

// every rank: the data cursor of a checkpoint saved at another seq_len, and a data set that changed size.
// The cursor counts sequences of the checkpoint's seq_len; it is converted through its token position in the
// epoch. 1 + msg when that position cannot be kept (a shuffled epoch under way), unless --force.
static int convert_cursor(Run* r, char* note, size_t n) {
    const Config* c = &r->c;
    long long T0 = r->ts.seq_len > 0 ? r->ts.seq_len : c->seq_len, T = c->seq_len, cur = r->ts.cursor;
    long long D0 = r->ts.data_tokens > 0 ? r->ts.data_tokens : r->train.n_tokens, D = r->train.n_tokens;
    long long n0 = r->train.pack.n_win > 0 ? r->train.n_seq : (D0 - 1) / T0, n1 = r->train.n_seq;
    int k = 0;
    note[0] = 0;
    if (n0 < 1) n0 = 1;
    long long e = cur / n0, done = cur % n0;
    if (T0 != T && cur > 0 && r->train.pack.n_win > 0) {   // (check_data_order refused this without --force)
        k += snprintf(note + k, n - k, "seq_len %lld -> %lld with packed windows: the data cursor %lld continues at that "
                      "window index of the new table", T0, T, cur);
    } else if (T0 != T && cur > 0) {
        if (c->shuffle && done && !run_force) {
            snprintf(msg, sizeof msg, "train: the checkpoint was trained at seq_len %lld, this run asks for %lld: with "
                     "shuffle = 1 the epoch under way (epoch %lld, %lld of %lld sequences done) cannot continue in another "
                     "length's order; resume with --seq_len %lld, or pass --force to continue at the same token position of "
                     "the epoch in the new order (some of its tokens then come twice, others not until the next epoch)",
                     T0, T, e, done, n0, T0);
            return 1;
        }
        long long pos = done * T0, seq = (pos + T - 1) / T;   // the first whole sequence at or after pos
        if (seq >= n1) { e++; seq = 0; }
        long long nc = e * n1 + seq;
        k += snprintf(note + k, n - k, "seq_len %lld -> %lld: the data cursor (%lld sequences of %lld: epoch %lld, token "
                      "%lld) continues as %lld sequences of %lld (epoch %lld, token %lld)%s", T0, T, cur, T0, cur / n0, pos,
                      nc, T, e, seq * T, c->shuffle && done ? ", in the new length's shuffled order" :
                      seq * T > pos ? ", skipping to the next whole sequence" : "");
        r->ts.cursor = cur = nc;
    }
    if (r->ts.data_tokens > 0 && D0 != D && k < (int)n) {
        long long now_e = cur / n1, then_e = e;
        snprintf(note + k, n - k, "%sWARNING: the training data %s since the checkpoint: %lld tokens then, %lld now (%lld "
                 "sequences of %lld per epoch, was %lld); the data cursor %lld now lies in epoch %lld%s, and the order does "
                 "not continue the saved one", k ? "\n" : "", D < D0 ? "shrank" : "grew", D0, D, n1, T, n0, cur, now_e,
                 now_e > then_e ? " (it wrapped past the end of the smaller data set)" : "");
    }
    return 0;
}

// rank 0: the data order of the checkpoint's run (shuffle, seed) against this run's. Mid-epoch a changed order
// cannot continue the epoch (some sequences would come twice, others not until the next epoch): 1 + msg, unless
// --force (then a note). At an epoch boundary the next epoch simply takes the new order (a note).
static int check_data_order(Run* r, const char* cpath) {
    const Config* c = &r->c;
    static Config old;
    char e[1024];
    if (ckpt_read_config(cpath, &old, e, sizeof e)) { snprintf(msg, sizeof msg, "train: %s", e); return 1; }
    // the packed windows (data/pack.h) are a table made from the data, seq_len and these keys: another table does
    // not continue the saved cursor's order
    int packed = r->train.pack.n_win > 0 || strcmp(old.pack, "stream");
    if (packed && r->ts.cursor > 0 && (strcmp(old.pack, c->pack) || old.pack_buffer != c->pack_buffer ||
        old.upsample_len != c->upsample_len || old.upsample_factor != c->upsample_factor || old.seq_len != c->seq_len ||
        strcmp(old.train_data, c->train_data))) {
        if (!run_force) {
            snprintf(msg, sizeof msg, "train: the checkpoint '%s' was trained on packed windows (pack = %s, pack_buffer %d, "
                     "upsample_len %lld, upsample_factor %g, seq_len %d, train_data '%s') and this run asks for pack = %s, "
                     "pack_buffer %d, upsample_len %lld, upsample_factor %g, seq_len %d, train_data '%s': another table of "
                     "windows does not continue the saved order; resume with the checkpoint's values, or pass --force to "
                     "continue at the same window index of the new table", cpath, old.pack, old.pack_buffer,
                     old.upsample_len, old.upsample_factor, old.seq_len, old.train_data, c->pack, c->pack_buffer,
                     c->upsample_len, c->upsample_factor, c->seq_len, c->train_data);
            return 1;
        }
        printf("note: --force: the packing or its data changed since the checkpoint (pack %s -> %s): the data cursor %lld "
               "continues at the same window index of the new table\n", old.pack, c->pack, r->ts.cursor);
    }
    int shuffle_changed = !old.shuffle != !c->shuffle, seed_changed = c->shuffle && old.shuffle && old.seed != c->seed;
    if (!shuffle_changed && !seed_changed) return 0;
    long long T0 = r->ts.seq_len > 0 ? r->ts.seq_len : c->seq_len;
    long long D0 = r->ts.data_tokens > 0 ? r->ts.data_tokens : r->train.n_tokens;
    long long n0 = packed ? r->train.n_seq : (D0 - 1) / T0, cur = r->ts.cursor;
    if (n0 < 1) n0 = 1;
    long long ep = cur / n0, done = cur % n0;
    char was[128], now[128], fix[128];
    if (shuffle_changed) {
        snprintf(was, sizeof was, "shuffle = %d", old.shuffle);
        snprintf(now, sizeof now, "shuffle = %d", c->shuffle);
        snprintf(fix, sizeof fix, "--shuffle %d", old.shuffle);
    } else {
        snprintf(was, sizeof was, "shuffle = 1, seed = %lld", old.seed);
        snprintf(now, sizeof now, "seed = %lld", c->seed);
        snprintf(fix, sizeof fix, "--seed %lld", old.seed);
    }
    if (!done) {
        if (cur == 0) return 0;   // (no data consumed yet)
        printf("note: the checkpoint's run had %s, this run has %s: the checkpoint is at the end of epoch %lld, and "
               "the next epoch takes this run's order\n", was, now, ep - 1);
        return 0;
    }
    if (!run_force) {
        snprintf(msg, sizeof msg, "train: the checkpoint '%s' was trained with %s and this run asks for %s: the epoch "
                 "under way (epoch %lld, %lld of %lld sequences done) cannot continue in another order (some of its "
                 "sequences would come twice, others not until the next epoch); resume with %s, or pass --force to "
                 "continue at the same position of the epoch in the new order", cpath, was, now, ep, done, n0, fix);
        return 1;
    }
    printf("note: --force: the checkpoint's run had %s, this run has %s: epoch %lld (%lld of %lld sequences done) "
           "continues at the same position in the new order; some of its sequences come twice, others not until the "
           "next epoch\n", was, now, ep, done, n0);
    return 0;
}

// after a checkpoint has loaded: the checks and notes of a resume (see docs/reliability.md)
static void resume_checks(Run* r, const char* cpath) {
    int fail = r->rank0 && check_run_id(r, cpath);
    grid_check(r->g.world_g, fail, msg);
    fail = r->rank0 && check_data_order(r, cpath);
    if (r->rank0) fflush(stdout);
    grid_check(r->g.world_g, fail, msg);
    if (r->c.max_steps <= r->ts.step) {   // (every rank decides the same)
        if (r->rank0) printf("nothing to train: the checkpoint is at step %lld and max_steps = %d; no step was run and "
                             "nothing was written (raise --max_steps to continue)\n", r->ts.step, r->c.max_steps);
        grid_exit(0);
    }
    char note[2048];
    fail = convert_cursor(r, note, sizeof note);
    grid_check(r->g.world_g, fail, msg);
    if (r->rank0 && note[0]) printf("%s%s\n", strncmp(note, "WARNING", 7) ? "note: " : "", note);
    if (r->rank0) {   // records and checkpoints past the resumed step: set aside
        RunLater l;
        long long from = other_run ? -1 : r->ts.step;
        rundir_later(r->c.out_dir, from, &l);
        if (!other_run && l.ckpts)
            printf("note: resuming from step %lld, earlier than out_dir '%s' reached (checkpoints up to step %lld, "
                   "metrics.jsonl up to step %lld): %lld metrics records past step %lld move to metrics.superseded.jsonl "
                   "and the %lld later checkpoints are renamed ckpt_*.h5.superseded\n", r->ts.step, r->c.out_dir,
                   l.ckpts_max, l.metrics_max, l.metrics, r->ts.step, l.ckpts);
        else if (!other_run && l.metrics)
            printf("note: metrics.jsonl has %lld records past the checkpoint's step %lld (up to step %lld, logged after "
                   "the last checkpoint of a run that ended): they move to metrics.superseded.jsonl\n", l.metrics,
                   r->ts.step, l.metrics_max);
        fail = (l.ckpts || l.metrics) && rundir_supersede(r->c.out_dir, from, cpath, msg, sizeof msg);
        fflush(stdout);
    }
    grid_check(r->g.world_g, fail, msg);
}

// rank 0: warn when this run's schedule gives the next step another learning rate than the checkpoint's did
static void lr_jump_warning(const Config* c, const char* cpath, long long step) {
    Config old;
    char e[1024];
    if (ckpt_read_config(cpath, &old, e, sizeof e)) return;   // (loaded a moment ago: cannot fail here)
    float was = lr_at(&old, step), now = lr_at(c, step);
    if (fabsf(was - now) <= 1e-6f * fmaxf(fabsf(was), fabsf(now))) return;
    char sched_old[160], sched_new[160];
    snprintf(sched_old, sizeof sched_old, "%s, max_steps %d%s", old.lr_schedule, old.max_steps,
             old.lr_horizon ? ", lr_horizon" : "");
    if (old.lr_horizon) snprintf(sched_old + strlen(sched_old), sizeof sched_old - strlen(sched_old), " %d", old.lr_horizon);
    snprintf(sched_new, sizeof sched_new, "%s, max_steps %d%s", c->lr_schedule, c->max_steps, c->lr_horizon ? ", lr_horizon" : "");
    if (c->lr_horizon) snprintf(sched_new + strlen(sched_new), sizeof sched_new - strlen(sched_new), " %d", c->lr_horizon);
    printf("WARNING: the learning rate jumps at the resume: step %lld had lr %.3e under the checkpoint's schedule (%s) "
           "and gets %.3e under this run's (%s). To extend a run without a jump: keep its decay where it was "
           "(--lr_horizon %d with cosine or linear: min_lr after it), or train with lr_schedule = wsd, which stays at lr "
           "until its final lr_cooldown steps (docs/training.md, \"Extending a run\")\n", step + 1, was, sched_old, now, sched_new,
           old.lr_horizon ? old.lr_horizon : old.max_steps);
    fflush(stdout);
}

// rank 0: say plainly when a resume drops the validation the checkpoint's run had (val_data given there, not here)
static void val_drop_warning(const Config* c, const char* cpath) {
    Config old;
    char e[1024];
    if (c->val_data[0] || ckpt_read_config(cpath, &old, e, sizeof e) || !old.val_data[0]) return;
    printf("WARNING: no validation in this run: the checkpoint's run validated on val_data '%s', and this run has no "
           "val_data (a command line or config file without it); give --val_data '%s' to go on validating\n",
           old.val_data, old.val_data);
    fflush(stdout);
}

static void resume(Run* r) {
    char cpath[CFG_STR + 600], notes[4096];
    int fail = ckpt_resolve(r->c.resume, r->c.out_dir, cpath, sizeof cpath, msg, sizeof msg);
    grid_check(r->g.world_g, fail, msg);
    double t0 = now_s();
    fail = ckpt_load(cpath, &r->m, &r->opt, &r->g, &r->ts, NULL, msg, sizeof msg, notes, sizeof notes);
    grid_check(r->g.world_g, fail, msg);
    if (r->rank0) {
        printf("resumed from %s: step %lld, data cursor %lld, %lld tokens seen (%.2f s)\n", cpath, r->ts.step,
               r->ts.cursor, r->ts.tokens_seen, now_s() - t0);
        if (notes[0]) printf("note: %s\n", notes);
    }
    check_ckpt_tokens(&r->g, cpath, "the checkpoint");
    resume_checks(r, cpath);
    if (r->rank0) lr_jump_warning(&r->c, cpath, r->ts.step);
    if (r->rank0) val_drop_warning(&r->c, cpath);
}

// --init_from: the checkpoint's parameters only, resharded to this layout; the training state stays fresh
// (step 0, data cursor 0, the AdamW moments zero as allocated, so the schedule starts over)
static void init_load(Run* r) {
    TrainState ts;
    double t0 = now_s();
    int fail = ckpt_load(init_from, &r->m, NULL, &r->g, &ts, INIT_ALLOW, msg, sizeof msg, NULL, 0);
    grid_check(r->g.world_g, fail, msg);
    check_ckpt_tokens(&r->g, init_from, "--init_from");
    memset(&r->ts, 0, sizeof r->ts);
    if (r->rank0) {
        printf("initialised from %s (saved at step %lld): parameters only; step 0, fresh AdamW moments, data cursor 0 "
               "(%.2f s)\n", init_from, ts.step, now_s() - t0);
        printf("init_from: model keys changed from the checkpoint: %s\n", init_changed[0] ? init_changed : "none");
    }
}

// text as '# ' lines
static void write_commented(FILE* f, const char* text) {
    for (const char* p = text; *p;) {
        const char* e = strchr(p, '\n');
        int n = e ? (int)(e - p) : (int)strlen(p);
        fprintf(f, "# %.*s\n", n, p);
        p += n + (e != NULL);
    }
}

// rank 0: metrics.jsonl and config.txt, now that the run's starting state is settled
static void open_outputs(Run* r, const char* metrics_path) {
    int fail = 0;
    if (r->rank0) {
        char path[CFG_STR + 64];
        if (fresh_aside) fail = rundir_set_aside(r->c.out_dir, msg, sizeof msg);
        snprintf(r->metrics_path, sizeof r->metrics_path, "%s", metrics_path);
        if (!fail) {
            r->metrics_fd = open(metrics_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (r->c.resume[0] ? 0 : O_TRUNC), 0644);
            off_t end = r->metrics_fd < 0 ? -1 : lseek(r->metrics_fd, 0, SEEK_END);
            char last = '\n';
            if (end > 0 && pread(r->metrics_fd, &last, 1, end - 1) != 1) last = '\n';
            if (end > 0 && last != '\n') {   // a record cut off by a run killed while writing it: end its line
                if (write(r->metrics_fd, "\n", 1) == 1) {
                    end++;
                    printf("note: '%s' ended in a cut-off record (a run stopped while writing it): its line is ended, the "
                           "records continue on the next\n", metrics_path);
                } else end = -1;
            }
            if (end < 0) {
                snprintf(msg, sizeof msg, "train: cannot write '%s': %s", metrics_path, strerror(errno));
                fail = 1;
            }
            r->metrics_end = end;
        }
        // config.txt: the whole file or the previous one (written beside it, then renamed)
        char tmp[CFG_STR + 80];
        snprintf(path, sizeof path, "%s/config.txt", r->c.out_dir);
        snprintf(tmp, sizeof tmp, "%s/config.txt.tmp", r->c.out_dir);
        FILE* cf = fail ? NULL : fopen(tmp, "w");
        if (cf) {
            config_write(&r->c, cf);
            write_commented(cf, r->m.attn_report);   // the engines attn_engine chose (comments: the file still loads)
        }
        int e = errno, cfail = !fail && (!cf || ferror(cf) || fflush(cf) || fsync(fileno(cf)));
        if (cfail) e = errno;
        if (cf && fclose(cf) && !cfail) { e = errno; cfail = 1; }
        if (cf && !cfail && rename(tmp, path)) { e = errno; cfail = 1; }
        if (cfail) {
            snprintf(msg, sizeof msg, "train: cannot write '%s': %s", cf ? tmp : path, strerror(e));
            if (cf) unlink(tmp);
            fail = 1;
        }
        // packing.json: the packing's statistics and the sources' mixture (pack != stream), the same way
        if (!fail && pack_note[0]) {
            snprintf(path, sizeof path, "%s/packing.json", r->c.out_dir);
            snprintf(tmp, sizeof tmp, "%s/packing.json.tmp", r->c.out_dir);
            FILE* pf = fopen(tmp, "w");
            int pfail = !pf || fprintf(pf, "%s\n", pack_note) < 0 || fflush(pf) || fsync(fileno(pf));
            e = errno;
            if (pf && fclose(pf) && !pfail) { e = errno; pfail = 1; }
            if (pf && !pfail && rename(tmp, path)) { e = errno; pfail = 1; }
            if (pfail) {
                snprintf(msg, sizeof msg, "train: cannot write '%s': %s", pf ? tmp : path, strerror(e));
                if (pf) unlink(tmp);
                fail = 1;
            }
        }
        // the run id: a resumed run keeps its checkpoint's (or the out_dir's, for older files); a new run gets one
        char dir_id[40];
        int have = rundir_read_id(r->c.out_dir, dir_id, sizeof dir_id);
        if (!r->c.resume[0]) rundir_new_id(r->ts.run_id, sizeof r->ts.run_id);
        else if (!r->ts.run_id[0]) {
            if (have && !other_run) snprintf(r->ts.run_id, sizeof r->ts.run_id, "%s", dir_id);
            else rundir_new_id(r->ts.run_id, sizeof r->ts.run_id);
        }
        if (!fail && (!have || strcmp(dir_id, r->ts.run_id))) fail = rundir_write_id(r->c.out_dir, r->ts.run_id, msg, sizeof msg);
        // TensorBoard: a new event file per run (a resumed run's starts over at its first step; TensorBoard drops the
        // earlier file's later steps), named with the run id; another run's files there are a note: TensorBoard would
        // take both runs for one and drop the earlier one's steps from this run's first step on
        if (!fail && r->c.tensorboard_dir[0]) {
            char other[64];
            int n = tb_other_runs(r->c.tensorboard_dir, r->ts.run_id, other, sizeof other);
            if (n > 0)
                printf("NOTE: tensorboard_dir '%s' holds %d event file%s of another run (%s): TensorBoard shows one "
                       "directory as one run and drops that run's steps from step %lld on; give each run a directory of its "
                       "own (e.g. out/tb/RUN)\n", r->c.tensorboard_dir, n, n > 1 ? "s" : "",
                       other[0] ? other : "written without a run id", r->ts.step + 1);
            fail = tb_open(&r->tb, r->c.tensorboard_dir, r->ts.run_id, wall_s(), r->ts.step + 1, msg, sizeof msg);
        }
    }
    grid_check(r->g.world_g, fail, msg);
    ctl_bcast(r->g.world_g, r->ts.run_id, sizeof r->ts.run_id, 0);   // (every rank writes the checkpoint header)
    r->ts.data_tokens = r->train.n_tokens;
}

static void print_banner(const Run* r) {
    const Config* c = &r->c;
    int T = c->seq_len, Tl = T / r->g.cp;
    printf("ringlm train | backend %s | %d rank%s x %d threads\n", be_name(), r->g.world, r->g.world > 1 ? "s" : "",
           omp_get_max_threads());
    grid_print(&r->g);
    config_write(c, stdout);
    printf("%s\n", r->m.attn_report);
    if (meta_note[0]) printf("%s\n", meta_note);
    double total = 0;   // the model's parameters (logical shapes: no TP padding)
    for (int i = 0; i < r->m.pt.n; i++) total += (double)r->m.pt.p[i].shape[0] * r->m.pt.p[i].shape[1];
    printf("params %.0f (%.2f M) in the model; %zu (%.2f M) on each of the tp = %d ranks of a layer%s | train %lld tokens, "
           "%lld sequences of %d | %d tokens per rank | accumulation %d x %d sequences x dp %d\n", total, total / 1e6,
           r->m.pt.total, r->m.pt.total / 1e6, r->g.tp, r->g.tp > 1 ? " (norms replicated, vocabulary padded)" : "",
           (long long)r->train.n_tokens, (long long)r->train.n_seq, T, Tl, r->accum, c->micro_batch, r->g.dp);
    if (r->g.cp > 1 && Tl < 512)
        printf("note: %d tokens per rank: below ~512 the ring's per-step compute is too short to hide its "
               "communication; a smaller cp is likely faster\n", Tl);
    printf("MFU peak: %.4g TFLOP/s in all (%s; %.2f s)\n", r->peak_flops / 1e12, r->peak_source, r->peak_s);
    fflush(stdout);
}

// MFU's peak (collective; before the model is built): peak_tflops per rank, or each rank's matmul rate measured
// now, all ranks at once (on shared cores each then measures its share; train/mfu.h), at the run's matmul precision
// with the operands' type its matmuls use; the sum over the ranks. The measurement's memory is forgotten after it
// (be_memory_peak(2)): the run's peaks are the model's.
static void measure_peak(Run* r) {
    const Config* c = &r->c;
    const Group* w = r->g.world_g;
    int n = 0;
    double t0 = now_s(), mine;
    BeDtype dt = be_has_bf16() && !strcmp(c->matmul_precision, "bf16") ? BE_BF16 : BE_F32;
    be_set_matmul_precision(c->matmul_precision);   // (validated with the config; model_build sets it again)
    if (c->peak_tflops > 0) mine = c->peak_tflops * 1e12;
    else {
        int node_ranks = (int)ctl_max(w, (double)r->g.local_rank) + 1;
        n = -(int)ctl_max(w, -(double)matmul_probe(0.005, node_ranks, dt));   // the smallest size of any rank
        ctl_max(w, 0);   // every rank starts its window together
        mine = matmul_window(n, dt, 0.03);
        be_memory_peak(2);
    }
    r->peak_flops = ctl_sum(w, mine);
    double lo = -ctl_max(w, -mine), hi = ctl_max(w, mine);
    if (c->peak_tflops > 0)
        snprintf(r->peak_source, sizeof r->peak_source, "peak_tflops = %g per rank", c->peak_tflops);
    else if (r->g.world == 1)
        snprintf(r->peak_source, sizeof r->peak_source, "measured: %s matmul %d^3, %s operands", be_name(), n,
                 dt == BE_BF16 ? "bf16" : "fp32");
    else
        snprintf(r->peak_source, sizeof r->peak_source, "measured: %s matmul %d^3, %s operands, on each of the %d ranks at "
                 "once: %.4g to %.4g TFLOP/s", be_name(), n, dt == BE_BF16 ? "bf16" : "fp32", r->g.world, lo / 1e12, hi / 1e12);
    r->peak_s = now_s() - t0;
}

// memory of each rank: planned arenas and the measured peak resident set (on the CPU the step peaks' high-water
// marks were restarted at each step: the largest of them counts too)
static void print_memory(const Run* r) {
    const Group* w = r->g.world_g;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    ModelMemory mm = model_memory(&r->m);
    double rss = ru.ru_maxrss / 1024.0;
    if (!strcmp(be_name(), "cpu")) rss = fmax(rss, fmax(r->mem_life, be_memory_peak(0)) / 1048576.0);
    double rss_max = ctl_max(w, rss), rss_min = -ctl_max(w, -rss);
    double mib = 1.0 / 1048576.0;
    double obytes = ctl_max(w, 2.0 * r->opt.shard * sizeof(float));
    double pmax = ctl_max(w, (double)mm.params), gmax = ctl_max(w, (double)mm.grads);
    double amax = ctl_max(w, (double)mm.acts), ringmax = ctl_max(w, (double)mm.ring);
    double host = ctl_max(w, (double)be_host_bytes());   // pinned host memory (offload)
    char pinned[64] = "";
    if (r->m.offload) snprintf(pinned, sizeof pinned, ", pinned host %.2f MiB", host * mib);
    if (r->rank0)
        printf("memory per rank: params %.2f MiB, grads %.2f MiB, AdamW moments %.2f MiB, activations %.1f MiB, "
               "ring buffers %.1f MiB%s, peak RSS %.1f MiB (max over ranks; min %.1f)\n", pmax * mib, gmax * mib,
               obytes * mib, amax * mib, ringmax * mib, pinned, rss_max, rss_min);
}

// Before any large allocation: the plan of this layout (the same shapes model_build allocates) against the
// memory the backend has for this rank; one line naming both on every rank when it does not fit.
static void check_capacity(Run* r, const Group* world) {
    const Config* c = &r->c;
    PlanLayout l = { .tp = r->g.tp, .cp = r->g.cp, .dp = r->g.dp, .zero = c->zero, .micro_batch = c->micro_batch,
                     .backend = be_name(), .link_gbs = 1, .tflops = 1 };
    Plan p;
    char msg[512];
    int fail = plan_step(&p, c, &l, c->seq_len, msg, sizeof msg);
    int node_ranks = (int)ctl_max(world, (double)r->g.local_rank) + 1;
    double avail = be_memory_available(node_ranks), G = 1024.0 * 1024.0 * 1024.0;
    if (!fail && p.total > avail) {
        snprintf(msg, sizeof msg, "train: this layout needs %.2f GiB per rank (parameters %.2f, gradients %.2f, AdamW "
                 "moments %.2f, activations %.2f, ring %.2f, workspace %.2f) but %.2f GiB are available (%d ranks on "
                 "this node); try recompute = full, mlp_tile, a larger cp or tp, zero = 1, 2 or 3, or a smaller micro_batch (build/plan)",
                 p.total / G, p.params / G, p.grads / G, p.moments / G, (p.acts_kept + p.acts_work + p.acts_scratch) / G,
                 p.ring / G, p.workspace / G, avail / G, node_ranks);
        fail = 1;
    }
    // offload: the pinned host memory of every rank of this node against what the node has
    double host = ctl_max(world, p.host), hostavail = meminfo_bytes("MemAvailable");
    const char* hook = getenv("RINGLM_TEST_HOST_AVAILABLE_MIB");   // (a test hook: the host memory this check sees)
    if (hook) hostavail = atof(hook) * 1048576.0;
    if (!fail && host * node_ranks > hostavail) {
        snprintf(msg, sizeof msg, "train: offload = ckpt keeps %.3g GiB of saved activations per rank in pinned host memory, "
                 "%.3g GiB for the %d ranks of this node, but the node has %.3g GiB available; try a larger cp (fewer "
                 "tokens per rank), recompute = full (less saved per layer) or offload = none (build/plan --host_gib)",
                 host / G, host * node_ranks / G, node_ranks, hostavail / G);
        fail = 1;
    }
    grid_check(world, fail, msg);
}

int main(int argc, char** argv) {
    stdout_lines();   // each line appears when printed, also into a file or pipe
    // first of all: a stop that arrives during start-up is kept (the run stops after its first step, saved)
    signal(SIGUSR1, on_stop_signal);
    signal(SIGTERM, on_stop_signal);
    grid_mpi_init(&argc, &argv);
    const Group* world = group_world();
    static Run run;
    Run* r = &run;
    int force = 0, help = 0;
    r->metrics_fd = -1;
    int fail = parse_args(argc, argv, &r->c, &force, &help);
    if (help) { if (group_rank(world) == 0) usage(stdout); grid_exit(0); }
    grid_check(world, fail, msg);
    const Config* c = &r->c;
    comm_set_timeout(c->timeout_s);
    setup_layout(r, world);
    char metrics_path[CFG_STR + 64];
    snprintf(metrics_path, sizeof metrics_path, "%s/metrics.jsonl", c->out_dir);
    check_out_dir(r, force, metrics_path);

    check_capacity(r, world);
    measure_peak(r);
    // the model (this rank's share of each sequence) and the optimizer
    ModelGroups mg = { r->g.tp > 1 ? r->g.tp_g : NULL, r->g.cp_g, c->zero ? r->g.dpcp_g : NULL, r->g.a2a_g, r->g.ring_g };
    model_build(&r->m, c, c->micro_batch, c->seq_len, &mg);
    adamw_init(&r->opt, &r->m, r->g.dpcp_g, c->zero);
    ckpt_init();
    if (c->resume[0]) resume(r);
    else if (init_from[0]) init_load(r);
    open_outputs(r, metrics_path);
    if (r->rank0) print_banner(r);

    int T = c->seq_len;
    r->win = malloc((size_t)c->batch_size * (T + 1) * sizeof(int32_t));
    r->flops_tok = model_flops_per_token(c, T);
    long long cursor = r->ts.cursor;   // global data cursor: index of the next training sequence
    double t_total = 0, last_loss = NAN, busy_max_sum = 0, busy_mean_sum = 0, hidden_sum = 0;
    int step0 = (int)r->ts.step, saved_at = c->resume[0] ? step0 : -1, done_steps = step0;
    RingStats rs_total;
    int have_ring = model_ring_stats(&r->m, &rs_total);
    int sampling = sample_ready(r);
    if (getenv("RINGLM_TEST_STEP_SLOW_MS")) step_slow_ms = atol(getenv("RINGLM_TEST_STEP_SLOW_MS"));
    if (r->rank0) r->t_loop = r->t_line = progress_now();
    char about[600];   // the step anatomy's header (a backend that counts a step: be_step_begin)
    snprintf(about, sizeof about, "model d_model %d n_layer %d n_head %d n_kv_head %d d_ff %d vocab %d | seq_len %d, "
             "micro_batch %d x %d accumulation steps per rank | tp %d cp %d (%s) dp %d zero %d | matmul_precision %s, "
             "recompute %s, doc_mask %d", c->d_model, c->n_layer, c->n_head, c->n_kv_head, c->d_ff, c->vocab_size, T,
             c->micro_batch, r->accum, r->g.tp, r->g.cp, c->cp_comm, r->g.dp, c->zero, c->matmul_precision, c->recompute,
             c->doc_mask);
    for (int step = step0; step < c->max_steps; step++) {
        be_step_begin(step + 1, r->flops_tok * c->batch_size * T / r->g.world, about);
        StepResult s = train_step(r, step, &cursor);
        be_step_end();
        t_total += s.dt;
        RingStep rs = {0};
        if (have_ring) {
            rs = ring_step_stats(&s.rs, r->g.ring_g);
            busy_max_sum += rs.busy_max; busy_mean_sum += rs.busy_mean; hidden_sum += rs.hidden;
        }
        last_loss = s.loss;
        if (r->have_val && ((c->val_every && (step + 1) % c->val_every == 0) || step + 1 == c->max_steps))
            s.vloss = validate(r);
        if (have_ring && c->verify_attention && (step + 1) % c->verify_attention == 0)
            s.vr = model_verify_attention(&r->m, r->g.world_g, step + 1);
        done_steps = step + 1;
        int stop = (int)ctl_max(r->g.world_g, (double)stop_signal);   // every rank stops at the same step
        // the lines in the order of events: the step, its checkpoint, the stop
        if (r->rank0) log_line(r, step, &s, &rs, have_ring, step0, stop);
        if ((c->ckpt_every && (step + 1) % c->ckpt_every == 0) || (stop && step + 1 < c->max_steps)) {
            save(r, step + 1, cursor);
            saved_at = step + 1;
        }
        if (r->rank0 && stop) printf("stopping after step %d on signal %d: checkpoint saved; continue with --resume latest\n",
                                     step + 1, stop);
        if (r->rank0) log_record(r, step, &s, &rs, have_ring, cursor);
        check_metrics(r, step + 1, cursor, saved_at == step + 1);
        if (sampling && ((step + 1) % c->sample_every == 0 || step + 1 == c->max_steps)) train_sample(r, step + 1);
        if (stop) break;
    }
    if (saved_at != done_steps && c->save_final) save(r, done_steps, cursor);   // the final checkpoint (max_steps 0: the fresh model)
    if (r->rank0 && tb_close(&r->tb))
        printf("WARNING: cannot complete the TensorBoard event file '%s': %s\n", r->tb.path, strerror(errno));
    if (r->rank0 && r->metrics_fd >= 0) {   // the records on disk, checked
        metrics_sync(r, done_steps);
        if (close(r->metrics_fd) && !r->metrics_failed) metrics_fail(r, done_steps, "close", errno);
        r->metrics_fd = -1;
    }
    if (r->rank0 && r->metrics_failed && (saved_at == done_steps || c->save_final)) {
        size_t l = strlen(msg);
        snprintf(msg + l, sizeof msg - l, "; the checkpoint of the last step, ckpt_%08d.h5, is saved", done_steps);
    }
    grid_check(r->g.world_g, r->rank0 && r->metrics_failed, msg);
    if (r->rank0 && done_steps > step0) {
        printf("done: %d steps, final loss %.6f, mean %.0f tok/s, outputs in %s/\n", done_steps, last_loss,
               (double)(done_steps - step0) * c->batch_size * T / t_total, c->out_dir);
        if (have_ring)
            printf("ring (cp %d, %s): attention busy max/mean %.3f (load imbalance), communication hidden %.1f%% "
                   "(one hop %.3f ms un-overlapped)\n", r->g.cp, c->cp_layout, busy_max_sum / busy_mean_sum,
                   100 * hidden_sum / (done_steps - step0), rs_total.xfer_s * 1e3);
    }
    print_memory(r);
    if (c->dump_weights[0]) {   // collective over each TP group; world rank 0 writes
        // under ZeRO each rank holds only its own slices of the reduced gradient (ZeRO-3: and of the parameters):
        // assemble the whole
        const Model* m = &r->m;
        float* prm = zero_whole(m, m->zero == 3 ? m->pshard : m->params, m->zero == 3);
        float* grd = zero_whole(m, m->zero >= 2 ? m->gshard : m->grads, m->zero >= 2);
        FILE* f = r->rank0 ? dump_open(c->dump_weights) : NULL;
        int e = errno, dfail = r->rank0 && !f;
        dump_arena(f, m, "param", prm);
        dump_arena(f, m, "grad", grd);
        be_free(prm); be_free(grd);
        if (f && (ferror(f) || fflush(f))) { e = errno; dfail = 1; }
        if (f && fclose(f) && !dfail) { e = errno; dfail = 1; }
        if (dfail) snprintf(msg, sizeof msg, "train: cannot write dump_weights '%s': %s", c->dump_weights, strerror(e));
        grid_check(r->g.world_g, dfail, msg);
    }
    adamw_free(&r->opt);
    model_free(&r->m);
    loader_close(&r->train);
    if (r->have_val) loader_close(&r->val);
    grid_exit(0);
}
