// tool_dump.c — runs one forward/backward/AdamW step of a config on a fixed random batch and dumps
// everything the independent PyTorch reference (tests/ref_model.py) checks. Format: see ref_model.py.
//   [mpirun -np tp*cp] build/tests/tool_dump -c CONFIG --out FILE [--key value ...]
//   build/tests/tool_dump --ckpt CKPT.h5 --out FILE [--key value ...]   the checkpoint's config and parameters
//                                        (instead of the seed's init); keys given override training keys
//   --steps N (default 1): N AdamW steps on the same batch, at the schedule's learning rates of steps 0..N-1; step k >= 2
//   adds the records grad@k/NAME (its gradients, at the parameters after step k - 1), step@k/lr and after@k/NAME;
//   then adam/m/NAME and adam/v/NAME (the moments after the last step) and steps (int32 N)
// Under mpirun the step runs in the config's layout (tp, cp, cp_comm, cp_a2a, tp_sp, zero; dp = 1): each rank holds
// its share of the batch, and what is dumped is gathered — the logits and greedy hits by position over the context
// ranks, the weights over TP, the gradients summed over the context ranks as the trainer sums them, the AdamW
// moments over the ZeRO shards. step/gnorm and step@k/gnorm: the global gradient norm each step clipped with.
#include "backend/backend.h"
#include "checkpoint/ckpt.h"
#include "comm/grid.h"
#include "model/config.h"
#include "model/model.h"
#include "model/rope.h"
#include "optim/adamw.h"
#include "train/dump.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static FILE* out;
#define rec(...) dump_record(out, __VA_ARGS__)
#define dump_arena(m, prefix, arena) dump_arena(out, m, prefix, arena)

// the gradient's global norm adamw_clip left on the backend (model->scal [1], [2])
static double clipped_norm(const Model* m) {
    double scal[3];
    be_download(scal, m->scal, sizeof scal);
    return adamw_norm_of(scal);
}

// the gradients as reduced for the step: under ZeRO each rank holds the sum only in its slices (reduce-scattered; at
// stage 2 and 3 packed in gshard), gathered into a whole arena
static void dump_grads(const AdamW* o, const Model* m, const char* prefix) {
    float* whole = zero_whole(m, o->stage >= 2 ? m->gshard : m->grads, o->stage >= 2);
    dump_arena(m, prefix, whole);
    be_free(whole);
}
// the parameters, whole (ZeRO-3: gathered from the slices)
static void dump_params(const Model* m, const char* prefix) {
    float* whole = zero_whole(m, m->zero == 3 ? m->pshard : m->params, m->zero == 3);
    dump_arena(m, prefix, whole);
    be_free(whole);
}

