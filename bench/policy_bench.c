/* SPDX-License-Identifier: Apache-2.0 */
/* Decisions per second of the residency policy (policy/policy.h): a
 * federation of --sites sites in --regions regions, each holding the job's
 * dataset, and --rules rules (a mix of allow and deny, every selector field
 * and condition, validity windows), parsed once; then xf_policy_decide for
 * the same job repeatedly. With --store DIR it also times what a change
 * costs in a policy database made in DIR: the import of the document, one
 * small edit, the export of a version and the diff of the two. Prints one
 * JSON object for bench/policy.sh.
 *
 * usage: xfed-bench-policy [--sites N] [--regions N] [--rules N] [--seconds S]
 *                          [--store DIR] */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "bench/bench_util.h"
#include "policy/policy.h"

static const char *const classes[] = {"public", "internal", "confidential", "restricted"};

/* The federation and rules as a policy document. */
static char *make_policy(long sites, long regions, long rules) {
  json_t *doc = json_object(), *rg = json_array(), *st = json_array(), *ds = json_array(),
         *ru = json_array();
  char name[64], other[64];
  for (long r = 0; r < regions; r++) {
    snprintf(name, sizeof(name), "r%ld", r);
    json_array_append_new(rg, json_pack("{s:s,s:s}", "name", name, "jurisdiction", "J"));
  }
  for (long s = 0; s < sites; s++) {
    snprintf(name, sizeof(name), "s%ld", s);
    snprintf(other, sizeof(other), "r%ld", s % regions);
    json_array_append_new(st, json_pack("{s:s,s:s}", "name", name, "region", other));
    json_array_append_new(ds, json_pack("{s:s,s:s,s:s,s:[s]}", "name", "data", "site", name,
                                        "classification", classes[s % 4], "tags",
                                        s % 3 ? "health" : "finance"));
  }
  for (long i = 0; i < rules; i++) {
    json_t *sel = json_object();
    switch (i % 5) {
    case 0: snprintf(name, sizeof(name), "r%ld", i % regions);
            json_object_set_new(sel, "region", json_string(name)); break;
    case 1: snprintf(name, sizeof(name), "s%ld", i % sites);
            json_object_set_new(sel, "site", json_string(name)); break;
    case 2: json_object_set_new(sel, "classification", json_string(classes[i % 4])); break;
    case 3: json_object_set_new(sel, "tag", json_string(i % 2 ? "health" : "finance")); break;
    default: json_object_set_new(sel, "dataset", json_string("data")); break;
    }
    snprintf(name, sizeof(name), "rule-%ld", i);
    snprintf(other, sizeof(other), "r%ld", (i + 1) % regions);
    bool deny = i % 7 == 0;
    json_t *rule = json_pack("{s:s,s:s,s:s,s:o,s:[s]}", "id", name, "effect",
                             deny ? "deny" : "allow", "kind",
                             i % 2 ? "update" : "regional_aggregate", "select", sel,
                             "destinations", other);
    json_t *cond = deny ? json_object()
                        : json_pack("{s:f,s:i,s:b}", "max_epsilon", 8.0, "min_cohort", 2,
                                    "require_secagg", i % 3 == 0);
    if (i % 11 == 0) {
      json_object_set_new(cond, "valid_from", json_integer(0));
      json_object_set_new(cond, "valid_until", json_integer(4102444800));
    }
    if (json_object_size(cond)) json_object_set_new(rule, "conditions", cond);
    else json_decref(cond);
    json_array_append_new(ru, rule);
  }
  json_object_set_new(doc, "regions", rg);
  json_object_set_new(doc, "sites", st);
  json_object_set_new(doc, "datasets", ds);
  json_object_set_new(doc, "rules", ru);
  char *text = json_dumps(doc, JSON_COMPACT);
  json_decref(doc);
  return text;
}

/* Seconds of the database side of a change, each step once, in a fresh
 * database under dir: import, one region added, export, diff. */
typedef struct store_times {
  double format_s, import_s, edit_s, export_s, diff_s;
  size_t document_bytes;
} store_times;

