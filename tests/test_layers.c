/* Every layer kind on every backend against the plain-C reference, on fresh random
 * inputs and awkward shapes: stride, padding, dilation, groups, depthwise, non-square,
 * batch > 1, sizes that are multiples of nothing. Outputs are poisoned with NaN before
 * the run (an unwritten element fails), guard zones around them must stay intact,
 * and inputs must not change.
 *
 * usage: test_layers [cpu|cuda]   (default cpu). Exits 77 (skip) when the backend
 * cannot start, e.g. no GPU. Seed: $LAYERBENCH_TEST_SEED, else the clock (printed). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend_registry.h"
#include "check.h"
#include "cpu_kernels.h"
#include "forward.h"
#include "measure.h"
#include "test_util.h"

#define GUARD 64
#define GUARD_VALUE 12345.0f

typedef struct layer_case {
    const char *what;
    layer_kind kind;
    shape_t in;
    void (*set)(layer_params *p);
    /* inputs after the first (add, mul, concat); none: a second input shaped like in */
    int n_more;
    shape_t more[3];
    /* a backend other than the CPU may report it unsupported (cuDNN's op tensor cannot
     * broadcast both inputs). Anything else unsupported is a failure, never a skip. */
    bool may_be_unsupported;
} layer_case;

#define MORE(...) .n_more = sizeof((shape_t[]){__VA_ARGS__}) / sizeof(shape_t), .more = {__VA_ARGS__}

#define PAIR(f, a, b) (p->f[0] = (a), p->f[1] = (b))
static void c_3x3(layer_params *p) { p->out_channels = 7; PAIR(kernel, 3, 3); PAIR(padding, 1, 1); }
/* Winograd's awkward shapes: no padding (odd output), padding 2 and 0x1 */
static void c_3x3_valid(layer_params *p) { p->out_channels = 3; PAIR(kernel, 3, 3); p->bias = false; }
static void c_3x3_pad2(layer_params *p) { p->out_channels = 9; PAIR(kernel, 3, 3); PAIR(padding, 2, 0); }
static void c_7x7s2(layer_params *p) { p->out_channels = 5; PAIR(kernel, 7, 7); PAIR(stride, 2, 2); PAIR(padding, 3, 3); p->bias = false; }
static void c_1x1(layer_params *p) { p->out_channels = 13; PAIR(kernel, 1, 1); }
/* more output channels and pixels than one register tile (14 or 6 rows, 32 or 16 columns) */
static void c_wide(layer_params *p) { p->out_channels = 45; PAIR(kernel, 3, 3); PAIR(padding, 1, 1); }
static void c_wide_s2(layer_params *p) { p->out_channels = 45; PAIR(kernel, 3, 3); PAIR(stride, 2, 2); PAIR(padding, 1, 1); }
/* more output channels than one k block (512) of the bf16 backward's data GEMM */
static void c_oc515(layer_params *p) { p->out_channels = 515; PAIR(kernel, 3, 3); PAIR(padding, 1, 1); }
/* strides the bf16 kernel splits into phases: 3 with padding that is not a multiple of
 * it, a 4x4 patchify (ConvNeXt's stem), and 5, past its largest (im2col then) */
static void c_s3(layer_params *p) { p->out_channels = 11; PAIR(kernel, 5, 4); PAIR(stride, 3, 3); PAIR(padding, 2, 1); }
static void c_patch4(layer_params *p) { p->out_channels = 17; PAIR(kernel, 4, 4); PAIR(stride, 4, 4); }
static void c_s5(layer_params *p) { p->out_channels = 9; PAIR(kernel, 5, 5); PAIR(stride, 5, 5); PAIR(padding, 1, 2); }
static void c_wide_g2(layer_params *p) { p->out_channels = 74; p->groups = 2; PAIR(kernel, 3, 3); PAIR(padding, 1, 1); }
static void c_1x1s2(layer_params *p) { p->out_channels = 6; PAIR(kernel, 1, 1); PAIR(stride, 2, 2); p->bias = false; }
static void c_dil(layer_params *p) { p->out_channels = 4; PAIR(kernel, 3, 3); PAIR(dilation, 2, 3); PAIR(padding, 2, 1); }
static void c_groups(layer_params *p) { p->out_channels = 9; PAIR(kernel, 3, 2); p->groups = 3; PAIR(stride, 2, 1); }
static void c_dw(layer_params *p) { p->out_channels = 6; PAIR(kernel, 3, 3); p->groups = 6; PAIR(stride, 2, 2); PAIR(padding, 1, 1); }
static void c_dw_mult(layer_params *p) { p->out_channels = 12; PAIR(kernel, 5, 3); p->groups = 6; PAIR(padding, 2, 0); }
static void c_rect(layer_params *p) { p->out_channels = 3; PAIR(kernel, 3, 5); PAIR(stride, 2, 1); PAIR(padding, 1, 2); }
static void c_full(layer_params *p) { p->out_channels = 10; PAIR(kernel, 5, 4); p->bias = false; }
static void bn_eps(layer_params *p) { p->eps = 1e-3; }
static void bn_noaffine(layer_params *p) { p->affine = false; }
static void none(layer_params *p) { (void)p; }
static void drop_01(layer_params *p) { p->p = 0.1; }
/* the decoder kinds (layers/llm.c) */
static void emb_50(layer_params *p) { p->num_embeddings = 50; p->embedding_dim = 24; }
static void emb_wide(layer_params *p) { p->num_embeddings = 7; p->embedding_dim = 3001; }
static void rms_eps(layer_params *p) { p->eps = 1e-5; }
static void wpe_cached(layer_params *p) { p->num_positions = 40; p->kv_len = 9; } /* GPT-2's wpe, rows 9 to 13 */
static void rms_gemma(layer_params *p) { p->weight_offset = 1; } /* Gemma's RMSNorm: x / rms * (1 + weight) */
static void rope_4x8(layer_params *p) { p->num_heads = 4; p->head_dim = 8; }
static void rope_decode(layer_params *p) { p->num_heads = 2; p->head_dim = 6; p->kv_len = 4093; p->rope_theta = 500000.0; }
static void rope_linear(layer_params *p) { rope_4x8(p); p->rope_type = ROPE_LINEAR; p->rope_factor = 8.0; p->kv_len = 11; }
static void rope_llama3(layer_params *p)
{
    p->num_heads = 3, p->head_dim = 64, p->rope_theta = 500000.0, p->rope_type = ROPE_LLAMA3, p->rope_factor = 32.0;
    p->low_freq_factor = 1.0, p->high_freq_factor = 4.0, p->original_max_pos = 8192, p->kv_len = 70000;
}
/* gpt-oss's yarn (truncate false), DeepSeek's (mscale over mscale_all_dim), longrope's
 * short factors (3 + 2 positions within 8) and long ones (past them) */
static void rope_yarn(layer_params *p)
{
    p->num_heads = 2, p->head_dim = 64, p->rope_theta = 150000.0, p->rope_type = ROPE_YARN, p->rope_factor = 32.0;
    p->original_max_pos = 4096, p->truncate = false, p->kv_len = 5000;
}
static void rope_yarn_mscale(layer_params *p)
{
    rope_4x8(p), p->rope_type = ROPE_YARN, p->rope_factor = 40.0, p->original_max_pos = 64, p->mscale = 1.0;
    p->mscale_all_dim = 0.5, p->beta_fast = 16, p->kv_len = 3;
}
static void rope_longrope(layer_params *p)
{
    rope_4x8(p), p->rope_type = ROPE_LONGROPE, p->rope_factor = 16.0, p->original_max_pos = 8, p->kv_len = 2;
    p->short_factor = (layer_floats){.n = 4, .v = {1.0f, 1.5f, 2.0f, 4.0f}};
    p->long_factor = (layer_floats){.n = 4, .v = {1.0f, 3.0f, 9.0f, 27.0f}};
}
static void rope_longrope_long(layer_params *p) { rope_longrope(p); p->kv_len = 10; }
/* Meta's reference Llama: interleaved pairs, at a decode position and with an odd head count */
static void rope_interleaved(layer_params *p) { p->num_heads = 3, p->head_dim = 10, p->rope_theta = 500000.0, p->interleaved = true; }
static void rope_interleaved_decode(layer_params *p) { rope_interleaved(p); p->kv_len = 777; }
static void attn_gqa(layer_params *p) { p->num_heads = 6; p->num_kv_heads = 2; p->head_dim = 5; }
static void attn_mha_full(layer_params *p) { p->num_heads = 3; p->num_kv_heads = 3; p->head_dim = 8; p->causal = false; }
static void attn_decode(layer_params *p) { attn_gqa(p); p->kv_len = 37; }
static void attn_window(layer_params *p) { attn_gqa(p); p->kv_len = 9; p->sliding_window = 6; }
/* Gemma 2: scores capped at 3 (small enough that tanh bends them), another scale (query_pre_attn_scalar) */
static void attn_softcap_prefill(layer_params *p) { attn_gqa(p); p->sliding_window = 4; p->softcap = 3; p->attn_scale = 0.6; }
static void attn_softcap(layer_params *p) { attn_window(p); p->softcap = 3; p->attn_scale = 0.6; }
static void attn_softcap32(layer_params *p) { p->num_heads = 8; p->num_kv_heads = 2; p->head_dim = 32; p->kv_len = 44; p->softcap = 2; }
/* gpt-oss: a sink per query head, with a window shorter than the cache, and at decode */
static void attn_sinks(layer_params *p) { attn_window(p); p->sinks = true; }
static void attn_sinks32(layer_params *p) { attn_softcap32(p); p->softcap = 0; p->sinks = true; }
/* longer than the memory-efficient backward's 64-query, 64-key blocks: several blocks,
 * the last partial, some wholly masked (causal, window) and skipped */
static void attn_gqa_long(layer_params *p) { p->num_heads = 4; p->num_kv_heads = 2; p->head_dim = 8; }
static void attn_window_long(layer_params *p) { attn_gqa_long(p); p->sliding_window = 70; p->softcap = 4; }
static void attn_mqa_long(layer_params *p) { p->num_heads = 8; p->num_kv_heads = 1; p->head_dim = 64; p->kv_len = 300; }
/* the 16-key score blocks (head_dim a multiple of 16) with a tail of 13 keys, 4 queries a group */
static void attn_gqa32(layer_params *p) { p->num_heads = 8; p->num_kv_heads = 2; p->head_dim = 32; p->kv_len = 44; }
/* the AVX-512 value sums' register chunks: 128 (two queries a chunk), 96 (two, 12
 * registers), 256 (one) */
