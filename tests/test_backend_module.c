/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of how the cuda backend's module is found and loaded: only a request
 * for cuda (or auto) loads it, a module that cannot be used is refused with
 * its path and the reason, auto falls back to cpu, and the programs that never
 * train (xfed --help, xfed-coord, xfed-site --help) map no CUDA library.
 * The module is loaded at most once per process, so every case that opens a
 * backend runs in a forked child of its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/backend.h"

/* What a child saw: the open's result, the backend it got, whether the
 * process mapped the CUDA runtime or the module before and after. */
typedef struct child_report {
  int rc;
  int kind;
  bool cuda_before, cuda_after;
  char msg[512];
} child_report;

static char scratch[512];

static int setup(void **state) {
  (void)state;
  return xf_test_mkdtemp(scratch, sizeof(scratch), "backend-module");
}

static int teardown(void **state) {
  (void)state;
  xf_test_remove_tree(scratch);
  return 0;
}

/* True when /proc/self/maps holds a CUDA library or the module. */
static bool cuda_mapped(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return false;
  char line[1024];
  bool found = false;
  while (!found && fgets(line, sizeof(line), f))
    found = strstr(line, "libcudart") || strstr(line, "libcublas") ||
            strstr(line, "libxfed-cuda");
  fclose(f);
  return found;
}

/* Opens a backend of `kind` in a forked child with XF_BACKEND_DIR set to dir
 * (unset for NULL) and returns what the child saw. */
static child_report open_in_child(xf_backend_kind kind, const char *dir) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    child_report r;
    memset(&r, 0, sizeof(r));
    if (dir) setenv("XF_BACKEND_DIR", dir, 1);
    else unsetenv("XF_BACKEND_DIR");
    r.cuda_before = cuda_mapped();
    xf_backend_options opt = {kind, 1, 0};
    xf_backend *b = NULL;
    xf_errctx err = {0};
    r.rc = xf_backend_open(&opt, &b, &err);
    r.kind = r.rc == XF_OK ? (int)xf_backend_kind_of(b) : -1;
    snprintf(r.msg, sizeof(r.msg), "%s", err.msg);
    r.cuda_after = cuda_mapped();
    xf_backend_close(b);
    ssize_t w = write(fds[1], &r, sizeof(r));
    _exit(w == (ssize_t)sizeof(r) ? 0 : 1);
  }
  close(fds[1]);
  child_report r;
  memset(&r, 0, sizeof(r));
  size_t got = 0;
  while (got < sizeof(r)) {
    ssize_t n = read(fds[0], (char *)&r + got, sizeof(r) - got);
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(fds[0]);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_int_equal(got, sizeof(r));
  return r;
}

