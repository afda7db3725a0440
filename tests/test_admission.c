/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of admission (job/admission.h): per-site eligibility and why,
 * groups per aggregator with their fewest sites, secure aggregation and
 * release conditions, and the verdict with its reason and fix, on
 * federations built in memory, with and without a residency policy parsed
 * from a document and decided for the job. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "crypto/digest.h"
#include "job/admission.h"
#include "job/jobspec.h"
#include "job/residency.h"
#include "policy/policy.h"
#include "policy/release.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static int group_setup(void **state) {
  (void)state;
  return xf_crypto_init() == XF_OK ? 0 : -1;
}

/* ---- helpers -------------------------------------------------------------------- */

static void contains_at(const char *text, const char *part, const char *file, int line) {
  if (!strstr(text, part)) fail_msg("%s:%d: \"%s\"\n    does not contain \"%s\"", file, line, text, part);
}
#define assert_contains(text, part) contains_at((text), (part), __FILE__, __LINE__)

static void lacks_at(const char *text, const char *part, const char *file, int line) {
  if (strstr(text, part)) fail_msg("%s:%d: \"%s\"\n    contains \"%s\"", file, line, text, part);
}
#define assert_lacks(text, part) lacks_at((text), (part), __FILE__, __LINE__)

static bool starts_with(const char *text, const char *prefix) {
  return strncmp(text, prefix, strlen(prefix)) == 0;
}

/* A valid logreg spec on dataset mnist: one round, every eligible site
 * invited, min_sites 2, no privacy, no secure aggregation, topology flat.
 * Tests change fields and check them with valid(). */
static xf_jobspec spec_base(void) {
  xf_jobspec s;
  xf_jobspec_defaults(&s);
  snprintf(s.name, sizeof(s.name), "admission-test");
  snprintf(s.data.dataset, sizeof(s.data.dataset), "mnist");
  s.rounds = 1;
  s.min_sites = 2;
  return s;
}

static void valid(const xf_jobspec *s) {
  xf_errctx err = {0};
  xf_err rc = xf_jobspec_validate(s, &err);
  if (rc != XF_OK) fail_msg("spec does not validate: %s: %s", err.field, err.msg);
}

/* Secure aggregation on, with the clip it needs (no noise). */
static void with_secagg(xf_jobspec *s) {
  s->secure_aggregation.enabled = true;
  s->privacy.clip = 1.0;
}

static const xf_fed_dataset mnist28 = {.name = "mnist", .train_records = 600, .test_records = 100,
                                       .classes = 10, .h = 28, .w = 28, .c = 1};
static const xf_fed_dataset mnist32 = {.name = "mnist", .train_records = 500, .test_records = 50,
                                       .classes = 10, .h = 32, .w = 32, .c = 3};
static const xf_fed_dataset cifar = {.name = "cifar", .train_records = 500, .test_records = 50,
                                     .classes = 10, .h = 32, .w = 32, .c = 3};

/* A connected site with mnist28, straight to the coordinator or behind
 * regional aggregator `agg` of its own region. */
#define DIRECT(n, r) \
  { .name = (n), .region = (r), .connected = true, .datasets = &mnist28, .n_datasets = 1 }
#define BEHIND(n, r, agg)                                                                   \
  {                                                                                         \
    .name = (n), .region = (r), .via = (agg), .via_region = (r), .connected = true,         \
    .datasets = &mnist28, .n_datasets = 1                                                   \
  }

/* A policy document of regions eu, us and ap, the sites given as
 * "name@region" separated by spaces, each holding an internal mnist, and
 * `rules` (members of the rules array, may be ""). */
static xf_policy *policy_of(const char *sites, const char *rules) {
  char doc[8192], site_list[2048] = "", data_list[4096] = "", copy[512];
  snprintf(copy, sizeof(copy), "%s", sites);
  char *save = NULL;
  for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
    char *at = strchr(tok, '@');
    assert_non_null(at);
    *at = '\0';
    size_t sl = strlen(site_list), dl = strlen(data_list);
    snprintf(site_list + sl, sizeof(site_list) - sl, "%s{\"name\": \"%s\", \"region\": \"%s\"}",
             sl ? ", " : "", tok, at + 1);
    snprintf(data_list + dl, sizeof(data_list) - dl,
             "%s{\"name\": \"mnist\", \"site\": \"%s\", \"classification\": \"internal\"}",
             dl ? ", " : "", tok);
  }
  snprintf(doc, sizeof(doc),
           "{\"regions\": [{\"name\": \"eu\", \"jurisdiction\": \"EU GDPR\"}, {\"name\": \"us\"},"
           " {\"name\": \"ap\"}], \"sites\": [%s], \"datasets\": [%s], \"rules\": [%s]}",
           site_list, data_list, rules);
  xf_policy *p = NULL;
  xf_errctx err = {0};
  xf_err rc = xf_policy_parse(doc, &p, &err);
  if (rc != XF_OK) fail_msg("policy: %s: %s\n%s", err.field, err.msg, doc);
  return p;
}

/* eu's updates leave for us only as a regional aggregate, under conditions
 * (a JSON object, or NULL for none). */
static const char *eu_regional(const char *conditions, char *buf, size_t len) {
  snprintf(buf, len,
           "{\"id\": \"eu-regional\", \"effect\": \"allow\", \"kind\": \"regional_aggregate\","
           " \"select\": {\"region\": \"eu\"}, \"destinations\": [\"us\"]%s%s}",
           conditions ? ", \"conditions\": " : "", conditions ? conditions : "");
  return buf;
}

/* eu's updates may go to us directly. */
static const char eu_direct[] = "{\"id\": \"eu-out\", \"effect\": \"allow\", \"kind\": \"update\","
                                " \"select\": {\"region\": \"eu\"}, \"destinations\": [\"us\"]}";

/* One admission with what it was decided from. */
typedef struct admitted {
  xf_policy *policy;
  xf_policy_decision decision;
  bool decided;
  xf_admission a;
} admitted;

/* Admits spec on the federation of `sites` with the coordinator in us. With
 * policy_sites (see policy_of) the residency policy is on and decided for
 * the spec at time 1000, as the coordinator does; with NULL it is off. */
static void admit(admitted *r, const xf_jobspec *spec, const char *policy_sites, const char *rules,
                  const xf_fed_site *sites, size_t n) {
  memset(r, 0, sizeof(*r));
  valid(spec);
  xf_errctx err = {0};
  if (policy_sites) {
    r->policy = policy_of(policy_sites, rules ? rules : "");
    const char *tags[XF_JOB_TAGS_MAX];
    xf_policy_job job;
    xf_err rc = xf_residency_job_of(spec, "us", tags, &job, &err);
    if (rc != XF_OK) fail_msg("residency job: %s: %s", err.field, err.msg);
    rc = xf_policy_decide(r->policy, &job, 1000, &r->decision, &err);
    if (rc != XF_OK) fail_msg("decide: %s: %s", err.field, err.msg);
    r->decided = true;
  }
  xf_federation fed = {.sites = sites,
                       .n_sites = n,
                       .coordinator_region = "us",
                       .residency_on = policy_sites != NULL};
  xf_err rc = xf_admission_decide(spec, r->decided ? &r->decision : NULL, &fed, &r->a, &err);
  if (rc != XF_OK) fail_msg("admission: %s", err.msg);
}

