/* Backend registry: the only place that knows which backends exist (adding one: its
 * folder under layers/, plus one line here). The CPU backend is
 * built in; the onednn and cuda backends, where they were built, are modules loaded on
 * first use (liblayerbench_<name>.so beside the library holding this file). */
#define _GNU_SOURCE
#include "backend_registry.h"

#include <dlfcn.h>
#include <string.h>

extern const backend_ops backend_cpu_ops;

static const backend_ops *const builtin[] = {&backend_cpu_ops, NULL};

static char load_error[512];

/* The backends built as modules: "<folder of this library>/liblayerbench_<name>.so",
 * loaded once each; its ops table is the symbol backend_<name>_ops. */
static const char *const modules[] = {
#ifdef LAYERBENCH_HAVE_ONEDNN
    "onednn",
#endif
#ifdef LAYERBENCH_HAVE_CUDA
    "cuda",
#endif
    NULL};

static const backend_ops *load_module(int i)
{
    static const backend_ops *loaded[BACKEND_MAX];
    static bool tried[BACKEND_MAX];
    static char error[BACKEND_MAX][512];
    const char *name = modules[i];
    if (!tried[i]) {
        tried[i] = true;
        Dl_info self;
        char path[4096] = "";
        if (dladdr((void *)load_module, &self) && self.dli_fname) {
            const char *slash = strrchr(self.dli_fname, '/');
            int dir = slash ? (int)(slash - self.dli_fname) : 1;
            snprintf(path, sizeof path, "%.*s/liblayerbench_%s.so", dir, slash ? self.dli_fname : ".", name);
        }
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        char sym[64];
        snprintf(sym, sizeof sym, "backend_%s_ops", name);
        loaded[i] = h ? (const backend_ops *)dlsym(h, sym) : NULL;
        if (!loaded[i]) {
            snprintf(error[i], sizeof error[i], "the %s backend cannot be loaded: %s", name, dlerror());
        } else if (loaded[i]->api != BACKEND_API) { /* another build's module beside this binary */
            snprintf(error[i], sizeof error[i],
                     "the %s backend cannot be loaded: %s was built for backend API %d, this binary speaks %d "
                     "(rebuild both from one tree)", name, path, loaded[i]->api, BACKEND_API);
            loaded[i] = NULL;
        }
    }
    if (!loaded[i])
        snprintf(load_error, sizeof load_error, "%s", error[i]);
    return loaded[i];
}

/* Every backend this version knows, built here or not, in the order --backend all
 * opens them: what it runs on, and what building it needs (for the error when it was
 * not built). */
static const struct {
    const char *name;
    bool gpu;
    const char *needs;
} known[] = {
    {"cpu", false, NULL},
    {"onednn", false, "oneDNN at configure time: apt-get install libdnnl-dev"},
    {"cuda", true, "the CUDA toolkit and cuDNN at configure time"},
};
#define KNOWN (sizeof known / sizeof *known)
_Static_assert(KNOWN + 1 <= BACKEND_MAX, "BACKEND_MAX holds every backend and a NULL");

const backend_ops *backend_find(const char *name)
{
    for (int i = 0; builtin[i]; i++)
        if (strcmp(builtin[i]->name, name) == 0)
            return builtin[i];
    for (int i = 0; modules[i]; i++)
        if (strcmp(modules[i], name) == 0)
            return load_module(i);
    const char *needs = NULL;
    for (size_t i = 0; i < KNOWN; i++)
        if (strcmp(known[i].name, name) == 0)
            needs = known[i].needs;
    snprintf(load_error, sizeof load_error, "the %s backend is not built into this binary%s%s%s", name,
             needs ? " (it needs " : "", needs ? needs : "", needs ? ")" : "");
    return NULL;
}

const char *backend_find_error(void) { return load_error; }

const char *const *backend_names(void)
{
    static const char *names[KNOWN + 1];
    for (size_t i = 0; i < KNOWN; i++)
        names[i] = known[i].name;
    return names;
}

bool backend_is_gpu(const char *name)
{
    for (size_t i = 0; i < KNOWN; i++)
        if (strcmp(known[i].name, name) == 0)
            return known[i].gpu;
    return false;
}
