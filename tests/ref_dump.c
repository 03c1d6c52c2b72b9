/* The plain-C reference forward of a config, written out for a cross-check against
 * another framework (tests/test_llm_torch.sh): the input and every layer's weights drawn
 * from the seed as bench check draws them (the input, then each layer's weights in
 * order), and every layer's reference output, as raw little-endian float32 files in
 * OUTDIR (input.bin, w<i>.bin, out<i>.bin), with manifest.tsv naming them: one line per
 * layer, "index name kind weight_floats output_shape input_ids parameters input_shape" (value 0 is
 * the model's input, value i + 1 layer i's output; the parameters as bench list gives
 * them, those at their defaults left out).
 * usage: ref_dump [--grads] CONFIG OUTDIR [SEED [BATCH [TOKENS [ROUTING [KV_LEN]]]]] (TOKENS: a
 * decoder's new tokens; ROUTING router: every moe layer routes by its logits' top-k, as the
 * model does, uniform: the config's; KV_LEN: the tokens already cached, as --kv-len).
 * --grads: the forward in training mode (layer_train_reference: batch norm by the batch's
 * statistics), and for every layer with a backward reference a random output gradient
 * dout<i>.bin, the input gradients din<i>_<k>.bin and the weights' dw<i>.bin, each layer's
 * backward on its own (tests/grad_torch_check.py compares them with torch.autograd). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfg.h"

static int write_floats(const char *dir, const char *name, const float *x, int64_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(x, sizeof *x, (size_t)n, f) != (size_t)n || fclose(f) != 0) {
        fprintf(stderr, "ref_dump: cannot write %s\n", path);
        return -1;
    }
    return 0;
}

/* Layer i's backward on its own: a random gradient of its output (from rng), then its
 * inputs' and weights' gradients, written beside the forward's files */
static int write_grads(const char *dir, int i, const layer *l, const float *const *ins, const float *w,
                       const float *out, layer_rng *rng)
{
    char name[64];
    int64_t n_out = shape_numel(&l->out);
    float *dout = xmalloc((size_t)n_out * sizeof *dout), *din[LAYER_MAX_INPUTS];
    float *dw = l->n_weight_floats ? xmalloc((size_t)l->n_weight_floats * sizeof *dw) : NULL;
    layer_fill_uniform(dout, n_out, -1.0f, 1.0f, rng);
    for (int k = 0; k < l->n_inputs; k++)
        din[k] = xmalloc((size_t)shape_numel(&l->ins[k]) * sizeof *din[k]);
    layer_desc_get(l->kind)->backward(l, ins, w, out, dout, din, dw);
    snprintf(name, sizeof name, "dout%d.bin", i);
    int st = write_floats(dir, name, dout, n_out);
    for (int k = 0; k < l->n_inputs; k++) {
        snprintf(name, sizeof name, "din%d_%d.bin", i, k);
        st |= write_floats(dir, name, din[k], shape_numel(&l->ins[k]));
        free(din[k]);
    }
    if (dw) {
        snprintf(name, sizeof name, "dw%d.bin", i);
        st |= write_floats(dir, name, dw, l->n_weight_floats);
    }
    free(dout), free(dw);
    return st;
}

int main(int argc, char **argv)
{
    bool grads = argc > 1 && strcmp(argv[1], "--grads") == 0;
    if (grads)
        argc--, argv++;
    if (argc < 3) {
        fprintf(stderr, "usage: ref_dump [--grads] CONFIG OUTDIR [SEED [BATCH [TOKENS [ROUTING [KV_LEN]]]]]\n");
        return 2;
    }
    uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 1;
    int64_t batch = argc > 4 ? atoll(argv[4]) : 0;
    cfg_shape shape = CFG_SHAPE_KEEP;
    shape.tokens = argc > 5 ? atoll(argv[5]) : 0;
    if (argc > 7)
        shape.kv_len = atoll(argv[7]);
    model *m;
    char err[1024];
    if (cfg_load_shaped(argv[1], batch, shape, &m, err, sizeof err) != BENCH_OK) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    int n = m->n_layers;
    if (argc > 6 && strcmp(argv[6], "router") == 0)
        for (int i = 0; i < n; i++)
            if (m->layers[i].kind == LAYER_MOE) {
                m->layers[i].p.routing = MOE_ROUTER;
                layer_count(&m->layers[i]);
            }
    float **v = xcalloc((size_t)n + 1, sizeof *v);
    layer_rng rng, grad_rng;
    layer_rng_seed(&rng, seed);
    layer_rng_seed(&grad_rng, seed + 1);
    int64_t n_in = shape_numel(&m->input);
    v[0] = xmalloc((size_t)n_in * sizeof *v[0]);
    layer_fill_uniform(v[0], n_in, -1.0f, 1.0f, &rng);
    char path[4096], name[64];
    snprintf(path, sizeof path, "%s/manifest.tsv", argv[2]);
    FILE *man = fopen(path, "w");
    int st = !man || write_floats(argv[2], "input.bin", v[0], n_in);
    for (int i = 0; i < n && !st; i++) {
        const layer *l = &m->layers[i];
        const layer_desc *d = layer_desc_get(l->kind);
        float *w = l->n_weight_floats ? xmalloc((size_t)l->n_weight_floats * sizeof *w) : NULL;
        if (w) {
            d->init_weights(l, w, &rng);
            snprintf(name, sizeof name, "w%d.bin", i);
            st |= write_floats(argv[2], name, w, l->n_weight_floats);
        }
        v[i + 1] = xmalloc((size_t)shape_numel(&l->out) * sizeof *v[i + 1]);
        const float *ins[LAYER_MAX_INPUTS];
        for (int k = 0; k < l->n_inputs; k++)
            ins[k] = v[l->inputs[k]];
        if (grads)
            layer_train_reference(l, ins, w, v[i + 1]);
        else
            d->reference(l, ins, w, v[i + 1]);
        if (grads && layer_has_backward(l))
            st |= write_grads(argv[2], i, l, ins, w, v[i + 1], &grad_rng);
        free(w);
        snprintf(name, sizeof name, "out%d.bin", i);
        st |= write_floats(argv[2], name, v[i + 1], shape_numel(&l->out));
        char shape[96];
        fprintf(man, "%d\t%s\t%s\t%lld\t%s\t", i, l->name, layer_kind_name(l->kind), (long long)l->n_weight_floats,
                shape_format(&l->out, shape, sizeof shape));
        for (int k = 0; k < l->n_inputs; k++)
            fprintf(man, "%s%d", k ? "," : "", l->inputs[k]);
        char params[512];
        layer_params_format(l, params, sizeof params);
        fprintf(man, "\t%s\t%s\n", params, shape_format(&l->in, shape, sizeof shape));
    }
    if (man && fclose(man) != 0)
        st = 1;
    for (int i = 0; i <= n; i++)
        free(v[i]);
    free(v);
    model_free(m);
    return st ? 1 : 0;
}