static void admitted_free(admitted *r) {
  xf_admission_free(&r->a);
  if (r->decided) xf_policy_decision_free(&r->decision);
  xf_policy_free(r->policy);
  memset(r, 0, sizeof(*r));
}

static void verdict_is_at(const xf_admission *a, xf_admit_verdict want, const char *file,
                          int line) {
  if (a->verdict != want)
    fail_msg("%s:%d: verdict %s, want %s; reason: %s", file, line,
             xf_admit_verdict_name(a->verdict), xf_admit_verdict_name(want), a->reason);
}
#define assert_verdict(a, want) verdict_is_at((a), (want), __FILE__, __LINE__)

static const xf_admit_site *plan_site(const xf_admission *a, const char *name) {
  for (size_t i = 0; i < a->n_sites; i++)
    if (strcmp(a->sites[i].name, name) == 0) return &a->sites[i];
  fail_msg("site %s is not in the plan", name);
  return NULL;
}

/* The group of aggregator `via` ("" for the direct group). */
static const xf_admit_group *plan_group(const xf_admission *a, const char *via) {
  for (size_t i = 0; i < a->n_groups; i++)
    if (strcmp(a->groups[i].via, via) == 0) return &a->groups[i];
  fail_msg("group '%s' is not in the plan", via);
  return NULL;
}

/* ---- sites and aggregators ---------------------------------------------------------- */

static void min_sites_counts_sites_not_aggregators(void **state) {
  (void)state;
  const xf_fed_site sites[] = {BEHIND("a-1", "eu", "agg-a"), BEHIND("a-2", "eu", "agg-a"),
                               BEHIND("b-1", "ap", "agg-b"), BEHIND("b-2", "ap", "agg-b")};
  xf_jobspec spec = spec_base();
  spec.topology = XF_JOB_TOPOLOGY_REGIONAL;
  spec.min_sites = 3;
  admitted r;
  admit(&r, &spec, NULL, NULL, sites, COUNT(sites));
  assert_verdict(&r.a, XF_ADMIT_RUNS);
  assert_string_equal(r.a.reason, "");
  assert_false(r.a.has_policy);
  assert_int_equal(r.a.eligible, 4);
  assert_int_equal(r.a.invite, 4);
  assert_int_equal(r.a.n_sites, 4);
  for (size_t i = 0; i < r.a.n_sites; i++) {
    assert_true(r.a.sites[i].eligible);
    assert_string_equal(r.a.sites[i].rule, "-");
  }
  /* The aggregators are groups, not sites. */
  assert_null(xf_admission_site(&r.a, xf_admit_site_id("agg-a")));
  assert_int_equal(r.a.n_groups, 2);
  assert_string_equal(r.a.groups[0].via, "agg-a");
  assert_string_equal(r.a.groups[1].via, "agg-b");
  for (size_t g = 0; g < 2; g++) {
    assert_int_equal(r.a.groups[g].eligible, 2);
    assert_int_equal(r.a.groups[g].min_sites, 1);
    assert_true(r.a.groups[g].usable);
    assert_string_equal(r.a.groups[g].path, "regional");
  }
  assert_string_equal(r.a.groups[1].region, "ap");
  assert_int_equal(plan_site(&r.a, "b-1")->group, 1);
  assert_contains(r.a.composition, "2 regional aggregates");
  admitted_free(&r);

  /* Five sites are more than there are, however the aggregators count. */
  spec.min_sites = 5;
  admit(&r, &spec, NULL, NULL, sites, COUNT(sites));
  assert_verdict(&r.a, XF_ADMIT_SHORT);
  assert_contains(r.a.reason, "min_sites is 5 (counted in sites");
  assert_contains(r.a.reason, "4 of the 4 sites holding dataset 'mnist' (4 connected)");
  assert_contains(r.a.reason, "lower min_sites to at most 4");
  admitted_free(&r);
}

static void sites_behind_an_aggregator_need_topology_regional_without_a_policy(void **state) {
  (void)state;
  const xf_fed_site mixed[] = {DIRECT("d-1", "us"), DIRECT("d-2", "us"),
                               BEHIND("r-1", "eu", "agg-eu"), BEHIND("r-2", "eu", "agg-eu")};
  xf_jobspec spec = spec_base(); /* flat */
  admitted r;
  admit(&r, &spec, NULL, NULL, mixed, COUNT(mixed));
  assert_verdict(&r.a, XF_ADMIT_RUNS);
  assert_int_equal(r.a.eligible, 2);
  const xf_admit_site *r1 = plan_site(&r.a, "r-1");
  assert_false(r1->eligible);
  assert_true(r1->connected);
  assert_string_equal(r1->via, "agg-eu");
  assert_int_equal(r1->via_id, xf_admit_site_id("agg-eu"));
  assert_contains(r1->why, "regional aggregator agg-eu");
  assert_contains(r1->why, "\"topology\": \"regional\"");
  assert_true(plan_site(&r.a, "d-1")->eligible);
  assert_int_equal(r.a.n_groups, 1); /* only the direct group has eligible sites */
  admitted_free(&r);

  /* Too few without them: short, and the reason says why they are out. */
  spec.min_sites = 3;
  admit(&r, &spec, NULL, NULL, mixed, COUNT(mixed));
  assert_verdict(&r.a, XF_ADMIT_SHORT);
  assert_contains(r.a.reason, "lower min_sites to at most 2");
  assert_contains(r.a.reason, "r-1: it is behind regional aggregator agg-eu");
  admitted_free(&r);

  /* Every site behind the aggregator: none can take part, and the refusal
   * still has to say why. */
  const xf_fed_site behind[] = {BEHIND("r-1", "eu", "agg-eu"), BEHIND("r-2", "eu", "agg-eu")};
  spec.min_sites = 2;
  admit(&r, &spec, NULL, NULL, behind, COUNT(behind));
  assert_verdict(&r.a, XF_ADMIT_SHORT);
  assert_int_equal(r.a.eligible, 0);
  assert_contains(plan_site(&r.a, "r-2")->why, "agg-eu");
  assert_contains(r.a.reason, "r-1: it is behind regional aggregator agg-eu");
  admitted_free(&r);

  /* With "topology": "regional" they take part through the aggregator. */
  spec.topology = XF_JOB_TOPOLOGY_REGIONAL;
  admit(&r, &spec, NULL, NULL, mixed, COUNT(mixed));
  assert_verdict(&r.a, XF_ADMIT_RUNS);
  assert_int_equal(r.a.eligible, 4);
  assert_contains(plan_site(&r.a, "r-1")->why, "through its regional aggregator");
  admitted_free(&r);
}

