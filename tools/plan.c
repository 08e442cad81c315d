// plan.c — build/plan: what one training step needs per rank, before running it; and which memory options to use.
//   build/plan -c CONFIG [--key value ...] [--dp N] [--device h200|cpu] [--memory_gib G] [--host_gib G]
//              [--link_gbs B] [--tflops F] [--peak_tflops P] [--mfu M] [--pcie_gbs B] [--tile_rows R]
//              [--choose | --longest] [--json]
// Config keys (tp, cp, zero, micro_batch, seq_len, recompute, mlp_tile, offload, ...) come from the config and the
// command line as for build/train; --dp is the data-parallel degree (train takes it from the world size). --device
// picks the defaults: h200 (139 GiB usable, NVLink 450 GB/s per direction, attention at 350 TFLOP/s, the CUDA
// backend's workspace, 989 TFLOP/s dense peak at MFU 0.4, PCIe 5 at 55 GB/s per direction, 224 GiB of pinned host
// memory per GPU: a 2 TiB node of 8 GPUs less room for the OS) or cpu (this machine's MemTotal, 10 GB/s shared
// memory, 0.05 TFLOP/s; no offload).
// Default: per rank the parameters, gradients, AdamW moments, activations kept, the one-layer working set, scratch,
// ring buffers, backend workspace and pinned host memory against the memory; the longest seq_len per recompute mode;
// per step the ring, TP and DP bytes, FLOPs, one ring hop's transfer against the attention it overlaps, and with
// offload one layer's copy over the host link against the layer's compute.
// --choose: every combination of the memory options (recompute, mlp_tile 0 or --tile_rows, zero 1/2/3 when
// dp x cp > 1, offload none/ckpt on a GPU with recompute qkv/full) at the config's seq_len, cheapest first by the
// step's estimated time (executed FLOPs at MFU x peak + dp x cp traffic at link_gbs + offload copies not hidden),
// and the cheapest that fits. --longest: the longest seq_len of the recompute modes and of each option added to the
// best of them, and whether the host link hides the offload copies there.
// The numbers are model_shape's — the plan model_build allocates.
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
    if (e == v || *e || !(x > 0)) { fprintf(stderr, "plan: %s '%s' must be a positive number\n", opt, v); return 0; }
    if (x > 1e12) { fprintf(stderr, "plan: %s '%s' is above the largest value taken, 1e12\n", opt, v); return 0; }
    *out = x;
    return 1;
}

// one combination of the memory options
typedef struct { int rc, tile, zero, offload; } Opt;
static const char* RC[] = { "none", "mlp", "qkv", "full" };
static void apply(Config* c, PlanLayout* l, Opt o) {
    snprintf(c->recompute, sizeof c->recompute, "%s", RC[o.rc]);
    c->mlp_tile = o.tile;
    c->zero = l->zero = o.zero;
    snprintf(c->offload, sizeof c->offload, "%s", o.offload ? "ckpt" : "none");
}
static const char* opt_args(Opt o) {   // as build/train's command line
    static char b[128];
    snprintf(b, sizeof b, "--recompute %s --mlp_tile %d --zero %d --offload %s", RC[o.rc], o.tile, o.zero,
             o.offload ? "ckpt" : "none");
    return b;
}
static const char* tokens(int n) {   // 2.34M, 416K
    static char b[4][32];
    static int k;
    char* s = b[k++ % 4];
    if (n >= 1000000) snprintf(s, 32, "%.2fM", n / 1e6);
    else snprintf(s, 32, "%dK", (n + 512) / 1024);
    return s;
}

typedef struct { Opt o; Plan p; int ok, fits; } Cand;
static int by_cost(const void* a, const void* b) {
    const Cand *x = a, *y = b;
    if (x->ok != y->ok) return y->ok - x->ok;
    if (x->p.step_s != y->p.step_s) return x->p.step_s < y->p.step_s ? -1 : 1;
    int kx[3] = { x->o.zero, x->o.tile, x->o.offload }, ky[3] = { y->o.zero, y->o.tile, y->o.offload };
    for (int i = 0; i < 3; i++) if (kx[i] != ky[i]) return kx[i] - ky[i];   // equal time: the simpler
    return 0;
}

