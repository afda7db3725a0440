/* SPDX-License-Identifier: Apache-2.0 */
/* External trainers (site/trainer.h; the contract is docs/trainers.md). */
#define _GNU_SOURCE
#include "site/trainer.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "kernels/checkpoint.h"
#include "kernels/export.h"
#include "data/dataset.h"
#include "data/dataset_internal.h"
#include "base/file.h"

/* The largest result.json read; a trainer's report is a few hundred bytes. */
#define RESULT_MAX (64u * 1024u)

const char *xf_trainer_dp_name(xf_trainer_dp d) {
  return d == XF_TRAINER_DP_DECLARED ? "declared" : "none";
}

xf_err xf_trainer_dp_parse(const char *s, xf_trainer_dp *out, xf_errctx *err) {
  if (s && strcmp(s, "none") == 0) *out = XF_TRAINER_DP_NONE;
  else if (s && strcmp(s, "declared") == 0) *out = XF_TRAINER_DP_DECLARED;
  else
    return xf_fail(err, XF_EINVAL, "the trainer's dp is '%s'; it is 'declared' (the trainer does "
                   "DP-SGD and reports it in result.json) or 'none'", s ? s : "");
  return XF_OK;
}

xf_err xf_trainer_program_check(const char *program, xf_errctx *err) {
  XF_ENSURE(program && program[0] == '/', err, XF_EINVAL,
            "the trainer '%s' is not an absolute path; it is run without a shell or PATH "
            "search, so give its full path", program ? program : "");
  struct stat st;
  XF_ENSURE(stat(program, &st) == 0, err, XF_ENOENT, "the trainer %s: %s", program,
            strerror(errno));
  XF_ENSURE(S_ISREG(st.st_mode), err, XF_EINVAL, "the trainer %s is not a regular file",
            program);
  XF_ENSURE(access(program, X_OK) == 0, err, XF_EINVAL,
            "the trainer %s is not executable (chmod +x it; a script needs a #! line)", program);
  return XF_OK;
}

/* ---- task.json and global.npy ------------------------------------------------------------ */

/* The layer table: each parameter tensor of the flat vector, as the .npy
 * export's sidecar describes it (shapes in xfed's NHWC layout). */
static json_t *layer_table(const xf_model *m) {
  json_t *a = json_array();
  for (int i = 0; a && i < xf_model_num_layers(m); i++) {
    const xf_layer *l = xf_model_layer(m, i);
    json_t *o = json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:i}", "name", l->name, "kind",
                          xf_layer_kind_name(l->kind), "in_h", l->in_h, "in_w", l->in_w, "in_c",
                          l->in_c, "out_h", l->out_h, "out_w", l->out_w, "out_c", l->out_c);
    if (!o) continue;
    if (l->kind == XF_LAYER_CONV || l->kind == XF_LAYER_MAXPOOL || l->kind == XF_LAYER_AVGPOOL) {
      json_object_set_new(o, "kernel", json_integer(l->kernel));
      json_object_set_new(o, "stride", json_integer(l->stride));
      json_object_set_new(o, "pad", json_integer(l->pad));
    }
    if (l->kind == XF_LAYER_DROPOUT) json_object_set_new(o, "rate", json_real(l->rate));
    if (l->kind == XF_LAYER_GROUPNORM) json_object_set_new(o, "groups", json_integer(l->groups));
    if (l->kind == XF_LAYER_EMBEDDING) json_object_set_new(o, "vocab", json_integer(l->vocab));
    if (l->kind == XF_LAYER_ADD) json_object_set_new(o, "src", json_integer(l->src));
    json_t *tensors = json_array();
    for (int b = 0; b < 2; b++) {
      size_t count = b ? l->bias_count : l->weight_count;
      if (!count) continue;
      int64_t dims[4];
      const int rank = xf_layer_tensor_dims(l, b, dims);
      json_t *shape = json_array();
      for (int d = 0; shape && d < rank; d++) json_array_append_new(shape, json_integer(dims[d]));
      char name[40];
      snprintf(name, sizeof(name), "%s.%s", l->name, b ? "bias" : "weight");
      json_array_append_new(tensors,
                            json_pack("{s:s,s:o,s:I,s:I}", "name", name, "shape", shape,
                                      "offset", (json_int_t)(b ? l->bias_offset : l->weight_offset),
                                      "count", (json_int_t)count));
    }
    json_object_set_new(o, "tensors", tensors);
    json_array_append_new(a, o);
  }
  return a;
}