static void disconnected_and_misshapen_sites_are_named(void **state) {
  (void)state;
  /* The shape is the first connected site's by name: site-a's 28x28x1. */
  const xf_fed_site sites[] = {
      {.name = "site-c", .region = "us", .connected = true, .datasets = &mnist32, .n_datasets = 1},
      {.name = "site-b", .region = "us", .connected = false, .datasets = &mnist28, .n_datasets = 1},
      DIRECT("site-a", "us"),
      DIRECT("site-d", "us"),
      /* Holds another dataset only: not a holder of the job's data. */
      {.name = "site-e", .region = "us", .connected = true, .datasets = &cifar, .n_datasets = 1},
  };
  xf_jobspec spec = spec_base();
  spec.min_sites = 3;
  admitted r;
  admit(&r, &spec, NULL, NULL, sites, COUNT(sites));
  assert_verdict(&r.a, XF_ADMIT_SHORT);
  assert_int_equal(r.a.n_sites, 4);
  assert_null(xf_admission_site(&r.a, xf_admit_site_id("site-e")));
  assert_string_equal(r.a.sites[0].name, "site-a"); /* by name */
  assert_int_equal(r.a.h, 28);
  assert_int_equal(r.a.w, 28);
  assert_int_equal(r.a.c, 1);
  assert_int_equal(r.a.classes, 10);
  assert_int_equal(r.a.eligible, 2);

  const xf_admit_site *b = plan_site(&r.a, "site-b");
  assert_false(b->eligible);
  assert_false(b->connected);
  assert_contains(b->why, "not connected");
  const xf_admit_site *c = plan_site(&r.a, "site-c");
  assert_false(c->eligible);
  assert_true(c->connected);
  assert_contains(c->why, "'mnist' holds 32x32x3");
  assert_contains(c->why, "takes 28x28x1");
  assert_int_equal(c->records, 500);
  assert_int_equal(plan_site(&r.a, "site-a")->records, 600);
  assert_int_equal(plan_site(&r.a, "site-a")->test_records, 100);

  assert_contains(r.a.reason, "2 of the 4 sites holding dataset 'mnist' (3 connected)");
  assert_contains(r.a.reason, "site-c: its dataset 'mnist' holds 32x32x3");
  admitted_free(&r);
}

static void a_site_announced_twice_counts_once_and_its_connected_announcement_wins(void **state) {
  (void)state;
  const xf_fed_site sites[] = {
      {.name = "eu-1", .region = "eu", .connected = false, .datasets = &mnist28, .n_datasets = 1},
      BEHIND("eu-1", "eu", "agg-eu"),
      {.name = "eu-1", .region = "eu", .via = "agg-old", .via_region = "eu", .connected = false,
       .datasets = &mnist28, .n_datasets = 1},
      BEHIND("eu-2", "eu", "agg-eu"),
  };
  xf_jobspec spec = spec_base();
  spec.topology = XF_JOB_TOPOLOGY_REGIONAL;
  admitted r;
  admit(&r, &spec, NULL, NULL, sites, COUNT(sites));
  assert_verdict(&r.a, XF_ADMIT_RUNS);
  assert_int_equal(r.a.n_sites, 2);
  const xf_admit_site *s = plan_site(&r.a, "eu-1");
  assert_true(s->connected);
  assert_true(s->eligible);
  assert_string_equal(s->via, "agg-eu");
  assert_int_equal(r.a.n_groups, 1);
  admitted_free(&r);
}

/* Ten aggregators with a thousand sites each, announced in no order and
 * some of them twice (first from an old, disconnected aggregator): every
 * site is in the plan once, connected, in name order, in its aggregator's
 * group. The federation of the 10,000-site bench, in memory. */
static void ten_thousand_sites_behind_ten_aggregators_are_each_in_the_plan_once_by_name(
    void **state) {
  (void)state;
  enum { AGGS = 10, PER = 1000, N = AGGS * PER, TWICE = N / 100 };
  xf_fed_site *sites = xf_calloc(N + TWICE, sizeof(*sites));
  char (*names)[32] = xf_calloc(N, sizeof(*names));
  char (*vias)[16] = xf_calloc(AGGS, sizeof(*vias));
  assert_non_null(sites);
  assert_non_null(names);
  assert_non_null(vias);
  for (int a = 0; a < AGGS; a++) snprintf(vias[a], sizeof(vias[a]), "agg-r%02d", a);
  size_t n = 0;
  for (int i = 0; i < N; i++) {
    int k = (int)((7919ull * (unsigned)i) % N); /* a permutation of 0..N-1 */
    snprintf(names[k], sizeof(names[k]), "site-%05d", k);
    if (k % 100 == 0)
      sites[n++] = (xf_fed_site){.name = names[k], .region = "eu", .via = "agg-old",
                                 .via_region = "eu", .connected = false,
                                 .datasets = &mnist28, .n_datasets = 1};
    sites[n++] = (xf_fed_site){.name = names[k], .region = "eu", .via = vias[k / PER],
                               .via_region = "eu", .connected = true,
                               .datasets = &mnist28, .n_datasets = 1};
  }
  assert_int_equal(n, N + TWICE);
  xf_jobspec spec = spec_base();
  spec.topology = XF_JOB_TOPOLOGY_REGIONAL;
  spec.min_sites = N;
  admitted r;
  admit(&r, &spec, NULL, NULL, sites, n);
  assert_verdict(&r.a, XF_ADMIT_RUNS);
  assert_int_equal(r.a.n_sites, N);
  assert_int_equal(r.a.eligible, N);
  for (size_t i = 0; i < r.a.n_sites; i++) {
    char want[32];
    snprintf(want, sizeof(want), "site-%05u", (unsigned)i);
    assert_string_equal(r.a.sites[i].name, want);
    assert_true(r.a.sites[i].connected);
    assert_string_equal(r.a.sites[i].via, vias[i / PER]);
    assert_int_equal(r.a.sites[i].group, i / PER);
  }
  assert_int_equal(r.a.n_groups, AGGS);
  for (size_t g = 0; g < AGGS; g++) assert_int_equal(r.a.groups[g].eligible, PER);
  admitted_free(&r);

  /* One more than there are: short, with the count. */
  spec.min_sites = N + 1;
  admit(&r, &spec, NULL, NULL, sites, n);
  assert_verdict(&r.a, XF_ADMIT_SHORT);
  assert_contains(r.a.reason, "10000 of the 10000 sites holding dataset 'mnist' (10000 connected)");
  admitted_free(&r);
  xf_free(vias);
  xf_free(names);
  xf_free(sites);
}

/* ---- the residency policy --------------------------------------------------------- */

static void policy_denial_is_the_verdict_with_the_decisions_reasons(void **state) {
  (void)state;
  /* No rule lets anything leave eu: default deny. */
  const xf_fed_site sites[] = {DIRECT("us-1", "us"), DIRECT("eu-1", "eu"), DIRECT("eu-2", "eu")};
  xf_jobspec spec = spec_base();
  admitted r;
  admit(&r, &spec, "us-1@us eu-1@eu eu-2@eu", "", sites, COUNT(sites));
  assert_false(r.decision.allowed);
  assert_verdict(&r.a, XF_ADMIT_DENIED);
  assert_true(r.a.has_policy);
  assert_contains(r.a.reason, "makes 1 of 3 sites eligible");
  assert_contains(r.a.reason, "eu-1: no rule allows artifacts of eu to go to us (default deny)");
  assert_contains(r.a.reason, "eu-2: no rule allows artifacts of eu to go to us");
  assert_contains(r.a.reason, "to allow it: add a rule allowing eu updates or regional aggregates to us");
  const xf_admit_site *eu1 = plan_site(&r.a, "eu-1");
  assert_false(eu1->eligible);
  assert_string_equal(eu1->rule, "default");
  assert_contains(eu1->why, "default deny");
  const xf_admit_site *us1 = plan_site(&r.a, "us-1");
  assert_true(us1->eligible);
  assert_string_equal(us1->rule, "default");
  char line[2048];
  assert_true(starts_with(xf_admission_refusal(&r.a, line, sizeof(line)),
                          "the residency policy does not allow this job: "));
  admitted_free(&r);

  /* The rule that lets eu's updates out makes it run. */
  admit(&r, &spec, "us-1@us eu-1@eu eu-2@eu", eu_direct, sites, COUNT(sites));
  assert_verdict(&r.a, XF_ADMIT_RUNS);
  assert_int_equal(r.a.eligible, 3);
  assert_string_equal(plan_site(&r.a, "eu-1")->rule, "eu-out");
  admitted_free(&r);
}

