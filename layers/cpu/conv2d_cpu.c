/* conv2d on the CPU. Paths (with --algo search, the default, every one that applies is
 * timed at setup on the real weights and the fastest kept, as cuDNN's Find does, once
 * per distinct layer for the backend's life (cpu_choices: the chained forward runs what
 * the isolated row ran); with --algo heuristic, the rule in conv_rule):
 *  - gemm-1x1:   1x1 kernel, stride 1, no padding: the input already is the GEMM's B matrix.
 *  - depthwise:  groups == in_channels == out_channels: a direct loop per channel plane,
 *                since a GEMM with M = 1 per group wastes the BLAS.
 *  - im2col+gemm: everything else, per sample and per group, through cblas_sgemm.
 *  - batched:    small outputs (under CONV_MIN_GEMM_N pixels) at batch > 1: several
 *                samples are unfolded side by side so one GEMM gets a useful width
 *                (ResNet's 7x7 maps give N = 49 per sample), then scattered to NCHW.
 *  - winograd:   3x3 stride 1, one group: F(2x2, 3x3) and F(4x4, 3x3) (winograd_cpu.c),
 *                in chunks of tiles per thread; search candidates only (never the rule).
 *  - chunked:    im2col + GEMM per thread on chunks of output rows (of one group of one
 *                sample) whose unfolded input stays in its L2, OpenBLAS on one thread;
 *                a search candidate only.
 *  - tiles, tiles^T: the same chunks through our register-tiled kernel (pgemm_cpu.c)
 *                instead of OpenBLAS, the weights packed for it once at setup, pixels
 *                (tiles) or output channels (tiles^T, small maps) along the vectors.
 *  - direct, direct^T: the kernel on a zero-padded copy of the input, nothing unfolded
 *                (horizontal stride 1 or 2). Both pairs are search candidates only, where
 *                the CPU has AVX2 or AVX-512 (the plain C kernel is for tests). */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

typedef enum {
    CONV_GEMM_1X1,
    CONV_DEPTHWISE,
    CONV_IM2COL,
    CONV_BATCHED,
    CONV_WINOGRAD,
    CONV_CHUNKED,
    CONV_TILES,  /* im2col + the register-tiled kernel, pixels along the vectors */
    CONV_TILES_T, /* the same with output channels along the vectors */
    CONV_DIRECT,  /* the kernel on the zero-padded input itself, pixels along the vectors */
    CONV_DIRECT_T, /* the same with output channels along the vectors */
    CONV_WINOGRAD4 /* Winograd F(4x4, 3x3); CONV_WINOGRAD is F(2x2, 3x3) */
} conv_path;

typedef struct conv_state {
    conv_path path;
    int64_t samples;  /* batched: samples per GEMM; winograd(4): KiB of tiles per chunk; chunked: output rows
                         per chunk */
    float *col;       /* im2col workspace: K x samples*OH*OW floats (chunked: K x rows*OW per thread) */
    float *tmp;       /* batched: GEMM result, OC/groups x samples*OH*OW */
    cpu_winograd *wg; /* winograd: transformed weights and workspace */
    /* tiles: the kernel, the weights packed for it (per group, panels of g->mr output
     * channels, k-major: [panel][K][mr]; tiles^T: panels of g->nr, [panel][K][nr]), the
     * k block and each thread's workspace (col floats apart) */
    const cpu_pgemm *g;
    float *wp;
    int64_t wp_floats;
    int64_t kc, ws_floats;
    /* direct^T: the padded input's rows and columns (s->col holds the padded batch), the
     * weights in panels of g->nr channels tap by tap ([panel][tap][C/groups][nr]) and
     * each tap's offset in a padded plane */
    int64_t hp, wpad;
    int64_t *taps;
} conv_state;

/* GEMM width below which samples are batched, and the most workspace that may take.
 * A GEMM still narrower than CONV_TRANSPOSE_N is computed transposed (pixels x
 * channels): OpenBLAS ran M=512 N=49 K=4608 at ~125 GFLOP/s and its transpose at ~150
 * on the 2-core EPYC VM, while from N=196 up both orders were within noise. */
#define CONV_MIN_GEMM_N 1024
#define CONV_TRANSPOSE_N 128
#define CONV_MAX_BATCHED_BYTES ((int64_t)64 << 20)
#define CONV_MAX_WINOGRAD_BYTES ((int64_t)256 << 20)
/* Winograd's chunk sizes the search tries, KiB of transformed tiles per thread: about a
 * core's L2, and larger chunks for wide layers on small maps (512 channels at 7x7 get
 * 16 tiles per 1 MiB chunk, a narrow GEMM); 0, the whole batch in one chunk with the 16
 * or 36 GEMMs split between the threads, is tried too. */
static const int64_t winograd_chunks_kib[] = {1024, 4096, 16384};
/* The tiled paths' k block: a 14x32 tile's operands of one block, 256 x (14 + 32)
 * floats, stay in L1. */
#define CONV_TILES_KC 256
/* The chunked path's unfolded input per thread, KiB: candidates. */
static const int64_t chunked_kib[] = {512, 2048};


/* Outputs per Winograd tile side of a Winograd path; 0 for the other paths. */
static int winograd_m(conv_path p)
{
    return p == CONV_WINOGRAD4 ? 4 : p == CONV_WINOGRAD ? 2 : 0;
}

static void conv_free(void *env, void *state)
{
    (void)env;
    conv_state *s = state;
    if (s)
        free(s->col), free(s->tmp), free(s->wp), free(s->taps), cpu_winograd_free(s->wg);
    free(s);
}

/* One algorithm: a path and, for the batched one, the samples per GEMM (Winograd: its
 * chunk size in KiB). */
typedef struct conv_algo {
    conv_path path;
    int64_t samples;
} conv_algo;

static bool is_pointwise(const layer_params *p)
{
    return p->kernel[0] == 1 && p->kernel[1] == 1 && p->stride[0] == 1 && p->stride[1] == 1 && p->padding[0] == 0 &&
           p->padding[1] == 0;
}

static int64_t conv_k(const layer *l)
{
    return (l->in.d[1] / l->p.groups) * l->p.kernel[0] * l->p.kernel[1];
}

/* Output rows per chunk for about kib KiB of unfolded input (at least one row). */
static int64_t chunk_rows(const layer *l, int64_t kib)
{
    int64_t rows = (kib << 10) / (4 * conv_k(l) * l->out.d[3]);
    return rows < 1 ? 1 : rows > l->out.d[2] ? l->out.d[2] : rows;
}

static int64_t batched_bytes(const layer *l, int64_t samples)
{
    return 4 * (conv_k(l) + l->p.out_channels / l->p.groups) * samples * l->out.d[2] * l->out.d[3];
}

/* The tiled paths. A chunk is output rows [y0, y1) of one group of one sample, cols =
 * (y1 - y0) * OW pixels. tiles: its unfolded input row-major, K rows of ldb floats
 * (cols rounded up to the kernel's nr, zeros after cols), the weights broadcast from
 * their panels and the output written in place, a tile at a time. tiles^T: the
 * unfolded input packed in panels of the kernel's mr pixels ([panel][K][mr]) to be
 * broadcast, the weights' panels along the vectors, the product into a pixels x
 * channels buffer that is transposed into the output. K is cut into blocks of s->kc so
 * that a tile's two operands stay in L1 (the later blocks accumulate). */
