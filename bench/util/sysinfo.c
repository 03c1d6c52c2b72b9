#define _GNU_SOURCE
#include "sysinfo.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "host.h"

#ifndef LAYERBENCH_BUILD_TYPE
#define LAYERBENCH_BUILD_TYPE "unknown"
#endif

/* Total and idle jiffies of all CPUs, from /proc/stat; false if unreadable. */
static bool cpu_times(unsigned long long *total, unsigned long long *idle)
{
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[10] = {0};
    bool ok = f && fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                          &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]) >= 4;
    if (f)
        fclose(f);
    *total = *idle = 0;
    for (int i = 0; i < 8; i++) /* guest times are already in user and nice */
        *total += v[i];
    *idle = v[3] + v[4];
    return ok;
}

/* This process's own CPU time in jiffies (utime + stime of /proc/self/stat). */
static unsigned long long self_jiffies(void)
{
    FILE *f = fopen("/proc/self/stat", "r");
    char buf[1024];
    unsigned long long ut = 0, st = 0;
    if (f && fgets(buf, sizeof buf, f)) {
        const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
        if (p)
            sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st);
    }
    if (f)
        fclose(f);
    return ut + st;
}

void sysinfo_check_host(strbuf *w)
{
    const char *type = LAYERBENCH_BUILD_TYPE;
    if (strcmp(type, "Release") != 0 && strcmp(type, "RelWithDebInfo") != 0)
        strbuf_printf(w, "this is a %s build: layerbench's own loops run unoptimised (configure with "
                         "-DCMAKE_BUILD_TYPE=Release)\n", type);
#ifdef __SANITIZE_ADDRESS__
    strbuf_printf(w, "this build has AddressSanitizer: every memory access is checked and slower\n");
#endif
    /* libgomp ignores an OMP_WAIT_POLICY it cannot read, and bench leaves its thread
     * pool's spinning alone where the variable is set at all (main.c) */
    const char *policy = getenv("OMP_WAIT_POLICY");
    if (policy && strcasecmp(policy, "active") != 0 && strcasecmp(policy, "passive") != 0) {
        strbuf vis = {0};
        strbuf_visible(&vis, policy, false);
        strbuf_printf(w, "OMP_WAIT_POLICY='%.40s' is neither ACTIVE nor PASSIVE: libgomp ignores it, and because it "
                         "is set bench leaves GOMP_SPINCOUNT at libgomp's default (unset it, or give ACTIVE or "
                         "PASSIVE)\n", vis.data);
        strbuf_free(&vis);
    }
    /* the frequency governor of every CPU that has one */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN), other = 0;
    char first[64] = "";
    for (long i = 0; i < cpus; i++) {
        char path[96], gov[64] = "";
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/cpufreq/scaling_governor", i);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(gov, sizeof gov, f))
            gov[strcspn(gov, "\n")] = 0;
        fclose(f);
        if (*gov && strcmp(gov, "performance") != 0) {
            other++;
            snprintf(first, sizeof first, "%s", gov);
        }
    }
    if (other)
        strbuf_printf(w, "CPU frequency scaling: %ld of %ld CPUs use the '%s' governor, not 'performance'; clocks "
                         "may change while layers are timed\n", other, cpus, first);
    /* how busy the CPUs are while this process waits */
    unsigned long long t0, i0, t1, i1, s0 = self_jiffies();
    if (cpu_times(&t0, &i0)) {
        usleep(200000);
        unsigned long long s1 = self_jiffies();
        if (cpu_times(&t1, &i1) && t1 > t0) {
            double busy = (double)((t1 - t0) - (i1 - i0) - (s1 - s0)) / (double)(t1 - t0);
            if (busy > 0.10)
                strbuf_printf(w, "the machine is busy: other processes used %.0f%% of the CPUs' time just before the "
                                 "run; figures will be slower and noisier than on a quiet machine\n", 100 * busy);
        }
    }
}

char *sysinfo_cpu_isa(char *buf, size_t len) { return host_isa_list(buf, len); }

/* The value of a field of the first CPU's block of /proc/cpuinfo ("model name"), into
 * buf; "" where it has none. */
static void cpuinfo_field(const char *field, char *buf, size_t len)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    buf[0] = 0;
    while (f && fgets(line, sizeof line, f) && strcmp(line, "\n") != 0) { /* the first CPU's block */
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        size_t key = (size_t)(colon - line);
        while (key && (line[key - 1] == ' ' || line[key - 1] == '\t'))
            key--;
        if (strlen(field) == key && strncmp(line, field, key) == 0) {
            snprintf(buf, len, "%.*s", (int)strcspn(colon + 1 + (colon[1] == ' '), "\n"), colon + 1 + (colon[1] == ' '));
            break;
        }
    }
    if (f)
        fclose(f);
}

char *sysinfo_cpu_model(char *buf, size_t len)
{
    cpuinfo_field("model name", buf, len);
    if (!*buf)
        snprintf(buf, len, "unknown");
    return buf;
}

char *sysinfo_cpu_identity(char *buf, size_t len)
{
    char model[160], family[32], number[32], stepping[32];
    sysinfo_cpu_model(model, sizeof model);
    cpuinfo_field("cpu family", family, sizeof family);
    cpuinfo_field("model", number, sizeof number);
    cpuinfo_field("stepping", stepping, sizeof stepping);
    snprintf(buf, len, "%s, family %s, model %s, stepping %s", model, family, number, stepping);
    return buf;
}

char *sysinfo_host_name(char *buf, size_t len)
{
    snprintf(buf, len, "unknown");
    if (len > 1)
        gethostname(buf, len - 1);
    return buf;
}

char *sysinfo_os(char *buf, size_t len)
{
    struct utsname un;
    if (uname(&un) != 0)
        snprintf(buf, len, "unknown");
    else
        snprintf(buf, len, "%s %s %s", un.sysname, un.release, un.machine);
    return buf;
}
