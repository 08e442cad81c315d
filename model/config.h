// config.h — every setting of a run: one table of keys drives parsing, command-line overrides, --help,
// printing the resolved config and the checkpoint's /config attributes.
#pragma once
#include <stdio.h>
#include <stddef.h>

#define CFG_STR 512

typedef struct {
    // ---- model (these define the network; a checkpoint must agree on them) ----
    int vocab_size, d_model, n_layer, n_head, n_kv_head, d_ff, max_seq_len;
    float rope_theta, rope_factor, norm_eps, init_std;
    char rope_scaling[16];          // none | linear | yarn
    int rope_original_max_seq_len;
    int tie_embeddings;
    // ---- training ----
    char train_data[CFG_STR], val_data[CFG_STR], out_dir[CFG_STR];
    int seq_len, batch_size, micro_batch, max_steps, warmup_steps;
    char lr_schedule[16];           // cosine | linear | wsd | constant (lr_at)
    int lr_horizon, lr_cooldown;    // cosine/linear: where the decay ends (0: max_steps); wsd: the final decay's steps
    float lr, min_lr, weight_decay, beta1, beta2, adam_eps, grad_clip;
    long long seed;
    int shuffle, val_every, val_batches, log_every;
    float peak_tflops;              // MFU's peak per rank (0: measured at start-up, train/mfu.h)
    int sample_every, sample_tokens;  // a sample of text every N steps (0: off), of this many tokens
    char sample_prompt[CFG_STR];    // its prompt: text (byte tokenizer) or ids:1,2,3; empty: the eod token
    float sample_temperature;
    int data_meta;                  // 1: vocab_size and eod default to the training data's meta.json (data/meta.h)
    char pack[16];                  // stream | doc_start | best_fit (data/pack.h)
    int pack_buffer;                // best_fit: documents per round
    long long upsample_len;         // documents longer than this are used upsample_factor times (0: off)
    float upsample_factor;
    int doc_mask, doc_positions;    // attention inside documents only; RoPE positions restart at each document
    int eod;                        // end-of-document token (-1: 256 for vocab 257, else none): config_eod()
    // ---- parallelism (how ranks split the work; never changes the model or the data order) ----
    int tp, cp;                     // tensor-parallel and context-parallel (ring) degrees; dp = world / (tp cp)
    char cp_layout[16];             // zigzag | contiguous
    char cp_comm[16];               // ring | a2a | a2a+ring (config_a2a: the all-to-all degree)
    int cp_a2a;                     // all-to-all degree of a2a+ring (a2a: cp)
    char cp_shard[16];              // window | document (attention/shard.h)
    int cp_shard_min;               // document: split documents of at least this many tokens (-1: seq_len / cp)
    int cp_prune;                   // 1: the ring's pruned schedule (ring.h)
    int tp_sp;                      // 1: sequence parallelism inside TP groups
    int zero;                       // ZeRO stage over the dp x cp group: 1 moments, 2 + gradients, 3 + parameters
    int verify_attention;           // every N steps check ring attention against one process (0: off)
    int ckpt_every, keep_last;      // checkpoint every N steps (0: only at the end); keep the newest K
    int save_final;                 // 1: save at the end of the run (default)
    char ckpt_io[16];               // collective | independent MPI-IO data transfers for checkpoints
    char comm[16];                  // data transport: auto | mpi | nccl
    float timeout_s;                // watchdog: abort the job when a collective waits longer (0: off)
    char recompute[8];              // none | mlp | qkv | full (see recompute_mode)
    char offload[8];                // none | ckpt: the layers' saved tensors of recompute qkv / full go to host memory
    int mlp_tile;                   // rows per MLP tile: the [rows x d_ff] tensors exist for one tile at a time (0: untiled)
    char attn_engine[16];           // auto | cudnn | own (attention.h: attn_engine_select)
    char matmul_precision[16];      // bf16 | tf32 | fp32 (tensor-core matmuls on a GPU; the CPU is always fp32)
    char act_dtype[8];              // bf16 | fp32: activations (bf16 on a GPU with matmul_precision bf16; model_act_bf16)
    char resume[CFG_STR];           // resume from: a checkpoint file, a directory (its latest), or 'latest'
    char dump_weights[CFG_STR];     // at the end, write the final weights here (test dump format)
    char tensorboard_dir[CFG_STR];  // TensorBoard event files written during training here (empty: none)
    unsigned char given[128];       // per key (table order): CFG_GIVEN_FILE / _CLI when set by a file / the command line
} Config;
enum { CFG_DEFAULT = 0, CFG_GIVEN_FILE = 1, CFG_GIVEN_CLI = 2 };
// Was `key` set by a config file (CFG_GIVEN_FILE) or the command line (CFG_GIVEN_CLI, the last word), or is it the
// default (0)? (config_set with origin "command line..." counts as the command line, any other origin as a file.)
int config_given(const Config* c, const char* key);

