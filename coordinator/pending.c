/* SPDX-License-Identifier: Apache-2.0 */
/* Pending datasets: what a listing shows and which of them an adoption
 * adds to the policy (coordinator/pending.h). */
#include "coordinator/pending.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

static int by_name(const void *key, const void *site) {
  return strcmp(key, ((const xf_policy_site *)site)->name);
}

/* By binary search: a model's sites are sorted by name (policy/policy.h),
 * and a listing may hold a row for each of tens of thousands of sites. */
static bool site_in_policy(const xf_policy *p, const char *site) {
  return p && p->n_sites && bsearch(site, p->sites, p->n_sites, sizeof(*p->sites), by_name);
}

/* Whether `policy` holds a dataset named `name` (at `site` when given). */
static const xf_policy_dataset *held(const xf_policy *p, const char *name, const char *site) {
  for (size_t i = 0; p && i < p->n_datasets; i++)
    if (strcmp(p->datasets[i].name, name) == 0 && (!site || strcmp(p->datasets[i].site, site) == 0))
      return &p->datasets[i];
  return NULL;
}

static bool class_known(const char *c) {
  static const char *const names[] = {"public", "internal", "confidential", "restricted"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strcmp(c, names[i]) == 0) return true;
  return false;
}

/* The text a JSON value dumps to, copied into xf_malloc'ed memory. */
static xf_err dump(json_t *v, char **out, xf_errctx *err) {
  char *t = v ? json_dumps(v, JSON_COMPACT) : NULL;
  json_decref(v);
  *out = t ? xf_strdup(t) : NULL;
  free(t); /* jansson's */
  return *out ? XF_OK : xf_fail(err, XF_ENOMEM, "out of memory listing pending datasets");
}

/* The row's tags as a JSON array (a damaged text reads as none). */
static json_t *tags_of(const xf_journal_pending *r) {
  json_t *t = r->tags ? json_loads(r->tags, 0, NULL) : NULL;
  if (json_is_array(t)) return t;
  json_decref(t);
  return json_array();
}

xf_err xf_pending_adoption(const xf_journal_pending *pending, size_t n, const xf_policy *policy,
                           const xf_pending_pick *pick, char **datasets_json, size_t *count,
                           xf_errctx *err) {
  *datasets_json = NULL;
  *count = 0;
  const char *site = pick->site && *pick->site ? pick->site : NULL;
  const char *cls = pick->classification && *pick->classification ? pick->classification
                                                                  : XF_PENDING_DEFAULT_CLASS;
  XF_ENSURE(pick->all || pick->n_names, err, XF_EUSAGE,
            "name the datasets to adopt, or adopt every pending one with --all");
  XF_ENSURE(!(pick->all && pick->n_names), err, XF_EUSAGE,
            "give dataset names or --all, not both");
  if (!class_known(cls))
    return xf_fail(err, XF_EINVAL,
                   "unknown classification '%.64s': use one of public, internal, confidential, "
                   "restricted",
                   cls);
  char where[96] = "";
  if (site) snprintf(where, sizeof(where), " at site '%.63s'", site);
  /* Every name must be pending where asked. */
  for (size_t k = 0; k < pick->n_names; k++) {
    const char *name = pick->names[k] ? pick->names[k] : "";
    bool found = false;
    for (size_t i = 0; !found && i < n; i++)
      found = strcmp(pending[i].name, name) == 0 && (!site || strcmp(pending[i].site, site) == 0);
    if (found) continue;
    const xf_policy_dataset *d = held(policy, name, site);
    if (d)
      return xf_fail(err, XF_ENOENT,
                     "dataset '%.63s' is not pending%s: the policy holds it already (at site "
                     "'%s')",
                     name, where, d->site);
    return xf_fail(err, XF_ENOENT,
                   "dataset '%.63s' is not pending%s: no site announced it; 'xfed policy dataset "
                   "pending' lists the pending datasets",
                   name, where);
  }
  json_t *arr = json_array();
  if (!arr) return xf_fail(err, XF_ENOMEM, "out of memory adopting datasets");
  for (size_t i = 0; i < n; i++) {
    const xf_journal_pending *r = &pending[i];
    if (site && strcmp(r->site, site) != 0) continue;
    bool picked = pick->all;
    for (size_t k = 0; !picked && k < pick->n_names; k++)
      picked = pick->names[k] && strcmp(pick->names[k], r->name) == 0;
    if (!picked) continue;
    if (!site_in_policy(policy, r->site)) {
      json_decref(arr);
      return xf_fail(err, XF_EINVAL,
                     "dataset '%s' is pending at site '%s' (region %s), which is not in the "
                     "policy: add the site first ('xfed policy site add --name %s --region %s "
                     "--reason TEXT'), or adopt only other sites' datasets (--site S)",
                     r->name, r->site, r->region, r->site, r->region);
    }
    json_t *d = json_pack("{s:s,s:s,s:s,s:o}", "name", r->name, "site", r->site,
                          "classification", cls, "tags", tags_of(r));
    if (!d || json_array_append_new(arr, d) != 0) {
      json_decref(arr);
      return xf_fail(err, XF_ENOMEM, "out of memory adopting datasets");
    }
  }
  size_t picked = json_array_size(arr);
  if (picked == 0) {
    json_decref(arr);
    return xf_fail(err, XF_ENOENT, "no dataset is pending%s: nothing to adopt", where);
  }
  XF_GUARD(dump(arr, datasets_json, err));
  *count = picked;
  return XF_OK;
}

xf_err xf_pending_json(const xf_journal_pending *pending, size_t n, const xf_policy *policy,
                       char **text, xf_errctx *err) {
  *text = NULL;
  json_t *arr = json_array();
  for (size_t i = 0; arr && i < n; i++) {
    const xf_journal_pending *r = &pending[i];
    json_t *o = json_pack(
        "{s:s,s:s,s:s,s:s,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:b}", "site", r->site, "region",
        r->region, "name", r->name, "classification", r->classification, "tags", tags_of(r),
        "train_records", (json_int_t)r->train_records, "test_records",
        (json_int_t)r->test_records, "classes", (json_int_t)r->classes, "height",
        (json_int_t)r->height, "width", (json_int_t)r->width, "channels", (json_int_t)r->channels,
        "first_seen", r->first_seen, "last_seen", r->last_seen, "site_in_policy",
        site_in_policy(policy, r->site));
    if (!o || json_array_append_new(arr, o) != 0) {
      json_decref(arr);
      arr = NULL;
    }
  }
  return dump(arr, text, err);
}
