/* SPDX-License-Identifier: Apache-2.0 */
/* Scratch directories and program runs for tests. */
#include "support.h"

#include "base/alloc.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int xf_test_mkdtemp(char *buf, size_t n, const char *name) {
  const char *base = getenv("TMPDIR");
  int w = snprintf(buf, n, "%s/xf-%s-XXXXXX", base && *base ? base : "/tmp", name);
  if (w < 0 || (size_t)w >= n) return -1;
  return mkdtemp(buf) ? 0 : -1;
}

void xf_test_remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    if (d) {
      struct dirent *e;
      while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char child[4096];
        snprintf(child, sizeof(child), "%s/%s", path, e->d_name);
        xf_test_remove_tree(child);
      }
      closedir(d);
    }
    rmdir(path);
  } else {
    unlink(path);
  }
}

/* ---- running programs --------------------------------------------------------- */

typedef struct sink {
  char *p;
  size_t n, cap;
} sink;

/* Appends what fd has to k; clears *open at end of file. */
static void sink_read(sink *k, int fd, bool *open) {
  if (k->cap - k->n < 4097) {
    k->cap = k->cap * 2 + 8192;
    k->p = realloc(k->p, k->cap);
    assert_non_null(k->p);
  }
  ssize_t got = read(fd, k->p + k->n, k->cap - k->n - 1);
  if (got > 0) k->n += (size_t)got;
  else if (got == 0 || errno != EINTR) *open = false;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *sink_take(sink *k, size_t *len) {
  char *p = k->p ? k->p : calloc(1, 1);
  assert_non_null(p);
  p[k->n] = '\0';
  *len = k->n;
  return p;
}

void xf_test_run_free(xf_test_run *r) {
  free(r->out);
  free(r->err);
  memset(r, 0, sizeof(*r));
}

void xf_test_run_show(const xf_test_run *r) {
  fprintf(stderr, "--- %s (exit %d)\n--- its stdout (%zu bytes):\n%.4000s\n", r->line, r->status,
          r->out_len, r->out ? r->out : "");
  fprintf(stderr, "--- its stderr (%zu bytes):\n%.4000s\n---\n", r->err_len,
          r->err ? r->err : "");
}

/* Runs o->path with argv (argv[0] is name) and collects what it did. */
static void exec_argv(const xf_test_exec_opts *o, xf_test_run *r, const char *name,
                      char **argv);

void xf_test_vexec(const xf_test_exec_opts *o, xf_test_run *r, const char *name,
                   const char *first, va_list ap) {
  const char *args[64];
  int n = 0;
  for (const char *a = first; a; a = va_arg(ap, const char *)) {
    assert_true(n < 62);
    args[n++] = a;
  }
  args[n] = NULL;
  xf_test_execv(o, r, name, args);
}

void xf_test_execv(const xf_test_exec_opts *o, xf_test_run *r, const char *name,
                   const char *const *args) {
  xf_test_run_free(r);
  char *argv[64];
  int argc = 0;
  argv[argc++] = (char *)name;
  snprintf(r->line, sizeof(r->line), "%s", name);
  for (const char *const *a = args; *a; a++) {
    assert_true(argc < 63);
    argv[argc++] = (char *)*a;
    size_t used = strlen(r->line);
    snprintf(r->line + used, sizeof(r->line) - used, " %s", *a);
  }
  argv[argc] = NULL;
  exec_argv(o, r, name, argv);
}

static void exec_argv(const xf_test_exec_opts *o, xf_test_run *r, const char *name,
                      char **argv) {
  int out[2], err[2];
  assert_int_equal(pipe(out), 0);
  assert_int_equal(pipe(err), 0);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(fcntl(out[i], F_SETFD, FD_CLOEXEC), 0);
    assert_int_equal(fcntl(err[i], F_SETFD, FD_CLOEXEC), 0);
  }
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  assert_true(devnull >= 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (dup2(devnull, 0) < 0 || dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0) _exit(126);
    if (o->cwd && chdir(o->cwd) != 0) _exit(126);
    if (o->unset) unsetenv(o->unset);
    if (o->env) execve(o->path, argv, o->env);
    else execv(o->path, argv);
    _exit(127);
  }
  close(devnull);
  close(out[1]);
  close(err[1]);

  sink so = {0}, se = {0};
  bool o_open = true, e_open = true;
  double deadline = now_s() + o->deadline_s;
  while (o_open || e_open) {
    struct pollfd p[2] = {{o_open ? out[0] : -1, POLLIN, 0}, {e_open ? err[0] : -1, POLLIN, 0}};
    int left_ms = (int)((deadline - now_s()) * 1000);
    if (left_ms <= 0) {
      kill(pid, SIGKILL);
      r->timed_out = true;
      break;
    }
    int n = poll(p, 2, left_ms);
    if (n < 0 && errno == EINTR) continue;
    assert_true(n >= 0);
    if (p[0].revents) sink_read(&so, out[0], &o_open);
    if (p[1].revents) sink_read(&se, err[0], &e_open);
  }
  close(out[0]);
  close(err[0]);
  int ws;
  while (waitpid(pid, &ws, 0) < 0) assert_int_equal(errno, EINTR);
  r->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  r->out = sink_take(&so, &r->out_len);
  r->err = sink_take(&se, &r->err_len);
  if (r->status == 127 && r->out_len == 0 && r->err_len == 0)
    fail_msg("%s: %s could not be started", r->line, o->path);
  if (r->timed_out)
    fail_msg("%s: still running after %d s; killed", r->line, o->deadline_s);
  if (strstr(r->err, "Sanitizer") || strstr(r->err, "runtime error:")) {
    xf_test_run_show(r);
    fail_msg("%s: the sanitizer reported a problem in %s", r->line, name);
  }
}

