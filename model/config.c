// config.c — the key table and its parser. Errors are one line naming the origin, key and value.
#include "model/config.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <ctype.h>

#define ERR(...) snprintf(err, errlen, __VA_ARGS__)

typedef enum { T_INT, T_I64, T_FLOAT, T_STR, T_BOOL } Type;
typedef struct {
    const char* name; Type type; size_t off; size_t size; int model; const char* def; const char* help;
} Key;

#define K(name, type, model, def, help) { #name, type, offsetof(Config, name), sizeof(((Config*)0)->name), model, def, help }
static const Key KEYS[] = {
    K(vocab_size, T_INT, 1, "257", "vocabulary size (byte tokenizer: 256 bytes + end-of-document = 257)"),
    K(d_model, T_INT, 1, "256", "model width C"),
    K(n_layer, T_INT, 1, "4", "number of transformer layers"),
    K(n_head, T_INT, 1, "8", "query heads (head_dim = d_model / n_head)"),
    K(n_kv_head, T_INT, 1, "2", "key/value heads (grouped-query attention; divides n_head)"),
    K(d_ff, T_INT, 1, "704", "SwiGLU hidden width F"),
    K(max_seq_len, T_INT, 1, "4096", "largest context the model is built for (seq_len <= max_seq_len)"),
    K(rope_theta, T_FLOAT, 1, "10000", "RoPE base b"),
    K(rope_scaling, T_STR, 1, "none", "RoPE scaling: none | linear | yarn (HF transformers semantics)"),
    K(rope_factor, T_FLOAT, 1, "1", "RoPE scaling factor s (linear, yarn)"),
    K(rope_original_max_seq_len, T_INT, 1, "4096", "YaRN: original context length L the RoPE was trained for"),
    K(norm_eps, T_FLOAT, 1, "1e-5", "RMSNorm epsilon"),
    K(tie_embeddings, T_BOOL, 1, "0", "1: the LM head reuses model.embed_tokens.weight (no lm_head.weight)"),
    K(init_std, T_FLOAT, 1, "0.02", "std of the normal init (o_proj/down_proj: init_std / sqrt(2 n_layer))"),
    K(train_data, T_STR, 0, "", "training shards: glob pattern, directory (one with a meta.json, as build/prepare writes: its train_*.bin) or file"),
    K(val_data, T_STR, 0, "", "validation shards (a directory with a meta.json: its val_*.bin; empty: no validation)"),
    K(out_dir, T_STR, 0, "out", "output directory (metrics.jsonl, config.txt, checkpoints)"),
    K(tensorboard_dir, T_STR, 0, "", "also write each step's metrics as TensorBoard event files into this directory while training, tags as tools/metrics_to_tensorboard.py's (empty: none)"),
    K(seq_len, T_INT, 0, "1024", "tokens per training sequence"),
    K(batch_size, T_INT, 0, "8", "sequences per optimizer step (global, over all data-parallel replicas)"),
    K(micro_batch, T_INT, 0, "1", "sequences per forward/backward on one rank; accumulation = batch_size / (micro_batch * dp)"),
    K(max_steps, T_INT, 0, "100", "optimizer steps to run"),
    K(lr, T_FLOAT, 0, "3e-4", "peak learning rate"),
    K(min_lr, T_FLOAT, 0, "3e-5", "learning rate at the end of the decay"),
    K(warmup_steps, T_INT, 0, "10", "linear warmup steps"),
    K(lr_schedule, T_STR, 0, "cosine", "decay after warmup: cosine | linear (lr to min_lr at lr_horizon) | wsd (warmup-stable-decay: lr until the last lr_cooldown steps, then linearly to min_lr at max_steps) | constant"),
    K(lr_horizon, T_INT, 0, "0", "cosine, linear: the step at which the decay reaches min_lr, which then holds (0: max_steps); set it to the old max_steps to extend a run without a jump"),
    K(lr_cooldown, T_INT, 0, "0", "wsd: steps of the final decay, ending at max_steps (0: max_steps / 5); a run extended while still at lr decays at its new end"),
    K(weight_decay, T_FLOAT, 0, "0.1", "AdamW decoupled weight decay (2-D weights only)"),
    K(beta1, T_FLOAT, 0, "0.9", "AdamW beta1"),
    K(beta2, T_FLOAT, 0, "0.95", "AdamW beta2"),
    K(adam_eps, T_FLOAT, 0, "1e-8", "AdamW epsilon"),
    K(grad_clip, T_FLOAT, 0, "1.0", "clip the global gradient norm to this (0: off)"),
    K(seed, T_I64, 0, "1337", "seed of initial weights and data order"),
    K(shuffle, T_BOOL, 0, "1", "visit training sequences in a seeded permutation per epoch"),
    K(doc_mask, T_BOOL, 0, "0", "1: attention stays inside each document of a packed sequence (documents start at the eod token), also through the ring"),
    K(doc_positions, T_BOOL, 0, "0", "1 (with doc_mask): RoPE positions restart at 0 at each document's eod token"),
    K(eod, T_INT, 0, "-1", "end-of-document token that starts each document (-1: 256 for the byte tokenizer's vocab 257, else none)"),
    K(val_every, T_INT, 0, "0", "validate every N steps and at the end (0: only at the end if val_data is set)"),
    K(val_batches, T_INT, 0, "4", "validation sequences per evaluation = val_batches * batch_size"),
    K(log_every, T_INT, 0, "1", "print a step line every N steps"),
    K(peak_tflops, T_FLOAT, 0, "0", "the peak of a rank's matmuls that the step line's MFU divides by, TFLOP/s (0: measured at start-up, a timed matmul on each rank; docs/training.md)"),
    K(sample_every, T_INT, 0, "0", "print a sample of the model's text every N steps and after the last (0: off); with a KV cache, on the run's own layout"),
    K(sample_tokens, T_INT, 0, "64", "tokens per sample"),
    K(sample_prompt, T_STR, 0, "", "the samples' prompt: text for the byte tokenizer (vocab_size 257), or ids:1,2,3 for any (empty: the eod token, the start of a document)"),
    K(sample_temperature, T_FLOAT, 0, "0.8", "the samples' temperature (0: greedy), drawn with a seed fixed for the run"),
    K(data_meta, T_BOOL, 0, "1", "1: take vocab_size and eod from the meta.json beside the training shards (build/prepare, tools/prepare_hf write it) and refuse values that contradict it; 0: ignore it"),
    K(pack, T_STR, 0, "stream", "training windows: stream (consecutive slices of the token stream) | doc_start (each window starts at a document; a longer one continues in the next; the tail takes the following documents) | best_fit (best-fit decreasing over pack_buffer documents: no document shorter than a window is cut; padding is never trained on)"),
    K(pack_buffer, T_INT, 0, "4096", "best_fit: documents packed together per round (more: less padding)"),
    K(upsample_len, T_I64, 0, "0", "length upsampling (with pack doc_start or best_fit): documents longer than this many tokens are used upsample_factor times (0: off)"),
    K(upsample_factor, T_FLOAT, 0, "1", "how many times a document longer than upsample_len is used (a fraction f: one more use with probability f)"),
    K(tp, T_INT, 0, "1", "tensor-parallel degree (ranks that split every layer's heads and MLP)"),
    K(cp, T_INT, 0, "1", "context-parallel degree: ranks in a ring that split each sequence"),
    K(cp_layout, T_STR, 0, "zigzag", "ring layout: zigzag (balanced causal work) | contiguous"),
    K(cp_comm, T_STR, 0, "ring", "context parallelism: ring (K/V blocks rotate around the cp ranks) | a2a (Ulysses: an all-to-all trades each rank's tokens of all heads for all tokens of 1/cp of the heads; cp_a2a = cp) | a2a+ring (the all-to-all inside groups of cp_a2a consecutive cp ranks, a ring of cp / cp_a2a groups carrying head shards)"),
    K(cp_a2a, T_INT, 0, "0", "all-to-all degree U of cp_comm = a2a (0: cp) or a2a+ring (2 <= U < cp, U divides cp); tp x U divides n_head"),
    K(cp_shard, T_STR, 0, "window", "how a sequence is split over the cp ranks: window (the layout's chunks of the whole window) | document (with doc_mask: each document of at least cp_shard_min tokens cut into the layout's chunks, the others placed whole on ranks balanced by attention work; see docs/cp_balance.md)"),
    K(cp_shard_min, T_INT, 0, "-1", "cp_shard = document: documents of at least this many tokens are split over every cp rank (-1: seq_len / cp; between 2 * cp and seq_len); shorter ones only as far as the work's balance needs"),
    K(cp_prune, T_BOOL, 0, "1", "1: a ring hop carries a K/V block only while some rank further on can see one of its keys (the pruned schedule; bit-identical results); 0: every block travels the whole ring"),
    K(tp_sp, T_BOOL, 0, "0", "1: sequence parallelism inside TP groups: residual stream, norms and their saved tensors on 1/tp of the tokens (all-gather before q/k/v and gate/up, reduce-scatter after o_proj and down_proj)"),
    K(zero, T_INT, 0, "0", "ZeRO stage over the dp x cp ranks: 0 off, 1 shards the AdamW moments, 2 also the gradients (reduce-scattered layer by layer in the backward), 3 also the parameters (all-gathered layer by layer before use; docs/long_sequences.md)"),
    K(verify_attention, T_INT, 0, "0", "every N steps compare ring attention with one-process attention (0: off)"),
    K(ckpt_every, T_INT, 0, "0", "save a checkpoint every N steps (0: only the final one); OUT_DIR/ckpt_STEP.h5"),
    K(keep_last, T_INT, 0, "3", "keep the newest K checkpoints (0: keep all)"),
    K(save_final, T_INT, 0, "1", "save a checkpoint at the end of the run (0: no final save, e.g. for benchmarks)"),
    K(ckpt_io, T_STR, 0, "collective", "checkpoint data transfers: collective (MPI-IO aggregation, for parallel file systems) | independent"),
    K(comm, T_STR, 0, "auto", "data transport between ranks: auto (the backend's: CPU mpi, GPU nccl) | mpi (a GPU stages through host memory) | nccl"),
    K(recompute, T_STR, 0, "none", "activation recomputation: none | mlp (norm2 + SwiGLU) | qkv (also norm1, q, k, v) | full (the whole layer from its input; the ring rotates K/V again)"),
    K(offload, T_STR, 0, "none", "activation offload: none | ckpt (with recompute qkv or full, each layer's saved tensors go to pinned host memory on a copy stream while the next layers compute and come back one layer ahead in the backward; the CUDA backend only; docs/long_sequences.md)"),
    K(mlp_tile, T_INT, 0, "0", "rows per MLP tile: the MLP runs over tiles of this many of a rank's micro_batch x seq_len / cp rows, its [rows x d_ff] tensors never whole, each tile's recomputed in the backward (0: untiled)"),
    K(attn_engine, T_STR, 0, "auto", "attention's block engine: auto (a GPU: cuDNN's fused attention for each class of block that passes a check against the own kernels at start-up, else the own kernels) | cudnn (cuDNN, or an error) | own"),
    K(matmul_precision, T_STR, 0, "bf16", "GPU matmuls: bf16 | tf32 tensor cores (fp32 accumulation) | fp32; the CPU backend always computes fp32"),
    K(act_dtype, T_STR, 0, "bf16", "activations between kernels and kept for the backward: bf16 (a GPU with matmul_precision = bf16: with bf16 copies of the weights, refreshed once per optimizer step; norms' reductions, softmax statistics, the residual stream, attention's inputs and merge, all gradient accumulations stay fp32) | fp32; the CPU backend always computes fp32"),
    K(timeout_s, T_FLOAT, 0, "600", "watchdog: a collective or ring transfer that waits longer aborts the job naming the ranks that did not arrive (0: off)"),
    K(resume, T_STR, 0, "", "resume from a checkpoint file, a directory (its latest) or 'latest' (out_dir's)"),
    K(dump_weights, T_STR, 0, "", "write the final weights and last gradients to this file (tests' RLMDUMP1 format; empty: off)"),
};
#define NKEYS ((int)(sizeof(KEYS) / sizeof(KEYS[0])))
_Static_assert(sizeof(KEYS) / sizeof(KEYS[0]) <= sizeof(((Config*)0)->given), "Config.given has a slot per key");

