#define _GNU_SOURCE
#include "output.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bench_status refuse(char *err, size_t errlen, const char *path, const char *why)
{
    snprintf(err, errlen, "cannot write '%s': %s", path, why);
    return BENCH_ERR_USAGE;
}

/* Temporary files "<base>.tmp.<pid>" of processes that no longer run (killed while
 * writing) are removed. */
static void remove_stale_temporaries(const char *target)
{
    char *copy_d = xstrdup(target), *copy_b = xstrdup(target);
    const char *dir = dirname(copy_d), *base = basename(copy_b);
    size_t blen = strlen(base);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, base, blen) != 0 || strncmp(e->d_name + blen, ".tmp.", 5) != 0)
            continue;
        char *end;
        long pid = strtol(e->d_name + blen + 5, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char *stale = xasprintf("%s/%s", dir, e->d_name);
        unlink(stale);
        free(stale);
    }
    if (d)
        closedir(d);
    free(copy_d), free(copy_b);
}

bench_status bench_output_open(bench_output *o, const char *path, const char *const *inputs, char *err,
                               size_t errlen)
{
    memset(o, 0, sizeof *o);
    if (!*path)
        return refuse(err, errlen, path, "the path is empty");
    if (strcmp(path, "-") == 0) {
        o->path = xstrdup(path);
        o->is_stdout = true;
        o->direct = stdout;
        return BENCH_OK;
    }
    struct stat st;
    bool exists = stat(path, &st) == 0;
    if (!exists && errno != ENOENT)
        return refuse(err, errlen, path, strerror(errno));
    for (int i = 0; exists && inputs && inputs[i]; i++) {
        struct stat in;
        if (stat(inputs[i], &in) == 0 && in.st_dev == st.st_dev && in.st_ino == st.st_ino)
            return refuse(err, errlen, path, "it is the config being read");
    }
    if (exists && S_ISDIR(st.st_mode))
        return refuse(err, errlen, path, "it is a directory");
    if (exists && !S_ISREG(st.st_mode)) { /* a device, a FIFO: written in place */
        if (access(path, W_OK) != 0)
            return refuse(err, errlen, path, strerror(errno));
        o->path = xstrdup(path);
        return BENCH_OK;
    }
    struct stat lst;
    if (!exists && lstat(path, &lst) == 0) { /* a dangling symbolic link: create what it names, in place */
        o->path = xstrdup(path);
        return BENCH_OK;
    }
    char *target = exists ? realpath(path, NULL) : xstrdup(path);
    if (!target)
        return refuse(err, errlen, path, strerror(errno));
    if (exists && access(target, W_OK) != 0) {
        bench_status s = refuse(err, errlen, path, strerror(errno));
        free(target);
        return s;
    }
    char *copy = xstrdup(target);
    const char *dir = dirname(copy);
    struct stat dst;
    if (stat(dir, &dst) != 0 || !S_ISDIR(dst.st_mode) || access(dir, W_OK | X_OK) != 0) {
        char why[300];
        snprintf(why, sizeof why, "its folder '%s' %s", dir,
                 stat(dir, &dst) != 0 ? "does not exist" : !S_ISDIR(dst.st_mode) ? "is not a folder" : "is not writable");
        free(copy), free(target);
        return refuse(err, errlen, path, why);
    }
    free(copy);
    if (exists) {
        o->mode = st.st_mode & 07777;
    } else {
        mode_t mask = umask(0);
        umask(mask);
        o->mode = 0666 & ~mask;
    }
    o->path = xstrdup(path);
    o->target = target;
    remove_stale_temporaries(target);
    return BENCH_OK;
}

static bench_status write_all(int fd, const char *data, size_t len)
{
    while (len) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return BENCH_ERR_IO;
        data += n, len -= (size_t)n;
    }
    return BENCH_OK;
}

bench_status bench_output_write(bench_output *o, const char *data, size_t len, char *err, size_t errlen)
{
    if (!o->target) {
        if (!o->direct && !(o->direct = fopen(o->path, "w"))) {
            snprintf(err, errlen, "cannot write '%s': %s", o->path, strerror(errno));
            return BENCH_ERR_IO;
        }
        if (len > o->written && fwrite(data + o->written, 1, len - o->written, o->direct) != len - o->written) {
            snprintf(err, errlen, "writing '%s' failed: %s", o->path, strerror(errno));
            return BENCH_ERR_IO;
        }
        if (fflush(o->direct) != 0) {
            snprintf(err, errlen, "writing '%s' failed: %s", o->path, strerror(errno));
            return BENCH_ERR_IO;
        }
        o->written = len > o->written ? len : o->written;
        return BENCH_OK;
    }
    char *tmp = xasprintf("%s.tmp.%ld", o->target, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    bench_status st = fd < 0 ? BENCH_ERR_IO : write_all(fd, data, len);
    if (st == BENCH_OK && (fchmod(fd, o->mode) != 0 || fsync(fd) != 0))
        st = BENCH_ERR_IO;
    int saved = errno;
    if (fd >= 0 && close(fd) != 0 && st == BENCH_OK)
        st = BENCH_ERR_IO, saved = errno;
    if (st == BENCH_OK && rename(tmp, o->target) != 0)
        st = BENCH_ERR_IO, saved = errno;
    if (st != BENCH_OK) {
        snprintf(err, errlen, "writing '%s' failed: %s", o->path, strerror(saved));
        unlink(tmp);
    }
    free(tmp);
    return st;
}

void bench_output_close(bench_output *o)
{
    if (o->direct && !o->is_stdout)
        fclose(o->direct);
    free(o->path);
    free(o->target);
    memset(o, 0, sizeof *o);
}
