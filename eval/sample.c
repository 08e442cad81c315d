// sample.c — build/sample: text from a checkpoint, with a KV cache (model/decode.h).
//   [mpirun -np tp*cp] build/sample --ckpt PATH [--prompt TEXT | --prompt_ids 1,2,3 | --prompt_file FILE]
//        [--max_tokens N] [--temperature T] [--top_k K] [--top_p P] [--seed S] [--greedy] [--stop_at_eod 0|1]
//        [--tp N] [--cp N] [--cp_layout zigzag|contiguous] [--comm NAME] [--tokenizer PATH] [--ids] [--verify]
// The prompt (all but its last token) is prefilled by one forward of the model in the given layout — with cp > 1
// the ring does it and each rank keeps its chunk's K/V —; then one token at a time: every rank runs the layer for
// the new token, attention over the distributed cache merged across the cp ranks. Byte-level models (vocab_size
// 257) take and print text; others take token ids (--prompt_ids; tools/sample_text encodes a text prompt with the
// tokenizer) and print text through the tokenizer (data/tokenizer.h: --tokenizer, else the one the checkpoint's
// training data was prepared with, its data_meta), or ids when there is none that decodes (a note says why).
// Generation stops after max_tokens, at the end-of-document token (stop_at_eod), or at
// max_seq_len. --verify recomputes the logits of every generated position with one full forward over the whole
// sequence and reports the largest difference from the cached path (exit 1 above 1e-4 relative).
#include "backend/backend.h"
#include "checkpoint/ckpt.h"
#include "comm/grid.h"
#include "common/util.h"
#include "data/meta.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "model/decode.h"
#include "model/model.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char msg[1024];

typedef struct {
    const char *ckpt, *prompt, *prompt_ids, *prompt_file, *layout, *comm, *precision, *tokenizer;
    int max_tokens, top_k, greedy, stop_at_eod, tp, cp, ids, verify;
    float temperature, top_p;
    long long seed;
    double timeout_s;   // --timeout_s: the watchdog (comm_set_timeout)
} Args;

static void usage(FILE* f) {
    fprintf(f, "usage: [mpirun -np tp*cp] build/sample --ckpt PATH [--prompt TEXT | --prompt_ids 1,2,3 | --prompt_file FILE]\n"
               "       [--max_tokens N] [--temperature T] [--top_k K] [--top_p P] [--seed S] [--greedy] [--stop_at_eod 0|1]\n"
               "       [--tp N] [--cp N] [--cp_layout zigzag|contiguous] [--comm auto|mpi|nccl] [--matmul_precision P]\n"
               "       [--tokenizer PATH] [--ids] [--verify] [--timeout_s S]\n"
               "Generates text from a checkpoint (a file, or a directory: its latest) with a KV cache.\n"
               "  --prompt TEXT        the prompt as bytes (byte-level models: vocab_size 257); default: the end-of-document\n"
               "                       token (the start of a document)\n"
               "  --prompt_ids LIST    the prompt as token ids (any vocabulary; tools/sample_text encodes a text prompt with\n"
               "                       the tokenizer and runs this); --prompt_file FILE: its bytes\n"
               "  --max_tokens N       tokens to generate (default 128)\n"
               "  --temperature T      softmax temperature (default 0.8); --greedy (or T = 0): the most likely token\n"
               "  --top_k K            draw from the K most likely tokens only (default 0: all)\n"
               "  --top_p P            draw from the smallest set of tokens whose probability reaches P (default 1: all;\n"
               "                       0: the most likely token only)\n"
               "  --seed S             the sampler's seed (default 1: the same output every run)\n"
               "  --stop_at_eod 0|1    stop at the end-of-document token (default 1)\n"
               "  --tp N --cp N        layout (tp * cp ranks): heads split over tp; the prompt and the KV cache over cp\n"
               "  --matmul_precision P a GPU's matmuls: fp32 (default) | tf32 | bf16 (the CPU computes fp32 always)\n"
               "  --tokenizer PATH     print the text of a byte-level BPE tokenizer.json (or a directory holding one); default:\n"
               "                       the one the checkpoint's training data was prepared with (tools/prepare_hf's\n"
               "                       meta.json, SHA-256 checked); without one, models of vocab_size 257 print bytes,\n"
               "                       others ids (with a note)\n"
               "  --ids                print token ids, not text\n"
               "  --timeout_s S        the watchdog: a wait for other ranks longer than S seconds ends the job with one\n"
               "                       line naming the ranks that did not arrive (default 600; 0: none; as build/train's)\n"
               "  --verify             check the cached path against a full forward of the whole sequence (relative\n"
               "                       1e-4 of the largest logit in fp32, 3e-2 in tf32 / bf16)\n"
               "Options may be written --name=value, with dashes for underscores (--max-tokens=20).\n");
}

