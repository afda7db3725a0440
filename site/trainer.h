/* SPDX-License-Identifier: Apache-2.0 */
/* External trainers: a program a site declares for a dataset, which xfed-site
 * runs for each training task instead of its own kernels. The contract
 * (docs/trainers.md) is a work directory: xfed writes task.json and
 * global.npy, the program writes trained.npy and result.json. Everything
 * after the trained weights (delta, clipping, noise, compression, masking,
 * sealing) stays the site's. Socket-free: the daemon calls these on its
 * worker thread. */
#ifndef XF_SITE_TRAINER_H
#define XF_SITE_TRAINER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "job/jobspec.h"
#include "kernels/model.h"

/* The contract's version, written as task.json's "contract". */
#define XF_TRAINER_CONTRACT "xfed-trainer/1"

/* What a trainer says about record-level privacy. */
typedef enum xf_trainer_dp {
  XF_TRAINER_DP_NONE = 0, /* "none": does no DP-SGD; only jobs without record-level DP */
  XF_TRAINER_DP_DECLARED  /* "declared": reports the DP-SGD it did in result.json */
} xf_trainer_dp;

/* "none", "declared". */
const char *xf_trainer_dp_name(xf_trainer_dp d);
/* Parses one of the two words; XF_EINVAL listing them otherwise. */
xf_err xf_trainer_dp_parse(const char *s, xf_trainer_dp *out, xf_errctx *err) XF_WARN_UNUSED;


/* Checks a program path as a site registers it: absolute, a regular file
 * the site can execute. XF_EINVAL / XF_ENOENT naming the path and the fix. */
xf_err xf_trainer_program_check(const char *program, xf_errctx *err) XF_WARN_UNUSED;

/* The record-level DP-SGD a job asks of a site, and what the site's ledger
 * charges for the round when the trainer does at most this. */
typedef struct xf_trainer_dp_need {
  bool record;             /* the job asks for record-level DP */
  double clip;             /* per-example L2 bound */
  double noise_multiplier; /* the least noise multiplier */
  double sampling_rate;    /* the largest sampling rate */
  uint64_t steps;          /* the most steps */
} xf_trainer_dp_need;

/* One task for a trainer. Everything is borrowed. */
typedef struct xf_trainer_task {
  const char *job_id;
  uint32_t round;
  uint64_t seed;
  const xf_jobspec *spec; /* local training settings and the loss */
  double lr;              /* the round's learning rate (after the schedule) */
  const char *dataset_name, *dataset_dir, *dataset_layout;
  uint32_t train_records, test_records, features, classes, h, w, c;
  const xf_model *model;
  const float *global; /* xf_model_num_params(model) floats */
  xf_trainer_dp_need dp;
} xf_trainer_task;

/* Writes task.json and global.npy into dir (which exists and is the
 * site's own). XF_EIO naming the file; XF_ENOMEM. */
xf_err xf_trainer_write_task(const char *dir, const xf_trainer_task *t,
                             xf_errctx *err) XF_WARN_UNUSED;

/* Runs program with argv {program, dir} and no shell: its own process
 * group, working directory dir, stdin /dev/null, stdout and stderr appended
 * to log_path (created 0600), environment PATH=/usr/local/bin:/usr/bin:/bin,
 * HOME=dir, LANG=C.UTF-8, XFED_TRAINER_DIR=dir and nothing else, no other
 * file descriptors. Past timeout_s seconds, or when *stop becomes true (stop
 * may be NULL), the whole group is killed (SIGKILL). XF_EIO when it cannot
 * start, ran out of time (the message says "timed out after N s"), was
 * killed by a signal or exited non-zero (the status and the log named). */
xf_err xf_trainer_run(const char *program, const char *dir, const char *log_path,
                      double timeout_s, const atomic_bool *stop, xf_errctx *err) XF_WARN_UNUSED;

/* What a trainer reported. */
typedef struct xf_trainer_result {
  float *trained; /* n floats (xf_malloc): the trained weights */
  size_t n;
  uint64_t samples;
  bool has_train_loss, has_train_accuracy;
  double train_loss, train_accuracy;
  bool has_dp;
  double dp_clip, dp_noise_multiplier, dp_sampling_rate;
  uint64_t dp_steps;
} xf_trainer_result;

void xf_trainer_result_free(xf_trainer_result *r);

/* Reads and validates dir's trained.npy (a '<f4' vector of shape (n,), as
 * numpy.save writes it, every value finite) and result.json (one object,
 * only the documented fields, samples in 1..max_samples, losses finite, dp
 * fields in range). Errors name the file and field (err->file,
 * err->field): XF_ENOENT for a missing file, XF_EFORMAT / XF_ERANGE. */
xf_err xf_trainer_read_result(const char *dir, size_t n, uint64_t max_samples,
                              xf_trainer_result *out, xf_errctx *err) XF_WARN_UNUSED;

/* The result.json half of xf_trainer_read_result, on text already read
 * (len bytes, not NUL-terminated; path names it in errors): fills r's
 * samples, losses and dp fields. */
xf_err xf_trainer_parse_result(const char *text, size_t len, const char *path,
                               uint64_t max_samples, xf_trainer_result *r,
                               xf_errctx *err) XF_WARN_UNUSED;

/* Checks a declared trainer's DP against what the job needs: a "dp" object
 * present, clip at most need->clip, noise_multiplier at least
 * need->noise_multiplier, sampling_rate at most need->sampling_rate, steps
 * at most need->steps. XF_EDENIED naming the field that fails. */
xf_err xf_trainer_check_dp(const xf_trainer_result *r, const xf_trainer_dp_need *need,
                           xf_errctx *err) XF_WARN_UNUSED;

/* Removes a work directory and everything in it, links not followed (the
 * global and trained weights do not outlive the task). False when something
 * stays. */
bool xf_trainer_dir_remove(const char *dir);

#endif