static void attn_d128(layer_params *p) { p->num_heads = 4; p->num_kv_heads = 1; p->head_dim = 128; p->kv_len = 33; }
static void attn_d96(layer_params *p) { p->num_heads = 3; p->num_kv_heads = 1; p->head_dim = 96; p->kv_len = 5; }
static void attn_d256(layer_params *p) { p->num_heads = 2; p->num_kv_heads = 2; p->head_dim = 256; p->kv_len = 20; }
static void mla_tiny(layer_params *p)
{
    p->num_heads = 3, p->kv_lora_rank = 10, p->qk_nope_head_dim = 5, p->head_dim = 4, p->v_head_dim = 7;
}
static void mla_one(layer_params *p) { mla_tiny(p); p->kv_len = 6; } /* one token: bf16's own products */
static void mla_yarn(layer_params *p) /* DeepSeek's yarn: mscale and mscale_all_dim, a cache */
{
    p->num_heads = 4, p->kv_lora_rank = 12, p->qk_nope_head_dim = 6, p->head_dim = 6, p->v_head_dim = 5;
    p->kv_len = 13, p->rope_type = ROPE_YARN, p->rope_factor = 40, p->original_max_pos = 8;
    p->mscale = 0.707, p->mscale_all_dim = 1.0;
}
static void mla_blocks(layer_params *p)
{
    p->num_heads = 5, p->kv_lora_rank = 32, p->qk_nope_head_dim = 8, p->head_dim = 16, p->v_head_dim = 8;
    p->kv_len = 37;
}
static void mla_v2(layer_params *p) /* DeepSeek-V2's head: L 512, 128 + 64, v 128 */
{
    p->num_heads = 2, p->kv_lora_rank = 512, p->qk_nope_head_dim = 128, p->head_dim = 64, p->v_head_dim = 128;
    p->kv_len = 33;
}
static void moe_groups(layer_params *p) /* DeepSeek-V2: 3 of the experts of the best 2 of 4 groups, scaled */
{
    p->num_experts = 8, p->top_k = 3, p->ffn_dim = 13, p->routing = MOE_ROUTER, p->normalize = false;
    p->n_group = 4, p->topk_group = 2, p->routed_scale = 2.5;
}
static void moe_v3(layer_params *p) /* DeepSeek-V3: sigmoid scores, a correction bias, groups by their best two */
{
    moe_groups(p);
    p->moe_scoring = MOE_SIGMOID, p->score_bias = true, p->normalize = true;
}
static void moe_8x2(layer_params *p) { p->num_experts = 8; p->top_k = 2; p->ffn_dim = 37; }
static void moe_router(layer_params *p) { p->num_experts = 5; p->top_k = 3; p->ffn_dim = 21; p->routing = MOE_ROUTER; }
static void moe_skew(layer_params *p) { p->num_experts = 6; p->top_k = 1; p->ffn_dim = 16; p->load_skew = 2.0; }
static void moe_all(layer_params *p) { p->num_experts = 4; p->top_k = 4; p->ffn_dim = 9; p->routing = MOE_ROUTER; }
static void moe_raw(layer_params *p) { moe_router(p); p->normalize = false; } /* Qwen's norm_topk_prob false */
/* gpt-oss's experts: biases, the clamped SwiGLU with a limit the values reach */
static void moe_oss(layer_params *p)
{
    moe_router(p), p->bias = true, p->moe_act = MOE_ACT_CLAMPED_SWIGLU, p->swiglu_limit = 0.2;
    p->swiglu_alpha = 1.702;
}
static void mp_3s2p1(layer_params *p) { PAIR(kernel, 3, 3); PAIR(stride, 2, 2); PAIR(padding, 1, 1); }
static void mp_ceil(layer_params *p) { PAIR(kernel, 2, 2); PAIR(stride, 2, 2); p->ceil_mode = true; }
static void mp_2s2(layer_params *p) { PAIR(kernel, 2, 2); PAIR(stride, 2, 2); }
static void mp_ceil_pad(layer_params *p) { PAIR(kernel, 3, 2); PAIR(stride, 2, 3); PAIR(padding, 1, 1); p->ceil_mode = true; }
static void mp_dil(layer_params *p) { PAIR(kernel, 3, 2); PAIR(stride, 1, 2); PAIR(dilation, 2, 2); PAIR(padding, 1, 1); }
static void ap_pad(layer_params *p) { PAIR(kernel, 3, 3); PAIR(stride, 2, 2); PAIR(padding, 1, 1); }
static void ap_nopad(layer_params *p) { ap_pad(p); p->count_include_pad = false; }
static void ap_ceil(layer_params *p) { PAIR(kernel, 3, 2); PAIR(stride, 2, 3); PAIR(padding, 1, 1); p->ceil_mode = true; }
static void ad_1(layer_params *p) { PAIR(output_size, 1, 1); }
static void ad_32(layer_params *p) { PAIR(output_size, 3, 2); }
static void ad_up(layer_params *p) { PAIR(output_size, 6, 9); }
static void lin(layer_params *p) { p->out_features = 11; }
static void lin_nobias(layer_params *p) { p->out_features = 7; p->bias = false; }
/* more rows, outputs and features than one tile and k block of the packed path */
static void lin_wide(layer_params *p) { p->out_features = 45; }
static void lin_13(layer_params *p) { p->out_features = 13; }
static void lin_1100(layer_params *p) { p->out_features = 1100; p->bias = false; }
static void lin_1001(layer_params *p) { p->out_features = 1001; }
static void lin_9(layer_params *p) { p->out_features = 9; }
static void lin_70(layer_params *p) { p->out_features = 70; }
static void sm_last(layer_params *p) { p->dim = -1; }
static void sm_2(layer_params *p) { p->dim = 2; }
static void cat_2(layer_params *p) { p->dim = 2; }
static void cat_last(layer_params *p) { p->dim = -1; }
static void ct_s2(layer_params *p) { p->out_channels = 5; PAIR(kernel, 3, 3); PAIR(stride, 2, 2); PAIR(padding, 1, 1); PAIR(output_padding, 1, 1); }
static void ct_2x2(layer_params *p) { p->out_channels = 4; PAIR(kernel, 2, 2); PAIR(stride, 2, 2); p->bias = false; }
static void ct_groups(layer_params *p) { p->out_channels = 6; PAIR(kernel, 3, 4); PAIR(stride, 2, 3); p->groups = 3; PAIR(dilation, 2, 1); PAIR(padding, 2, 0); }
static void ct_1x1(layer_params *p) { p->out_channels = 7; PAIR(kernel, 1, 1); }
static void up_nearest2(layer_params *p) { p->scale_factor[0] = p->scale_factor[1] = 2.0; p->mode = UPSAMPLE_NEAREST; }
static void up_nearest_size(layer_params *p) { PAIR(output_size, 11, 7); p->mode = UPSAMPLE_NEAREST; }
static void up_nearest_frac(layer_params *p) { p->scale_factor[0] = 1.7; p->scale_factor[1] = 2.5; p->mode = UPSAMPLE_NEAREST; }
static void up_bilinear(layer_params *p) { p->scale_factor[0] = p->scale_factor[1] = 2.0; p->mode = UPSAMPLE_BILINEAR; }
static void up_bilinear_ac(layer_params *p) { PAIR(output_size, 13, 6); p->mode = UPSAMPLE_BILINEAR; p->align_corners = true; }
static void up_bilinear_down(layer_params *p) { PAIR(output_size, 4, 3); p->mode = UPSAMPLE_BILINEAR; }
static void sd_row(layer_params *p) { p->p = 0.2; p->mode = STOCHASTIC_ROW; }
static void ln(layer_params *p) { p->eps = 1e-5; p->affine = true; p->bias = true; }
static void ln_eps(layer_params *p) { p->eps = 1e-6; p->affine = true; p->bias = true; }
static void ln_noaffine(layer_params *p) { p->eps = 1e-5; p->affine = false; }
static void ln_nobias(layer_params *p) { p->eps = 1e-5; p->affine = true; p->bias = false; }
static void gelu_tanh(layer_params *p) { p->mode = GELU_TANH; }
static void mha_12_3(layer_params *p) { p->embed_dim = 12; p->num_heads = 3; p->bias = true; p->batch_first = true; }
static void mha_8_1(layer_params *p) { p->embed_dim = 8; p->num_heads = 1; p->bias = false; p->batch_first = true; }
static void mha_16_4(layer_params *p) { p->embed_dim = 16; p->num_heads = 4; p->bias = true; p->batch_first = true; }
static void mha_64_8(layer_params *p) { p->embed_dim = 64; p->num_heads = 8; p->bias = true; p->batch_first = true; }
static void tr_12(layer_params *p) { p->dim0 = 1; p->dim1 = 2; }
static void tr_13(layer_params *p) { p->dim0 = 1; p->dim1 = 3; }
static void tr_neg(layer_params *p) { p->dim0 = -1; p->dim1 = -2; }
static void sel_0(layer_params *p) { p->dim = 1; p->index = 0; }
static void sel_last(layer_params *p) { p->dim = 1; p->index = -1; }
static void sel_h(layer_params *p) { p->dim = 2; p->index = 3; }
static void fl_2(layer_params *p) { p->start_dim = 2; p->end_dim = -1; }
static void mean_hw(layer_params *p) { PAIR(mean_dims, 2, 3); }
static void shuf_2(layer_params *p) { p->groups = 2; }
static void shuf_3(layer_params *p) { p->groups = 3; }
static void slice_lo(layer_params *p) { p->dim = 1; p->slice_start = 0; p->slice_end = 5; }
static void slice_hi(layer_params *p) { p->dim = 1; p->slice_start = 5; p->slice_end = INT64_MAX; }
static void slice_neg(layer_params *p) { p->dim = 2; p->slice_start = -3; p->slice_end = -1; }
static void slice_w(layer_params *p) { p->dim = -1; p->slice_start = 2; p->slice_end = 9; }
static void perm_set(layer_params *p, int n, const int64_t *d)
{
    p->perm[0] = n;
    for (int k = 0; k < n; k++)
        p->perm[1 + k] = d[k];
}
static void perm_nhwc(layer_params *p) { perm_set(p, 4, (const int64_t[]){0, 2, 3, 1}); }
static void perm_nchw(layer_params *p) { perm_set(p, 4, (const int64_t[]){0, 3, 1, 2}); }
static void perm_rev(layer_params *p) { perm_set(p, 4, (const int64_t[]){0, -1, 2, 1}); }
static void perm_3(layer_params *p) { perm_set(p, 3, (const int64_t[]){0, 2, 1}); }
static void perm_id(layer_params *p) { perm_set(p, 4, (const int64_t[]){0, 1, 2, 3}); }
static void roll_set(layer_params *p, int n, const int64_t *shifts, const int64_t *dims)
{
    p->roll_shifts[0] = p->roll_dims[0] = n;
    for (int k = 0; k < n; k++)
        p->roll_shifts[1 + k] = shifts[k], p->roll_dims[1 + k] = dims[k];
}
static void roll_hw(layer_params *p) { roll_set(p, 2, (const int64_t[]){-3, -3}, (const int64_t[]){1, 2}); }
static void roll_back(layer_params *p) { roll_set(p, 2, (const int64_t[]){3, 10}, (const int64_t[]){2, -3}); }
static void roll_last(layer_params *p) { roll_set(p, 1, (const int64_t[]){-1}, (const int64_t[]){-1}); }
static void roll_three(layer_params *p)
{
    roll_set(p, 3, (const int64_t[]){1, 2, 3}, (const int64_t[]){3, 1, 2});
}
static void win_7(layer_params *p) { p->num_heads = 3; PAIR(window_size, 7, 7); }
static void win_7_shift(layer_params *p) { win_7(p); PAIR(shift_size, 3, 3); }
static void win_3x4_shift(layer_params *p) { p->num_heads = 2; PAIR(window_size, 3, 4); PAIR(shift_size, 1, 2); }
static void win_plain(layer_params *p) { win_3x4_shift(p); p->bias = p->proj_bias = false; }
static void win_v2(layer_params *p) { win_7_shift(p); p->cosine = true; }
static void win_v2_pad(layer_params *p) { win_3x4_shift(p); p->cosine = true; }
static void win_maxvit(layer_params *p) { win_7(p); p->partitioned = true; p->attn_scale = 1.0 / sqrt(12.0); }
static void part_7(layer_params *p) { PAIR(window_size, 7, 7); }
static void part_2x3(layer_params *p) { PAIR(window_size, 2, 3); }
static void merge_7(layer_params *p) { PAIR(window_size, 7, 7); PAIR(partitions, 2, 3); }
static void merge_2x3(layer_params *p) { PAIR(window_size, 2, 3); PAIR(partitions, 4, 2); }
static void rs_unsqueeze(layer_params *p) { perm_set(p, 3, (const int64_t[]){32, 1, 1}); }
static void rs_free(layer_params *p) { perm_set(p, 3, (const int64_t[]){4, -1, 3}); }
static void mi_temb(layer_params *p) { perm_set(p, 1, (const int64_t[]){1280}); }
static void mi_context(layer_params *p) { perm_set(p, 2, (const int64_t[]){77, 24}); }
static void ss_one_plus(layer_params *p) { p->attn_scale = 1.0; p->shift = 1.0; }
static void ss_neg(layer_params *p) { p->attn_scale = -0.125; p->shift = 0.0; }
static void ls_c(layer_params *p) { p->dim = 1; }
static void ls_last(layer_params *p) { p->dim = -1; }
static void gn_8(layer_params *p) { p->num_groups = 8; p->eps = 1e-5; p->affine = true; }
static void gn_3_plain(layer_params *p) { p->num_groups = 3; p->eps = 1e-6; p->affine = false; }
static void gn_32(layer_params *p) { p->num_groups = 32; p->eps = 1e-5; p->affine = true; }
static void gn_1(layer_params *p) { p->num_groups = 1; p->eps = 1e-5; p->affine = true; }
static void mean_last_keep(layer_params *p) { PAIR(mean_dims, -1, -1); p->keepdim = true; }
static void mean_c(layer_params *p) { PAIR(mean_dims, 1, 1); }
static void mean_12_keep(layer_params *p) { PAIR(mean_dims, 2, 1); p->keepdim = true; }
static void fl_12(layer_params *p) { p->start_dim = 1; p->end_dim = 2; }
static void fl_1(layer_params *p) { p->start_dim = 1; p->end_dim = -1; }

