/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for what sites and regional aggregators send the global
 * coordinator about a job's rounds: SiteAnnounce, TaskAccept, TaskRefusal,
 * Metrics, and the TensorBegin and TensorEnd of their updates (UPDATE) and
 * aggregates (AGGREGATE), as records of tests/fuzz/fuzz_msgs.h whose high
 * 4 bits name the sender: 0..3 the sites s1..s4, 4 the regional aggregator
 * r1 (more: modulo 5). A Heartbeat moves the clock on by `seq` modulo 64
 * seconds.
 *
 * The messages go the way coordinator/daemon.c, host.c, checks.c and
 * intake.c take them, into the same socket-free pieces: announcements
 * (checked against the sender's identity, kept as the daemon keeps them)
 * make the federation that admission plans the job on (job/admission.h),
 * and the model is sized for the shape they announced (job/jobmodel.h);
 * answers, refusals, reports and updates become the job machine's events
 * (coordinator/jobmachine.h), a report's figures and an update's weight are
 * range-checked first (coordinator/report.h), and the machine's actions are
 * carried out as far as they are decisions (a COMMIT is committed, a plan
 * made when it asks for one).
 *
 * Checked: every refusal of a report names the field, the value and the
 * rule, and a report that passes holds figures in range; the machine's
 * actions are well formed (carriers it knows, notes where due); the rounds
 * committed never go back or past the job's rounds; the counts stay within
 * the sites invited. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "coordinator/jobmachine.h"
#include "coordinator/report.h"
#include "fuzz_msgs.h"
#include "job/admission.h"
#include "job/jobmodel.h"
#include "job/jobspec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const unsigned kinds[] = {
    XFED__ENVELOPE__BODY_SITE_ANNOUNCE, XFED__ENVELOPE__BODY_TASK_ACCEPT,
    XFED__ENVELOPE__BODY_TASK_REFUSAL,  XFED__ENVELOPE__BODY_METRICS,
    XFED__ENVELOPE__BODY_TENSOR_BEGIN,  XFED__ENVELOPE__BODY_TENSOR_END,
    XFED__ENVELOPE__BODY_HEARTBEAT,
};
#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))

#define FZ_ROUND_CARRIERS 5
#define FZ_ROUND_PARAMS 10
#define FZ_ROUND_REGION "eu"
#define FZ_ROUND_SPEC                                                                         \
  "{\"name\": \"f\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": \"d\", "     \
  "\"tags\": [\"x\"]}, \"rounds\": 2, \"min_sites\": 2, \"sites_per_round\": 3}"
#define FZ_NAME_MAX 64
#define FZ_TAGS_MAX 8

static const char *const carrier_names[FZ_ROUND_CARRIERS] = {"s1", "s2", "s3", "s4", "r1"};

/* What a sender announced of one dataset (coordinator/daemon_internal.h). */
typedef struct dataset {
  char name[FZ_NAME_MAX];
  char tags[FZ_TAGS_MAX][FZ_NAME_MAX];
  uint32_t n_tags;
  uint32_t train_records, test_records, classes, h, w, c;
} dataset;

typedef struct behind_site {
  char name[FZ_NAME_MAX], region[FZ_NAME_MAX];
  uint64_t id;
  dataset *datasets;
  size_t n_datasets;
} behind_site;

typedef struct carrier {
  uint64_t id;
  bool announced, regional;
  dataset *datasets;
  size_t n_datasets;
  behind_site *behind;
  size_t n_behind;
  /* its update in flight: TensorBegin taken, TensorEnd to come */
  bool pending;
  uint64_t stream_id, weight;
  uint64_t *sites;
  size_t n_sites;
} carrier;

typedef struct coord {
  xf_jobspec spec;
  xf_jobm *m;
  carrier c[FZ_ROUND_CARRIERS];
  double now;
  uint32_t committed;
} coord;

static void copy_label(char *dst, size_t n, const char *src) {
  snprintf(dst, n, "%s", src ? src : "");
}

