/* The chained training step's second half, shared by `run` (the chained train row and
 * its in-model view, measure_chained.c) and `check` (the step's gradients against the
 * reference): after forward_queue has run a train model's forward (every value kept,
 * batch norm on the batch's statistics), the loss and its gradient, then every layer's
 * backward in reverse order, each output's gradient summed first where several layers
 * read it (a residual, a concatenation's inputs, a branch), as autograd accumulates it;
 * then, with m->optimizer, one update of every parameter tensor that learns (the
 * backend's optimizer_update; for 16-bit weights, of fp32 master weights, the gradient
 * widened before and the weights rounded from the master after, by device.convert).
 * Nothing here times or prints. */
#ifndef LAYERBENCH_TRAIN_STEP_H
#define LAYERBENCH_TRAIN_STEP_H

#include "forward.h"

typedef struct train_step train_step;

/* What the step's loss is: cross-entropy (summed over the rows) of the last layer's
 * output against random labels where that layer is a linear (logits over its last
 * dim), else a weighted sum of the output, sum(r * y) with r drawn once in [-1, 1]
 * (train_loss_weights), whose gradient is r (a plain sum would give a softmax's output
 * a gradient of zero: its sum is constant). */
typedef enum train_loss { LOSS_CROSS_ENTROPY, LOSS_SUM } train_loss;

/* Whether m has a step to run: false, with why, where its output is its input (only
 * views), or where no layer runs a backward (model_grad_flow: every weight the loss
 * reaches is frozen, or there is none). */
bool train_step_trainable(const model *m, char *why, size_t whylen);
/* m's loss (m's last layer decides), and its labels: rows random classes drawn from seed,
 * as the step draws them. */
train_loss train_loss_of(const model *m);
void train_loss_labels(uint64_t seed, int64_t rows, int64_t classes, int64_t *labels);
void train_loss_weights(uint64_t seed, int64_t count, float *r);


/* The step after net's forward: net must be built from a model whose pass is
 * PASS_TRAIN (forward_build then keeps every value). NULL with why on failure, and
 *status BENCH_ERR_UNSUPPORTED (a layer's backward the backend cannot run, or a backend
 * with its own memory: the loss's labels are written in host memory), BENCH_ERR_NOMEM or
 * BENCH_ERR_BACKEND. */
train_step *train_step_build(const forward_net *net, uint64_t seed, bench_status *status, char *why, size_t whylen);
/* Queues the loss, the backward and the optimizer's update once; with marks, mark
 * n_layers after the loss, mark n_layers + (n_layers - i) after layer i's backward and,
 * with an optimizer, mark 2 n_layers + 1 + i after layer i's update (train_step_marks
 * marks with the forward's). */
void train_step_queue(train_step *ts, bool marks);
int train_step_marks(const train_step *ts);
/* Whether the optimizer updates layer i's weights. */
bool train_step_updates(const train_step *ts, int i);
/* The optimizer's learning rate (0 from the build: the work without the change). */
void train_step_set_lr(train_step *ts, float lr);
void train_step_free(train_step *ts);

train_loss train_step_loss(const train_step *ts);
/* Layer i's backward output (its inputs' gradients, then its weights'), or NULL where it
 * runs none (a view, or a layer the loss does not reach). */
const void *train_step_grads(const train_step *ts, int i);
/* Layer i's backward as set up (its layer as the kernel sees it: no_input_grad where
 * nothing reads its inputs' gradients), or NULL where it runs none. */
const backend_layer *train_step_backward(const train_step *ts, int i);
/* Layer i's fp32 master weights, which the optimizer updates where the layer's weights
 * are 16-bit (the weights the kernels read are rounded from them after each update), or
 * NULL (fp32 weights are updated in place). */
const float *train_step_master(const train_step *ts, int i);

#endif