#define S4(n, c, h, w) {4, {n, c, h, w}}
#define S3(n, s, d) {3, {n, s, d, 0}}
#define S2(n, f) {2, {n, f, 0, 0}}

static const layer_case cases[] = {
    {"3x3 pad 1", LAYER_CONV2D, S4(2, 5, 11, 9), c_3x3},
    {"7x7 stride 2 pad 3, no bias", LAYER_CONV2D, S4(1, 3, 31, 29), c_7x7s2},
    {"1x1 batch 1 (direct gemm)", LAYER_CONV2D, S4(1, 7, 13, 11), c_1x1},
    {"1x1 batch 1, 5x9 (transposed gemm)", LAYER_CONV2D, S4(1, 7, 5, 9), c_1x1},
    {"1x1 batch 3 (batched gemm)", LAYER_CONV2D, S4(3, 7, 5, 9), c_1x1},
    {"batch 5 in groups of 3 samples", LAYER_CONV2D, S4(5, 4, 20, 20), c_3x3},
    {"1x1 stride 2", LAYER_CONV2D, S4(2, 5, 9, 7), c_1x1s2},
    {"dilation 2x3", LAYER_CONV2D, S4(2, 3, 13, 11), c_dil},
    {"groups 3, stride 2x1", LAYER_CONV2D, S4(2, 6, 9, 10), c_groups},
    {"depthwise stride 2", LAYER_CONV2D, S4(3, 6, 15, 13), c_dw},
    {"depthwise multiplier 2", LAYER_CONV2D, S4(2, 6, 9, 7), c_dw_mult},
    {"3x5 kernel, stride 2x1", LAYER_CONV2D, S4(2, 4, 17, 6), c_rect},
    {"kernel as large as the input", LAYER_CONV2D, S4(2, 3, 5, 4), c_full},
    {"large 3x3 (parallel paths)", LAYER_CONV2D, S4(2, 32, 37, 41), c_3x3},
    {"45 channels, 75 wide (several tiles)", LAYER_CONV2D, S4(2, 6, 9, 75), c_wide},
    {"515 out channels, 5x7 (bf16 backward: the data GEMM's K in 2 blocks)", LAYER_CONV2D, S4(2, 3, 5, 7), c_oc515},
    {"7x7, batch 13 (bf16 backward: the weights' im2col in groups of 11 samples and 2, odd positions)",
     LAYER_CONV2D, S4(13, 5, 7, 7), c_3x3},
    {"45 channels, stride 2, 71 wide", LAYER_CONV2D, S4(1, 5, 11, 71), c_wide_s2},
    {"5x4 stride 3, padding 2x1, odd sizes", LAYER_CONV2D, S4(2, 7, 20, 23), c_s3},
    {"4x4 stride 4 patchify, 3 channels", LAYER_CONV2D, S4(1, 3, 36, 44), c_patch4},
    {"5x5 stride 5, padding 1x2", LAYER_CONV2D, S4(1, 4, 23, 27), c_s5},
    {"2 groups of 37 channels", LAYER_CONV2D, S4(1, 4, 7, 40), c_wide_g2},
    {"3x3 no padding, 3x3 output", LAYER_CONV2D, S4(3, 2, 5, 5), c_3x3_valid},
    {"3x3 no padding, 6x1 output", LAYER_CONV2D, S4(1, 5, 8, 3), c_3x3_valid},
    {"3x3 padding 2x0, odd sizes", LAYER_CONV2D, S4(2, 11, 7, 10), c_3x3_pad2},
    {"eps 1e-3", LAYER_BATCHNORM2D, S4(3, 5, 7, 3), bn_eps},
    {"affine false", LAYER_BATCHNORM2D, S4(2, 17, 33, 35), bn_noaffine},
    {"rank 4", LAYER_RELU, S4(3, 7, 11, 13), none},
    {"rank 2, parallel", LAYER_RELU, S2(5, 40001), none},
    {"rank 4", LAYER_RELU6, S4(2, 16, 33, 35), none},
    {"rank 2", LAYER_RELU6, S2(3, 37), none},
    {"rank 4", LAYER_SIGMOID, S4(2, 16, 33, 35), none},
    {"rank 2", LAYER_SIGMOID, S2(7, 13), none},
    {"3x3 stride 2 pad 1", LAYER_MAXPOOL2D, S4(2, 3, 15, 12), mp_3s2p1},
    {"2x2 ceil_mode", LAYER_MAXPOOL2D, S4(2, 4, 7, 9), mp_ceil},
    {"3x2 s2x3 p1 ceil_mode", LAYER_MAXPOOL2D, S4(3, 2, 10, 13), mp_ceil_pad},
    {"3x3 s2 p1, parallel", LAYER_MAXPOOL2D, S4(2, 8, 57, 61), mp_3s2p1},
    {"2x2 s2 odd sizes, parallel", LAYER_MAXPOOL2D, S4(2, 16, 33, 35), mp_2s2},
    {"dilation 2, 3x2 kernel", LAYER_MAXPOOL2D, S4(1, 5, 11, 10), mp_dil},
    {"3x3 s2 p1 count_include_pad", LAYER_AVGPOOL2D, S4(2, 3, 11, 8), ap_pad},
    {"3x3 s2 p1 exclude pad", LAYER_AVGPOOL2D, S4(2, 3, 11, 8), ap_nopad},
    {"3x2 s2x3 ceil_mode", LAYER_AVGPOOL2D, S4(3, 2, 10, 13), ap_ceil},
    {"to 1x1", LAYER_ADAPTIVE_AVGPOOL2D, S4(2, 9, 7, 5), ad_1},
    {"17x19 to 1x1, parallel", LAYER_ADAPTIVE_AVGPOOL2D, S4(3, 70, 17, 19), ad_1},
    /* small planes, 16 at a time: groups and a remainder per thread, planes of exactly
     * one vector and of the largest size that path takes */
    {"7x7 to 1x1, 16 planes at a time, parallel", LAYER_ADAPTIVE_AVGPOOL2D, S4(2, 701, 7, 7), ad_1},
    {"4x4 to 1x1", LAYER_ADAPTIVE_AVGPOOL2D, S4(1, 37, 4, 4), ad_1},
    {"16x16 to 1x1", LAYER_ADAPTIVE_AVGPOOL2D, S4(1, 35, 16, 16), ad_1},
    {"112x112 to 1x1, parallel", LAYER_ADAPTIVE_AVGPOOL2D, S4(2, 3, 112, 112), ad_1},
    {"7x5 to 3x2 (uneven windows)", LAYER_ADAPTIVE_AVGPOOL2D, S4(2, 4, 7, 5), ad_32},
    {"4x4 to 6x9 (overlapping)", LAYER_ADAPTIVE_AVGPOOL2D, S4(1, 3, 4, 4), ad_up},
    {"rank 4", LAYER_FLATTEN, S4(2, 3, 5, 7), fl_1},
    {"start_dim 2 (ViT's patches)", LAYER_FLATTEN, S4(2, 3, 5, 7), fl_2},
    {"dims 1 to 2", LAYER_FLATTEN, S4(2, 3, 5, 7), fl_12},
    {"p 0.5", LAYER_DROPOUT, S2(3, 29), none},
    {"p 0.1, threads (blocks of the mask)", LAYER_DROPOUT, S3(4, 65, 257), drop_01},
    {"batch 1 (gemv)", LAYER_LINEAR, S2(1, 37), lin},
    {"batch 3, no bias", LAYER_LINEAR, S2(3, 53), lin_nobias},
    {"batch 20, 300 features (cpu: one k block)", LAYER_LINEAR, S2(20, 300), lin_wide},
    {"batch 70, 21 features (cpu: 5 tiles of 14 rows)", LAYER_LINEAR, S2(70, 21), lin},
    {"202 rows, 800 features, 45 out (cpu: 3 k blocks, 2 blocks of row tiles, tails)", LAYER_LINEAR, S3(2, 101, 800),
     lin_wide},
    {"tokens [N, S, F]", LAYER_LINEAR, S3(2, 5, 13), lin},
    {"tokens, batch 1, no bias", LAYER_LINEAR, S3(1, 9, 6), lin_nobias},
    {"2 tokens, 77 features, 13 out (bf16: gemv tails)", LAYER_LINEAR, S3(1, 2, 77), lin_13},
    {"4 rows, 1024 features, 1100 out (parallel gemv)", LAYER_LINEAR, S2(4, 1024), lin_1100},
    {"1 row, 1056 features, 1001 out (gemv: eight streams, rows over)", LAYER_LINEAR, S2(1, 1056), lin_1001},
    {"1 row, 2048 features, 70 out (gemv: eight streams of 4 or 5 rows a thread, rows over)", LAYER_LINEAR,
     S2(1, 2048), lin_70},
    {"1 row, 1048 features, 1100 out (gemv: 32 whole chunks of 32, then 24 masked)", LAYER_LINEAR, S2(1, 1048), lin_1100},
    {"2 rows, 96 features, 9 out (gemv: two streams, a 32-feature chunk over)", LAYER_LINEAR, S2(2, 96), lin_9},
    {"1101 rows, 40 features, 70 out (bf16 backward: the weights' K in 3 blocks, an odd row)", LAYER_LINEAR,
     S2(1101, 40), lin_70},
    {"21 rows, 33 features, 70 out (bf16 backward: odd rows and features)", LAYER_LINEAR, S3(3, 7, 33), lin_70},
    {"dim 1 of [N, F]", LAYER_SOFTMAX, S2(4, 1000), none},
    {"dim -1", LAYER_SOFTMAX, S2(3, 17), sm_last},
    {"dim 1 of NCHW", LAYER_SOFTMAX, S4(2, 7, 5, 3), none},
    {"dim 2 of NCHW", LAYER_SOFTMAX, S4(2, 3, 9, 4), sm_2},
    {"rank 4", LAYER_ADD, S4(3, 5, 7, 9), none},
    {"rank 2", LAYER_ADD, S2(2, 70001), none},
    {"[N,C,1,1] timestep embedding second (UNet)", LAYER_ADD, S4(2, 32, 17, 15), none, MORE(S4(2, 32, 1, 1)), true},
    {"[N,C,1,1] first, small", LAYER_ADD, S4(2, 6, 1, 1), none, MORE(S4(2, 6, 9, 7)), true},
    {"[N,1,D] on tokens (DiT's shift)", LAYER_ADD, S3(2, 9, 24), none, MORE(S3(2, 1, 24)), true},
    {"both broadcast", LAYER_ADD, S4(2, 1, 5, 1), none, MORE(S4(2, 3, 1, 4)), true},
    {"same shapes", LAYER_MUL, S4(2, 3, 5, 7), none},
    {"[N,C,1,1] scale first (SE)", LAYER_MUL, S4(2, 6, 1, 1), none, MORE(S4(2, 6, 9, 7))},
    {"[N,C,1,1] scale second, parallel", LAYER_MUL, S4(3, 16, 33, 35), none, MORE(S4(3, 16, 1, 1))},
    {"both broadcast", LAYER_MUL, S4(2, 1, 5, 1), none, MORE(S4(2, 3, 1, 4)), true},
    {"q k^T of a VAE's attention [N, HW, C] x [N, C, HW]", LAYER_MATMUL, S3(2, 20, 8), none, MORE(S3(2, 8, 20))},
    {"per head [N, H, S, D] x [N, H, D, S], threads", LAYER_MATMUL, S4(2, 4, 33, 16), none, MORE(S4(2, 4, 16, 33))},
    {"one sample, one large product", LAYER_MATMUL, S3(1, 130, 70), none, MORE(S3(1, 70, 90))},
    {"2 inputs along channels", LAYER_CONCAT, S4(2, 3, 5, 7), none, MORE(S4(2, 5, 5, 7))},
    {"4 inputs (inception)", LAYER_CONCAT, S4(2, 2, 6, 5), none, MORE(S4(2, 7, 6, 5), S4(2, 1, 6, 5), S4(2, 4, 6, 5))},
    {"along height", LAYER_CONCAT, S4(2, 3, 4, 5), cat_2, MORE(S4(2, 3, 7, 5))},
    {"[N, F] along features", LAYER_CONCAT, S2(3, 11), cat_last, MORE(S2(3, 29))},
    {"rank 4", LAYER_SILU, S4(2, 5, 9, 7), none},
    {"rank 2, parallel", LAYER_SILU, S2(3, 20011), none},
    {"rank 4", LAYER_HARDSWISH, S4(2, 5, 9, 7), none},
    {"rank 2, parallel", LAYER_HARDSWISH, S2(3, 20011), none},
    {"rank 4", LAYER_HARDSIGMOID, S4(2, 5, 9, 7), none},
    {"rank 2", LAYER_HARDSIGMOID, S2(3, 31), none},
    {"rank 4", LAYER_TANH, S4(2, 5, 9, 7), none},
    {"rank 2, parallel", LAYER_TANH, S2(3, 20011), none},
    {"row", LAYER_STOCHASTIC_DEPTH, S4(2, 3, 5, 4), sd_row},
    {"3x3 stride 2 output_padding 1", LAYER_CONV_TRANSPOSE2D, S4(2, 3, 7, 6), ct_s2},
    {"2x2 stride 2 (UNet), no bias", LAYER_CONV_TRANSPOSE2D, S4(1, 5, 9, 11), ct_2x2},
    {"groups 3, dilation 2x1, 3x4", LAYER_CONV_TRANSPOSE2D, S4(2, 6, 5, 7), ct_groups},
    {"1x1", LAYER_CONV_TRANSPOSE2D, S4(3, 4, 6, 5), ct_1x1},
    {"nearest x2", LAYER_UPSAMPLE, S4(2, 3, 5, 7), up_nearest2},
    {"nearest to 11x7", LAYER_UPSAMPLE, S4(2, 3, 5, 4), up_nearest_size},
    {"nearest x1.7 x2.5", LAYER_UPSAMPLE, S4(1, 2, 7, 5), up_nearest_frac},
    {"bilinear x2", LAYER_UPSAMPLE, S4(2, 3, 5, 7), up_bilinear},
    {"bilinear align_corners", LAYER_UPSAMPLE, S4(2, 2, 5, 4), up_bilinear_ac},
    {"bilinear down to 4x3", LAYER_UPSAMPLE, S4(1, 3, 9, 8), up_bilinear_down},
    {"tokens [N, S, D]", LAYER_LAYERNORM, S3(2, 7, 13), ln},
    {"768 wide, parallel", LAYER_LAYERNORM, S3(3, 50, 768), ln_eps},
    {"no affine", LAYER_LAYERNORM, S3(2, 5, 9), ln_noaffine},
    {"no bias, rank 2", LAYER_LAYERNORM, S2(5, 33), ln_nobias},
    {"last dim of NCHW", LAYER_LAYERNORM, S4(2, 3, 4, 9), ln},
    {"exact, tokens", LAYER_GELU, S3(2, 7, 13), none},
    {"exact, rank 2, parallel", LAYER_GELU, S2(3, 20011), none},
    {"tanh, parallel", LAYER_GELU, S3(2, 5, 4001), gelu_tanh},
    {"E 12, 3 heads", LAYER_MULTIHEAD_ATTENTION, S3(2, 7, 12), mha_12_3},
    {"one head, no bias", LAYER_MULTIHEAD_ATTENTION, S3(1, 5, 8), mha_8_1},
    {"odd sequence, batch 3", LAYER_MULTIHEAD_ATTENTION, S3(3, 17, 16), mha_16_4},
    {"E 64, 8 heads, 33 tokens", LAYER_MULTIHEAD_ATTENTION, S3(2, 33, 64), mha_64_8},
    {"tokens dims 1, 2", LAYER_TRANSPOSE, S3(2, 5, 7), tr_12},
    {"NCHW dims 1, 3", LAYER_TRANSPOSE, S4(2, 3, 5, 7), tr_13},
    {"NCHW dims -1, -2, parallel", LAYER_TRANSPOSE, S4(2, 8, 45, 37), tr_neg},
    {"tokens", LAYER_CLASS_TOKEN, S3(2, 5, 7), none},
    {"tokens", LAYER_POS_EMBEDDING, S3(3, 5, 7), none},
    {"a table of 40 positions, 9 cached", LAYER_POS_EMBEDDING, S3(3, 5, 7), wpe_cached},
    {"x[:, 0]", LAYER_SELECT, S3(2, 5, 7), sel_0},
    {"x[:, -1]", LAYER_SELECT, S3(3, 4, 6), sel_last},
    {"NCHW dim 2", LAYER_SELECT, S4(2, 3, 5, 4), sel_h},
    {"[N, T] ids, 50 rows", LAYER_EMBEDDING, S2(3, 11), emb_50},
    {"3001 wide, parallel", LAYER_EMBEDDING, S2(2, 9), emb_wide},
    {"tokens, eps 1e-5", LAYER_RMSNORM, S3(2, 7, 13), rms_eps},
    {"4096 wide, parallel", LAYER_RMSNORM, S3(2, 5, 4096), none},
    {"Gemma's weight + 1, 4-D heads", LAYER_RMSNORM, S4(2, 3, 5, 18), rms_gemma},
    {"4 heads of 8", LAYER_ROPE, S3(2, 7, 32), rope_4x8},
    {"decode at 4093, theta 5e5", LAYER_ROPE, S3(3, 1, 12), rope_decode},
    {"linear x8, from 11", LAYER_ROPE, S3(1, 5, 32), rope_linear},
    {"llama3 x32 at 70000", LAYER_ROPE, S3(2, 3, 192), rope_llama3},
    {"yarn x32, not truncated, at 5000", LAYER_ROPE, S3(1, 2, 128), rope_yarn},
    {"yarn x40, mscale 1 over 0.5", LAYER_ROPE, S3(2, 3, 32), rope_yarn_mscale},
    {"longrope, short factors", LAYER_ROPE, S3(2, 3, 32), rope_longrope},
    {"longrope, long factors past 8", LAYER_ROPE, S3(2, 3, 32), rope_longrope_long},
    {"interleaved, 3 heads of 10", LAYER_ROPE, S3(2, 5, 30), rope_interleaved},
    {"interleaved, decode at 777", LAYER_ROPE, S3(3, 1, 30), rope_interleaved_decode},
    {"GQA 6/2, causal prefill", LAYER_ATTENTION, S3(2, 7, 30), attn_gqa, MORE(S3(2, 7, 10), S3(2, 7, 10))},
    {"not causal, 3 heads", LAYER_ATTENTION, S3(1, 9, 24), attn_mha_full, MORE(S3(1, 9, 24), S3(1, 9, 24))},
    {"cross-attention: 9 queries, 77 keys (a UNet's text)", LAYER_ATTENTION, S3(2, 9, 24), attn_mha_full,
     MORE(S3(2, 77, 24), S3(2, 77, 24))},
    {"softcap 3, window 4, prefill (Gemma 2's)", LAYER_ATTENTION, S3(2, 11, 30), attn_softcap_prefill,
     MORE(S3(2, 11, 10), S3(2, 11, 10))},
    {"GQA 4/2, causal, 150 tokens", LAYER_ATTENTION, S3(2, 150, 32), attn_gqa_long, MORE(S3(2, 150, 16), S3(2, 150, 16))},
    {"window 70, softcap 4, 201 tokens", LAYER_ATTENTION, S3(1, 201, 32), attn_window_long,
     MORE(S3(1, 201, 16), S3(1, 201, 16))},
    {"cross-attention: 70 queries, 131 keys", LAYER_ATTENTION, S3(2, 70, 24), attn_mha_full,
     MORE(S3(2, 131, 24), S3(2, 131, 24))},
    {"decode, 37 cached", LAYER_ATTENTION, S3(3, 1, 30), attn_decode, MORE(S3(3, 1, 10), S3(3, 1, 10))},
    {"window 6, 9 cached, 4 new", LAYER_ATTENTION, S3(2, 4, 30), attn_window, MORE(S3(2, 4, 10), S3(2, 4, 10))},
    {"softcap 3, scale 0.6, window", LAYER_ATTENTION, S3(2, 4, 30), attn_softcap, MORE(S3(2, 4, 10), S3(2, 4, 10))},
    {"softcap 2, 16-key blocks, decode", LAYER_ATTENTION, S3(2, 1, 256), attn_softcap32, MORE(S3(2, 1, 64), S3(2, 1, 64))},
    {"sinks, window 6, 9 cached, 4 new", LAYER_ATTENTION, S3(2, 4, 30), attn_sinks, MORE(S3(2, 4, 10), S3(2, 4, 10))},
    {"sinks, 16-key blocks, decode", LAYER_ATTENTION, S3(2, 1, 256), attn_sinks32, MORE(S3(2, 1, 64), S3(2, 1, 64))},
    {"MQA 8/1, 300 cached, parallel", LAYER_ATTENTION, S3(2, 3, 512), attn_mqa_long, MORE(S3(2, 3, 64), S3(2, 3, 64))},
    {"decode GQA 8/2, head_dim 32, 44 cached", LAYER_ATTENTION, S3(2, 1, 256), attn_gqa32, MORE(S3(2, 1, 64), S3(2, 1, 64))},
    {"decode GQA 4/1, head_dim 128, 33 cached", LAYER_ATTENTION, S3(2, 1, 512), attn_d128, MORE(S3(2, 1, 128), S3(2, 1, 128))},
    {"GQA 3/1, head_dim 96, 5 cached, 3 new", LAYER_ATTENTION, S3(1, 3, 288), attn_d96, MORE(S3(1, 3, 96), S3(1, 3, 96))},
    {"decode, 2 heads of 256, 20 cached", LAYER_ATTENTION, S3(1, 1, 512), attn_d256, MORE(S3(1, 1, 512), S3(1, 1, 512))},
    {"mla 3 heads, L 10, 5 + 4, v 7, prefill", LAYER_MLA, S3(2, 4, 27), mla_tiny, MORE(S3(2, 4, 14))},
    {"mla one token after 6, awkward dims", LAYER_MLA, S3(1, 1, 27), mla_one, MORE(S3(1, 1, 14))},
    {"mla yarn mscale, 13 cached, decode", LAYER_MLA, S3(2, 1, 48), mla_yarn, MORE(S3(2, 1, 18))},
    {"mla 16-key blocks, 37 cached, 2 new", LAYER_MLA, S3(1, 2, 120), mla_blocks, MORE(S3(1, 2, 48))},
    {"mla DeepSeek-V2 head, 33 cached, decode", LAYER_MLA, S3(1, 1, 384), mla_v2, MORE(S3(1, 1, 576))},
    {"8 experts, top 2, uniform", LAYER_MOE, S3(2, 7, 24), moe_8x2, MORE(S3(2, 7, 8))},
    {"router, top 3 of 5, decode", LAYER_MOE, S3(3, 1, 20), moe_router, MORE(S3(3, 1, 5))},
    {"router, top 3 of 5, not renormalised", LAYER_MOE, S3(2, 3, 20), moe_raw, MORE(S3(2, 3, 5))},
    {"skew 2, top 1, [N, F]", LAYER_MOE, S2(9, 16), moe_skew, MORE(S2(9, 6))},
    {"gpt-oss: biases, clamped SwiGLU at 0.2", LAYER_MOE, S3(2, 3, 20), moe_oss, MORE(S3(2, 3, 5))},
    {"DeepSeek groups: top 3 in 2 of 4 groups, x2.5", LAYER_MOE, S3(2, 5, 20), moe_groups, MORE(S3(2, 5, 8))},
    {"DeepSeek-V3: sigmoid, score bias, groups, x2.5", LAYER_MOE, S3(2, 5, 20), moe_v3, MORE(S3(2, 5, 8))},
    {"every expert (top 4 of 4)", LAYER_MOE, S3(1, 4, 12), moe_all, MORE(S3(1, 4, 4))},
    {"[2, 3] of NCHW (MNASNet)", LAYER_MEAN, S4(2, 5, 7, 9), mean_hw},
    {"[2, 3], threads", LAYER_MEAN, S4(2, 64, 28, 28), mean_hw},
    {"-1, keepdim", LAYER_MEAN, S3(3, 5, 300), mean_last_keep},
    {"dim 1, 99 after it", LAYER_MEAN, S4(2, 7, 9, 11), mean_c},
    {"[2, 1] keepdim, threads", LAYER_MEAN, S4(3, 40, 50, 70), mean_12_keep},
    {"8 groups of 4, 5x7", LAYER_GROUPNORM, S4(2, 32, 5, 7), gn_8},
    {"[N, C, L], no affine", LAYER_GROUPNORM, S3(3, 6, 11), gn_3_plain},
    {"UNet's 32 of 256, 32x32", LAYER_GROUPNORM, S4(2, 256, 32, 32), gn_32},
    {"one group, [N, C]", LAYER_GROUPNORM, S2(5, 12), gn_1},
    {"3 groups, 12 channels, small", LAYER_CHANNEL_SHUFFLE, S4(2, 12, 3, 5), shuf_3},
    {"2 groups, 58 channels (ShuffleNet)", LAYER_CHANNEL_SHUFFLE, S4(2, 58, 7, 5), shuf_2},
    {"3 groups, [N, C, L], threads", LAYER_CHANNEL_SHUFFLE, S3(4, 96, 333), shuf_3},
    {"chunk's first half", LAYER_SLICE, S4(2, 10, 3, 5), slice_lo},
    {"chunk's second half, to the end", LAYER_SLICE, S4(2, 10, 3, 5), slice_hi},
    {"[-3:-1] of dim 2", LAYER_SLICE, S4(2, 3, 7, 4), slice_neg},
    {"last dim [2, 9)", LAYER_SLICE, S3(3, 4, 11), slice_w},
    {"NCHW -> NHWC (ConvNeXt)", LAYER_PERMUTE, S4(2, 5, 7, 3), perm_nhwc},
    {"NHWC -> NCHW, threads", LAYER_PERMUTE, S4(2, 28, 28, 96), perm_nchw},
    {"[0, -1, 2, 1]", LAYER_PERMUTE, S4(3, 4, 5, 6), perm_rev},
    {"[N, S, D] -> [N, D, S]", LAYER_PERMUTE, S3(2, 9, 13), perm_3},
    {"the identity", LAYER_PERMUTE, S4(2, 3, 4, 5), perm_id},
    {"Swin's shift back (-3, -3) over H, W", LAYER_ROLL, S4(2, 14, 14, 5), roll_hw},
    {"shifts past the size, a negative dim", LAYER_ROLL, S4(2, 5, 7, 3), roll_back},
    {"the last dim, threads", LAYER_ROLL, S4(2, 56, 56, 24), roll_last},
    {"three dims", LAYER_ROLL, S4(3, 5, 7, 4), roll_three},
    {"even H and W (Swin)", LAYER_PATCH_MERGE, S4(2, 8, 6, 5), NULL},
    {"odd H and W: zero padding", LAYER_PATCH_MERGE, S4(1, 7, 5, 3), NULL},
    {"threads", LAYER_PATCH_MERGE, S4(2, 56, 56, 24), NULL},
    {"7x7 windows (Swin-T's first stage, small)", LAYER_WINDOW_ATTENTION, S4(2, 14, 14, 12), win_7},
    {"7x7 windows shifted by 3: the mask", LAYER_WINDOW_ATTENTION, S4(2, 14, 21, 12), win_7_shift},
    {"3x4 windows shifted 1x2, padded to 9x8", LAYER_WINDOW_ATTENTION, S4(1, 8, 7, 8), win_3x4_shift},
    {"no biases", LAYER_WINDOW_ATTENTION, S4(2, 6, 8, 6), win_plain},
    {"the window covers H: only W shifts", LAYER_WINDOW_ATTENTION, S4(1, 3, 12, 8), win_3x4_shift},
    {"one window, no shift (Swin's last stage)", LAYER_WINDOW_ATTENTION, S4(2, 7, 7, 12), win_7_shift},
    {"V2: cosine, logit scale, position MLP", LAYER_WINDOW_ATTENTION, S4(1, 14, 14, 12), win_v2},
    {"V2 padded and shifted", LAYER_WINDOW_ATTENTION, S4(2, 5, 7, 8), win_v2_pad},
    {"windows given, scale 1/sqrt(C) (MaxViT)", LAYER_WINDOW_ATTENTION, S4(2, 6, 49, 12), win_maxvit},
    {"7x7 windows of 14x21 (MaxViT)", LAYER_WINDOW_PARTITION, S4(2, 5, 14, 21), part_7},
    {"2x3 windows, threads", LAYER_WINDOW_PARTITION, S4(2, 64, 28, 30), part_2x3},
    {"2x3 of 7x7 back (MaxViT)", LAYER_WINDOW_MERGE, S4(2, 6, 49, 5), merge_7},
    {"4x2 of 2x3 back", LAYER_WINDOW_MERGE, S4(1, 8, 6, 3), merge_2x3},
    {"1 + scale (DiT)", LAYER_SCALE_SHIFT, S2(2, 96), ss_one_plus},
    {"-x / 8, threads", LAYER_SCALE_SHIFT, S4(2, 32, 28, 30), ss_neg},
    {"emb[:, :, None, None] (UNet)", LAYER_RESHAPE, S2(2, 32), rs_unsqueeze},
    {"a -1 among the dims", LAYER_RESHAPE, S4(3, 2, 6, 5), rs_free},
    {"a timestep embedding [N, 1280]", LAYER_MODEL_INPUT, S4(2, 3, 8, 8), mi_temb},
    {"encoder states [N, 77, 24]", LAYER_MODEL_INPUT, S2(3, 10), mi_context},
    {"[C, 1, 1] on NCHW (ConvNeXt)", LAYER_LAYER_SCALE, S4(2, 96, 7, 9), ls_c},
    {"[D] on [N, S, D]", LAYER_LAYER_SCALE, S3(3, 5, 37), ls_last},
    {"[C, 1, 1], threads", LAYER_LAYER_SCALE, S4(4, 64, 28, 28), ls_c},
};

