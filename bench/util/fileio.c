#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool fileio_whole_int(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    if (!(*s >= '0' && *s <= '9') && !(*s == '-' && s[1] >= '0' && s[1] <= '9'))
        return false;
    long long v = strtoll(s, &end, 10);
    if (*end || errno || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

const char *fileio_limit_text(size_t limit, char *buf, size_t len)
{
    if (limit >= ((size_t)1 << 30) && limit % ((size_t)1 << 30) == 0)
        snprintf(buf, len, "%zu GiB", limit >> 30);
    else if (limit >= ((size_t)1 << 20) && limit % ((size_t)1 << 20) == 0)
        snprintf(buf, len, "%zu MiB", limit >> 20);
    else if (limit >= 1024 && limit % 1024 == 0)
        snprintf(buf, len, "%zu KiB", limit >> 10);
    else
        snprintf(buf, len, "%zu bytes", limit);
    return buf;
}

static const char *kind_of(mode_t m)
{
    return S_ISDIR(m) ? "a folder" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : S_ISCHR(m) ? "a character device"
           : S_ISBLK(m) ? "a block device" : "not a regular file";
}

static void say(char *err, size_t errlen, const char *what, const char *path, const char *fmt, const char *arg)
{
    char why[512];
    snprintf(why, sizeof why, fmt, arg);
    if (what)
        snprintf(err, errlen, "%s: '%s': %s", what, path, why);
    else
        snprintf(err, errlen, "'%s': %s", path, why);
}

int fileio_open(const char *path, size_t limit, const char *what, struct stat *st, bool *missing, char *err,
                size_t errlen)
{
    if (missing)
        *missing = false;
    if (!*path) {
        say(err, errlen, what, path, "%s", "the path is empty");
        return -1;
    }
    /* non-blocking: opening a FIFO with no writer would wait forever */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        if (missing && errno == ENOENT)
            *missing = true;
        say(err, errlen, what, path, "cannot open: %s", strerror(errno));
        return -1;
    }
    if (fstat(fd, st) != 0) {
        say(err, errlen, what, path, "cannot read it: %s", strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        say(err, errlen, what, path, "%s, not a regular file: only files are read", kind_of(st->st_mode));
        close(fd);
        return -1;
    }
    if ((uint64_t)st->st_size > (uint64_t)limit) {
        char lim[32], msg[128];
        snprintf(msg, sizeof msg, "%lld bytes, larger than the %s such a file may have", (long long)st->st_size,
                 fileio_limit_text(limit, lim, sizeof lim));
        say(err, errlen, what, path, "%s", msg);
        close(fd);
        return -1;
    }
    /* reads block from here on (a regular file never waits long) */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

bench_status fileio_read(const char *path, size_t limit, unsigned flags, const char *what, strbuf *out,
                         bool *missing, char *err, size_t errlen)
{
    struct stat st;
    bool gone = false;
    if (missing)
        *missing = false;
    int fd = fileio_open(path, limit, what, &st, &gone, err, errlen);
    if (fd < 0) {
        if (gone && (flags & FILEIO_MISSING_OK)) {
            if (missing)
                *missing = true;
            strbuf_append(out, "", 0);
            return BENCH_OK;
        }
        return BENCH_ERR_USAGE;
    }
    size_t start = out->len, want = (size_t)st.st_size;
    /* room for the size fstat gave, then whatever a growing file adds, up to the limit */
    strbuf_append(out, "", 0);
    bench_status rc = BENCH_OK;
    for (;;) {
        if (out->cap < out->len + (want ? want : 4096) + 1) {
            out->cap = out->len + (want ? want : 4096) + 1;
            out->data = xrealloc(out->data, out->cap);
        }
        ssize_t n = read(fd, out->data + out->len, out->cap - out->len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            say(err, errlen, what, path, "reading it failed: %s", strerror(errno));
            rc = BENCH_ERR_IO;
            break;
        }
        if (n == 0)
            break;
        out->len += (size_t)n;
        out->data[out->len] = 0;
        if (out->len - start > limit) {
            char lim[32];
            say(err, errlen, what, path, "it grew larger than the %s such a file may have", fileio_limit_text(limit, lim, sizeof lim));
            rc = BENCH_ERR_USAGE;
            break;
        }
        want = 0;
    }
    close(fd);
    if (rc == BENCH_OK && (flags & FILEIO_TEXT)) {
        const char *nul = memchr(out->data + start, 0, out->len - start);
        if (nul) {
            char at[32];
            snprintf(at, sizeof at, "%zu", (size_t)(nul - (out->data + start)));
            say(err, errlen, what, path, "a NUL byte at offset %s: not a text file", at);
            rc = BENCH_ERR_USAGE;
        }
    }
    if (rc != BENCH_OK) {
        out->len = start;
        out->data[start] = 0;
    }
    return rc;
}
