#define _GNU_SOURCE
#include "schedstat.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

bool sched_probe_open(sched_probe *p)
{
    p->n = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return false;
    struct dirent *e;
    while ((e = readdir(d)) && p->n < SCHED_MAX_THREADS) {
        if (e->d_name[0] == '.')
            continue;
        char path[300];
        snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0)
            p->fd[p->n++] = fd;
    }
    closedir(d);
    return p->n > 0 && sched_probe_read(p) >= 0;
}

double sched_probe_read(void *probe)
{
    const sched_probe *p = probe;
    unsigned long long sum = 0;
    if (!p || p->n == 0)
        return -1.0;
    for (int i = 0; i < p->n; i++) {
        char buf[128];
        ssize_t got = pread(p->fd[i], buf, sizeof buf - 1, 0);
        unsigned long long on_cpu, delay;
        if (got <= 0) /* a thread that ended: its waits no longer count */
            continue;
        buf[got] = 0;
        if (sscanf(buf, "%llu %llu", &on_cpu, &delay) != 2)
            return -1.0;
        sum += delay;
    }
    return (double)sum * 1e-9;
}

void sched_probe_close(sched_probe *p)
{
    for (int i = 0; i < p->n; i++)
        close(p->fd[i]);
    p->n = 0;
}

/* pid, ppid, command and utime + stime of /proc/<pid>/stat; false if gone. */
static bool proc_stat(int pid, int *ppid, char *comm, size_t len, unsigned long long *jiffies)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    char *open = ok ? strchr(buf, '(') : NULL, *close = ok ? strrchr(buf, ')') : NULL;
    if (!open || !close || close < open)
        return false;
    snprintf(comm, len, "%.*s", (int)(close - open - 1), open + 1);
    unsigned long long ut = 0, st = 0;
    if (sscanf(close + 2, "%*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", ppid, &ut, &st) != 3)
        return false;
    *jiffies = ut + st;
    return true;
}

void sched_others_begin(sched_others *s)
{
    memset(s, 0, sizeof *s);
    s->t0 = bench_now();
    DIR *d = opendir("/proc");
    if (!d)
        return;
    int self = getpid(), cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int pid = atoi(e->d_name), ppid;
        char comm[32];
        unsigned long long j;
        if (pid <= 0 || pid == self || !proc_stat(pid, &ppid, comm, sizeof comm, &j) || ppid == self)
            continue;
        if (s->n == cap)
            s->v = xrealloc(s->v, (size_t)(cap = cap ? 2 * cap : 256) * sizeof *s->v);
        s->v[s->n].pid = pid;
        s->v[s->n].jiffies = j;
        snprintf(s->v[s->n].comm, sizeof s->v[s->n].comm, "%s", comm);
        s->n++;
    }
    closedir(d);
}

void sched_others_end(const sched_others *s, char *buf, size_t len)
{
    double wall = bench_now() - s->t0, hz = (double)sysconf(_SC_CLK_TCK);
    int top[3] = {-1, -1, -1};
    double share[3] = {0, 0, 0};
    buf[0] = 0;
    if (wall <= 0 || hz <= 0)
        return;
    for (int i = 0; i < s->n; i++) {
        int ppid;
        char comm[32];
        unsigned long long j;
        if (!proc_stat(s->v[i].pid, &ppid, comm, sizeof comm, &j) || j < s->v[i].jiffies)
            continue;
        double used = (double)(j - s->v[i].jiffies) / hz / wall;
        for (int k = 0; k < 3; k++)
            if (used >= 0.05 && used > share[k]) {
                for (int m = 2; m > k; m--)
                    top[m] = top[m - 1], share[m] = share[m - 1];
                top[k] = i, share[k] = used;
                break;
            }
    }
    size_t off = 0;
    for (int k = 0; k < 3 && top[k] >= 0 && off < len; k++)
        off += (size_t)snprintf(buf + off, len - off, "%spid %d (%s) %.0f%% of a CPU", k ? ", " : "",
                                s->v[top[k]].pid, s->v[top[k]].comm, 100 * share[k]);
}

void sched_others_free(sched_others *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}
