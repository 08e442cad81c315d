// train.c — build/train: the training driver.
//   [mpirun -np WORLD] build/train -c CONFIG [--key value ...] [--force]
// One optimizer step = batch_size sequences (global), split over dp replicas, run as micro-batches of
// micro_batch sequences with gradient accumulation; each sequence is split over the cp ranks of a ring.
// The loss is the mean over every target token of the step.
#include "comm/grid.h"
#include "data/shards.h"
#include "model/backend.h"
#include "model/config.h"
#include "model/model.h"
#include "train/optim.h"
#include "train/verify.h"
#include "train/dump.h"
#include "train/files.h"
#include "checkpoint/ckpt.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
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

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
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
        if (!strcmp(a, "-c")) rc = config_load_file(c, argv[++i]);
        else if (!strncmp(a, "--", 2)) rc = config_set(c, a + 2, argv[++i], "command line");
        else { snprintf(msg, sizeof msg, "train: unexpected argument '%s' (see --help)", a); return 1; }
        if (rc) { snprintf(msg, sizeof msg, "%s", config_error()); return 1; }
    }
    if (config_validate(c)) { snprintf(msg, sizeof msg, "%s", config_error()); return 1; }
    if (!c->train_data[0]) { snprintf(msg, sizeof msg, "train: train_data is not set (a shard pattern, directory or file)"); return 1; }
    return 0;
}

// ---- the data of one step ----
typedef struct {
    int32_t* win;                   // [batch_size, seq_len + 1] windows of the step (all ranks fetch all)
    int *tok, *tgt, *pos;           // [B, Tl] this rank's share of one micro-batch
    int* lpos;                      // [Tl] this rank's positions within a sequence (the ring layout)
    int Tl;
} Batch;

static int fetch_windows(Loader* ld, long long g0, int n, int T, int32_t* win) {
    for (int i = 0; i < n; i++)
        if (loader_get(ld, g0 + i, win + (size_t)i * (T + 1))) { snprintf(msg, sizeof msg, "train: %s", ld->err); return 1; }
    return 0;
}

// this rank's tokens of windows [i0, i0+B): token at position p, target p+1, position p
static void make_inputs(const Batch* bt, int i0, int B, int T) {
    for (int b = 0; b < B; b++) {
        const int32_t* w = bt->win + (size_t)(i0 + b) * (T + 1);
        for (int t = 0; t < bt->Tl; t++) {
            int p = bt->lpos[t];
            bt->tok[b * bt->Tl + t] = w[p]; bt->tgt[b * bt->Tl + t] = w[p + 1]; bt->pos[b * bt->Tl + t] = p;
        }
    }
}

// mean validation loss over val_batches * batch_size sequences from the start of the validation set,
// split over the dp replicas like training
static double validate(Model* m, Loader* val, const Config* c, const Grid* g, Batch* bt) {
    int B = c->micro_batch, T = c->seq_len;
    long long n = (long long)c->val_batches * c->batch_size;
    if (n > val->n_seq) n = val->n_seq;
    n = n / (B * g->dp) * (B * g->dp);
    if (n == 0) n = (long long)B * g->dp;   // loader_get wraps around a tiny validation set
    double sum = 0;
    long long count = 0;
    for (long long g0 = 0; g0 < n; g0 += (long long)B * g->dp) {
        int fail = fetch_windows(val, g0, B * g->dp, T, bt->win);
        grid_check(&g->world_g, fail, msg);
        make_inputs(bt, g->dp_rank * B, B, T);
        model_set_batch(m, bt->tok, bt->tgt, bt->pos);
        sum += model_forward(m, 0.0f, NULL);
        for (int i = 0; i < B * g->dp; i++)
            for (int t = 1; t <= T; t++) count += bt->win[(size_t)i * (T + 1) + t] >= 0;
    }
    sum = comm_sum_double(&g->dpcp_g, sum);
    return sum / (double)(count ? count : 1);
}

// ring statistics of this step over the ring: load imbalance = max/mean attention busy (CPU) time;
// hidden fraction = 1 - exposed communication / un-overlapped communication
typedef struct { double busy_max, busy_mean, wait_max, hidden; } RingStep;
static RingStep ring_step_stats(const Ring* R, const RingStats* before, const Group* cp) {
    RingStep s = {0};
    double busy = R->st.compute_cpu_s - before->compute_cpu_s, wait = R->st.wait_s - before->wait_s;
    double exposed = R->st.exposed_s - before->exposed_s;
    long long xfers = R->st.transfers - before->transfers;
    s.busy_max = comm_max_double(cp, busy);
    s.busy_mean = comm_sum_double(cp, busy) / cp->size;
    s.wait_max = comm_max_double(cp, wait);
    double comm_total = comm_sum_double(cp, xfers * R->st.xfer_s), exposed_total = comm_sum_double(cp, exposed);
    s.hidden = comm_total > 0 ? 1.0 - exposed_total / comm_total : 1.0;
    if (s.hidden < 0) s.hidden = 0;
    return s;
}

