// plan.c — build/plan: what one training step needs per rank, before running it.
//   build/plan -c CONFIG [--key value ...] [--dp N] [--device h200|cpu] [--memory_gib G] [--link_gbs B]
//              [--tflops F] [--json]
// Config keys (tp, cp, zero, micro_batch, seq_len, recompute, ...) come from the config and the command line
// as for build/train; --dp is the data-parallel degree (train takes it from the world size). --device picks
// the defaults: h200 (139 GiB usable, NVLink 450 GB/s per direction, attention at 350 TFLOP/s, the CUDA
// backend's workspace) or cpu (this machine's MemTotal, 10 GB/s shared memory, 0.05 TFLOP/s).
// Prints per rank: parameters, gradients, AdamW moments (after ZeRO-1), activations kept, the one-layer
// working set, scratch, ring buffers, backend workspace, the total against the memory; the longest seq_len
// that fits for each recompute mode; per step: ring, TP and DP bytes, FLOPs, and one ring hop's transfer
// against the attention it overlaps. The numbers are model_shape's — the plan model_build allocates.
//   build/plan -c CONFIG [--key value ...] --balance [--windows N] [--dp N] [--json]
// reads the run's training windows instead (train_data with its seq_len, pack, shuffle, seed, doc_mask) and prints
// per cp rank the attention work and the ring bytes it sends, as the model deals the tokens (cp_shard) and the ring
// decides on them (cp_layout, cp_comm, cp_prune): model/balance.h.
#include "backend/backend.h"
#include "common/util.h"
#include "model/config.h"
#include "model/balance.h"
#include "model/plan.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)