static int64_t tiles_panels(const conv_state *s, const layer *l)
{
    int64_t ocg = l->p.out_channels / l->p.groups, w = s->path == CONV_TILES ? s->g->mr : s->g->nr;
    return (ocg + w - 1) / w;
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* One thread's workspace for chunks of `rows` output rows: the unfolded input, and for
 * tiles^T a row of it and the product. */
static int64_t tiles_ws_floats(const layer *l, const cpu_pgemm *g, conv_path path, int64_t rows)
{
    int64_t cols = rows * l->out.d[3], k = conv_k(l);
    if (path == CONV_TILES)
        return k * round_up(cols, g->nr);
    int64_t np = (l->p.out_channels / l->p.groups + g->nr - 1) / g->nr;
    return k * round_up(cols, g->mr) + cols + cols * np * g->nr;
}

/* The weights in the kernel's panels, zeros past the group's last output channel. */
static void tiles_pack_weights(const layer *l, conv_state *s, const float *w)
{
    int64_t k = conv_k(l), ocg = l->p.out_channels / l->p.groups, np = tiles_panels(s, l);
    int64_t pw = s->path == CONV_TILES ? s->g->mr : s->g->nr;
    for (int64_t gi = 0; gi < l->p.groups; gi++)
        for (int64_t ip = 0; ip < np; ip++)
            for (int64_t r = 0; r < k; r++)
                for (int64_t i = 0; i < pw; i++) {
                    int64_t o = ip * pw + i;
                    s->wp[((gi * np + ip) * k + r) * pw + i] = o < ocg ? w[(gi * ocg + o) * k + r] : 0.0f;
                }
}

/* direct, direct^T: the kernel on a zero-padded copy of the input (the size of the
 * input: nothing unfolded), every tap of the window and every input channel of the
 * group summed in registers, the weights packed tap by tap at setup ([panel][tap][C/g]
 * [panel width]). A tile is a run of one output row's pixels by a panel of output
 * channels. direct: pixels along the vectors (nr of them), read straight from the
 * padded rows (for stride 2 each padded row keeps its even columns, then its odd ones,
 * so a tap's pixels are contiguous), the channels broadcast from the weights, and the
 * tile stored into the NCHW output as it is. direct^T: channels along the vectors, the
 * pixels (up to mr, the stride apart) broadcast from the padded rows, each tile
 * transposed into the output: for maps too narrow to fill a vector of pixels. */
static bool direct_applies(const layer *l)
{
    return l->p.stride[1] >= 1 && l->p.stride[1] <= 2;
}

/* Output channels per panel and pixels per tile. direct spreads the group's channels
 * evenly over as few panels of at most mr as it takes (64 channels: 5 panels of 13). */
static void direct_shape(const layer *l, const conv_state *s, int64_t *pw, int64_t *tw)
{
    int64_t ocg = l->p.out_channels / l->p.groups, mr = s->g->mr;
    if (s->path == CONV_DIRECT_T) {
        *pw = s->g->nr, *tw = mr;
        return;
    }
    int64_t panels = (ocg + mr - 1) / mr;
    *pw = (ocg + panels - 1) / panels, *tw = s->g->nr;
}

/* Units of work: a channel panel of a group over a run of tiles; where there are few
 * panels, the tiles are split into a run per thread. *run: tiles per run. */
static int64_t direct_units(const layer *l, const conv_state *s, int threads, int64_t *run)
{
    int64_t pw, tw;
    direct_shape(l, s, &pw, &tw);
    int64_t ocg = l->p.out_channels / l->p.groups, np = (ocg + pw - 1) / pw;
    int64_t tiles = l->out.d[0] * l->out.d[2] * ((l->out.d[3] + tw - 1) / tw);
    int64_t panels = l->p.groups * np, split = panels >= 4 * threads ? 1 : threads;
    *run = (tiles + split - 1) / split;
    return panels * ((tiles + *run - 1) / *run);
}

/* The padded plane's row length: direct at stride 2 rounds it up to even (two halves). */
static int64_t direct_row(const conv_state *s, const layer *l)
{
    return s->path == CONV_DIRECT && l->p.stride[1] == 2 ? round_up(s->wpad, 2) : s->wpad;
}

static bool direct_new(const layer *l, conv_state *s, const float *w, int64_t *workspace_bytes)
{
    const layer_params *p = &l->p;
    int64_t kh = p->kernel[0], kw = p->kernel[1], taps = kh * kw, cg = l->in.d[1] / p->groups;
    int64_t ocg = p->out_channels / p->groups, k = conv_k(l), pw, tw;
    s->g = cpu_pgemm_get();
    direct_shape(l, s, &pw, &tw);
    int64_t np = (ocg + pw - 1) / pw;
    /* rows and columns reaching the last output's window, and at least the input's */
    int64_t hneed = (l->out.d[2] - 1) * p->stride[0] + (kh - 1) * p->dilation[0] + 1;
    int64_t wneed = (l->out.d[3] - 1) * p->stride[1] + (kw - 1) * p->dilation[1] + 1;
    s->hp = l->in.d[2] + p->padding[0] > hneed ? l->in.d[2] + p->padding[0] : hneed;
    s->wpad = l->in.d[3] + p->padding[1] > wneed ? l->in.d[3] + p->padding[1] : wneed;
    int64_t row = direct_row(s, l);
    /* direct's vectors may read past a plane's last row: the slack keeps them inside */
    int64_t pad_floats = l->in.d[0] * l->in.d[1] * s->hp * row + s->g->nr, wp_floats = p->groups * np * taps * cg * pw;
    *workspace_bytes = 4 * (pad_floats + wp_floats);
    s->taps = malloc((size_t)taps * sizeof *s->taps);
    s->wp_floats = wp_floats;
    if (!s->taps || !(s->wp = bench_alloc_floats(wp_floats)) || !(s->col = bench_alloc_floats(pad_floats)))
        return false;
    memset(s->col, 0, (size_t)pad_floats * sizeof *s->col);
    for (int64_t t = 0; t < taps; t++) { /* tap t's offset in a padded plane */
        int64_t dx = (t % kw) * p->dilation[1];
        s->taps[t] = (t / kw) * p->dilation[0] * row +
                     (s->path == CONV_DIRECT && p->stride[1] == 2 ? (dx % 2) * (row / 2) + dx / 2 : dx);
    }
    for (int64_t gi = 0; gi < p->groups; gi++)
        for (int64_t ip = 0; ip < np; ip++)
            for (int64_t t = 0; t < taps; t++)
                for (int64_t ci = 0; ci < cg; ci++)
                    for (int64_t j = 0; j < pw; j++) {
                        int64_t o = ip * pw + j;
                        s->wp[(((gi * np + ip) * taps + t) * cg + ci) * pw + j] =
                            o < ocg ? w[(gi * ocg + o) * k + ci * taps + t] : 0.0f;
                    }
    return true;
}

/* The rule (--algo heuristic, and the first candidate of the search). */
static conv_algo conv_rule(const layer *l)
{
    const layer_params *p = &l->p;
    int64_t c = l->in.d[1], ohw = l->out.d[2] * l->out.d[3];
    if (p->groups == c && p->out_channels == c && c > 1)
        return (conv_algo){CONV_DEPTHWISE, 1};
    if ((l->in.d[0] > 1 && ohw < CONV_MIN_GEMM_N) || ohw < CONV_TRANSPOSE_N) {
        int64_t samples = (CONV_MIN_GEMM_N + ohw - 1) / ohw;
        if (samples > l->in.d[0])
            samples = l->in.d[0];
        while (samples > 1 && batched_bytes(l, samples) > CONV_MAX_BATCHED_BYTES)
            samples--;
        return (conv_algo){CONV_BATCHED, samples};
    }
    return (conv_algo){is_pointwise(p) ? CONV_GEMM_1X1 : CONV_IM2COL, 1};
}

/* A state with its workspace (w: the weights, which Winograd transforms), or NULL when
 * out of memory. */
static conv_state *conv_state_new(const layer *l, conv_algo a, const float *w, int64_t *workspace_bytes)
{
    conv_state *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    int64_t ohw = l->out.d[2] * l->out.d[3], ocg = l->p.out_channels / l->p.groups;
    s->path = a.path;
    s->samples = a.samples;
    *workspace_bytes = 0;
    if (s->path == CONV_IM2COL || s->path == CONV_BATCHED) {
        s->col = bench_alloc_floats(conv_k(l) * s->samples * ohw);
        s->tmp = s->path == CONV_BATCHED ? bench_alloc_floats(ocg * s->samples * ohw) : NULL;
        *workspace_bytes = 4 * (conv_k(l) + (s->tmp ? ocg : 0)) * s->samples * ohw;
        if (!s->col || (s->path == CONV_BATCHED && !s->tmp)) {
            conv_free(NULL, s);
            return NULL;
        }
    }
    if (s->path == CONV_CHUNKED) {
        int64_t floats = (int64_t)omp_get_max_threads() * conv_k(l) * s->samples * l->out.d[3];
        *workspace_bytes = 4 * floats;
        if (!(s->col = bench_alloc_floats(floats))) {
            conv_free(NULL, s);
            return NULL;
        }
    }
    if (s->path == CONV_TILES || s->path == CONV_TILES_T) {
        s->g = cpu_pgemm_get();
        s->kc = CONV_TILES_KC;
        int64_t threads = omp_get_max_threads();
        int64_t wp_floats = l->p.groups * tiles_panels(s, l) * conv_k(l) * (s->path == CONV_TILES ? s->g->mr : s->g->nr);
        s->ws_floats = round_up(tiles_ws_floats(l, s->g, s->path, s->samples), 16);
        *workspace_bytes = 4 * (wp_floats + threads * s->ws_floats);
        s->wp_floats = wp_floats;
        if (!(s->wp = bench_alloc_floats(wp_floats)) || !(s->col = bench_alloc_floats(threads * s->ws_floats))) {
            conv_free(NULL, s);
            return NULL;
        }
        tiles_pack_weights(l, s, w);
    }
    if ((s->path == CONV_DIRECT || s->path == CONV_DIRECT_T) && !direct_new(l, s, w, workspace_bytes)) {
        conv_free(NULL, s);
        return NULL;
    }
    if (winograd_m(s->path)) {
        *workspace_bytes = cpu_winograd_bytes(l, winograd_m(s->path), s->samples << 10);
        if (!(s->wg = cpu_winograd_create(l, w, winograd_m(s->path), s->samples << 10))) {
            conv_free(NULL, s);
            return NULL;
        }
    }
    return s;
}

/* Every algorithm that applies, the rule's first: samples one at a time (the direct
 * 1x1 GEMM or im2col), and for maps small enough that a GEMM per sample is narrow,
 * 1, 2, 4, ... samples per GEMM up to the batch, within the workspace limit. */
#define CONV_MAX_CANDIDATES 24
#define CONV_SEARCH_MAX_N 4096

static void add_candidate(conv_algo *c, int *n, conv_algo a)
{
    for (int j = 0; j < *n; j++)
        if (c[j].path == a.path && c[j].samples == a.samples)
            return;
    if (*n < CONV_MAX_CANDIDATES)
        c[(*n)++] = a;
}

static int conv_candidates(const layer *l, conv_algo *c)
{
    int n = 0;
    add_candidate(c, &n, conv_rule(l));
    if (c[0].path == CONV_DEPTHWISE)
        return n;
    int64_t batch = l->in.d[0], ohw = l->out.d[2] * l->out.d[3];
    add_candidate(c, &n, (conv_algo){is_pointwise(&l->p) ? CONV_GEMM_1X1 : CONV_IM2COL, 1});
    /* chunked im2col, at each size that gives a different chunk */
    for (size_t k = 0; !is_pointwise(&l->p) && k < sizeof chunked_kib / sizeof *chunked_kib; k++)
        add_candidate(c, &n, (conv_algo){CONV_CHUNKED, chunk_rows(l, chunked_kib[k])});
    /* Winograd F(2x2) and F(4x4), at each chunk size that gives a different chunk */
    static const conv_path winograds[] = {CONV_WINOGRAD, CONV_WINOGRAD4};
    for (size_t i = 0; cpu_winograd_applies(l) && i < sizeof winograds / sizeof *winograds; i++) {
        conv_path wp = winograds[i];
        int m = winograd_m(wp);
        for (size_t k = 0; k < sizeof winograd_chunks_kib / sizeof *winograd_chunks_kib; k++) {
            int64_t kib = winograd_chunks_kib[k];
            if (k > 0 &&
                cpu_winograd_tiles(l, m, kib << 10) == cpu_winograd_tiles(l, m, winograd_chunks_kib[k - 1] << 10))
                break;
            if (cpu_winograd_bytes(l, m, kib << 10) <= CONV_MAX_WINOGRAD_BYTES)
                add_candidate(c, &n, (conv_algo){wp, kib});
        }
        if (cpu_winograd_bytes(l, m, 0) <= CONV_MAX_WINOGRAD_BYTES)
            add_candidate(c, &n, (conv_algo){wp, 0});
    }
    /* the tiled kernel, where it has vector registers: pixels along the vectors in
     * L2-sized chunks, or channels along them (small maps) */
    if (strcmp(cpu_pgemm_get()->isa, "generic") != 0) {
        for (size_t k = 0; k < sizeof chunked_kib / sizeof *chunked_kib; k++)
            add_candidate(c, &n, (conv_algo){CONV_TILES, chunk_rows(l, chunked_kib[k])});
        add_candidate(c, &n, (conv_algo){CONV_TILES_T, l->out.d[2]});
        add_candidate(c, &n, (conv_algo){CONV_TILES_T, chunk_rows(l, chunked_kib[0])});
        if (direct_applies(l)) {
            add_candidate(c, &n, (conv_algo){CONV_DIRECT, 0});
            add_candidate(c, &n, (conv_algo){CONV_DIRECT_T, 0});
        }
    }
    for (int64_t k = 1; ohw < CONV_SEARCH_MAX_N; k *= 2) {
        int64_t samples = k < batch ? k : batch;
        if (batched_bytes(l, samples) > CONV_MAX_BATCHED_BYTES)
            break;
        if (samples > 1 || ohw < CONV_TRANSPOSE_N) /* one sample untransposed is im2col plus a copy */
            add_candidate(c, &n, (conv_algo){CONV_BATCHED, samples});
        if (samples == batch || n == CONV_MAX_CANDIDATES)
            break;
    }
    return n;
}

static void conv_run(void *env, const layer *l, void *state, const void *const *ins, const void *w, void *out);

/* The bytes of weights a candidate reads on every call: its packed or transformed copy,
 * else the layer's own. */
static int64_t conv_weight_bytes(const layer *l, const conv_state *s)
{
    return s->wg ? cpu_winograd_weights(s->wg).bytes : s->wp ? s->wp_floats * 4 : l->n_weight_floats * 4;
}

/* The conditions a forward leaves a convolution in (cpu_forward_conditions): its weights
 * as the candidate reads them (the layer's, and its packed or transformed copy) and its
 * output out of the caches, its input just read. At batch 1 a forward reads each
 * weight once, from memory: Winograd's transformed weights (4x the layer's for F(4x4))
 * cost what a warm loop never shows. */
static void conv_forward_conditions(const layer *l, const conv_state *s, const float *w, const float *in, float *out)
{
    cpu_span cold[4] = {{w, l->n_weight_floats * (int64_t)sizeof *w},
                        {s->wp, s->wp_floats * (int64_t)sizeof *s->wp},
                        {out, shape_numel(&l->out) * (int64_t)sizeof *out}};
    int n = 3;
    if (s->wg)
        cold[n++] = cpu_winograd_weights(s->wg);
    cpu_forward_conditions(cold, n, in, shape_numel(&l->in) * (int64_t)sizeof *in);
}

/* The best of up to three timed runs after one untimed one, within about 50 ms; each in
 * the forward's conditions where forward. */
static double conv_time(const layer *l, conv_state *s, const float *in, const float *w, float *out, bool forward)
{
    const float *ins[1] = {in};
    conv_run(NULL, l, s, (const void *const *)ins, w, out);
    double best = 1e30, spent = 0.0;
    for (int r = 0; r < 3 && spent < 0.05; r++) {
        if (forward)
            conv_forward_conditions(l, s, w, in, out);
        double t0 = bench_now();
        conv_run(NULL, l, s, (const void *const *)ins, w, out);
        double dt = bench_now() - t0;
        spent += dt;
        best = dt < best ? dt : best;
    }
    return best;
}

/* LAYERBENCH_CPU_CONV_ALGO forces one algorithm where it applies (tests, experiments):
 * "im2col", "gemm-1x1", "winograd" (F(2x2), chunks of 1 MiB), "winograd:KIB" (0: the
 * whole batch, GEMMs split), "winograd4" and "winograd4:KIB" (F(4x4)), "chunked:ROWS",
 * "batched:N", "tiles:ROWS", "tiles^T:ROWS", "direct" or "direct^T". */
bool cpu_conv_algo_env_ok(const char *e)
{
    static const char *const plain[] = {"im2col", "gemm-1x1", "winograd", "winograd4", "direct", "direct^T", NULL};
    static const struct { const char *prefix; long long min; } counted[] = {
        {"winograd:", 0}, {"winograd4:", 0}, {"tiles:", 1}, {"tiles^T:", 1}, {"chunked:", 1}, {"batched:", 1}};
    if (!e || !*e)
        return true;
    for (int i = 0; plain[i]; i++)
        if (strcmp(e, plain[i]) == 0)
            return true;
    for (size_t i = 0; i < sizeof counted / sizeof *counted; i++) {
        size_t n = strlen(counted[i].prefix);
        char *end;
        if (strncmp(e, counted[i].prefix, n) == 0 && e[n] >= '0' && e[n] <= '9')
            return strtoll(e + n, &end, 10) >= counted[i].min && !*end;
    }
    return false;
}

static bool conv_forced(const layer *l, conv_algo *a)
{
    const char *e = getenv("LAYERBENCH_CPU_CONV_ALGO");
    if (!e || !*e || conv_rule(l).path == CONV_DEPTHWISE)
        return false;
    long long n;
    if (strcmp(e, "im2col") == 0)
        *a = (conv_algo){CONV_IM2COL, 1};
    else if (strcmp(e, "gemm-1x1") == 0 && is_pointwise(&l->p))
        *a = (conv_algo){CONV_GEMM_1X1, 1};
    else if (strcmp(e, "winograd") == 0 && cpu_winograd_applies(l))
        *a = (conv_algo){CONV_WINOGRAD, winograd_chunks_kib[0]};
    else if (sscanf(e, "winograd:%lld", &n) == 1 && n >= 0 && cpu_winograd_applies(l))
        *a = (conv_algo){CONV_WINOGRAD, (int64_t)n};
    else if (strcmp(e, "winograd4") == 0 && cpu_winograd_applies(l))
        *a = (conv_algo){CONV_WINOGRAD4, winograd_chunks_kib[0]};
    else if (sscanf(e, "winograd4:%lld", &n) == 1 && n >= 0 && cpu_winograd_applies(l))
        *a = (conv_algo){CONV_WINOGRAD4, (int64_t)n};
    else if (strcmp(e, "direct") == 0 && direct_applies(l))
        *a = (conv_algo){CONV_DIRECT, 0};
    else if (strcmp(e, "direct^T") == 0 && direct_applies(l))
        *a = (conv_algo){CONV_DIRECT_T, 0};
    else if (sscanf(e, "tiles:%lld", &n) == 1 && n >= 1)
        *a = (conv_algo){CONV_TILES, n < l->out.d[2] ? (int64_t)n : l->out.d[2]};
    else if (sscanf(e, "tiles^T:%lld", &n) == 1 && n >= 1)
        *a = (conv_algo){CONV_TILES_T, n < l->out.d[2] ? (int64_t)n : l->out.d[2]};
    else if (sscanf(e, "chunked:%lld", &n) == 1 && n >= 1)
        *a = (conv_algo){CONV_CHUNKED, n < l->out.d[2] ? (int64_t)n : l->out.d[2]};
    else if (sscanf(e, "batched:%lld", &n) == 1 && n >= 1)
        *a = (conv_algo){CONV_BATCHED, n < l->in.d[0] ? (int64_t)n : l->in.d[0]};
    else
        return false;
    return true;
}

/* How many of the fastest candidates the search times again, interleaved. */
#define CONV_FINALISTS 4
/* Finalists within CPU_SEARCH_TIE of the fastest are a tie, which the earlier candidate
 * (the rule's first, then the simpler paths) wins, or for the forward the one reading
 * the fewest weight bytes: noise cannot flip a tie between two runs. */

/* The finalists as cpu_search_rounds runs them. */
typedef struct conv_finalists {
    const layer *l;
    conv_state **st;
    const float *w, *in;
    float *out;
} conv_finalists;

static void finalist_conditions(void *user, int k)
{
    conv_finalists *f = user;
    conv_forward_conditions(f->l, f->st[k], f->w, f->in, f->out);
}

static void finalist_run(void *user, int k)
{
    conv_finalists *f = user;
    const float *ins[1] = {f->in};
    conv_run(NULL, f->l, f->st[k], (const void *const *)ins, f->w, f->out);
}

/* The fastest candidate on scratch data with the real weights: its index, or -1 when
 * out of memory. Two rounds: each candidate alone (the best of a few runs), then the
 * CONV_FINALISTS fastest again, one run of each in turn, each keeping its best. The
 * first round alone let this VM's slow phases, seconds long, decide: a search once took
 * a path 25% slower than the one it passed over for ResNet-18's 512-channel layers,
 * because the better one was timed during such a phase. Interleaved, a phase slows
 * every finalist alike. The finalists are timed in rounds (cpu_search_rounds, at most
 * 0.5 s) until the fastest is either clearly ahead of or tied with the next, so that a
 * choice between near-equal candidates does not flip on noise between runs. */
static int conv_search(const layer *l, const float *w, const conv_algo *cand, int n, bool forward)
{
    int64_t in_n = shape_numel(&l->in), out_n = shape_numel(&l->out);
    float *in = bench_alloc_floats(in_n), *out = bench_alloc_floats(out_n);
    int best = -1;
    double t[CONV_MAX_CANDIDATES];
    const char *env = getenv("LAYERBENCH_CPU_SEARCH_LOG");
    bool log = env && *env && strcmp(env, "0") != 0;
    if (in && out) {
        for (int64_t i = 0; i < in_n; i++)
            in[i] = (float)(i % 17) * 0.0625f - 0.5f;
        for (int i = 0; i < n; i++) {
            int64_t ws;
            conv_state *s = conv_state_new(l, cand[i], w, &ws);
            t[i] = 1e30;
            if (!s)
                continue;
            t[i] = conv_time(l, s, in, w, out, forward);
            conv_free(NULL, s);
            if (log)
                bench_diag("cpu search %s: candidate %d (path %d, %lld): %.1f us\n", l->name, i, cand[i].path,
                           (long long)cand[i].samples, 1e6 * t[i]);
            if (best < 0 || t[i] < t[best])
                best = i;
        }
    }
    /* the finalists, fastest first */
    int fin[CONV_FINALISTS], nf = 0;
    bool taken[CONV_MAX_CANDIDATES] = {false};
    while (best >= 0 && nf < CONV_FINALISTS) {
        int k = -1;
        for (int i = 0; i < n; i++)
            if (!taken[i] && t[i] < 1e30 && (k < 0 || t[i] < t[k]))
                k = i;
        if (k < 0)
            break;
        taken[k] = true, fin[nf++] = k;
    }
    if (nf > 1) {
        conv_state *st[CONV_FINALISTS] = {NULL};
        double again[CONV_FINALISTS] = {1e30, 1e30, 1e30, 1e30};
        const float *ins[1] = {in};
        bool all = true;
        for (int f = 0; f < nf && all; f++) {
            int64_t ws;
            st[f] = conv_state_new(l, cand[fin[f]], w, &ws);
            all = st[f] != NULL;
            if (all)
                conv_run(NULL, l, st[f], (const void *const *)ins, w, out); /* warm, untimed */
        }
        conv_finalists fs = {l, st, w, in, out};
        int bf = all ? cpu_search_rounds(nf, 0.5, forward ? finalist_conditions : NULL, finalist_run, &fs, again) : 0;
        /* a tie: the earlier candidate; for the forward, the one that reads the fewest
         * weight bytes (from memory, in a forward; the cold calls show only part of what
         * other layers' traffic adds to it) */
        int64_t wb[CONV_FINALISTS];
        for (int f = 0; all && f < nf; f++)
            wb[f] = conv_weight_bytes(l, st[f]);
        int tied = bf;
        for (int f = 0; all && f < nf; f++)
            if (again[f] <= again[bf] * (1 + CPU_SEARCH_TIE) &&
                (forward ? wb[f] < wb[tied] || (wb[f] == wb[tied] && fin[f] < fin[tied]) : fin[f] < fin[tied]))
                tied = f;
        bf = tied;
        if (all) /* else too little memory for all at once: the first round decides */
            best = fin[bf];
        for (int f = 0; log && f < nf; f++)
            bench_diag("cpu search %s: finalist %d again: %.1f us%s\n", l->name, fin[f], 1e6 * again[f],
                       fin[f] == best ? " (kept)" : "");
        for (int f = 0; f < nf; f++)
            if (st[f])
                conv_free(NULL, st[f]);
    }
    free(in), free(out);
    return best;
}

static bench_status conv_setup(void *env, const layer *l, const void *w, void **state, char *impl,
                               size_t impl_len, int64_t *workspace_bytes)
{
    cpu_choices *search = cpu_env_choices(env);
    conv_algo cand[CONV_MAX_CANDIDATES];
    int n = conv_candidates(l, cand);
    conv_algo chosen = cand[0];
    const cpu_choice *known = search ? cpu_choice_find(search, l) : NULL;
    if (known && known->given) { /* from --algo-cache: still one of this layer's candidates? */
        bool applies = known->algo[2] == n;
        for (int i = 0; applies && i < n && !(cand[i].path == known->algo[0] && cand[i].samples == known->algo[1]); i++)
            applies = i + 1 < n;
        if (!applies)
            search->stale++, known = NULL;
    }
    if (conv_forced(l, &chosen)) {
        n = 1;
    } else if (known) {
        chosen = (conv_algo){(conv_path)known->algo[0], known->algo[1]};
        n = (int)known->algo[2];
    } else if (search && n > 1) {
        int best = conv_search(l, w, cand, n, search->forward);
        if (best < 0)
            return BENCH_ERR_NOMEM;
        chosen = cand[best];
        cpu_choice_add(search, l, (const int64_t[3]){chosen.path, chosen.samples, n});
    }
    conv_state *s = conv_state_new(l, chosen, w, workspace_bytes);
    if (!s)
        return BENCH_ERR_NOMEM;
    static const char *names[] = {"gemm-1x1", "depthwise-direct", "im2col+sgemm", "im2col+sgemm",
                                  "winograd F2x2/3x3", "im2col+sgemm per thread", "im2col+tiles", "im2col+tiles^T",
                                  "direct tiles", "direct tiles^T", "winograd F4x4/3x3"};
    int64_t ohw = l->out.d[2] * l->out.d[3];
    int at = s->path == CONV_BATCHED
                 ? snprintf(impl, impl_len, "im2col+sgemm%s x%lld sample%s", s->samples * ohw < CONV_TRANSPOSE_N ? "^T" : "",
                            (long long)s->samples, s->samples > 1 ? "s" : "")
             : s->path == CONV_CHUNKED
                 ? snprintf(impl, impl_len, "%s x%lld-row chunks", names[s->path], (long long)s->samples)
             : s->path == CONV_TILES || s->path == CONV_TILES_T
                 ? snprintf(impl, impl_len, "%s %s %dx%d x%lld-row chunks", names[s->path], s->g->isa, s->g->mr,
                            s->g->nr, (long long)s->samples)
             : s->path == CONV_DIRECT || s->path == CONV_DIRECT_T
                 ? snprintf(impl, impl_len, "%s %s %dx%d", names[s->path], s->g->isa, s->g->mr, s->g->nr)
             : winograd_m(s->path) && s->samples == 0
                 ? snprintf(impl, impl_len, "%s whole batch with GEMMs over threads", names[s->path])
             : winograd_m(s->path)
                 ? snprintf(impl, impl_len, "%s x%lld-tile chunks", names[s->path],
                            (long long)cpu_winograd_tiles(l, winograd_m(s->path), s->samples << 10))
                 : snprintf(impl, impl_len, "%s", names[s->path]);
    if (search && n > 1 && at >= 0 && (size_t)at < impl_len)
        snprintf(impl + at, impl_len - (size_t)at, " (fastest of %d %s)", n,
                 search->forward ? "in the forward's conditions" : "timed warm alone");
    *state = s;
    return BENCH_OK;
}

/* Row r (ci, i, j) of one group's unfolding, output rows [y0, y1): the input pixels
 * that kernel tap (i, j) of channel ci meets at each output position, zeros where it
 * falls in padding, into dst ((y1 - y0) * OW floats). */
CPU_ISA_CLONES static void im2col_row(const layer *l, const float *in, float *dst, int64_t r, int64_t y0, int64_t y1)
{
    const layer_params *p = &l->p;
    int64_t h = l->in.d[2], w = l->in.d[3];
    int64_t kh = p->kernel[0], kw = p->kernel[1], ow = l->out.d[3];
    int64_t sh = p->stride[0], sw = p->stride[1], ph = p->padding[0], pw = p->padding[1];
    int64_t dh = p->dilation[0], dw = p->dilation[1];
    int64_t ci = r / (kh * kw), i = (r / kw) % kh, j = r % kw;
    const float *src = in + ci * h * w;
    /* output columns x whose input column x*sw - pw + j*dw lies inside [0, w) */
    int64_t off = j * dw - pw;
    int64_t x0 = off >= 0 ? 0 : (-off + sw - 1) / sw;
    int64_t x1 = w - off <= 0 ? 0 : (w - off + sw - 1) / sw;
    if (x1 > ow)
        x1 = ow;
    if (x0 > x1)
        x0 = x1;
    for (int64_t y = y0; y < y1; y++) {
        int64_t iy = y * sh - ph + i * dh;
        float *d = dst + (y - y0) * ow;
        if (iy < 0 || iy >= h) {
            memset(d, 0, (size_t)ow * sizeof *d);
            continue;
        }
        const float *s = src + iy * w + off;
        for (int64_t x = 0; x < x0; x++)
            d[x] = 0.0f;
        if (sw == 1)
            memcpy(d + x0, s + x0, (size_t)(x1 - x0) * sizeof *d);
        else
            for (int64_t x = x0; x < x1; x++)
                d[x] = s[x * sw];
        for (int64_t x = x1; x < ow; x++)
            d[x] = 0.0f;
    }
}

/* Unfolds one group of one sample: row r of col (rows ld floats apart) is im2col_row's
 * over every output row. */
static void im2col(const layer *l, const float *in, float *col, int64_t ld)
{
    int64_t rows = conv_k(l), oh = l->out.d[2], ow = l->out.d[3];
    CPU_OMP_IF(rows * oh * ow > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t r = 0; r < rows; r++)
            im2col_row(l, in, col + r * ld, r, 0, oh););
}