static int parse_int(const char* opt, const char* v, long lo, long hi, long* out) {
    char* e;
    errno = 0;
    long x = strtol(v, &e, 10);
    if (errno || e == v || *e || x < lo || x > hi) {
        snprintf(msg, sizeof msg, "sample: %s '%s' must be an integer in [%ld, %ld]", opt, v, lo, hi);
        return 1;
    }
    *out = x;
    return 0;
}
static int parse_float(const char* opt, const char* v, double lo, double hi, float* out) {
    char* e;
    double x = strtod(v, &e);
    if (e == v || *e || !(x >= lo && x <= hi)) {
        snprintf(msg, sizeof msg, "sample: %s '%s' must be a number in [%g, %g]", opt, v, lo, hi);
        return 1;
    }
    *out = (float)x;
    return 0;
}

static int parse_args(int argc, char** argv, Args* a) {
    memset(a, 0, sizeof *a);
    a->max_tokens = 128; a->temperature = 0.8f; a->top_p = 1.0f; a->seed = 1; a->stop_at_eod = 1;
    a->tp = 1; a->cp = 1; a->layout = "zigzag"; a->comm = "auto"; a->precision = "fp32"; a->timeout_s = 600;
    static const char* const FLAGS[] = { "--greedy", "--ids", "--verify", "--help", "-h", NULL };
    static const char* const OPTS[] = { "ckpt", "prompt", "prompt_ids", "prompt_file", "cp_layout", "comm", "max_tokens",
                                        "top_k", "stop_at_eod", "tp", "cp", "seed", "temperature", "top_p",
                                        "matmul_precision", "tokenizer", "greedy", "ids", "verify", "timeout_s", "help", NULL };
    char e[512];
    argc = config_argv(argc, argv, FLAGS, &argv, e, sizeof e);
    if (argc < 0) { snprintf(msg, sizeof msg, "sample: %s", e); return 1; }
    for (int i = 1; i < argc; i++) {
        const char* o = argv[i];
        long x;
        int known = 0;
        for (int k = 0; OPTS[k] && !known; k++) known = !strncmp(o, "--", 2) && !strcmp(o + 2, OPTS[k]);
        if (!known) {
            const char* near = !strncmp(o, "--", 2) ? config_nearest(o + 2, 0, OPTS) : NULL;
            if (near) snprintf(msg, sizeof msg, "sample: unknown option '%s' — did you mean '--%s'? (see --help)", o, near);
            else snprintf(msg, sizeof msg, "sample: unknown option '%s' (see --help)", o);
            return 1;
        }
        if (!strcmp(o, "--greedy")) { a->greedy = 1; continue; }
        if (!strcmp(o, "--ids")) { a->ids = 1; continue; }
        if (!strcmp(o, "--verify")) { a->verify = 1; continue; }
        if (i + 1 >= argc) { snprintf(msg, sizeof msg, "sample: option %s needs a value (see --help)", o); return 1; }
        const char* v = argv[++i];
        if (!strcmp(o, "--ckpt")) a->ckpt = v;
        else if (!strcmp(o, "--prompt")) a->prompt = v;
        else if (!strcmp(o, "--prompt_ids")) a->prompt_ids = v;
        else if (!strcmp(o, "--prompt_file")) a->prompt_file = v;
        else if (!strcmp(o, "--cp_layout")) a->layout = v;
        else if (!strcmp(o, "--comm")) a->comm = v;
        else if (!strcmp(o, "--matmul_precision")) a->precision = v;
        else if (!strcmp(o, "--tokenizer")) a->tokenizer = v;
        else if (!strcmp(o, "--max_tokens")) { if (parse_int(o, v, 0, 1 << 24, &x)) return 1; a->max_tokens = (int)x; }
        else if (!strcmp(o, "--top_k")) { if (parse_int(o, v, 0, 1 << 30, &x)) return 1; a->top_k = (int)x; }
        else if (!strcmp(o, "--stop_at_eod")) { if (parse_int(o, v, 0, 1, &x)) return 1; a->stop_at_eod = (int)x; }
        else if (!strcmp(o, "--tp")) { if (parse_int(o, v, 1, 4096, &x)) return 1; a->tp = (int)x; }
        else if (!strcmp(o, "--cp")) { if (parse_int(o, v, 1, 4096, &x)) return 1; a->cp = (int)x; }
        else if (!strcmp(o, "--seed")) { if (parse_int(o, v, 0, 0x7fffffffL, &x)) return 1; a->seed = x; }
        else if (!strcmp(o, "--temperature")) { if (parse_float(o, v, 0, 100, &a->temperature)) return 1; }
        else if (!strcmp(o, "--top_p")) { if (parse_float(o, v, 0, 1, &a->top_p)) return 1; }
        else if (!strcmp(o, "--timeout_s")) { if (grid_parse_timeout("sample", v, &a->timeout_s, msg, sizeof msg)) return 1; }
        else { snprintf(msg, sizeof msg, "sample: unknown option '%s' (see --help)", o); return 1; }
    }
    if (!a->ckpt) { snprintf(msg, sizeof msg, "sample: --ckpt PATH is required (see --help)"); return 1; }
    if (!!a->prompt + !!a->prompt_ids + !!a->prompt_file > 1) {
        snprintf(msg, sizeof msg, "sample: give one of --prompt, --prompt_ids, --prompt_file");
        return 1;
    }
    if (strcmp(a->layout, "zigzag") && strcmp(a->layout, "contiguous")) {
        snprintf(msg, sizeof msg, "sample: --cp_layout '%s' must be zigzag or contiguous", a->layout);
        return 1;
    }
    if (strcmp(a->precision, "fp32") && strcmp(a->precision, "tf32") && strcmp(a->precision, "bf16")) {
        snprintf(msg, sizeof msg, "sample: --matmul_precision '%s' must be fp32, tf32 or bf16", a->precision);
        return 1;
    }
    if (a->greedy) a->temperature = 0;
    return 0;
}