static void a_site_the_policy_places_in_another_region_is_refused(void **state) {
  (void)state;
  /* The policy has eu-1 in eu; its certificate says ap. */
  const xf_fed_site sites[] = {DIRECT("us-1", "us"), DIRECT("us-2", "us"), DIRECT("eu-1", "ap")};
  xf_jobspec spec = spec_base();
  admitted r;
  admit(&r, &spec, "us-1@us us-2@us eu-1@eu", eu_direct, sites, COUNT(sites));
  assert_verdict(&r.a, XF_ADMIT_RUNS);
  assert_int_equal(r.a.eligible, 2);
  const xf_admit_site *eu1 = plan_site(&r.a, "eu-1");
  assert_false(eu1->eligible);
  assert_string_equal(eu1->region, "ap");
  assert_contains(eu1->why, "places it in region eu, its certificate in ap");
  admitted_free(&r);

  spec.min_sites = 3;
  admit(&r, &spec, "us-1@us us-2@us eu-1@eu", eu_direct, sites, COUNT(sites));
  assert_true(r.decision.allowed); /* the policy alone would allow it */
  assert_verdict(&r.a, XF_ADMIT_SHORT);
  assert_contains(r.a.reason, "eu-1: the policy places it in region eu, its certificate in ap");
  admitted_free(&r);
}

static void a_site_the_policy_does_not_list_is_refused(void **state) {
  (void)state;
  const xf_fed_site sites[] = {DIRECT("us-1", "us"), DIRECT("us-2", "us"), DIRECT("us-9", "us")};
  xf_jobspec spec = spec_base();
  admitted r;
  admit(&r, &spec, "us-1@us us-2@us", "", sites, COUNT(sites));
  assert_verdict(&r.a, XF_ADMIT_RUNS);
  assert_int_equal(r.a.eligible, 2);
  const xf_admit_site *s = plan_site(&r.a, "us-9");
  assert_false(s->eligible);
  assert_contains(s->why, "does not list site us-9 with dataset 'mnist'");
  admitted_free(&r);
}

static void a_direct_site_in_a_regional_only_region_must_run_behind_its_aggregator(void **state) {
  (void)state;
  char rule[512];
  const xf_fed_site sites[] = {DIRECT("us-1", "us"), DIRECT("eu-1", "eu"),
                               BEHIND("eu-2", "eu", "eu-agg"), BEHIND("eu-3", "eu", "eu-agg")};
  xf_jobspec spec = spec_base();
  admitted r;
  admit(&r, &spec, "us-1@us eu-1@eu eu-2@eu eu-3@eu", eu_regional(NULL, rule, sizeof(rule)),
        sites, COUNT(sites));
  assert_verdict(&r.a, XF_ADMIT_RUNS);
  assert_int_equal(r.a.eligible, 3);
  const xf_admit_site *eu1 = plan_site(&r.a, "eu-1");
  assert_false(eu1->eligible);
  assert_contains(eu1->why, "only as a regional aggregate");
  assert_contains(eu1->why, "run it behind region eu's aggregator");
  assert_true(plan_site(&r.a, "eu-2")->eligible);
  assert_string_equal(plan_site(&r.a, "eu-2")->rule, "eu-regional");
  admitted_free(&r);
}

/* ---- groups and secure aggregation ---------------------------------------------------- */

static void secure_aggregation_with_one_direct_site_leaves_it_out_with_the_fix(void **state) {
  (void)state;
  char rule[512];
  eu_regional("{\"min_cohort\": 2, \"require_secagg\": true}", rule, sizeof(rule));
  const xf_fed_site sites[] = {DIRECT("us-1", "us"), BEHIND("eu-1", "eu", "eu-agg"),
                               BEHIND("eu-2", "eu", "eu-agg")};
  xf_jobspec spec = spec_base();
  with_secagg(&spec);
  admitted r;
  admit(&r, &spec, "us-1@us eu-1@eu eu-2@eu", rule, sites, COUNT(sites));
  assert_verdict(&r.a, XF_ADMIT_RUNS);
  assert_int_equal(r.a.eligible, 2);
  const xf_admit_site *us1 = plan_site(&r.a, "us-1");
  assert_false(us1->eligible);
  assert_contains(us1->why, "route it through its region's aggregator");
  assert_contains(us1->why, "add another direct site");
  const xf_admit_group *direct = plan_group(&r.a, "");
  assert_ptr_equal(direct, &r.a.groups[0]); /* the direct group first */
  assert_false(direct->usable);
  assert_true(direct->secagg);
  assert_int_equal(direct->eligible, 1);
  assert_int_equal(direct->min_sites, 2);
  const xf_admit_group *eu = plan_group(&r.a, "eu-agg");
  assert_true(eu->usable);
  assert_int_equal(eu->eligible, 2);
  assert_true(plan_site(&r.a, "eu-1")->eligible);
  admitted_free(&r);

  /* Without it the rest is one short of min_sites 3. */
  spec.min_sites = 3;
  admit(&r, &spec, "us-1@us eu-1@eu eu-2@eu", rule, sites, COUNT(sites));
  assert_true(r.decision.allowed);
  assert_verdict(&r.a, XF_ADMIT_SHORT);
  assert_int_equal(r.a.eligible, 2);
  assert_contains(r.a.reason, "lower min_sites to at most 2");
  assert_contains(r.a.reason, "route it through its region's aggregator, add another direct site");
  admitted_free(&r);
}

static void mixed_cohort_under_secure_aggregation_runs_with_two_direct_sites(void **state) {
  (void)state;
  char rule[512];
  eu_regional("{\"min_cohort\": 2, \"require_secagg\": true}", rule, sizeof(rule));
  const xf_fed_site sites[] = {DIRECT("us-1", "us"), DIRECT("us-2", "us"),
                               BEHIND("eu-1", "eu", "eu-agg"), BEHIND("eu-2", "eu", "eu-agg")};
  xf_jobspec spec = spec_base();
  with_secagg(&spec);
  spec.compression.uplink.quant_bits = 8;
  spec.min_sites = 4;
  admitted r;
  admit(&r, &spec, "us-1@us us-2@us eu-1@eu eu-2@eu", rule, sites, COUNT(sites));
  assert_verdict(&r.a, XF_ADMIT_RUNS);
  assert_int_equal(r.a.eligible, 4);
  assert_int_equal(r.a.n_groups, 2);

  const xf_admit_group *direct = &r.a.groups[0];
  assert_string_equal(direct->via, "");
  assert_int_equal(direct->via_id, 0);
  assert_true(direct->usable);
  assert_true(direct->secagg);
  assert_int_equal(direct->eligible, 2);
  assert_int_equal(direct->min_sites, 2);
  assert_string_equal(direct->path, "direct");
  assert_int_equal(direct->min_cohort, 0);

  const xf_admit_group *eu = &r.a.groups[1];
  assert_string_equal(eu->via, "eu-agg");
  assert_int_equal(eu->via_id, xf_admit_site_id("eu-agg"));
  assert_string_equal(eu->region, "eu");
  assert_string_equal(eu->to, "us");
  assert_string_equal(eu->rule, "eu-regional");
  assert_string_equal(eu->path, "regional");
  assert_true(eu->usable);
  assert_true(eu->secagg);
  assert_int_equal(eu->eligible, 2);
  assert_int_equal(eu->min_cohort, 2);
  assert_int_equal(eu->min_sites, 2);
  assert_true(eu->require_secagg);
  assert_false(eu->has_max_epsilon);

  assert_int_equal(plan_site(&r.a, "us-1")->group, 0);
  assert_int_equal(plan_site(&r.a, "eu-2")->group, 1);
  assert_contains(r.a.composition, "1 regional aggregate");
  assert_contains(r.a.composition, "2 direct sites");
  assert_contains(r.a.composition,
                  "secure aggregation among the direct sites and within each regional aggregator");
  admitted_free(&r);
}