int config_given(const Config* c, const char* key) {
    for (int i = 0; i < NKEYS; i++) if (!strcmp(KEYS[i].name, key)) return c->given[i];
    return 0;
}

static const Key* find_key(const char* name) {
    for (int i = 0; i < NKEYS; i++) if (strcmp(KEYS[i].name, name) == 0) return &KEYS[i];
    return NULL;
}

static int set_key(Config* c, const Key* k, const char* v, const char* origin, char* err, size_t errlen) {
    char* base = (char*)c + k->off;
    if (strcmp(origin, "defaults")) c->given[k - KEYS] = strncmp(origin, "command line", 12) ? CFG_GIVEN_FILE : CFG_GIVEN_CLI;
    char* end = NULL;
    errno = 0;
    switch (k->type) {
    case T_INT: case T_BOOL: case T_I64: {
        long long x = strtoll(v, &end, 10);
        if (end == v || *end || errno) goto bad;
        if (k->type == T_BOOL && x != 0 && x != 1) goto bad;
        if (k->type == T_I64) *(long long*)base = x;
        else { if (x < -2147483647LL || x > 2147483647LL) goto bad; *(int*)base = (int)x; }
        return 0;
    }
    case T_FLOAT: {
        double x = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(x)) goto bad;
        float f = (float)x;   // the value that will be used: finite after the cast too (|x| <= 3.4e38)
        if (!isfinite(f)) {
            ERR("config: %s: key '%s' has invalid value '%s' (out of the float range: at most 3.4e38 in magnitude)",
                origin, k->name, v);
            return 1;
        }
        *(float*)base = f;
        return 0;
    }
    case T_STR:
        if (strlen(v) >= k->size) {
            ERR("config: %s: value of '%s' is longer than %zu characters", origin, k->name, k->size - 1);
            return 1;
        }
        strcpy(base, v);
        return 0;
    }