static void fill_bias(float *out, const float *bias, int64_t channels, int64_t plane)
{
    CPU_OMP_IF(channels * plane > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
        for (int64_t c = 0; c < channels; c++)
            for (int64_t i = 0; i < plane; i++)
                out[c * plane + i] = bias[c];);
}

static void depthwise(const layer *l, const float *in, const float *w, const float *bias, float *out)
{
    const layer_params *p = &l->p;
    int64_t planes = l->in.d[0] * l->in.d[1], c = l->in.d[1], h = l->in.d[2], wd = l->in.d[3];
    int64_t kh = p->kernel[0], kw = p->kernel[1], oh = l->out.d[2], ow = l->out.d[3];
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *src = in + pl * h * wd, *k = w + (pl % c) * kh * kw;
        float *dst = out + pl * oh * ow;
        float b = bias ? bias[pl % c] : 0.0f;
        for (int64_t y = 0; y < oh; y++)
            for (int64_t x = 0; x < ow; x++) {
                float acc = b;
                for (int64_t i = 0; i < kh; i++) {
                    int64_t iy = y * p->stride[0] - p->padding[0] + i * p->dilation[0];
                    if (iy < 0 || iy >= h)
                        continue;
                    for (int64_t j = 0; j < kw; j++) {
                        int64_t ix = x * p->stride[1] - p->padding[1] + j * p->dilation[1];
                        if (ix >= 0 && ix < wd)
                            acc += src[iy * wd + ix] * k[i * kw + j];
                    }
                }
                dst[y * ow + x] = acc;
            }
    }
}

