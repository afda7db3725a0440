/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers every test executable links: scratch directories that are removed
 * even when a test fails, and running a real binary (xfed, xfed-site) the way
 * a user does, collecting its exit status and output. */
#ifndef XF_TESTS_SUPPORT_H
#define XF_TESTS_SUPPORT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* Creates a fresh directory "$TMPDIR/xf-NAME-XXXXXX" (TMPDIR defaults to
 * /tmp) and writes its path to buf (n bytes). Returns 0, or -1 on failure. */
int xf_test_mkdtemp(char *buf, size_t n, const char *name);

/* Removes path and, for a directory, everything below it, without following
 * symbolic links. Missing paths are ignored. */
void xf_test_remove_tree(const char *path);

/* The outcome of one run: exit status (128 + signal number when killed),
 * everything written to stdout and stderr (NUL-terminated; owned by the run,
 * released by xf_test_run_free or the next xf_test_exec into it), and the
 * command line for messages. A zeroed struct is an empty run. */
typedef struct xf_test_run {
  char *out, *err;
  size_t out_len, err_len;
  int status;
  bool timed_out;
  char line[1024];
} xf_test_run;

typedef struct xf_test_exec_opts {
  const char *path;   /* the program to run */
  char *const *env;   /* its environment; NULL: this process's */
  const char *cwd;    /* its working directory; NULL: unchanged */
  const char *unset;  /* an environment variable removed in the child, or NULL */
  int deadline_s;     /* killed (and timed_out set) after this many seconds */
} xf_test_exec_opts;

/* Runs o->path with stdin from /dev/null and the arguments after `name`
 * (shown as argv[0]; the list ends with NULL), reading stdout and stderr
 * through pipes while it runs. Frees what r held first. Fails the current
 * cmocka test when the program cannot be started, runs past its deadline, or
 * (in a sanitized build, where the child is sanitized too) prints a
 * sanitizer report. */
void xf_test_exec(const xf_test_exec_opts *o, xf_test_run *r, const char *name, ...);
/* The same for wrappers: `first` is the first argument (NULL for none) and
 * ap holds the rest, ending with NULL. */
void xf_test_vexec(const xf_test_exec_opts *o, xf_test_run *r, const char *name,
                   const char *first, va_list ap);
/* The same with the arguments in a NULL-terminated array (at most 62). */
void xf_test_execv(const xf_test_exec_opts *o, xf_test_run *r, const char *name,
                   const char *const *args);

/* Prints the command line, stdout and stderr of r to stderr. */
void xf_test_run_show(const xf_test_run *r);

/* Sends sig to the process group of pid (a daemon started as its group's
 * leader) and waits for pid; SIGKILL to the group after timeout_s seconds,
 * and to anything left in it at the end. Returns pid's wait status, or -1
 * when it could not be waited for. */
int xf_test_stop_group(int pid, int sig, double timeout_s);
void xf_test_run_free(xf_test_run *r);

#endif