int main(int argc, char** argv) {
    Config c;
    char err[1024];
    config_defaults(&c);
    const char* path = NULL;
    const char* ckpt = NULL;
    int nsteps = 1;
    grid_mpi_init(&argc, &argv);   // (one process: a singleton, no mpirun needed)
    argc = config_argv(argc, argv, NULL, &argv, err, sizeof err);   // --key=value, dashes for underscores
    if (argc < 0) { fprintf(stderr, "tool_dump: %s\n", err); return 1; }
    for (int i = 1; i + 1 < argc; i += 2) if (!strcmp(argv[i], "--ckpt")) ckpt = argv[i + 1];
    const Group* world = group_world();
    int root = group_rank(world) == 0;
    if (ckpt) {
        ckpt_init();
        if (ckpt_read_config(ckpt, &c, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        // the checkpoint's training layout is not this run's: one process unless the command line says otherwise
        c.tp = c.cp = 1; c.cp_a2a = 0; c.tp_sp = 0; c.zero = 0; c.mlp_tile = 0;
        snprintf(c.offload, sizeof c.offload, "none");
        snprintf(c.cp_comm, sizeof c.cp_comm, "ring");
    }
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) { fprintf(stderr, "tool_dump: option %s needs a value\n", argv[i]); return 1; }
        if (!strcmp(argv[i], "--ckpt")) continue;
        if (!strcmp(argv[i], "-c")) { if (config_load_file(&c, argv[i + 1], err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; } }
        else if (!strcmp(argv[i], "--out")) path = argv[i + 1];
        else if (!strcmp(argv[i], "--steps")) { nsteps = atoi(argv[i + 1]); if (nsteps < 1) { fprintf(stderr, "tool_dump: --steps must be >= 1\n"); return 1; } }
        else if (!strncmp(argv[i], "--", 2)) { if (config_set(&c, argv[i] + 2, argv[i + 1], "command line", err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; } }
        else { fprintf(stderr, "tool_dump: unexpected argument '%s'\n", argv[i]); return 1; }
    }
    if (!path) { fprintf(stderr, "usage: tool_dump -c CONFIG | --ckpt CKPT.h5 --out FILE [--key value ...]\n"); return 1; }
    if (config_validate(&c, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    if (group_size(world) != c.tp * c.cp) {
        fprintf(stderr, "tool_dump: %d ranks for tp %d x cp %d (dp must be 1)\n", group_size(world), c.tp, c.cp);
        return 1;
    }
    out = root ? dump_open(path) : NULL;
    if (root && !out) { perror(path); return 1; }

    int B = c.micro_batch, T = c.seq_len, N = B * T;
    Grid g;
    if (grid_build(&g, c.tp, c.cp, config_a2a(&c), err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    if (be_init(g.local_rank, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    Model m;
    ModelGroups mg = { c.tp > 1 ? g.tp_g : NULL, g.cp_g, c.zero ? g.dpcp_g : NULL, g.a2a_g, g.ring_g };
    model_build(&m, &c, B, T, &mg);
    if (ckpt) {
        TrainState ts;
        if (ckpt_load(ckpt, &m, NULL, &g, &ts, NULL, err, sizeof err, NULL, 0)) { fprintf(stderr, "%s\n", err); return 1; }
    }
    // a fixed batch: random tokens; sequence b starts at position 3b (positions are an explicit input);
    // one ignored target per sequence after the first
    int *tok = malloc(N * sizeof(int)), *tgt = malloc(N * sizeof(int)), *pos = malloc(N * sizeof(int));
    unsigned long long s = (unsigned long long)c.seed * 6364136223846793005ULL + 1;
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL; tok[i] = (int)((s >> 33) % c.vocab_size);
        s = s * 6364136223846793005ULL + 1442695040888963407ULL; tgt[i] = (int)((s >> 33) % c.vocab_size);
        pos[i] = (i % T) + 3 * (i / T);
    }
    for (int b = 1; b < B; b++) tgt[b * T + T / 2] = -1;
    // doc_mask: documents start at eod tokens placed at chosen positions (sequence 0 starts with one; a
    // one-token document at T/2; sequence 1 starts inside a document)
    int eod = config_eod(&c);
    if (c.doc_mask && eod >= 0)
        for (int b = 0; b < B; b++) {
            int at[5] = { b == 0 ? 0 : 1 + b, 5, T / 2, T / 2 + 1, T - 3 };
            for (int e = 0; e < 5; e++) if (at[e] < T) tok[b * T + at[e]] = eod;
        }
    int valid = 0;
    for (int i = 0; i < N; i++) valid += tgt[i] >= 0;
    for (int b = 0; b < B; b++)
        if (pos[b * T + T - 1] >= c.max_seq_len) { fprintf(stderr, "tool_dump: max_seq_len too small\n"); return 1; }

    if (root) {
        char* cfgtext = NULL; size_t cfglen = 0;
        FILE* mem = open_memstream(&cfgtext, &cfglen);
        config_write(&c, mem); fclose(mem);
        int d1 = (int)cfglen; rec("config", 2, 1, &d1, cfgtext);
        free(cfgtext);
    }
    int d2[2] = { B, T };
    if (root) { rec("tokens", 1, 2, d2, tok); rec("targets", 1, 2, d2, tgt); rec("positions", 1, 2, d2, pos); }
    dump_params(&m, "param");

    // this rank's share of the batch: the tokens at its positions of each sequence (the layout's)
    int Tl = m.T, V = c.vocab_size;
    size_t nl = (size_t)B * Tl;
    int *ltok = malloc(nl * sizeof(int)), *ltgt = malloc(nl * sizeof(int)), *lpos = malloc(nl * sizeof(int));
    for (int b = 0; b < B; b++)
        for (int i = 0; i < Tl; i++) {
            int t = m.lpos[i];
            ltok[b * Tl + i] = tok[b * T + t]; ltgt[b * Tl + i] = tgt[b * T + t]; lpos[b * Tl + i] = pos[b * T + t];
        }
    float* llogits = calloc(nl * V, sizeof(float));
    model_set_batch(&m, ltok, ltgt, lpos);
    model_zero_grad(&m);
    m.want_hits = 1;   // greedy-correctness flags, checked against torch's argmax
    model_loss_reset(&m);
    model_forward(&m, 1.0f / valid, llogits);
    model_backward(&m);
    double loss = model_loss_sum(&m);
    // logits: each TP rank filled its vocabulary slice (summed over TP); hits and losses: the same on every TP rank
    if (c.tp > 1) {
        double* acc = malloc(nl * V * sizeof(double));
        for (size_t i = 0; i < nl * V; i++) acc[i] = llogits[i];
        ctl_sum_f64(g.tp_g, acc, nl * V);
        for (size_t i = 0; i < nl * V; i++) llogits[i] = (float)acc[i];
        free(acc);
    }
    loss = (c.cp > 1 ? ctl_sum(g.cp_g, loss) : loss) / valid;
    // everything in sequence order on the first context rank
    float *logits = malloc((size_t)N * V * sizeof(float)), *hits = malloc((size_t)N * sizeof(float));
    int P = c.cp;
    int head = group_rank(g.cp_g) == 0;   // every context group's first rank gathers (the world's first writes)
    float *alog = head ? malloc((size_t)P * nl * V * sizeof(float)) : NULL, *ahit = head ? malloc((size_t)P * nl * sizeof(float)) : NULL;
    int* apos = head ? malloc((size_t)P * Tl * sizeof(int)) : NULL;
    if (P > 1) {
        ctl_gather(g.cp_g, llogits, alog, nl * V * sizeof(float), 0);
        ctl_gather(g.cp_g, model_token_hits(&m), ahit, nl * sizeof(float), 0);
        ctl_gather(g.cp_g, m.lpos, apos, (size_t)Tl * sizeof(int), 0);
    } else if (root) {
        memcpy(alog, llogits, nl * V * sizeof(float)); memcpy(ahit, model_token_hits(&m), nl * sizeof(float));
        memcpy(apos, m.lpos, (size_t)Tl * sizeof(int));
    }
    for (int j = 0; root && j < P; j++)
        for (int b = 0; b < B; b++)
            for (int i = 0; i < Tl; i++) {
                size_t from = ((size_t)j * B + b) * Tl + i, to = (size_t)b * T + apos[j * Tl + i];
                memcpy(logits + to * V, alog + from * V, (size_t)V * sizeof(float));
                hits[to] = ahit[from];
            }
    int d3[3] = { B, T, c.vocab_size };
    float lossf = (float)loss; int one = 1;
    if (root) { rec("hits", 0, 2, d2, hits); rec("logits", 0, 3, d3, logits); rec("loss", 0, 1, &one, &lossf); }
    AdamW opt;
    adamw_init(&opt, &m, g.dpcp_g, c.zero);   // (ZeRO-1: the moments sharded over the context ranks, dp being 1)
    adamw_reduce_grads(&opt, &m);   // weights are replicated over the context ranks: their gradients are summed
    dump_grads(&opt, &m, "grad");

    double inv[1024]; float invf[1024];
    float af = (float)rope_inv_freq(&c, m.hd, inv, NULL, NULL);
    for (int i = 0; i < m.hd / 2; i++) invf[i] = (float)inv[i];
    int dh = m.hd / 2;
    if (root) { rec("rope/inv_freq", 0, 1, &dh, invf); rec("rope/attention_factor", 0, 1, &one, &af); }

    float lr = lr_at(&c, 0);
    AdamWHyper h = adamw_hyper(&c, lr);
    adamw_clip(&opt, &m, h.grad_clip);
    float gn = (float)clipped_norm(&m);
    adamw_step(&opt, &m, &h);
    if (root) { rec("step/lr", 0, 1, &one, &lr); rec("step/gnorm", 0, 1, &one, &gn); }
    dump_params(&m, "after");
    for (int k = 2; k <= nsteps; k++) {   // further steps on the same batch
        char pre[32];
        model_set_batch(&m, ltok, ltgt, lpos);
        model_zero_grad(&m);
        model_forward(&m, 1.0f / valid, NULL);
        model_backward(&m);
        adamw_reduce_grads(&opt, &m);
        snprintf(pre, sizeof pre, "grad@%d", k);
        dump_grads(&opt, &m, pre);
        lr = lr_at(&c, k - 1);
        h = adamw_hyper(&c, lr);
        adamw_clip(&opt, &m, h.grad_clip);
        gn = (float)clipped_norm(&m);
        adamw_step(&opt, &m, &h);
        snprintf(pre, sizeof pre, "step@%d/lr", k);
        if (root) rec(pre, 0, 1, &one, &lr);
        snprintf(pre, sizeof pre, "step@%d/gnorm", k);
        if (root) rec(pre, 0, 1, &one, &gn);
        snprintf(pre, sizeof pre, "after@%d", k);
        dump_params(&m, pre);
    }
    if (nsteps > 1) {   // the moments, whole (under ZeRO each rank's shard, gathered as the parameters are)
        float* mv[2] = { opt.m, opt.v };
        for (int k = 0; k < 2; k++) {
            float* whole = zero_whole(&m, mv[k], 1);
            dump_arena(&m, k ? "adam/v" : "adam/m", whole);
            be_free(whole);
        }
        if (root) rec("steps", 1, 1, &one, &nsteps);
    }
    if (root) {
        fclose(out);
        printf("tool_dump: wrote %s (loss %.6f over %d targets; tp %d x cp %d%s%s; %d step%s)\n", path, loss, valid, c.tp,
               c.cp, config_a2a(&c) > 1 ? ", all-to-all" : "", m.sp ? ", sequence parallel" : "", nsteps, nsteps > 1 ? "s" : "");
    }
    grid_exit(0);
    return 0;
}