/* Several samples per GEMM: unfold them side by side (sample j in columns
 * [j*OHW, (j+1)*OHW)), multiply once, then copy each sample's block (plus bias) out.
 * A product still narrower than CONV_TRANSPOSE_N is computed as col^T W^T, giving
 * tmp[pixel][channel], and transposed back while copying. */
static void batched(const layer *l, const conv_state *s, const float *in, const float *w, const float *bias,
                    float *out)
{
    const layer_params *p = &l->p;
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3];
    int64_t oc = l->out.d[1], ohw = l->out.d[2] * l->out.d[3];
    int64_t g = p->groups, cg = c / g, ocg = oc / g, k = cg * p->kernel[0] * p->kernel[1];
    for (int64_t b0 = 0; b0 < n; b0 += s->samples) {
        int64_t bs = n - b0 < s->samples ? n - b0 : s->samples, ld = bs * ohw;
        for (int64_t gi = 0; gi < g; gi++) {
            for (int64_t j = 0; j < bs; j++)
                im2col(l, in + ((b0 + j) * c + gi * cg) * hw, s->col + j * ohw, ld);
            bool t = ld < CONV_TRANSPOSE_N;
            if (t)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, (blasint)ld, (blasint)ocg, (blasint)k, 1.0f, s->col,
                            (blasint)ld, w + gi * ocg * k, (blasint)k, 0.0f, s->tmp, (blasint)ocg);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)ocg, (blasint)ld, (blasint)k, 1.0f,
                            w + gi * ocg * k, (blasint)k, s->col, (blasint)ld, 0.0f, s->tmp, (blasint)ld);
            /* element (o, pixel p of the batch) of the product */
            int64_t so = t ? 1 : ld, sp = t ? ocg : 1;
            CPU_OMP_IF(ocg * ld > CPU_PARALLEL_MIN, "omp parallel for schedule(static)",
                for (int64_t o = 0; o < ocg; o++)
                    for (int64_t j = 0; j < bs; j++) {
                        const float *src = s->tmp + o * so + j * ohw * sp;
                        float *dst = out + ((b0 + j) * oc + gi * ocg + o) * ohw;
                        float b = bias ? bias[gi * ocg + o] : 0.0f;
                        for (int64_t i = 0; i < ohw; i++)
                            dst[i] = src[i * sp] + b;
                    });
        }
    }
}

