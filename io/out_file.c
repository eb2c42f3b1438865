/*
 * out_file.c - streaming output to a local path (a temporary name in the
 * same folder, fsync + rename on commit, unlink on abort) or to stdout ("-").
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/io.h"
#include "io/io_int.h"

#define OUT_BUF (1u << 20)

struct out_file {
    int fd;
    int is_stdout;
    int tmp_live;             /* the temporary file exists and is ours to remove */
    size_t used;
    char *buf;
    char path[4096];
    char tmp[4096 + 256];
    char dir[4096];
    char err[PS_ERRLEN];
};

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int flush(struct out_file *f)
{
    int rc;

    if (!f->used)
        return 0;
    rc = write_all(f->fd, f->buf, f->used);
    if (rc < 0)
        return ps_seterr(f->err, rc, "%s: write failed: %s", f->is_stdout ? "stdout" : f->path, ps_strerror(rc));
    f->used = 0;
    return 0;
}

/* The process umask, without changing it (umask() would race with other threads). */
static mode_t current_umask(void)
{
    char line[128];
    mode_t m = 022;
    FILE *s = fopen("/proc/self/status", "r");

    if (!s)
        return m;
    while (fgets(line, sizeof line, s))
        if (strncmp(line, "Umask:", 6) == 0) {
            m = (mode_t)strtoul(line + 6, NULL, 8);
            break;
        }
    fclose(s);
    return m;
}

static int of_open(const char *url, const struct ps_io_opts *o, void **priv, char *err)
{
    struct out_file *f;
    struct stat st;
    char copy[4096], base[4096];
    int rc;

    (void)o;
    *priv = NULL;
    if (!url || !*url)
        return ps_seterr(err, -EINVAL, "empty output path");
    if (strlen(url) >= sizeof f->path)
        return ps_seterr(err, -ENAMETOOLONG, "%.64s...: output path too long", url);
    f = calloc(1, sizeof *f);
    if (!f)
        return ps_seterr(err, -ENOMEM, "out of memory");
    f->buf = malloc(OUT_BUF);
    if (!f->buf) {
        free(f);
        return ps_seterr(err, -ENOMEM, "out of memory");
    }
    snprintf(f->path, sizeof f->path, "%s", url);
    if (strcmp(url, "-") == 0) {
        f->fd = STDOUT_FILENO;
        f->is_stdout = 1;
        *priv = f;
        return 0;
    }
    if (stat(url, &st) == 0 && S_ISDIR(st.st_mode)) {
        rc = ps_seterr(err, -EISDIR, "%s: is a directory; give a file name", url);
        goto err;
    }
    snprintf(copy, sizeof copy, "%s", url);
    snprintf(f->dir, sizeof f->dir, "%s", dirname(copy));
    snprintf(copy, sizeof copy, "%s", url);
    snprintf(base, sizeof base, "%s", basename(copy));
    /* same folder, so rename() is atomic; hidden, so a half-written file is not mistaken for a dataset */
    if (strlen(f->dir) > 4000) {
        rc = ps_seterr(err, -ENAMETOOLONG, "%.64s...: output path too long", url);
        goto err;
    }
    snprintf(f->tmp, sizeof f->tmp, "%.4000s/.%.200s.tmp.%d.XXXXXX", f->dir, base, (int)getpid());
    f->fd = mkostemp(f->tmp, O_CLOEXEC);
    if (f->fd < 0) {
        rc = -errno;
        ps_seterr(err, rc, "%s: cannot create a temporary file in %s: %s", url, f->dir, ps_strerror(rc));
        goto err;
    }
    f->tmp_live = 1;
    *priv = f;
    return 0;
err:
    free(f->buf);
    free(f);
    return rc;
}

static int of_write(void *priv, const void *buf, size_t len)
{
    struct out_file *f = priv;
    int rc;

    if (f->fd < 0)
        return ps_seterr(f->err, -EBADF, "%s: write after commit or abort", f->path);
    if (len >= OUT_BUF) {
        /* large writes skip the copy */
        if ((rc = flush(f)) < 0)
            return rc;
        rc = write_all(f->fd, buf, len);
        if (rc < 0)
            return ps_seterr(f->err, rc, "%s: write failed: %s", f->is_stdout ? "stdout" : f->path,
                             ps_strerror(rc));
        return 0;
    }
    if (f->used + len > OUT_BUF && (rc = flush(f)) < 0)
        return rc;
    memcpy(f->buf + f->used, buf, len);
    f->used += len;
    return 0;
}

static int of_commit(void *priv)
{
    struct out_file *f = priv;
    int rc, dfd;

    if (f->fd < 0)
        return ps_seterr(f->err, -EBADF, "%s: already committed or aborted", f->path);
    if ((rc = flush(f)) < 0)
        goto fail;
    if (f->is_stdout) {
        f->fd = -1;
        return 0;
    }
    if (fsync(f->fd) < 0) {
        rc = ps_seterr(f->err, -errno, "%s: fsync failed: %s", f->path, ps_strerror(-errno));
        goto fail;
    }
    /* mkstemp made it 0600; give it the mode a plain creat() would have */
    if (fchmod(f->fd, 0666 & ~current_umask()) < 0) {
        rc = ps_seterr(f->err, -errno, "%s: chmod failed: %s", f->path, ps_strerror(-errno));
        goto fail;
    }
    if (close(f->fd) < 0) {
        f->fd = -1;
        rc = ps_seterr(f->err, -errno, "%s: close failed: %s", f->path, ps_strerror(-errno));
        goto fail;
    }
    f->fd = -1;
    if (rename(f->tmp, f->path) < 0) {
        rc = ps_seterr(f->err, -errno, "%s: cannot rename the temporary file into place: %s", f->path,
                       ps_strerror(-errno));
        goto fail;
    }
    f->tmp_live = 0;
    /* the rename itself must survive a crash */
    dfd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
fail:
    if (!f->is_stdout) {
        if (f->fd >= 0)
            close(f->fd);
        f->fd = -1;
        if (f->tmp_live)
            unlink(f->tmp);
        f->tmp_live = 0;
    }
    return rc;
}

/* Only async-signal-safe calls: ps_out_abort_all runs on the way out after a signal. */
static void of_abort(void *priv)
{
    struct out_file *f = priv;

    f->used = 0;
    if (f->is_stdout) {
        f->fd = -1;
        return;
    }
    if (f->fd >= 0) {
        close(f->fd);
        f->fd = -1;
    }
    if (f->tmp_live) {
        unlink(f->tmp);
        f->tmp_live = 0;
    }
}

static const char *of_errmsg(void *priv)
{
    return ((struct out_file *)priv)->err;
}

static void of_release(void *priv)
{
    struct out_file *f = priv;
    if (!f)
        return;
    if (!f->is_stdout && f->fd >= 0)
        close(f->fd);
    if (f->tmp_live)
        unlink(f->tmp);
    free(f->buf);
    free(f);
}

const struct ps_out_ops ps_out_file_ops = {
    .name = "file",
    .open = of_open,
    .write = of_write,
    .commit = of_commit,
    .abort = of_abort,
    .errmsg = of_errmsg,
    .release = of_release,
};
