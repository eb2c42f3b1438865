/*
 * main.c - the `pagestream` program: finds the command in the table below
 * and runs it. To add a command: write cli/cmd_x.c, declare cmd_x in
 * cli.h, add one line to cmds[].
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

struct cli_cmd_entry {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
};

static const struct cli_cmd_entry cmds[] = {
    { "pack", cmd_pack, "make a .pgs dataset from an ImageFolder directory or a list file" },
    { "inspect", cmd_inspect, "show a dataset's header, fields, counts, page fill and classes" },
    { "verify", cmd_verify, "check a dataset's structure and every page and sample checksum" },
    { "cat", cmd_cat, "write one sample's field to stdout" },
    { "bench", cmd_bench, "stream a dataset through the loader and report throughput, memory and shuffle quality" },
    { "convert", cmd_convert, "copy a .beton (or .pgs) dataset into a .pgs without re-encoding: checksums, our page size" },
    { "doctor", cmd_doctor, "time storage, decode and the whole pipeline apart; say which bounds throughput and what would help" },
};
#define NCMDS (sizeof cmds / sizeof cmds[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: pagestream COMMAND [OPTIONS] ...\n\n"
               "Feeds training jobs from paged dataset files (.pgs, FFCV .beton) on local disks,\n"
               "NFS, HTTP(S) and S3.\n\ncommands:\n");
    for (size_t i = 0; i < NCMDS; i++)
        fprintf(f, "  %-10s %s\n", cmds[i].name, cmds[i].summary);
    fprintf(f, "\n'pagestream COMMAND --help' describes a command.\n"
               "options: --help, --version\n");
}

int main(int argc, char **argv)
{
    const char *name;

    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        usage(stdout);
        return CLI_OK;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
        printf("pagestream %s\n", PS_VERSION_STRING);
        return CLI_OK;
    }
    if (strcmp(name, "help") == 0) {
        if (argc < 3) {
            usage(stdout);
            return CLI_OK;
        }
        /* "pagestream help pack" = "pagestream pack --help" */
        for (size_t i = 0; i < NCMDS; i++)
            if (strcmp(argv[2], cmds[i].name) == 0) {
                char *av[] = { argv[2], (char *)"--help", NULL };
                cli_cmd = cmds[i].name;
                return cmds[i].fn(2, av);
            }
        fprintf(stderr, "pagestream: unknown command '%s' (see pagestream --help)\n", argv[2]);
        return CLI_USAGE;
    }
    for (size_t i = 0; i < NCMDS; i++)
        if (strcmp(name, cmds[i].name) == 0) {
            cli_cmd = cmds[i].name;
            return cmds[i].fn(argc - 1, argv + 1);
        }
    fprintf(stderr, "pagestream: unknown command '%s' (see pagestream --help)\n", name);
    return CLI_USAGE;
}
