#define _GNU_SOURCE
#include "output.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static bench_status refuse(char *err, size_t errlen, const char *path, const char *why)
{
    snprintf(err, errlen, "cannot write '%s': %s", path, why);
    return BENCH_ERR_USAGE;
}

/* Temporary files "<base>.tmp.<pid>[.<suffix>]" of processes that no longer run (killed
 * while writing) are removed: regular files of this user only, never what a link names. */
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
        if ((*end && *end != '.') || pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            st.st_uid == geteuid())
            unlinkat(dirfd(d), e->d_name, 0);
    }
    if (d)
        closedir(d);
    free(copy_d), free(copy_b);
}

static char *identity_of(const struct stat *st, const char *leaf)
{
    return leaf ? xasprintf("%llu:%llu/%s", (unsigned long long)st->st_dev, (unsigned long long)st->st_ino, leaf)
                : xasprintf("%llu:%llu", (unsigned long long)st->st_dev, (unsigned long long)st->st_ino);
}

bool bench_output_same(const bench_output *a, const bench_output *b)
{
    return a->identity && b->identity && strcmp(a->identity, b->identity) == 0;
}

/* path names the file stdout writes to (/dev/stdout, /proc/self/fd/1, or the file a shell
 * redirected stdout to): replacing it would lose what stdout wrote into it, and opening
 * it again would truncate it. */
static bool is_our_stdout(const struct stat *st)
{
    struct stat out;
    return fstat(STDOUT_FILENO, &out) == 0 && out.st_dev == st->st_dev && out.st_ino == st->st_ino;
}