/* The case's layer; its input arrays live in statics (one case at a time). */
static bool make_layer(const layer_case *c, layer *l)
{
    static int inputs[4];
    static shape_t ins[4];
    const layer_desc *d = layer_desc_get(c->kind);
    char err[256];
    memset(l, 0, sizeof *l);
    l->name = (char *)c->what;
    l->kind = c->kind;
    if (d->defaults)
        d->defaults(&l->p);
    if (c->set)
        c->set(&l->p);
    l->in = ins[0] = c->in;
    l->n_inputs = d->n_inputs == 1 ? 1 : c->n_more ? 1 + c->n_more : 2;
    for (int k = 1; k < l->n_inputs; k++)
        ins[k] = c->n_more ? c->more[k - 1] : c->in;
    for (int k = 0; k < 4; k++)
        inputs[k] = 0;
    l->inputs = inputs;
    l->ins = ins;
    if (d->infer(l, err, sizeof err) != 0) {
        fprintf(stderr, "case '%s' does not infer: %s\n", c->what, err);
        return false;
    }
    return layer_count(l) == 0;
}

/* Runs one case in dtype dt on a backend with guard zones, against the fp32 reference on
 * the same (rounded) inputs and weights. */
static void run_case(const backend *b, const layer_case *c, uint64_t seed, dtype_t dt)
{
    layer l;
    bool made = make_layer(c, &l);
    EXPECT(made, "%s", c->what);
    if (!made)
        return;
    l.dtype = dt;
    layer_count(&l);
    const layer_desc *d = layer_desc_get(l.kind);
    const char *kn = d->name, *tn = dtype_name(dt);
    /* a cell the backend's table leaves empty is an unsupported row with its reason (the
     * moe, mla and window_attention on cuda): said, and the reason checked; never run */
    backend_kernel_entry kr = backend_kernel_of(b, &l);
    if (!kr.kernel) {
        printf("  %-20s %-34s %s no kernel on %s: %s\n", kn, c->what, tn, b->ops->name,
               kr.unsupported ? kr.unsupported : "");
        EXPECT(kr.unsupported && *kr.unsupported, "%s %s %s: no kernel on %s and no reason", kn, c->what, tn,
               b->ops->name);
        return;
    }
    float *in[LAYER_MAX_INPUTS] = {NULL}, *w = NULL;
    void *din[LAYER_MAX_INPUTS] = {NULL};
    EXPECT(forward_layer_data(&l, seed, in, &w) == BENCH_OK, "%s %s: inputs", kn, c->what);
    int64_t n_out = shape_numel(&l.out);
    size_t size = dtype_size(dt);
    float *ref = bench_alloc_floats(n_out);
    d->reference(&l, (const float *const *)in, w, ref);

    /* output with guard zones, poisoned with NaN */
    float *host_out = bench_alloc_floats(n_out + 2 * GUARD), guard = GUARD_VALUE;
    dtype_round(dt, &guard, 1);
    for (int64_t i = 0; i < n_out + 2 * GUARD; i++)
        host_out[i] = (i < GUARD || i >= GUARD + n_out) ? GUARD_VALUE : NAN;
    const backend_ops *ops = b->ops;
    for (int k = 0; k < l.n_inputs; k++)
        din[k] = backend_alloc_values(b, dt, shape_numel(&l.ins[k]), in[k]);
    void *dw = w ? backend_alloc_values(b, dt, l.n_weight_floats, w) : NULL;
    void *dout = d->aliases_input ? NULL : backend_alloc_values(b, dt, n_out + 2 * GUARD, host_out);
    backend_layer *state = NULL;
    char impl[96] = "";
    int64_t ws;
    backend_clear_error(b);
    bench_status st = backend_layer_setup(b, &l, dw, &state, impl, sizeof impl, &ws);
    if (st == BENCH_ERR_UNSUPPORTED && c->may_be_unsupported && strcmp(ops->name, "cpu") != 0) {
        /* e.g. cuDNN has no dilated pooling: the backend must say so, never compute garbage */
        printf("  %-20s %-34s unsupported on %s: %s\n", kn, c->what, ops->name, impl);
        EXPECT(impl[0] != 0, "%s %s: unsupported without a reason", kn, c->what);
        goto done;
    }
    EXPECT(st != BENCH_ERR_UNSUPPORTED, "%s %s %s: unsupported on %s: %s", kn, c->what, tn, ops->name, impl);
    EXPECT(st == BENCH_OK || st == BENCH_ERR_UNSUPPORTED, "%s %s %s: setup failed (%d): %s", kn, c->what, tn, st,
           backend_last_error(b));
    if (st == BENCH_OK) {
        backend_layer_run(state, (const void *const *)din, d->aliases_input ? din[0] : (char *)dout + GUARD * size);
        EXPECT(ops->device.sync(b->ctx) == BENCH_OK, "%s %s: sync", kn, c->what);
        if (d->aliases_input)
            backend_download_values(b, dt, host_out + GUARD, din[0], n_out);
        else
            backend_download_values(b, dt, host_out, dout, n_out + 2 * GUARD);
        int64_t nonfinite;
        double err = check_rel_err(host_out + GUARD, ref, n_out, &nonfinite);
        EXPECT(nonfinite == 0, "%s %s %s (%s): %lld outputs not written or not finite", kn, c->what, tn, impl,
               (long long)nonfinite);
        EXPECT(err <= backend_tolerance(b, &l), "%s %s %s (%s): relative error %.3e above %.1e", kn, c->what, tn,
               impl, err, backend_tolerance(b, &l));
        int64_t bad_guard = 0;
        for (int64_t i = 0; i < GUARD; i++)
            bad_guard += (host_out[i] != guard) + (host_out[GUARD + n_out + i] != guard);
        EXPECT(d->aliases_input || bad_guard == 0, "%s %s %s (%s): %lld guard values overwritten", kn, c->what, tn,
               impl, (long long)bad_guard);
        for (int k = 0; k < l.n_inputs; k++) { /* in[k] holds the rounded values uploaded */
            int64_t n = shape_numel(&l.ins[k]);
            float *after = bench_alloc_floats(n);
            backend_download_values(b, dt, after, din[k], n);
            EXPECT(memcmp(after, in[k], (size_t)n * sizeof(float)) == 0, "%s %s %s: input %d was modified", kn,
                   c->what, tn, k);
            free(after);
        }
        backend_layer_free(b, state);
        printf("  %-20s %-34s %-4s %-18s rel. error %.2e\n", kn, c->what, tn, impl, err);
    }
done:
    for (int k = 0; k < l.n_inputs; k++)
        ops->device.release(b->ctx, din[k]);
    ops->device.release(b->ctx, dw), ops->device.release(b->ctx, dout);
    forward_free_data(&l, in, &w);
    free(ref), free(host_out);
}