static int choose(const Config* c0, const PlanLayout* l0, double mem, double host, int tile_rows, int gpu, int dp, int json) {
    Cand cand[4 * 2 * 3 * 2];
    int n = 0, P = dp * c0->cp;
    for (int rc = 0; rc < 4; rc++)
        for (int t = 0; t < 2; t++)
            for (int z = P > 1 ? 1 : 0; z <= (P > 1 ? 3 : 0); z++)
                for (int off = 0; off < 2; off++) {
                    if (off && (!gpu || rc < 2)) continue;
                    Cand* k = &cand[n++];
                    k->o = (Opt){ rc, t ? tile_rows : 0, z, off };
                    Config c = *c0;
                    PlanLayout l = *l0;
                    apply(&c, &l, k->o);
                    char err[512];
                    k->ok = !plan_step(&k->p, &c, &l, c.seq_len, err, sizeof err);
                    k->fits = k->ok && k->p.total <= mem && k->p.host <= host;
                    if (t && k->ok && c.seq_len / c.cp * c.micro_batch <= tile_rows) n--;   // no tile smaller than the rows
                }
    qsort(cand, n, sizeof *cand, by_cost);
    int best = -1;
    for (int i = 0; i < n && best < 0; i++) if (cand[i].fits) best = i;
    if (json) {
        printf("{\"seq_len\": %d, \"memory\": %.0f, \"host_memory\": %.0f, \"cheapest\": %s%s%s, \"candidates\": [", c0->seq_len,
               mem, host, best >= 0 ? "\"" : "", best >= 0 ? opt_args(cand[best].o) : "null", best >= 0 ? "\"" : "");
        for (int i = 0; i < n; i++)
            printf("%s{\"args\": \"%s\", \"total\": %.0f, \"host\": %.0f, \"step_s\": %.6g, \"fits\": %s}", i ? ", " : "",
                   opt_args(cand[i].o), cand[i].p.total, cand[i].p.host, cand[i].p.step_s, cand[i].fits ? "true" : "false");
        printf("]}\n");
        return 0;
    }
    printf("\nmemory options at seq_len %d, cheapest first (step time estimated: executed FLOPs at %.2f x %.0f TFLOP/s, "
           "dp x cp traffic at %.0f GB/s, offload copies not hidden at %.0f GB/s):\n", c0->seq_len, l0->mfu, l0->peak_tflops,
           l0->link_gbs, l0->pcie_gbs);
    printf("  %-58s %10s %9s %10s  %s\n", "options", "device GiB", "host GiB", "step s", "");
    for (int i = 0; i < n; i++)
        if (cand[i].ok)
            printf("  %-58s %10.2f %9.2f %10.4g  %s\n", opt_args(cand[i].o), cand[i].p.total / GIB, cand[i].p.host / GIB,
                   cand[i].p.step_s, cand[i].fits ? "fits" : "does not fit");
    if (best >= 0)
        printf("cheapest that fits: %s (%.2f of %.1f GiB per rank, %.2f GiB pinned host memory; step about %.3g s)\n",
               opt_args(cand[best].o), cand[best].p.total / GIB, mem / GIB, cand[best].p.host / GIB, cand[best].p.step_s);
    else printf("nothing fits seq_len %d in this layout: use more ranks (cp), or a shorter seq_len (build/plan --longest)\n",
                c0->seq_len);
    return 0;
}

