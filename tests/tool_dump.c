// tool_dump.c — runs one forward/backward/AdamW step of a config on a fixed random batch and dumps
// everything the independent PyTorch reference (tests/ref_model.py) checks. Format: see ref_model.py.
//   build/tests/tool_dump -c CONFIG --out FILE [--key value ...]
//   build/tests/tool_dump --ckpt CKPT.h5 --out FILE [--key value ...]   the checkpoint's config and parameters
//                                        (instead of the seed's init); keys given override training keys
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

int main(int argc, char** argv) {
    Config c;
    char err[1024];
    config_defaults(&c);
    const char* path = NULL;
    const char* ckpt = NULL;
    for (int i = 1; i + 1 < argc; i += 2) if (!strcmp(argv[i], "--ckpt")) ckpt = argv[i + 1];
    if (ckpt) {   // MPI only for the checkpoint reader (a singleton run, no mpirun needed)
        grid_mpi_init(&argc, &argv);
        ckpt_init();
        if (ckpt_read_config(ckpt, &c, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    }
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) { fprintf(stderr, "tool_dump: option %s needs a value\n", argv[i]); return 1; }
        if (!strcmp(argv[i], "--ckpt")) continue;
        if (!strcmp(argv[i], "-c")) { if (config_load_file(&c, argv[i + 1], err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; } }
        else if (!strcmp(argv[i], "--out")) path = argv[i + 1];
        else if (!strncmp(argv[i], "--", 2)) { if (config_set(&c, argv[i] + 2, argv[i + 1], "command line", err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; } }
        else { fprintf(stderr, "tool_dump: unexpected argument '%s'\n", argv[i]); return 1; }
    }
    if (!path) { fprintf(stderr, "usage: tool_dump -c CONFIG | --ckpt CKPT.h5 --out FILE [--key value ...]\n"); return 1; }
    if (config_validate(&c, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    out = dump_open(path);
    if (!out) { perror(path); return 1; }

    int B = c.micro_batch, T = c.seq_len, N = B * T;
    if (be_init(0, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    Model m;
    model_build(&m, &c, B, T, NULL);
    if (ckpt) {
        Grid g;
        TrainState ts;
        if (grid_build(&g, 1, 1, 1, err, sizeof err) || ckpt_load(ckpt, &m, NULL, &g, &ts, NULL, err, sizeof err, NULL, 0)) {
            fprintf(stderr, "%s\n", err); return 1;
        }
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

    char* cfgtext = NULL; size_t cfglen = 0;
    FILE* mem = open_memstream(&cfgtext, &cfglen);
    config_write(&c, mem); fclose(mem);
    int d1 = (int)cfglen; rec("config", 2, 1, &d1, cfgtext);
    int d2[2] = { B, T };
    rec("tokens", 1, 2, d2, tok); rec("targets", 1, 2, d2, tgt); rec("positions", 1, 2, d2, pos);
    dump_arena(&m, "param", m.params);

    float* logits = malloc((size_t)N * c.vocab_size * sizeof(float));
    model_set_batch(&m, tok, tgt, pos);
    model_zero_grad(&m);
    m.want_hits = 1;   // greedy-correctness flags, checked against torch's argmax
    double loss = model_forward(&m, 1.0f / valid, logits) / valid;
    rec("hits", 0, 2, d2, model_token_hits(&m));
    model_backward(&m);
    int d3[3] = { B, T, c.vocab_size };
    rec("logits", 0, 3, d3, logits);
    float lossf = (float)loss; int one = 1;
    rec("loss", 0, 1, &one, &lossf);
    dump_arena(&m, "grad", m.grads);

    double inv[1024]; float invf[1024];
    float af = (float)rope_inv_freq(&c, m.hd, inv, NULL, NULL);
    for (int i = 0; i < m.hd / 2; i++) invf[i] = (float)inv[i];
    int dh = m.hd / 2;
    rec("rope/inv_freq", 0, 1, &dh, invf); rec("rope/attention_factor", 0, 1, &one, &af);

    AdamW opt;
    adamw_init(&opt, &m, NULL, 0);
    float lr = lr_at(&c, 0);
    AdamWHyper h = adamw_hyper(&c, lr);
    adamw_step(&opt, &m, &h, adamw_grad_norm(&opt, &m));
    rec("step/lr", 0, 1, &one, &lr);
    dump_arena(&m, "after", m.params);
    fclose(out);
    printf("tool_dump: wrote %s (loss %.6f over %d targets)\n", path, loss, valid);
    if (ckpt) grid_exit(0);
    return 0;
}
