/* SPDX-License-Identifier: Apache-2.0 */
/* A job run's fields, shared by the two files of the runs module: host.c
 * (a run's life, its machine's actions, the commit) and host_frames.c
 * (participants' frames into the machine's events). No other file includes
 * this: they see xf__run through daemon_internal.h's host.c functions.
 * Under a banner naming each defining file, that file's functions
 * (tests/internal_header.sh checks it). */
#ifndef XF_COORDINATOR_HOST_INTERNAL_H
#define XF_COORDINATOR_HOST_INTERNAL_H

#include "coordinator/daemon_internal.h"

/* A job the daemon hosts: its machine and everything around it. */
typedef struct xf__run {
  struct xf__coord *co;
  xf__relay *relay;         /* a regional aggregator's task (upstream.c), NULL for a global run */
  int64_t id;               /* global: the journal's job id */
  char id_text[32];
  xf_jobspec spec;
  char *spec_json;          /* canonical, sent in TaskOffer */
  xf_jobm *m;
  xf_model *model;
  float *params;
  size_t n_params;
  xf_digest params_digest;
  xf__model_file *mf;       /* the current model as a float32 model file */
  xf__model_file *offer_mf; /* ... as offered (downlink-compressed, or mf) */
  xf_digest offer_digest;   /* the parameter digest of what sites decode from offer_mf */
  uint32_t model_round;
  xf_aggregator *agg;       /* the open attempt's */
  uint32_t agg_round, agg_attempt;
  xf_server_opt *opt;       /* global */
  xf__takes takes;          /* the open attempt's update streams (intake.c) */
  uint8_t *seal_sk;         /* the attempt's sealing key (sodium_malloc, wiped) */
  uint8_t seal_pk[XF_SEAL_PUBLICKEYBYTES];
  uint32_t seal_round, seal_attempt;
  uint64_t model_stream;    /* the stream id this run's model goes under (even) */
  /* planning */
  xf_admission plan;
  bool has_plan;
  bool dirty;               /* the federation or the policy changed since */
  double planned_at;
  uint32_t planned_round, planned_attempt;
  xf_jobm_phase planned_phase;
  /* global: the sites that refused the newest training attempt with
   * refusals, each by name in its own words ("e3: ..."), and that attempt.
   * A job that goes on without them says so (requests.c, and its message
   * once it is done). */
  char refused[XF_JOBM_MSG_MAX];
  uint32_t refused_round, refused_attempt;
  bool over;                /* finished: freed once nothing of it is in flight */
  xf__run_clock clock;      /* stats.c's */
  struct xf__run *next;
} xf__run;

/* ---- host.c: what host_frames.c needs of it ------------------------------------------- */
/* Notes whether a journal write failed (/healthz answers 503 until one
 * succeeds again) and logs the failure. */
void xf__journal_check(xf_err rc, const char *doing, const xf_errctx *err);

#endif