static void regional_min_cohort_above_the_sites_behind_makes_the_group_unusable(void **state) {
  (void)state;
  char rule[512];
  eu_regional("{\"min_cohort\": 3}", rule, sizeof(rule));
  const char *places = "us-1@us eu-1@eu eu-2@eu eu-3@eu";
  /* Three eu sites meet the rule's cohort as a region, but no aggregator
   * has three behind it. */
  const xf_fed_site split[] = {DIRECT("us-1", "us"), BEHIND("eu-1", "eu", "eu-agg-a"),
                               BEHIND("eu-2", "eu", "eu-agg-a"), BEHIND("eu-3", "eu", "eu-agg-b")};
  xf_jobspec spec = spec_base();
  admitted r;
  admit(&r, &spec, places, rule, split, COUNT(split));
  assert_true(r.decision.allowed);
  assert_verdict(&r.a, XF_ADMIT_SHORT);
  assert_int_equal(r.a.eligible, 1);
  const xf_admit_group *a = plan_group(&r.a, "eu-agg-a");
  assert_false(a->usable);
  assert_int_equal(a->eligible, 2);
  assert_int_equal(a->min_cohort, 3);
  assert_int_equal(a->min_sites, 3);
  assert_contains(a->why, "rule eu-regional lets region eu's aggregate leave only with at least 3 sites");
  assert_contains(a->why, "2 are eligible behind eu-agg-a");
  const xf_admit_group *b = plan_group(&r.a, "eu-agg-b");
  assert_false(b->usable);
  assert_contains(b->why, "1 is eligible behind eu-agg-b");
  const xf_admit_site *eu1 = plan_site(&r.a, "eu-1");
  assert_false(eu1->eligible);
  assert_string_equal(eu1->why, a->why);
  assert_contains(r.a.reason, "2 are eligible behind eu-agg-a");
  assert_contains(r.a.reason, "1 is eligible behind eu-agg-b");
  admitted_free(&r);

  /* All three behind one aggregator: the group can leave. */
  const xf_fed_site together[] = {DIRECT("us-1", "us"), BEHIND("eu-1", "eu", "eu-agg-a"),
                                  BEHIND("eu-2", "eu", "eu-agg-a"),
                                  BEHIND("eu-3", "eu", "eu-agg-a")};
  admit(&r, &spec, places, rule, together, COUNT(together));
  assert_verdict(&r.a, XF_ADMIT_RUNS);
  assert_int_equal(r.a.eligible, 4);
  assert_true(plan_group(&r.a, "eu-agg-a")->usable);
  admitted_free(&r);
}

static void require_secagg_without_secure_aggregation_is_named(void **state) {
  (void)state;
  char rule[512];
  eu_regional("{\"min_cohort\": 2, \"require_secagg\": true}", rule, sizeof(rule));
  const char *places = "us-1@us us-2@us eu-1@eu eu-2@eu";
  const xf_fed_site sites[] = {DIRECT("us-1", "us"), DIRECT("us-2", "us"),
                               BEHIND("eu-1", "eu", "eu-agg"), BEHIND("eu-2", "eu", "eu-agg")};
  xf_jobspec spec = spec_base();
  spec.min_sites = 3;
  admitted r;
  admit(&r, &spec, places, rule, sites, COUNT(sites));
  /* The policy refuses the eu sites, and says what would let them in. */
  assert_verdict(&r.a, XF_ADMIT_DENIED);
  assert_contains(r.a.reason, "enable secure aggregation");
  const xf_admit_site *eu1 = plan_site(&r.a, "eu-1");
  assert_false(eu1->eligible);
  assert_string_equal(eu1->rule, "eu-regional");
  assert_contains(eu1->why, "conditions the job does not meet");
  admitted_free(&r);

  /* With secure aggregation the plan carries the condition, and the group's
   * release check — the one its regional aggregator runs before the
   * aggregate leaves — refuses an aggregate formed without it. */
  with_secagg(&spec);
  admit(&r, &spec, places, rule, sites, COUNT(sites));
  assert_verdict(&r.a, XF_ADMIT_RUNS);
  const xf_admit_group *eu = plan_group(&r.a, "eu-agg");
  assert_true(eu->require_secagg);
  xf_release_rule rel;
  xf_admit_group_release(eu, &rel);
  assert_string_equal(rel.rule, "eu-regional");
  assert_string_equal(rel.from, "eu");
  assert_string_equal(rel.to, "us");
  assert_int_equal(rel.min_cohort, 2);
  assert_true(rel.require_secagg);
  char why[300];
  xf_release_artifact plain = {.contributors = 2, .secagg = false};
  assert_false(xf_release_allows(&rel, &plain, why, sizeof(why)));
  assert_contains(why, "rule eu-regional");
  assert_contains(why, "enable secure_aggregation");
  xf_release_artifact masked = {.contributors = 2, .secagg = true};
  assert_true(xf_release_allows(&rel, &masked, why, sizeof(why)));
  admitted_free(&r);
}

static void bits_that_cannot_hold_the_sum_are_unrunnable_naming_the_bits_needed(void **state) {
  (void)state;
  const xf_fed_site sites[] = {DIRECT("s-1", "us"), DIRECT("s-2", "us"), DIRECT("s-3", "us"),
                               DIRECT("s-4", "us"), DIRECT("s-5", "us")};
  xf_jobspec spec = spec_base();
  with_secagg(&spec);
  spec.compression.uplink.quant_bits = 8;
  spec.secure_aggregation.bits = 9;
  admitted r;
  admit(&r, &spec, NULL, NULL, sites, 2);
  /* Two q8 values need 2 * 2^7 < 2^(bits-1): bits 10. */
  assert_verdict(&r.a, XF_ADMIT_UNRUNNABLE);
  const xf_admit_group *g = plan_group(&r.a, "");
  assert_false(g->usable);
  assert_contains(g->why, "secure_aggregation.bits 9 cannot hold the sum of 2 sites' q8 values");
  assert_contains(g->why, "raise bits to at least 10");
  assert_contains(r.a.reason, "raise bits to at least 10");
  admitted_free(&r);

  /* For any group, the bits named are enough, and one fewer is not. */
  for (size_t n = 2; n <= COUNT(sites); n++) {
    spec.secure_aggregation.bits = 8;
    admit(&r, &spec, NULL, NULL, sites, n);
    assert_verdict(&r.a, XF_ADMIT_UNRUNNABLE);
    const char *at = strstr(plan_group(&r.a, "")->why, "at least ");
    assert_non_null(at);
    unsigned need = 0;
    assert_int_equal(sscanf(at, "at least %u", &need), 1);
    admitted_free(&r);

    spec.secure_aggregation.bits = need;
    admit(&r, &spec, NULL, NULL, sites, n);
    assert_verdict(&r.a, XF_ADMIT_RUNS);
    admitted_free(&r);
    if (need - 1 >= 8) {
      spec.secure_aggregation.bits = need - 1;
      admit(&r, &spec, NULL, NULL, sites, n);
      if (r.a.verdict != XF_ADMIT_UNRUNNABLE)
        fail_msg("%zu sites at q8: bits %u runs, yet the refusal asked for at least %u", n,
                 need - 1, need);
      admitted_free(&r);
    }
  }
}

