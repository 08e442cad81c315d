// be_table.h — the backend contract as a table of function pointers, so that one test program can call two
// backends: the CUDA backend directly (be_*, attn_*) and the CPU backend (the reference, compiled with every
// name prefixed cpu_ by tests/gpu/cpu_names.h) through cpu_backend(). The field types are taken from the
// contract's own declarations, so they follow backend.h. (Timers are not in the table.)
#pragma once
#include "backend/backend.h"

#define BE_TABLE_FIELD(f) __typeof__(f)* f;
#define BE_TABLE_FUNCS(X) \
    X(be_init) X(be_name) X(be_sync) X(be_tuning) X(be_alloc) X(be_free) X(be_upload) X(be_download) X(be_zero) \
    X(be_copy) X(be_set_matmul_precision) X(be_matmul) X(be_matmul_ex) X(be_cast) X(be_has_bf16) X(be_add) X(be_split_cols) \
    X(be_merge_cols) X(be_sumsq_segments) X(be_sum) X(be_clip_scale) X(be_embedding_forward) X(be_embedding_backward) \
    X(be_rmsnorm_forward) X(be_residual_rmsnorm) X(be_rmsnorm_backward) X(be_rmsnorm_dw) X(be_qkv_rope) \
    X(be_qkv_rope_backward) X(be_swiglu_forward) X(be_swiglu_backward) X(be_attn_rowdot) X(be_xent_stats) X(be_xent_finish) \
    X(be_xent_fused) X(be_row_max) X(be_argmax_hit) X(be_exp_sub) X(be_log_add) X(be_adamw) \
    X(attn_init) X(attn_forward_begin) X(attn_block_forward) X(attn_backward_begin) X(attn_block_backward) X(attn_merge)

#ifdef __cplusplus
extern "C" {
#endif
typedef struct { BE_TABLE_FUNCS(BE_TABLE_FIELD) } BeTable;
const BeTable* cpu_backend(void);   // tests/gpu/cpu_table.c
#ifdef __cplusplus
}
#endif