/* One case's backward on a backend in dtype t, as bench check --pass backward checks it
 * (check.c): every input's gradient and the weights' against the reference backward on
 * the same inputs, training forward output and output gradient (rounded to t, as the
 * backend holds them). */
static void run_backward_case(const backend *b, const layer_case *c, uint64_t seed, dtype_t t)
{
    layer l;
    if (!make_layer(c, &l))
        return;
    l.dtype = t;
    l.pass = PASS_BACKWARD;
    layer_count(&l);
    if (!backend_kernel_of(b, &l).kernel || layer_is_view(&l))
        return; /* the table says why; a view's gradient is its output's */
    check_result r = check_layer(&l, b, seed);
    if (r.status == BENCH_ERR_UNSUPPORTED) { /* the kernel refused this configuration: it must say why */
        printf("  backward %-18s %-34s %-4s unsupported: %s\n", layer_kind_name(l.kind), c->what, dtype_name(t), r.why);
        EXPECT(*r.why, "%s %s backward: unsupported without a reason", layer_kind_name(l.kind), c->what);
        return;
    }
    EXPECT(r.status == BENCH_OK, "%s %s backward %s: relative error %.2e (tolerance %.1e), %lld not finite: %s",
           layer_kind_name(l.kind), c->what, dtype_name(t), r.rel_err, r.tolerance, (long long)r.nonfinite, r.why);
    printf("  backward %-18s %-34s %-4s rel. error %.2e\n", layer_kind_name(l.kind), c->what, dtype_name(t), r.rel_err);
    if (l.n_weights > 0) { /* frozen (requires_grad: false): the inputs' gradients alone, as right */
        l.frozen = true;
        layer_count(&l);
        r = check_layer(&l, b, seed);
        EXPECT(r.status == BENCH_OK, "%s %s backward %s, frozen: relative error %.2e (tolerance %.1e): %s",
               layer_kind_name(l.kind), c->what, dtype_name(t), r.rel_err, r.tolerance, r.why);
        l.frozen = false;
        layer_count(&l);
    }
    if (!layer_desc_get(l.kind)->train_reference)
        return;
    /* where training's forward differs (batch norm's statistics, dropout's mask): the
     * forward kernel in training mode against it, then the backward again */
    l.pass = PASS_TRAIN;
    layer_count(&l);
    r = check_layer(&l, b, seed);
    EXPECT(r.status == BENCH_OK, "%s %s train %s: relative error %.2e (tolerance %.1e): %s", layer_kind_name(l.kind),
           c->what, dtype_name(t), r.rel_err, r.tolerance, r.why);
    printf("  train    %-18s %-34s %-4s %s\n", layer_kind_name(l.kind), c->what, dtype_name(t), r.why);
}

