/* The relative error every check reports and a chain's tolerance (check.h), apart so
 * that check.c and check_step.c both call them without calling each other. */
#include <math.h>

#include "check.h"

double check_rel_err(const float *out, const float *ref, int64_t n, int64_t *nonfinite)
{
    double num = 0.0, den = 0.0;
    *nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(out[i]) && isfinite(ref[i])) {
            (*nonfinite)++;
            continue;
        }
        if (isfinite(ref[i])) {
            double d = (double)out[i] - ref[i];
            num += d * d;
            den += (double)ref[i] * ref[i];
        } else if (!(out[i] == ref[i])) { /* -inf from an all-padding max window must match */
            (*nonfinite)++;
        }
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

void check_chain_tol_add(check_chain_tol *c, const backend *b, const layer *l, double extra)
{
    dtype_t t = layer_compute_dtype(l);
    c->own += backend_tolerance(b, l) - dtype_tolerance(t) + extra;
    c->per_type[t]++;
}

double check_chain_tol_total(const check_chain_tol *c)
{
    double tol = c->own;
    for (int t = 0; t < DTYPE_COUNT; t++)
        tol += dtype_tolerance((dtype_t)t) * sqrt((double)c->per_type[t]);
    return tol < CHECK_CHAIN_MAX ? tol : CHECK_CHAIN_MAX;
}