bad:
    ERR("config: %s: key '%s' has invalid value '%s' (expected %s)", origin, k->name, v,
            k->type == T_FLOAT ? "a number" : k->type == T_BOOL ? "0 or 1" : "an integer");
    return 1;
}

void config_defaults(Config* c) {
    memset(c, 0, sizeof *c);
    char err[256];
    size_t errlen = sizeof err;
    for (int i = 0; i < NKEYS; i++)
        if (set_key(c, &KEYS[i], KEYS[i].def, "defaults", err, errlen)) { fprintf(stderr, "%s\n", err); abort(); }
}

int config_set(Config* c, const char* key, const char* value, const char* origin, char* err, size_t errlen) {
    const Key* k = find_key(key);
    if (!k) { config_unknown(origin, key, NULL, err, errlen); return 1; }
    return set_key(c, k, value, origin, err, errlen);
}

// ---- unknown names: the nearest known one ----------------------------------------------------------------

// Levenshtein distance of a and b, ignoring case and reading '-' as '_' (names up to 127 characters)
static int edit_distance(const char* a, const char* b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 127 || lb > 127) return 1 << 20;
    int row[128];
    for (int j = 0; j <= lb; j++) row[j] = j;
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int ca = tolower((unsigned char)(a[i - 1] == '-' ? '_' : a[i - 1]));
            int cb = tolower((unsigned char)(b[j - 1] == '-' ? '_' : b[j - 1]));
            int best = diag + (ca != cb);
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = row[j];
            row[j] = best;
        }
    }
    return row[lb];
}