/* Dropout's hashed mask drops about p of the elements, with no pattern a stride shows,
 * and keeps the rest scaled by 1 / (1 - p). */
static void test_dropout_mask(void)
{
    layer l = {.name = "a.dropout", .kind = LAYER_DROPOUT, .pass = PASS_TRAIN};
    const double ps[] = {0.1, 0.5, 0.9};
    for (int k = 0; k < 3; k++) {
        l.p.p = ps[k];
        uint32_t seed, threshold;
        float keep;
        layer_dropout_params(&l, &seed, &threshold, &keep);
        int64_t n = 1 << 20, dropped = 0, strided = 0, bad = 0;
        for (int64_t i = 0; i < n; i++) {
            float s = layer_dropout_scale(seed, threshold, keep, i);
            dropped += s == 0.0f;
            strided += i % 64 == 0 && s == 0.0f;
            bad += s != 0.0f && fabsf(s - (float)(1.0 / (1.0 - ps[k]))) > 1e-6f;
        }
        double frac = (double)dropped / (double)n, sfrac = (double)strided / (double)(n / 64);
        EXPECT(fabs(frac - ps[k]) < 0.005 && fabs(sfrac - ps[k]) < 0.02 && !bad,
               "dropout p %.1f: dropped %.4f (every 64th: %.4f), %lld kept with a wrong scale", ps[k], frac, sfrac,
               (long long)bad);
    }
}

/* Every kind must appear in the table above. */
static void test_coverage(void)
{
    for (int k = 0; k < LAYER_KIND_COUNT; k++) {
        bool found = false;
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
            found |= cases[i].kind == (layer_kind)k;
        EXPECT(found, "kind %s has no test case", layer_kind_name((layer_kind)k));
    }
}

/* The checker itself must catch a wrong element and an unwritten one. */
static void test_checker(void)
{
    float ref[100], out[100];
    int64_t nonfinite;
    for (int i = 0; i < 100; i++)
        ref[i] = out[i] = (float)(i % 9) - 4.0f;
    EXPECT(check_rel_err(out, ref, 100, &nonfinite) == 0.0 && nonfinite == 0, "identical arrays");
    out[37] += 0.01f;
    EXPECT(check_rel_err(out, ref, 100, &nonfinite) > 1e-4, "one wrong element must show");
    out[37] = NAN;
    check_rel_err(out, ref, 100, &nonfinite);
    EXPECT(nonfinite == 1, "an unwritten (NaN) element must show");
}

/* A chain's tolerance (check_chain_tol): the layers' own summed, each dtype's rounding
 * as the square root of its layers, and never so large that an error of order 1 (a
 * residual's gradient left out) passes, however deep the model. */
static void test_chain_tol(const backend *b)
{
    layer_case c = {"", LAYER_RELU, S2(3, 5), none};
    layer l;
    make_layer(&c, &l);
    check_chain_tol one = {0}, four = {0}, deep = {0};
    check_chain_tol_add(&one, b, &l, 0.0);
    for (int i = 0; i < 4; i++)
        check_chain_tol_add(&four, b, &l, 0.0);
    double own = backend_tolerance(b, &l) - dtype_tolerance(DTYPE_FP32), r = dtype_tolerance(DTYPE_FP32);
    EXPECT(fabs(check_chain_tol_total(&one) - (own + r)) < 1e-12, "one layer: its own tolerance");
    EXPECT(fabs(check_chain_tol_total(&four) - (4 * own + 2 * r)) < 1e-12, "four layers: 4 own, 2 roundings");
    l.dtype = DTYPE_BF16;
    for (int i = 0; i < 2000; i++)
        check_chain_tol_add(&deep, b, &l, 2e-5);
    EXPECT(check_chain_tol_total(&deep) == CHECK_CHAIN_MAX && CHECK_CHAIN_MAX < 0.5,
           "2000 bf16 layers: %.3g, capped", check_chain_tol_total(&deep));
}

/* FLOP and parameter counts of known layers, worked out by hand. */
static void test_counts(void)
{
    layer l;
    layer_case conv = {"", LAYER_CONV2D, S4(2, 5, 11, 9), c_3x3}; /* out 2x7x11x9, K = 45 */
    make_layer(&conv, &l);
    EXPECT(l.n_weights == 7 * 45 + 7, "conv params %lld", (long long)l.n_weights);
    EXPECT(l.macs == 2LL * 7 * 11 * 9 * 45, "conv macs %lld", (long long)l.macs);
    EXPECT(l.flops == 2 * l.macs + 2 * 7 * 11 * 9, "conv flops %lld", (long long)l.flops);
    layer_case dw = {"", LAYER_CONV2D, S4(3, 6, 15, 13), c_dw}; /* out 3x6x8x7, K = 9 */
    make_layer(&dw, &l);
    EXPECT(l.macs == 3LL * 6 * 8 * 7 * 9, "depthwise macs %lld", (long long)l.macs);
    layer_case bn = {"", LAYER_BATCHNORM2D, S4(3, 5, 7, 3), bn_eps};
    make_layer(&bn, &l);
    EXPECT(l.n_weights == 10 && l.n_weight_floats == 20 && l.flops == 2 * 3 * 5 * 7 * 3, "bn counts");
    layer_case mp = {"", LAYER_MAXPOOL2D, S4(2, 3, 15, 12), mp_3s2p1}; /* out 2x3x8x6 */
    make_layer(&mp, &l);
    EXPECT(l.out.d[2] == 8 && l.out.d[3] == 6 && l.flops == 2 * 3 * 8 * 6 * 9, "maxpool shape/flops");
    layer_case ad = {"", LAYER_ADAPTIVE_AVGPOOL2D, S4(2, 4, 7, 5), ad_32};
    make_layer(&ad, &l); /* rows: [0,3) [2,5) [4,7) = 9; cols: [0,3) [2,5) = 6 */
    EXPECT(l.flops == 2 * 4 * 9 * 6, "adaptive flops %lld", (long long)l.flops);
    layer_case ln = {"", LAYER_LINEAR, S2(3, 53), lin_nobias};
    make_layer(&ln, &l);
    EXPECT(l.n_weights == 7 * 53 && l.macs == 3 * 7 * 53 && l.flops == 2 * l.macs, "linear counts");
}

/* moe's routing rule: every row gets top_k distinct experts; the uniform assignment
 * gives each expert its closed-form count (within one of the others when even, never
 * more than the rows), and a skewed one decreasing counts that still add up. */