int main(int argc, char** argv) {
    grid_mpi_init(&argc, &argv);
    Group world = group_world();
    Config c;
    int force = 0, help = 0;
    int fail = parse_args(argc, argv, &c, &force, &help);
    if (help) { if (world.rank == 0) usage(stdout); grid_exit(0); }
    grid_check(&world, fail, msg);

    Grid g;
    fail = grid_build(&g, c.tp, c.cp, msg, sizeof msg);
    grid_check(&world, fail, msg);
    int B = c.micro_batch, T = c.seq_len;
    int accum = c.batch_size / (c.micro_batch * g.dp);
    if (accum * c.micro_batch * g.dp != c.batch_size) {
        snprintf(msg, sizeof msg, "train: batch_size = %d is not a multiple of micro_batch * dp = %d * %d",
                 c.batch_size, c.micro_batch, g.dp);
        grid_check(&world, 1, msg);
    }
    int rank0 = g.rank == 0;

    Loader train, val;
    fail = loader_open(&train, c.train_data, c.seq_len, c.vocab_size, c.shuffle, (uint64_t)c.seed);
    if (fail) snprintf(msg, sizeof msg, "train: %s", train.err);
    grid_check(&world, fail, msg);
    int have_val = c.val_data[0] != 0;
    fail = have_val && loader_open(&val, c.val_data, c.seq_len, c.vocab_size, 0, 0);
    if (fail) snprintf(msg, sizeof msg, "train: %s", val.err);
    grid_check(&world, fail, msg);

    // out_dir: created and checked now; nothing in it is written until the checkpoint (if any) has loaded,
    // so a refused resume leaves every existing file untouched
    FILE* metrics = NULL;
    char metrics_path[CFG_STR + 64];
    snprintf(metrics_path, sizeof metrics_path, "%s/metrics.jsonl", c.out_dir);
    fail = 0;
    if (rank0) {
        struct stat st;
        fail = make_dirs("train: out_dir", c.out_dir, msg, sizeof msg);
        if (!fail && !force && !c.resume[0] && stat(metrics_path, &st) == 0) {
            snprintf(msg, sizeof msg, "train: '%s' exists from an earlier run; choose another out_dir or pass --force", metrics_path);
            fail = 1;
        }
    }
    grid_check(&world, fail, msg);

    // the ring and the model (this rank's share of each sequence)
    int layout = ring_layout_parse(c.cp_layout);
    Ring ring, *R = NULL;
    int Tl = T / g.cp;
    if (g.cp > 1) { ring_init(&ring, &g.cp_g, layout, T, B, c.n_kv_head / c.tp * (c.d_model / c.n_head)); R = &ring; }
    Model m;
    model_build(&m, &c, B, Tl, g.tp > 1 ? &g.tp_g : NULL, R);
    AdamW opt;
    adamw_init(&opt, &m, c.zero ? &g.dpcp_g : NULL);
    TrainState ts = {0};
    ckpt_init();
    if (c.resume[0]) {
        char cpath[CFG_STR + 600], notes[4096];
        fail = ckpt_resolve(c.resume, c.out_dir, cpath, sizeof cpath, msg, sizeof msg);
        grid_check(&world, fail, msg);
        double t0 = now_s();
        fail = ckpt_load(cpath, &m, &opt, &g, &ts, NULL, msg, sizeof msg, notes, sizeof notes);
        grid_check(&world, fail, msg);
        if (rank0) {
            printf("resumed from %s: step %lld, data cursor %lld, %lld tokens seen (%.2f s)\n", cpath, ts.step,
                   ts.cursor, ts.tokens_seen, now_s() - t0);
            if (notes[0]) printf("note: %s\n", notes);
        }
    }

    if (rank0) {   // the run's files, now that its starting state is settled
        char path[CFG_STR + 64];
        if (!(metrics = fopen(metrics_path, c.resume[0] ? "a" : "w"))) {
            snprintf(msg, sizeof msg, "train: cannot write '%s': %s", metrics_path, strerror(errno));
            fail = 1;
        }
        snprintf(path, sizeof path, "%s/config.txt", c.out_dir);
        FILE* cf = fail ? NULL : fopen(path, "w");
        if (!fail && !cf) { snprintf(msg, sizeof msg, "train: cannot write '%s': %s", path, strerror(errno)); fail = 1; }
        if (cf) { config_write(&c, cf); fclose(cf); }
    }
    grid_check(&world, fail, msg);
    if (rank0) {
        printf("ringlm train | backend %s | %d rank%s x %d threads\n", be_name(), g.world, g.world > 1 ? "s" : "",
               omp_get_max_threads());
        grid_print(&g);
        config_write(&c, stdout);
        printf("params %zu (%.2f M) | train %lld tokens, %lld sequences of %d | %d tokens per rank | "
               "accumulation %d x %d sequences x dp %d\n", m.pt.total, m.pt.total / 1e6, (long long)train.n_tokens,
               (long long)train.n_seq, T, Tl, accum, B, g.dp);
        if (g.cp > 1 && Tl < 512)
            printf("note: %d tokens per rank: below ~512 the ring's per-step compute is too short to hide its "
                   "communication; a smaller cp is likely faster\n", Tl);
        fflush(stdout);
    }

    Batch bt = { .Tl = Tl };
    bt.win = malloc((size_t)c.batch_size * (T + 1) * sizeof(int32_t));
    bt.tok = malloc((size_t)B * Tl * sizeof(int)); bt.tgt = malloc((size_t)B * Tl * sizeof(int));
    bt.pos = malloc((size_t)B * Tl * sizeof(int)); bt.lpos = malloc((size_t)Tl * sizeof(int));
    ring_positions(layout, g.cp, g.cp_rank, T, bt.lpos);
    double flops_tok = model_flops_per_token(&c, T);
    long long cursor = ts.cursor;   // global data cursor: index of the next training sequence
    double t_total = 0, last_loss = NAN, busy_max_sum = 0, busy_mean_sum = 0, hidden_sum = 0;
    int step0 = (int)ts.step, saved_at = c.resume[0] ? step0 : -1, done_steps = step0;
    signal(SIGUSR1, on_stop_signal);
    signal(SIGTERM, on_stop_signal);
    for (int step = step0; step < c.max_steps; step++) {
        double t0 = now_s();
        RingStats before = R ? R->st : (RingStats){0};
        fail = fetch_windows(&train, cursor, c.batch_size, T, bt.win);
        grid_check(&world, fail, msg);
        long long valid = 0;
        for (int i = 0; i < c.batch_size; i++)
            for (int t = 1; t <= T; t++) valid += bt.win[(size_t)i * (T + 1) + t] >= 0;
        float gscale = 1.0f / (float)(valid ? valid : 1);
        model_zero_grad(&m);
        double loss_sum = 0;
        for (int a = 0; a < accum; a++) {
            make_inputs(&bt, (g.dp_rank * accum + a) * B, B, T);
            model_set_batch(&m, bt.tok, bt.tgt, bt.pos);
            loss_sum += model_forward(&m, gscale, NULL);
            model_backward(&m);
        }
        // weights are replicated over the ring and the replicas: sum their gradients over dp x cp
        comm_allreduce_sum(&g.dpcp_g, m.grads, m.pt.total);
        loss_sum = comm_sum_double(&g.dpcp_g, loss_sum);
        cursor += c.batch_size;
        double loss = loss_sum / (double)(valid ? valid : 1);
        double gnorm = grad_global_norm(&m);
        if (!isfinite(loss) || !isfinite(gnorm)) {
            snprintf(msg, sizeof msg, "train: step %d: loss %g, grad norm %g is not finite; lower lr or check the data",
                     step + 1, loss, gnorm);
            grid_check(&world, 1, msg);
        }
        float lr = lr_at(&c, step);
        adamw_step(&opt, &m, lr, gnorm);
        double dt = comm_max_double(&world, now_s() - t0);
        t_total += dt;
        RingStep rs = {0};
        if (R) {
            rs = ring_step_stats(R, &before, &g.cp_g);
            busy_max_sum += rs.busy_max; busy_mean_sum += rs.busy_mean; hidden_sum += rs.hidden;
        }
        double tps = (double)c.batch_size * T / dt, gflops = tps * flops_tok / 1e9;
        last_loss = loss;
        double vloss = NAN;
        int last = step + 1 == c.max_steps;
        if (have_val && ((c.val_every && (step + 1) % c.val_every == 0) || last))
            vloss = validate(&m, &val, &c, &g, &bt);
        VerifyResult vr = {0};
        if (R && c.verify_attention && (step + 1) % c.verify_attention == 0) vr = verify_ring_attention(&m, &g, step + 1);
        done_steps = step + 1;
        int stop = (int)comm_max_double(&world, (double)stop_signal);   // every rank stops at the same step
        if ((c.ckpt_every && (step + 1) % c.ckpt_every == 0) || (stop && step + 1 < c.max_steps)) {
            ts.step = step + 1; ts.cursor = cursor; ts.tokens_seen = cursor * (long long)T;
            double t1 = now_s();
            fail = ckpt_save(c.out_dir, c.keep_last, &m, &opt, &g, &ts, msg, sizeof msg);
            grid_check(&world, fail, msg);
            saved_at = step + 1;
            if (rank0) { printf("saved checkpoint %s/ckpt_%08d.h5 (%.2f s)\n", c.out_dir, step + 1, now_s() - t1); fflush(stdout); }
        }
        if (rank0 && stop) printf("stopping after step %d on signal %d: checkpoint saved; continue with --resume latest\n",
                                  step + 1, stop);
        if (!rank0) { if (stop) break; continue; }
        if ((step + 1) % c.log_every == 0 || last || !isnan(vloss) || stop) {
            printf("step %5d/%d | loss %.6f | lr %.3e | grad norm %.4f | %.0f tok/s | %.2f GFLOP/s | %.1f ms",
                   step + 1, c.max_steps, loss, lr, gnorm, tps, gflops, dt * 1e3);
            if (R) printf(" | ring imbalance %.2f hidden %.0f%%", rs.busy_max / rs.busy_mean, 100 * rs.hidden);
            if (!isnan(vloss)) printf(" | val loss %.6f", vloss);
            printf("\n");
            fflush(stdout);
        }
        fprintf(metrics, "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens_per_s\": %.3f, "
                "\"gflops\": %.4f, \"step_ms\": %.3f, \"tokens_seen\": %lld",
                step + 1, loss, lr, gnorm, tps, gflops, dt * 1e3, cursor * (long long)T);
        if (R) fprintf(metrics, ", \"cp_busy_max_s\": %.6f, \"cp_busy_mean_s\": %.6f, \"cp_imbalance\": %.4f, "
                       "\"cp_wait_max_s\": %.6f, \"cp_hidden\": %.4f", rs.busy_max, rs.busy_mean,
                       rs.busy_max / rs.busy_mean, rs.wait_max, rs.hidden);
        if (!isnan(vloss)) fprintf(metrics, ", \"val_loss\": %.9g", vloss);
        if (vr.checked) fprintf(metrics, ", \"verify_max_abs\": %.3e, \"verify_max_rel\": %.3e", vr.max_abs, vr.max_rel);
        fprintf(metrics, "}\n");
        fflush(metrics);
        if (stop) break;
    }
    if (saved_at != done_steps) {   // the final checkpoint (max_steps 0: the fresh model)
        int end = done_steps;
        ts.step = end; ts.cursor = cursor; ts.tokens_seen = cursor * (long long)T;
        double t1 = now_s();
        fail = ckpt_save(c.out_dir, c.keep_last, &m, &opt, &g, &ts, msg, sizeof msg);
        grid_check(&world, fail, msg);
        if (rank0) printf("saved checkpoint %s/ckpt_%08d.h5 (%.2f s)\n", c.out_dir, end, now_s() - t1);
    }
    if (rank0 && done_steps > step0) {
        printf("done: %d steps, final loss %.6f, mean %.0f tok/s, outputs in %s/\n", done_steps, last_loss,
               (double)(done_steps - step0) * c.batch_size * T / t_total, c.out_dir);
        if (R)
            printf("ring (cp %d, %s): attention busy max/mean %.3f (load imbalance), communication hidden %.1f%% "
                   "(one hop %.3f ms un-overlapped)\n", g.cp, c.cp_layout, busy_max_sum / busy_mean_sum,
                   100 * hidden_sum / (done_steps - step0), R->st.xfer_s * 1e3);
    }
    // memory of each rank: planned arenas and the measured peak resident set
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss = ru.ru_maxrss / 1024.0, rss_max = comm_max_double(&world, rss);
    double rss_min = -comm_max_double(&world, -rss);
    double mib = 1.0 / 1048576.0, pbytes = (double)m.pt.total * sizeof(float);
    double obytes = comm_max_double(&world, 2.0 * (opt.hi - opt.lo) * sizeof(float));
    double pmax = comm_max_double(&world, pbytes);
    if (rank0)
        printf("memory per rank: params %.2f MiB, grads %.2f MiB, AdamW moments %.2f MiB, activations %.1f MiB, "
               "ring buffers %.1f MiB, peak RSS %.1f MiB (max over ranks; min %.1f)\n", pmax * mib, pmax * mib,
               obytes * mib, m.act_bytes * mib, R ? 4.0 * 2 * R->Tl * R->Hk * sizeof(float) * mib : 0.0, rss_max, rss_min);
    if (c.dump_weights[0]) {   // collective over each TP group; world rank 0 writes
        FILE* f = rank0 ? dump_open(c.dump_weights) : NULL;
        if (rank0 && !f) fprintf(stderr, "train: cannot write dump_weights '%s': %s\n", c.dump_weights, strerror(errno));
        dump_arena(f, &m, "param", m.params);
        dump_arena(f, &m, "grad", m.grads);
        if (f) fclose(f);
    }
    if (metrics) fclose(metrics);
    adamw_free(&opt);
    model_free(&m);
    if (R) ring_free(R);
    loader_close(&train);
    if (have_val) loader_close(&val);
    grid_exit(0);
}
