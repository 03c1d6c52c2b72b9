/* The decoder kinds' arithmetic on the GPU, as functions both nvcc (cuda_llm.cu, on the
 * device) and the C compiler (tests/test_cuda_plan.c, on the host) compile, so that the
 * host checks, against the plain-C reference (layers/llm.c), what the kernels compute:
 * the token id an embedding reads, where attention's keys and values lie (the KV cache in
 * the layer's weights, or the key and value inputs), which keys a query sees, the scaled
 * and soft-capped score, and the online softmax over a split of the keys with the merge of
 * the splits (flash-decoding). Plain numbers only: no layer, no allocation. */
#ifndef LLM_CUDA_MATH_H
#define LLM_CUDA_MATH_H

#include <math.h>
#include <stdint.h>

#include "lb_hd.h"

/* floor((x + 1) / 2 * vocab) clamped to the table, in double as layer_token_id */
LB_HD int64_t lb_token_id(float x, int64_t vocab)
{
    double id = floor(((double)x + 1.0) * 0.5 * (double)vocab);
    return id < 0 ? 0 : id >= (double)vocab ? vocab - 1 : (int64_t)id;
}

/* head dimensions each lane of the attention kernel's warps holds: head_dim <= 32 x this */
#define LB_ATTN_LANE_DIMS 8

/* One attention layer's shape and mask (layers/llm.c says what each means). */
typedef struct lb_attn {
    int64_t n, t, tk;      /* batch, queries per sequence, key (and value) tokens of the inputs */
    int64_t h, hkv, d;     /* query heads, key/value heads, head_dim */
    int64_t s, c;          /* kv_len (positions before the inputs'), positions the cache holds (the last c of s) */
    int64_t window;        /* sliding_window, 0: none */
    int causal;
    float scale, softcap;  /* scale > 0 (1/sqrt(d) filled in by the host), softcap 0: none */
} lb_attn;

/* The keys query t sees, positions lo to hi (inclusive; the cache's first, then the
 * inputs'): causal, up to its own position s + t, and with a window, back to s + t - W + 1;
 * else every one. The range is never empty: a causal query sees itself. */
LB_HD void lb_attn_keys(const lb_attn *a, int64_t t, int64_t *lo, int64_t *hi)
{
    int64_t i = a->s + t;
    *lo = 0, *hi = a->s + a->tk - 1;
    if (a->causal) {
        *hi = i;
        if (a->window > 0 && i - a->window + 1 > 0)
            *lo = i - a->window + 1;
    }
}

/* Where key (value = 0) or value (1) j of kv head g of sample b lies: in the cache (the
 * layer's weights, keys then values, each [n, hkv, c, d]; *cached = 1) for j < s, else in
 * input 1 + value ([n, tk, hkv * d]); an element offset */
LB_HD int64_t lb_attn_kv_at(const lb_attn *a, int value, int64_t b, int64_t g, int64_t j, int *cached)
{
    *cached = j < a->s;
    if (j < a->s)
        return (int64_t)value * a->n * a->hkv * a->c * a->d + ((b * a->hkv + g) * a->c + (j - (a->s - a->c))) * a->d;
    return ((b * a->tk + (j - a->s)) * a->hkv + g) * a->d;
}

/* the logit of a dot product: scaled, then capped at softcap tanh(x / softcap) */
LB_HD float lb_attn_score(const lb_attn *a, float dot)
{
    float x = dot * a->scale;
    return a->softcap > 0 ? a->softcap * tanhf(x / a->softcap) : x;
}

/* The online softmax of one split of a row's keys: its running max m and sum l of
 * exp(score - m); the output's accumulator is kept beside it. Adding a score: returns the
 * factor the accumulator is multiplied by, and *p the new key's weight (acc = acc * f +
 * p v). m starts at -INFINITY, l at 0. */
LB_HD float lb_online_push(float *m, float *l, float score, float *p)
{
    float top = score > *m ? score : *m;
    float f = *m == -INFINITY ? 0.0f : expf(*m - top);
    *p = expf(score - top);
    *l = *l * f + *p;
    *m = top;
    return f;
}

/* Merges split 2 (m2, l2) into split 1 (m, l): returns the factor for split 1's
 * accumulator and *f2 the factor for split 2's (acc = acc * f + acc2 * f2). An empty
 * split (m -INFINITY) weighs 0. A sink is a split of its logit with l = 1 and no
 * accumulator. */
LB_HD float lb_online_merge(float *m, float *l, float m2, float l2, float *f2)
{
    float top = m2 > *m ? m2 : *m;
    if (top == -INFINITY) {
        *f2 = 0.0f;
        return 0.0f;
    }
    float f = *m == -INFINITY ? 0.0f : expf(*m - top);
    *f2 = m2 == -INFINITY ? 0.0f : expf(m2 - top);
    *l = *l * f + l2 * *f2;
    *m = top;
    return f;
}

/* The split of keys lo..hi warp (or block) w of ws takes: contiguous, as even as can be */
LB_HD void lb_split(int64_t lo, int64_t hi, int w, int ws, int64_t *from, int64_t *to)
{
    int64_t count = hi - lo + 1, per = count / ws, extra = count % ws;
    *from = lo + (int64_t)w * per + (w < extra ? w : extra);
    *to = *from + per + (w < extra ? 1 : 0) - 1; /* to < from: an empty split */
}

/* The launch of one attention layer: the most keys a query sees (the last query's); warps
 * per block, one per 64 of those keys, 1 to 8; and the splits of the keys over blocks,
 * where the queries alone give fewer than two blocks per multiprocessor (sms) and the keys
 * are many: enough splits for two blocks per multiprocessor, at least 256 keys each, 32 at
 * most (the merge reads every split of a query). */
LB_HD void lb_attn_grid(const lb_attn *a, int sms, int *splits, int *warps)
{
    int64_t lo, hi, queries = a->n * a->t * a->h;
    lb_attn_keys(a, a->t - 1, &lo, &hi);
    int64_t keys = hi - lo + 1, w = (keys + 63) / 64, sp = 1;
    *warps = (int)(w < 1 ? 1 : w > 8 ? 8 : w);
    if (queries < 2 * (int64_t)sms && keys >= 512) {
        sp = (2 * (int64_t)sms + queries - 1) / queries;
        sp = sp > keys / 256 ? keys / 256 : sp;
        sp = sp > 32 ? 32 : sp < 1 ? 1 : sp;
    }
    *splits = (int)sp;
}

#endif