static size_t read_datasets(const Xfed__SiteAnnounce *a, dataset **out) {
  *out = NULL;
  if (!a->n_datasets) return 0;
  dataset *v = xf_calloc(a->n_datasets, sizeof(*v));
  if (!v) abort();
  for (size_t i = 0; i < a->n_datasets; i++) {
    const Xfed__SiteAnnounce__Dataset *d = a->datasets[i];
    dataset *o = &v[i];
    copy_label(o->name, sizeof(o->name), d->name);
    for (size_t t = 0; t < d->n_tags && t < FZ_TAGS_MAX; t++)
      copy_label(o->tags[o->n_tags++], FZ_NAME_MAX, d->tags[t]);
    o->train_records = d->train_records;
    o->test_records = d->test_records;
    o->classes = d->classes;
    o->h = d->height;
    o->w = d->width;
    o->c = d->channels;
  }
  *out = v;
  return a->n_datasets;
}

static void carrier_clear(carrier *c) {
  xf_free(c->datasets);
  for (size_t i = 0; i < c->n_behind; i++) xf_free(c->behind[i].datasets);
  xf_free(c->behind);
  xf_free(c->sites);
  uint64_t id = c->id;
  memset(c, 0, sizeof(*c));
  c->id = id;
}

/* ---- the federation and the plan ------------------------------------------------------------ */

static void fed_dataset(const dataset *src, xf_fed_dataset *o, const char **tags) {
  o->name = src->name;
  o->tags = tags;
  o->n_tags = src->n_tags;
  for (uint32_t t = 0; t < src->n_tags; t++) tags[t] = src->tags[t];
  o->train_records = src->train_records;
  o->test_records = src->test_records;
  o->classes = src->classes;
  o->h = src->h;
  o->w = src->w;
  o->c = src->c;
}

/* admission's view of what was announced (coordinator/residency.c's
 * xf__federation_make), then the plan for the machine. */
static void replan(coord *co) {
  size_t n_sites = 0, n_sets = 0;
  for (int i = 0; i < FZ_ROUND_CARRIERS; i++) {
    const carrier *c = &co->c[i];
    if (!c->announced) continue;
    if (!c->regional) {
      n_sites++;
      n_sets += c->n_datasets;
    }
    for (size_t b = 0; b < c->n_behind; b++) {
      n_sites++;
      n_sets += c->behind[b].n_datasets;
    }
  }
  xf_fed_site *sites = xf_calloc(n_sites + 1, sizeof(*sites));
  xf_fed_dataset *sets = xf_calloc(n_sets + 1, sizeof(*sets));
  const char **tags = xf_calloc(n_sets * FZ_TAGS_MAX + 1, sizeof(*tags));
  if (!sites || !sets || !tags) abort();
  size_t ns = 0, nd = 0;
  for (int i = 0; i < FZ_ROUND_CARRIERS; i++) {
    const carrier *c = &co->c[i];
    if (!c->announced) continue;
    size_t count = c->regional ? c->n_behind : 1;
    for (size_t k = 0; k < count; k++) {
      const dataset *ds = c->regional ? c->behind[k].datasets : c->datasets;
      size_t n = c->regional ? c->behind[k].n_datasets : c->n_datasets;
      xf_fed_site *fs = &sites[ns++];
      fs->name = c->regional ? c->behind[k].name : carrier_names[i];
      fs->region = c->regional ? c->behind[k].region : FZ_ROUND_REGION;
      fs->via = c->regional ? carrier_names[i] : NULL;
      fs->via_region = c->regional ? FZ_ROUND_REGION : NULL;
      fs->connected = true;
      fs->datasets = &sets[nd];
      fs->n_datasets = n;
      for (size_t d = 0; d < n; d++, nd++) fed_dataset(&ds[d], &sets[nd], tags + nd * FZ_TAGS_MAX);
    }
  }
  xf_federation fed = {.sites = sites, .n_sites = ns, .coordinator_region = FZ_ROUND_REGION};
  xf_admission plan;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_admission_decide(&co->spec, NULL, &fed, &plan, &err);
  if (rc != XF_OK) abort(); /* only XF_ENOMEM */
  if (plan.verdict != XF_ADMIT_RUNS && !plan.reason[0]) abort();
  if (plan.verdict == XF_ADMIT_RUNS) {
    /* The model is made for the shape the sites announced (a submission's
     * and a run's start): whatever they claim, it is sized within the
     * limit or refused with a reason. */
    uint64_t n_params = 0;
    rc = xf_jobspec_model_params(&co->spec, plan.h, plan.w, plan.c, plan.classes, &n_params, &err);
    if (rc != XF_OK && (err.code != rc || !err.msg[0])) abort();
    if (rc == XF_OK && (n_params == 0 || n_params > XF_JOB_PARAMS_MAX)) abort();
  }
  if (xf_jobm_plan(co->m, &plan, co->now, &err) != XF_OK) abort();
  xf_admission_free(&plan);
  xf_free(sites);
  xf_free(sets);
  xf_free(tags);
}