/* Chunks of s->samples output rows of one group of one sample, one per thread at a
 * time: its unfolded input into the thread's part of s->col, then one GEMM (OpenBLAS on
 * one thread inside the parallel region) straight into the output rows. */
static void chunked(const layer *l, const conv_state *s, const float *in, const float *w, const float *bias,
                    float *out)
{
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3];
    int64_t oc = l->out.d[1], oh = l->out.d[2], ow = l->out.d[3], ohw = oh * ow;
    int64_t g = l->p.groups, cg = c / g, ocg = oc / g, k = conv_k(l), rows = s->samples;
    int64_t per_plane = (oh + rows - 1) / rows, chunks = n * g * per_plane;
#pragma omp parallel
    {
        float *col = s->col + (int64_t)omp_get_thread_num() * k * rows * ow;
#pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < chunks; t++) {
            int64_t b = t / (g * per_plane), gi = (t / per_plane) % g, y0 = (t % per_plane) * rows;
            int64_t y1 = y0 + rows < oh ? y0 + rows : oh, cols = (y1 - y0) * ow;
            const float *src = in + (b * c + gi * cg) * hw;
            for (int64_t r = 0; r < k; r++)
                im2col_row(l, src, col + r * cols, r, y0, y1);
            float *dst = out + (b * oc + gi * ocg) * ohw + y0 * ow;
            for (int64_t o = 0; bias && o < ocg; o++)
                for (int64_t i = 0; i < cols; i++)
                    dst[o * ohw + i] = bias[gi * ocg + o];
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)ocg, (blasint)cols, (blasint)k, 1.0f,
                        w + gi * ocg * k, (blasint)k, col, (blasint)cols, bias ? 1.0f : 0.0f, dst, (blasint)ohw);
        }
    }
}