static int longest(const Config* c0, const PlanLayout* l0, double mem, double host, int tile_rows, int gpu, int dp, int json) {
    int P = dp * c0->cp, z0 = P > 1 ? 1 : 0;
    struct { const char* name; Opt o; } rows[] = {
        { "recompute none", { 0, 0, z0, 0 } }, { "recompute mlp", { 1, 0, z0, 0 } }, { "recompute qkv", { 2, 0, z0, 0 } },
        { "recompute full (the best before these options)", { 3, 0, z0, 0 } },
        { "full + mlp_tile", { 3, tile_rows, z0, 0 } }, { "full + zero 2", { 3, 0, 2, 0 } },
        { "full + zero 3", { 3, 0, 3, 0 } }, { "full + offload ckpt", { 3, 0, z0, 1 } },
        { "all: full + mlp_tile + zero 3 + offload ckpt", { 3, tile_rows, 3, 1 } },
    };
    int nr = sizeof rows / sizeof *rows;
    if (!json)
        printf("\nlongest seq_len per option (device %.1f GiB%s; offload copies at %.0f GB/s per direction against a layer's "
               "compute at %.2f x %.0f TFLOP/s):\n  %-48s %9s  %s\n", mem / GIB, gpu ? "" : ", no offload on the cpu",
               l0->pcie_gbs, l0->mfu, l0->peak_tflops, "option", "longest", "offload: one layer's copy vs its forward, backward");
    else printf("{\"memory\": %.0f, \"host_memory\": %.0f, \"rows\": [", mem, host);
    for (int i = 0, k = 0; i < nr; i++) {
        Opt o = rows[i].o;
        const char* name = rows[i].name;
        if (i == nr - 1) {   // all that apply: no ZeRO-2/3 on one replica, no offload on the cpu
            if (P == 1) o.zero = z0;
            o.offload = gpu;
            name = P == 1 ? (gpu ? "all: full + mlp_tile + offload ckpt" : "all: full + mlp_tile")
                          : (gpu ? name : "all: full + mlp_tile + zero 3");
        } else if ((o.zero >= 2 && P == 1) || (o.offload && !gpu)) continue;
        Config c = *c0;
        PlanLayout l = *l0;
        apply(&c, &l, o);
        int L = plan_longest(&c, &l, mem, host, 1 << 26);
        Plan p;
        char err[256], hide[160] = "";
        memset(&p, 0, sizeof p);
        if (L > 0) plan_step(&p, &c, &l, L, err, sizeof err);
        if (o.offload && L > 0)
            snprintf(hide, sizeof hide, "%.3g s vs %.3g s, %.3g s: %s (%.1f GiB pinned)", p.offload_xfer_s, p.layer_fwd_s,
                     p.layer_bwd_s, p.offload_exposed_s > 0 ? "exposed" : "hidden", p.host / GIB);
        if (json)
            printf("%s{\"option\": \"%s\", \"args\": \"%s\", \"longest\": %d, \"total\": %.0f, \"host\": %.0f, "
                   "\"offload_xfer_s\": %.6g, \"layer_fwd_s\": %.6g, \"layer_bwd_s\": %.6g, \"offload_exposed_s\": %.6g}",
                   k++ ? ", " : "", name, opt_args(o), L, p.total, p.host, p.offload_xfer_s, p.layer_fwd_s,
                   p.layer_bwd_s, p.offload_exposed_s);
        else printf("  %-48s %9s  %s\n", name, L ? tokens(L) : "none", hide);
    }
    if (json) printf("]}\n");
    return 0;
}

