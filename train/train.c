// train.c — build/train: the training driver.
//   build/train -c CONFIG [--key value ...] [--force]
// One optimizer step = batch_size sequences (global), run as micro-batches of micro_batch sequences with
// gradient accumulation; the loss is the mean over every target token of the step.
#include "data/shards.h"
#include "model/backend.h"
#include "model/config.h"
#include "model/model.h"
#include "train/optim.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <omp.h>

static void usage(FILE* f) {
    fprintf(f,
        "usage: build/train -c CONFIG [--key value ...] [--force]\n"
        "Trains a Llama-style model on token shards (see README). Every config key below can be given in the\n"
        "config file as `key = value` or overridden on the command line as `--key value`.\n"
        "  -c FILE                     config file (plain `key = value` lines, '#' comments)\n"
        "  --force                     reuse an out_dir that already holds metrics.jsonl (it is replaced)\n"
        "  --help                      this text\n"
        "config keys:\n");
    config_help(f);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

// mkdir -p; returns 0 or prints one line
static int make_dirs(const char* path) {
    char buf[CFG_STR];
    snprintf(buf, sizeof buf, "%s", path);
    for (char* p = buf + 1; ; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p; *p = 0;
            if (mkdir(buf, 0755) && errno != EEXIST) {
                fprintf(stderr, "train: cannot create out_dir '%s': %s\n", buf, strerror(errno));
                return 1;
            }
            *p = c;
            if (!c) break;
        }
    }
    struct stat st;
    if (stat(path, &st) || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "train: out_dir '%s' is not a directory\n", path);
        return 1;
    }
    return 0;
}

// The data of one step, fetched up front: batch_size windows of seq_len + 1 tokens from the global cursor.
typedef struct { int32_t* win; int* tok; int* tgt; int* pos; } Batch;

static int fetch_windows(Loader* ld, long long g0, int n, int T, int32_t* win) {
    for (int i = 0; i < n; i++)
        if (loader_get(ld, g0 + i, win + (size_t)i * (T + 1))) { fprintf(stderr, "train: %s\n", ld->err); return 1; }
    return 0;
}

// split windows [i0, i0+B) into model inputs (tokens, targets, positions 0..T-1)
static void make_inputs(const int32_t* win, int i0, int B, int T, int* tok, int* tgt, int* pos) {
    for (int b = 0; b < B; b++) {
        const int32_t* w = win + (size_t)(i0 + b) * (T + 1);
        for (int t = 0; t < T; t++) {
            tok[b * T + t] = w[t]; tgt[b * T + t] = w[t + 1]; pos[b * T + t] = t;
        }
    }
}

// mean validation loss over val_batches * batch_size sequences from the start of the validation set
static double validate(Model* m, Loader* val, const Config* c, Batch* bt) {
    int B = c->micro_batch, T = c->seq_len;
    long long n = (long long)c->val_batches * c->batch_size;
    if (n > val->n_seq) n = val->n_seq;
    n = n / B * B;
    if (n == 0) n = B;   // loader_get wraps around a tiny validation set
    double sum = 0; long long count = 0;
    for (long long g = 0; g < n; g += B) {
        if (fetch_windows(val, g, B, T, bt->win)) exit(1);
        make_inputs(bt->win, 0, B, T, bt->tok, bt->tgt, bt->pos);
        model_set_batch(m, bt->tok, bt->tgt, bt->pos);
        sum += model_forward(m, 0.0f, NULL);
        for (int i = 0; i < B * T; i++) count += bt->tgt[i] >= 0;
    }
    return sum / (double)(count ? count : 1);
}