void xf_test_exec(const xf_test_exec_opts *o, xf_test_run *r, const char *name, ...) {
  va_list ap;
  va_start(ap, name);
  const char *first = va_arg(ap, const char *);
  xf_test_vexec(o, r, name, first, ap);
  va_end(ap);
}

int xf_test_stop_group(int pid, int sig, double timeout_s) {
  (void)kill(-pid, sig);
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int ws = 0;
  for (;;) {
    pid_t r = waitpid(pid, &ws, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return -1;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9 > timeout_s) {
      (void)kill(-pid, SIGKILL);
      while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    usleep(20000);
  }
  (void)kill(-pid, SIGKILL); /* anything left in its group */
  return ws;
}

/* Torture mode (XF_ALLOC_FAIL_AT, base/alloc.h; driven by tests/torture.sh).
 * A test that asserts success fails when its allocation fails, and cmocka
 * would longjmp out of it, dropping what the test held, so that a leak check
 * at exit could not tell the test's abandoned objects from a leak on an error
 * path. Instead a failed assertion aborts (CMOCKA_TEST_ABORT) and the handler
 * checks for leaks there, while the test's frame and what it points to are
 * still live: what is unreachable then was dropped by the code under test.
 * The exit status says "a test failed cleanly"; tests/torture.sh knows it. */
#define XF_TORTURE_TEST_FAILED 85
#define XF_TORTURE_LEAKED 86 /* the sanitizers' exit status under tests/torture.sh */

extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

static void torture_abort(int sig) {
  (void)sig;
  /* Present in sanitized builds only; its report goes to stderr. */
  int leaked = __lsan_do_recoverable_leak_check ? __lsan_do_recoverable_leak_check() : 0;
  fflush(NULL);
  _exit(leaked ? XF_TORTURE_LEAKED : XF_TORTURE_TEST_FAILED);
}

/* XF_TEST_FILTER: run only the tests whose names match this cmocka pattern
 * (`*` and `?` wildcards), so that torture can run a subset of a program. */
__attribute__((constructor)) static void torture_setup(void) {
  const char *filter = getenv("XF_TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  if (xf_alloc_fail_at() == 0) return;
  setenv("CMOCKA_TEST_ABORT", "1", 1);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = torture_abort;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGABRT, &sa, NULL);
}