// Set every key to its default.
void config_defaults(Config* c);
// Errors (the convention of all library code): functions return 0, or 1 with one line in err[errlen]
// (naming file:line, key and value); they print nothing themselves, so that under MPI one rank reports.
// Read `key = value` lines from a file.
int config_load_file(Config* c, const char* path, char* err, size_t errlen);
// Set one key from text (the command line's `--key value`); `origin` names where the value came from
// (e.g. "command line"). An unknown key's error is config_unknown's (with the nearest key).
int config_set(Config* c, const char* key, const char* value, const char* origin, char* err, size_t errlen);
// Check values and relations (sizes > 0, divisibility, seq_len <= max_seq_len, ...).
int config_validate(const Config* c, char* err, size_t errlen);
// The all-to-all degree U of context parallelism: cp for cp_comm = a2a, cp_a2a for a2a+ring, 1 for ring. The
// ring then has cp / U ranks.
int config_a2a(const Config* c);
// cp_shard_min resolved: -1 -> seq_len / cp.
int config_shard_min(const Config* c);
// The end-of-document token: eod, or for eod = -1 the byte tokenizer's 256 when vocab_size is 257, else -1 (none).
int config_eod(const Config* c);
// Write the resolved config as `key = value` lines (same format the loader reads), for people: the start-up dump
// and config.txt. Values as config_format (floats in their shortest text: lr = 0.002, norm_eps = 1e-05). Keys the
// config does not use (config_key_used) are left out.
void config_write(const Config* c, FILE* f);
// 0 for a key whose value this config does not use: rope_original_max_seq_len unless rope_scaling = yarn (it changes
// nothing then: left out of config_write's text, of build/reshard --info, and of a resume's comparison); else 1.
int config_key_used(const Config* c, const char* key);
// The same lines with config_get's values (floats as %.9g): the text that agrees character for character with a
// checkpoint's /config attributes (a checkpoint's root attribute `config`).
void config_write_exact(const Config* c, FILE* f);
// Print the documentation of every key (for --help).
void config_help(FILE* f);
// Is `key` a config key? 1 if it is a model key, 2 if a training key, 0 if unknown.
int config_key_kind(const char* key);
// Format one key's value into buf: the canonical text stored in a checkpoint's /config attributes and compared
// with them on resume (floats as %.9g of the float: exact, and the same in every version of the format and in
// tools/hf_common.py). Returns 0, or 1 when key is unknown.
int config_get(const Config* c, const char* key, char* buf, size_t n);
// The same for people (config_write): a float as the shortest text that reads back as the identical float
// (0.002, 1e-05, 0.95, 500000; not 0.00200000009) — the fewest significant digits, 1 to 9, that do, as %g prints
// them except that whole numbers below 1e16 are written out. Every other type as config_get.
int config_format(const Config* c, const char* key, char* buf, size_t n);
// Call fn for every key name (in table order).
void config_each_key(void (*fn)(const char* key, int is_model, void* ctx), void* ctx);

// ---- the command line (build/train, build/eval, build/plan, build/reshard, tests/tool_dump) ----------------
// An option is written `--name value` or `--name=value`, and dashes in its name read as underscores
// (--max-steps 5, --max_steps=5 and --max_steps 5 are one option). config_argv rewrites argv into the one form
// every parser reads: `--name value` with the name spelled with underscores; `flags` (NULL-terminated, spelled
// with underscores: "--force", "-h") take no value. The word after an option that takes one is its value, copied
// unchanged (it may begin with '-': --eod -1); single-dash options (-c FILE) and positional words are copied as
// given. Returns the new argc with *out (NULL-terminated, allocated for the program's lifetime), or -1 with err
// for a flag given a value: "command line: option '--force' takes no value (given '--force=1')" (the caller puts
// its program's name in front).
int config_argv(int argc, char** argv, const char* const* flags, char*** out, char* err, size_t errlen);
// The name nearest to `name` among the config keys (keys = 1) and `extra` (NULL-terminated; may be NULL), or NULL
// when none is near: Levenshtein distance (case ignored, '-' read as '_') at most 3 and at most half the length of
// `name`, or `name` (2 characters or more) a prefix of it; the smallest distance wins, the first in order on a tie.
const char* config_nearest(const char* name, int keys, const char* const* extra);
// The error for an unknown key `key` from `origin`: "config: ORIGIN: unknown key 'KEY' — did you mean 'NEAR'?
// (see --help for the keys)", NEAR from config_nearest(key, 1, extra) (the part left out when there is none).
void config_unknown(const char* origin, const char* key, const char* const* extra, char* err, size_t errlen);

// Activation recomputation, from least to most: RECOMPUTE_NONE keeps every layer's activations;
// MLP recomputes norm2 and the SwiGLU inputs/output (g, u, h: the largest tensors) in the backward; QKV also
// norm1 and q, k, v (kept: the residual, attention output and LSE, the mid residual; no communication to
// redo); FULL keeps only each layer's input and recomputes the whole layer (attention included: the ring
// rotates K/V again, TP all-reduces again). -1 for an unknown name.
enum { RECOMPUTE_NONE, RECOMPUTE_MLP, RECOMPUTE_QKV, RECOMPUTE_FULL };
int recompute_mode(const char* name);