static void secure_aggregation_without_a_clip_is_unrunnable_naming_privacy_clip(void **state) {
  (void)state;
  const xf_fed_site sites[] = {DIRECT("s-1", "us"), DIRECT("s-2", "us")};
  xf_jobspec spec = spec_base();
  spec.secure_aggregation.enabled = true; /* valid as a spec, but no scale for the sum */
  admitted r;
  admit(&r, &spec, NULL, NULL, sites, COUNT(sites));
  assert_verdict(&r.a, XF_ADMIT_UNRUNNABLE);
  assert_true(starts_with(r.a.reason, "privacy.clip"));
  assert_contains(r.a.reason, "give privacy.clip");
  admitted_free(&r);
}

/* ---- privacy ------------------------------------------------------------------------ */

static void central_noise_with_a_regional_epsilon_condition_is_unrunnable_with_the_fix(void **state) {
  (void)state;
  char rule[512];
  eu_regional("{\"max_epsilon\": 3, \"min_cohort\": 2}", rule, sizeof(rule));
  const char *places = "us-1@us eu-1@eu eu-2@eu";
  const xf_fed_site sites[] = {DIRECT("us-1", "us"), BEHIND("eu-1", "eu", "eu-agg"),
                               BEHIND("eu-2", "eu", "eu-agg")};
  xf_jobspec spec = spec_base();
  spec.min_sites = 3;
  spec.privacy.unit = XF_PRIVACY_UNIT_SITE;
  spec.privacy.mode = XF_PRIVACY_CENTRAL;
  spec.privacy.clip = 1.0;
  spec.privacy.has_target_epsilon = true;
  spec.privacy.target_epsilon = 2.0;
  admitted r;
  admit(&r, &spec, places, rule, sites, COUNT(sites));
  assert_true(r.decision.allowed); /* the policy's conditions hold on paper */
  assert_verdict(&r.a, XF_ADMIT_UNRUNNABLE);
  const xf_admit_group *eu = plan_group(&r.a, "eu-agg");
  assert_false(eu->usable);
  assert_true(eu->has_max_epsilon);
  assert_true(eu->max_epsilon == 3.0);
  assert_contains(eu->why, "central noise is added at the coordinator");
  assert_contains(r.a.reason, "rule eu-regional asks for differential privacy on region eu's aggregate");
  assert_contains(r.a.reason, "\"distributed\"");
  assert_contains(r.a.reason, "\"local\"");
  assert_contains(r.a.reason, "\"record\"");
  const xf_admit_site *eu1 = plan_site(&r.a, "eu-1");
  assert_false(eu1->eligible);
  assert_true(eu1->has_max_epsilon);
  assert_true(eu1->max_epsilon == 3.0);
  admitted_free(&r);

  /* The fix works: noise added at each site leaves the region with it. */
  spec.privacy.mode = XF_PRIVACY_LOCAL;
  admit(&r, &spec, places, rule, sites, COUNT(sites));
  assert_verdict(&r.a, XF_ADMIT_RUNS);
  assert_int_equal(r.a.eligible, 3);
  assert_true(plan_group(&r.a, "eu-agg")->usable);
  admitted_free(&r);
}

static void central_noise_with_a_count_of_sites_per_round_is_unrunnable(void **state) {
  (void)state;
  const xf_fed_site sites[] = {DIRECT("s-1", "us"), DIRECT("s-2", "us"), DIRECT("s-3", "us")};
  xf_jobspec spec = spec_base();
  spec.sites_per_round = 3;
  spec.privacy.mode = XF_PRIVACY_CENTRAL;
  spec.privacy.clip = 1.0;
  spec.privacy.has_noise_multiplier = true;
  spec.privacy.noise_multiplier = 1.0;
  admitted r;
  admit(&r, &spec, NULL, NULL, sites, COUNT(sites));
  assert_verdict(&r.a, XF_ADMIT_UNRUNNABLE);
  assert_true(starts_with(r.a.reason, "sites_per_round"));
  assert_contains(r.a.reason, "central privacy");
  assert_contains(r.a.reason, "fraction in (0, 1]");
  admitted_free(&r);
}

/* ---- cohorts ---------------------------------------------------------------------------- */

static void sites_per_round_that_invites_below_min_sites_is_short_with_the_numbers(void **state) {
  (void)state;
  const xf_fed_site sites[] = {DIRECT("s-1", "us"), DIRECT("s-2", "us"), DIRECT("s-3", "us"),
                               DIRECT("s-4", "us")};
  xf_jobspec spec = spec_base();
  spec.sites_per_round = 0.25;
  admitted r;
  admit(&r, &spec, NULL, NULL, sites, COUNT(sites));
  assert_verdict(&r.a, XF_ADMIT_SHORT);
  assert_int_equal(r.a.eligible, 4);
  assert_int_equal(r.a.invite, 1);
  assert_contains(r.a.reason,
                  "sites_per_round 0.25 of the 4 eligible sites invites 1, below min_sites 2");
  assert_contains(r.a.reason, "raise sites_per_round or lower min_sites");
  assert_lacks(r.a.reason, "bring more sites in"); /* there are enough */
  admitted_free(&r);

  /* Over-selection invites two: enough. */
  spec.over_selection = 2;
  admit(&r, &spec, NULL, NULL, sites, COUNT(sites));
  assert_verdict(&r.a, XF_ADMIT_RUNS);
  assert_int_equal(r.a.invite, 2);
  admitted_free(&r);
}

/* ---- what the caller shows -------------------------------------------------------------- */