// is a (at least 2 characters) a prefix of b, ignoring case and reading '-' as '_'
static int name_prefix(const char* a, const char* b) {
    if (strlen(a) < 2) return 0;
    for (; *a; a++, b++) {
        int ca = tolower((unsigned char)(*a == '-' ? '_' : *a)), cb = tolower((unsigned char)(*b == '-' ? '_' : *b));
        if (!*b || ca != cb) return 0;
    }
    return 1;
}

const char* config_nearest(const char* name, int keys, const char* const* extra) {
    const char* best = NULL;
    int bestd = 1 << 30, len = (int)strlen(name);
    for (int pass = 0; pass < 2; pass++) {
        int n = pass == 0 ? (keys ? NKEYS : 0) : 0;
        if (pass == 1) while (extra && extra[n]) n++;
        for (int i = 0; i < n; i++) {
            const char* cand = pass == 0 ? KEYS[i].name : extra[i];
            int d = edit_distance(name, cand);
            if (((d <= 3 && 2 * d <= len) || name_prefix(name, cand)) && d < bestd) { best = cand; bestd = d; }
        }
    }
    return best;
}

void config_unknown(const char* origin, const char* key, const char* const* extra, char* err, size_t errlen) {
    const char* near = config_nearest(key, 1, extra);
    if (near) ERR("config: %s: unknown key '%s' — did you mean '%s'? (see --help for the keys)", origin, key, near);
    else ERR("config: %s: unknown key '%s' (see --help for the keys)", origin, key);
}

// ---- the command line: --name value, --name=value, dashes for underscores ------------------------------------

static int is_flag(const char* name, const char* const* flags) {
    for (int i = 0; flags && flags[i]; i++) if (!strcmp(name, flags[i])) return 1;
    return 0;
}

int config_argv(int argc, char** argv, const char* const* flags, char*** out, char* err, size_t errlen) {
    char** v = calloc((size_t)2 * (argc > 0 ? argc : 1) + 1, sizeof(char*));   // at most every word split in two
    if (!v) { ERR("command line: out of memory"); return -1; }
    int n = 0;
    if (argc > 0) v[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (a[0] != '-' || !a[1] || !strcmp(a, "--")) { v[n++] = argv[i]; continue; }   // a positional word
        if (a[1] != '-') {   // -c FILE, -h: as given
            v[n++] = argv[i];
            if (!is_flag(a, flags) && i + 1 < argc) v[n++] = argv[++i];
            continue;
        }
        const char* eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        char* name = malloc(len + 1);
        if (!name) { ERR("command line: out of memory"); free(v); return -1; }
        for (size_t k = 0; k < len; k++) name[k] = k >= 2 && a[k] == '-' ? '_' : a[k];
        name[len] = 0;
        v[n++] = name;
        if (is_flag(name, flags)) {
            if (eq) { ERR("command line: option '%s' takes no value (given '%s')", name, a); free(v); return -1; }
        } else if (eq) v[n++] = (char*)eq + 1;
        else if (i + 1 < argc) v[n++] = argv[++i];   // the value, as given (it may begin with '-': --eod -1)
    }
    v[n] = NULL;
    *out = v;
    return n;
}

static char* trim(char* s) {
    while (isspace((unsigned char)*s)) s++;
    char* e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

#define CONFIG_MAX_BYTES (1 << 20)   // a config file is a few hundred bytes: anything near this is not one
#define CONFIG_MAX_LINE 4095

int config_load_file(Config* c, const char* path, char* err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);   // (O_NONBLOCK: a FIFO must not block the open)
    if (fd < 0) { ERR("config: cannot open '%s': %s", path, strerror(errno)); return 1; }
    struct stat st;
    if (fstat(fd, &st)) { ERR("config: cannot read '%s': %s", path, strerror(errno)); close(fd); return 1; }
    struct stat nul;   // /dev/null: the usual way to say "no config file" (an empty one)
    if (S_ISCHR(st.st_mode) && !stat("/dev/null", &nul) && S_ISCHR(nul.st_mode) && st.st_rdev == nul.st_rdev) { close(fd); return 0; }
    if (!S_ISREG(st.st_mode)) {
        ERR("config: '%s' is %s, not a config file (plain `key = value` lines)", path, S_ISDIR(st.st_mode) ? "a directory" :
            S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : S_ISFIFO(st.st_mode) ? "a pipe" : "not a regular file");
        close(fd);
        return 1;
    }
    if (st.st_size > CONFIG_MAX_BYTES) {
        ERR("config: '%s' is %lld bytes, more than a config file can be (%d at most): is it the right file?", path,
            (long long)st.st_size, CONFIG_MAX_BYTES);
        close(fd);
        return 1;
    }
    static char text[CONFIG_MAX_BYTES + 2];
    size_t len = 0;
    for (;;) {   // the whole file (it may grow while read: at most the limit + 1 byte, which is then an error)
        ssize_t k = read(fd, text + len, CONFIG_MAX_BYTES + 1 - len);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) { ERR("config: cannot read '%s': %s", path, strerror(errno)); close(fd); return 1; }
        if (k == 0 || (len += (size_t)k) > CONFIG_MAX_BYTES) break;
    }
    close(fd);
    if (len > CONFIG_MAX_BYTES) { ERR("config: '%s' is more than %d bytes: is it the right file?", path, CONFIG_MAX_BYTES); return 1; }
    text[len] = 0;
    char line[CONFIG_MAX_LINE + 1], origin[1200];
    int lineno = 0, rc = 0;
    int set_at[NKEYS];   // the line of this file that set each key (0: none yet): a key set twice is refused
    memset(set_at, 0, sizeof set_at);
    for (size_t pos = 0; !rc && pos < len;) {
        const char* nl = memchr(text + pos, '\n', len - pos);
        size_t l = (nl ? (size_t)(nl - text) : len) - pos;
        lineno++;
        if (memchr(text + pos, 0, l)) {
            ERR("config: %s:%d holds a NUL byte (a binary file, or a corrupt one?)", path, lineno);
            return 1;
        }
        if (l > CONFIG_MAX_LINE) {
            ERR("config: %s:%d is %zu characters long (at most %d): is it the right file?", path, lineno, l, CONFIG_MAX_LINE);
            return 1;
        }
        memcpy(line, text + pos, l);
        line[l] = 0;
        pos += l + 1;
        char* hash = strchr(line, '#');
        if (hash) *hash = 0;
        char* s = trim(line);
        if (!*s) continue;
        snprintf(origin, sizeof origin, "%s:%d", path, lineno);
        char* eq = strchr(s, '=');
        if (!eq) { ERR("config: %s: expected 'key = value', got '%.200s'", origin, s); rc = 1; break; }
        *eq = 0;
        const char* name = trim(s);
        const Key* k = find_key(name);
        if (k && set_at[k - KEYS]) {
            ERR("config: key '%s' is set twice, at %s:%d and %s:%d (the last would silently win): keep one of them",
                name, path, set_at[k - KEYS], path, lineno);
            rc = 1;
            break;
        }
        if (k) set_at[k - KEYS] = lineno;
        rc = config_set(c, name, trim(eq + 1), origin, err, errlen);
    }
    return rc;
}

