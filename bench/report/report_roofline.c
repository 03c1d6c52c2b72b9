/* The roofline: where a row sits under the machine's measured ceilings (report.h), for
 * the console's tables and the CSV's bound and roof_pct columns alike. */
#include "report.h"

bool report_roofline(int64_t flops, int64_t bytes, double seconds, bool cold, const backend_peaks *pk, dtype_t dtype,
                     double *pct, const char **bound)
{
    double peak = backend_peak_flops(pk, dtype);
    if (!(seconds > 0) || bytes <= 0 || !(peak > 0) || !(pk->bytes_per_s > 0))
        return false;
    /* a layer run warm whose data the caches hold streams from them */
    bool cached = !cold && pk->cache_bytes_per_s > 0 && bytes <= pk->cache_bytes;
    double bw = cached ? pk->cache_bytes_per_s : pk->bytes_per_s;
    double intensity = (double)flops / (double)bytes, balance = peak / bw;
    if (flops == 0 || intensity < balance) {
        *bound = cached ? "cache" : "memory";
        *pct = 100 * ((double)bytes / seconds) / bw;
    } else {
        *bound = "compute";
        *pct = 100 * ((double)flops / seconds) / peak;
    }
    return true;
}
