// cpu_names.h — force-included (-include) when backend/cpu/*.c and tests/gpu/cpu_table.c are compiled into a
// GPU test binary: every name of the backend contract gets a cpu_ prefix, so that the CPU backend (the
// reference) and the CUDA backend link into one program. A function added to backend.h must be added here
// too (the GPU test binaries then fail to link with a duplicate symbol until it is).
#pragma once
#define attn_backward_begin cpu_attn_backward_begin
#define attn_block_backward cpu_attn_block_backward
#define attn_block_forward cpu_attn_block_forward
#define attn_forward_begin cpu_attn_forward_begin
#define attn_init cpu_attn_init
#define attn_merge cpu_attn_merge
#define be_adamw cpu_be_adamw
#define be_add cpu_be_add
#define be_split_cols cpu_be_split_cols
#define be_merge_cols cpu_be_merge_cols
#define be_alloc cpu_be_alloc
#define be_argmax_hit cpu_be_argmax_hit
#define be_copy cpu_be_copy
#define be_download cpu_be_download
#define be_embedding_backward cpu_be_embedding_backward
#define be_embedding_forward cpu_be_embedding_forward
#define be_exp_sub cpu_be_exp_sub
#define be_free cpu_be_free
#define be_init cpu_be_init
#define be_log_add cpu_be_log_add
#define be_matmul cpu_be_matmul
#define be_name cpu_be_name
#define be_rmsnorm_backward cpu_be_rmsnorm_backward
#define be_rmsnorm_forward cpu_be_rmsnorm_forward
#define be_rope_backward cpu_be_rope_backward
#define be_rope_forward cpu_be_rope_forward
#define be_row_max cpu_be_row_max
#define be_set_matmul_precision cpu_be_set_matmul_precision
#define be_sumsq_segments cpu_be_sumsq_segments
#define be_sum cpu_be_sum
#define be_clip_scale cpu_be_clip_scale
#define be_swiglu_backward cpu_be_swiglu_backward
#define be_swiglu_forward cpu_be_swiglu_forward
#define be_sync cpu_be_sync
#define be_step_begin cpu_be_step_begin
#define be_step_end cpu_be_step_end
#define be_timer_begin cpu_be_timer_begin
#define be_timer_create cpu_be_timer_create
#define be_timer_end cpu_be_timer_end
#define be_timer_free cpu_be_timer_free
#define be_timer_read cpu_be_timer_read
#define be_tuning cpu_be_tuning
#define be_upload cpu_be_upload
#define be_xent_backward cpu_be_xent_backward
#define be_xent_loss cpu_be_xent_loss
#define be_xent_lse cpu_be_xent_lse
#define be_xent_target_logit cpu_be_xent_target_logit
#define be_zero cpu_be_zero
#define BeTimer CpuBeTimer
#define be_memory_available cpu_be_memory_available
