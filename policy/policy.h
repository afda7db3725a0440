/* SPDX-License-Identifier: Apache-2.0 */
/* The residency policy: regions, sites, datasets and rules kept in SQLite as
 * immutable, numbered versions, and the one decision function that turns a
 * job into per-site eligibility and an aggregation plan (docs/policy.md). */
#ifndef XF_POLICY_POLICY_H
#define XF_POLICY_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "storage/db.h"

/* Names of regions, sites, datasets, tags and rules: 1 to 63 characters,
 * lowercase letters, digits, '-' and '_', starting with a letter or digit. */
#define XF_POLICY_NAME_MAX 64
/* A region's jurisdiction label: free UTF-8 text, at most 127 bytes. */
#define XF_POLICY_LABEL_MAX 128
/* Bounds on one dataset's tags and one rule's destinations. */
#define XF_POLICY_TAGS_MAX 32
#define XF_POLICY_DESTS_MAX 32

/* ---- the model ------------------------------------------------------------------ */

typedef enum xf_policy_class {
  XF_POLICY_CLASS_NONE = 0, /* in a selector: any classification */
  XF_POLICY_CLASS_PUBLIC,
  XF_POLICY_CLASS_INTERNAL,
  XF_POLICY_CLASS_CONFIDENTIAL,
  XF_POLICY_CLASS_RESTRICTED,
} xf_policy_class;

typedef enum xf_policy_kind {
  XF_POLICY_KIND_UPDATE = 0,         /* "update": one site's processed delta */
  XF_POLICY_KIND_REGIONAL_AGGREGATE, /* "regional_aggregate" */
  XF_POLICY_KIND_MODEL,              /* "model": the global weights */
  XF_POLICY_KIND_METRICS,            /* "metrics" */
} xf_policy_kind;

typedef enum xf_policy_effect {
  XF_POLICY_ALLOW = 0,
  XF_POLICY_DENY,
} xf_policy_effect;

/* "public", ..., "update", ..., "allow"/"deny"; "?" for values out of range. */
const char *xf_policy_class_name(xf_policy_class c);
const char *xf_policy_kind_name(xf_policy_kind k);
const char *xf_policy_effect_name(xf_policy_effect e);

typedef struct xf_policy_region {
  char name[XF_POLICY_NAME_MAX];
  char jurisdiction[XF_POLICY_LABEL_MAX]; /* may be empty */
} xf_policy_region;

typedef struct xf_policy_site {
  char name[XF_POLICY_NAME_MAX];
  char region[XF_POLICY_NAME_MAX]; /* a region of the same version */
} xf_policy_site;

/* A dataset is named by (name, site): sites of one federation hold datasets of
 * the same name. Its tags are allocated to fit (owned by the model): a
 * policy of 60,000 datasets with a tag or two each would otherwise carry
 * 2 KiB of empty tag slots per dataset. */
typedef struct xf_policy_dataset {
  char name[XF_POLICY_NAME_MAX];
  char site[XF_POLICY_NAME_MAX];
  xf_policy_class classification; /* never NONE */
  size_t n_tags;                  /* sorted, no duplicates, at most XF_POLICY_TAGS_MAX */
  char (*tags)[XF_POLICY_NAME_MAX];
} xf_policy_dataset;

/* Which datasets a rule is about: every field that is set must match (empty
 * strings and XF_POLICY_CLASS_NONE match anything; all empty = every dataset). */
typedef struct xf_policy_selector {
  char region[XF_POLICY_NAME_MAX];
  char site[XF_POLICY_NAME_MAX];
  char dataset[XF_POLICY_NAME_MAX];
  xf_policy_class classification;
  char tag[XF_POLICY_NAME_MAX];
} xf_policy_selector;

typedef struct xf_policy_rule {
  char id[XF_POLICY_NAME_MAX];
  xf_policy_effect effect;
  xf_policy_kind kind;
  xf_policy_selector select;
  size_t n_dests; /* >= 1; a name is a region of the same version or "*" */
  char dests[XF_POLICY_DESTS_MAX][XF_POLICY_NAME_MAX];
  /* Conditions. max_epsilon, min_cohort and require_secagg are allow-only: a
   * deny rule with them is refused (a deny applies unconditionally within its
   * validity window). */
  bool has_max_epsilon;
  double max_epsilon;  /* > 0: the job must use privacy spending at most this */
  unsigned min_cohort; /* 0: none; else at least this many sites aggregated */
  bool require_secagg;
  bool has_valid_from, has_valid_until;
  double valid_from, valid_until; /* Unix seconds: valid_from <= now < valid_until */
} xf_policy_rule;