// --balance: per cp rank, the work and ring bytes of the first `windows` training windows
static int print_balance(const Config* c, int dp, int windows, int json) {
    Balance b;
    char err[1500];
    if (balance_run(&b, c, dp, windows, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    double tot = 0, sent = 0, full = 0, dead = 0;
    for (int r = 0; r < b.P; r++) { tot += b.work[r]; sent += b.sent[r]; full += b.full[r]; dead += b.dead[r]; }
    double imb = b.sum_mean > 0 ? b.sum_max / b.sum_mean : 1, n = b.windows;
    if (json) {
        printf("{\"windows\": %d, \"cp\": %d, \"a2a\": %d, \"ring\": %d, \"imbalance\": %.6f, \"imbalance_worst\": %.6f, "
               "\"ring_bytes\": %.0f, \"ring_bytes_full\": %.0f, \"dead_bytes\": %.0f, \"kv_hops\": %.0f, \"kv_hops_blind\": %.0f, "
               "\"split_per_window\": %.4f, \"units_per_window\": %.4f, \"work\": [", b.windows, b.P, b.U, b.R, imb, b.worst,
               sent / n, full / n, dead / n, b.kv_hops, b.kv_blind, b.split / n, b.units / n);
        for (int r = 0; r < b.P; r++) printf("%s%.0f", r ? ", " : "", b.work[r] / n);
        printf("], \"sent\": [");
        for (int r = 0; r < b.P; r++) printf("%s%.0f", r ? ", " : "", b.sent[r] / n);
        printf("], \"step_hop_bytes_rank0\": [");
        for (int s = 0; s < b.steps; s++) printf("%s%.0f", s ? ", " : "", b.step_rank0[s]);
        printf("]}\n");
        balance_free(&b);
        return 0;
    }
    printf("balance: %d windows of %s\n", b.windows, b.data_note);
    printf("  cp %d (%s, %s%s), cp_shard %s", b.P, c->cp_layout, c->cp_comm, b.U > 1 ? " over all-to-all groups" : "", c->cp_shard);
    if (!strcmp(c->cp_shard, "document")) printf(" (cp_shard_min %d; %.1f of %.1f units of work split per window)", config_shard_min(c), b.split / n, b.units / n);
    printf(", %s schedule, doc_mask %d\n", c->cp_prune ? "pruned" : "full", c->doc_mask);
    printf("\n  cp rank   attention work (M pairs / window)   share    ring KiB / layer / window   of them dead\n");
    for (int r = 0; r < b.P; r++)
        printf("  %7d   %32.3f   %5.1f%%   %25.1f   %11.1f%%\n", r, b.work[r] / n / 1e6, tot > 0 ? 100 * b.work[r] / tot : 0,
               b.sent[r] / n / 1024, b.sent[r] > 0 ? 100 * b.dead[r] / b.sent[r] : 0);
    printf("\n  imbalance (max / mean work, over the windows): %.3f (worst window %.3f)\n", imb, b.worst);
    if (b.R > 1)
        printf("  ring bytes: %.1f KiB / layer / window over the %d ranks (full schedule %.1f: %.1f%% saved); %.1f%% of the "
               "forward K/V hops carry a block no rank at or beyond can see; %.1f%% of the bytes sent carry no visible key\n",
               sent / n / 1024, b.P, full / n / 1024, full > 0 ? 100 * (1 - sent / full) : 0,
               b.kv_hops > 0 ? 100 * b.kv_blind / b.kv_hops : 0, sent > 0 ? 100 * dead / sent : 0);
    balance_free(&b);
    return 0;
}

static int positive(const char* opt, const char* v, double* out) {
    char* e;
    double x = strtod(v, &e);
    if (e == v || *e || !(x > 0) || x > 1e12) { fprintf(stderr, "plan: %s '%s' must be a positive number\n", opt, v); return 0; }
    *out = x;
    return 1;
}

int main(int argc, char** argv) {
    stdout_lines();   // each line appears when printed, also into a file or pipe
    Config c;
    char err[1024];
    config_defaults(&c);
    const char* device = "h200";
    double mem = 0, link = 0, tflops = 0, dp = 1;
    int json = 0, balance = 0, windows = 64;
    // --name value or --name=value, dashes for underscores (config_argv); plan's own options besides the keys
    static const char* const FLAGS[] = { "--json", "--balance", "--help", "-h", NULL };
    static const char* const OWN[] = { "dp", "device", "memory_gib", "link_gbs", "tflops", "json", "balance", "windows", "help", NULL };
    argc = config_argv(argc, argv, FLAGS, &argv, err, sizeof err);
    if (argc < 0) { fprintf(stderr, "plan: %s\n", err); return 1; }
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (!strcmp(a, "--balance")) { balance = 1; continue; }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: build/plan -c CONFIG [--key value ...] [--dp N] [--device h200|cpu] [--memory_gib G] "
                   "[--link_gbs B] [--tflops F] [--json]\n"
                   "       build/plan -c CONFIG [--key value ...] --balance [--windows N] [--dp N] [--json]\n"
                   "--balance: per cp rank, the attention work and ring bytes of the first N (default 64; 0: all) training\n"
                   "windows of train_data, as the model deals them (cp_shard) and the ring sends them (cp_prune)\n"
                   "Options may also be written --name=value, and dashes may stand for underscores (--memory-gib=80);\n"
                   "the config keys are build/train's (build/train --help lists them).\n");
            return 0;
        }
        if (!strncmp(a, "--", 2) && !config_key_kind(a + 2) && strcmp(a, "--device") && strcmp(a, "--memory_gib") &&
            strcmp(a, "--link_gbs") && strcmp(a, "--tflops") && strcmp(a, "--dp") && strcmp(a, "--windows")) {
            config_unknown("command line", a + 2, OWN, err, sizeof err);
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        if (i + 1 >= argc) { fprintf(stderr, "plan: option %s needs a value\n", a); return 1; }
        const char* v = argv[++i];
        if (!strcmp(a, "-c")) { if (config_load_file(&c, v, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; } }
        else if (!strcmp(a, "--device")) {
            if (strcmp(v, "h200") && strcmp(v, "cpu")) { fprintf(stderr, "plan: --device '%s' must be h200 or cpu\n", v); return 1; }
            device = v;
        }
        else if (!strcmp(a, "--memory_gib")) { if (!positive(a, v, &mem)) return 1; mem *= GIB; }
        else if (!strcmp(a, "--link_gbs")) { if (!positive(a, v, &link)) return 1; }
        else if (!strcmp(a, "--tflops")) { if (!positive(a, v, &tflops)) return 1; }
        else if (!strcmp(a, "--windows")) {
            char* e;
            long x = strtol(v, &e, 10);
            if (e == v || *e || x < 0 || x > 100000000) { fprintf(stderr, "plan: --windows '%s' must be a count >= 0 (0: all)\n", v); return 1; }
            windows = (int)x;
        }
        else if (!strcmp(a, "--dp")) {
            char* e;
            dp = strtod(v, &e);
            if (e == v || *e || !(dp >= 1) || dp > 1e9 || dp != (int)dp) { fprintf(stderr, "plan: --dp '%s' must be a positive integer\n", v); return 1; }
        }
        else if (!strncmp(a, "--", 2)) { if (config_set(&c, a + 2, v, "command line", err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; } }
        else { fprintf(stderr, "plan: unexpected argument '%s'\n", a); return 1; }
    }
    int gpu = !strcmp(device, "h200");
    if (!mem) mem = gpu ? 139 * GIB : meminfo_bytes("MemTotal");
    if (!link) link = gpu ? 450 : 10;
    if (!tflops) tflops = gpu ? 350 : 0.05;
    if (c.doc_mask && config_eod(&c) < 0) c.eod = 0;   // (the trainer takes eod from the data's meta.json; memory
                                                      // and time do not depend on it)
    if (balance) {
        if (!c.train_data[0]) { fprintf(stderr, "plan: --balance reads the run's training windows: give train_data\n"); return 1; }
        if (c.batch_size % (int)dp) { fprintf(stderr, "plan: batch_size %d is not divisible by --dp %d\n", c.batch_size, (int)dp); return 1; }
        return print_balance(&c, (int)dp, windows, json);
    }
    if (config_validate(&c, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    PlanLayout l = { c.tp, c.cp, (int)dp, c.zero, c.micro_batch, gpu ? "cuda" : "cpu", link, tflops };
    Plan p;
    if (plan_step(&p, &c, &l, c.seq_len, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    static const char* modes[] = { "none", "mlp", "qkv", "full" };
    int longest[4];
    for (int i = 0; i < 4; i++) longest[i] = plan_longest(&c, &l, modes[i], mem, 1 << 24);
    if (json) {
        printf("{\"seq_len\": %d, \"params\": %.0f, \"grads\": %.0f, \"moments\": %.0f, \"acts_kept\": %.0f, "
               "\"acts_work\": %.0f, \"acts_scratch\": %.0f, \"ring\": %.0f, \"workspace\": %.0f, \"total\": %.0f, "
               "\"memory\": %.0f, \"ring_sent\": %.0f, \"ring_msgs\": %.0f, \"a2a_sent\": %.0f, \"a2a_msgs\": %.0f, \"tp_payload\": %.0f, \"dp_payload\": %.0f, \"flops_model\": %.6g, "
               "\"flops_exec\": %.6g, \"hop_xfer_s\": %.6g, \"hop_compute_s\": %.6g, \"longest\": {\"none\": %d, "
               "\"mlp\": %d, \"qkv\": %d, \"full\": %d}}\n", c.seq_len, p.params, p.grads, p.moments, p.acts_kept,
               p.acts_work, p.acts_scratch, p.ring, p.workspace, p.total, mem, p.ring_sent, p.ring_msgs, p.a2a_sent,
               p.a2a_msgs, p.tp_payload,
               p.dp_payload, p.flops_model, p.flops_exec, p.hop_xfer_s, p.hop_compute_s, longest[0], longest[1],
               longest[2], longest[3]);
        return 0;
    }
    char cpd[64] = "";
    if (config_a2a(&c) > 1) snprintf(cpd, sizeof cpd, ", %s with all-to-all %d", c.cp_comm, config_a2a(&c));
    printf("plan: d_model %d, %d layers, vocab %d, seq_len %d; tp %d%s x cp %d (%s%s) x dp %d, zero %d, micro_batch %d, "
           "recompute %s; device %s (%.1f GiB)\n", c.d_model, c.n_layer, c.vocab_size, c.seq_len, c.tp,
           c.tp_sp && c.tp > 1 ? " (sequence parallel)" : "", c.cp, c.cp_layout, cpd, (int)dp, c.zero, c.micro_batch,
           c.recompute, device, mem / GIB);
    struct { const char* what; double v; } rows[] = {
        { "parameters", p.params }, { "gradients", p.grads }, { "AdamW moments", p.moments },
        { "activations kept (all layers)", p.acts_kept }, { "working set (one layer, recomputed)", p.acts_work },
        { "scratch (gradients in flight, LM-head chunk, RoPE)", p.acts_scratch }, { "ring and all-to-all buffers", p.ring },
        { "backend workspace", p.workspace } };
    printf("\nper rank                                              GiB\n");
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) printf("  %-50s %9.3f\n", rows[i].what, rows[i].v / GIB);
    printf("  %-50s %9.3f  %s (%.1f GiB available)\n", "total", p.total / GIB, p.total <= mem ? "fits" : "DOES NOT FIT",
           mem / GIB);
    printf("\nlongest seq_len that fits this layout: none %d, mlp %d, qkv %d, full %d\n", longest[0], longest[1],
           longest[2], longest[3]);
    printf("\nper step per rank (%d micro-batches): ring sends %.3f GiB in %.0f hops, all-to-all %.3f GiB in %.0f messages, "
           "TP %s %.3f GiB, DP/ZeRO reduces %.3f GiB%s (the ring: its full schedule; with cp_prune = 1 it sends less where ranks "
           "cannot see each other's keys, as --balance measures on the data);\n"
           "  %.3f TFLOP model, %.3f TFLOP executed (recomputation included)\n", p.accum, p.ring_sent / GIB, p.ring_msgs,
           p.a2a_sent / GIB, p.a2a_msgs, c.tp_sp && c.tp > 1 ? "all-gathers + reduce-scatters" : "all-reduces",
           p.tp_payload / GIB, p.dp_payload / GIB, c.zero && dp * c.cp > 1 ? " (reduce-scatter) + the same all-gathered" : "",
           p.flops_model / 1e12, p.flops_exec / 1e12);
    if (c.cp / config_a2a(&c) > 1)
        printf("ring hop: %.3f ms transfer at %.0f GB/s against %.3f ms of attention at %.3g TFLOP/s: %s\n",
               p.hop_xfer_s * 1e3, link, p.hop_compute_s * 1e3, tflops,
               p.hop_xfer_s <= p.hop_compute_s ? "hidden" : "exposed (the ring is too fine for this link)");
    return 0;
}