/* Unfolds rows [r_lo, r_hi) of a chunk's input into col (rowbuf: cols floats, tiles^T). */
static void tiles_unfold(const layer *l, const conv_state *s, const float *src, int64_t y0, int64_t y1, float *col,
                         float *rowbuf, int64_t r_lo, int64_t r_hi)
{
    int64_t k = conv_k(l), cols = (y1 - y0) * l->out.d[3], mr = s->g->mr;
    if (s->path == CONV_TILES) {
        int64_t ldb = round_up(cols, s->g->nr);
        for (int64_t r = r_lo; r < r_hi; r++) {
            im2col_row(l, src, col + r * ldb, r, y0, y1);
            memset(col + r * ldb + cols, 0, (size_t)(ldb - cols) * sizeof *col);
        }
        return;
    }
    for (int64_t r = r_lo; r < r_hi; r++) {
        im2col_row(l, src, rowbuf, r, y0, y1);
        for (int64_t jp = 0; jp * mr < cols; jp++)
            for (int64_t i = 0; i < mr; i++)
                col[(jp * k + r) * mr + i] = jp * mr + i < cols ? rowbuf[jp * mr + i] : 0.0f;
    }
}

/* Output channel panels [p_lo, p_hi) of a chunk whose input is unfolded in col; dst:
 * the chunk's first output pixel of the group's first channel; ct: tiles^T's product. */