static int time_store(const char *dir, const char *text, const xf_policy *p, store_times *t) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/bench-policy.db", dir);
  unlink(path);
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_db *db = NULL;
  char *doc = NULL, *diff = NULL;
  double t0 = xf_bench_now();
  xf_err rc = xf_policy_format(p, &doc, &err);
  t->format_s = xf_bench_now() - t0;
  t->document_bytes = doc ? strlen(doc) : 0;
  xf_free(doc);
  doc = NULL;
  const xf_policy_change chg = {"bench", "bench", 1.7e9};
  if (rc == XF_OK) rc = xf_policy_open(path, &db, &err);
  t0 = xf_bench_now();
  if (rc == XF_OK) rc = xf_policy_import(db, text, "bench", "bench", 1.7e9, NULL, &err);
  t->import_s = xf_bench_now() - t0;
  t0 = xf_bench_now();
  if (rc == XF_OK) rc = xf_policy_region_add(db, "zz-new", "J", &chg, NULL, &err);
  t->edit_s = xf_bench_now() - t0;
  t0 = xf_bench_now();
  if (rc == XF_OK) rc = xf_policy_export(db, 2, &doc, &err);
  t->export_s = xf_bench_now() - t0;
  t0 = xf_bench_now();
  if (rc == XF_OK) rc = xf_policy_diff(db, 1, 2, &diff, &err);
  t->diff_s = xf_bench_now() - t0;
  xf_free(doc);
  xf_free(diff);
  xf_db_close(db);
  unlink(path);
  if (rc != XF_OK) {
    fprintf(stderr, "xfed-bench-policy: --store: %s\n", err.msg);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  long sites = 1000, regions = 10, rules = 10000;
  double seconds = 3;
  const char *store = NULL;
  static const struct option opts[] = {{"sites", required_argument, 0, 's'},
                                       {"regions", required_argument, 0, 'r'},
                                       {"rules", required_argument, 0, 'u'},
                                       {"seconds", required_argument, 0, 't'},
                                       {"store", required_argument, 0, 'd'},
                                       {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 's': sites = atol(optarg); break;
    case 'r': regions = atol(optarg); break;
    case 'u': rules = atol(optarg); break;
    case 't': seconds = atof(optarg); break;
    case 'd': store = optarg; break;
    default:
      fprintf(stderr, "usage: xfed-bench-policy [--sites N] [--regions N] [--rules N] "
                      "[--seconds S] [--store DIR]\n");
      return 2;
    }
  }
  if (sites < 1 || regions < 1 || rules < 0 || seconds <= 0) {
    fprintf(stderr, "xfed-bench-policy: sites and regions must be at least 1\n");
    return 2;
  }
  char *text = make_policy(sites, regions, rules);
  xf_policy *p = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  double t0 = xf_bench_now();
  if (!text || xf_policy_parse(text, &p, &err) != XF_OK) {
    fprintf(stderr, "xfed-bench-policy: the generated policy does not parse: %s\n", err.msg);
    return 1;
  }
  double parse_s = xf_bench_now() - t0;
  const char *tags[] = {"health"};
  xf_policy_job job = {.dataset = "data", .tags = tags, .n_tags = 0, .privacy = true,
                       .epsilon = 3, .secagg = true, .min_sites = 2,
                       .coordinator_region = "r0"};
  long n = 0;
  size_t eligible = 0;
  t0 = xf_bench_now();
  double t;
  do {
    xf_policy_decision d;
    if (xf_policy_decide(p, &job, 1.7e9, &d, &err) != XF_OK) {
      fprintf(stderr, "xfed-bench-policy: decide: %s\n", err.msg);
      return 1;
    }
    eligible = 0;
    for (size_t i = 0; i < d.n_sites; i++) eligible += d.sites[i].eligible;
    xf_policy_decision_free(&d);
    n++;
    t = xf_bench_now() - t0;
  } while (t < seconds);
  store_times st;
  memset(&st, 0, sizeof(st));
  if (store && time_store(store, text, p, &st) != 0) return 1;
  printf("{\"sites\": %ld, \"regions\": %ld, \"rules\": %ld, \"parse_s\": %.4f, "
         "\"decisions\": %ld, \"seconds\": %.3f, \"decisions_per_s\": %.2f, "
         "\"ms_per_decision\": %.3f, \"eligible_sites\": %zu",
         sites, regions, rules, parse_s, n, t, (double)n / t, 1000.0 * t / (double)n, eligible);
  if (store)
    printf(", \"document_bytes\": %zu, \"format_s\": %.4f, \"import_s\": %.4f, "
           "\"edit_s\": %.4f, \"export_s\": %.4f, \"diff_s\": %.4f",
           st.document_bytes, st.format_s, st.import_s, st.edit_s, st.export_s, st.diff_s);
  printf("}\n");
  xf_policy_free(p);
  free(text);
  return 0;
}
