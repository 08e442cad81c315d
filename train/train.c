// train.c — build/train: the training driver.
//   [mpirun -np WORLD] build/train -c CONFIG [--key value ...] [--force]
// One optimizer step = batch_size sequences (global), split over dp replicas, run as micro-batches of
// micro_batch sequences with gradient accumulation; each sequence is split over the cp ranks of a ring.
// The loss is the mean over every target token of the step.
#include "backend/backend.h"
#include "checkpoint/ckpt.h"
#include "comm/grid.h"
#include "common/files.h"
#include "common/util.h"
#include "data/shards.h"
#include "model/config.h"
#include "model/model.h"
#include "model/verify.h"
#include "optim/adamw.h"
#include "train/dump.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <omp.h>
#include <signal.h>

static void usage(FILE* f) {
    fprintf(f,
        "usage: [mpirun -np N] build/train -c CONFIG [--key value ...] [--force]\n"
        "Trains a Llama-style model on token shards (see README). Every config key below can be given in the\n"
        "config file as `key = value` or overridden on the command line as `--key value`.\n"
        "  -c FILE                     config file (plain `key = value` lines, '#' comments)\n"
        "  --force                     reuse an out_dir that already holds metrics.jsonl (it is replaced)\n"
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

// parse the command line into c; 0 or 1 with msg set. *help set for --help.
static int parse_args(int argc, char** argv, Config* c, int* force, int* help) {
    config_defaults(c);
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { *help = 1; return 0; }
        if (!strcmp(a, "--force")) { *force = 1; continue; }
        if (i + 1 >= argc) { snprintf(msg, sizeof msg, "train: option '%s' needs a value (see --help)", a); return 1; }
        int rc = 0;
        if (!strcmp(a, "-c")) rc = config_load_file(c, argv[++i], msg, sizeof msg);
        else if (!strncmp(a, "--", 2)) rc = config_set(c, a + 2, argv[++i], "command line", msg, sizeof msg);
        else { snprintf(msg, sizeof msg, "train: unexpected argument '%s' (see --help)", a); return 1; }
        if (rc) return 1;
    }
    if (config_validate(c, msg, sizeof msg)) return 1;
    if (!c->train_data[0]) { snprintf(msg, sizeof msg, "train: train_data is not set (a shard pattern, directory or file)"); return 1; }
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
    FILE* metrics;                  // rank 0
    int32_t* win;                   // [batch_size, seq_len + 1] windows of the step (every rank fetches all)
    double flops_tok;
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
    double sum = 0;
    long long count = 0;
    for (long long g0 = 0; g0 < n; g0 += (long long)B * dp) {
        int fail = fetch_windows(&r->val, g0, B * dp, T, r->win);
        grid_check(r->g.world_g, fail, msg);
        model_set_windows(&r->m, r->win + (size_t)r->g.dp_rank * B * (T + 1), T + 1, NULL);
        sum += model_forward(&r->m, 0.0f, NULL);
        count += count_targets(r->win, B * dp, T);
    }
    sum = ctl_sum(r->g.dpcp_g, sum);
    return sum / (double)(count ? count : 1);
}

// ---- one step --------------------------------------------------------------------------------------------
typedef struct { double loss, gnorm, dt, vloss; float lr; VerifyResult vr; RingStats rs; } StepResult;

static StepResult train_step(Run* r, int step, long long* cursor) {
    const Config* c = &r->c;
    int B = c->micro_batch, T = c->seq_len;
    StepResult s = { .vloss = NAN };
    double t0 = now_s();
    model_ring_stats(&r->m, &s.rs);
    int fail = fetch_windows(&r->train, *cursor, c->batch_size, T, r->win);
    grid_check(r->g.world_g, fail, msg);
    long long valid = count_targets(r->win, c->batch_size, T);
    float gscale = 1.0f / (float)(valid ? valid : 1);
    model_zero_grad(&r->m);
    double loss_sum = 0;
    for (int a = 0; a < r->accum; a++) {
        int i0 = (r->g.dp_rank * r->accum + a) * B;
        model_set_windows(&r->m, r->win + (size_t)i0 * (T + 1), T + 1, NULL);
        loss_sum += model_forward(&r->m, gscale, NULL);
        model_backward(&r->m);
    }
    // weights are replicated over the ring and the replicas: their gradients are summed over dp x cp
    adamw_reduce_grads(&r->opt, &r->m);
    loss_sum = ctl_sum(r->g.dpcp_g, loss_sum);
    *cursor += c->batch_size;
    s.loss = loss_sum / (double)(valid ? valid : 1);
    s.gnorm = adamw_grad_norm(&r->opt, &r->m);
    if (!isfinite(s.loss) || !isfinite(s.gnorm)) {
        snprintf(msg, sizeof msg, "train: step %d: loss %g, grad norm %g is not finite; lower lr or check the data",
                 step + 1, s.loss, s.gnorm);
        grid_check(r->g.world_g, 1, msg);
    }
    s.lr = lr_at(c, step);
    AdamWHyper h = adamw_hyper(c, s.lr);
    adamw_step(&r->opt, &r->m, &h, s.gnorm);
    be_sync();
    s.dt = ctl_max(r->g.world_g, now_s() - t0);
    RingStats before = s.rs;
    if (model_ring_stats(&r->m, &s.rs)) {   // this step's part of the totals
        s.rs.compute_s -= before.compute_s; s.rs.work_s -= before.work_s; s.rs.wait_s -= before.wait_s;
        s.rs.exposed_s -= before.exposed_s; s.rs.transfers -= before.transfers; s.rs.blocks -= before.blocks;
    }
    return s;
}

// ring statistics of a step over the ring: load imbalance = max/mean attention work; hidden fraction =
// 1 - exposed communication / un-overlapped communication
typedef struct { double busy_max, busy_mean, wait_max, hidden; } RingStep;
static RingStep ring_step_stats(const RingStats* st, const Group* cp) {
    RingStep s = {0};
    s.busy_max = ctl_max(cp, st->work_s);
    s.busy_mean = ctl_sum(cp, st->work_s) / group_size(cp);
    s.wait_max = ctl_max(cp, st->wait_s);
    double comm_total = ctl_sum(cp, st->transfers * st->xfer_s), exposed_total = ctl_sum(cp, st->exposed_s);
    s.hidden = comm_total > 0 ? 1.0 - exposed_total / comm_total : 1.0;
    if (s.hidden < 0) s.hidden = 0;
    return s;
}

// rank 0: the step line (every log_every steps, the last, validations and a stop) and the metrics record
static void log_step(Run* r, int step, const StepResult* s, const RingStep* rs, int have_ring, long long cursor, int stop) {
    const Config* c = &r->c;
    int T = c->seq_len, last = step + 1 == c->max_steps;
    double tps = (double)c->batch_size * T / s->dt, gflops = tps * r->flops_tok / 1e9;
    if ((step + 1) % c->log_every == 0 || last || !isnan(s->vloss) || stop) {
        printf("step %5d/%d | loss %.6f | lr %.3e | grad norm %.4f | %.0f tok/s | %.2f GFLOP/s | %.1f ms",
               step + 1, c->max_steps, s->loss, s->lr, s->gnorm, tps, gflops, s->dt * 1e3);
        if (have_ring) printf(" | ring imbalance %.2f hidden %.0f%%", rs->busy_max / rs->busy_mean, 100 * rs->hidden);
        if (!isnan(s->vloss)) printf(" | val loss %.6f", s->vloss);
        printf("\n");
        fflush(stdout);
    }
    FILE* f = r->metrics;
    fprintf(f, "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens_per_s\": %.3f, "
            "\"gflops\": %.4f, \"step_ms\": %.3f, \"tokens_seen\": %lld",
            step + 1, s->loss, s->lr, s->gnorm, tps, gflops, s->dt * 1e3, cursor * (long long)T);
    if (have_ring) fprintf(f, ", \"cp_busy_max_s\": %.6f, \"cp_busy_mean_s\": %.6f, \"cp_imbalance\": %.4f, "
                           "\"cp_wait_max_s\": %.6f, \"cp_hidden\": %.4f", rs->busy_max, rs->busy_mean,
                           rs->busy_max / rs->busy_mean, rs->wait_max, rs->hidden);
    if (!isnan(s->vloss)) fprintf(f, ", \"val_loss\": %.9g", s->vloss);
    if (s->vr.checked) fprintf(f, ", \"verify_max_abs\": %.3e, \"verify_max_rel\": %.3e", s->vr.max_abs, s->vr.max_rel);
    fprintf(f, "}\n");
    fflush(f);
}

// a checkpoint of the state after `step` steps (collective; a failure ends the job with one line)
static void save(Run* r, int step, long long cursor) {
    r->ts.step = step; r->ts.cursor = cursor; r->ts.tokens_seen = cursor * (long long)r->c.seq_len;
    double t1 = now_s();
    int fail = ckpt_save(r->c.out_dir, r->c.keep_last, &r->m, &r->opt, &r->g, &r->ts, msg, sizeof msg);
    grid_check(r->g.world_g, fail, msg);
    if (r->rank0) { printf("saved checkpoint %s/ckpt_%08d.h5 (%.2f s)\n", r->c.out_dir, step, now_s() - t1); fflush(stdout); }
}

// ---- setup -----------------------------------------------------------------------------------------------

// the grid, the backend, the data, the out_dir check; a failure ends the job with one line
static void setup_layout(Run* r, const Group* world) {
    Config* c = &r->c;
    int fail = comm_set_transport(c->comm, msg, sizeof msg);
    grid_check(world, fail, msg);
    fail = grid_build(&r->g, c->tp, c->cp, msg, sizeof msg);
    grid_check(world, fail, msg);
    fail = be_init(r->g.local_rank, msg, sizeof msg);
    grid_check(world, fail, msg);
    r->accum = c->batch_size / (c->micro_batch * r->g.dp);
    if (r->accum * c->micro_batch * r->g.dp != c->batch_size) {
        snprintf(msg, sizeof msg, "train: batch_size = %d is not a multiple of micro_batch * dp = %d * %d",
                 c->batch_size, c->micro_batch, r->g.dp);
        grid_check(world, 1, msg);
    }
    r->rank0 = r->g.rank == 0;
    fail = loader_open(&r->train, c->train_data, c->seq_len, c->vocab_size, c->shuffle, (uint64_t)c->seed);
    if (fail) snprintf(msg, sizeof msg, "train: %s", r->train.err);
    grid_check(world, fail, msg);
    r->have_val = c->val_data[0] != 0;
    fail = r->have_val && loader_open(&r->val, c->val_data, c->seq_len, c->vocab_size, 0, 0);
    if (fail) snprintf(msg, sizeof msg, "train: %s", r->val.err);
    grid_check(world, fail, msg);
}

// out_dir: created and checked now; nothing in it is written until the checkpoint (if any) has loaded,
// so a refused resume leaves every existing file untouched
static void check_out_dir(Run* r, int force, const char* metrics_path) {
    int fail = 0;
    if (r->rank0) {
        struct stat st;
        fail = make_dirs("train: out_dir", r->c.out_dir, msg, sizeof msg);
        if (!fail && !force && !r->c.resume[0] && stat(metrics_path, &st) == 0) {
            snprintf(msg, sizeof msg, "train: '%s' exists from an earlier run; choose another out_dir or pass --force", metrics_path);
            fail = 1;
        }
    }
    grid_check(r->g.world_g, fail, msg);
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
}

// rank 0: metrics.jsonl and config.txt, now that the run's starting state is settled
static void open_outputs(Run* r, const char* metrics_path) {
    int fail = 0;
    if (r->rank0) {
        char path[CFG_STR + 64];
        if (!(r->metrics = fopen(metrics_path, r->c.resume[0] ? "a" : "w"))) {
            snprintf(msg, sizeof msg, "train: cannot write '%s': %s", metrics_path, strerror(errno));
            fail = 1;
        }
        snprintf(path, sizeof path, "%s/config.txt", r->c.out_dir);
        FILE* cf = fail ? NULL : fopen(path, "w");
        if (!fail && !cf) { snprintf(msg, sizeof msg, "train: cannot write '%s': %s", path, strerror(errno)); fail = 1; }
        if (cf) { config_write(&r->c, cf); fclose(cf); }
    }
    grid_check(r->g.world_g, fail, msg);
}

static void print_banner(const Run* r) {
    const Config* c = &r->c;
    int T = c->seq_len, Tl = T / r->g.cp;
    printf("ringlm train | backend %s | %d rank%s x %d threads\n", be_name(), r->g.world, r->g.world > 1 ? "s" : "",
           omp_get_max_threads());
    grid_print(&r->g);
    config_write(c, stdout);
    printf("params %zu (%.2f M) | train %lld tokens, %lld sequences of %d | %d tokens per rank | "
           "accumulation %d x %d sequences x dp %d\n", r->m.pt.total, r->m.pt.total / 1e6, (long long)r->train.n_tokens,
           (long long)r->train.n_seq, T, Tl, r->accum, c->micro_batch, r->g.dp);
    if (r->g.cp > 1 && Tl < 512)
        printf("note: %d tokens per rank: below ~512 the ring's per-step compute is too short to hide its "
               "communication; a smaller cp is likely faster\n", Tl);
    fflush(stdout);
}

// memory of each rank: planned arenas and the measured peak resident set
static void print_memory(const Run* r) {
    const Group* w = r->g.world_g;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    ModelMemory mm = model_memory(&r->m);
    double rss = ru.ru_maxrss / 1024.0, rss_max = ctl_max(w, rss), rss_min = -ctl_max(w, -rss);
    double mib = 1.0 / 1048576.0;
    double obytes = ctl_max(w, 2.0 * r->opt.shard * sizeof(float));
    double pmax = ctl_max(w, (double)mm.params), gmax = ctl_max(w, (double)mm.grads);
    double amax = ctl_max(w, (double)mm.acts), ringmax = ctl_max(w, (double)mm.ring);
    if (r->rank0)
        printf("memory per rank: params %.2f MiB, grads %.2f MiB, AdamW moments %.2f MiB, activations %.1f MiB, "
               "ring buffers %.1f MiB, peak RSS %.1f MiB (max over ranks; min %.1f)\n", pmax * mib, gmax * mib,
               obytes * mib, amax * mib, ringmax * mib, rss_max, rss_min);
}

int main(int argc, char** argv) {
    grid_mpi_init(&argc, &argv);
    const Group* world = group_world();
    static Run run;
    Run* r = &run;
    int force = 0, help = 0;
    int fail = parse_args(argc, argv, &r->c, &force, &help);
    if (help) { if (group_rank(world) == 0) usage(stdout); grid_exit(0); }
    grid_check(world, fail, msg);
    const Config* c = &r->c;
    setup_layout(r, world);
    char metrics_path[CFG_STR + 64];
    snprintf(metrics_path, sizeof metrics_path, "%s/metrics.jsonl", c->out_dir);
    check_out_dir(r, force, metrics_path);

    // the model (this rank's share of each sequence) and the optimizer
    ModelGroups mg = { r->g.tp > 1 ? r->g.tp_g : NULL, r->g.cp_g, c->zero ? r->g.dpcp_g : NULL };
    model_build(&r->m, c, c->micro_batch, c->seq_len, &mg);
    adamw_init(&r->opt, &r->m, r->g.dpcp_g, c->zero);
    ckpt_init();
    if (c->resume[0]) resume(r);
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
    signal(SIGUSR1, on_stop_signal);
    signal(SIGTERM, on_stop_signal);
    for (int step = step0; step < c->max_steps; step++) {
        StepResult s = train_step(r, step, &cursor);
        t_total += s.dt;
        RingStep rs = {0};
        if (have_ring) {
            rs = ring_step_stats(&s.rs, r->g.cp_g);
            busy_max_sum += rs.busy_max; busy_mean_sum += rs.busy_mean; hidden_sum += rs.hidden;
        }
        last_loss = s.loss;
        if (r->have_val && ((c->val_every && (step + 1) % c->val_every == 0) || step + 1 == c->max_steps))
            s.vloss = validate(r);
        if (have_ring && c->verify_attention && (step + 1) % c->verify_attention == 0)
            s.vr = model_verify_attention(&r->m, r->g.world_g, step + 1);
        done_steps = step + 1;
        int stop = (int)ctl_max(r->g.world_g, (double)stop_signal);   // every rank stops at the same step
        if ((c->ckpt_every && (step + 1) % c->ckpt_every == 0) || (stop && step + 1 < c->max_steps)) {
            save(r, step + 1, cursor);
            saved_at = step + 1;
        }
        if (r->rank0 && stop) printf("stopping after step %d on signal %d: checkpoint saved; continue with --resume latest\n",
                                     step + 1, stop);
        if (r->rank0) log_step(r, step, &s, &rs, have_ring, cursor, stop);
        if (stop) break;
    }
    if (saved_at != done_steps) save(r, done_steps, cursor);   // the final checkpoint (max_steps 0: the fresh model)
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
        // under ZeRO-1 each rank holds only its own shard of the reduced gradient: assemble the whole
        if (r->opt.zg) comm_allgather(r->opt.zg, r->m.grads, r->opt.shard);
        FILE* f = r->rank0 ? dump_open(c->dump_weights) : NULL;
        if (r->rank0 && !f) fprintf(stderr, "train: cannot write dump_weights '%s': %s\n", c->dump_weights, strerror(errno));
        dump_arena(f, &r->m, "param", r->m.params);
        dump_arena(f, &r->m, "grad", r->m.grads);
        if (f) fclose(f);
    }
    if (r->metrics) fclose(r->metrics);
    adamw_free(&r->opt);
    model_free(&r->m);
    loader_close(&r->train);
    if (r->have_val) loader_close(&r->val);
    grid_exit(0);
}