static json_t *task_json(const xf_trainer_task *t) {
  const xf_job_local *lc = &t->spec->local;
  const xf_model_spec *ms = xf_model_spec_of(t->model);
  json_t *local = json_pack(
      "{s:I,s:I,s:s,s:f,s:f,s:f,s:b,s:f,s:f,s:f,s:f,s:f,s:f}", "epochs", (json_int_t)lc->epochs,
      "batch_size", (json_int_t)lc->batch_size, "optimizer",
      xf_job_optimizer_name(lc->optimizer), "lr", t->lr, "base_lr", lc->lr, "momentum",
      lc->momentum, "nesterov", lc->nesterov, "beta1", lc->beta1, "beta2", lc->beta2, "eps",
      lc->eps, "weight_decay", lc->weight_decay, "clip_norm", lc->clip_norm, "prox_mu",
      lc->prox_mu);
  json_t *dataset = json_pack(
      "{s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:[I,I,I]}", "name", t->dataset_name, "dir", t->dataset_dir,
      "layout", t->dataset_layout, "train_records", (json_int_t)t->train_records, "test_records",
      (json_int_t)t->test_records, "features", (json_int_t)t->features, "classes",
      (json_int_t)t->classes, "shape", (json_int_t)t->h, (json_int_t)t->w, (json_int_t)t->c);
  json_t *model = json_pack("{s:s,s:s,s:[i,i,i],s:i,s:i,s:I,s:s,s:o}", "describe",
                            xf_model_describe(t->model), "loss", xf_loss_name(ms->loss), "input",
                            ms->in_h, ms->in_w, ms->in_c, "classes", ms->classes, "outputs",
                            xf_model_outputs(t->model), "params",
                            (json_int_t)xf_model_num_params(t->model), "layout", "nhwc",
                            "layers", layer_table(t->model));
  json_t *privacy = t->dp.record
                        ? json_pack("{s:b,s:f,s:f,s:f,s:I}", "record_level", 1, "clip", t->dp.clip,
                                    "noise_multiplier", t->dp.noise_multiplier, "sampling_rate",
                                    t->dp.sampling_rate, "steps", (json_int_t)t->dp.steps)
                        : json_pack("{s:b}", "record_level", 0);
  return json_pack("{s:s,s:s,s:I,s:I,s:o,s:o,s:o,s:o,s:{s:s},s:{s:s,s:s,s:s}}", "contract",
                   XF_TRAINER_CONTRACT, "job_id", t->job_id, "round", (json_int_t)t->round,
                   "seed", (json_int_t)(t->seed & 0x7fffffffffffffffull), "local", local,
                   "dataset", dataset, "model", model, "privacy", privacy, "inputs", "global",
                   "global.npy", "outputs", "trained", "trained.npy", "result", "result.json",
                   "log", "trainer.log");
}

xf_err xf_trainer_write_task(const char *dir, const xf_trainer_task *t, xf_errctx *err) {
  char path[4096];
  json_t *o = task_json(t);
  char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
  json_decref(o);
  if (!text) return xf_fail(err, XF_ENOMEM, "cannot build task.json");
  snprintf(path, sizeof(path), "%s/task.json", dir);
  xf_err rc = xf_file_write_atomic(path, text, strlen(text), 0600, err);
  free(text);
  if (rc != XF_OK) return rc;
  uint8_t *npy = NULL;
  size_t len = 0;
  XF_GUARD(xf_export_npy_vector(t->global, xf_model_num_params(t->model), &npy, &len, err));
  snprintf(path, sizeof(path), "%s/global.npy", dir);
  rc = xf_file_write_atomic(path, npy, len, 0600, err);
  xf_free(npy);
  return rc;
}

/* ---- running it ------------------------------------------------------------------------ */

static double mono_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