int main(int argc, char** argv) {
    stdout_lines();   // each line appears when printed, also into a file or pipe
    Config c;
    char err[1024];
    config_defaults(&c);
    const char* device = "h200";
    double mem = 0, host = -1, link = 0, tflops = 0, dp = 1, peak = 0, mfu = 0, pcie = 0, tile = 8192;
    int json = 0, mode = 0, balance = 0, windows = 64;   // mode 1: --choose, 2: --longest
    // --name value or --name=value, dashes for underscores (config_argv); plan's own options besides the keys
    static const char* const FLAGS[] = { "--json", "--balance", "--help", "-h", "--choose", "--longest", NULL };
    static const char* const OWN[] = { "dp", "device", "memory_gib", "host_gib", "link_gbs", "tflops", "peak_tflops", "mfu",
                                       "pcie_gbs", "tile_rows", "choose", "longest", "json", "balance", "windows", "help",
                                       NULL };
    struct { const char* opt; double* v; } nums[] = { { "--memory_gib", &mem }, { "--host_gib", &host },
        { "--link_gbs", &link }, { "--tflops", &tflops }, { "--peak_tflops", &peak }, { "--mfu", &mfu },
        { "--pcie_gbs", &pcie }, { "--tile_rows", &tile } };
    int nnum = sizeof nums / sizeof *nums;
    argc = config_argv(argc, argv, FLAGS, &argv, err, sizeof err);
    if (argc < 0) { fprintf(stderr, "plan: %s\n", err); return 1; }
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (!strcmp(a, "--choose") || !strcmp(a, "--longest")) {
            int m = a[2] == 'c' ? 1 : 2;
            if (mode && mode != m) { fprintf(stderr, "plan: --choose and --longest are two questions: ask one at a time\n"); return 1; }
            mode = m;
            continue;
        }
        if (!strcmp(a, "--balance")) { balance = 1; continue; }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: build/plan -c CONFIG [--key value ...] [--dp N] [--device h200|cpu] [--memory_gib G] [--host_gib G]\n"
                   "       [--link_gbs B] [--tflops F] [--peak_tflops P] [--mfu M] [--pcie_gbs B] [--tile_rows R]\n"
                   "       [--choose | --longest] [--json]\n"
                   "       build/plan -c CONFIG [--key value ...] --balance [--windows N] [--dp N] [--json]\n"
                   "--choose: the memory options (recompute, mlp_tile, zero, offload) at the config's seq_len, cheapest first,\n"
                   "and the cheapest that fits; --longest: the longest seq_len of each option. --host_gib: pinned host memory\n"
                   "per rank (h200: 224); --mfu x --peak_tflops: the matmul rate of the time estimate (h200: 0.4 x 989);\n"
                   "--pcie_gbs: the host link per direction (55); --tile_rows: the mlp_tile the options try (8192).\n"
                   "--balance: per cp rank, the attention work and ring bytes of the first N (default 64; 0: all) training\n"
                   "windows of train_data, as the model deals them (cp_shard) and the ring sends them (cp_prune)\n"
                   "Options may also be written --name=value, and dashes may stand for underscores (--memory-gib=80);\n"
                   "the config keys are build/train's (build/train --help lists them).\n");
            return 0;
        }
        int num = -1;
        for (int k = 0; k < nnum; k++) if (!strcmp(a, nums[k].opt)) num = k;
        if (!strncmp(a, "--", 2) && !config_key_kind(a + 2) && num < 0 && strcmp(a, "--device") && strcmp(a, "--dp") &&
            strcmp(a, "--windows")) {
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
        else if (num >= 0) { if (!positive(a, v, nums[num].v)) return 1; }
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
    if (mem) mem *= GIB; else mem = gpu ? 139 * GIB : meminfo_bytes("MemTotal");
    if (host >= 0) host *= GIB; else host = gpu ? 224 * GIB : 0;
    if (!link) link = gpu ? 450 : 10;
    if (!tflops) tflops = gpu ? 350 : 0.05;
    if (!peak) peak = gpu ? 989 : tflops;
    if (!mfu) mfu = gpu ? 0.4 : 1;
    if (!pcie) pcie = 55;
    if (mfu > 1) { fprintf(stderr, "plan: --mfu %g must be at most 1\n", mfu); return 1; }
    if (c.doc_mask && config_eod(&c) < 0) c.eod = 0;   // (the trainer takes eod from the data's meta.json; memory
                                                      // and time do not depend on it)
    if (balance && mode) {
        fprintf(stderr, "plan: --balance and --%s are two questions: ask one at a time\n", mode == 1 ? "choose" : "longest");
        return 1;
    }
    if (balance) {
        if (!c.train_data[0]) { fprintf(stderr, "plan: --balance reads the run's training windows: give train_data\n"); return 1; }
        if (c.batch_size % (int)dp) { fprintf(stderr, "plan: batch_size %d is not divisible by --dp %d\n", c.batch_size, (int)dp); return 1; }
        return print_balance(&c, (int)dp, windows, json);
    }
    if (config_validate(&c, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    if (!gpu && !strcmp(c.offload, "ckpt")) {
        fprintf(stderr, "plan: offload = ckpt needs a GPU (--device h200): the cpu backend keeps activations in host memory\n");
        return 1;
    }
    if (c.zero >= 2 && dp * c.cp == 1) {
        fprintf(stderr, "plan: zero = %d shards over the dp x cp ranks, and this layout has one (dp 1 x cp 1)\n", c.zero);
        return 1;
    }
    PlanLayout l = { c.tp, c.cp, (int)dp, c.zero, c.micro_batch, gpu ? "cuda" : "cpu", link, tflops, peak, mfu, pcie };
    Plan p;
    if (plan_step(&p, &c, &l, c.seq_len, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    if (mode == 1) return choose(&c, &l, mem, host, (int)tile, gpu, (int)dp, json);
    if (mode == 2) return longest(&c, &l, mem, host, (int)tile, gpu, (int)dp, json);
    int lng[4];
    for (int i = 0; i < 4; i++) {
        Config cm = c;
        snprintf(cm.recompute, sizeof cm.recompute, "%s", RC[i]);
        if (i < 2) snprintf(cm.offload, sizeof cm.offload, "none");   // (offload needs qkv or full)
        lng[i] = plan_longest(&cm, &l, mem, host, 1 << 24);
    }
    if (json) {
        printf("{\"seq_len\": %d, \"params\": %.0f, \"grads\": %.0f, \"moments\": %.0f, \"acts_kept\": %.0f, "
               "\"acts_work\": %.0f, \"acts_scratch\": %.0f, \"ring\": %.0f, \"workspace\": %.0f, \"total\": %.0f, "
               "\"memory\": %.0f, \"host\": %.0f, \"host_memory\": %.0f, \"ring_sent\": %.0f, \"ring_msgs\": %.0f, "
               "\"a2a_sent\": %.0f, \"a2a_msgs\": %.0f, \"tp_payload\": %.0f, \"dp_sent\": %.0f, \"dp_msgs\": %.0f, "
               "\"flops_model\": %.6g, \"flops_exec\": %.6g, \"hop_xfer_s\": %.6g, \"hop_compute_s\": %.6g, "
               "\"layer_fwd_s\": %.6g, \"layer_bwd_s\": %.6g, \"offload_xfer_s\": %.6g, \"offload_exposed_s\": %.6g, "
               "\"step_s\": %.6g, \"longest\": {\"none\": %d, \"mlp\": %d, \"qkv\": %d, \"full\": %d}}\n",
               c.seq_len, p.params, p.grads, p.moments, p.acts_kept, p.acts_work, p.acts_scratch, p.ring, p.workspace,
               p.total, mem, p.host, host, p.ring_sent, p.ring_msgs, p.a2a_sent, p.a2a_msgs, p.tp_payload, p.dp_sent,
               p.dp_msgs, p.flops_model, p.flops_exec, p.hop_xfer_s, p.hop_compute_s, p.layer_fwd_s, p.layer_bwd_s,
               p.offload_xfer_s, p.offload_exposed_s, p.step_s, lng[0], lng[1], lng[2], lng[3]);
        return 0;
    }
    char cpd[64] = "", opts[96] = "";
    if (config_a2a(&c) > 1) snprintf(cpd, sizeof cpd, ", %s with all-to-all %d", c.cp_comm, config_a2a(&c));
    if (c.mlp_tile || strcmp(c.offload, "none")) snprintf(opts, sizeof opts, ", mlp_tile %d, offload %s", c.mlp_tile, c.offload);
    printf("plan: d_model %d, %d layers, vocab %d, seq_len %d; tp %d%s x cp %d (%s%s) x dp %d, zero %d, micro_batch %d, "
           "recompute %s%s; device %s (%.1f GiB)\n", c.d_model, c.n_layer, c.vocab_size, c.seq_len, c.tp,
           c.tp_sp && c.tp > 1 ? " (sequence parallel)" : "", c.cp, c.cp_layout, cpd, (int)dp, c.zero, c.micro_batch,
           c.recompute, opts, device, mem / GIB);
    struct { const char* what; double v; } rows[] = {
        { "parameters", p.params }, { "gradients", p.grads }, { "AdamW moments", p.moments },
        { "activations kept (all layers)", p.acts_kept }, { "working set (one layer, recomputed)", p.acts_work },
        { "scratch (gradients in flight, LM-head chunk, RoPE)", p.acts_scratch }, { "ring and all-to-all buffers", p.ring },
        { "backend workspace", p.workspace } };
    printf("\nper rank                                              GiB\n");
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) printf("  %-50s %9.3f\n", rows[i].what, rows[i].v / GIB);
    printf("  %-50s %9.3f  %s (%.1f GiB available)\n", "total", p.total / GIB, p.total <= mem ? "fits" : "DOES NOT FIT",
           mem / GIB);
    if (p.host > 0)
        printf("  %-50s %9.3f  %s (%.1f GiB available)\n", "pinned host memory (offload)", p.host / GIB,
               p.host <= host ? "fits" : "DOES NOT FIT", host / GIB);
    printf("\nlongest seq_len that fits this layout: none %d, mlp %d, qkv %d, full %d\n", lng[0], lng[1], lng[2], lng[3]);
    printf("\nper step per rank (%d micro-batches): ring sends %.3f GiB in %.0f hops, all-to-all %.3f GiB in %.0f messages, "
           "TP %s %.3f GiB, DP%s sends %.3f GiB in %.0f messages (the ring: its full schedule; with cp_prune = 1 it sends "
           "less where ranks cannot see each other's keys, as --balance measures on the data);\n"
           "  %.3f TFLOP model, %.3f TFLOP executed (recomputation included)\n", p.accum, p.ring_sent / GIB, p.ring_msgs,
           p.a2a_sent / GIB, p.a2a_msgs, c.tp_sp && c.tp > 1 ? "all-gathers + reduce-scatters" : "all-reduces",
           p.tp_payload / GIB, c.zero && dp * c.cp > 1 ? " (ZeRO reduce-scatters and all-gathers)" : " (all-reduce)",
           p.dp_sent / GIB, p.dp_msgs, p.flops_model / 1e12, p.flops_exec / 1e12);
    if (c.cp / config_a2a(&c) > 1)
        printf("ring hop: %.3f ms transfer at %.0f GB/s against %.3f ms of attention at %.3g TFLOP/s: %s\n",
               p.hop_xfer_s * 1e3, link, p.hop_compute_s * 1e3, tflops,
               p.hop_xfer_s <= p.hop_compute_s ? "hidden" : "exposed (the ring is too fine for this link)");
    if (p.host > 0)
        printf("offload: one layer's saved tensors %.3f ms each way at %.0f GB/s against a layer's forward %.3f ms and "
               "backward %.3f ms at %.2f x %.0f TFLOP/s: %s\n", p.offload_xfer_s * 1e3, pcie, p.layer_fwd_s * 1e3,
               p.layer_bwd_s * 1e3, mfu, peak, p.offload_exposed_s > 0 ? "exposed" : "hidden");
    printf("step time at %.2f x %.0f TFLOP/s: about %.4g s (build/plan --choose compares the memory options)\n", mfu, peak,
           p.step_s);
    return 0;
}
