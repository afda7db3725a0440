/* SPDX-License-Identifier: Apache-2.0 */
/* The command-line dispatcher every xfed program (xfed, xfed-site,
 * xfed-coord) is built on: one table of NOUN VERB commands, shared option
 * handling, and the rules every command follows for output and exit status.
 * It knows no program's commands: each program passes its own table. */
#ifndef XF_CMD_CMD_H
#define XF_CMD_CMD_H

#include <stdbool.h>
#include <stdio.h>

#include "base/result.h"

/* Exit statuses of every xfed command (PRODUCT.md "CLI conventions"). */
enum {
  XF_EXIT_OK = 0,
  XF_EXIT_ERROR = 1,
  XF_EXIT_USAGE = 2,
  XF_EXIT_DENIED = 3
};

/* What the dispatcher hands a command. */
typedef struct xf_cli {
  const char *prog; /* "xfed" */
  const char *name; /* "data split" */
  bool json;        /* --json: one JSON document on stdout, nothing else there */
  xf_errctx err;    /* filled by the modules the command calls */
} xf_cli;

/* A command gets its own arguments (argv[0] is the command's name, global
 * flags already removed) and returns an exit status. */
typedef int (*xf_cmd_fn)(xf_cli *cli, int argc, char **argv);

typedef struct xf_cmd {
  const char *noun;
  const char *verb;    /* NULL for a one-word command such as `xfed train` */
  const char *summary; /* one line for `xfed --help` */
  const char *usage;   /* the full --help text: synopsis, options, examples */
  xf_cmd_fn run;
} xf_cmd;

/* A program built on the dispatcher: its name, one paragraph about it for
 * `PROG --help`, its exit statuses in words, and its command table. */
typedef struct xf_cli_program {
  const char *prog;
  const char *about;
  const char *exit_statuses;
  const xf_cmd *commands; /* terminated by an entry with noun NULL */
  /* Flags with a value that may also stand before NOUN ("xfed --coordinator
   * H:P job list"), moved after the command's name for it to parse; NULL
   * or NULL-terminated. */
  const char *const *leading_flags;
} xf_cli_program;

/* The whole of a program's main: removes --json wherever it stands, moves
 * the program's leading flags that stand before NOUN to after the command's
 * name, prints
 * the overview for no arguments or --help (exit 2 or 0), the verbs of a noun,
 * or a command's usage when --help follows it (before any "--"), refuses
 * unknown nouns and verbs as usage errors, and otherwise runs the command
 * with argv[0] set to its name. Returns the exit status. */
int xf_cli_main(const xf_cli_program *p, int argc, char **argv);

/* Prints "PROG NAME: <error context>" to stderr (and, with --json, an
 * {"error": {...}} object to stdout) and returns the exit status for rc:
 * XF_EXIT_USAGE for XF_EUSAGE, XF_EXIT_DENIED for XF_EDENIED, else
 * XF_EXIT_ERROR. Uses cli->err when its code is rc, else xf_strerror(rc). */
int xf_cli_fail(xf_cli *cli, xf_err rc);

/* Like xf_cli_fail for a request the coordinator refused to this
 * certificate (cli->err holds its words): an authorization refusal, not a
 * policy decision, so it says "not authorized" and returns XF_EXIT_ERROR. */
int xf_cli_fail_unauthorized(xf_cli *cli);

/* Prints a usage error ("PROG NAME: MSG; see 'PROG NAME --help'"; NAME may be NULL
 * before a command is known) to stderr
 * (and, with --json, an {"error": {...}} object with code XF_EUSAGE to
 * stdout) and returns XF_EXIT_USAGE. */
int xf_cli_usage(xf_cli *cli, const char *fmt, ...) XF_PRINTF(2, 3);

/* Reports what getopt_long returned for a bad option (':' for a missing
 * value, '?' for an unknown option; run it with opterr = 0 and a leading ':'
 * in the option string) as a usage error naming the option, with the
 * nearest of opts (the table given to getopt_long; may be NULL) as a "did
 * you mean" hint for a misspelt long option, and returns XF_EXIT_USAGE. */
struct option;
int xf_cli_option_error(xf_cli *cli, int ch, char **argv, const struct option *opts);

/* Strict number parsing for flags: the whole string must be a number within
 * [min, max]; otherwise a usage error naming the flag. */
xf_err xf_cli_parse_int(xf_cli *cli, const char *flag, const char *s, long min, long max,
                        long *out) XF_WARN_UNUSED;
xf_err xf_cli_parse_double(xf_cli *cli, const char *flag, const char *s, double min,
                           double max, double *out) XF_WARN_UNUSED;

/* A point in time for flags such as --since: Unix seconds ("1700000000",
 * "1700000000.5") or an ISO 8601 UTC time ("2024-05-01", "2024-05-01T12:00Z",
 * "2024-05-01T12:00:00Z"; the Z may be left out, no other offset is taken).
 * Anything else is a usage error naming the flag. */
xf_err xf_cli_parse_time(xf_cli *cli, const char *flag, const char *s,
                         double *out) XF_WARN_UNUSED;

/* True when stderr is a terminal (progress lines are redrawn in place). */
bool xf_cli_interactive(void);

/* Prints a --json document on stdout, indented, with a newline, and
 * releases it (takes the reference; NULL prints nothing). */
struct json_t;
void xf_cli_print_json(struct json_t *o);

/* "2024-05-01T12:00:00Z" for Unix seconds t, in buf (returned); the number
 * itself when t is not a time gmtime can write. */
const char *xf_cli_utc_text(double t, char buf[32]);

#endif