bench_status bench_output_open(bench_output *o, const char *path, const char *const *inputs, char *err,
                               size_t errlen)
{
    memset(o, 0, sizeof *o);
    if (!*path)
        return refuse(err, errlen, path, "the path is empty");
    struct stat st;
    bool exists = strcmp(path, "-") != 0 && stat(path, &st) == 0;
    if (strcmp(path, "-") == 0 || (exists && is_our_stdout(&st))) {
        o->path = xstrdup(path);
        o->is_stdout = true;
        o->direct = stdout;
        struct stat out;
        o->identity = fstat(STDOUT_FILENO, &out) == 0 && S_ISREG(out.st_mode) ? identity_of(&out, NULL)
                                                                               : xstrdup("stdout");
        return BENCH_OK;
    }
    if (!exists && errno != ENOENT)
        return refuse(err, errlen, path, strerror(errno));
    for (int i = 0; exists && inputs && inputs[i]; i++) {
        struct stat in;
        if (stat(inputs[i], &in) == 0 && in.st_dev == st.st_dev && in.st_ino == st.st_ino)
            return refuse(err, errlen, path, "it is the config being read");
    }
    if (exists && S_ISDIR(st.st_mode))
        return refuse(err, errlen, path, "it is a directory");
    if (exists && !S_ISREG(st.st_mode)) { /* a device, a FIFO: a stream */
        if (access(path, W_OK) != 0)
            return refuse(err, errlen, path, strerror(errno));
        o->path = xstrdup(path);
        o->identity = identity_of(&st, NULL);
        return BENCH_OK;
    }
    struct stat lst;
    if (!exists && lstat(path, &lst) == 0) /* a link to nothing: writing would go through it */
        return refuse(err, errlen, path, "it is a symbolic link to a file that does not exist (give the file itself)");
    /* the folder, resolved: the file's identity when it does not exist yet is its folder's
     * and its name */
    char *copy = xstrdup(path), *leaf_copy = xstrdup(path);
    const char *leaf = basename(leaf_copy);
    char *dir = exists ? NULL : realpath(dirname(copy), NULL);
    free(copy);
    char *target = exists ? realpath(path, NULL) : dir ? xasprintf("%s%s%s", dir, strcmp(dir, "/") ? "/" : "", leaf) : NULL;
    if (!target) {
        char why[PATH_MAX + 64], *folder = xstrdup(path);
        snprintf(why, sizeof why, "its folder '%s' %s", dirname(folder), errno == ENOENT ? "does not exist" : strerror(errno));
        free(folder), free(dir), free(leaf_copy);
        return refuse(err, errlen, path, why);
    }
    if (exists && access(target, W_OK) != 0) {
        bench_status s = refuse(err, errlen, path, strerror(errno));
        free(target), free(dir), free(leaf_copy);
        return s;
    }
    char *tcopy = xstrdup(target);
    const char *tdir = dirname(tcopy);
    struct stat dst;
    if (stat(tdir, &dst) != 0 || !S_ISDIR(dst.st_mode) || access(tdir, W_OK | X_OK) != 0) {
        char why[PATH_MAX + 64];
        snprintf(why, sizeof why, "its folder '%s' %s", tdir,
                 stat(tdir, &dst) != 0 ? "does not exist" : !S_ISDIR(dst.st_mode) ? "is not a folder" : "is not writable");
        free(tcopy), free(target), free(dir), free(leaf_copy);
        return refuse(err, errlen, path, why);
    }
    if (!strcmp(leaf, ".") || !strcmp(leaf, "..") || !strcmp(leaf, "/")) {
        free(tcopy), free(target), free(dir), free(leaf_copy);
        return refuse(err, errlen, path, "it is a directory");
    }
    o->identity = exists ? identity_of(&st, NULL) : identity_of(&dst, leaf);
    free(tcopy), free(dir), free(leaf_copy);
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

/* A new temporary file beside target, created here and nowhere else: O_EXCL fails on
 * anything already at the name, a link included. Its descriptor, its name in *tmp. */
static int create_temporary(const char *target, char **tmp)
{
    static unsigned counter;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    for (int attempt = 0; attempt < 64; attempt++) {
        unsigned long r = (unsigned long)now.tv_nsec * 2654435761u ^ (unsigned long)(++counter) * 40503u ^
                          (unsigned long)attempt * 97u;
        *tmp = xasprintf("%s.tmp.%ld.%06lx", target, (long)getpid(), r & 0xffffff);
        int fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            return fd;
        free(*tmp);
        *tmp = NULL;
    }
    errno = EEXIST;
    return -1;
}

static bench_status stream_write(bench_output *o, const char *data, size_t len, char *err, size_t errlen)
{
    if (!o->direct && !(o->direct = fopen(o->path, "w"))) {
        snprintf(err, errlen, "cannot write '%s': %s", o->path, strerror(errno));
        return BENCH_ERR_IO;
    }
    if (len && fwrite(data, 1, len, o->direct) != len) {
        snprintf(err, errlen, "writing '%s' failed: %s", o->path, strerror(errno));
        return BENCH_ERR_IO;
    }
    if (fflush(o->direct) != 0) {
        snprintf(err, errlen, "writing '%s' failed: %s", o->path, strerror(errno));
        return BENCH_ERR_IO;
    }
    return BENCH_OK;
}

bench_status bench_output_write(bench_output *o, const char *data, size_t len, char *err, size_t errlen)
{
    if (!o->target && !o->append) { /* a stream of one document: kept for the end */
        free(o->pending);
        o->pending = xmalloc(len + 1);
        memcpy(o->pending, data, len);
        o->pending[len] = 0;
        o->pending_len = len;
        return BENCH_OK;
    }
    if (!o->target) {
        if (len <= o->written)
            return BENCH_OK;
        bench_status st = stream_write(o, data + o->written, len - o->written, err, errlen);
        if (st == BENCH_OK)
            o->written = len;
        return st;
    }
    char *tmp = NULL;
    int fd = create_temporary(o->target, &tmp);
    int saved = errno;
    bench_status st = fd < 0 ? BENCH_ERR_IO : write_all(fd, data, len);
    if (fd >= 0)
        saved = errno;
    if (st == BENCH_OK && (fchmod(fd, o->mode) != 0 || fsync(fd) != 0))
        st = BENCH_ERR_IO, saved = errno;
    if (fd >= 0 && close(fd) != 0 && st == BENCH_OK)
        st = BENCH_ERR_IO, saved = errno;
    if (st == BENCH_OK && rename(tmp, o->target) != 0)
        st = BENCH_ERR_IO, saved = errno;
    if (st != BENCH_OK) {
        snprintf(err, errlen, "writing '%s' failed: %s", o->path, strerror(saved));
        if (tmp)
            unlink(tmp);
    }
    free(tmp);
    return st;
}

bench_status bench_output_commit(bench_output *o, char *err, size_t errlen)
{
    if (o->target || o->append || !o->pending)
        return BENCH_OK;
    bench_status st = stream_write(o, o->pending, o->pending_len, err, errlen);
    free(o->pending);
    o->pending = NULL, o->pending_len = 0;
    return st;
}

void bench_output_close(bench_output *o)
{
    if (o->direct && !o->is_stdout)
        fclose(o->direct);
    free(o->path);
    free(o->target);
    free(o->identity);
    free(o->pending);
    memset(o, 0, sizeof *o);
}
