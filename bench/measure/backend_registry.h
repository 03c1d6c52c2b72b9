/* The backends this binary knows, by name: the only place that lists them
 * (bench/backend_registry.c). The contract they fill is layers/backend.h. */
#ifndef LAYERBENCH_BACKEND_REGISTRY_H
#define LAYERBENCH_BACKEND_REGISTRY_H

#include "backend.h"

/* Looks a backend up by name ("cpu", "cuda"), loading its module if it has one; NULL
 * when it was not built or cannot be loaded, and backend_find_error() says which. */
const backend_ops *backend_find(const char *name);
const char *backend_find_error(void);
/* Every backend this version knows, built into this binary or not, NULL-terminated, in
 * the order `--backend all` opens them. */
const char *const *backend_names(void);
/* Whether the backend named runs on a GPU (its own memory, launches, CUDA events): its
 * figures are read as a GPU's, and a Slurm shard of it asks for a GPU. From the table
 * of known backends, so a backend not built here still answers. */
bool backend_is_gpu(const char *name);
#define BACKEND_MAX 4

#endif