#define FAIL(...) do { int n_ = snprintf(err, errlen, "config: "); \
    snprintf(err + n_, errlen - n_, __VA_ARGS__); return 1; } while (0)
int config_validate(const Config* c, char* err, size_t errlen) {
    const char* pos[] = { "vocab_size", "d_model", "n_layer", "n_head", "n_kv_head", "d_ff", "max_seq_len",
                          "seq_len", "batch_size", "micro_batch", "rope_original_max_seq_len", "log_every" };
    const int vals[] = { c->vocab_size, c->d_model, c->n_layer, c->n_head, c->n_kv_head, c->d_ff, c->max_seq_len,
                         c->seq_len, c->batch_size, c->micro_batch, c->rope_original_max_seq_len, c->log_every };
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
        if (vals[i] <= 0) FAIL("%s = %d must be > 0", pos[i], vals[i]);
    if (c->max_steps < 0 || c->warmup_steps < 0 || c->val_every < 0 || c->val_batches < 0)
        FAIL("max_steps, warmup_steps, val_every and val_batches must be >= 0");
    if (c->d_model % c->n_head) FAIL("d_model = %d is not divisible by n_head = %d", c->d_model, c->n_head);
    if (c->n_head % c->n_kv_head) FAIL("n_head = %d is not divisible by n_kv_head = %d", c->n_head, c->n_kv_head);
    if (c->d_model / c->n_head > 2048) FAIL("head_dim = d_model / n_head = %d exceeds 2048", c->d_model / c->n_head);
    if ((c->d_model / c->n_head) % 2) FAIL("head_dim = d_model / n_head = %d must be even for RoPE", c->d_model / c->n_head);
    if (c->seq_len > c->max_seq_len) FAIL("seq_len = %d exceeds max_seq_len = %d", c->seq_len, c->max_seq_len);
    if (c->batch_size % c->micro_batch) FAIL("batch_size = %d is not divisible by micro_batch = %d", c->batch_size, c->micro_batch);
    if (strcmp(c->rope_scaling, "none") && strcmp(c->rope_scaling, "linear") && strcmp(c->rope_scaling, "yarn"))
        FAIL("rope_scaling = '%s' must be none, linear or yarn", c->rope_scaling);
    if (c->rope_theta <= 1) FAIL("rope_theta = %g must be > 1", c->rope_theta);
    if (!(c->rope_factor > 0 && c->rope_factor <= 1e6)) FAIL("rope_factor = %g must be in (0, 1e6]", c->rope_factor);
    if (c->norm_eps <= 0) FAIL("norm_eps = %g must be > 0", c->norm_eps);
    if (!(c->peak_tflops >= 0 && c->peak_tflops <= 1e6))
        FAIL("peak_tflops = %g must be in [0, 1e6] (0: measured at start-up)", c->peak_tflops);
    if (c->init_std <= 0) FAIL("init_std = %g must be > 0", c->init_std);
    if (c->lr < 0 || c->min_lr < 0) FAIL("lr and min_lr must be >= 0");
    if (c->min_lr > c->lr) FAIL("min_lr = %g exceeds lr = %g", c->min_lr, c->lr);
    if (c->weight_decay < 0) FAIL("weight_decay = %g must be >= 0", c->weight_decay);
    if (c->beta1 < 0 || c->beta1 >= 1 || c->beta2 < 0 || c->beta2 >= 1) FAIL("beta1 and beta2 must be in [0, 1)");
    if (c->adam_eps <= 0) FAIL("adam_eps = %g must be > 0", c->adam_eps);
    if (c->tp <= 0 || c->cp <= 0) FAIL("tp = %d and cp = %d must be >= 1", c->tp, c->cp);
    if (strcmp(c->cp_layout, "zigzag") && strcmp(c->cp_layout, "contiguous"))
        FAIL("cp_layout = '%s' must be zigzag or contiguous", c->cp_layout);
    int parts = strcmp(c->cp_layout, "zigzag") == 0 ? 2 * c->cp : c->cp;
    if (c->seq_len % parts)
        FAIL("seq_len = %d is not divisible by %s%d (cp = %d, %s layout)", c->seq_len,
             parts == 2 * c->cp ? "2 * cp = " : "cp = ", parts, c->cp, c->cp_layout);
    if (strcmp(c->cp_shard, "window") && strcmp(c->cp_shard, "document"))
        FAIL("cp_shard = '%s' must be window or document", c->cp_shard);
    if (strcmp(c->cp_shard, "document") && c->cp_shard_min != -1)
        FAIL("cp_shard_min = %d is read only with cp_shard = document (this run: cp_shard = %s, which splits every window "
             "into the layout's chunks): set cp_shard = document, or cp_shard_min = -1", c->cp_shard_min, c->cp_shard);
    if (!strcmp(c->cp_shard, "document")) {
        if (!c->doc_mask)
            FAIL("cp_shard = document needs doc_mask = 1 (it shards by the documents that the mask keeps apart; without "
                 "the mask a window is one sequence: use cp_shard = window)");
        if (c->cp_shard_min != -1 && c->cp_shard_min < 1)
            FAIL("cp_shard_min = %d must be -1 (seq_len / cp) or a document length from %d to seq_len = %d", c->cp_shard_min,
                 parts, c->seq_len);
        if (c->cp_shard_min > c->seq_len)
            FAIL("cp_shard_min = %d exceeds seq_len = %d: no document of a window could reach it (-1: seq_len / cp)",
                 c->cp_shard_min, c->seq_len);
        if (c->cp_shard_min != -1 && c->cp_shard_min < parts)
            FAIL("cp_shard_min = %d: a document shorter than %s%d tokens cannot be split into that many chunks (cp = %d, %s "
                 "layout)", c->cp_shard_min, parts == 2 * c->cp ? "2 * cp = " : "cp = ", parts, c->cp, c->cp_layout);
    }
    if (strcmp(c->cp_comm, "ring") && strcmp(c->cp_comm, "a2a") && strcmp(c->cp_comm, "a2a+ring"))
        FAIL("cp_comm = '%s' must be ring, a2a or a2a+ring", c->cp_comm);
    if (!strcmp(c->cp_comm, "ring") && c->cp_a2a > 1)
        FAIL("cp_a2a = %d needs cp_comm = a2a or a2a+ring (cp_comm = ring has no all-to-all)", c->cp_a2a);
    if (c->cp_a2a < 0) FAIL("cp_a2a = %d must be >= 0", c->cp_a2a);
    if (!strcmp(c->cp_comm, "a2a") && c->cp_a2a && c->cp_a2a != c->cp)
        FAIL("cp_comm = a2a runs the all-to-all over all cp = %d ranks, but cp_a2a = %d (for an all-to-all over fewer, "
             "cp_comm = a2a+ring)", c->cp, c->cp_a2a);
    if (!strcmp(c->cp_comm, "a2a+ring") && (c->cp_a2a < 2 || c->cp_a2a >= c->cp || c->cp % c->cp_a2a))
        FAIL("cp_comm = a2a+ring needs cp_a2a between 2 and cp / 2 dividing cp = %d (the ring has cp / cp_a2a ranks), "
             "not cp_a2a = %d", c->cp, c->cp_a2a);
    int U = config_a2a(c);
    if (U > 1 && c->n_head % (c->tp * U))
        FAIL("n_head = %d is not divisible by tp x cp_a2a = %d x %d = %d (each rank of an all-to-all group takes whole "
             "query heads)", c->n_head, c->tp, U, c->tp * U);
    if (U > 1 && c->n_kv_head % c->tp == 0) {
        int kv = c->n_kv_head / c->tp;
        if (kv >= U ? kv % U : U % kv)
            FAIL("n_kv_head / tp = %d KV heads per TP rank and cp_a2a = %d: one must divide the other (more ranks than "
                 "KV heads replicate each KV head over cp_a2a / (n_kv_head / tp) ranks)", kv, U);
    }
    if (c->tp_sp != 0 && c->tp_sp != 1) FAIL("tp_sp = %d must be 0 or 1", c->tp_sp);
    if (c->tp_sp && c->cp > 0 && ((long long)c->micro_batch * (c->seq_len / c->cp)) % c->tp)
        FAIL("tp_sp = 1 splits each rank's micro_batch x seq_len / cp = %d x %d = %lld tokens over tp = %d: not divisible",
             c->micro_batch, c->seq_len / c->cp, (long long)c->micro_batch * (c->seq_len / c->cp), c->tp);
    if (c->ckpt_every < 0 || c->keep_last < 0) FAIL("ckpt_every and keep_last must be >= 0");
    if (c->save_final != 0 && c->save_final != 1) FAIL("save_final = %d must be 0 or 1", c->save_final);
    if (strcmp(c->ckpt_io, "collective") && strcmp(c->ckpt_io, "independent"))
        FAIL("ckpt_io = '%s' must be collective or independent", c->ckpt_io);
    if (strcmp(c->comm, "auto") && strcmp(c->comm, "mpi") && strcmp(c->comm, "nccl"))
        FAIL("comm = '%s' must be auto, mpi or nccl", c->comm);
    if (recompute_mode(c->recompute) < 0)
        FAIL("recompute = '%s' must be none, mlp, qkv or full", c->recompute);
    if (strcmp(c->offload, "none") && strcmp(c->offload, "ckpt")) FAIL("offload = '%s' must be none or ckpt", c->offload);
    if (!strcmp(c->offload, "ckpt") && recompute_mode(c->recompute) < RECOMPUTE_QKV)
        FAIL("offload = ckpt moves the layers' saved inputs to host memory, and recompute = %s saves more than their inputs "
             "(every layer's q, k, v%s): use recompute = qkv or full", c->recompute,
             recompute_mode(c->recompute) == RECOMPUTE_NONE ? " and MLP tensors" : "");
    long long rows = (long long)c->micro_batch * (c->cp > 0 ? c->seq_len / c->cp : 0);
    if (c->mlp_tile < 0) FAIL("mlp_tile = %d must be >= 0 (0: untiled)", c->mlp_tile);
    if (c->mlp_tile > rows)
        FAIL("mlp_tile = %d is larger than the %lld rows of a rank (micro_batch x seq_len / cp = %d x %d): use at most %lld, "
             "or 0 (untiled)", c->mlp_tile, rows, c->micro_batch, c->cp > 0 ? c->seq_len / c->cp : 0, rows);
    if (strcmp(c->attn_engine, "auto") && strcmp(c->attn_engine, "cudnn") && strcmp(c->attn_engine, "own"))
        FAIL("attn_engine = '%s' must be auto, cudnn or own", c->attn_engine);
    if (strcmp(c->matmul_precision, "bf16") && strcmp(c->matmul_precision, "tf32") && strcmp(c->matmul_precision, "fp32"))
        FAIL("matmul_precision = '%s' must be bf16, tf32 or fp32", c->matmul_precision);
    if (strcmp(c->act_dtype, "bf16") && strcmp(c->act_dtype, "fp32")) FAIL("act_dtype = '%s' must be bf16 or fp32", c->act_dtype);
    if (c->zero < 0 || c->zero > 3) FAIL("zero = %d must be 0, 1, 2 or 3", c->zero);
    if (c->n_head % c->tp) FAIL("n_head = %d is not divisible by tp = %d (each TP rank owns whole heads)", c->n_head, c->tp);
    if (c->n_kv_head % c->tp) FAIL("n_kv_head = %d is not divisible by tp = %d (each TP rank owns whole KV heads)", c->n_kv_head, c->tp);
    if (c->d_ff % c->tp) FAIL("d_ff = %d is not divisible by tp = %d", c->d_ff, c->tp);
    if (c->vocab_size < c->tp) FAIL("vocab_size = %d is smaller than tp = %d", c->vocab_size, c->tp);
    if (c->verify_attention < 0) FAIL("verify_attention = %d must be >= 0", c->verify_attention);
    if (c->grad_clip < 0) FAIL("grad_clip = %g must be >= 0 (0 turns clipping off)", c->grad_clip);
    if (c->eod < -1 || c->eod >= c->vocab_size) FAIL("eod = %d must be -1 or a token id below vocab_size = %d", c->eod, c->vocab_size);
    if (strcmp(c->lr_schedule, "cosine") && strcmp(c->lr_schedule, "linear") && strcmp(c->lr_schedule, "wsd") &&
        strcmp(c->lr_schedule, "constant"))
        FAIL("lr_schedule = '%s' must be cosine, linear, wsd or constant", c->lr_schedule);
    if (c->lr_horizon < 0 || (c->lr_horizon && c->lr_horizon <= c->warmup_steps))
        FAIL("lr_horizon = %d must be 0 (max_steps) or a step after warmup_steps = %d", c->lr_horizon, c->warmup_steps);
    if (c->lr_cooldown < 0) FAIL("lr_cooldown = %d must be >= 0 (0: max_steps / 5)", c->lr_cooldown);
    if (c->sample_every < 0 || c->sample_tokens < 1)
        FAIL("sample_every = %d must be >= 0 and sample_tokens = %d >= 1", c->sample_every, c->sample_tokens);
    if (strcmp(c->pack, "stream") && strcmp(c->pack, "doc_start") && strcmp(c->pack, "best_fit"))
        FAIL("pack = '%s' must be stream, doc_start or best_fit", c->pack);
    if (c->pack_buffer < 1) FAIL("pack_buffer = %d must be >= 1", c->pack_buffer);
    if (c->upsample_len < 0) FAIL("upsample_len = %lld must be >= 0 (0: off)", c->upsample_len);
    if (!(c->upsample_factor >= 0 && c->upsample_factor <= 1000)) FAIL("upsample_factor = %g must be in [0, 1000]", c->upsample_factor);
    if ((c->upsample_len > 0 || c->upsample_factor != 1) && !strcmp(c->pack, "stream"))
        FAIL("upsample_len / upsample_factor need pack = doc_start or best_fit (stream windows do not see documents)");
    if (strcmp(c->pack, "stream") && config_eod(c) < 0)
        FAIL("pack = %s needs the end-of-document token: set eod (vocab_size = %d is not the byte tokenizer's 257), or "
             "train on data whose meta.json names it", c->pack, c->vocab_size);
    if (c->sample_temperature < 0) FAIL("sample_temperature = %g must be >= 0 (0: greedy)", c->sample_temperature);
    if (c->doc_positions && !c->doc_mask) FAIL("doc_positions = 1 needs doc_mask = 1");
    if (c->doc_mask && config_eod(c) < 0)
        FAIL("doc_mask = 1 needs the end-of-document token: set eod (vocab_size = %d is not the byte tokenizer's 257), or "
             "train on data whose meta.json names it", c->vocab_size);
    return 0;
}