/* One version of the policy, in memory: read-only for callers. Regions, sites
 * and datasets are sorted by name ((site, name) for datasets); rules keep the
 * order they were given in (the first satisfied allow rule is the one a
 * decision names). */
typedef struct xf_policy {
  uint64_t version; /* 0: the empty policy before any change */
  size_t n_regions, n_sites, n_datasets, n_rules;
  xf_policy_region *regions;
  xf_policy_site *sites;
  xf_policy_dataset *datasets;
  xf_policy_rule *rules;
} xf_policy;

/* Parses and checks a policy document (docs/policy.md, "The document") into a
 * fresh model with version 0. Refusals are XF_EFORMAT (not JSON, a member of
 * the wrong type or unknown) or XF_EINVAL (a name, a reference, a rule that
 * can never match), with err's field naming the member ("rules[1].select.site")
 * and the message naming the thing. On success the caller owns *out and
 * releases it with xf_policy_free; on failure *out is NULL. */
xf_err xf_policy_parse(const char *json_text, xf_policy **out, xf_errctx *err) XF_WARN_UNUSED;

/* The document of p: regions, sites, datasets, rules in the model's order,
 * indented, keys in a fixed order, absent conditions left out, so that
 * parse(format(p)) formats to the same text. The caller frees *json with
 * xf_free. XF_ENOMEM. */
xf_err xf_policy_format(const xf_policy *p, char **json, xf_errctx *err) XF_WARN_UNUSED;

void xf_policy_free(xf_policy *p);

/* ---- storage and versions -------------------------------------------------------- */

/* The migration that creates the version table (and the triggers that refuse
 * UPDATE and DELETE on it), for a database that keeps the policy alongside
 * other modules' tables: append it to that database's list as one entry. */
extern const char xf_policy_schema_sql[];

/* Opens or creates a database at `path` holding only the policy (its own
 * migration list). Errors and ownership as xf_db_open: close with
 * xf_db_close. */
xf_err xf_policy_open(const char *path, xf_db **out, xf_errctx *err) XF_WARN_UNUSED;

/* A local draft database's origin (xf_policy_open's databases only): its
 * version local_version is the coordinator's version coordinator_version,
 * as the last `xfed policy pull` or `push` left it. A push names that
 * version as its base, so the coordinator refuses it once its policy moved
 * on. get: *found false (and zeros) when the draft never met the
 * coordinator. XF_EDB on failure. */
xf_err xf_policy_origin_set(xf_db *db, uint64_t local_version, uint64_t coordinator_version,
                            xf_errctx *err) XF_WARN_UNUSED;
xf_err xf_policy_origin_get(xf_db *db, uint64_t *local_version, uint64_t *coordinator_version,
                            bool *found, xf_errctx *err) XF_WARN_UNUSED;

/* The latest version number; 0 when no change was ever made. */
xf_err xf_policy_version_current(xf_db *db, uint64_t *version, xf_errctx *err) XF_WARN_UNUSED;

/* Loads one version (0: the empty policy; a number above the current one is
 * XF_ENOENT naming "version N"). The caller owns *out (xf_policy_free). */
xf_err xf_policy_load(xf_db *db, uint64_t version, xf_policy **out,
                      xf_errctx *err) XF_WARN_UNUSED;

/* Who made a change, why and when. Every change needs a non-empty author and
 * reason (XF_EINVAL naming "author" / "reason" otherwise); now is Unix
 * seconds and must be finite. Strings are borrowed for the call. */
typedef struct xf_policy_change {
  const char *author;
  const char *reason;
  double now;
} xf_policy_change;

/* One entry of the log. Strings are owned by the entry. */
typedef struct xf_policy_version_info {
  uint64_t version;
  double at;
  char *author;
  char *reason;
} xf_policy_version_info;

/* Every version, oldest first. The caller owns *out (NULL when *n is 0) and
 * releases it with xf_policy_log_free; on failure *out is NULL, *n 0. */