static void test_moe_routing(void)
{
    static const struct { int64_t rows, e, k; double skew; } t[] = {
        {7, 8, 2, 0}, {1, 8, 2, 0}, {13, 5, 3, 0}, {100, 8, 2, 1.0}, {9, 6, 1, 2.0}, {3, 6, 5, 3.0}, {4, 4, 4, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        layer l;
        shape_t ins[2] = {S2(t[i].rows, 4), S2(t[i].rows, t[i].e)};
        memset(&l, 0, sizeof l);
        l.kind = LAYER_MOE, l.ins = ins, l.in = ins[0];
        l.p.num_experts = t[i].e, l.p.top_k = t[i].k, l.p.ffn_dim = 3, l.p.load_skew = t[i].skew;
        int64_t count[8], got[8] = {0}, pick[400], sum = 0, lo = t[i].rows, hi = 0;
        bool distinct = true, decreasing = true;
        layer_moe_route(&l, NULL, NULL, pick, count);
        for (int64_t r = 0; r < t[i].rows; r++)
            for (int64_t j = 0; j < t[i].k; j++) {
                got[pick[r * t[i].k + j]]++;
                for (int64_t q = 0; q < j; q++)
                    distinct &= pick[r * t[i].k + q] != pick[r * t[i].k + j];
            }
        for (int64_t e = 0; e < t[i].e; e++) {
            EXPECT(got[e] == count[e] && count[e] <= t[i].rows, "moe case %zu: expert %lld has %lld rows, counted %lld",
                   i, (long long)e, (long long)got[e], (long long)count[e]);
            sum += count[e];
            lo = count[e] < lo ? count[e] : lo, hi = count[e] > hi ? count[e] : hi;
            decreasing &= e == 0 || count[e] <= count[e - 1];
        }
        EXPECT(distinct, "moe case %zu: a row's experts repeat", i);
        EXPECT(sum == t[i].rows * t[i].k, "moe case %zu: %lld slots, expected %lld", i, (long long)sum,
               (long long)(t[i].rows * t[i].k));
        EXPECT(t[i].skew > 0 ? decreasing : hi - lo <= 1, "moe case %zu: counts from %lld to %lld", i, (long long)lo,
               (long long)hi);
    }
    /* the router's top-k: the largest logits, ties to the lower index */
    layer l;
    shape_t ins[2] = {S2(2, 4), S2(2, 5)};
    memset(&l, 0, sizeof l);
    l.kind = LAYER_MOE, l.ins = ins, l.in = ins[0];
    l.p.num_experts = 5, l.p.top_k = 2, l.p.routing = MOE_ROUTER, l.p.ffn_dim = 3, l.p.normalize = true;
    const float logits[10] = {0.1f, 0.9f, -2, 0.9f, 0.3f, 5, -1, 4, 4, 7};
    int64_t pick[4], count[5];
    layer_moe_route(&l, logits, NULL, pick, count);
    EXPECT(pick[0] == 1 && pick[1] == 3 && pick[2] == 4 && pick[3] == 0, "router picks %lld %lld, %lld %lld",
           (long long)pick[0], (long long)pick[1], (long long)pick[2], (long long)pick[3]);
    /* DeepSeek-V2's groups: the best group of 3 by its best logit (experts 2 and 3), then
     * its top 2, though expert 1's logit beats expert 3's */
    layer gl = l;
    shape_t gins[2] = {S2(1, 4), S2(1, 6)};
    gl.ins = gins, gl.in = gins[0];
    gl.p.num_experts = 6, gl.p.n_group = 3, gl.p.topk_group = 1;
    const float glogits[6] = {0.1f, 0.9f, 0.95f, -1, 0.5f, 0.5f};
    int64_t gcount[6];
    layer_moe_route(&gl, glogits, NULL, pick, gcount);
    EXPECT(pick[0] == 2 && pick[1] == 3, "group-limited router picks %lld %lld, expected 2 3", (long long)pick[0],
           (long long)pick[1]);
    double gate[2];
    layer_moe_gates(&l, logits + 5, pick + 2, gate);
    EXPECT(fabs(gate[0] - 1 / (1 + exp(-2.0))) < 1e-12 && fabs(gate[0] + gate[1] - 1) < 1e-12, "gates %g %g", gate[0],
           gate[1]);
    /* not renormalised: the softmax's own probabilities, e^7 / (e^5 + e^-1 + 2 e^4 + e^7) */
    l.p.normalize = false;
    layer_moe_gates(&l, logits + 5, pick + 2, gate);
    double z = exp(5.0) + exp(-1.0) + 2 * exp(4.0) + exp(7.0);
    EXPECT(fabs(gate[0] - exp(7.0) / z) < 1e-12 && fabs(gate[1] - exp(5.0) / z) < 1e-12, "raw gates %g %g", gate[0],
           gate[1]);
    /* DeepSeek-V3's: sigmoid scores plus the bias choose (experts 4 and 1 by the bias,
     * though 0's logit is the highest); the gates are the sigmoids alone, renormalised */
    layer vl = l;
    shape_t vins[2] = {S2(1, 4), S2(1, 5)}; /* one row */
    vl.ins = vins, vl.in = vins[0];
    vl.p.moe_scoring = MOE_SIGMOID, vl.p.score_bias = true, vl.p.routed_scale = 2.0, vl.p.normalize = true;
    const float vlogits[5] = {1.0f, 0.5f, 0.5f, -1.0f, 0.0f}, bias[5] = {-1.0f, 0.3f, 0.0f, 0.0f, 0.9f};
    layer_moe_route(&vl, vlogits, bias, pick, count);
    EXPECT(pick[0] == 4 && pick[1] == 1, "sigmoid router with its bias picks %lld %lld, expected 4 1",
           (long long)pick[0], (long long)pick[1]);
    double s4 = 1 / (1 + exp(0.0)), s1 = 1 / (1 + exp(-0.5));
    layer_moe_gates(&vl, vlogits, pick, gate);
    EXPECT(fabs(gate[0] - 2.0 * s4 / (s4 + s1)) < 1e-12 && fabs(gate[1] - 2.0 * s1 / (s4 + s1)) < 1e-12,
           "sigmoid gates %g %g", gate[0], gate[1]);
}

/* The closed form of adaptive pooling's window sizes against the loop it replaces. */
static void test_adaptive_window_sum(void)
{
    for (int64_t in = 1; in <= 40; in++)
        for (int64_t out = 1; out <= 40; out++) {
            int64_t sum = 0;
            for (int64_t i = 0; i < out; i++)
                sum += ((i + 1) * in + out - 1) / out - (i * in) / out;
            EXPECT(layer_adaptive_window_sum(in, out) == sum, "window sum %lld -> %lld: %lld, loop %lld", (long long)in,
                   (long long)out, (long long)layer_adaptive_window_sum(in, out), (long long)sum);
        }
}

/* The CPU backend's kept algorithm choices: found for the same layer again (the chained
 * forward after the isolated row), not for another shape or other parameters. */
static void test_cpu_choices(void)
{
    cpu_choices c = {0};
    layer a, b, d;
    layer_case ca = {"", LAYER_CONV2D, S4(2, 5, 11, 9), c_3x3}, cb = {"", LAYER_CONV2D, S4(3, 5, 11, 9), c_3x3};
    layer_case cd = {"", LAYER_CONV2D, S4(2, 5, 11, 9), c_dil};
    make_layer(&ca, &a);
    make_layer(&cb, &b);
    make_layer(&cd, &d);
    EXPECT(cpu_choice_find(&c, &a) == NULL, "nothing kept yet");
    cpu_choice_add(&c, &a, (const int64_t[3]){3, 2, 5});
    const cpu_choice *f = cpu_choice_find(&c, &a);
    EXPECT(f && f->algo[0] == 3 && f->algo[1] == 2 && f->algo[2] == 5, "the same layer finds its choice");
    EXPECT(cpu_choice_find(&c, &b) == NULL, "another batch is another layer");
    EXPECT(cpu_choice_find(&c, &d) == NULL, "other parameters are another layer");
    cpu_choice_add(&c, &d, (const int64_t[3]){1, 1, 2});
    f = cpu_choice_find(&c, &d);
    EXPECT(f && f->algo[0] == 1 && cpu_choice_find(&c, &a)->algo[0] == 3, "two layers, two choices");
    free(c.v);
}

/* Counts that would overflow are reported as out of range, never wrapped. */
static void test_count_overflow(void)
{
    EXPECT(layer_count_mul((int64_t)1 << 31, (int64_t)1 << 31) == ((int64_t)1 << 62), "2^62 is in range");
    EXPECT(layer_count_mul((int64_t)1 << 32, (int64_t)1 << 31) == -1, "2^63 is out of range");
    EXPECT(layer_count_mul(INT64_MAX, 3) == -1 && layer_count_mul(-1, 0) == -1, "overflow and propagation");
    EXPECT(layer_count_add(LAYER_MAX_COUNT, 1) == -1 && layer_count_add(-1, 1) == -1, "sums");
    shape_t huge = {4, {16777216, 1048576, 1048576, 1}};
    EXPECT(shape_numel_checked(&huge) == -1, "2^64 elements must not wrap to 0");
}

/* The loss the finite differences follow: sum(dout * f(in, w)), in double over the
 * training forward's float outputs. */
static double fd_loss(const layer *l, float *const *in, const float *w, const float *dout, float *out)
{
    layer_train_reference(l, (const float *const *)in, w, out);
    double sum = 0.0;
    for (int64_t i = 0, n = shape_numel(&l->out); i < n; i++)
        sum += (double)dout[i] * out[i];
    return sum;
}

/* Central differences of fd_loss over n values at v (an input or the weights): the
 * step is what float holds of v +- h, so its rounding does not bias the quotient. */
static void fd_gradient(const layer *l, float *const *in, float *w, float *v, int64_t n, const float *dout,
                        float *out, double *g)
{
    const double h = 1e-2;
    for (int64_t i = 0; i < n; i++) {
        float keep = v[i], up = (float)(keep + h), down = (float)(keep - h);
        v[i] = up;
        double lu = fd_loss(l, in, w, dout, out);
        v[i] = down;
        double ld = fd_loss(l, in, w, dout, out);
        v[i] = keep;
        g[i] = (lu - ld) / ((double)up - down);
    }
}

/* n values 0.05 apart in a random order (a max's winner never changes within a step) */
static void fd_spread(float *x, int64_t n, uint64_t seed)
{
    layer_rng rng;
    layer_rng_seed(&rng, seed);
    for (int64_t i = 0; i < n; i++)
        x[i] = 0.05f * (float)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)layer_rng_uniform(&rng, 0.0f, (float)i + 0.999f);
        float t = x[i];
        x[i] = x[j], x[j] = t;
    }
}

/* Relative L2 distance of the reference's gradient from the differences' */
static double fd_distance(const float *ours, const double *fd, int64_t n)
{
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++)
        num += (ours[i] - fd[i]) * (ours[i] - fd[i]), den += fd[i] * fd[i];
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Elements the finite differences of one case may take at most (two forwards each) */
#define FD_MAX_VALUES 4000
#define FD_MAX_WORK 4e8
#define FD_TOLERANCE 5e-4

/* Every kind's backward reference (layer_desc.backward) against central finite
 * differences of its training forward, on the cases of the table small enough to
 * difference (FD_MAX_VALUES inputs and weights): every input's gradient and the
 * weights'. Inputs are kept 3 steps away from relu's and relu6's corner at 0, where a
 * difference straddles the kink, and max pooling's are spread so that no window holds
 * two within a step of each other; embedding's token ids have no gradient (ours must be
 * zero), only its table is differenced. */
