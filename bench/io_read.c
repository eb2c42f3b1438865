/*
 * io_read.c - sequential read throughput of one object or file through
 * ps_io with N requests in flight: pagestream's side of the comparisons with
 * fio (local, EBS-like) and plain libcurl (HTTP, S3); also a byte checker.
 *
 *   io_read URL [--qd N] [--bs SIZE] [--direct] [--total SIZE] [--offset SIZE]
 *           [--time SECS] [--pread] [--no-register] [--fault SPEC] [--verify]
 *           [--endpoint URL] [--region R] [--insecure]
 *   io_read URL --dump OFF LEN [--direct] ...    bytes [OFF, OFF+LEN) to stdout
 *
 * Prints "io_read: URL backend=B MiB/s=X bytes=N secs=S qd=.. bs=.. ...".
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/io.h"

static void usage(void)
{
    fprintf(stderr,
            "usage: io_read URL [--qd N] [--bs SIZE] [--direct] [--total SIZE] [--offset SIZE] [--time SECS]\n"
            "               [--pread] [--no-register] [--fault SPEC] [--verify] [--endpoint URL] [--region R]\n"
            "               [--insecure]\n"
            "       io_read URL --dump OFF LEN [--direct] [--bs SIZE] ...\n");
    exit(2);
}

static uint64_t size_arg(const char *flag, const char *v)
{
    uint64_t x;
    if (!v || ps_parse_size(v, &x) != 0) {
        fprintf(stderr, "io_read: %s needs a size (e.g. 4M), got %s\n", flag, v ? v : "nothing");
        exit(2);
    }
    return x;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct ps_io_opts o;
    struct ps_io *io;
    struct ps_io_stats st;
    char err[PS_ERRLEN];
    const char *url = NULL;
    uint64_t bs = 1 << 20, total = 0, start = 0, dump_off = 0, dump_len = 0, size, end, next, bytes = 0;
    double secs_limit = 0, secs;
    int qd = 0, do_register = 1, verify = 0, dump = 0, vfd = -1, rc;
    unsigned char *arena, *scratch = NULL;
    struct ps_io_req *slots, *batch;
    struct ps_io_cqe *cqes;
    int *free_list, nfree, inflight = 0;
    uint64_t t0, deadline = 0;

    ps_io_opts_init(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--qd") == 0 && v) {
            qd = atoi(v);
            i++;
        } else if (strcmp(a, "--bs") == 0) {
            bs = size_arg(a, v);
            i++;
        } else if (strcmp(a, "--total") == 0) {
            total = size_arg(a, v);
            i++;
        } else if (strcmp(a, "--offset") == 0) {
            start = size_arg(a, v);
            i++;
        } else if (strcmp(a, "--time") == 0 && v) {
            secs_limit = atof(v);
            i++;
        } else if (strcmp(a, "--direct") == 0) {
            o.direct = 1;
        } else if (strcmp(a, "--pread") == 0) {
            o.uring = 0;
        } else if (strcmp(a, "--no-register") == 0) {
            do_register = 0;
        } else if (strcmp(a, "--verify") == 0) {
            verify = 1;
        } else if (strcmp(a, "--fault") == 0 && v) {
            o.fault = v;
            i++;
        } else if (strcmp(a, "--endpoint") == 0 && v) {
            o.endpoint = v;
            i++;
        } else if (strcmp(a, "--region") == 0 && v) {
            o.region = v;
            i++;
        } else if (strcmp(a, "--insecure") == 0) {
            o.insecure = 1;
        } else if (strcmp(a, "--dump") == 0 && i + 2 < argc) {
            dump = 1;
            dump_off = size_arg(a, argv[i + 1]);
            dump_len = size_arg(a, argv[i + 2]);
            i += 2;
        } else if (a[0] == '-' && a[1] == '-') {
            usage();
        } else if (!url) {
            url = a;
        } else {
            usage();
        }
    }
    if (!url || bs == 0 || qd < 0 || bs > (1ull << 30))
        usage();
    o.queue_depth = qd;

    rc = ps_io_open(url, &o, &io, err);
    if (rc < 0) {
        fprintf(stderr, "io_read: %s\n", err);
        return 1;
    }
    size = ps_io_size(io);
    qd = ps_io_depth(io);

    if (dump) {
        /* in order, one block at a time: a byte-exact copy to compare with dd/curl */
        unsigned char *b;
        if (dump_off > size || dump_len > size - dump_off) {
            fprintf(stderr, "io_read: %s: --dump %llu %llu is past the end (size %llu)\n", ps_io_name(io),
                    (unsigned long long)dump_off, (unsigned long long)dump_len, (unsigned long long)size);
            return 1;
        }
        if (posix_memalign((void **)&b, 4096, bs))
            return 1;
        for (uint64_t off = dump_off; off < dump_off + dump_len;) {
            uint64_t n = dump_off + dump_len - off < bs ? dump_off + dump_len - off : bs;
            int64_t r = ps_io_pread(io, b, n, off);
            if (r < 0) {
                fprintf(stderr, "io_read: %s\n", ps_io_errmsg(io)[0] ? ps_io_errmsg(io) : ps_strerror((int)r));
                return 1;
            }
            if (write_all(1, (const char *)b, (size_t)n) < 0) {
                fprintf(stderr, "io_read: stdout: %s\n", strerror(errno));
                return 1;
            }
            off += n;
        }
        free(b);
        ps_io_close(io);
        return 0;
    }

    if (start > size) {
        fprintf(stderr, "io_read: %s: --offset %llu is past the end (size %llu)\n", ps_io_name(io),
                (unsigned long long)start, (unsigned long long)size);
        return 1;
    }
    if (total == 0 || total > size - start)
        total = size - start;
    if (total == 0) {
        fprintf(stderr, "io_read: %s: nothing to read (size %llu)\n", ps_io_name(io), (unsigned long long)size);
        return 1;
    }
    end = start + total;
    if (verify) {
        const char *path = strncmp(url, "file://", 7) == 0 ? url + 7 : url;
        if (strstr(url, "://") && strncmp(url, "file://", 7) != 0) {
            fprintf(stderr, "io_read: --verify compares with pread(2): it needs a local file\n");
            return 2;
        }
        vfd = open(path, O_RDONLY);
        scratch = malloc(bs);
        if (vfd < 0 || !scratch) {
            fprintf(stderr, "io_read: %s: %s\n", path, strerror(errno));
            return 1;
        }
    }
    if (posix_memalign((void **)&arena, 4096, (size_t)qd * bs)) {
        fprintf(stderr, "io_read: cannot allocate %d x %llu bytes\n", qd, (unsigned long long)bs);
        return 1;
    }
    memset(arena, 0, (size_t)qd * bs); /* fault the pages in before timing */
    if (do_register)
        ps_io_register_buffers(io, arena, (size_t)qd * bs);
    slots = calloc((size_t)qd, sizeof *slots);
    batch = calloc((size_t)qd, sizeof *batch);
    cqes = calloc((size_t)qd, sizeof *cqes);
    free_list = calloc((size_t)qd, sizeof *free_list);
    for (int i = 0; i < qd; i++)
        free_list[i] = i;
    nfree = qd;

    t0 = ps_now_ns();
    if (secs_limit > 0)
        deadline = t0 + (uint64_t)(secs_limit * 1e9);
    next = start;
    for (;;) {
        int nb = 0, n;
        int more = deadline ? ps_now_ns() < deadline : next < end;
        while (more && nfree > 0 && nb < nfree) {
            int s = free_list[nfree - 1 - nb];
            uint64_t len;
            if (next >= end) {
                if (!deadline)
                    break;
                next = start; /* --time: go round again */
            }
            len = end - next < bs ? end - next : bs;
            slots[s] = (struct ps_io_req){ .offset = next, .length = len, .buf = arena + (size_t)s * bs,
                                           .cookie = (uint64_t)s };
            batch[nb++] = slots[s];
            next += len;
        }
        if (nb) {
            n = ps_io_submit(io, batch, nb);
            if (n < 0) {
                fprintf(stderr, "io_read: %s\n", ps_io_errmsg(io)[0] ? ps_io_errmsg(io) : ps_strerror(n));
                return 1;
            }
            /* what was not accepted goes again next time */
            if (n < nb)
                next = batch[n].offset;
            nfree -= n;
            inflight += n;
        }
        if (inflight == 0)
            break;
        n = ps_io_reap(io, cqes, qd, 1, -1);
        if (n < 0) {
            fprintf(stderr, "io_read: %s\n", ps_io_errmsg(io)[0] ? ps_io_errmsg(io) : ps_strerror(n));
            return 1;
        }
        for (int i = 0; i < n; i++) {
            int s = (int)cqes[i].cookie;
            const struct ps_io_req *r = &slots[s];
            if (cqes[i].res < 0) {
                fprintf(stderr, "io_read: %s\n",
                        ps_io_errmsg(io)[0] ? ps_io_errmsg(io) : ps_strerror((int)cqes[i].res));
                return 1;
            }
            bytes += (uint64_t)cqes[i].res;
            if (verify) {
                ssize_t got = pread(vfd, scratch, r->length, (off_t)r->offset);
                if (got != (ssize_t)r->length || memcmp(scratch, r->buf, r->length) != 0) {
                    fprintf(stderr, "io_read: %s: bytes at %llu (+%llu) differ from pread(2)\n", ps_io_name(io),
                            (unsigned long long)r->offset, (unsigned long long)r->length);
                    return 1;
                }
            }
            free_list[nfree++] = s;
            inflight--;
        }
    }
    secs = (double)(ps_now_ns() - t0) / 1e9;
    ps_io_stats(io, &st);
    printf("io_read: %s backend=%s MiB/s=%.1f bytes=%llu secs=%.3f qd=%d bs=%llu direct=%d retries=%llu "
           "faults=%llu%s\n",
           ps_io_name(io), ps_io_backend(io), (double)bytes / (1 << 20) / (secs > 0 ? secs : 1e-9),
           (unsigned long long)bytes, secs, qd, (unsigned long long)bs, o.direct,
           (unsigned long long)st.retries, (unsigned long long)st.faults, verify ? " verified=yes" : "");
    ps_io_close(io);
    if (vfd >= 0)
        close(vfd);
    free(scratch);
    free(arena);
    free(slots);
    free(batch);
    free(cqes);
    free(free_list);
    return 0;
}