xf_err xf_policy_log(xf_db *db, xf_policy_version_info **out, size_t *n,
                     xf_errctx *err) XF_WARN_UNUSED;
void xf_policy_log_free(xf_policy_version_info *log, size_t n);

/* What changed from version `from` to version `to`, one line per thing, each
 * ending in '\n', regions first, then sites, datasets and rules:
 *   "+ region eu (EU GDPR)"      added
 *   "- site us-2"                removed
 *   "~ rule r1: OLD -> NEW"      changed (compact JSON of both)
 * An empty string when nothing differs. The caller frees *text with xf_free. */
xf_err xf_policy_diff(xf_db *db, uint64_t from, uint64_t to, char **text,
                      xf_errctx *err) XF_WARN_UNUSED;

/* The same between two models already in memory (a caller that holds the
 * version before a change and the one after need not load them again). */
xf_err xf_policy_diff_models(const xf_policy *from, const xf_policy *to, char **text,
                             xf_errctx *err) XF_WARN_UNUSED;

/* The document of one version, as xf_policy_format writes it (version 0: the
 * empty document). The caller frees *json with xf_free. */
xf_err xf_policy_export(xf_db *db, uint64_t version, char **json, xf_errctx *err) XF_WARN_UNUSED;

/* Every change below is one IMMEDIATE transaction that reads the current
 * version, applies the change, checks the whole result with the rules of
 * xf_policy_parse and writes it as version current + 1 with author, reason
 * and now. Anything refused leaves the database as it was. *version (may be
 * NULL) receives the new version number. */

/* Replaces the whole policy with the document json_text. */
xf_err xf_policy_import(xf_db *db, const char *json_text, const char *author, const char *reason,
                        double now, uint64_t *version, xf_errctx *err) XF_WARN_UNUSED;

/* Adds a region (jurisdiction may be NULL or empty). XF_EEXISTS when named. */
xf_err xf_policy_region_add(xf_db *db, const char *name, const char *jurisdiction,
                            const xf_policy_change *chg, uint64_t *version,
                            xf_errctx *err) XF_WARN_UNUSED;

/* Adds a site in an existing region. XF_EEXISTS when named. */
xf_err xf_policy_site_add(xf_db *db, const char *name, const char *region,
                          const xf_policy_change *chg, uint64_t *version,
                          xf_errctx *err) XF_WARN_UNUSED;

/* Adds dataset `name` at an existing site with a classification (by name). */
xf_err xf_policy_dataset_add(xf_db *db, const char *name, const char *site,
                             const char *classification, const xf_policy_change *chg,
                             uint64_t *version, xf_errctx *err) XF_WARN_UNUSED;

/* Adds a tag to dataset (name, site); a tag it already has is XF_EEXISTS. */
xf_err xf_policy_dataset_tag(xf_db *db, const char *name, const char *site, const char *tag,
                             const xf_policy_change *chg, uint64_t *version,
                             xf_errctx *err) XF_WARN_UNUSED;

/* Changes the classification of dataset (name, site). */
xf_err xf_policy_dataset_classify(xf_db *db, const char *name, const char *site,
                                  const char *classification, const xf_policy_change *chg,
                                  uint64_t *version, xf_errctx *err) XF_WARN_UNUSED;

/* Adds several datasets in one change: datasets_json is a JSON array whose
 * members are written as the document's "datasets" members ({name, site,
 * classification, tags}). Each must be at a site of the policy and not be
 * in it yet (XF_EEXISTS naming "datasets[i]"); an empty array is XF_EINVAL.
 * Refusals name the member ("datasets[1].classification"). */
xf_err xf_policy_datasets_add(xf_db *db, const char *datasets_json, const xf_policy_change *chg,
                              uint64_t *version, xf_errctx *err) XF_WARN_UNUSED;

/* The dataset `name` at `site` in p (a model from xf_policy_parse,
 * xf_policy_load or a commit: sorted), or NULL. Borrowed from p. */
const xf_policy_dataset *xf_policy_dataset_find(const xf_policy *p, const char *name,
                                                const char *site);

/* Appends one rule, given as one member of the document's "rules" array
 * (JSON text). A rule id already in use is XF_EEXISTS. */