static void test_backward(uint64_t seed)
{
    int checked[LAYER_KIND_COUNT] = {0};
    bool caught = false;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        layer l;
        if (!layer_desc_get(cases[c].kind)->backward || !make_layer(&cases[c], &l))
            continue;
        int64_t values = l.n_weight_floats, n_out = shape_numel(&l.out);
        for (int k = 0; k < l.n_inputs; k++)
            values += shape_numel(&l.ins[k]);
        if (values > FD_MAX_VALUES || (double)values * (double)(l.macs + l.flops + n_out) > FD_MAX_WORK)
            continue;
        float *in[LAYER_MAX_INPUTS] = {NULL}, *w = NULL, *din[LAYER_MAX_INPUTS] = {NULL};
        forward_layer_data(&l, seed + c, in, &w);
        bool ids = l.kind == LAYER_EMBEDDING;
        if (l.kind == LAYER_RELU || l.kind == LAYER_RELU6)
            for (int64_t i = 0; i < shape_numel(&l.in); i++)
                if (fabsf(in[0][i]) < 0.03f)
                    in[0][i] += in[0][i] < 0 ? -0.03f : 0.03f;
        if (l.kind == LAYER_MAXPOOL2D) /* distinct values 5 steps apart, shuffled: no near ties */
            fd_spread(in[0], shape_numel(&l.in), seed + c);
        float *dout = bench_alloc_floats(n_out), *out = bench_alloc_floats(n_out);
        float *dw = l.n_weight_floats ? bench_alloc_floats(l.n_weight_floats) : NULL;
        layer_rng rng;
        layer_rng_seed(&rng, seed + c + 1000);
        layer_fill_uniform(dout, n_out, -1.0f, 1.0f, &rng);
        for (int k = 0; k < l.n_inputs; k++)
            din[k] = bench_alloc_floats(shape_numel(&l.ins[k]));
        layer_train_reference(&l, (const float *const *)in, w, out);
        layer_desc_get(l.kind)->backward(&l, (const float *const *)in, w, out, dout, din, dw);
        double worst = 0.0;
        for (int k = 0; k <= l.n_inputs; k++) {
            float *v = k < l.n_inputs ? in[k] : w, *ours = k < l.n_inputs ? din[k] : dw;
            int64_t n = k < l.n_inputs ? shape_numel(&l.ins[k]) : l.n_weight_floats;
            if (!n)
                continue;
            double *fd = xcalloc((size_t)n, sizeof *fd), err;
            if (ids) {
                err = fd_distance(ours, fd, n); /* zeros */
                ids = false;
            } else {
                fd_gradient(&l, in, w, v, n, dout, out, fd);
                err = fd_distance(ours, fd, n);
            }
            EXPECT(err <= FD_TOLERANCE, "%s %s: the gradient of %s %d is %.2e from finite differences",
                   layer_kind_name(l.kind), cases[c].what, k < l.n_inputs ? "input" : "the weights", k, err);
            if (!caught && err > 0) { /* the comparison sees a gradient 1% off */
                for (int64_t i = 0; i < n; i++)
                    ours[i] *= 1.01f;
                caught = fd_distance(ours, fd, n) > FD_TOLERANCE;
                EXPECT(caught, "a gradient 1%% off passes the finite differences' check");
            }
            worst = err > worst ? err : worst;
            free(fd);
        }
        printf("  backward %-18s %-34s %.2e from finite differences\n", layer_kind_name(l.kind), cases[c].what, worst);
        checked[l.kind]++;
        for (int k = 0; k < l.n_inputs; k++)
            free(din[k]);
        forward_free_data(&l, in, &w);
        free(dout), free(out), free(dw);
    }
    for (int k = 0; k < LAYER_KIND_COUNT; k++)
        EXPECT(!layer_desc_get((layer_kind)k)->backward || checked[k], "backward of %s: no case small enough to check",
               layer_kind_name((layer_kind)k));
}

/* Every kind with a backward reference has the cpu's fp32 backward kernel (a view's
 * backward is a view): a reference without a kernel would only ever be a skipped row. */
static void test_backward_coverage(const backend *b)
{
    for (int k = 0; k < LAYER_KIND_COUNT; k++) {
        layer l = {.kind = (layer_kind)k, .dtype = DTYPE_FP32, .pass = PASS_BACKWARD, .p = {.p = 0.5}};
        if (layer_has_backward(&l) && !layer_is_view(&l))
            EXPECT(backend_kernel_of(b, &l).kernel, "backward of %s: no cpu kernel", layer_kind_name(l.kind));
    }
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "cpu";
    const backend_ops *ops = backend_find(name);
    if (!ops) {
        printf("SKIP: %s\n", backend_find_error());
        return 77;
    }
    backend b;
    backend_options bo = {.threads = 0};
    char err[512];
    if (backend_open(ops, &bo, &b, err, sizeof err) != BENCH_OK) {
        printf("SKIP: the %s backend cannot start: %s\n", name, err);
        return 77;
    }
    const char *env = getenv("LAYERBENCH_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
    printf("test_layers on %s, seed %llu (set LAYERBENCH_TEST_SEED to repeat)\n", name, (unsigned long long)seed);
    test_coverage();
    test_checker();
    test_counts();
    test_adaptive_window_sum();
    test_moe_routing();
    test_count_overflow();
    test_cpu_choices();
    test_backward(seed);
    /* every case in every dtype the backend's table runs (tf32 on cuda, bf16 and fp16 on
     * the CPUs); int8 on the kinds that quantize (onednn), and on batch norm and ReLU,
     * which run in fp32 in an int8 model */
    static const dtype_t types[] = {DTYPE_FP32, DTYPE_TF32, DTYPE_BF16, DTYPE_FP16, DTYPE_INT8};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        layer probe = {.kind = types[t] == DTYPE_INT8 ? LAYER_LINEAR : LAYER_RELU, .dtype = types[t]};
        if (!backend_kernel_of(&b, &probe).kernel) {
            printf("  %s: not run on %s (%s)\n", dtype_name(types[t]), name, backend_kernel_of(&b, &probe).unsupported);
            continue;
        }
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            layer_kind k = cases[i].kind;
            if (types[t] != DTYPE_INT8 || layer_desc_get(k)->int8_weights || k == LAYER_RELU || k == LAYER_BATCHNORM2D)
                run_case(&b, &cases[i], seed + i, types[t]);
        }
    }
    if (strcmp(name, "cpu") == 0) {
        test_backward_coverage(&b);
        test_dropout_mask();
        test_chain_tol(&b);
    }
    /* every case's backward the backend has a kernel for, in fp32, bf16 and fp16 */
    static const dtype_t bwd_types[] = {DTYPE_FP32, DTYPE_BF16, DTYPE_FP16};
    for (size_t t = 0; t < sizeof bwd_types / sizeof *bwd_types; t++)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
            run_backward_case(&b, &cases[i], seed + i, bwd_types[t]);
    backend_close(&b);
    /* attention's two backward ways, each forced (the search above kept the faster) */
    static const char *const attn_ways[] = {"plain", "blocks"};
    for (size_t a = 0; a < sizeof attn_ways / sizeof *attn_ways; a++) {
        setenv("LAYERBENCH_CPU_ATTN_BWD", attn_ways[a], 1);
        if (backend_open(ops, &bo, &b, err, sizeof err) != BENCH_OK) {
            EXPECT(false, "the backend reopens");
            break;
        }
        printf("attention's backward with LAYERBENCH_CPU_ATTN_BWD=%s\n", attn_ways[a]);
        for (size_t t = 0; t < sizeof bwd_types / sizeof *bwd_types; t++)
            for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
                if (cases[i].kind == LAYER_ATTENTION)
                    run_backward_case(&b, &cases[i], seed + i, bwd_types[t]);
        backend_close(&b);
    }
    unsetenv("LAYERBENCH_CPU_ATTN_BWD");
    if (strcmp(name, "cpu") == 0) {
        /* the CPU's convolution algorithms, each forced where it applies (the search
         * above keeps whichever was fastest), then the rule (--algo heuristic) */
        static const char *const algos[] = {"im2col", "gemm-1x1", "winograd", "winograd:1", "winograd:0", "winograd4", "winograd4:1",
                                            "winograd4:0", "chunked:1", "chunked:4",
                                            "batched:1", "batched:2", "batched:3", "tiles:1", "tiles:100", "tiles^T:1",
                                            "tiles^T:100", "direct", "direct^T", ""};
        for (size_t a = 0; a < sizeof algos / sizeof *algos; a++) {
            bo.algo_heuristic = !*algos[a];
            setenv("LAYERBENCH_CPU_CONV_ALGO", algos[a], 1);
            if (backend_open(ops, &bo, &b, err, sizeof err) != BENCH_OK) {
                EXPECT(false, "the cpu backend reopens");
                break;
            }
            printf("conv2d with LAYERBENCH_CPU_CONV_ALGO='%s'%s\n", algos[a], bo.algo_heuristic ? ", --algo heuristic" : "");
            for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
                if (cases[i].kind == LAYER_CONV2D)
                    run_case(&b, &cases[i], seed + i, DTYPE_FP32);
            backend_close(&b);
        }
        /* the tiled paths again with the lower ISAs' kernels (AVX2's 6x16 tile, the
         * plain C loop), whatever this CPU has, and linear's packed path once per ISA */
        static const char *const isas[] = {"avx2", "generic"}, *const tiled[] = {"tiles:3", "tiles^T:3", "direct", "direct^T"};
        for (size_t i = 0; i < sizeof isas / sizeof *isas; i++)
            for (size_t a = 0; a < sizeof tiled / sizeof *tiled; a++) {
                bo.algo_heuristic = false;
                setenv("LAYERBENCH_CPU_GEMM_ISA", isas[i], 1);
                setenv("LAYERBENCH_CPU_CONV_ALGO", tiled[a], 1);
                if (backend_open(ops, &bo, &b, err, sizeof err) != BENCH_OK) {
                    EXPECT(false, "the cpu backend reopens");
                    break;
                }
                printf("conv2d with LAYERBENCH_CPU_CONV_ALGO='%s', LAYERBENCH_CPU_GEMM_ISA=%s%s\n", tiled[a], isas[i],
                       a == 0 ? "; linear; attention (fp32, bf16: one key at a time)" : "");
                for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
                    if (cases[c].kind == LAYER_CONV2D || (a == 0 && (cases[c].kind == LAYER_LINEAR ||
                                                                     cases[c].kind == LAYER_ATTENTION)))
                        run_case(&b, &cases[c], seed + c, DTYPE_FP32);
                    if (a == 0 && cases[c].kind == LAYER_ATTENTION)
                        run_case(&b, &cases[c], seed + c, DTYPE_BF16);
                }
                backend_close(&b);
            }
        unsetenv("LAYERBENCH_CPU_CONV_ALGO");
        /* linear's blocked GEMM with each ISA's kernel under --algo heuristic (the
         * search keeps sgemm where it was faster; the generic ISA runs sgemm) */
        for (size_t i = 0; i < 2; i++) {
            bo.algo_heuristic = true;
            if (i == 0)
                unsetenv("LAYERBENCH_CPU_GEMM_ISA");
            else
                setenv("LAYERBENCH_CPU_GEMM_ISA", "avx2", 1);
            if (backend_open(ops, &bo, &b, err, sizeof err) != BENCH_OK) {
                EXPECT(false, "the cpu backend reopens");
                break;
            }
            printf("linear, --algo heuristic, LAYERBENCH_CPU_GEMM_ISA=%s\n", i ? "avx2" : "(unset)");
            for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
                if (cases[c].kind == LAYER_LINEAR)
                    run_case(&b, &cases[c], seed + c, DTYPE_FP32);
            backend_close(&b);
        }
        bo.algo_heuristic = false;
        unsetenv("LAYERBENCH_CPU_GEMM_ISA");
        /* bf16 convolutions under --algo heuristic: the vdpbf16ps kernel wherever it takes
         * the layer (the search above keeps fp32 copies where they were faster, and
         * then the bf16 kernel's own result was not checked) */
        bo.algo_heuristic = true;
        if (backend_open(ops, &bo, &b, err, sizeof err) == BENCH_OK) {
            printf("bf16 conv2d, --algo heuristic\n");
            for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
                if (cases[c].kind == LAYER_CONV2D)
                    run_case(&b, &cases[c], seed + c, DTYPE_BF16);
            backend_close(&b);
        } else
            EXPECT(false, "the cpu backend reopens");
        bo.algo_heuristic = false;
        /* bf16 convolutions, linear layers and attention as a CPU without AVX512_BF16
         * runs them: on fp32 copies, or attention's keys widened (above, they ran on
         * vdpbf16ps where this CPU has it) */
        setenv("LAYERBENCH_CPU_NO_BF16", "1", 1);
        if (backend_open(ops, &bo, &b, err, sizeof err) == BENCH_OK) {
            printf("bf16 conv2d, linear and attention with LAYERBENCH_CPU_NO_BF16=1\n");
            for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
                if (cases[c].kind == LAYER_CONV2D || cases[c].kind == LAYER_LINEAR || cases[c].kind == LAYER_ATTENTION)
                    run_case(&b, &cases[c], seed + c, DTYPE_BF16);
            backend_close(&b);
        }
        unsetenv("LAYERBENCH_CPU_NO_BF16");
    }
    return test_summary("test_layers");
}
