/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed policy check` and `xfed policy test`: what the residency policy
 * decides for a job, from a local database (--db FILE) or the coordinator,
 * and test cases that pin those decisions down (policy/policy.h). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "cli/cli.h"
#include "cli/client.h"
#include "cli/policy_internal.h"
#include "job/admission.h"
#include "job/jobspec.h"
#include "net/frame.h"
#include "policy/policy.h"

/* ---- the decision ------------------------------------------------------------------- */

/* Prints a policy decision's tables (xf_policy_decision_json). */
static void print_decision_tables(const json_t *d, const char *coordinator_region) {
  bool allowed = json_is_true(json_object_get(d, "allowed"));
  json_t *sites = json_object_get(d, "sites"), *regions = json_object_get(d, "regions"),
         *sugg = json_object_get(d, "suggestions"), *e;
  size_t i, eligible = 0;
  json_array_foreach(sites, i, e) eligible += json_is_true(json_object_get(e, "eligible"));
  /* The rules alone; who takes part is the plan's (print_admission). */
  if (allowed)
    printf("policy version %lld, coordinator in %s: the rules allow %zu of %zu sites\n\n",
           jint(d, "version"), coordinator_region, eligible, json_array_size(sites));
  else
    printf("policy version %lld, coordinator in %s: NOT allowed as written (the rules allow %zu "
           "of %zu sites)\n\n",
           jint(d, "version"), coordinator_region, eligible, json_array_size(sites));
  printf("%-16s %-10s %-8s %-9s %-16s %s\n", "SITE", "REGION", "ELIGIBLE", "PATH", "RULE",
         "REASON");
  json_array_foreach(sites, i, e) {
    printf("%-16s %-10s %-8s %-9s %-16s %s\n", jstr(e, "site"), jstr(e, "region"),
           json_is_true(json_object_get(e, "eligible")) ? "yes" : "no", jstr(e, "path"),
           jstr(e, "rule"), jstr(e, "reason"));
  }
  printf("\n%-10s %-9s %-16s %-6s %-10s %-6s %s\n", "REGION", "PATH", "RULE", "SITES",
         "MIN_COHORT", "SECAGG", "MAX_EPSILON");
  json_array_foreach(regions, i, e) {
    char eps[32] = "-";
    json_t *max = json_object_get(e, "max_epsilon");
    if (json_is_number(max)) snprintf(eps, sizeof(eps), "%g", json_number_value(max));
    char count[48], cohort[24] = "-";
    snprintf(count, sizeof(count), "%lld/%lld", jint(e, "eligible"), jint(e, "sites"));
    /* A cohort condition means something only for a regional aggregate. */
    if (jint(e, "min_cohort") > 0) snprintf(cohort, sizeof(cohort), "%lld", jint(e, "min_cohort"));
    printf("%-10s %-9s %-16s %-6s %-10s %-6s %s\n", jstr(e, "region"), jstr(e, "path"),
           jstr(e, "rule"), count, cohort,
           json_is_true(json_object_get(e, "require_secagg")) ? "yes" : "no", eps);
  }
  if (json_array_size(sugg)) {
    fputs("\nsuggestions:\n", stdout);
    json_array_foreach(sugg, i, e) printf("  - %s\n", json_string_value(e));
  }
}

/* Prints admission's plan and verdict (xf_admission_json). */
static void print_admission(const json_t *a, bool federation) {
  json_t *sites = json_object_get(a, "sites"), *groups = json_object_get(a, "groups"), *e;
  size_t i;
  printf("\n%s\n", federation ? "the federation now (sites holding the job's data):"
                                : "the plan, with every site of the policy assumed connected:");
  printf("%-16s %-10s %-16s %-9s %-8s %s\n", "SITE", "REGION", "VIA", "CONNECTED", "ELIGIBLE",
         "REASON");
  json_array_foreach(sites, i, e) {
    const char *via = jstr(e, "via");
    printf("%-16s %-10s %-16s %-9s %-8s %s\n", jstr(e, "site"), jstr(e, "region"),
           *via ? via : "(direct)", json_is_true(json_object_get(e, "connected")) ? "yes" : "no",
           json_is_true(json_object_get(e, "eligible")) ? "yes" : "no", jstr(e, "reason"));
  }
  /* GROUP_MIN is the group's own fewest sites, not the job's min_sites
   * (the verdict's): docs/admission.md, "Groups". */
  printf("\n%-16s %-10s %-8s %-9s %-6s %-16s %s\n", "GROUP", "REGION", "SITES", "GROUP_MIN",
         "SECAGG", "RELEASE_RULE", "USABLE");
  json_array_foreach(groups, i, e) {
    const char *via = jstr(e, "via");
    char cond[96] = "-";
    if (jint(e, "min_cohort") > 1 || json_is_true(json_object_get(e, "require_secagg")) ||
        json_is_number(json_object_get(e, "max_epsilon"))) {
      int n = snprintf(cond, sizeof(cond), "%s", jstr(e, "rule"));
      (void)n;
    }
    printf("%-16s %-10s %-8lld %-9lld %-6s %-16s %s\n", *via ? via : "(direct)",
           *jstr(e, "region") ? jstr(e, "region") : "-", jint(e, "eligible"), jint(e, "min_sites"),
           json_is_true(json_object_get(e, "secagg")) ? "yes" : "no", cond,
           json_is_true(json_object_get(e, "usable")) ? "yes" : jstr(e, "reason"));
  }
  printf("\ncomposition: %s\n", jstr(a, "composition"));
}

/* Prints the answer of a check ({decision, admission}, whether decided here
 * or by the coordinator): as it is with --json, else as tables, then the
 * verdict. Returns the exit status: 0 the job runs, 3 it does not as written
 * (the same words submission refuses it with). */
static int print_check(xf_cli *cli, const char *check_json, const char *coordinator_region,
                       bool federation) {
  json_t *o = json_loads(check_json, 0, NULL);
  json_t *d = json_object_get(o, "decision"), *a = json_object_get(o, "admission");
  if (!json_is_object(a)) {
    json_decref(o);
    xf_fail(&cli->err, XF_EFORMAT, "the check's answer has no admission object");
    return xf_cli_fail(cli, XF_EFORMAT);
  }
  bool runs = strcmp(jstr(a, "verdict"), "runs") == 0;
  if (cli->json) {
    xf_cli_print_json(o);
    return runs ? XF_EXIT_OK : XF_EXIT_DENIED;
  }
  if (json_is_object(d)) print_decision_tables(d, *coordinator_region ? coordinator_region : "?");
  else if (*coordinator_region)
    printf("no residency policy decision (coordinator in %s)\n", coordinator_region);
  else
    printf("no residency policy decision: the coordinator runs without one (--residency-policy "
           "off), so every site holding the dataset is eligible\n");
  print_admission(a, federation);
  const char *verdict = jstr(a, "verdict");
  if (runs) {
    printf("\nverdict: runs: %lld sites eligible, %lld invited each round, min_sites %lld\n",
           jint(a, "eligible"), jint(a, "invite"), jint(a, "min_sites"));
  } else {
    const char *kind = strcmp(verdict, "denied") == 0       ? "the residency policy does not allow this job"
                       : strcmp(verdict, "unrunnable") == 0 ? "this job cannot run as composed"
                                                            : "this job cannot run on the federation as it is now";
    printf("\nverdict: NOT runnable as written: %s: %s\n", kind, jstr(a, "reason"));
  }
  json_decref(o);
  return runs ? XF_EXIT_OK : XF_EXIT_DENIED;
}

/* `policy check` with --db: decided here against the local current version. */
static int check_local(xf_cli *cli, const xf__policy_args *a) {
  int status = xf__policy_require(cli, a->coordinator_region, "--coordinator-region R");
  if (status != XF_EXIT_OK) return status;
  xf_jobspec *spec = xf_malloc(sizeof(*spec));
  if (!spec) return xf_cli_fail(cli, XF_ENOMEM);
  xf_err rc = xf_jobspec_parse_file(a->pos[0], spec, &cli->err);
  if (rc != XF_OK) {
    xf_free(spec);
    return xf_cli_fail(cli, rc);
  }
  const char *tags[XF_JOB_TAGS_MAX];
  for (uint32_t i = 0; i < spec->data.n_tags; i++) tags[i] = spec->data.tags[i];
  xf_policy_job job = {.dataset = spec->data.dataset,
                       .tags = tags,
                       .n_tags = spec->data.n_tags,
                       .privacy = spec->privacy.mode != XF_PRIVACY_NONE,
                       .epsilon = a->has_epsilon ? a->epsilon : spec->privacy.target_epsilon,
                       .secagg = spec->secure_aggregation.enabled,
                       .min_sites = spec->min_sites,
                       .coordinator_region = a->coordinator_region};
  if (job.privacy && !a->has_epsilon && !spec->privacy.has_target_epsilon) {
    xf_free(spec);
    return xf_cli_usage(cli, "%s sets no privacy.target_epsilon: give the epsilon the job will "
                             "spend with --epsilon E",
                        a->pos[0]);
  }
  xf_db *db;
  xf_policy *p = NULL;
  if ((status = xf__policy_open_db(cli, a, false, &db)) != XF_EXIT_OK) {
    xf_free(spec);
    return status;
  }
  status = xf__policy_load_current(cli, db, &p);
  xf_db_close(db);
  if (status != XF_EXIT_OK) {
    xf_free(spec);
    return status;
  }
  xf_policy_decision d;
  memset(&d, 0, sizeof(d));
  const xf_federation no_sites = {.coordinator_region = a->coordinator_region};
  rc = xf_admission_check_dataset(spec, &no_sites, p, &cli->err);
  if (rc == XF_EINVAL) xf_errctx_file(&cli->err, a->pos[0]);
  if (rc == XF_OK) rc = xf_policy_decide(p, &job, (double)time(NULL), &d, &cli->err);
  xf_policy_free(p);
  char *json = NULL, *admission = NULL;
  if (rc == XF_OK) rc = xf_policy_decision_json(&d, &json, &cli->err);
  /* Admission over the policy's own sites, each assumed connected: straight
   * to the coordinator where its region's path is direct, behind its
   * region's aggregator where it is regional. */
  if (rc == XF_OK) {
    size_t n = d.n_sites;
    xf_fed_site *fs = xf_calloc(n ? n : 1, sizeof(*fs));
    xf_fed_dataset *ds = xf_calloc(n ? n : 1, sizeof(*ds));
    char (*vias)[80] = xf_calloc(n ? n : 1, sizeof(*vias));
    if (!fs || !ds || !vias) rc = xf_fail(&cli->err, XF_ENOMEM, "out of memory");
    for (size_t i = 0; rc == XF_OK && i < n; i++) {
      const xf_policy_site_decision *sd = &d.sites[i];
      bool regional = false;
      for (size_t r = 0; r < d.n_regions; r++)
        if (strcmp(d.regions[r].region, sd->region) == 0)
          regional = d.regions[r].path == XF_POLICY_PATH_REGIONAL;
      snprintf(vias[i], sizeof(vias[i]), "%s-aggregator", sd->region);
      ds[i] = (xf_fed_dataset){.name = job.dataset, .tags = job.tags, .n_tags = job.n_tags};
      fs[i] = (xf_fed_site){.name = sd->site, .region = sd->region,
                            .via = regional ? vias[i] : NULL, .via_region = sd->region,
                            .connected = true, .datasets = &ds[i], .n_datasets = 1};
    }
    xf_federation fed = {.sites = fs, .n_sites = n, .coordinator_region = a->coordinator_region,
                         .residency_on = true, .assumed = true};
    xf_admission adm;
    if (rc == XF_OK) rc = xf_admission_decide(spec, &d, &fed, &adm, &cli->err);
    if (rc == XF_OK) {
      rc = xf_admission_json(&adm, spec, &admission, &cli->err);
      xf_admission_free(&adm);
    }
    xf_free(fs);
    xf_free(ds);
    xf_free(vias);
  }
  xf_policy_decision_free(&d);
  xf_free(spec);
  if (rc != XF_OK) {
    xf_free(json);
    xf_free(admission);
    if (strcmp(cli->err.field, "coordinator_region") == 0)
      snprintf(cli->err.field, sizeof(cli->err.field), "--coordinator-region");
    return xf_cli_fail(cli, rc);
  }
  json_t *o = json_pack("{s:o,s:o}", "decision", json_loads(json, 0, NULL), "admission",
                        json_loads(admission, 0, NULL));
  char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  xf_free(json);
  xf_free(admission);
  if (!text) return xf_cli_fail(cli, XF_ENOMEM);
  status = print_check(cli, text, a->coordinator_region, false);
  free(text); /* jansson's */
  return status;
}

/* The job spec as sent for a remote check: as written, or with --epsilon as
 * its privacy.target_epsilon. The caller frees *out with xf_free. */
static int spec_text(xf_cli *cli, const xf__policy_args *a, char **out) {
  char *text = NULL;
  xf_err rc = xf__policy_read_text(a->pos[0], &text, &cli->err);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  if (!a->has_epsilon) {
    *out = text;
    return XF_EXIT_OK;
  }
  json_t *spec = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
  xf_free(text);
  json_t *privacy = json_object_get(spec, "privacy");
  if (!json_is_object(privacy)) {
    json_decref(spec);
    return xf_cli_usage(cli, "--epsilon: %s has no privacy object to set target_epsilon in",
                        a->pos[0]);
  }
  json_object_set_new(privacy, "target_epsilon", json_real(a->epsilon));
  char *dumped = json_dumps(spec, JSON_COMPACT);
  json_decref(spec);
  *out = dumped ? xf_strdup(dumped) : NULL;
  free(dumped); /* jansson's */
  return *out ? XF_EXIT_OK : xf_cli_fail(cli, XF_ENOMEM);
}

/* `policy check` without --db: the coordinator decides as it would for a
 * submission, in its own region (a dry run: nothing is journaled). */
static int check_remote(xf_cli *cli, const xf__policy_args *a) {
  if (a->coordinator_region)
    return xf_cli_usage(cli, "--coordinator-region is for --db: the coordinator decides in its "
                             "own region");
  char *text = NULL;
  int st = spec_text(cli, a, &text);
  if (st != XF_EXIT_OK) return st;
  xf_client *c = NULL;
  if ((st = xf_client_connect(cli, &a->conn, &c)) != XF_EXIT_OK) {
    xf_free(text);
    return st;
  }
  Xfed__PolicyRequest req = XFED__POLICY_REQUEST__INIT;
  req.verb = "check";
  req.job_json = text;
  req.origin = a->pos[0];
  Xfed__Envelope *answer = NULL;
  st = xf__policy_request(cli, c, &req, true, &answer);
  xf_client_close(c);
  xf_free(text);
  if (st != XF_EXIT_OK) return st;
  const Xfed__PolicyReply *r = answer->policy_reply;
  st = print_check(cli, r->text ? r->text : "",
                   r->coordinator_region ? r->coordinator_region : "", true);
  xf_envelope_free(answer);
  return st;
}

int xf_cmd_policy_check(xf_cli *cli, int argc, char **argv) {
  xf__policy_args a;
  int status;
  if ((status = xf__policy_parse_args(cli, argc, argv, "db,coordinator-region,epsilon", 1, 1,
                                      "JOB.json", &a)) != XF_EXIT_OK)
    return status;
  return a.db ? check_local(cli, &a) : check_remote(cli, &a);
}

/* ---- test cases ---------------------------------------------------------------------- */

/* A malformed cases file: names the file and the member at fault. */
static xf_err case_error(xf_cli *cli, const char *path, const char *field, const char *msg) {
  xf_fail(&cli->err, XF_EFORMAT, "%s", msg);
  snprintf(cli->err.file, sizeof(cli->err.file), "%s", path);
  snprintf(cli->err.field, sizeof(cli->err.field), "%.*s", (int)sizeof(cli->err.field) - 1,
           field);
  return XF_EFORMAT;
}

/* Checks that o has only the members in `known` (comma-separated). */
static xf_err known_members(xf_cli *cli, const char *path, const char *where, json_t *o,
                            const char *known) {
  const char *key;
  json_t *v;
  json_object_foreach(o, key, v) {
    size_t len = strlen(key);
    bool ok = false;
    for (const char *p = known; *p;) {
      size_t l = strcspn(p, ",");
      if (l == len && strncmp(p, key, len) == 0) ok = true;
      p += l;
      if (*p == ',') p++;
    }
    if (!ok) {
      char field[160];
      snprintf(field, sizeof(field), "%s.%s", where, key);
      return case_error(cli, path, field, "unknown member");
    }
  }
  return XF_OK;
}

/* One case's job facts and expectations, borrowed from the JSON document. */
typedef struct policy_case {
  const char *name;
  xf_policy_job job;
  const char *tags[XF_POLICY_TAGS_MAX];
  double now;
  bool allowed;
  json_t *eligible; /* array of site names, or NULL */
  json_t *paths;    /* object region -> path name, or NULL */
} policy_case;

static xf_err parse_case(xf_cli *cli, const char *path, size_t i, json_t *c, double now,
                         policy_case *pc) {
  char where[64], f[160];
  snprintf(where, sizeof(where), "[%zu]", i);
  memset(pc, 0, sizeof(*pc));
  pc->now = now;
  if (!json_is_object(c)) return case_error(cli, path, where, "a case must be an object");
  XF_GUARD(known_members(cli, path, where, c, "name,job,now,expect"));
  json_t *name = json_object_get(c, "name"), *job = json_object_get(c, "job"),
         *at = json_object_get(c, "now"), *expect = json_object_get(c, "expect");
  snprintf(f, sizeof(f), "%s.name", where);
  if (!json_is_string(name) || !*json_string_value(name))
    return case_error(cli, path, f, "required: a non-empty string");
  pc->name = json_string_value(name);
  snprintf(f, sizeof(f), "%s.job", where);
  if (!json_is_object(job)) return case_error(cli, path, f, "required: an object");
  XF_GUARD(known_members(cli, path, f, job,
                         "dataset,tags,privacy_mode,epsilon,secagg,min_sites,coordinator_region"));
  json_t *v;
  snprintf(f, sizeof(f), "%s.job.dataset", where);
  if (!json_is_string(v = json_object_get(job, "dataset")))
    return case_error(cli, path, f, "required: a string");
  pc->job.dataset = json_string_value(v);
  snprintf(f, sizeof(f), "%s.job.coordinator_region", where);
  if (!json_is_string(v = json_object_get(job, "coordinator_region")))
    return case_error(cli, path, f, "required: a string");
  pc->job.coordinator_region = json_string_value(v);
  if ((v = json_object_get(job, "tags"))) {
    snprintf(f, sizeof(f), "%s.job.tags", where);
    if (!json_is_array(v) || json_array_size(v) > XF_POLICY_TAGS_MAX)
      return case_error(cli, path, f, "an array of at most 32 strings");
    for (size_t k = 0; k < json_array_size(v); k++) {
      if (!json_is_string(json_array_get(v, k)))
        return case_error(cli, path, f, "an array of at most 32 strings");
      pc->tags[k] = json_string_value(json_array_get(v, k));
    }
    pc->job.tags = pc->tags;
    pc->job.n_tags = json_array_size(v);
  }
  if ((v = json_object_get(job, "privacy_mode"))) {
    snprintf(f, sizeof(f), "%s.job.privacy_mode", where);
    xf_privacy_mode mode;
    if (!json_is_string(v) || xf_job_privacy_mode_from_name(json_string_value(v), &mode) != XF_OK)
      return case_error(cli, path, f, "none, central, distributed or local");
    pc->job.privacy = mode != XF_PRIVACY_NONE;
  }
  if ((v = json_object_get(job, "epsilon"))) {
    snprintf(f, sizeof(f), "%s.job.epsilon", where);
    if (!json_is_number(v)) return case_error(cli, path, f, "a number");
    pc->job.epsilon = json_number_value(v);
  }
  if ((v = json_object_get(job, "secagg"))) {
    snprintf(f, sizeof(f), "%s.job.secagg", where);
    if (!json_is_boolean(v)) return case_error(cli, path, f, "true or false");
    pc->job.secagg = json_is_true(v);
  }
  if ((v = json_object_get(job, "min_sites"))) {
    snprintf(f, sizeof(f), "%s.job.min_sites", where);
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > (json_int_t)XF_JOB_SITES_MAX)
      return case_error(cli, path, f, "a whole number from 0 to 100000");
    pc->job.min_sites = (unsigned)json_integer_value(v);
  }
  if (at) {
    snprintf(f, sizeof(f), "%s.now", where);
    if (json_is_number(at)) pc->now = json_number_value(at);
    else if (!json_is_string(at) ||
             xf_cli_parse_time(cli, f, json_string_value(at), &pc->now) != XF_OK)
      return case_error(cli, path, f, "Unix seconds or an ISO 8601 UTC time");
  }
  snprintf(f, sizeof(f), "%s.expect", where);
  if (!json_is_object(expect)) return case_error(cli, path, f, "required: an object");
  XF_GUARD(known_members(cli, path, f, expect, "allowed,eligible,paths"));
  snprintf(f, sizeof(f), "%s.expect.allowed", where);
  if (!json_is_boolean(v = json_object_get(expect, "allowed")))
    return case_error(cli, path, f, "required: true or false");
  pc->allowed = json_is_true(v);
  if ((v = json_object_get(expect, "eligible"))) {
    snprintf(f, sizeof(f), "%s.expect.eligible", where);
    if (!json_is_array(v)) return case_error(cli, path, f, "an array of site names");
    for (size_t k = 0; k < json_array_size(v); k++)
      if (!json_is_string(json_array_get(v, k)))
        return case_error(cli, path, f, "an array of site names");
    pc->eligible = v;
  }
  if ((v = json_object_get(expect, "paths"))) {
    snprintf(f, sizeof(f), "%s.expect.paths", where);
    if (!json_is_object(v)) return case_error(cli, path, f, "an object of region: path");
    const char *region;
    json_t *pv;
    json_object_foreach(v, region, pv) {
      const char *s = json_is_string(pv) ? json_string_value(pv) : "";
      if (strcmp(s, "direct") != 0 && strcmp(s, "regional") != 0 && strcmp(s, "none") != 0) {
        snprintf(f, sizeof(f), "%s.expect.paths.%s", where, region);
        return case_error(cli, path, f, "direct, regional or none");
      }
    }
    pc->paths = v;
  }
  return XF_OK;
}

static bool in_array(json_t *arr, const char *s) {
  for (size_t k = 0; k < json_array_size(arr); k++)
    if (strcmp(json_string_value(json_array_get(arr, k)), s) == 0) return true;
  return false;
}

/* Compares a decision with a case's expectations; writes the first
 * difference into why (empty when it passes). */
static void judge(const policy_case *pc, const xf_policy_decision *d, char *why, size_t len) {
  why[0] = '\0';
  if (d->allowed != pc->allowed) {
    snprintf(why, len, "expected %s, got %s", pc->allowed ? "allowed" : "not allowed",
             d->allowed ? "allowed" : "not allowed");
    return;
  }
  if (pc->eligible) {
    for (size_t i = 0; i < d->n_sites; i++) {
      bool want = in_array(pc->eligible, d->sites[i].site);
      if (want != d->sites[i].eligible) {
        snprintf(why, len, "site %s: expected %s, got %s (%s)", d->sites[i].site,
                 want ? "eligible" : "not eligible", d->sites[i].eligible ? "eligible" : "not eligible",
                 d->sites[i].why);
        return;
      }
    }
    for (size_t k = 0; k < json_array_size(pc->eligible); k++) {
      const char *s = json_string_value(json_array_get(pc->eligible, k));
      bool found = false;
      for (size_t i = 0; i < d->n_sites; i++) found |= strcmp(d->sites[i].site, s) == 0;
      if (!found) {
        snprintf(why, len, "site %s: expected eligible, but it is not in the job's federation", s);
        return;
      }
    }
  }
  if (pc->paths) {
    const char *region;
    json_t *pv;
    json_object_foreach(pc->paths, region, pv) {
      const char *want = json_string_value(pv);
      const char *got = NULL;
      for (size_t i = 0; i < d->n_regions; i++)
        if (strcmp(d->regions[i].region, region) == 0)
          got = xf_policy_path_name(d->regions[i].path);
      if (!got) {
        snprintf(why, len, "region %s: expected path %s, but the plan has no such region",
                 region, want);
        return;
      }
      if (strcmp(got, want) != 0) {
        snprintf(why, len, "region %s: expected path %s, got %s", region, want, got);
        return;
      }
    }
  }
}

int xf_cmd_policy_test(xf_cli *cli, int argc, char **argv) {
  xf__policy_args a;
  int status;
  if ((status = xf__policy_parse_args(cli, argc, argv, "db", 1, 1, "CASES.json", &a)) != XF_EXIT_OK)
    return status;
  const char *path = a.pos[0];
  json_error_t je;
  json_t *cases = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  if (!cases) {
    xf_fail(&cli->err, XF_EFORMAT, "not JSON: %s (line %d)", je.text, je.line);
    snprintf(cli->err.file, sizeof(cli->err.file), "%s", path);
    return xf_cli_fail(cli, XF_EFORMAT);
  }
  if (!json_is_array(cases)) {
    json_decref(cases);
    return xf_cli_fail(cli, case_error(cli, path, "", "the cases file must be a JSON array"));
  }
  double now = (double)time(NULL);
  size_t n = json_array_size(cases);
  policy_case *pcs = xf_mallocarray(n ? n : 1, sizeof(*pcs));
  if (!pcs) {
    json_decref(cases);
    return xf_cli_fail(cli, XF_ENOMEM);
  }
  xf_err rc = XF_OK;
  for (size_t i = 0; i < n && rc == XF_OK; i++)
    rc = parse_case(cli, path, i, json_array_get(cases, i), now, &pcs[i]);
  xf_policy *p = NULL;
  if (rc != XF_OK) status = xf_cli_fail(cli, rc);
  else status = xf__policy_load(cli, &a, &p);
  if (status != XF_EXIT_OK) {
    xf_free(pcs);
    json_decref(cases);
    return status;
  }
  size_t failed = 0;
  json_t *results = json_array();
  if (!cli->json) printf("policy version %llu: %zu case%s\n", (unsigned long long)p->version, n,
                         n == 1 ? "" : "s");
  for (size_t i = 0; i < n; i++) {
    xf_policy_decision d;
    memset(&d, 0, sizeof(d));
    xf_errctx err;
    xf_errctx_clear(&err);
    char why[512];
    rc = xf_policy_decide(p, &pcs[i].job, pcs[i].now, &d, &err);
    if (rc == XF_OK) judge(&pcs[i], &d, why, sizeof(why));
    else snprintf(why, sizeof(why), "the decision failed: %.100s%s%.360s", err.field,
                  err.field[0] ? ": " : "", err.msg[0] ? err.msg : xf_strerror(rc));
    xf_policy_decision_free(&d);
    bool pass = !why[0];
    failed += !pass;
    if (cli->json) {
      json_t *o = json_pack("{s:s,s:b}", "name", pcs[i].name, "pass", pass);
      if (!pass) json_object_set_new(o, "reason", json_string(why));
      json_array_append_new(results, o);
    } else if (pass) {
      printf("pass  %s\n", pcs[i].name);
    } else {
      printf("FAIL  %s: %s\n", pcs[i].name, why);
    }
  }
  if (cli->json)
    xf_cli_print_json(json_pack("{s:I,s:i,s:i,s:o}", "version", (json_int_t)p->version, "passed",
                         (int)(n - failed), "failed", (int)failed, "cases", results));
  else {
    json_decref(results);
    printf("%zu passed, %zu failed\n", n - failed, failed);
  }
  xf_policy_free(p);
  xf_free(pcs);
  json_decref(cases);
  return failed ? XF_EXIT_ERROR : XF_EXIT_OK;
}