static void refusal_sentence_is_the_same_for_check_and_submit(void **state) {
  (void)state;
  const xf_fed_site two[] = {DIRECT("us-1", "us"), DIRECT("eu-1", "eu")};
  static const struct {
    xf_admit_verdict verdict;
    const char *opening;
  } wording[] = {
      {XF_ADMIT_DENIED, "the residency policy does not allow this job: "},
      {XF_ADMIT_UNRUNNABLE, "this job cannot run as composed: "},
      {XF_ADMIT_SHORT, "this job cannot run on the federation as it is now: "},
  };
  for (size_t i = 0; i < COUNT(wording); i++) {
    xf_jobspec spec = spec_base();
    admitted r;
    switch (wording[i].verdict) {
    case XF_ADMIT_DENIED: admit(&r, &spec, "us-1@us eu-1@eu", "", two, COUNT(two)); break;
    case XF_ADMIT_UNRUNNABLE:
      spec.secure_aggregation.enabled = true;
      admit(&r, &spec, NULL, NULL, two, COUNT(two));
      break;
    default:
      spec.min_sites = 3;
      admit(&r, &spec, NULL, NULL, two, COUNT(two));
      break;
    }
    assert_verdict(&r.a, wording[i].verdict);
    assert_true(r.a.reason[0] != '\0');
    char line[2048], again[2048];
    char *got = xf_admission_refusal(&r.a, line, sizeof(line));
    assert_ptr_equal(got, line);
    if (!starts_with(line, wording[i].opening))
      fail_msg("%s: \"%s\" does not open with \"%s\"", xf_admit_verdict_name(wording[i].verdict),
               line, wording[i].opening);
    assert_string_equal(line + strlen(wording[i].opening), r.a.reason);
    /* Asked again (check, then submission), the same sentence. */
    assert_string_equal(xf_admission_refusal(&r.a, again, sizeof(again)), line);
    /* A short buffer gets a terminated prefix. */
    char small[12];
    xf_admission_refusal(&r.a, small, sizeof(small));
    assert_int_equal(strlen(small), sizeof(small) - 1);
    assert_true(starts_with(wording[i].opening, small));
    admitted_free(&r);
  }

  /* A job that runs has no refusal. */
  xf_jobspec spec = spec_base();
  admitted r;
  admit(&r, &spec, NULL, NULL, two, COUNT(two));
  assert_verdict(&r.a, XF_ADMIT_RUNS);
  char line[64] = "stale";
  assert_string_equal(xf_admission_refusal(&r.a, line, sizeof(line)), "");
  admitted_free(&r);

  assert_string_equal(xf_admit_verdict_name(XF_ADMIT_RUNS), "runs");
  assert_string_equal(xf_admit_verdict_name(XF_ADMIT_DENIED), "denied");
  assert_string_equal(xf_admit_verdict_name(XF_ADMIT_UNRUNNABLE), "unrunnable");
  assert_string_equal(xf_admit_verdict_name(XF_ADMIT_SHORT), "short");
}

static json_t *parse_json(const char *text) {
  json_error_t jerr;
  json_t *o = json_loads(text, 0, &jerr);
  if (!o) fail_msg("not JSON (%s): %s", jerr.text, text);
  return o;
}

static const char *jstr(const json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_string(v)) fail_msg("member %s is not a string", key);
  return json_string_value(v);
}

static json_int_t jint(const json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_integer(v)) fail_msg("member %s is not an integer", key);
  return json_integer_value(v);
}

static bool jbool(const json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_boolean(v)) fail_msg("member %s is not a boolean", key);
  return json_is_true(v);
}

static void json_carries_the_plan(void **state) {
  (void)state;
  char rule[512];
  eu_regional("{\"max_epsilon\": 3, \"min_cohort\": 2, \"require_secagg\": true}", rule,
              sizeof(rule));
  const xf_fed_site sites[] = {DIRECT("us-1", "us"), DIRECT("us-2", "us"),
                               BEHIND("eu-1", "eu", "eu-agg"), BEHIND("eu-2", "eu", "eu-agg")};
  xf_jobspec spec = spec_base();
  with_secagg(&spec);
  spec.min_sites = 4;
  spec.privacy.mode = XF_PRIVACY_DISTRIBUTED;
  spec.privacy.has_target_epsilon = true;
  spec.privacy.target_epsilon = 2.0;
  admitted r;
  admit(&r, &spec, "us-1@us us-2@us eu-1@eu eu-2@eu", rule, sites, COUNT(sites));
  assert_verdict(&r.a, XF_ADMIT_RUNS);

  char *text = NULL;
  xf_errctx err = {0};
  assert_int_equal(xf_admission_json(&r.a, &spec, &text, &err), XF_OK);
  json_t *o = parse_json(text);
  assert_string_equal(jstr(o, "verdict"), "runs");
  assert_string_equal(jstr(o, "reason"), "");
  assert_int_equal(jint(o, "policy_version"), 0);
  assert_int_equal(jint(o, "eligible"), 4);
  assert_int_equal(jint(o, "invite"), 4);
  assert_int_equal(jint(o, "min_sites"), 4);
  assert_string_equal(jstr(o, "composition"), r.a.composition);

  json_t *js = json_object_get(o, "sites");
  assert_true(json_is_array(js));
  assert_int_equal(json_array_size(js), 4);
  for (size_t i = 0; i < 4; i++) {
    const json_t *s = json_array_get(js, i);
    const xf_admit_site *p = &r.a.sites[i];
    assert_string_equal(jstr(s, "site"), p->name);
    assert_string_equal(jstr(s, "region"), p->region);
    assert_string_equal(jstr(s, "via"), p->via);
    assert_true(jbool(s, "connected"));
    assert_true(jbool(s, "eligible"));
    assert_string_equal(jstr(s, "rule"), p->rule);
    assert_string_equal(jstr(s, "reason"), p->why);
  }
  const json_t *eu1 = json_array_get(js, 0);
  assert_string_equal(jstr(eu1, "site"), "eu-1");
  assert_string_equal(jstr(eu1, "via"), "eu-agg");
  assert_string_equal(jstr(eu1, "rule"), "eu-regional");

  json_t *jg = json_object_get(o, "groups");
  assert_true(json_is_array(jg));
  assert_int_equal(json_array_size(jg), 2);
  const json_t *d = json_array_get(jg, 0), *g = json_array_get(jg, 1);
  assert_string_equal(jstr(d, "via"), "");
  assert_string_equal(jstr(d, "path"), "direct");
  assert_int_equal(jint(d, "eligible"), 2);
  assert_int_equal(jint(d, "min_sites"), 2);
  assert_true(jbool(d, "secagg"));
  assert_true(json_is_null(json_object_get(d, "max_epsilon")));
  assert_string_equal(jstr(g, "via"), "eu-agg");
  assert_string_equal(jstr(g, "region"), "eu");
  assert_int_equal(jint(g, "eligible"), 2);
  assert_int_equal(jint(g, "min_sites"), 2);
  assert_true(jbool(g, "secagg"));
  assert_string_equal(jstr(g, "rule"), "eu-regional");
  assert_string_equal(jstr(g, "path"), "regional");
  assert_int_equal(jint(g, "min_cohort"), 2);
  assert_true(jbool(g, "require_secagg"));
  json_t *eps = json_object_get(g, "max_epsilon");
  assert_true(json_is_number(eps));
  assert_true(json_number_value(eps) == 3.0);
  assert_true(jbool(g, "usable"));
  assert_string_equal(jstr(g, "reason"), "");
  json_decref(o);
  xf_free(text);
  admitted_free(&r);

  /* Without a policy the version is null; a refusal carries its reason and
   * the sites that are out. */
  const xf_fed_site short_of[] = {DIRECT("s-1", "us"),
                                  {.name = "s-2", .region = "us", .connected = false,
                                   .datasets = &mnist28, .n_datasets = 1}};
  spec = spec_base();
  admit(&r, &spec, NULL, NULL, short_of, COUNT(short_of));
  assert_verdict(&r.a, XF_ADMIT_SHORT);
  assert_int_equal(xf_admission_json(&r.a, &spec, &text, &err), XF_OK);
  o = parse_json(text);
  assert_string_equal(jstr(o, "verdict"), "short");
  assert_string_equal(jstr(o, "reason"), r.a.reason);
  assert_true(json_is_null(json_object_get(o, "policy_version")));
  assert_int_equal(jint(o, "eligible"), 1);
  const json_t *s2 = json_array_get(json_object_get(o, "sites"), 1);
  assert_string_equal(jstr(s2, "site"), "s-2");
  assert_false(jbool(s2, "connected"));
  assert_false(jbool(s2, "eligible"));
  assert_string_equal(jstr(s2, "rule"), "-");
  assert_contains(jstr(s2, "reason"), "not connected");
  json_decref(o);
  xf_free(text);
  admitted_free(&r);
}