xf_err xf_trainer_run(const char *program, const char *dir, const char *log_path,
                      double timeout_s, const atomic_bool *stop, xf_errctx *err) {
  char home[4200], tdir[4200];
  snprintf(home, sizeof(home), "HOME=%s", dir);
  snprintf(tdir, sizeof(tdir), "XFED_TRAINER_DIR=%s", dir);
  char *const envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", home, "LANG=C.UTF-8", tdir, NULL};
  char *const argv[] = {(char *)program, (char *)dir, NULL};
  int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (log_fd < 0)
    return xf_fail(err, XF_EIO, "cannot open the trainer's log %s: %s", log_path,
                   strerror(errno));
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) {
    close(log_fd);
    return xf_fail(err, XF_EIO, "cannot open /dev/null: %s", strerror(errno));
  }
  long open_max = sysconf(_SC_OPEN_MAX);
  if (open_max <= 0 || open_max > 1 << 20) open_max = 65536;
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(log_fd);
    close(null_fd);
    return xf_fail(err, XF_EIO, "cannot start the trainer %s: %s", program, strerror(e));
  }
  if (pid == 0) {
    /* Only async-signal-safe calls from here to execve. */
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    if (dup2(null_fd, 0) < 0 || dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0) _exit(126);
    if (close_range(3, ~0u, 0) != 0) {
      for (long fd = 3; fd < open_max; fd++) close((int)fd);
    }
    if (chdir(dir) != 0) _exit(126);
    execve(program, argv, envp);
    static const char msg[] = "xfed-site: cannot execute the trainer\n";
    if (write(2, msg, sizeof(msg) - 1) < 0) _exit(127);
    _exit(127);
  }
  setpgid(pid, pid); /* also here: the kill below must find the group */
  close(log_fd);
  close(null_fd);
  double deadline = mono_now() + timeout_s;
  int status = 0;
  bool timed_out = false, stopped = false;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      kill(-pid, SIGKILL);
      return xf_fail(err, XF_EIO, "cannot wait for the trainer %s: %s", program,
                     strerror(errno));
    }
    timed_out = mono_now() >= deadline;
    stopped = stop && atomic_load(stop);
    if (timed_out || stopped) {
      kill(-pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  /* Whatever the group left behind goes with it. */
  kill(-pid, SIGKILL);
  if (stopped) return xf_fail(err, XF_EIO, "the trainer %s was stopped: the task ended", program);
  if (timed_out)
    return xf_fail(err, XF_EIO, "the trainer %s timed out after %.0f s and was killed (see %s; "
                   "raise the limit with --trainer-timeout)", program, timeout_s, log_path);
  if (WIFSIGNALED(status))
    return xf_fail(err, XF_EIO, "the trainer %s was killed by signal %d (see %s)", program,
                   WTERMSIG(status), log_path);
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    return xf_fail(err, XF_EIO, "the trainer %s exited with status %d (see %s)", program,
                   WEXITSTATUS(status), log_path);
  return XF_OK;
}

/* ---- its outputs ------------------------------------------------------------------------ */

void xf_trainer_result_free(xf_trainer_result *r) {
  if (!r) return;
  xf_free(r->trained);
  memset(r, 0, sizeof(*r));
}

/* trained.npy: exactly a float32 C-order vector of the global model's n
 * values, every one finite (data/npy.c's reader). */
static xf_err read_npy(const char *path, size_t n, float **out, xf_errctx *err) {
  struct stat st;
  if (stat(path, &st) != 0) {
    xf_fail(err, errno == ENOENT ? XF_ENOENT : XF_EIO,
            "the trainer wrote no %s (%s); it must write the trained weights there", path,
            strerror(errno));
    xf_errctx_file(err, path);
    return err->code;
  }
  /* The header (at most 64 KiB) and n floats: anything longer is refused. */
  if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > (uint64_t)n * sizeof(float) + 65536u + 12u) {
    xf_fail(err, XF_EFORMAT, "%s is not a regular file of the %zu float32 values of global.npy",
            path, n);
    xf_errctx_file(err, path);
    return err->code;
  }
  uint8_t *bytes = NULL;
  size_t len = 0;
  xf_errctx sub;
  xf_errctx_clear(&sub);
  xf_err rc = xf__read_file_bytes(path, &bytes, &len, &sub);
  if (rc == XF_OK) rc = xf_npy_parse_vector(bytes, len, path, n, out, &sub);
  xf_free(bytes);
  if (rc != XF_OK) {
    /* The reader's finding, said of the trainer's output. */
    xf_fail(err, rc, "%s: %s%s", path, sub.msg,
            sub.field[0] == 's' ? "; it must be the shape of global.npy" : "");
    xf_errctx_file(err, path);
    if (sub.field[0]) xf_errctx_field(err, "%s", sub.field);
  }
  return rc;
}