/* ---- the machine's actions --------------------------------------------------------------------- */

static bool known(const coord *co, uint64_t id) {
  for (int i = 0; i < FZ_ROUND_CARRIERS; i++) {
    const carrier *c = &co->c[i];
    if (c->id == id) return true;
    for (size_t b = 0; b < c->n_behind; b++)
      if (c->behind[b].id == id) return true;
  }
  return false;
}

static void run_actions(coord *co) {
  for (int guard = 0; guard < 64; guard++) {
    size_t n;
    const xf_jobm_action *acts = xf_jobm_actions(co->m, &n);
    bool commit = false;
    for (size_t i = 0; i < n; i++) {
      const xf_jobm_action *a = &acts[i];
      switch (a->kind) {
      case XF_JOBM_OFFER:
      case XF_JOBM_GO:
      case XF_JOBM_CANCEL:
      case XF_JOBM_DISCARD:
      case XF_JOBM_EVALUATE:
        if (!known(co, a->carrier)) abort();
        break;
      case XF_JOBM_PARTICIPANT:
        if (!known(co, a->site)) abort();
        break;
      case XF_JOBM_RETRY:
      case XF_JOBM_PAUSE:
      case XF_JOBM_FAIL:
        if (!a->note[0]) abort();
        break;
      case XF_JOBM_COMMIT: commit = true; break;
      default: break;
      }
      for (size_t k = 0; k < a->n_sites; k++)
        if (!known(co, a->sites[k])) abort();
    }
    xf_errctx err;
    xf_errctx_clear(&err);
    if (commit) {
      if (xf_jobm_committed(co->m, co->now, &err) != XF_OK) abort();
      continue;
    }
    if (xf_jobm_wants_plan(co->m) && guard == 0) {
      replan(co);
      continue;
    }
    break;
  }
  uint32_t committed = xf_jobm_rounds_committed(co->m);
  if (committed < co->committed || committed > co->spec.rounds) abort();
  co->committed = committed;
  uint32_t invited, accepted, reported, target;
  xf_jobm_counts(co->m, &invited, &accepted, &reported, &target);
  if (accepted > invited || reported > invited) abort();
}

/* ---- messages ----------------------------------------------------------------------------------- */

