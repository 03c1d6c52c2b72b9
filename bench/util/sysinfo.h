/* The machine, probed in one place: what it is (its CPU model and vector extensions, its
 * host name and system) and what about it could make the figures wrong, said before they are trusted
 * (as Google Benchmark's "CPU scaling is enabled"): a debug or sanitizer build, a CPU
 * frequency governor other than performance, other processes using the CPUs. Backends
 * add their own (backend_ops.warnings: OpenBLAS running narrower vector code than the
 * CPU has; GPU clocks that moved or were held back); the runner adds what the results
 * show (too few samples, a gap between the chained forward and its layers). Every
 * warning goes to stderr and into the JSON context. */
#ifndef LAYERBENCH_SYSINFO_H
#define LAYERBENCH_SYSINFO_H

#include "output.h"

/* Appends one line per warning about the host to w. Takes about 0.2 s: it watches how
 * busy the CPUs are. */
void sysinfo_check_host(strbuf *w);

/* The CPU's vector extensions, e.g. "avx2 avx512f avx512bw", into buf (host.h's list). */
char *sysinfo_cpu_isa(char *buf, size_t len);
/* The CPU's model name from /proc/cpuinfo ("AMD EPYC"), or "unknown", into buf. */
char *sysinfo_cpu_model(char *buf, size_t len);
/* The first CPU's model name, family, model and stepping ("AMD EPYC, family 26, model 2,
 * stepping 1": a VM may call a Zen 4 and a Zen 5 both "AMD EPYC"), into buf. */
char *sysinfo_cpu_identity(char *buf, size_t len);
/* The host's name, or "unknown", into buf. */
char *sysinfo_host_name(char *buf, size_t len);
/* "Linux 6.1.0-18-amd64 x86_64" (uname), into buf. */
char *sysinfo_os(char *buf, size_t len);

#endif