/* A directory under scratch holding `bytes` (n of them) as the module. */
static const char *dir_with_module(const char *name, const void *bytes, size_t n) {
  static char dir[600];
  snprintf(dir, sizeof(dir), "%s/%s", scratch, name);
  assert_int_equal(mkdir(dir, 0700) == 0 || access(dir, F_OK) == 0, 1);
  char path[700];
  snprintf(path, sizeof(path), "%s/libxfed-cuda.so", dir);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(bytes, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
  return dir;
}

static void cpu_never_loads_the_cuda_module(void **state) {
  (void)state;
  child_report r = open_in_child(XF_BACKEND_CPU, NULL);
  assert_int_equal(r.rc, XF_OK);
  assert_int_equal(r.kind, XF_BACKEND_CPU);
  assert_false(r.cuda_before);
  assert_false(r.cuda_after);
}

static void cuda_is_refused_naming_the_module_and_why_dlopen_failed(void **state) {
  (void)state;
  const char junk[] = "not an ELF file\n";
  const char *dir = dir_with_module("junk", junk, sizeof(junk));
  child_report r = open_in_child(XF_BACKEND_CUDA, dir);
  assert_int_equal(r.rc, XF_ENODEVICE);
  char path[700];
  snprintf(path, sizeof(path), "%s/libxfed-cuda.so", dir);
  if (!strstr(r.msg, path) || !strstr(r.msg, "XF_BACKEND_DIR"))
    fail_msg("the refusal does not name %s and how to fix it: %s", path, r.msg);
  /* glibc's words for a file that is not a shared object. */
  if (!strstr(r.msg, "invalid ELF header") && !strstr(r.msg, "file too short"))
    fail_msg("the refusal does not carry dlopen's reason: %s", r.msg);
}

static void auto_falls_back_to_cpu_when_the_module_does_not_load(void **state) {
  (void)state;
  const char junk[] = "\x7f" "ELF but no more";
  const char *dir = dir_with_module("truncated", junk, sizeof(junk));
  child_report r = open_in_child(XF_BACKEND_AUTO, dir);
  assert_int_equal(r.rc, XF_OK);
  assert_int_equal(r.kind, XF_BACKEND_CPU);
  assert_false(r.cuda_after);
}

static void a_library_without_the_entry_point_is_not_taken_for_the_module(void **state) {
  (void)state;
  /* Any real shared object will do: the test's own libcmocka is one. */
  FILE *maps = fopen("/proc/self/maps", "r");
  assert_non_null(maps);
  char line[1024], lib[512] = "";
  while (!lib[0] && fgets(line, sizeof(line), maps)) {
    char *p = strchr(line, '/');
    if (p && strstr(p, "libcmocka")) {
      p[strcspn(p, "\n")] = '\0';
      snprintf(lib, sizeof(lib), "%s", p);
    }
  }
  fclose(maps);
  if (!lib[0]) fail_msg("libcmocka is not mapped into this test");
  FILE *f = fopen(lib, "rb");
  assert_non_null(f);
  static char bytes[4 << 20];
  size_t n = fread(bytes, 1, sizeof(bytes), f);
  fclose(f);
  assert_true(n > 0 && n < sizeof(bytes));
  const char *dir = dir_with_module("foreign", bytes, n);
  child_report r = open_in_child(XF_BACKEND_CUDA, dir);
  assert_int_equal(r.rc, XF_ENODEVICE);
  if (!strstr(r.msg, "not an xfed backend module"))
    fail_msg("a library without xf_cuda_backend_open was not refused as such: %s", r.msg);
}

static void cuda_is_refused_naming_where_it_looked_when_no_module_is_there(void **state) {
  (void)state;
  char dir[600];
  snprintf(dir, sizeof(dir), "%s/empty", scratch);
  assert_int_equal(mkdir(dir, 0700), 0);
  child_report r = open_in_child(XF_BACKEND_CUDA, dir);
  assert_int_equal(r.rc, XF_ENODEVICE);
  if (!strstr(r.msg, "libxfed-cuda.so is in none of") || !strstr(r.msg, dir))
    fail_msg("the refusal does not say where it looked: %s", r.msg);
  assert_false(r.cuda_after);
}

/* In a build with the module: auto loads it (and with it the CUDA runtime)
 * only when asked, and `version` reports it found. */
static void auto_loads_the_built_module_only_when_asked(void **state) {
  (void)state;
  const char *build = getenv("XF_BUILD_DIR");
  char path[1024];
  snprintf(path, sizeof(path), "%s/kernels/libxfed-cuda.so", build ? build : ".");
  if (access(path, R_OK) != 0) {
    print_message("this build has no cuda module (%s)\n", path);
    skip();
  }
  assert_true(xf_backend_cuda_built());
  child_report r = open_in_child(XF_BACKEND_AUTO, NULL);
  assert_int_equal(r.rc, XF_OK);
  assert_false(r.cuda_before);
  assert_true(r.cuda_after);
}

/* Runs prog with args under LD_DEBUG=files, which lists every object the
 * dynamic loader maps (needed or dlopen()ed), and fails if one is CUDA's. */
static void runs_without_cuda(const char *prog, const char *arg) {
  const char *build = getenv("XF_BUILD_DIR");
  assert_non_null(build);
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", build, prog);
  char *env[] = {"LD_DEBUG=files", "XF_LOG_LEVEL=warn", "PATH=/usr/bin:/bin", NULL};
  xf_test_exec_opts o = {.path = path, .env = env, .deadline_s = 120};
  xf_test_run r = {0};
  xf_test_exec(&o, &r, prog, arg, NULL);
  if (r.status != 0) {
    xf_test_run_show(&r);
    fail_msg("%s %s exited with %d", prog, arg, r.status);
  }
  /* The loader's trace names every object it maps; there must be some. */
  if (!strstr(r.err, "file=")) {
    xf_test_run_show(&r);
    fail_msg("LD_DEBUG=files printed no trace for %s", prog);
  }
  const char *bad[] = {"libcudart", "libcublas", "libxfed-cuda"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    if (strstr(r.err, bad[i])) fail_msg("%s %s maps %s", prog, arg, bad[i]);
  xf_test_run_free(&r);
}

static void xfed_help_maps_no_cuda_library(void **state) {
  (void)state;
  runs_without_cuda("cli/xfed", "--help");
  runs_without_cuda("cli/xfed", "version");
}

static void the_daemons_help_maps_no_cuda_library(void **state) {
  (void)state;
  runs_without_cuda("coordinator/xfed-coord", "--help");
  runs_without_cuda("site/xfed-site", "--help");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cpu_never_loads_the_cuda_module),
      cmocka_unit_test(cuda_is_refused_naming_the_module_and_why_dlopen_failed),
      cmocka_unit_test(auto_falls_back_to_cpu_when_the_module_does_not_load),
      cmocka_unit_test(a_library_without_the_entry_point_is_not_taken_for_the_module),
      cmocka_unit_test(cuda_is_refused_naming_where_it_looked_when_no_module_is_there),
      cmocka_unit_test(auto_loads_the_built_module_only_when_asked),
      cmocka_unit_test(xfed_help_maps_no_cuda_library),
      cmocka_unit_test(the_daemons_help_maps_no_cuda_library),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