static void on_announce(coord *co, int who, const Xfed__SiteAnnounce *a) {
  carrier *c = &co->c[who];
  /* Who it is must match its certificate. */
  if (strcmp(a->site ? a->site : "", carrier_names[who]) != 0 ||
      strcmp(a->region ? a->region : "", FZ_ROUND_REGION) != 0)
    return;
  carrier_clear(c);
  c->announced = true;
  c->regional = who == 4;
  c->n_datasets = read_datasets(a, &c->datasets);
  if (c->regional && a->n_behind) {
    c->behind = xf_calloc(a->n_behind, sizeof(*c->behind));
    if (!c->behind) abort();
    for (size_t i = 0; i < a->n_behind; i++) {
      const Xfed__SiteAnnounce *b = a->behind[i];
      if (!b || !b->site || !*b->site || strcmp(b->region ? b->region : "", FZ_ROUND_REGION))
        continue;
      behind_site *o = &c->behind[c->n_behind++];
      copy_label(o->name, sizeof(o->name), b->site);
      copy_label(o->region, sizeof(o->region), b->region);
      o->id = xf_admit_site_id(o->name);
      o->n_datasets = read_datasets(b, &o->datasets);
    }
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_jobm_link(co->m, c->id, true, co->now, &err) != XF_OK) abort();
  replan(co);
}

/* Ids of the names a regional sent, only of sites behind it. */
static size_t ids_of(const carrier *c, char **names, size_t n, uint64_t *out) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t id = xf_admit_site_id(names[i] ? names[i] : "");
    for (size_t j = 0; j < c->n_behind; j++)
      if (c->behind[j].id == id) {
        out[k++] = id;
        break;
      }
  }
  return k;
}

static bool current(const coord *co, uint32_t round, uint32_t attempt) {
  return round == xf_jobm_round(co->m) && (attempt == 0 || attempt == xf_jobm_attempt(co->m));
}

static void on_accept(coord *co, carrier *c, const Xfed__TaskAccept *a) {
  if (!current(co, a->round, a->attempt)) return;
  uint64_t *ids = NULL;
  size_t n = 0;
  if (c->regional) {
    ids = xf_mallocarray(a->n_sites + 1, sizeof(uint64_t));
    if (!ids) abort();
    n = ids_of(c, a->sites, a->n_sites, ids);
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_jobm_accepted(co->m, c->id, ids, n, co->now, &err) != XF_OK) abort();
  xf_free(ids);
}

static xf_jobm_refusal refusal_of(int reason) {
  switch (reason) {
  case XFED__TASK_REFUSAL__REASON__POLICY_DENIED: return XF_JOBM_REFUSED_POLICY;
  case XFED__TASK_REFUSAL__REASON__BUDGET_EXHAUSTED: return XF_JOBM_REFUSED_BUDGET;
  case XFED__TASK_REFUSAL__REASON__TARGET_REACHED: return XF_JOBM_REFUSED_TARGET;
  case XFED__TASK_REFUSAL__REASON__BUSY: return XF_JOBM_REFUSED_BUSY;
  default: return XF_JOBM_REFUSED_OTHER;
  }
}

static void on_refusal(coord *co, carrier *c, int who, const Xfed__TaskRefusal *r) {
  if (xf_jobm_get_phase(co->m) != XF_JOBM_EVALUATING && !current(co, r->round, r->attempt))
    return;
  uint64_t site = 0;
  if (c->regional && r->site && *r->site) {
    char *name = r->site;
    if (!ids_of(c, &name, 1, &site)) return;
  }
  char named[XF_JOBM_MSG_MAX];
  snprintf(named, sizeof(named), "%s: %s", r->site && *r->site ? r->site : carrier_names[who],
           r->details ? r->details : "");
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_jobm_refused(co->m, c->id, site, refusal_of((int)r->reason), named, co->now, &err) !=
      XF_OK)
    abort();
}

static uint64_t records_in(const dataset *ds, size_t n, const xf_job_data *data) {
  for (size_t i = 0; i < n; i++) {
    if (strcmp(ds[i].name, data->dataset) != 0) continue;
    bool all = true;
    for (uint32_t t = 0; t < data->n_tags && all; t++) {
      bool has = false;
      for (uint32_t j = 0; j < ds[i].n_tags && !has; j++)
        has = strcmp(ds[i].tags[j], data->tags[t]) == 0;
      all = has;
    }
    if (all) return ds[i].train_records;
  }
  return 0;
}