static xf_err json_number(json_t *o, const char *file, const char *key, double lo, double hi,
                          bool *has, double *out, xf_errctx *err) {
  json_t *v = json_object_get(o, key);
  if (!v) return XF_OK;
  if (!json_is_number(v))
    return xf_fail_in_file(err, XF_EFORMAT, file, key, "%s: \"%s\" is not a number%s", file, key,
                           "");
  double d = json_number_value(v);
  if (!isfinite(d) || d < lo || d > hi) {
    char range[96];
    snprintf(range, sizeof(range), " (%g; it must be in [%g, %g])", d, lo, hi);
    return xf_fail_in_file(err, XF_ERANGE, file, key, "%s: \"%s\" is out of range%s", file, key,
                           range);
  }
  if (has) *has = true;
  *out = d;
  return XF_OK;
}

static xf_err only_keys(json_t *o, const char *file, const char *const *keys, size_t n,
                        const char *where, xf_errctx *err) {
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) {
    bool known = false;
    for (size_t i = 0; i < n && !known; i++) known = strcmp(k, keys[i]) == 0;
    if (!known) {
      char f[128];
      snprintf(f, sizeof(f), "%s%s", where, k);
      return xf_fail_in_file(err, XF_EFORMAT, file, f, "%s: unknown field \"%s\"%s", file, f,
                             " (docs/trainers.md lists the fields of result.json)");
    }
  }
  return XF_OK;
}

xf_err xf_trainer_parse_result(const char *text, size_t len, const char *path,
                               uint64_t max_samples, xf_trainer_result *r, xf_errctx *err) {
  xf_err rc = XF_OK;
  if (len > RESULT_MAX) {
    xf_fail(err, XF_EFORMAT, "%s is larger than %u bytes", path, RESULT_MAX);
    xf_errctx_file(err, path);
    return XF_EFORMAT;
  }
  json_error_t je;
  json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!json_is_object(o)) {
    json_decref(o);
    xf_fail(err, XF_EFORMAT, "%s is not one JSON object (line %d: %s)", path, je.line, je.text);
    xf_errctx_file(err, path);
    return XF_EFORMAT;
  }
  static const char *const keys[] = {"samples", "train_loss", "train_accuracy", "dp"};
  rc = only_keys(o, path, keys, 4, "", err);
  json_t *s = json_object_get(o, "samples");
  if (rc == XF_OK && !s)
    rc = xf_fail_in_file(err, XF_EFORMAT, path, "samples", "%s: \"%s\" is missing%s", path,
                         "samples", " (the number of training records the trainer used)");
  if (rc == XF_OK && !json_is_integer(s))
    rc = xf_fail_in_file(err, XF_EFORMAT, path, "samples", "%s: \"%s\" is not an integer%s", path,
                         "samples", "");
  if (rc == XF_OK) {
    json_int_t n = json_integer_value(s);
    if (n < 1 || (uint64_t)n > max_samples) {
      char why[128];
      snprintf(why, sizeof(why), " (%lld; the dataset has %llu training records)", (long long)n,
               (unsigned long long)max_samples);
      rc = xf_fail_in_file(err, XF_ERANGE, path, "samples", "%s: \"%s\" is out of range%s", path,
                           "samples", why);
    } else {
      r->samples = (uint64_t)n;
    }
  }
  if (rc == XF_OK)
    rc = json_number(o, path, "train_loss", 0, 1e30, &r->has_train_loss, &r->train_loss, err);
  if (rc == XF_OK)
    rc = json_number(o, path, "train_accuracy", 0, 1, &r->has_train_accuracy,
                     &r->train_accuracy, err);
  json_t *dp = json_object_get(o, "dp");
  if (rc == XF_OK && dp && !json_is_null(dp)) {
    static const char *const dk[] = {"clip", "noise_multiplier", "sampling_rate", "steps"};
    if (!json_is_object(dp))
      rc = xf_fail_in_file(err, XF_EFORMAT, path, "dp", "%s: \"%s\" is not an object%s", path, "dp",
                           "");
    if (rc == XF_OK) rc = only_keys(dp, path, dk, 4, "dp.", err);
    for (int i = 0; rc == XF_OK && i < 3; i++) {
      char f[32];
      snprintf(f, sizeof(f), "dp.%s", dk[i]);
      double *dst = i == 0 ? &r->dp_clip : i == 1 ? &r->dp_noise_multiplier : &r->dp_sampling_rate;
      json_t *v = json_object_get(dp, dk[i]);
      if (!v) {
        rc = xf_fail_in_file(err, XF_EFORMAT, path, f, "%s: \"%s\" is missing%s", path, f, "");
        break;
      }
      if (!json_is_number(v)) {
        rc = xf_fail_in_file(err, XF_EFORMAT, path, f, "%s: \"%s\" is not a number%s", path, f, "");
        break;
      }
      double d = json_number_value(v);
      bool in = i == 0 ? d > 0 && d < 1e30 : i == 1 ? d >= 0 && d < 1e30 : d > 0 && d <= 1;
      if (!isfinite(d) || !in) {
        rc = xf_fail_in_file(err, XF_ERANGE, path, f, "%s: \"%s\" is out of range%s", path, f,
                             i == 2 ? " (a sampling rate is in (0, 1])" : " (it must be positive)");
        break;
      }
      *dst = d;
    }
    json_t *st = json_object_get(dp, "steps");
    if (rc == XF_OK && (!st || !json_is_integer(st) || json_integer_value(st) < 1))
      rc = xf_fail_in_file(err, XF_EFORMAT, path, "dp.steps",
                           "%s: \"%s\" is missing or not a positive "
                           "integer%s",
                           path, "dp.steps", " (the number of noised DP-SGD steps taken)");
    if (rc == XF_OK) {
      r->dp_steps = (uint64_t)json_integer_value(st);
      r->has_dp = true;
    }
  }
  json_decref(o);
  return rc;
}

