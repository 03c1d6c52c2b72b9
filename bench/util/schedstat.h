/* What the scheduler did to this process: how long its threads waited for a CPU while
 * they were runnable (Linux's run_delay, the second field of
 * /proc/self/task/<tid>/schedstat), and which other processes took the CPUs. A sample
 * during which the benchmark's threads waited is a sample of the machine's load, not
 * of the layer (README, "How it measures": contention). */
#ifndef LAYERBENCH_SCHEDSTAT_H
#define LAYERBENCH_SCHEDSTAT_H

#include <stdbool.h>
#include <stddef.h>

#define SCHED_MAX_THREADS 256

/* The schedstat files of this process's threads, open. */
typedef struct sched_probe {
    int fd[SCHED_MAX_THREADS];
    int n;
} sched_probe;

/* Opens the files of every thread alive now (OpenMP's workers exist once a parallel
 * region ran: open it after the backends started). False when the kernel has no
 * schedstat (then sched_probe_read gives -1). sched_probe_close frees it. */
bool sched_probe_open(sched_probe *p);
/* Seconds the threads have waited for a CPU since they started, summed; -1 unknown.
 * About 0.6 us per thread. */
double sched_probe_read(void *probe);
void sched_probe_close(sched_probe *p);

/* The CPU time of every other process (not this one nor its children), to name the
 * ones that took the CPUs while we measured. */
typedef struct sched_others {
    int n;
    struct sched_other {
        int pid;
        char comm[32];
        unsigned long long jiffies;
    } *v;
    double t0;
} sched_others;

/* A snapshot now; sched_others_free frees it. */
void sched_others_begin(sched_others *s);
/* Since the snapshot: the processes that used at least 5% of a CPU, busiest first, as
 * "pid 412 (python3) 97% of a CPU, pid 9 (yes) 40% of a CPU", at most three; "" when
 * none did. */
void sched_others_end(const sched_others *s, char *buf, size_t len);
void sched_others_free(sched_others *s);

#endif