static uint64_t announced_records(const coord *co, const carrier *c, uint64_t site) {
  if (!c->regional || site == c->id) return records_in(c->datasets, c->n_datasets, &co->spec.data);
  for (size_t i = 0; i < c->n_behind; i++)
    if (c->behind[i].id == site)
      return records_in(c->behind[i].datasets, c->behind[i].n_datasets, &co->spec.data);
  return 0;
}

static void on_metrics(coord *co, carrier *c, int who, const Xfed__Metrics *m) {
  const char *site = m->site ? m->site : "";
  uint64_t id = xf_admit_site_id(site);
  bool own = strcmp(site, carrier_names[who]) == 0, behind = false;
  for (size_t i = 0; i < c->n_behind && !behind; i++) behind = c->behind[i].id == id;
  if (c->regional ? !(own || behind) : !own) return;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (c->regional && own && !m->has_train && !m->has_test) {
    if (xf_jobm_evaluated(co->m, c->id, co->now, &err) != XF_OK) abort();
    return;
  }
  uint32_t round = xf_jobm_round(co->m);
  xf_report r = {.round = m->round,
                 .model_round = m->model_round,
                 .has_train = m->has_train,
                 .has_test = m->has_test,
                 .has_epsilon = m->has_epsilon,
                 .train_loss = m->train_loss,
                 .test_loss = m->test_loss,
                 .test_accuracy = m->test_accuracy,
                 .samples = m->samples,
                 .bytes_up = m->bytes_up,
                 .bytes_down = m->bytes_down,
                 .epsilon = m->epsilon,
                 .noise_multiplier = m->noise_multiplier,
                 .ledger_epsilon = m->ledger_epsilon,
                 .budget_epsilon = m->budget_epsilon};
  xf_report_bounds b = {.train_records = announced_records(co, c, id),
                        .round = round > co->committed ? round : co->committed,
                        .model_round = co->committed,
                        .train_loss_hidden = co->spec.privacy.unit == XF_PRIVACY_UNIT_RECORD,
                        .max_bytes = xf_report_max_bytes(FZ_ROUND_PARAMS)};
  xf_report_fault f;
  memset(&f, 0, sizeof(f));
  if (!xf_report_check(&r, &b, &f)) {
    if (!f.field || !f.field[0] || !f.value[0] || !f.rule[0]) abort();
    if (m->has_train) {
      if (!c->regional && current(co, m->round, m->attempt) &&
          xf_jobm_dropped(co->m, c->id, "its report was refused", co->now, &err) != XF_OK)
        abort();
      return;
    }
    if (!c->regional && xf_jobm_evaluated(co->m, c->id, co->now, &err) != XF_OK) abort();
    return;
  }
  /* What passes is in range. */
  if (m->has_test && (!(m->test_accuracy >= 0 && m->test_accuracy <= 1) ||
                      !isfinite(m->test_loss) || m->test_loss < 0))
    abort();
  if ((m->has_train || m->has_test) && (m->samples < 1 || m->samples > b.train_records)) abort();
  if (!c->regional && m->has_test && !m->has_train && m->model_round == co->committed &&
      xf_jobm_evaluated(co->m, c->id, co->now, &err) != XF_OK)
    abort();
}