xf_err xf_policy_rule_add(xf_db *db, const char *rule_json, const xf_policy_change *chg,
                          uint64_t *version, xf_errctx *err) XF_WARN_UNUSED;

/* Removes the rule with this id (XF_ENOENT when there is none). */
xf_err xf_policy_rule_rm(xf_db *db, const char *rule_id, const xf_policy_change *chg,
                         uint64_t *version, xf_errctx *err) XF_WARN_UNUSED;

/* One change as a value, for callers that make the same change on a local
 * database or on a document (the CLI drafts against the coordinator's
 * current document and pushes the result). Strings are borrowed. */
typedef enum xf_policy_edit_kind {
  XF_POLICY_EDIT_IMPORT = 0,       /* a: the whole document */
  XF_POLICY_EDIT_REGION_ADD,       /* a: name, b: jurisdiction (may be NULL) */
  XF_POLICY_EDIT_SITE_ADD,         /* a: name, b: region */
  XF_POLICY_EDIT_DATASET_ADD,      /* a: name, b: site, c: classification */
  XF_POLICY_EDIT_DATASET_TAG,      /* a: name, b: site, c: tag */
  XF_POLICY_EDIT_DATASET_CLASSIFY, /* a: name, b: site, c: classification */
  XF_POLICY_EDIT_RULE_ADD,         /* a: the rule as JSON */
  XF_POLICY_EDIT_RULE_RM,          /* a: rule id */
  XF_POLICY_EDIT_DATASETS_ADD,     /* a: a JSON array of datasets, each as a member of the
                                      document's "datasets" (several in one version) */
} xf_policy_edit_kind;

typedef struct xf_policy_edit {
  xf_policy_edit_kind kind;
  const char *a, *b, *c;
} xf_policy_edit;

/* The edit's name on the wire ("import", "region_add", ..., "rule_rm",
 * "datasets_add";
 * "?" out of range), and back: XF_EINVAL naming "edit" for a name that is
 * none of them. */
const char *xf_policy_edit_name(xf_policy_edit_kind k);
xf_err xf_policy_edit_kind_parse(const char *name, xf_policy_edit_kind *out,
                                 xf_errctx *err) XF_WARN_UNUSED;

/* The edit as one change of the database, exactly as the function of its
 * kind above (xf_policy_region_add, ...) makes it. */
xf_err xf_policy_commit(xf_db *db, const xf_policy_edit *e, const xf_policy_change *chg,
                        uint64_t *version, xf_errctx *err) XF_WARN_UNUSED;

/* The same for a caller that keeps the current policy in memory (a
 * coordinator): `current` (borrowed, may be NULL) is its model of a
 * version read from this database with xf_policy_load or made here; when
 * that is the current version the edit is made on a copy of it instead of
 * the version read back. *model gets the version the edit made, as
 * xf_policy_load(db, *version) would read it (the caller frees it with
 * xf_policy_free), so neither version is parsed again. On failure *model is
 * NULL. */
xf_err xf_policy_commit_keep(xf_db *db, const xf_policy *current, const xf_policy_edit *e,
                             const xf_policy_change *chg, uint64_t *version,
                             xf_policy **model, xf_errctx *err) XF_WARN_UNUSED;

/* The same edit on a document instead: parses json_text, applies the edit
 * with the checks of a database change, and writes the result as
 * xf_policy_format does into *out (the caller frees it with xf_free).
 * Refusals as the database change's; on failure *out is NULL. */
xf_err xf_policy_edit_document(const char *json_text, const xf_policy_edit *e, char **out,
                               xf_errctx *err) XF_WARN_UNUSED;

/* ---- the decision ------------------------------------------------------------------ */

/* The facts of a job the decision needs. Strings are borrowed. */
typedef struct xf_policy_job {
  const char *dataset;          /* the dataset name the job trains on */
  const char *const *tags;      /* tags the dataset must carry (n_tags may be 0) */
  size_t n_tags;
  bool privacy;                 /* differential privacy on (any mode but none) */
  double epsilon;               /* the ε the job will spend; used when privacy */
  bool secagg;                  /* secure aggregation on */
  unsigned min_sites;           /* the job's quorum; 0 counts as 1 */
  const char *coordinator_region; /* where the global coordinator runs */
  unsigned cohort;              /* the sites each regional aggregate will hold, when the
                                   caller knows it (a site checking its task: what the
                                   coordinator's plan guarantees); 0: each region's
                                   sites on the regional path, counted */
} xf_policy_job;