// --prompt_file: all its bytes into *buf (malloc'd), *len of them — a file, or a pipe read to its end (`<(...)`,
// /dev/stdin), at most PROMPT_MAX bytes; a directory is refused. 0, or 1 + msg
#define PROMPT_MAX (16 << 20)
static int read_prompt(const char* path, char** buf, size_t* len) {
    *buf = NULL; *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        snprintf(msg, sizeof msg, "sample: cannot read --prompt_file '%s': %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return 1;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(msg, sizeof msg, "sample: --prompt_file '%s' is a directory, not a file of text", path);
        close(fd);
        return 1;
    }
    size_t cap = 1 << 16, n = 0;
    char* b = malloc(cap);
    for (;;) {   // to the end: a pipe's size is not known beforehand
        if (b && n == cap) { cap = 2 * cap < PROMPT_MAX + 1 ? 2 * cap : PROMPT_MAX + 1; char* x = realloc(b, cap); if (!x) { free(b); b = NULL; } else b = x; }
        if (!b) { snprintf(msg, sizeof msg, "sample: out of memory reading --prompt_file '%s'", path); close(fd); return 1; }
        ssize_t k = read(fd, b + n, cap - n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) { snprintf(msg, sizeof msg, "sample: cannot read --prompt_file '%s': %s", path, strerror(errno)); break; }
        if (k == 0) { close(fd); *buf = b; *len = n; return 0; }
        if ((n += (size_t)k) > PROMPT_MAX) {
            snprintf(msg, sizeof msg, "sample: --prompt_file '%s' holds more than %d MiB: not a prompt", path, PROMPT_MAX >> 20);
            break;
        }
    }
    close(fd);
    free(b);
    return 1;
}

