/* The kernels one call of a layer launches, by name (the backend's kernel_names, the
 * CSV's kernels column): the call is captured into a CUDA graph, never run, and the
 * graph's nodes are read in order: each kernel node's function name (cuFuncGetName, or
 * cuKernelGetName for a library's CUkernel) with its grid and block, memset and memcpy
 * nodes by their kind, child graphs walked into. The driver's entry points come through
 * the runtime (cudaGetDriverEntryPointByVersion), so nothing links libcuda. Names are
 * the driver's, mangled, as nsys prints them before demangling. A call that cannot be
 * captured (a library that synchronises inside) gives no names, and is not a failure
 * of the layer. */
#include <cuda.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_env.h"

typedef struct driver_api {
    bool tried, ok;
    CUresult (*get_nodes)(CUgraph, CUgraphNode *, size_t *);
    CUresult (*node_type)(CUgraphNode, CUgraphNodeType *);
    CUresult (*kernel_params)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS *);
    CUresult (*func_name)(const char **, CUfunction);
    CUresult (*kernel_name)(const char **, CUkernel);
    CUresult (*child_graph)(CUgraphNode, CUgraph *);
} driver_api;

/* the driver API version the prototypes above are of: 12.8 (cuFuncGetName is 12.3's) */
#define DRIVER_API_VERSION 12080

static bool entry(const char *symbol, void **fn)
{
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    bool ok = cudaGetDriverEntryPointByVersion(symbol, fn, DRIVER_API_VERSION, cudaEnableDefault, &q) == cudaSuccess &&
              q == cudaDriverEntryPointSuccess && *fn;
    if (!ok)
        (void)cudaGetLastError();
    return ok;
}

static const driver_api *driver(void)
{
    static driver_api d;
    if (!d.tried) {
        d.tried = true;
        d.ok = entry("cuGraphGetNodes", (void **)&d.get_nodes) && entry("cuGraphNodeGetType", (void **)&d.node_type) &&
               entry("cuGraphKernelNodeGetParams", (void **)&d.kernel_params) &&
               entry("cuFuncGetName", (void **)&d.func_name) && entry("cuGraphChildGraphNodeGetGraph", (void **)&d.child_graph);
        if (!entry("cuKernelGetName", (void **)&d.kernel_name))
            d.kernel_name = NULL;
    }
    return d.ok ? &d : NULL;
}

static void append(char *buf, size_t len, const char *fmt_name, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                    unsigned by, unsigned bz, bool dims)
{
    size_t at = strlen(buf);
    if (at + 1 >= len)
        return;
    if (dims)
        snprintf(buf + at, len - at, "%s%s grid %ux%ux%u block %ux%ux%u", at ? "; " : "", fmt_name, gx, gy, gz, bx, by,
                 bz);
    else
        snprintf(buf + at, len - at, "%s%s", at ? "; " : "", fmt_name);
}

/* The graph's nodes into buf, child graphs walked into (depth: how deep already). */
static bool walk(const driver_api *d, CUgraph g, char *buf, size_t len, int depth)
{
    size_t n = 0;
    if (depth > 4 || d->get_nodes(g, NULL, &n) != CUDA_SUCCESS)
        return false;
    CUgraphNode *nodes = n ? calloc(n, sizeof *nodes) : NULL;
    if (n && (!nodes || d->get_nodes(g, nodes, &n) != CUDA_SUCCESS)) {
        free(nodes);
        return false;
    }
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++) {
        CUgraphNodeType type;
        if (d->node_type(nodes[i], &type) != CUDA_SUCCESS)
            continue;
        if (type == CU_GRAPH_NODE_TYPE_KERNEL) {
            CUDA_KERNEL_NODE_PARAMS p;
            memset(&p, 0, sizeof p);
            const char *name = NULL;
            if (d->kernel_params(nodes[i], &p) != CUDA_SUCCESS)
                continue;
            if (p.func)
                (void)d->func_name(&name, p.func);
            else if (p.kern && d->kernel_name)
                (void)d->kernel_name(&name, p.kern);
            append(buf, len, name ? name : "(unnamed kernel)", p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX,
                   p.blockDimY, p.blockDimZ, true);
        } else if (type == CU_GRAPH_NODE_TYPE_MEMSET) {
            append(buf, len, "memset", 0, 0, 0, 0, 0, 0, false);
        } else if (type == CU_GRAPH_NODE_TYPE_MEMCPY) {
            append(buf, len, "memcpy", 0, 0, 0, 0, 0, 0, false);
        } else if (type == CU_GRAPH_NODE_TYPE_GRAPH) {
            CUgraph child;
            ok = d->child_graph(nodes[i], &child) == CUDA_SUCCESS && walk(d, child, buf, len, depth + 1);
        }
    }
    free(nodes);
    return ok;
}

bool cuda_kernel_names(cuda_env *env, void (*call)(void *user), void *user, char *buf, size_t len)
{
    const driver_api *d = driver();
    if (len)
        buf[0] = 0;
    if (!d || !len)
        return false;
    bool failed_before = env->failed;
    if (cudaStreamBeginCapture(env->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    call(user);
    cudaGraph_t g = NULL;
    bool ok = cudaStreamEndCapture(env->stream, &g) == cudaSuccess && g && !(env->failed && !failed_before);
    if (env->failed && !failed_before)
        cuda_env_clear(env); /* what could not be captured did not fail the layer */
    (void)cudaGetLastError();
    ok = ok && walk(d, (CUgraph)g, buf, len, 0);
    if (g)
        cudaGraphDestroy(g);
    if (!ok)
        buf[0] = 0;
    return ok;
}
