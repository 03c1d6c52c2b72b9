/* The cpu backend's services to its kernels (cpu_env.h). */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_env.h"

/* Cold samples: writing twice the last-level cache leaves none of the layer's data in
 * any level (the value changes each time, so the writes cannot be skipped). */
void cpu_env_flush_cache(void *ctx)
{
    cpu_ctx *c = ctx;
    c->flush_value = (c->flush_value + 1) & 0xff;
    memset(c->flush, c->flush_value, c->flush_bytes);
    __asm__ __volatile__("" ::"r"(c->flush) : "memory");
}

void cpu_forward_conditions(const cpu_span *cold, int n, const void *in, int64_t in_bytes)
{
    for (int i = 0; i < n; i++) /* clflush: out of every level, dirty lines written back */
        for (int64_t b = 0; cold[i].p && b < cold[i].bytes; b += 64)
            _mm_clflush((const char *)cold[i].p + b);
    _mm_mfence();
    const volatile unsigned char *x = in;
    unsigned sink = 0;
    for (int64_t b = 0; x && b < in_bytes; b += 64)
        sink += x[b];
    __asm__ __volatile__("" ::"r"(sink) : "memory");
}

void cpu_forward_conditions_all(void *env, const void *in, int64_t in_bytes)
{
    if (env)
        cpu_env_flush_cache(env);
    cpu_forward_conditions(NULL, 0, in, in_bytes);
}

cpu_choices *cpu_env_choices(void *env)
{
    cpu_ctx *c = env;
    return c && c->search ? &c->choices : NULL;
}

static bool same_layer(const cpu_choice *c, const layer *l)
{
    return c->kind == l->kind && c->dtype == l->dtype && memcmp(&c->p, &l->p, sizeof c->p) == 0 &&
           shape_equal(&c->in, &l->in);
}

char *cpu_choice_key(const layer *l, char *buf, size_t len)
{
    char shape[96], params[320];
    shape_format_compact(&l->in, shape, sizeof shape);
    layer_params_format(l, params, sizeof params);
    /* fp32's keys as they always were; another dtype's name it (its choices differ) */
    snprintf(buf, len, "%s %s %s%s%s", layer_kind_name(l->kind), shape, params, l->dtype ? " dtype=" : "",
             l->dtype ? dtype_name(l->dtype) : "");
    return buf;
}

static cpu_choice *choice_of(cpu_choices *c, const layer *l)
{
    for (int i = 0; i < c->n; i++)
        if (same_layer(&c->v[i], l))
            return &c->v[i];
    return NULL;
}

const cpu_choice *cpu_choice_find(cpu_choices *c, const layer *l)
{
    const cpu_choice *known = choice_of(c, l);
    if (known || !c->n_given)
        return known;
    char key[512];
    cpu_choice_key(l, key, sizeof key);
    for (int i = 0; i < c->n_given; i++)
        if (strcmp(c->given[i].key, key) == 0) {
            cpu_choice_add(c, l, c->given[i].algo);
            c->v[c->n - 1].given = true;
            return &c->v[c->n - 1];
        }
    return NULL;
}

void cpu_choice_add(cpu_choices *c, const layer *l, const int64_t algo[3])
{
    cpu_choice *e = choice_of(c, l);
    if (!e) {
        c->v = xrealloc(c->v, (size_t)(c->n + 1) * sizeof *c->v);
        e = &c->v[c->n++];
    }
    memset(e, 0, sizeof *e);
    e->kind = l->kind;
    e->dtype = l->dtype;
    e->p = l->p;
    e->in = l->in;
    memcpy(e->algo, algo, sizeof e->algo);
}

int cpu_search_rounds(int n, double budget_s, void (*prepare)(void *user, int k), void (*run)(void *user, int k),
                      void *user, double *best)
{
    double spent = 0.0;
    int bf = 0;
    for (int k = 0; k < n; k++)
        best[k] = 1e30;
    for (int r = 0; r < 30 && (r < 5 || spent < budget_s); r++) {
        for (int k = 0; k < n; k++) {
            if (prepare)
                prepare(user, k);
            double t0 = bench_now();
            run(user, k);
            double dt = bench_now() - t0;
            spent += dt;
            best[k] = dt < best[k] ? dt : best[k];
        }
        bf = 0; /* the fastest, and its gap to the next */
        for (int k = 1; k < n; k++)
            if (best[k] < best[bf])
                bf = k;
        double gap = 1e30;
        for (int k = 0; k < n; k++)
            if (k != bf && best[k] / best[bf] - 1 < gap)
                gap = best[k] / best[bf] - 1;
        if (r >= 4 && (gap <= CPU_SEARCH_TIE || gap >= CPU_SEARCH_CLEAR))
            break;
    }
    return bf;
}

void cpu_thread_span(int64_t n, int64_t *lo, int64_t *hi)
{
    int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t per = (n + nt - 1) / nt;
    per = (per + 63) / 64 * 64;
    *lo = t * per < n ? t * per : n;
    *hi = *lo + per < n ? *lo + per : n;
}

bool cpu_attn_bwd_env_ok(const char *e)
{
    return !e || !*e || strcmp(e, "plain") == 0 || strcmp(e, "blocks") == 0;
}