// the prompt's token ids (host); 0, or 1 + msg
static int prompt_tokens(const Args* a, const Config* c, int** out, int* n) {
    int byte = c->vocab_size == 257, cap = 0, k = 0;
    int* t = NULL;
    if (a->prompt || a->prompt_file) {
        if (!byte) {
            snprintf(msg, sizeof msg, "sample: a text prompt needs the byte vocabulary (vocab_size 257; this model has %d): give "
                     "--prompt_ids, or run tools/sample_text (the same options), which encodes the prompt with the tokenizer",
                     c->vocab_size);
            return 1;
        }
        const char* s = a->prompt;
        char* file = NULL;
        size_t len = s ? strlen(s) : 0;
        if (a->prompt_file) {
            if (read_prompt(a->prompt_file, &file, &len)) return 1;
            s = file;
            if (!len) fprintf(stderr, "sample: note: --prompt_file '%s' is empty: the text starts a document\n", a->prompt_file);
        }
        t = malloc((len ? len : 1) * sizeof(int));
        for (size_t i = 0; i < len; i++) t[k++] = (unsigned char)s[i];
        free(file);
    } else if (a->prompt_ids) {
        const char* p = a->prompt_ids;
        while (*p) {
            char* e;
            long x = strtol(p, &e, 10);
            if (e == p || x < 0 || x >= c->vocab_size) {
                snprintf(msg, sizeof msg, "sample: --prompt_ids: '%.20s' is not a token id below vocab_size = %d", p, c->vocab_size);
                free(t);
                return 1;
            }
            if (k == cap) { cap = cap ? 2 * cap : 64; t = realloc(t, cap * sizeof(int)); }
            t[k++] = (int)x;
            p = *e == ',' ? e + 1 : e;
            if (*e && *e != ',') { snprintf(msg, sizeof msg, "sample: --prompt_ids must be comma-separated ids"); free(t); return 1; }
        }
    }
    if (k == 0) {   // no prompt: the start of a document
        int eod = config_eod(c);
        if (eod < 0) {
            snprintf(msg, sizeof msg, "sample: this model has no end-of-document token to start from (vocab_size %d, eod -1): give a prompt",
                     c->vocab_size);
            free(t);
            return 1;
        }
        t = realloc(t, sizeof(int));
        t[k++] = eod;
    }
    *out = t;
    *n = k;
    return 0;
}

enum { PRINT_IDS, PRINT_BYTES, PRINT_TOKENIZER };

static void print_token(int tok, int mode, const TokDecoder* td, int first) {
    if (mode == PRINT_IDS) { printf(first ? "%d" : ",%d", tok); return; }
    if (mode == PRINT_TOKENIZER) {
        size_t n;
        const unsigned char* b = tokdec_bytes(td, tok, &n);
        fwrite(b, 1, n, stdout);
        return;
    }
    if (tok < 256) putchar(tok);
    else if (tok == 256) printf("\n<|eod|>\n");
    else printf("<|%d|>", tok);                             // (a vocabulary larger than the data's: never trained)
}