/* The id by its definition: the first 8 bytes of BLAKE2b-256("site:" NAME),
 * little-endian, top bit cleared. */
static uint64_t id_by_definition(const char *name) {
  unsigned char in[128], h[32];
  size_t n = strlen(name);
  assert_true(n + 5 <= sizeof(in));
  memcpy(in, "site:", 5);
  memcpy(in + 5, name, n);
  assert_int_equal(crypto_generichash(h, sizeof(h), in, n + 5, NULL, 0), 0);
  uint64_t id = 0;
  for (int i = 7; i >= 0; i--) id = id << 8 | h[i];
  return id & ~(UINT64_C(1) << 63);
}

static void site_ids_are_stable(void **state) {
  (void)state;
  /* Known answers; us-1's first eight bytes have the top bit set. */
  assert_int_equal(xf_admit_site_id("eu-1"), UINT64_C(0x7110183e38c8d869));
  assert_int_equal(xf_admit_site_id("us-1"), UINT64_C(0x7b7a6fd8ec105f1a));
  const char *names[] = {"eu-1", "us-1", "eu-agg", "site-a", "a", "x-very-long-site-name-0123456789"};
  for (size_t i = 0; i < COUNT(names); i++) {
    uint64_t id = xf_admit_site_id(names[i]);
    assert_int_equal(id, id_by_definition(names[i]));
    assert_int_equal(id >> 63, 0);
    assert_int_equal(id, xf_admit_site_id(names[i]));
  }
  assert_true(xf_admit_site_id("eu-1") != xf_admit_site_id("eu-2"));

  /* The plan carries them, and finds sites by them. */
  const xf_fed_site sites[] = {DIRECT("us-1", "us"), BEHIND("eu-1", "eu", "eu-agg")};
  xf_jobspec spec = spec_base();
  spec.topology = XF_JOB_TOPOLOGY_REGIONAL;
  admitted r;
  admit(&r, &spec, NULL, NULL, sites, COUNT(sites));
  const xf_admit_site *eu1 = xf_admission_site(&r.a, UINT64_C(0x7110183e38c8d869));
  assert_non_null(eu1);
  assert_string_equal(eu1->name, "eu-1");
  assert_int_equal(eu1->via_id, id_by_definition("eu-agg"));
  assert_int_equal(plan_site(&r.a, "us-1")->id, UINT64_C(0x7b7a6fd8ec105f1a));
  assert_int_equal(plan_site(&r.a, "us-1")->via_id, 0);
  assert_int_equal(plan_group(&r.a, "eu-agg")->via_id, id_by_definition("eu-agg"));
  assert_null(xf_admission_site(&r.a, 1));
  admitted_free(&r);
}

/* ---- an unknown dataset ------------------------------------------------------------ */

/* A dataset nobody holds is the researcher's error, named with the datasets
 * that are known and the nearest of them, whether the sites announced them
 * or the policy lists them; a federation that knows no dataset yet is left
 * to admission's verdict. */
static void unknown_dataset_is_a_usage_error_with_a_suggestion(void **state) {
  (void)state;
  xf_jobspec spec = spec_base();
  snprintf(spec.data.dataset, sizeof(spec.data.dataset), "mnsit");
  const xf_fed_dataset both[] = {mnist28, cifar};
  const xf_fed_site sites[] = {DIRECT("eu-1", "eu"),
                               {.name = "us-1", .region = "us", .connected = true,
                                .datasets = both, .n_datasets = 2}};
  const xf_federation fed = {.sites = sites, .n_sites = COUNT(sites), .coordinator_region = "us"};
  xf_errctx err = {0};
  assert_int_equal(xf_admission_check_dataset(&spec, &fed, NULL, &err), XF_EINVAL);
  assert_string_equal(err.field, "data.dataset");
  assert_string_equal(err.msg, "no site holds a dataset 'mnsit'; the datasets sites have "
                               "registered are cifar, mnist; did you mean 'mnist'?");
  /* Only the policy lists it: known. Only the policy lists others: named. */
  xf_policy *p = policy_of("eu-1@eu us-1@us", "");
  const xf_federation none = {.coordinator_region = "us"};
  snprintf(spec.data.dataset, sizeof(spec.data.dataset), "mnist");
  assert_int_equal(xf_admission_check_dataset(&spec, &none, p, &err), XF_OK);
  snprintf(spec.data.dataset, sizeof(spec.data.dataset), "fmnst");
  xf_errctx_clear(&err);
  assert_int_equal(xf_admission_check_dataset(&spec, &none, p, &err), XF_EINVAL);
  assert_contains(err.msg, "the datasets the residency policy lists is mnist");
  assert_lacks(err.msg, "did you mean");
  xf_policy_free(p);
  /* Announced by a site: known, policy or not. */
  snprintf(spec.data.dataset, sizeof(spec.data.dataset), "cifar");
  assert_int_equal(xf_admission_check_dataset(&spec, &fed, NULL, &err), XF_OK);
  /* Nobody knows any dataset yet: not this check's to refuse. */
  assert_int_equal(xf_admission_check_dataset(&spec, &none, NULL, &err), XF_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(min_sites_counts_sites_not_aggregators),
      cmocka_unit_test(sites_behind_an_aggregator_need_topology_regional_without_a_policy),
      cmocka_unit_test(disconnected_and_misshapen_sites_are_named),
      cmocka_unit_test(a_site_announced_twice_counts_once_and_its_connected_announcement_wins),
      cmocka_unit_test(ten_thousand_sites_behind_ten_aggregators_are_each_in_the_plan_once_by_name),
      cmocka_unit_test(policy_denial_is_the_verdict_with_the_decisions_reasons),
      cmocka_unit_test(a_site_the_policy_places_in_another_region_is_refused),
      cmocka_unit_test(a_site_the_policy_does_not_list_is_refused),
      cmocka_unit_test(a_direct_site_in_a_regional_only_region_must_run_behind_its_aggregator),
      cmocka_unit_test(secure_aggregation_with_one_direct_site_leaves_it_out_with_the_fix),
      cmocka_unit_test(mixed_cohort_under_secure_aggregation_runs_with_two_direct_sites),
      cmocka_unit_test(regional_min_cohort_above_the_sites_behind_makes_the_group_unusable),
      cmocka_unit_test(require_secagg_without_secure_aggregation_is_named),
      cmocka_unit_test(bits_that_cannot_hold_the_sum_are_unrunnable_naming_the_bits_needed),
      cmocka_unit_test(secure_aggregation_without_a_clip_is_unrunnable_naming_privacy_clip),
      cmocka_unit_test(central_noise_with_a_regional_epsilon_condition_is_unrunnable_with_the_fix),
      cmocka_unit_test(central_noise_with_a_count_of_sites_per_round_is_unrunnable),
      cmocka_unit_test(sites_per_round_that_invites_below_min_sites_is_short_with_the_numbers),
      cmocka_unit_test(refusal_sentence_is_the_same_for_check_and_submit),
      cmocka_unit_test(json_carries_the_plan),
      cmocka_unit_test(site_ids_are_stable),
      cmocka_unit_test(unknown_dataset_is_a_usage_error_with_a_suggestion),
  };
  return cmocka_run_group_tests(tests, group_setup, NULL);
}
