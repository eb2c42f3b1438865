/*
 * cmd_cat.c - `pagestream cat FILE INDEX [--field NAME]`: one sample's field
 * to stdout (bytes as stored; int and float fields as text), after checking
 * the sample's checksum.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

static const char usage_text[] =
    "usage: pagestream cat FILE|URL INDEX [--field NAME] [storage options]\n\n"
    "Writes field NAME of sample INDEX (0-based, in file order) to stdout: the bytes as\n"
    "stored for jpeg/raw/bytes fields (a JPEG file, raw RGB pixels), a line of text for\n"
    "int and float fields. The sample's checksum is checked first.\n\n"
    "  --field NAME        which field (default: the image field, else the label)\n"
    "  -h, --help          this text\n\n" CLI_READ_HELP;

static int write_all(const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(STDOUT_FILENO, p, n);
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

int cmd_cat(int argc, char **argv)
{
    static const struct option lo[] = { { "field", required_argument, NULL, 'f' },
                                         { "help", no_argument, NULL, 'h' }, CLI_READ_LONGOPTS,
                                         { NULL, 0, NULL, 0 } };
    struct ps_io_opts io_opts;
    struct ps_io *io = NULL;
    struct ps_dataset *ds = NULL;
    const char *field = NULL;
    uint8_t *buf = NULL;
    uint64_t index;
    int c, rc, f = -1;

    ps_io_opts_init(&io_opts);
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hf:", lo, NULL)) != -1) {
        switch (c) {
        case 'f': field = optarg; break;
        case 'h': fputs(usage_text, stdout); return CLI_OK;
        default:
            rc = cli_read_opt(c, optarg, &io_opts);
            if (rc == 1)
                break;
            return rc == CLI_USAGE ? rc : cli_bad_option(argv);
        }
    }
    if (argc - optind != 2)
        return cli_usage_error("expected FILE and INDEX");
    if ((rc = cli_uint("INDEX", argv[optind + 1], UINT64_MAX, &index)))
        return rc;
    if ((rc = cli_open_dataset(argv[optind], &io_opts, &io, &ds)))
        return rc;
    rc = CLI_FAIL;
    if (index >= ds->nsamples) {
        cli_error("%s: sample %" PRIu64 " does not exist (%" PRIu64 " samples, 0-based)", ds->name, index,
                  ds->nsamples);
        goto out;
    }
    if (field) {
        for (uint32_t k = 0; k < ds->nfields; k++)
            if (strcmp(ds->fields[k].name, field) == 0)
                f = (int)k;
        if (f < 0) {
            char names[PS_MAX_FIELDS * (PS_FIELD_NAME + 2)] = "";
            size_t used = 0;
            for (uint32_t k = 0; k < ds->nfields && used < sizeof names; k++)
                used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", k ? ", " : "",
                                         ds->fields[k].name);
            cli_error("%s: no field '%s' (fields: %s)", ds->name, field, names);
            rc = CLI_USAGE;
            goto out;
        }
    } else {
        f = ds->image_field >= 0 ? ds->image_field : ds->label_field >= 0 ? ds->label_field : 0;
    }

    const struct ps_ds_value *v = &ds->values[index * ds->nfields + (uint32_t)f];
    int type = ds->fields[f].type;
    if (type == PS_F_INT) {
        printf("%" PRId64 "\n", v->v.i);
        rc = CLI_OK;
        goto out;
    }
    if (type == PS_F_FLOAT) {
        printf("%.17g\n", v->v.f);
        rc = CLI_OK;
        goto out;
    }

    /* read the whole sample (aligned, so --direct works) and check it before writing any of it */
    const struct ps_ds_sample *s = &ds->samples[index];
    uint64_t start = s->off & ~(uint64_t)4095, end = (s->off + s->len + 4095) & ~(uint64_t)4095;
    if (end > ds->file_size)
        end = ds->file_size;
    if (posix_memalign((void **)&buf, 4096, end - start + 1)) {
        cli_error("out of memory for %" PRIu64 " bytes", end - start);
        goto out;
    }
    int64_t n = ps_io_pread(io, buf, end - start, start);
    if (n < 0 || (uint64_t)n != end - start) {
        const char *m = ps_io_errmsg(io);
        cli_error("%s: sample %" PRIu64 ": read failed: %s", ds->name, index,
                  *m ? m : ps_strerror(n < 0 ? (int)n : -EIO));
        goto out;
    }
    const uint8_t *sb = buf + (s->off - start);
    if (ps_ds_check_sample(ds, index, sb) != 0) {
        cli_error("%s: sample %" PRIu64 " (page %u): checksum mismatch", ds->name, index, s->page);
        goto out;
    }
    if ((rc = write_all(sb + v->off, v->len)) < 0) {
        cli_error("writing to stdout: %s", ps_strerror(rc));
        rc = CLI_FAIL;
        goto out;
    }
    rc = CLI_OK;
out:
    free(buf);
    ps_ds_close(ds);
    ps_io_close(io);
    return rc;
}