// how the tokens are printed (the root rank): the tokenizer of --tokenizer, else the one the checkpoint's training
// data names (data_meta), else bytes (vocab_size 257) or ids with a note; 0, or 1 + msg
static int pick_printing(const Args* a, const Config* c, const char* path, TokDecoder* td, int* mode) {
    *mode = a->ids ? PRINT_IDS : c->vocab_size == 257 ? PRINT_BYTES : PRINT_IDS;
    if (a->ids) return 0;
    static char text[1 << 16];
    char e[900], why[2400] = "";
    DataMeta m;
    int have = ckpt_read_data_meta(path, text, sizeof text, e, sizeof e) == 0 &&
               !data_meta_parse(text, "the checkpoint's data_meta", &m, e, sizeof e);
    if (a->tokenizer) {
        if (tokdec_load(td, a->tokenizer, e, sizeof e)) { snprintf(msg, sizeof msg, "sample: --tokenizer: %s", e); if (have) data_meta_free(&m); return 1; }
        if (have && m.sha256[0] && strcmp(m.sha256, td->sha256))
            fprintf(stderr, "sample: note: --tokenizer '%s' (SHA-256 %.12s...) is not the tokenizer the training data was "
                    "prepared with ('%s', %.12s...)\n", a->tokenizer, td->sha256, m.tokenizer, m.sha256);
        *mode = PRINT_TOKENIZER;
    } else if (have && tokdec_for_meta(td, &m, why, sizeof why)) *mode = PRINT_TOKENIZER;
    else if (have && !why[0] && !strcmp(m.tokenizer, "bytes")) *mode = PRINT_BYTES;
    else if (c->vocab_size != 257)
        fprintf(stderr, "sample: note: %s: printing token ids (give --tokenizer PATH: a tokenizer.json or a model's "
                "directory; --ids says ids are wanted)\n", why[0] ? why : "the checkpoint names no tokenizer (its training "
                "data had no meta.json naming one, or it was imported)");
    if (have) data_meta_free(&m);
    return 0;
}

// a model for one sequence of seq_len tokens in the grid's layout: the parameters of `from` (a model of the same
// layout), else those of checkpoint path (resolved from spec: resolved once more when a live run's keep_last deleted
// it meanwhile; path[2048] then names the checkpoint read)
static void open_model(Model* m, Config* c, const Grid* g, int seq_len, char* path, const char* spec, const Model* from) {
    c->seq_len = seq_len;
    if (c->max_seq_len < seq_len) c->max_seq_len = seq_len;
    ModelGroups mg = { g->tp > 1 ? g->tp_g : NULL, g->cp_g, NULL, NULL, g->cp_g };
    model_build(m, c, 1, seq_len, &mg);
    if (from) { be_copy(m->params, from->params, m->pt.total * sizeof(float)); return; }
    static const char* allow[] = { "max_seq_len", NULL };
    TrainState ts;
    for (int tries = 0;; tries++) {
        int fail = ckpt_load(path, m, NULL, g, &ts, allow, msg, sizeof msg, NULL, 0);
        if (tries || !ckpt_retry_vanished(g->world_g, fail, spec, path)) { grid_check(g->world_g, fail, msg); return; }
        grid_check(g->world_g, ckpt_resolve(spec, spec, path, 2048, msg, sizeof msg), msg);
    }
}

// one forward over tokens [n] at positions 0..n-1 (padded to a multiple of parts); this rank's logits of every
// position, gathered: host [n, V] on every rank (the vocabulary slices summed over TP, positions over cp)
static float* full_logits(Model* m, const Grid* g, const int* tok, int n) {
    int T = m->T, V = m->V;
    size_t nl = (size_t)T;
    int *lt = malloc(nl * sizeof(int)), *lg = malloc(nl * sizeof(int)), *lp = malloc(nl * sizeof(int));
    for (int i = 0; i < T; i++) { int p = m->lpos[i]; lt[i] = p < n ? tok[p] : 0; lg[i] = -1; lp[i] = p; }
    float* ll = calloc(nl * V, sizeof(float));
    model_set_batch(m, lt, lg, lp);
    model_forward(m, 0.0f, ll);
    if (m->tp > 1) {
        double* acc = malloc(nl * V * sizeof(double));
        for (size_t i = 0; i < nl * V; i++) acc[i] = ll[i];
        ctl_sum_f64(m->tp_g, acc, nl * V);
        for (size_t i = 0; i < nl * V; i++) ll[i] = (float)acc[i];
        free(acc);
    }
    int P = g->cp;
    float* all = malloc((size_t)P * nl * V * sizeof(float));
    int* allp = malloc((size_t)P * nl * sizeof(int));
    if (P > 1) {
        ctl_allgather(g->cp_g, ll, all, nl * V * sizeof(float));
        ctl_allgather(g->cp_g, lp, allp, nl * sizeof(int));
    } else { memcpy(all, ll, nl * V * sizeof(float)); memcpy(allp, lp, nl * sizeof(int)); }
    float* out = malloc((size_t)n * V * sizeof(float));
    for (size_t i = 0; i < (size_t)P * nl; i++)
        if (allp[i] < n) memcpy(out + (size_t)allp[i] * V, all + i * V, (size_t)V * sizeof(float));
    free(lt); free(lg); free(lp); free(ll); free(all); free(allp);
    return out;
}