static void tiles_compute(const layer *l, const conv_state *s, const float *col, int64_t cols, const float *bias,
                          float *dst, float *ct, int64_t p_lo, int64_t p_hi)
{
    const cpu_pgemm *g = s->g;
    int64_t k = conv_k(l), ohw = l->out.d[2] * l->out.d[3], ocg = l->p.out_channels / l->p.groups;
    int64_t np = tiles_panels(s, l), mr = g->mr, nr = g->nr;
    for (int64_t kb = 0; kb < k; kb += s->kc) {
        int64_t kc = k - kb < s->kc ? k - kb : s->kc;
        bool acc = kb > 0;
        for (int64_t ip = p_lo; ip < p_hi; ip++) {
            if (s->path == CONV_TILES) {
                int64_t o0 = ip * mr, ldb = round_up(cols, nr);
                const float *a = s->wp + (ip * k + kb) * mr;
                for (int64_t j = 0; j < cols; j += nr)
                    g->kernel((int)(ocg - o0 < mr ? ocg - o0 : mr), (int)(cols - j < nr ? cols - j : nr),
                              &(cpu_pgemm_args){.ntap = 1, .kc = kc, .a = a, .lda = mr, .sa = 1,
                                                .b = col + kb * ldb + j, .ldb = ldb, .c = dst + o0 * ohw + j, .ldc = ohw,
                                                .rbias = bias ? bias + o0 : NULL, .accumulate = acc});
            } else {
                int64_t o0 = ip * nr, ldc = np * nr;
                const float *b = s->wp + (ip * k + kb) * nr;
                for (int64_t q = 0; q < cols; q += mr)
                    g->kernel((int)(cols - q < mr ? cols - q : mr), (int)(ocg - o0 < nr ? ocg - o0 : nr),
                              &(cpu_pgemm_args){.ntap = 1, .kc = kc, .a = col + (q / mr * k + kb) * mr, .lda = mr,
                                                .sa = 1, .b = b, .ldb = nr, .c = ct + q * ldc + o0, .ldc = ldc,
                                                .cbias = bias ? bias + o0 : NULL, .accumulate = acc});
            }
        }
    }
    if (s->path == CONV_TILES_T)
        for (int64_t o = p_lo * nr; o < p_hi * nr && o < ocg; o++)
            for (int64_t q = 0; q < cols; q++)
                dst[o * ohw + q] = ct[q * np * nr + o];
}

/* Chunks of s->samples output rows: a thread per chunk while there are enough of them,
 * otherwise every thread on each chunk (its K rows unfolded, then its channel panels
 * split between them). Packed weights are per group: the group's panels start at
 * gi * np panels. */
static void tiles(const layer *l, const conv_state *s, const float *in, const float *bias, float *out)
{
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3];
    int64_t oc = l->out.d[1], oh = l->out.d[2], ow = l->out.d[3], ohw = oh * ow;
    int64_t g = l->p.groups, cg = c / g, ocg = oc / g, k = conv_k(l), rows = s->samples, np = tiles_panels(s, l);
    int64_t per_plane = (oh + rows - 1) / rows, chunks = n * g * per_plane;
    int64_t cols_max = rows * ow, col_floats = s->path == CONV_TILES ? k * round_up(cols_max, s->g->nr)
                                                                     : k * round_up(cols_max, s->g->mr);
    int threads = omp_get_max_threads();
    conv_state sg = *s; /* its wp moved to the chunk's group */
    if (chunks >= threads) {
#pragma omp parallel firstprivate(sg)
        {
            float *ws = s->col + (int64_t)omp_get_thread_num() * s->ws_floats;
#pragma omp for schedule(dynamic)
            for (int64_t t = 0; t < chunks; t++) {
                int64_t b = t / (g * per_plane), gi = (t / per_plane) % g, y0 = (t % per_plane) * rows;
                int64_t y1 = y0 + rows < oh ? y0 + rows : oh, cols = (y1 - y0) * ow;
                sg.wp = s->wp + gi * np * k * (s->path == CONV_TILES ? s->g->mr : s->g->nr);
                tiles_unfold(l, &sg, in + (b * c + gi * cg) * hw, y0, y1, ws, ws + col_floats, 0, k);
                tiles_compute(l, &sg, ws, cols, bias ? bias + gi * ocg : NULL, out + (b * oc + gi * ocg) * ohw + y0 * ow,
                              ws + col_floats + cols_max, 0, np);
            }
        }
        return;
    }
    for (int64_t t = 0; t < chunks; t++) {
        int64_t b = t / (g * per_plane), gi = (t / per_plane) % g, y0 = (t % per_plane) * rows;
        int64_t y1 = y0 + rows < oh ? y0 + rows : oh, cols = (y1 - y0) * ow;
        sg.wp = s->wp + gi * np * k * (s->path == CONV_TILES ? s->g->mr : s->g->nr);
#pragma omp parallel firstprivate(sg)
        {
            int64_t tid = omp_get_thread_num(), nt = omp_get_num_threads();
            tiles_unfold(l, &sg, in + (b * c + gi * cg) * hw, y0, y1, s->col, s->col + tid * s->ws_floats + col_floats,
                         k * tid / nt, k * (tid + 1) / nt);
#pragma omp barrier
            tiles_compute(l, &sg, s->col, cols, bias ? bias + gi * ocg : NULL, out + (b * oc + gi * ocg) * ohw + y0 * ow,
                          s->col + col_floats + cols_max, np * tid / nt, np * (tid + 1) / nt);
        }
    }
}

