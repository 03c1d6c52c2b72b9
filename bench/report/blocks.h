/* The module hierarchy of a model, from its layers' qualified names, as torch's module
 * paths give it: "layer1.0.conv1" is in block "layer1.0", which is in "layer1", which is
 * in the model. For the block roll-up table, the trace's nested spans and the flame
 * graph's stacks. */
#ifndef LAYERBENCH_BLOCKS_H
#define LAYERBENCH_BLOCKS_H

#include "model.h"

typedef struct block_info {
    char *name;      /* qualified name ("layer1.0"); the model's own name for blocks[0]; owned */
    int depth;       /* 0 for the model, 1 for "layer1", 2 for "layer1.0", ... */
    int parent;      /* index of the enclosing block; -1 for the model */
    int first, last; /* its first and last layer, in execution order */
    int n_layers;    /* layers inside it, at any depth */
} block_info;

typedef struct model_blocks {
    block_info *blocks;  /* n_blocks, in the order of their first layer; blocks[0] is the model */
    int n_blocks;
    int *layer_block;    /* per layer: the block that holds it directly */
} model_blocks;

/* Every proper prefix of a layer name that ends before a '.', and the model. Costs time
 * in proportion to the total length of the names. */
void model_blocks_build(const model *m, model_blocks *out);
void model_blocks_free(model_blocks *b);

/* A layer's name within its block: "conv1" for "layer1.0.conv1". */
const char *block_leaf_name(const char *qualified);

#endif