static xf_err read_result_json(const char *path, uint64_t max_samples, xf_trainer_result *r,
                               xf_errctx *err) {
  char *text = NULL;
  size_t len = 0;
  xf_err rc = xf_file_read_text(path, RESULT_MAX, &text, &len, err);
  if (rc != XF_OK) {
    if (access(path, F_OK) != 0) {
      xf_fail(err, XF_ENOENT, "the trainer wrote no %s; it must report the samples it used there",
              path);
      xf_errctx_file(err, path);
      return XF_ENOENT;
    }
    return rc;
  }
  rc = xf_trainer_parse_result(text, len, path, max_samples, r, err);
  xf_free(text);
  return rc;
}

xf_err xf_trainer_read_result(const char *dir, size_t n, uint64_t max_samples,
                              xf_trainer_result *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  char path[4200];
  snprintf(path, sizeof(path), "%s/result.json", dir);
  xf_err rc = read_result_json(path, max_samples, out, err);
  if (rc == XF_OK) {
    snprintf(path, sizeof(path), "%s/trained.npy", dir);
    rc = read_npy(path, n, &out->trained, err);
  }
  if (rc != XF_OK) {
    xf_trainer_result_free(out);
    return rc;
  }
  out->n = n;
  return XF_OK;
}

xf_err xf_trainer_check_dp(const xf_trainer_result *r, const xf_trainer_dp_need *need,
                           xf_errctx *err) {
  if (!need->record) return XF_OK;
  const double tol = 1e-9;
  XF_ENSURE(r->has_dp, err, XF_EDENIED,
            "result.json has no \"dp\" object, but the job asks for record-level privacy: the "
            "trainer must do DP-SGD and report clip, noise_multiplier, sampling_rate and steps");
  XF_ENSURE(r->dp_clip <= need->clip * (1 + tol), err, XF_EDENIED,
            "result.json: dp.clip is %g, above the job's per-example clip %g", r->dp_clip,
            need->clip);
  XF_ENSURE(r->dp_noise_multiplier >= need->noise_multiplier * (1 - tol), err, XF_EDENIED,
            "result.json: dp.noise_multiplier is %g, below the %g the job's privacy needs",
            r->dp_noise_multiplier, need->noise_multiplier);
  XF_ENSURE(r->dp_sampling_rate <= need->sampling_rate * (1 + tol), err, XF_EDENIED,
            "result.json: dp.sampling_rate is %g, above the job's %g (batch size over the "
            "dataset's training records)",
            r->dp_sampling_rate, need->sampling_rate);
  XF_ENSURE(r->dp_steps <= need->steps, err, XF_EDENIED,
            "result.json: dp.steps is %llu, more than the %llu the job's epochs and batch size "
            "give",
            (unsigned long long)r->dp_steps, (unsigned long long)need->steps);
  return XF_OK;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

bool xf_trainer_dir_remove(const char *dir) {
  struct stat st;
  if (lstat(dir, &st) != 0) return errno == ENOENT;
  return nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) == 0;
}