static void direct(const layer *l, const conv_state *s, const float *in, const float *bias, float *out)
{
    const layer_params *p = &l->p;
    int64_t n = l->in.d[0], c = l->in.d[1], h = l->in.d[2], w = l->in.d[3], hp = s->hp, row = direct_row(s, l);
    int64_t oc = l->out.d[1], oh = l->out.d[2], ow = l->out.d[3], ohw = oh * ow;
    int64_t g = p->groups, cg = c / g, ocg = oc / g, taps = p->kernel[0] * p->kernel[1], pw, tw;
    direct_shape(l, s, &pw, &tw);
    int64_t np = (ocg + pw - 1) / pw, xb = (ow + tw - 1) / tw, tiles = n * oh * xb, run;
    int64_t units = direct_units(l, s, omp_get_max_threads(), &run), runs = (tiles + run - 1) / run;
    int64_t planes = n * c, sx = p->stride[1], half = row / 2;
    bool split = s->path == CONV_DIRECT && sx == 2, t_path = s->path == CONV_DIRECT_T;
    float *pad = s->col;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int64_t pr = 0; pr < planes * hp; pr++) {
            int64_t pl = pr / hp, y = pr % hp, iy = y - p->padding[0], x0 = p->padding[1];
            float *dr = pad + pr * row;
            const float *src = in + (pl * h + iy) * w;
            if (iy < 0 || iy >= h) {
                memset(dr, 0, (size_t)row * sizeof *dr);
            } else if (!split) { /* padded column x holds input column x - padding */
                int64_t x1 = x0 + w < s->wpad ? x0 + w : s->wpad;
                memset(dr, 0, (size_t)x0 * sizeof *dr);
                memcpy(dr + x0, src, (size_t)(x1 - x0) * sizeof *dr);
                memset(dr + x1, 0, (size_t)(row - x1) * sizeof *dr);
            } else { /* the even padded columns, then the odd ones */
                for (int64_t e = 0; e < 2; e++)
                    for (int64_t j = 0; j < half; j++) {
                        int64_t ix = 2 * j + e - x0;
                        dr[e * half + j] = ix >= 0 && ix < w ? src[ix] : 0.0f;
                    }
            }
        }
        /* units in (group, panel) order: a thread keeps few weight panels */
#pragma omp for schedule(static)
        for (int64_t u = 0; u < units; u++) {
            int64_t gi = u / (np * runs), ip = (u / runs) % np, t0 = (u % runs) * run;
            int64_t t1 = t0 + run < tiles ? t0 + run : tiles, o0 = ip * pw, nv = ocg - o0 < pw ? ocg - o0 : pw;
            const float *wpanel = s->wp + (gi * np + ip) * taps * cg * pw;
            const float *ob = bias ? bias + gi * ocg + o0 : NULL;
            for (int64_t t = t0; t < t1; t++) {
                int64_t b = t / (oh * xb), y = (t / xb) % oh, x0 = (t % xb) * tw, mv = ow - x0 < tw ? ow - x0 : tw;
                const float *plane = pad + ((b * c + gi * cg) * hp + y * p->stride[0]) * row;
                float *dst = out + (b * oc + gi * ocg + o0) * ohw + y * ow + x0;
                if (!t_path) { /* channels broadcast, pixels along the vectors, stored as they are */
                    s->g->kernel((int)nv, (int)mv,
                                 &(cpu_pgemm_args){.ntap = taps, .kc = cg, .a = wpanel, .lda = pw, .sa = 1,
                                                   .btap = s->taps, .b = plane + (split ? x0 : x0 * sx),
                                                   .ldb = hp * row, .c = dst, .ldc = ohw, .rbias = ob});
                    continue;
                }
                float tile[14 * 32];
                s->g->kernel((int)mv, (int)nv,
                             &(cpu_pgemm_args){.ntap = taps, .kc = cg, .atap = s->taps, .a = plane + x0 * sx,
                                               .lda = hp * row, .sa = sx, .b = wpanel, .ldb = pw, .c = tile,
                                               .ldc = pw, .cbias = ob});
                for (int64_t j = 0; j < nv; j++)
                    for (int64_t q = 0; q < mv; q++)
                        dst[j * ohw + q] = tile[q * pw + j];
            }
        }
    }
}

static void conv_run(void *env, const layer *l, void *state, const void *const *ins_, const void *w_, void *out_)
{
    const float *w = w_;
    float *out = out_;
    const float *const *ins = (const float *const *)ins_;
    (void)env;
    const float *in = ins[0];
    const conv_state *s = state;
    const layer_params *p = &l->p;
    int64_t n = l->in.d[0], c = l->in.d[1], hw = l->in.d[2] * l->in.d[3];
    int64_t oc = l->out.d[1], ohw = l->out.d[2] * l->out.d[3];
    int64_t g = p->groups, cg = c / g, ocg = oc / g, k = cg * p->kernel[0] * p->kernel[1];
    const float *bias = p->bias ? w + oc * k : NULL;
    if (s->path == CONV_DEPTHWISE) {
        depthwise(l, in, w, bias, out);
        return;
    }
    if (s->path == CONV_BATCHED) {
        batched(l, s, in, w, bias, out);
        return;
    }
    if (winograd_m(s->path)) {
        cpu_winograd_run(l, s->wg, in, bias, out);
        return;
    }
    if (s->path == CONV_CHUNKED) {
        chunked(l, s, in, w, bias, out);
        return;
    }
    if (s->path == CONV_TILES || s->path == CONV_TILES_T) {
        tiles(l, s, in, bias, out);
        return;
    }
    if (s->path == CONV_DIRECT || s->path == CONV_DIRECT_T) {
        direct(l, s, in, bias, out);
        return;
    }
    for (int64_t b = 0; b < n; b++) {
        float *ob = out + b * oc * ohw;
        if (bias)
            fill_bias(ob, bias, oc, ohw);
        for (int64_t gi = 0; gi < g; gi++) {
            const float *src = in + (b * c + gi * cg) * hw;
            if (s->path == CONV_IM2COL) {
                im2col(l, src, s->col, ohw);
                src = s->col;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)ocg, (blasint)ohw, (blasint)k,
                        1.0f, w + gi * ocg * k, (blasint)k, src, (blasint)ohw, bias ? 1.0f : 0.0f,
                        ob + gi * ocg * ohw, (blasint)ohw);
        }
    }
}

/* The kind's own tolerance, but a convolution Winograd may run (the search may pick it for
 * any 3x3 stride-1 layer) gets CPU_WINOGRAD_TOLERANCE: its transforms round more. */
static double conv_tolerance(void *env, const layer *l)
{
    (void)env;
    double t = layer_desc_get(l->kind)->tolerance;
    return cpu_winograd_applies(l) && t < CPU_WINOGRAD_TOLERANCE ? CPU_WINOGRAD_TOLERANCE : t;
}

const backend_kernel cpu_conv2d_kernel = {.setup = conv_setup, .run = conv_run, .free = conv_free,
                                          .tolerance = conv_tolerance};