/* How one region's updates reach the global coordinator. */
typedef enum xf_policy_path {
  XF_POLICY_PATH_NONE = 0, /* not at all */
  XF_POLICY_PATH_DIRECT,   /* as updates, straight to the coordinator */
  XF_POLICY_PATH_REGIONAL, /* only as a regional aggregate */
} xf_policy_path;

const char *xf_policy_path_name(xf_policy_path p); /* "none", "direct", "regional" */

typedef struct xf_policy_site_decision {
  char site[XF_POLICY_NAME_MAX];
  char region[XF_POLICY_NAME_MAX];
  bool eligible;
  xf_policy_path path;
  char rule[XF_POLICY_NAME_MAX]; /* the rule that decided, or "default" */
  char why[256];                 /* one sentence for a person */
  /* The max_epsilon of the allow rule that made it eligible, if it has one:
   * besides bounding the job, it caps what the dataset may spend across
   * jobs (the site's ledger enforces it). */
  bool has_max_epsilon;
  double max_epsilon;
} xf_policy_site_decision;

typedef struct xf_policy_region_plan {
  char region[XF_POLICY_NAME_MAX];
  xf_policy_path path;
  char rule[XF_POLICY_NAME_MAX]; /* the rule behind the path, or "default" */
  unsigned sites;                /* the federation's sites in the region */
  unsigned eligible;             /* of which eligible */
  /* Conditions of a regional aggregate (path REGIONAL). */
  unsigned min_cohort;           /* sites per regional aggregate, >= 1 */
  bool require_secagg;
  bool has_max_epsilon;
  double max_epsilon;
} xf_policy_region_plan;

#define XF_POLICY_SUGGESTION_MAX 160

typedef struct xf_policy_decision {
  uint64_t version;  /* the policy version decided against */
  bool allowed;      /* at least max(min_sites, 1) sites are eligible */
  size_t n_sites, n_regions, n_suggestions;
  xf_policy_site_decision *sites;   /* sorted by site name */
  xf_policy_region_plan *regions;   /* sorted by region name */
  char (*suggestions)[XF_POLICY_SUGGESTION_MAX]; /* what would make more sites
                                                  * eligible, no duplicates */
} xf_policy_decision;

/* Decides a job against one policy version at time now (Unix seconds).
 *
 * The federation is every site of the policy that holds a dataset named
 * job->dataset carrying all of job->tags. For each site: an update that
 * stays in its region is always allowed; otherwise it may go directly when a
 * valid allow rule for kind "update" to the coordinator's region matches and
 * its conditions hold, and no valid deny rule does; failing that, as a
 * regional aggregate under the same test for kind "regional_aggregate", with
 * the region's cohort checked against the rule's min_cohort. Deny beats
 * allow; without any allow, the default is deny. docs/policy.md gives the
 * steps.
 *
 * XF_EINVAL naming the field when job->dataset or job->coordinator_region is
 * missing, the region is not in the policy, or epsilon is not a positive
 * finite number with privacy on; XF_ENOMEM. A federation with no site is not
 * an error: out->allowed is false and a suggestion says so. On success the
 * caller owns what *out holds (xf_policy_decision_free); on failure *out is
 * empty. */
xf_err xf_policy_decide(const xf_policy *policy, const xf_policy_job *job, double now,
                        xf_policy_decision *out, xf_errctx *err) XF_WARN_UNUSED;

void xf_policy_decision_free(xf_policy_decision *d);

/* The decision as compact JSON, members in this order: version, allowed,
 * sites [{site, region, eligible, path, rule, reason, max_epsilon (null when
 * none)}], regions [{region,
 * path, rule, sites, eligible, min_cohort, require_secagg, max_epsilon (null
 * when none)}], suggestions [text]. What `xfed policy check --json` prints
 * and what the coordinator sends and audits. The caller frees *text with
 * xf_free. XF_ENOMEM. */
xf_err xf_policy_decision_json(const xf_policy_decision *d, char **text,
                               xf_errctx *err) XF_WARN_UNUSED;

#endif