static void on_begin(coord *co, carrier *c, const Xfed__TensorBegin *m) {
  if (!current(co, m->round, m->attempt)) return;
  Xfed__TensorBegin__Kind want =
      c->regional ? XFED__TENSOR_BEGIN__KIND__AGGREGATE : XFED__TENSOR_BEGIN__KIND__UPDATE;
  bool masked = false;
  uint64_t len = 0;
  uint32_t bits = 0;
  if (m->kind != want || !xf_jobm_expects_update(co->m, c->id, &masked, &len, &bits)) return;
  xf_free(c->sites);
  c->sites = NULL;
  c->pending = false;
  size_t n = 1;
  if (c->regional) {
    c->sites = xf_mallocarray(m->n_sites + 1, sizeof(uint64_t));
    if (!c->sites) abort();
    n = ids_of(c, m->sites, m->n_sites, c->sites);
  }
  uint64_t records = 0;
  if (!c->regional) records = announced_records(co, c, c->id);
  else
    for (size_t i = 0; i < n; i++) records += announced_records(co, c, c->sites[i]);
  xf_report_fault f;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (!xf_report_check_weight(m->weight, records, &f)) {
    if (m->weight >= 1 && m->weight <= records) abort();
    if (xf_jobm_dropped(co->m, c->id, "its update's weight is beyond its records", co->now,
                        &err) != XF_OK)
      abort();
    return;
  }
  if (xf_jobm_announced(co->m, c->id, c->sites, c->regional ? n : 0, co->now, &err) != XF_OK)
    abort();
  if (!xf_jobm_expects_update(co->m, c->id, &masked, &len, &bits)) return; /* discarded */
  c->pending = true;
  c->stream_id = m->stream_id;
  c->n_sites = c->regional ? n : 0;
  c->weight = xf_jobm_fold_weight(co->m, m->weight, c->regional ? n : 1);
}

static void on_end(coord *co, carrier *c, const Xfed__TensorEnd *e) {
  if (!c->pending || c->stream_id != e->stream_id) return;
  c->pending = false;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_jobm_reported(co->m, c->id, c->sites, c->n_sites, c->weight, co->now, &err) != XF_OK)
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_begin(5);
  coord co;
  memset(&co, 0, sizeof(co));
  if (xf_jobspec_parse_string(FZ_ROUND_SPEC, strlen(FZ_ROUND_SPEC), "fuzz", &co.spec, NULL) !=
      XF_OK)
    abort();
  for (int i = 0; i < FZ_ROUND_CARRIERS; i++) co.c[i].id = xf_admit_site_id(carrier_names[i]);
  xf_jobm_config cfg = {.role = XF_JOBM_GLOBAL,
                        .spec = &co.spec,
                        .round = 1,
                        .attempt = 1,
                        .n_params = FZ_ROUND_PARAMS,
                        .eval_timeout_s = 30};
  if (xf_jobm_create(&cfg, &co.m, NULL) != XF_OK) abort();
  co.now = 1000.0;
  fz_input in = {data, size};
  fz_record r;
  while (fz_next(&in, N_KINDS, &r)) {
    Xfed__Envelope *env = fz_decode(kinds[r.kind], r.body, r.len);
    if (!env) continue;
    int who = (int)(r.peer % FZ_ROUND_CARRIERS);
    carrier *c = &co.c[who];
    co.now += 0.01;
    if (env->body_case == XFED__ENVELOPE__BODY_SITE_ANNOUNCE) {
      on_announce(&co, who, env->site_announce);
    } else if (env->body_case == XFED__ENVELOPE__BODY_HEARTBEAT) {
      co.now += (double)(env->heartbeat->seq % 64);
      xf_errctx err;
      xf_errctx_clear(&err);
      if (xf_jobm_tick(co.m, co.now, &err) != XF_OK) abort();
    } else if (c->announced) { /* before SiteAnnounce: refused */
      switch (env->body_case) {
      case XFED__ENVELOPE__BODY_TASK_ACCEPT: on_accept(&co, c, env->task_accept); break;
      case XFED__ENVELOPE__BODY_TASK_REFUSAL: on_refusal(&co, c, who, env->task_refusal); break;
      case XFED__ENVELOPE__BODY_METRICS: on_metrics(&co, c, who, env->metrics); break;
      case XFED__ENVELOPE__BODY_TENSOR_BEGIN: on_begin(&co, c, env->tensor_begin); break;
      case XFED__ENVELOPE__BODY_TENSOR_END: on_end(&co, c, env->tensor_end); break;
      default: abort();
      }
    }
    run_actions(&co);
    xf_envelope_free(env);
  }
  for (int i = 0; i < FZ_ROUND_CARRIERS; i++) carrier_clear(&co.c[i]);
  xf_jobm_free(co.m);
  return 0;
}
