/* The module hierarchy from qualified names (blocks.h). */
#include <stdlib.h>
#include <string.h>

#include "blocks.h"

/* Open addressing over prefixes (name, length) -> block index. */
typedef struct prefix_map {
    int *slot;      /* block index + 1; 0 empty */
    size_t cap;
} prefix_map;

static uint64_t hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int find_or_add(prefix_map *pm, model_blocks *b, const char *name, size_t n, int depth, int parent, int layer)
{
    if ((size_t)(b->n_blocks + 1) * 2 > pm->cap) { /* grow and rehash */
        size_t cap = pm->cap ? 2 * pm->cap : 64;
        int *slot = xcalloc(cap, sizeof *slot);
        for (int i = 1; i < b->n_blocks; i++) {
            size_t k = (size_t)hash(b->blocks[i].name, strlen(b->blocks[i].name)) & (cap - 1);
            while (slot[k])
                k = (k + 1) & (cap - 1);
            slot[k] = i + 1;
        }
        free(pm->slot);
        pm->slot = slot, pm->cap = cap;
    }
    size_t k = (size_t)hash(name, n) & (pm->cap - 1);
    for (; pm->slot[k]; k = (k + 1) & (pm->cap - 1)) {
        block_info *bi = &b->blocks[pm->slot[k] - 1];
        if (strlen(bi->name) == n && memcmp(bi->name, name, n) == 0)
            return pm->slot[k] - 1;
    }
    int i = b->n_blocks++;
    b->blocks = xrealloc(b->blocks, (size_t)b->n_blocks * sizeof *b->blocks);
    char *copy = xmalloc(n + 1);
    memcpy(copy, name, n);
    copy[n] = 0;
    b->blocks[i] = (block_info){copy, depth, parent, layer, layer, 0};
    pm->slot[k] = i + 1;
    return i;
}

void model_blocks_build(const model *m, model_blocks *out)
{
    memset(out, 0, sizeof *out);
    out->blocks = xmalloc(sizeof *out->blocks);
    out->blocks[0] = (block_info){xstrdup(m->name), 0, -1, 0, m->n_layers ? m->n_layers - 1 : 0, m->n_layers};
    out->n_blocks = 1;
    out->layer_block = xmalloc((size_t)(m->n_layers ? m->n_layers : 1) * sizeof *out->layer_block);
    prefix_map pm = {0};
    for (int i = 0; i < m->n_layers; i++) {
        const char *name = m->layers[i].name;
        int parent = 0, depth = 1;
        for (const char *dot = strchr(name, '.'); dot; dot = strchr(dot + 1, '.'), depth++) {
            parent = find_or_add(&pm, out, name, (size_t)(dot - name), depth, parent, i);
            block_info *bi = &out->blocks[parent];
            bi->last = i;
            bi->n_layers++;
        }
        out->layer_block[i] = parent;
    }
    free(pm.slot);
}

void model_blocks_free(model_blocks *b)
{
    for (int i = 0; i < b->n_blocks; i++)
        free(b->blocks[i].name);
    free(b->blocks), free(b->layer_block);
    memset(b, 0, sizeof *b);
}

const char *block_leaf_name(const char *qualified)
{
    const char *dot = strrchr(qualified, '.');
    return dot ? dot + 1 : qualified;
}