int main(int argc, char** argv) {
    Config c;
    config_defaults(&c);
    int force = 0, have_config = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!strcmp(a, "--force")) { force = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "train: option '%s' needs a value (see --help)\n", a); return 1; }
        if (!strcmp(a, "-c")) { if (config_load_file(&c, argv[++i])) return 1; have_config = 1; }
        else if (!strncmp(a, "--", 2)) { if (config_set(&c, a + 2, argv[++i], "command line")) return 1; }
        else { fprintf(stderr, "train: unexpected argument '%s' (see --help)\n", a); return 1; }
    }
    if (!have_config) fprintf(stderr, "train: no -c CONFIG given: using defaults and command-line keys\n");
    if (config_validate(&c)) return 1;
    if (!c.train_data[0]) { fprintf(stderr, "train: train_data is not set (a shard pattern, directory or file)\n"); return 1; }

    Loader train, val;
    if (loader_open(&train, c.train_data, c.seq_len, c.vocab_size, c.shuffle, (uint64_t)c.seed)) {
        fprintf(stderr, "train: %s\n", train.err); return 1;
    }
    int have_val = c.val_data[0] != 0;
    if (have_val && loader_open(&val, c.val_data, c.seq_len, c.vocab_size, 0, 0)) {
        fprintf(stderr, "train: %s\n", val.err); return 1;
    }
    if (make_dirs(c.out_dir)) return 1;
    char path[CFG_STR + 64];
    snprintf(path, sizeof path, "%s/metrics.jsonl", c.out_dir);
    struct stat st;
    if (!force && stat(path, &st) == 0) {
        fprintf(stderr, "train: '%s' exists from an earlier run; choose another out_dir or pass --force\n", path);
        return 1;
    }
    FILE* metrics = fopen(path, "w");
    if (!metrics) { fprintf(stderr, "train: cannot write '%s': %s\n", path, strerror(errno)); return 1; }
    snprintf(path, sizeof path, "%s/config.txt", c.out_dir);
    FILE* cf = fopen(path, "w");
    if (!cf) { fprintf(stderr, "train: cannot write '%s': %s\n", path, strerror(errno)); return 1; }
    config_write(&c, cf);
    fclose(cf);

    int dp = 1;
    int accum = c.batch_size / (c.micro_batch * dp);
    if (accum * c.micro_batch * dp != c.batch_size) {
        fprintf(stderr, "train: batch_size = %d is not a multiple of micro_batch * dp = %d * %d\n",
                c.batch_size, c.micro_batch, dp);
        return 1;
    }
    int B = c.micro_batch, T = c.seq_len;
    Model m;
    model_build(&m, &c, B, T, 1, 0);
    AdamW opt;
    adamw_init(&opt, &m);

    printf("ringlm train | backend %s | threads %d\n", be_name(), omp_get_max_threads());
    config_write(&c, stdout);
    printf("params %zu (%.2f M) | train %lld tokens, %lld sequences of %d | accumulation %d x %d sequences\n",
           m.pt.total, m.pt.total / 1e6, (long long)train.n_tokens, (long long)train.n_seq, T, accum, B);
    fflush(stdout);

    Batch bt;
    bt.win = malloc((size_t)c.batch_size * (T + 1) * sizeof(int32_t));
    bt.tok = malloc((size_t)B * T * sizeof(int)); bt.tgt = malloc((size_t)B * T * sizeof(int));
    bt.pos = malloc((size_t)B * T * sizeof(int));
    double flops_tok = model_flops_per_token(&c, T);
    long long cursor = 0;       // global data cursor: index of the next training sequence
    double t_total = 0, last_loss = NAN;
    for (int step = 0; step < c.max_steps; step++) {
        double t0 = now_s();
        if (fetch_windows(&train, cursor, c.batch_size, T, bt.win)) return 1;
        long long valid = 0;
        for (int i = 0; i < c.batch_size; i++)
            for (int t = 1; t <= T; t++) valid += bt.win[(size_t)i * (T + 1) + t] >= 0;
        float gscale = 1.0f / (float)(valid ? valid : 1);
        model_zero_grad(&m);
        double loss_sum = 0;
        for (int a = 0; a < accum; a++) {
            make_inputs(bt.win, a * B, B, T, bt.tok, bt.tgt, bt.pos);
            model_set_batch(&m, bt.tok, bt.tgt, bt.pos);
            loss_sum += model_forward(&m, gscale, NULL);
            model_backward(&m);
        }
        cursor += c.batch_size;
        double loss = loss_sum / (double)(valid ? valid : 1);
        double gnorm = grad_global_norm(&m);
        if (!isfinite(loss) || !isfinite(gnorm)) {
            fprintf(stderr, "train: step %d: loss %g, grad norm %g is not finite; lower lr or check the data\n",
                    step + 1, loss, gnorm);
            return 1;
        }
        float lr = lr_at(&c, step);
        adamw_step(&opt, &m, lr, gnorm);
        double dt = now_s() - t0;
        t_total += dt;
        double tps = (double)c.batch_size * T / dt, gflops = tps * flops_tok / 1e9;
        last_loss = loss;
        double vloss = NAN;
        int last = step + 1 == c.max_steps;
        if (have_val && ((c.val_every && (step + 1) % c.val_every == 0) || last))
            vloss = validate(&m, &val, &c, &bt);
        if ((step + 1) % c.log_every == 0 || last || !isnan(vloss)) {
            printf("step %5d/%d | loss %.6f | lr %.3e | grad norm %.4f | %.0f tok/s | %.2f GFLOP/s | %.1f ms",
                   step + 1, c.max_steps, loss, lr, gnorm, tps, gflops, dt * 1e3);
            if (!isnan(vloss)) printf(" | val loss %.6f", vloss);
            printf("\n");
            fflush(stdout);
        }
        fprintf(metrics, "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens_per_s\": %.3f, "
                "\"gflops\": %.4f, \"step_ms\": %.3f, \"tokens_seen\": %lld",
                step + 1, loss, lr, gnorm, tps, gflops, dt * 1e3, cursor * (long long)T);
        if (!isnan(vloss)) fprintf(metrics, ", \"val_loss\": %.9g", vloss);
        fprintf(metrics, "}\n");
        fflush(metrics);
    }
    if (c.max_steps > 0)
        printf("done: %d steps, final loss %.6f, mean %.0f tok/s, outputs in %s/\n", c.max_steps, last_loss,
               (double)c.max_steps * c.batch_size * T / t_total, c.out_dir);
    fclose(metrics);
    adamw_free(&opt);
    model_free(&m);
    loader_close(&train);
    if (have_val) loader_close(&val);
    return 0;
}