int config_a2a(const Config* c) {
    if (!strcmp(c->cp_comm, "a2a")) return c->cp;
    if (!strcmp(c->cp_comm, "a2a+ring")) return c->cp_a2a > 1 ? c->cp_a2a : 1;
    return 1;
}

int config_shard_min(const Config* c) { return c->cp_shard_min > 0 ? c->cp_shard_min : c->seq_len / (c->cp > 0 ? c->cp : 1); }

int config_eod(const Config* c) { return c->eod >= 0 ? c->eod : c->vocab_size == 257 ? 256 : -1; }

// the value a float key's text reads as (as set_key reads it: strtod, then the cast)
static float read_float(const char* s, int* ok) {
    char* end;
    errno = 0;
    double x = strtod(s, &end);
    *ok = end != s && !*end && !errno;
    return (float)x;
}

// the shortest text that reads back as v: the fewest significant digits p (1..9; 9 always suffice for a float)
// whose decimal reads back as the identical float; printed as %.{p}g, except that whole numbers below 1e16 are
// written out (10000, 500000: not 1e+04, 5e+05)
static void fmt_float(char* buf, size_t n, float v) {
    char e[48];
    int p = 1, ok;
    for (; p < 9; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (read_float(e, &ok) == v && ok) break;
    }
    snprintf(e, sizeof e, "%.*e", p - 1, v);   // [-]d[.ddd]e±XX
    int x = atoi(strchr(e, 'e') + 1);
    if (x < p || x >= 16) { snprintf(buf, n, "%.*g", p, v); return; }
    char digits[16], out[48];
    int nd = 0, k = 0;
    for (const char* q = e; *q != 'e'; q++) if (isdigit((unsigned char)*q)) digits[nd++] = *q;
    if (v < 0) out[k++] = '-';
    for (int i = 0; i <= x; i++) out[k++] = i < nd ? digits[i] : '0';   // x >= p = nd: no fraction
    out[k] = 0;
    snprintf(buf, n, "%s", out);
}