int main(int argc, char** argv) {
    stdout_lines();   // each line appears when printed, also into a file or pipe
    grid_stop_on_signals("sample");
    grid_mpi_init(&argc, &argv);
    const Group* world = group_world();
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { if (!group_rank(world)) usage(stdout); grid_exit(0); }
    Args a;
    int fail = parse_args(argc, argv, &a);
    if (!fail) comm_set_timeout(a.timeout_s);   // (every rank parses the same options: the first wait has it too)
    grid_check(world, fail, msg);
    comm_set_note_stderr(1);   // stdout is the text
    fail = comm_set_transport(a.comm, msg, sizeof msg);
    grid_check(world, fail, msg);
    Grid g;
    fail = grid_build(&g, a.tp, a.cp, 1, msg, sizeof msg);
    grid_check(world, fail, msg);
    if (!fail && g.dp != 1) { snprintf(msg, sizeof msg, "sample: %d ranks for tp %d x cp %d: run exactly tp * cp ranks", g.world, a.tp, a.cp); fail = 1; }
    grid_check(world, fail, msg);
    fail = be_init(g.local_rank, msg, sizeof msg);
    grid_check(world, fail, msg);
    ckpt_init();
    char path[2048] = "";
    Config c;
    for (int tries = 0;; tries++) {   // once more when a live run's keep_last deleted the checkpoint meanwhile
        fail = ckpt_resolve(a.ckpt, a.ckpt, path, sizeof path, msg, sizeof msg) || ckpt_read_config(path, &c, msg, sizeof msg);
        if (tries || !ckpt_retry_vanished(world, fail, a.ckpt, path)) break;
    }
    grid_check(world, fail, msg);
    c.tp = a.tp; c.cp = a.cp; c.micro_batch = 1; c.batch_size = 1; c.zero = 0; c.mlp_tile = 0; snprintf(c.offload, sizeof c.offload, "none"); c.tp_sp = 0; c.cp_a2a = 0;
    c.doc_mask = 0; c.doc_positions = 0;
    snprintf(c.cp_comm, sizeof c.cp_comm, "ring");
    snprintf(c.cp_shard, sizeof c.cp_shard, "window");   // the prompt is one document: the layout's chunks
    snprintf(c.cp_layout, sizeof c.cp_layout, "%s", a.layout);
    snprintf(c.recompute, sizeof c.recompute, "none");
    snprintf(c.matmul_precision, sizeof c.matmul_precision, "%s", a.precision);
    int *prompt = NULL, np = 0;
    fail = prompt_tokens(&a, &c, &prompt, &np);
    grid_check(world, fail, msg);
    int root = group_rank(world) == 0, mode = PRINT_IDS;
    TokDecoder td = {0};
    fail = root && pick_printing(&a, &c, path, &td, &mode);
    grid_check(world, fail, msg);
    int parts = strcmp(a.layout, "zigzag") == 0 ? 2 * a.cp : a.cp;
    int prefill = np - 1;                                     // the last prompt token goes through the cache
    int S = prefill > 0 ? (prefill + parts - 1) / parts * parts : parts;
    int total = np + a.max_tokens;
    if (c.max_seq_len < total) c.max_seq_len = total;         // the RoPE table (positions past training: the user's choice)
    c.seq_len = S;
    char err[960];
    fail = config_validate(&c, err, sizeof err);
    if (fail) snprintf(msg, sizeof msg, "sample: %s", err);
    grid_check(world, fail, msg);
    Model m;
    open_model(&m, &c, &g, S, path, a.ckpt, NULL);
    Decoder d;
    decoder_init(&d, &m, (S / a.cp) + a.max_tokens / a.cp + 2);
    if (prefill > 0) {   // one forward over the prompt but its last token; the cache takes its K/V
        float* ign = full_logits(&m, &g, prompt, prefill);
        free(ign);
        decoder_take_prefill(&d, prefill);
    }
    int eod = config_eod(&c);
    int* seq = malloc((size_t)(np + a.max_tokens + 1) * sizeof(int));
    memcpy(seq, prompt, np * sizeof(int));
    int n = np;
    float* gen_logits = a.verify ? malloc((size_t)(a.max_tokens + 1) * c.vocab_size * sizeof(float)) : NULL;
    uint64_t rng = mix64((uint64_t)a.seed ^ 0x53414d504c45ULL);
    if (root) {
        for (int i = 0; i < np; i++) print_token(prompt[i], mode, &td, i == 0);
        fflush(stdout);
    }
    double t0 = now_s();
    int made = 0;
    const float* lg = decoder_step(&d, seq[n - 1], n - 1);
    for (; made < a.max_tokens && n < c.max_seq_len; made++) {
        if (gen_logits) memcpy(gen_logits + (size_t)made * c.vocab_size, lg, (size_t)c.vocab_size * sizeof(float));
        int next = sample_logits(lg, c.vocab_size, a.temperature, a.top_k, a.top_p, &rng);
        seq[n++] = next;
        if (root) { print_token(next, mode, &td, 0); fflush(stdout); }
        if (a.stop_at_eod && next == eod) { made++; break; }
        if (made + 1 < a.max_tokens) lg = decoder_step(&d, next, n - 1);
    }
    double dt = now_s() - t0;
    if (root)   // the statistics on a line of their own after the text, on stdout: in order with the text also under
                // mpirun, which forwards stdout and stderr separately (on stderr they could land in the middle of it)
        printf("\nsample: %d prompt tokens, %d generated in %.2f s (%.1f tokens/s; tp %d x cp %d, KV cache)\n", np, made,
               dt, made / (dt > 0 ? dt : 1e-9), a.tp, a.cp);
    if (a.verify && made > 0) {   // every generated position's logits from one full forward over the whole sequence
        int L = n - 1, S2 = (L + parts - 1) / parts * parts;
        Model m2;
        Config c2 = c;
        open_model(&m2, &c2, &g, S2, path, a.ckpt, &m);   // (the parameters read: the checkpoint may be gone by now)
        float* full = full_logits(&m2, &g, seq, L);
        double worst = 0, ref = 0;
        for (int k = 0; k < made; k++) {
            const float *a1 = gen_logits + (size_t)k * c.vocab_size, *b1 = full + (size_t)(np - 1 + k) * c.vocab_size;
            for (int v = 0; v < c.vocab_size; v++) {
                double e = fabs((double)a1[v] - b1[v]);
                if (!(e <= worst)) worst = e;
                if (fabs(b1[v]) > ref) ref = fabs(b1[v]);
            }
        }
        double rel = worst / (ref > 0 ? ref : 1), tol = strcmp(a.precision, "fp32") ? 3e-2 : 1e-4;
        if (root) printf("verify: KV cache vs one full forward over %d generated positions: max abs diff %.3e, relative %.3e%s\n",
                         made, worst, rel, rel <= tol ? "" : " (TOO LARGE)");
        free(full);
        model_free(&m2);
        if (!(rel <= tol)) { decoder_free(&d); model_free(&m); grid_exit(1); }
    }
    free(gen_logits); free(seq); free(prompt);
    tokdec_free(&td);
    decoder_free(&d);
    model_free(&m);
    grid_exit(0);
}