// one key's value as text: floats exact (%.9g: config_get) or shortest (fmt_float: config_format)
static int get_key(const Config* c, const char* key, char* buf, size_t n, int shortest) {
    const Key* k = find_key(key);
    if (!k) return 1;
    const char* base = (const char*)c + k->off;
    switch (k->type) {
    case T_INT: case T_BOOL: snprintf(buf, n, "%d", *(const int*)base); break;
    case T_I64: snprintf(buf, n, "%lld", *(const long long*)base); break;
    case T_FLOAT:
        if (shortest) fmt_float(buf, n, *(const float*)base);
        else snprintf(buf, n, "%.9g", *(const float*)base);
        break;
    case T_STR: snprintf(buf, n, "%s", base); break;
    }
    return 0;
}

int config_get(const Config* c, const char* key, char* buf, size_t n) { return get_key(c, key, buf, n, 0); }
int config_format(const Config* c, const char* key, char* buf, size_t n) { return get_key(c, key, buf, n, 1); }

int config_key_used(const Config* c, const char* key) {
    return strcmp(key, "rope_original_max_seq_len") || !strcmp(c->rope_scaling, "yarn");
}

static void write_keys(const Config* c, FILE* f, int shortest) {
    char buf[CFG_STR + 32];
    for (int i = 0; i < NKEYS; i++) {
        if (shortest && !config_key_used(c, KEYS[i].name)) continue;   // (for people: only what the model uses)
        get_key(c, KEYS[i].name, buf, sizeof buf, shortest);
        fprintf(f, "%s = %s\n", KEYS[i].name, buf);
    }
}
void config_write(const Config* c, FILE* f) { write_keys(c, f, 1); }
void config_write_exact(const Config* c, FILE* f) { write_keys(c, f, 0); }

void config_help(FILE* f) {
    for (int i = 0; i < NKEYS; i++)
        fprintf(f, "  --%-26s %s (default %s)\n", KEYS[i].name, KEYS[i].help, *KEYS[i].def ? KEYS[i].def : "empty");
}

int config_key_kind(const char* key) {
    const Key* k = find_key(key);
    return k ? (k->model ? 1 : 2) : 0;
}

void config_each_key(void (*fn)(const char* key, int is_model, void* ctx), void* ctx) {
    for (int i = 0; i < NKEYS; i++) fn(KEYS[i].name, KEYS[i].model, ctx);
}

int recompute_mode(const char* name) {
    static const char* names[] = { "none", "mlp", "qkv", "full" };
    for (int i = 0; i < 4; i++) if (!strcmp(name, names[i])) return i;
    return -1;
}
