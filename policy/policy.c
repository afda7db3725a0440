/* SPDX-License-Identifier: Apache-2.0 */
/* The policy model behind policy/policy.h: the JSON document (parse, checks,
 * canonical form), the version table, the changes that make new versions,
 * the log and the diff. */
#include "policy/policy.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

/* ---- names ------------------------------------------------------------------------- */

static const char *const class_names[] = {"any", "public", "internal", "confidential",
                                          "restricted"};
static const char *const kind_names[] = {"update", "regional_aggregate", "model", "metrics"};
static const char *const effect_names[] = {"allow", "deny"};

const char *xf_policy_class_name(xf_policy_class c) {
  return (c >= XF_POLICY_CLASS_PUBLIC && c <= XF_POLICY_CLASS_RESTRICTED) ? class_names[c] : "?";
}
const char *xf_policy_kind_name(xf_policy_kind k) {
  return (k >= XF_POLICY_KIND_UPDATE && k <= XF_POLICY_KIND_METRICS) ? kind_names[k] : "?";
}
const char *xf_policy_effect_name(xf_policy_effect e) {
  return (e == XF_POLICY_ALLOW || e == XF_POLICY_DENY) ? effect_names[e] : "?";
}

static bool name_valid(const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n == 0 || n >= XF_POLICY_NAME_MAX) return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && (i == 0 || (c != '-' && c != '_'))) return false;
  }
  return true;
}

/* ---- refusals ------------------------------------------------------------------------ */

static xf_err refuse(xf_errctx *err, xf_err code, const char *field, const char *fmt, ...)
    XF_PRINTF(4, 5);
static xf_err refuse(xf_errctx *err, xf_err code, const char *field, const char *fmt, ...) {
  va_list ap;
  xf_errctx_clear(err);
  if (field) xf_errctx_field(err, "%s", field);
  va_start(ap, fmt);
  xf_err rc = xf_vfail(err, code, fmt, ap);
  va_end(ap);
  return rc;
}

/* ---- the model in memory ---------------------------------------------------------------- */

void xf_policy_free(xf_policy *p) {
  if (!p) return;
  xf_free(p->regions);
  xf_free(p->sites);
  for (size_t i = 0; p->datasets && i < p->n_datasets; i++) xf_free(p->datasets[i].tags);
  xf_free(p->datasets);
  xf_free(p->rules);
  xf_free(p);
}

/* Grows *arr (of elem-sized items, *n used) by one zeroed item; NULL on ENOMEM. */
static void *push(void **arr, size_t *n, size_t elem) {
  char *grown = xf_realloc(*arr, (*n + 1) * elem);
  if (!grown) return NULL;
  *arr = grown;
  memset(grown + *n * elem, 0, elem);
  return grown + (*n)++ * elem;
}

static int name_cmp(const void *key, const void *elem) {
  /* every model record starts with its name */
  return strcmp((const char *)key, (const char *)elem);
}

/* Regions and sites by binary search: callers hold a sorted model (a parse
 * and a load sort it; an edit looks things up before it appends, and the
 * change sorts again before its checks), so that checking 60,000 datasets
 * against 60,000 sites costs n log n, not n squared. */
static const xf_policy_region *find_region(const xf_policy *p, const char *name) {
  if (!p->n_regions) return NULL;
  return bsearch(name, p->regions, p->n_regions, sizeof(*p->regions), name_cmp);
}
static const xf_policy_site *find_site(const xf_policy *p, const char *name) {
  if (!p->n_sites) return NULL;
  return bsearch(name, p->sites, p->n_sites, sizeof(*p->sites), name_cmp);
}
static int by_dataset(const void *a, const void *b);
static xf_policy_dataset *find_dataset(const xf_policy *p, const char *name, const char *site) {
  for (size_t i = 0; i < p->n_datasets; i++)
    if (strcmp(p->datasets[i].name, name) == 0 && strcmp(p->datasets[i].site, site) == 0)
      return &p->datasets[i];
  return NULL;
}

const xf_policy_dataset *xf_policy_dataset_find(const xf_policy *p, const char *name,
                                                const char *site) {
  if (!p || !p->n_datasets || !name || !site) return NULL;
  xf_policy_dataset key;
  snprintf(key.name, sizeof(key.name), "%s", name);
  snprintf(key.site, sizeof(key.site), "%s", site);
  return bsearch(&key, p->datasets, p->n_datasets, sizeof(*p->datasets), by_dataset);
}

static size_t find_rule(const xf_policy *p, const char *id) {
  for (size_t i = 0; i < p->n_rules; i++)
    if (strcmp(p->rules[i].id, id) == 0) return i;
  return p->n_rules;
}

static int by_dataset(const void *a, const void *b) {
  const xf_policy_dataset *x = a, *y = b;
  int c = strcmp(x->site, y->site);
  return c ? c : strcmp(x->name, y->name);
}
static int by_tag(const void *a, const void *b) { return strcmp(a, b); }

static void sort_model(xf_policy *p) {
  if (p->n_regions) qsort(p->regions, p->n_regions, sizeof(*p->regions), name_cmp);
  if (p->n_sites) qsort(p->sites, p->n_sites, sizeof(*p->sites), name_cmp);
  if (p->n_datasets) qsort(p->datasets, p->n_datasets, sizeof(*p->datasets), by_dataset);
  for (size_t i = 0; i < p->n_datasets; i++)
    if (p->datasets[i].n_tags)
      qsort(p->datasets[i].tags, p->datasets[i].n_tags, sizeof(p->datasets[i].tags[0]), by_tag);
}

/* ---- checks on the whole model ------------------------------------------------------------
 * One function checks every model, whether it came from a document or from a
 * single edit, so the two paths cannot disagree on what a valid policy is. */

static xf_err check_rule(const xf_policy *p, size_t i, xf_errctx *err) {
  const xf_policy_rule *r = &p->rules[i];
  char f[160];
  const xf_policy_selector *s = &r->select;
  if (s->region[0] && !find_region(p, s->region)) {
    snprintf(f, sizeof(f), "rules[%zu].select.region", i);
    return refuse(err, XF_EINVAL, f, "rule '%s' selects unknown region '%s'", r->id, s->region);
  }
  if (s->site[0]) {
    const xf_policy_site *site = find_site(p, s->site);
    snprintf(f, sizeof(f), "rules[%zu].select.site", i);
    if (!site)
      return refuse(err, XF_EINVAL, f, "rule '%s' selects unknown site '%s'", r->id, s->site);
    if (s->region[0] && strcmp(site->region, s->region) != 0)
      return refuse(err, XF_EINVAL, f,
                    "rule '%s' can never match: site '%s' is in region '%s', not '%s'", r->id,
                    s->site, site->region, s->region);
  }
  for (size_t d = 0; d < r->n_dests; d++) {
    if (strcmp(r->dests[d], "*") == 0) continue;
    if (!find_region(p, r->dests[d])) {
      snprintf(f, sizeof(f), "rules[%zu].destinations[%zu]", i, d);
      return refuse(err, XF_EINVAL, f, "rule '%s' names unknown destination region '%s'", r->id,
                    r->dests[d]);
    }
  }
  for (size_t j = 0; j < i; j++)
    if (strcmp(p->rules[j].id, r->id) == 0) {
      snprintf(f, sizeof(f), "rules[%zu].id", i);
      return refuse(err, XF_EEXISTS, f, "rule id '%s' is used twice", r->id);
    }
  return XF_OK;
}

static xf_err check_model(const xf_policy *p, xf_errctx *err) {
  char f[160];
  for (size_t i = 1; i < p->n_regions; i++)
    if (strcmp(p->regions[i - 1].name, p->regions[i].name) == 0)
      return refuse(err, XF_EEXISTS, "regions", "region '%s' is named twice", p->regions[i].name);
  for (size_t i = 0; i < p->n_sites; i++) {
    if (i && strcmp(p->sites[i - 1].name, p->sites[i].name) == 0)
      return refuse(err, XF_EEXISTS, "sites", "site '%s' is named twice", p->sites[i].name);
    if (!find_region(p, p->sites[i].region)) {
      snprintf(f, sizeof(f), "site %s", p->sites[i].name);
      return refuse(err, XF_EINVAL, f, "site '%s' is in unknown region '%s'", p->sites[i].name,
                    p->sites[i].region);
    }
  }
  for (size_t i = 0; i < p->n_datasets; i++) {
    const xf_policy_dataset *d = &p->datasets[i];
    snprintf(f, sizeof(f), "dataset %s@%s", d->name, d->site);
    if (i && by_dataset(&p->datasets[i - 1], d) == 0)
      return refuse(err, XF_EEXISTS, f, "dataset '%s' is named twice at site '%s'", d->name,
                    d->site);
    if (!find_site(p, d->site))
      return refuse(err, XF_EINVAL, f, "dataset '%s' is at unknown site '%s'", d->name, d->site);
    for (size_t t = 1; t < d->n_tags; t++)
      if (strcmp(d->tags[t - 1], d->tags[t]) == 0)
        return refuse(err, XF_EEXISTS, f, "dataset '%s' has tag '%s' twice", d->name, d->tags[t]);
  }
  for (size_t i = 0; i < p->n_rules; i++) XF_GUARD(check_rule(p, i, err));
  return XF_OK;
}

/* ---- parsing the document ------------------------------------------------------------------ */

/* The members an object may have; anything else is refused, so a misspelt
 * condition never silently weakens a rule. */
static xf_err only_members(json_t *o, const char *path, const char *const *allowed,
                           xf_errctx *err) {
  const char *key;
  json_t *v;
  json_object_foreach(o, key, v) {
    bool ok = false;
    for (size_t i = 0; allowed[i]; i++)
      if (strcmp(key, allowed[i]) == 0) ok = true;
    if (!ok) {
      char f[160];
      snprintf(f, sizeof(f), "%s.%.60s", path, key);
      return refuse(err, XF_EFORMAT, f, "unknown member '%.60s' in %s", key, path);
    }
  }
  return XF_OK;
}

/* Copies the string member `key` of o into out (n bytes). Missing: "" when
 * optional, else refused. `what` says which kind of name it is ("region name"),
 * NULL for free text up to n - 1 bytes. */
static xf_err get_string(json_t *o, const char *path, const char *key, bool required,
                         const char *what, char *out, size_t n, xf_errctx *err) {
  char f[160];
  snprintf(f, sizeof(f), "%s.%s", path, key);
  json_t *v = json_object_get(o, key);
  out[0] = '\0';
  if (!v) {
    if (required) return refuse(err, XF_EFORMAT, f, "%s has no '%s'", path, key);
    return XF_OK;
  }
  if (!json_is_string(v)) return refuse(err, XF_EFORMAT, f, "%s must be a string", f);
  const char *s = json_string_value(v);
  if (what ? !name_valid(s) : strlen(s) >= n)
    return refuse(err, XF_EINVAL, f,
                  what ? "'%.80s' is not a valid %s: use 1 to 63 lowercase letters, digits, "
                         "'-' and '_'"
                       : "'%.80s' is longer than %s allows",
                  s, what ? what : "the label");
  snprintf(out, n, "%s", s);
  return XF_OK;
}

static xf_err get_enum(json_t *o, const char *path, const char *key, const char *const *names,
                       int first, int count, const char *what, int *out, xf_errctx *err) {
  char f[160], s[XF_POLICY_NAME_MAX];
  XF_GUARD(get_string(o, path, key, true, NULL, s, sizeof(s), err));
  for (int i = first; i < first + count; i++)
    if (strcmp(s, names[i]) == 0) {
      *out = i;
      return XF_OK;
    }
  /* A field path is a few short names; the key is one of this file's. */
  snprintf(f, sizeof(f), "%.120s.%.30s", path, key);
  char list[160] = "";
  for (int i = first; i < first + count; i++)
    snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i > first ? ", " : "",
             names[i]);
  return refuse(err, XF_EINVAL, f, "unknown %s '%s': use one of %s", what, s, list);
}

static xf_err get_array(json_t *o, const char *path, const char *key, json_t **out,
                        xf_errctx *err) {
  char f[160];
  *out = json_object_get(o, key);
  if (*out && !json_is_array(*out)) {
    snprintf(f, sizeof(f), "%s%s%s", path, *path ? "." : "", key);
    return refuse(err, XF_EFORMAT, f, "%s must be an array", f);
  }
  return XF_OK;
}

static xf_err get_number(json_t *o, const char *path, const char *key, bool *has, double *out,
                         xf_errctx *err) {
  json_t *v = json_object_get(o, key);
  *has = v != NULL;
  if (!v) return XF_OK;
  if (!json_is_number(v) || !isfinite(json_number_value(v))) {
    char f[160];
    snprintf(f, sizeof(f), "%s.%s", path, key);
    return refuse(err, XF_EFORMAT, f, "%s must be a number", f);
  }
  *out = json_number_value(v);
  return XF_OK;
}

static xf_err need_object(json_t *v, const char *path, xf_errctx *err) {
  if (!json_is_object(v)) return refuse(err, XF_EFORMAT, path, "%s must be an object", path);
  return XF_OK;
}

static xf_err parse_region(json_t *v, const char *path, xf_policy_region *r, xf_errctx *err) {
  static const char *const members[] = {"name", "jurisdiction", NULL};
  XF_GUARD(need_object(v, path, err));
  XF_GUARD(only_members(v, path, members, err));
  XF_GUARD(get_string(v, path, "name", true, "region name", r->name, sizeof(r->name), err));
  return get_string(v, path, "jurisdiction", false, NULL, r->jurisdiction,
                    sizeof(r->jurisdiction), err);
}

static xf_err parse_site(json_t *v, const char *path, xf_policy_site *s, xf_errctx *err) {
  static const char *const members[] = {"name", "region", NULL};
  XF_GUARD(need_object(v, path, err));
  XF_GUARD(only_members(v, path, members, err));
  XF_GUARD(get_string(v, path, "name", true, "site name", s->name, sizeof(s->name), err));
  return get_string(v, path, "region", true, "region name", s->region, sizeof(s->region), err);
}

static xf_err parse_dataset(json_t *v, const char *path, xf_policy_dataset *d, xf_errctx *err) {
  static const char *const members[] = {"name", "site", "classification", "tags", NULL};
  XF_GUARD(need_object(v, path, err));
  XF_GUARD(only_members(v, path, members, err));
  XF_GUARD(get_string(v, path, "name", true, "dataset name", d->name, sizeof(d->name), err));
  XF_GUARD(get_string(v, path, "site", true, "site name", d->site, sizeof(d->site), err));
  int c = 0;
  XF_GUARD(get_enum(v, path, "classification", class_names, 1, 4, "classification", &c, err));
  d->classification = (xf_policy_class)c;
  json_t *tags;
  XF_GUARD(get_array(v, path, "tags", &tags, err));
  size_t i, n = json_array_size(tags);
  json_t *t;
  if (n > XF_POLICY_TAGS_MAX) {
    char f[160];
    snprintf(f, sizeof(f), "%s.tags[%d]", path, XF_POLICY_TAGS_MAX);
    return refuse(err, XF_ERANGE, f, "a dataset has at most %d tags", XF_POLICY_TAGS_MAX);
  }
  if (n && !(d->tags = xf_calloc(n, sizeof(*d->tags))))
    return xf_fail(err, XF_ENOMEM, "cannot hold the policy");
  json_array_foreach(tags, i, t) {
    char f[160];
    snprintf(f, sizeof(f), "%s.tags[%zu]", path, i);
    if (!json_is_string(t) || !name_valid(json_string_value(t)))
      return refuse(err, XF_EINVAL, f, "%s is not a valid tag: use 1 to 63 lowercase letters, "
                    "digits, '-' and '_'", f);
    snprintf(d->tags[d->n_tags++], XF_POLICY_NAME_MAX, "%s", json_string_value(t));
  }
  return XF_OK;
}

/* "PATH.conditions.KEY" into g (200 bytes), for naming a condition. */
static const char *cf(const char *conditions, const char *key, char *g) {
  snprintf(g, 200, "%s.%s", conditions, key);
  return g;
}

static xf_err parse_rule(json_t *v, const char *path, xf_policy_rule *r, xf_errctx *err) {
  static const char *const members[] = {"id", "effect", "kind", "select", "destinations",
                                        "conditions", NULL};
  static const char *const sel_members[] = {"region", "site", "dataset", "classification", "tag",
                                            NULL};
  static const char *const cond_members[] = {"max_epsilon", "min_cohort", "require_secagg",
                                             "valid_from", "valid_until", NULL};
  char f[160], g[200];
  int e = 0;
  XF_GUARD(need_object(v, path, err));
  XF_GUARD(only_members(v, path, members, err));
  XF_GUARD(get_string(v, path, "id", true, "rule id", r->id, sizeof(r->id), err));
  if (strcmp(r->id, "default") == 0)
    return refuse(err, XF_EINVAL, path, "'default' is reserved and cannot be a rule id");
  XF_GUARD(get_enum(v, path, "effect", effect_names, 0, 2, "effect", &e, err));
  r->effect = (xf_policy_effect)e;
  XF_GUARD(get_enum(v, path, "kind", kind_names, 0, 4, "artifact kind", &e, err));
  r->kind = (xf_policy_kind)e;

  json_t *sel = json_object_get(v, "select");
  snprintf(f, sizeof(f), "%s.select", path);
  if (sel) {
    xf_policy_selector *s = &r->select;
    XF_GUARD(need_object(sel, f, err));
    XF_GUARD(only_members(sel, f, sel_members, err));
    XF_GUARD(get_string(sel, f, "region", false, "region name", s->region, sizeof(s->region), err));
    XF_GUARD(get_string(sel, f, "site", false, "site name", s->site, sizeof(s->site), err));
    XF_GUARD(get_string(sel, f, "dataset", false, "dataset name", s->dataset, sizeof(s->dataset),
                        err));
    XF_GUARD(get_string(sel, f, "tag", false, "tag", s->tag, sizeof(s->tag), err));
    if (json_object_get(sel, "classification")) {
      XF_GUARD(get_enum(sel, f, "classification", class_names, 1, 4, "classification", &e, err));
      s->classification = (xf_policy_class)e;
    }
  }

  json_t *dests;
  XF_GUARD(get_array(v, path, "destinations", &dests, err));
  snprintf(f, sizeof(f), "%s.destinations", path);
  if (!dests || json_array_size(dests) == 0)
    return refuse(err, XF_EINVAL, f, "rule '%s' needs at least one destination (a region or \"*\")",
                  r->id);
  size_t i;
  json_t *d;
  json_array_foreach(dests, i, d) {
    snprintf(f, sizeof(f), "%s.destinations[%zu]", path, i);
    if (i >= XF_POLICY_DESTS_MAX)
      return refuse(err, XF_ERANGE, f, "a rule has at most %d destinations", XF_POLICY_DESTS_MAX);
    const char *s = json_is_string(d) ? json_string_value(d) : NULL;
    if (!s || (strcmp(s, "*") != 0 && !name_valid(s)))
      return refuse(err, XF_EINVAL, f, "%s is not a region name or \"*\"", f);
    for (size_t j = 0; j < r->n_dests; j++)
      if (strcmp(r->dests[j], s) == 0)
        return refuse(err, XF_EEXISTS, f, "rule '%s' names destination '%s' twice", r->id, s);
    snprintf(r->dests[r->n_dests++], XF_POLICY_NAME_MAX, "%s", s);
  }

  json_t *c = json_object_get(v, "conditions");
  snprintf(f, sizeof(f), "%s.conditions", path);
  if (c) {
    bool has;
    double x;
    XF_GUARD(need_object(c, f, err));
    XF_GUARD(only_members(c, f, cond_members, err));
    XF_GUARD(get_number(c, f, "max_epsilon", &r->has_max_epsilon, &r->max_epsilon, err));
    if (r->has_max_epsilon && !(r->max_epsilon > 0))
      return refuse(err, XF_EINVAL, cf(f, "max_epsilon", g), "rule '%s': max_epsilon must be above 0",
                    r->id);
    XF_GUARD(get_number(c, f, "min_cohort", &has, &x, err));
    if (has) {
      if (!(x >= 1 && x <= 1e6 && x == floor(x)))
        return refuse(err, XF_EINVAL, cf(f, "min_cohort", g),
                      "rule '%s': min_cohort must be a whole number from 1 to 1000000", r->id);
      r->min_cohort = (unsigned)x;
    }
    json_t *sa = json_object_get(c, "require_secagg");
    if (sa && !json_is_boolean(sa))
      return refuse(err, XF_EFORMAT, cf(f, "require_secagg", g), "rule '%s': require_secagg must be true or "
                    "false", r->id);
    r->require_secagg = sa && json_is_true(sa);
    XF_GUARD(get_number(c, f, "valid_from", &r->has_valid_from, &r->valid_from, err));
    XF_GUARD(get_number(c, f, "valid_until", &r->has_valid_until, &r->valid_until, err));
  }
  if (r->has_valid_from && r->has_valid_until && !(r->valid_until > r->valid_from))
    return refuse(err, XF_EINVAL, cf(f, "valid_until", g),
                  "rule '%s' can never match: valid_until %.0f is not after valid_from %.0f",
                  r->id, r->valid_until, r->valid_from);
  if (r->effect == XF_POLICY_DENY &&
      (r->has_max_epsilon || r->min_cohort || r->require_secagg))
    return refuse(err, XF_EINVAL, f,
                  "deny rule '%s' has conditions: max_epsilon, min_cohort and require_secagg "
                  "apply to allow rules only",
                  r->id);
  return XF_OK;
}

typedef xf_err (*parse_fn)(json_t *v, const char *path, void *item, xf_errctx *err);

/* The list is allocated whole before its items are parsed: growing it one
 * item at a time would copy a 60,000-item list over and over. *n counts an
 * item before it is parsed, so that xf_policy_free releases what a refused
 * item already holds. */
static xf_err parse_list(json_t *root, const char *key, size_t elem, void **arr, size_t *n,
                         parse_fn parse, xf_errctx *err) {
  json_t *list;
  XF_GUARD(get_array(root, "", key, &list, err));
  size_t i, count = json_array_size(list);
  json_t *v;
  if (count && !(*arr = xf_calloc(count, elem)))
    return xf_fail(err, XF_ENOMEM, "cannot hold the policy");
  json_array_foreach(list, i, v) {
    char path[64];
    snprintf(path, sizeof(path), "%s[%zu]", key, i);
    void *item = (char *)*arr + i * elem;
    (*n)++;
    XF_GUARD(parse(v, path, item, err));
  }
  return XF_OK;
}

static xf_err parse_region_v(json_t *v, const char *path, void *item, xf_errctx *err) {
  return parse_region(v, path, item, err);
}
static xf_err parse_site_v(json_t *v, const char *path, void *item, xf_errctx *err) {
  return parse_site(v, path, item, err);
}
static xf_err parse_dataset_v(json_t *v, const char *path, void *item, xf_errctx *err) {
  return parse_dataset(v, path, item, err);
}
static xf_err parse_rule_v(json_t *v, const char *path, void *item, xf_errctx *err) {
  return parse_rule(v, path, item, err);
}

static xf_err load_json(const char *text, size_t flags, json_t **out, xf_errctx *err) {
  json_error_t je;
  *out = text ? json_loads(text, JSON_REJECT_DUPLICATES | flags, &je) : NULL;
  if (*out) return XF_OK;
  if (!text) return refuse(err, XF_EINVAL, "document", "the policy document is missing");
  char f[64];
  snprintf(f, sizeof(f), "line %d, column %d", je.line, je.column);
  return refuse(err, XF_EFORMAT, f, "the policy document is not valid JSON: %s", je.text);
}

xf_err xf_policy_parse(const char *json_text, xf_policy **out, xf_errctx *err) {
  static const char *const members[] = {"regions", "sites", "datasets", "rules", NULL};
  json_t *root = NULL;
  *out = NULL;
  xf_policy *p = xf_calloc(1, sizeof(*p));
  if (!p) return xf_fail(err, XF_ENOMEM, "cannot hold the policy");
  xf_err rc = load_json(json_text, 0, &root, err);
  if (rc == XF_OK) rc = need_object(root, "document", err);
  if (rc == XF_OK) rc = only_members(root, "document", members, err);
  if (rc == XF_OK)
    rc = parse_list(root, "regions", sizeof(*p->regions), (void **)&p->regions, &p->n_regions,
                    parse_region_v, err);
  if (rc == XF_OK)
    rc = parse_list(root, "sites", sizeof(*p->sites), (void **)&p->sites, &p->n_sites,
                    parse_site_v, err);
  if (rc == XF_OK)
    rc = parse_list(root, "datasets", sizeof(*p->datasets), (void **)&p->datasets,
                    &p->n_datasets, parse_dataset_v, err);
  if (rc == XF_OK)
    rc = parse_list(root, "rules", sizeof(*p->rules), (void **)&p->rules, &p->n_rules,
                    parse_rule_v, err);
  json_decref(root);
  if (rc == XF_OK) {
    sort_model(p);
    rc = check_model(p, err);
  }
  if (rc != XF_OK) {
    xf_policy_free(p);
    return rc;
  }
  *out = p;
  return XF_OK;
}

/* ---- the canonical document ------------------------------------------------------------------ */

/* jansson's json_*_set_new take ownership even on failure; a NULL value makes
 * them fail, which the caller sees as a non-zero sum. */
static int put(json_t *o, const char *key, json_t *v) { return json_object_set_new(o, key, v); }

static json_t *region_json(const xf_policy_region *r) {
  json_t *o = json_object();
  if (!o || put(o, "name", json_string(r->name)) ||
      put(o, "jurisdiction", json_string(r->jurisdiction))) {
    json_decref(o);
    return NULL;
  }
  return o;
}

static json_t *site_json(const xf_policy_site *s) {
  json_t *o = json_object();
  if (!o || put(o, "name", json_string(s->name)) || put(o, "region", json_string(s->region))) {
    json_decref(o);
    return NULL;
  }
  return o;
}

static json_t *dataset_json(const xf_policy_dataset *d) {
  json_t *o = json_object(), *tags = json_array();
  int bad = !o || !tags;
  for (size_t i = 0; !bad && i < d->n_tags; i++)
    bad = json_array_append_new(tags, json_string(d->tags[i]));
  if (!bad)
    bad = put(o, "name", json_string(d->name)) || put(o, "site", json_string(d->site)) ||
          put(o, "classification", json_string(xf_policy_class_name(d->classification))) ||
          put(o, "tags", json_incref(tags));
  json_decref(tags);
  if (bad) {
    json_decref(o);
    return NULL;
  }
  return o;
}

static json_t *rule_json(const xf_policy_rule *r) {
  json_t *o = json_object(), *sel = json_object(), *dests = json_array(), *cond = json_object();
  const xf_policy_selector *s = &r->select;
  int bad = !o || !sel || !dests || !cond;
  if (!bad && s->region[0]) bad = put(sel, "region", json_string(s->region));
  if (!bad && s->site[0]) bad = put(sel, "site", json_string(s->site));
  if (!bad && s->dataset[0]) bad = put(sel, "dataset", json_string(s->dataset));
  if (!bad && s->classification)
    bad = put(sel, "classification", json_string(xf_policy_class_name(s->classification)));
  if (!bad && s->tag[0]) bad = put(sel, "tag", json_string(s->tag));
  for (size_t i = 0; !bad && i < r->n_dests; i++)
    bad = json_array_append_new(dests, json_string(r->dests[i]));
  if (!bad && r->has_max_epsilon) bad = put(cond, "max_epsilon", json_real(r->max_epsilon));
  if (!bad && r->min_cohort) bad = put(cond, "min_cohort", json_integer(r->min_cohort));
  if (!bad && r->require_secagg) bad = put(cond, "require_secagg", json_true());
  if (!bad && r->has_valid_from) bad = put(cond, "valid_from", json_real(r->valid_from));
  if (!bad && r->has_valid_until) bad = put(cond, "valid_until", json_real(r->valid_until));
  if (!bad)
    bad = put(o, "id", json_string(r->id)) ||
          put(o, "effect", json_string(xf_policy_effect_name(r->effect))) ||
          put(o, "kind", json_string(xf_policy_kind_name(r->kind))) ||
          put(o, "select", json_incref(sel)) || put(o, "destinations", json_incref(dests)) ||
          (json_object_size(cond) && put(o, "conditions", json_incref(cond)));
  json_decref(sel);
  json_decref(dests);
  json_decref(cond);
  if (bad) {
    json_decref(o);
    return NULL;
  }
  return o;
}

static json_t *model_json(const xf_policy *p) {
  json_t *root = json_object();
  json_t *lists[4] = {json_array(), json_array(), json_array(), json_array()};
  int bad = !root || !lists[0] || !lists[1] || !lists[2] || !lists[3];
  for (size_t i = 0; !bad && i < p->n_regions; i++)
    bad = json_array_append_new(lists[0], region_json(&p->regions[i]));
  for (size_t i = 0; !bad && i < p->n_sites; i++)
    bad = json_array_append_new(lists[1], site_json(&p->sites[i]));
  for (size_t i = 0; !bad && i < p->n_datasets; i++)
    bad = json_array_append_new(lists[2], dataset_json(&p->datasets[i]));
  for (size_t i = 0; !bad && i < p->n_rules; i++)
    bad = json_array_append_new(lists[3], rule_json(&p->rules[i]));
  static const char *const keys[4] = {"regions", "sites", "datasets", "rules"};
  for (int i = 0; i < 4; i++) {
    if (!bad) bad = put(root, keys[i], json_incref(lists[i]));
    json_decref(lists[i]);
  }
  if (bad) {
    json_decref(root);
    return NULL;
  }
  return root;
}

/* jansson allocates with malloc; callers of this module free with xf_free. */
static xf_err dump(json_t *v, size_t flags, char **out, xf_errctx *err) {
  char *text = v ? json_dumps(v, flags | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17)) : NULL;
  *out = text ? xf_strdup(text) : NULL;
  free(text);
  if (!*out) return xf_fail(err, XF_ENOMEM, "cannot write the policy document");
  return XF_OK;
}

xf_err xf_policy_format(const xf_policy *p, char **json, xf_errctx *err) {
  json_t *root = model_json(p);
  xf_err rc = dump(root, JSON_INDENT(2), json, err);
  json_decref(root);
  return rc;
}

/* ---- storage --------------------------------------------------------------------------------
 * Each version is stored whole, as its canonical document: versions are
 * small, read far more often than written, and a version read back is exactly
 * what was checked when it was written (docs/policy.md, "Storage"). */
const char xf_policy_schema_sql[] =
    "CREATE TABLE policy_version (\n"
    "  version INTEGER PRIMARY KEY,\n"
    "  at REAL NOT NULL,\n"
    "  author TEXT NOT NULL,\n"
    "  reason TEXT NOT NULL,\n"
    "  document TEXT NOT NULL\n"
    ");\n"
    "CREATE TRIGGER policy_version_no_update BEFORE UPDATE ON policy_version\n"
    "BEGIN SELECT RAISE(ABORT, 'policy versions are immutable'); END;\n"
    "CREATE TRIGGER policy_version_no_delete BEFORE DELETE ON policy_version\n"
    "BEGIN SELECT RAISE(ABORT, 'policy versions are immutable'); END;\n";


/* 2: a local draft's origin: which of its versions is which version of the
 * coordinator's policy (the last pull or push), so that a push names the
 * version it was drafted on. One row at most. */
static const char policy_origin_sql[] =
    "CREATE TABLE policy_origin (\n"
    "  id INTEGER PRIMARY KEY CHECK (id = 1),\n"
    "  local_version INTEGER NOT NULL,\n"
    "  coordinator_version INTEGER NOT NULL\n"
    ");\n";

/* The standalone policy database's migration list: append only. */
static const xf_migration policy_migrations[] = {{1, xf_policy_schema_sql},
                                                 {2, policy_origin_sql}};

xf_err xf_policy_origin_set(xf_db *db, uint64_t local_version, uint64_t coordinator_version,
                            xf_errctx *err) {
  if (local_version > INT64_MAX || coordinator_version > INT64_MAX)
    return refuse(err, XF_ERANGE, "version", "a version number above 2^63 cannot be stored");
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf_db_prepare(db,
                         "INSERT OR REPLACE INTO policy_origin (id, local_version, "
                         "coordinator_version) VALUES (1, ?, ?)",
                         &st, err));
  sqlite3_bind_int64(st, 1, (sqlite3_int64)local_version);
  sqlite3_bind_int64(st, 2, (sqlite3_int64)coordinator_version);
  int s = sqlite3_step(st);
  sqlite3_finalize(st);
  if (s != SQLITE_DONE) return xf_db_fail(db, err, "recording where the draft came from");
  return XF_OK;
}

xf_err xf_policy_origin_get(xf_db *db, uint64_t *local_version, uint64_t *coordinator_version,
                            bool *found, xf_errctx *err) {
  *found = false;
  *local_version = *coordinator_version = 0;
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf_db_prepare(
      db, "SELECT local_version, coordinator_version FROM policy_origin WHERE id = 1", &st, err));
  int s = sqlite3_step(st);
  if (s == SQLITE_ROW) {
    *found = true;
    *local_version = (uint64_t)sqlite3_column_int64(st, 0);
    *coordinator_version = (uint64_t)sqlite3_column_int64(st, 1);
  }
  sqlite3_finalize(st);
  if (s != SQLITE_ROW && s != SQLITE_DONE)
    return xf_db_fail(db, err, "reading where the draft came from");
  return XF_OK;
}

xf_err xf_policy_open(const char *path, xf_db **out, xf_errctx *err) {
  return xf_db_open(path, policy_migrations,
                    sizeof(policy_migrations) / sizeof(policy_migrations[0]), out, err);
}

xf_err xf_policy_version_current(xf_db *db, uint64_t *version, xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  *version = 0;
  XF_GUARD(xf_db_prepare(db, "SELECT coalesce(max(version), 0) FROM policy_version", &st, err));
  xf_err rc = XF_OK;
  if (sqlite3_step(st) == SQLITE_ROW)
    *version = (uint64_t)sqlite3_column_int64(st, 0);
  else
    rc = xf_db_fail(db, err, "reading the current policy version");
  sqlite3_finalize(st);
  return rc;
}

xf_err xf_policy_load(xf_db *db, uint64_t version, xf_policy **out, xf_errctx *err) {
  *out = NULL;
  if (version == 0) {
    xf_policy *p = xf_calloc(1, sizeof(*p));
    if (!p) return xf_fail(err, XF_ENOMEM, "cannot hold the policy");
    *out = p;
    return XF_OK;
  }
  if (version > INT64_MAX)
    return refuse(err, XF_ENOENT, "version", "there is no policy version %llu",
                  (unsigned long long)version);
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf_db_prepare(db, "SELECT document FROM policy_version WHERE version = ?", &st, err));
  sqlite3_bind_int64(st, 1, (sqlite3_int64)version);
  xf_err rc;
  int s = sqlite3_step(st);
  if (s == SQLITE_ROW) {
    rc = xf_policy_parse((const char *)sqlite3_column_text(st, 0), out, err);
    if (rc != XF_OK && rc != XF_ENOMEM) {
      char why[sizeof(err->msg)];
      snprintf(why, sizeof(why), "%s", err ? err->msg : "");
      xf_errctx_file(err, xf_db_path(db));
      rc = xf_fail(err, XF_EINTEGRITY, "stored policy version %llu does not parse: %s",
                   (unsigned long long)version, why);
    } else if (rc == XF_OK)
      (*out)->version = version;
  } else if (s == SQLITE_DONE) {
    char f[48];
    snprintf(f, sizeof(f), "version %llu", (unsigned long long)version);
    rc = refuse(err, XF_ENOENT, f, "there is no policy version %llu", (unsigned long long)version);
  } else
    rc = xf_db_fail(db, err, "reading a policy version");
  sqlite3_finalize(st);
  return rc;
}

xf_err xf_policy_export(xf_db *db, uint64_t version, char **json, xf_errctx *err) {
  xf_policy *p;
  *json = NULL;
  XF_GUARD(xf_policy_load(db, version, &p, err));
  xf_err rc = xf_policy_format(p, json, err);
  xf_policy_free(p);
  return rc;
}

/* ---- changes ---------------------------------------------------------------------------------- */

/* Applies one change to the model (which it may replace). */
typedef xf_err (*change_fn)(xf_policy **p, const void *arg, xf_errctx *err);

static xf_err check_change(const xf_policy_change *chg, xf_errctx *err) {
  if (!chg) return refuse(err, XF_EINVAL, "change", "a policy change needs an author and a reason");
  if (!chg->author || !*chg->author)
    return refuse(err, XF_EINVAL, "author", "a policy change needs an author");
  if (!chg->reason || !*chg->reason)
    return refuse(err, XF_EINVAL, "reason", "a policy change needs a reason");
  if (!isfinite(chg->now))
    return refuse(err, XF_EINVAL, "now", "the time of a policy change must be finite");
  return XF_OK;
}

/* The one path of every change: inside one IMMEDIATE transaction, read the
 * current version, apply fn, check the whole model, write it as the next
 * version. The write lock is taken first, so two writers never both build on
 * the same version. */
static xf_err import_body(xf_policy **p, const void *arg, xf_errctx *err);

/* *out = a copy of n items of size bytes at src (NULL for none); false
 * when out of memory. */
static bool dup_items(const void *src, size_t n, size_t size, void **out) {
  *out = NULL;
  if (n == 0) return true;
  *out = xf_mallocarray(n, size);
  if (*out) memcpy(*out, src, n * size);
  return *out != NULL;
}

/* A deep copy of p, or NULL when out of memory. */
static xf_policy *copy_model(const xf_policy *p) {
  xf_policy *c = xf_calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->version = p->version;
  c->n_regions = p->n_regions;
  c->n_sites = p->n_sites;
  c->n_rules = p->n_rules;
  bool ok = dup_items(p->regions, p->n_regions, sizeof(*p->regions), (void **)&c->regions) &&
            dup_items(p->sites, p->n_sites, sizeof(*p->sites), (void **)&c->sites) &&
            dup_items(p->rules, p->n_rules, sizeof(*p->rules), (void **)&c->rules) &&
            dup_items(p->datasets, p->n_datasets, sizeof(*p->datasets), (void **)&c->datasets);
  /* n_datasets counts the datasets whose tags are the copy's own, for
   * xf_policy_free. */
  for (size_t i = 0; ok && i < p->n_datasets; i++) {
    const xf_policy_dataset *d = &p->datasets[i];
    ok = dup_items(d->tags, d->n_tags, sizeof(*d->tags), (void **)&c->datasets[i].tags);
    c->n_datasets = i + 1;
  }
  if (!ok) {
    xf_policy_free(c);
    return NULL;
  }
  return c;
}

/* The model a change starts from: none for an import (the document
 * replaces everything), a copy of the caller's when it is of the current
 * version, else the current version read back. */
static xf_err start_model(xf_db *db, uint64_t cur, const xf_policy *known, change_fn fn,
                          xf_policy **p, xf_errctx *err) {
  if (fn == import_body || (known && known->version == cur)) {
    *p = fn == import_body ? xf_calloc(1, sizeof(**p)) : copy_model(known);
    return *p ? XF_OK : xf_fail(err, XF_ENOMEM, "cannot hold the policy");
  }
  return xf_policy_load(db, cur, p, err);
}

static xf_err commit_change_keep(xf_db *db, change_fn fn, const void *arg,
                                 const xf_policy_change *chg, const xf_policy *known,
                                 uint64_t *version, xf_policy **keep, xf_errctx *err) {
  if (keep) *keep = NULL;
  XF_GUARD(check_change(chg, err));
  xf_policy *p = NULL;
  char *doc = NULL;
  sqlite3_stmt *st = NULL;
  uint64_t cur;
  xf_err rc = xf_db_begin(db, err);
  if (rc != XF_OK) return rc;
  if ((rc = xf_policy_version_current(db, &cur, err)) != XF_OK) goto out;
  if ((rc = start_model(db, cur, known, fn, &p, err)) != XF_OK) goto out;
  if ((rc = fn(&p, arg, err)) != XF_OK) goto out;
  sort_model(p);
  if ((rc = check_model(p, err)) != XF_OK) goto out;
  if ((rc = xf_policy_format(p, &doc, err)) != XF_OK) goto out;
  rc = xf_db_prepare(db,
                     "INSERT INTO policy_version (version, at, author, reason, document) "
                     "VALUES (?, ?, ?, ?, ?)",
                     &st, err);
  if (rc != XF_OK) goto out;
  if (sqlite3_bind_int64(st, 1, (sqlite3_int64)(cur + 1)) != SQLITE_OK ||
      sqlite3_bind_double(st, 2, chg->now) != SQLITE_OK ||
      sqlite3_bind_text(st, 3, chg->author, -1, SQLITE_STATIC) != SQLITE_OK ||
      sqlite3_bind_text(st, 4, chg->reason, -1, SQLITE_STATIC) != SQLITE_OK ||
      sqlite3_bind_text(st, 5, doc, -1, SQLITE_STATIC) != SQLITE_OK ||
      sqlite3_step(st) != SQLITE_DONE) {
    rc = xf_db_fail(db, err, "writing a policy version");
    goto out;
  }
  sqlite3_finalize(st);
  st = NULL;
  if ((rc = xf_db_commit(db, err)) != XF_OK) goto out;
  if (version) *version = cur + 1;
  if (keep) {
    p->version = cur + 1;
    *keep = p;
    p = NULL;
  }
out:
  sqlite3_finalize(st);
  if (rc != XF_OK) xf_db_rollback(db);
  xf_free(doc);
  xf_policy_free(p);
  return rc;
}

static xf_err commit_change(xf_db *db, change_fn fn, const void *arg, const xf_policy_change *chg,
                            uint64_t *version, xf_errctx *err) {
  return commit_change_keep(db, fn, arg, chg, NULL, version, NULL, err);
}

static xf_err import_body(xf_policy **p, const void *arg, xf_errctx *err) {
  xf_policy *fresh;
  XF_GUARD(xf_policy_parse(arg, &fresh, err));
  xf_policy_free(*p);
  *p = fresh;
  return XF_OK;
}

xf_err xf_policy_import(xf_db *db, const char *json_text, const char *author, const char *reason,
                        double now, uint64_t *version, xf_errctx *err) {
  const xf_policy_change chg = {author, reason, now};
  XF_GUARD(check_change(&chg, err));
  return commit_change(db, import_body, json_text, &chg, version, err);
}

typedef struct edit_args {
  const char *a, *b, *c;
} edit_args;

static xf_err check_name(const char *s, const char *field, const char *what, xf_errctx *err) {
  if (name_valid(s)) return XF_OK;
  return refuse(err, XF_EINVAL, field,
                "'%.80s' is not a valid %s: use 1 to 63 lowercase letters, digits, '-' and '_'",
                s ? s : "", what);
}

static xf_err region_add_body(xf_policy **pp, const void *arg, xf_errctx *err) {
  const edit_args *e = arg;
  xf_policy *p = *pp;
  XF_GUARD(check_name(e->a, "region", "region name", err));
  if (find_region(p, e->a)) return refuse(err, XF_EEXISTS, "region", "region '%s' exists", e->a);
  const char *label = e->b ? e->b : "";
  if (strlen(label) >= XF_POLICY_LABEL_MAX)
    return refuse(err, XF_EINVAL, "jurisdiction", "the jurisdiction label is longer than %d bytes",
                  XF_POLICY_LABEL_MAX - 1);
  xf_policy_region *r = push((void **)&p->regions, &p->n_regions, sizeof(*r));
  if (!r) return xf_fail(err, XF_ENOMEM, "cannot hold the policy");
  snprintf(r->name, sizeof(r->name), "%s", e->a);
  snprintf(r->jurisdiction, sizeof(r->jurisdiction), "%s", label);
  return XF_OK;
}

xf_err xf_policy_region_add(xf_db *db, const char *name, const char *jurisdiction,
                            const xf_policy_change *chg, uint64_t *version, xf_errctx *err) {
  const edit_args e = {name, jurisdiction, NULL};
  return commit_change(db, region_add_body, &e, chg, version, err);
}

static xf_err site_add_body(xf_policy **pp, const void *arg, xf_errctx *err) {
  const edit_args *e = arg;
  xf_policy *p = *pp;
  XF_GUARD(check_name(e->a, "site", "site name", err));
  if (find_site(p, e->a)) return refuse(err, XF_EEXISTS, "site", "site '%s' exists", e->a);
  if (!e->b || !find_region(p, e->b))
    return refuse(err, XF_EINVAL, "region", "site '%s' is in unknown region '%.64s'", e->a,
                  e->b ? e->b : "");
  xf_policy_site *s = push((void **)&p->sites, &p->n_sites, sizeof(*s));
  if (!s) return xf_fail(err, XF_ENOMEM, "cannot hold the policy");
  snprintf(s->name, sizeof(s->name), "%s", e->a);
  snprintf(s->region, sizeof(s->region), "%s", e->b);
  return XF_OK;
}

xf_err xf_policy_site_add(xf_db *db, const char *name, const char *region,
                          const xf_policy_change *chg, uint64_t *version, xf_errctx *err) {
  const edit_args e = {name, region, NULL};
  return commit_change(db, site_add_body, &e, chg, version, err);
}

static xf_err class_parse(const char *s, xf_policy_class *out, xf_errctx *err) {
  for (int i = XF_POLICY_CLASS_PUBLIC; i <= XF_POLICY_CLASS_RESTRICTED; i++)
    if (s && strcmp(s, class_names[i]) == 0) {
      *out = (xf_policy_class)i;
      return XF_OK;
    }
  return refuse(err, XF_EINVAL, "classification",
                "unknown classification '%.64s': use one of public, internal, confidential, "
                "restricted",
                s ? s : "");
}

static xf_err dataset_add_body(xf_policy **pp, const void *arg, xf_errctx *err) {
  const edit_args *e = arg;
  xf_policy *p = *pp;
  xf_policy_class c = XF_POLICY_CLASS_NONE;
  XF_GUARD(check_name(e->a, "dataset", "dataset name", err));
  if (!e->b || !find_site(p, e->b))
    return refuse(err, XF_EINVAL, "site", "dataset '%s' is at unknown site '%.64s'", e->a,
                  e->b ? e->b : "");
  if (find_dataset(p, e->a, e->b))
    return refuse(err, XF_EEXISTS, "dataset", "dataset '%s' exists at site '%s'", e->a, e->b);
  XF_GUARD(class_parse(e->c, &c, err));
  xf_policy_dataset *d = push((void **)&p->datasets, &p->n_datasets, sizeof(*d));
  if (!d) return xf_fail(err, XF_ENOMEM, "cannot hold the policy");
  snprintf(d->name, sizeof(d->name), "%s", e->a);
  snprintf(d->site, sizeof(d->site), "%s", e->b);
  d->classification = c;
  return XF_OK;
}

xf_err xf_policy_dataset_add(xf_db *db, const char *name, const char *site,
                             const char *classification, const xf_policy_change *chg,
                             uint64_t *version, xf_errctx *err) {
  const edit_args e = {name, site, classification};
  return commit_change(db, dataset_add_body, &e, chg, version, err);
}

static xf_err dataset_get(xf_policy *p, const edit_args *e, xf_policy_dataset **d,
                          xf_errctx *err) {
  *d = (e->a && e->b) ? find_dataset(p, e->a, e->b) : NULL;
  if (!*d)
    return refuse(err, XF_ENOENT, "dataset", "there is no dataset '%.64s' at site '%.64s'",
                  e->a ? e->a : "", e->b ? e->b : "");
  return XF_OK;
}

static xf_err dataset_tag_body(xf_policy **pp, const void *arg, xf_errctx *err) {
  const edit_args *e = arg;
  xf_policy_dataset *d;
  XF_GUARD(dataset_get(*pp, e, &d, err));
  XF_GUARD(check_name(e->c, "tag", "tag", err));
  for (size_t i = 0; i < d->n_tags; i++)
    if (strcmp(d->tags[i], e->c) == 0)
      return refuse(err, XF_EEXISTS, "tag", "dataset '%s' already has tag '%s'", d->name, e->c);
  if (d->n_tags >= XF_POLICY_TAGS_MAX)
    return refuse(err, XF_ERANGE, "tag", "a dataset has at most %d tags", XF_POLICY_TAGS_MAX);
  char(*grown)[XF_POLICY_NAME_MAX] = xf_realloc(d->tags, (d->n_tags + 1) * sizeof(*d->tags));
  if (!grown) return xf_fail(err, XF_ENOMEM, "cannot hold the policy");
  d->tags = grown;
  snprintf(d->tags[d->n_tags++], XF_POLICY_NAME_MAX, "%s", e->c);
  return XF_OK;
}

xf_err xf_policy_dataset_tag(xf_db *db, const char *name, const char *site, const char *tag,
                             const xf_policy_change *chg, uint64_t *version, xf_errctx *err) {
  const edit_args e = {name, site, tag};
  return commit_change(db, dataset_tag_body, &e, chg, version, err);
}

static xf_err dataset_classify_body(xf_policy **pp, const void *arg, xf_errctx *err) {
  const edit_args *e = arg;
  xf_policy_dataset *d;
  XF_GUARD(dataset_get(*pp, e, &d, err));
  return class_parse(e->c, &d->classification, err);
}

xf_err xf_policy_dataset_classify(xf_db *db, const char *name, const char *site,
                                  const char *classification, const xf_policy_change *chg,
                                  uint64_t *version, xf_errctx *err) {
  const edit_args e = {name, site, classification};
  return commit_change(db, dataset_classify_body, &e, chg, version, err);
}

/* The datasets of a JSON array, each checked as a document member and
 * against the model as it was before the change (sorted: the lookup is a
 * binary search, so adopting thousands into a large policy stays n log n);
 * two of them naming the same dataset are refused by the model's check. */
static xf_err datasets_add_body(xf_policy **pp, const void *arg, xf_errctx *err) {
  xf_policy *p = *pp;
  json_t *arr;
  XF_GUARD(load_json(arg, JSON_DECODE_ANY, &arr, err));
  xf_err rc = XF_OK;
  if (!json_is_array(arr) || json_array_size(arr) == 0)
    rc = refuse(err, XF_EINVAL, "datasets", "the change names no dataset: give a JSON array of "
                "one or more datasets");
  xf_policy before = *p; /* the sorted datasets the change starts from */
  size_t i;
  json_t *v;
  json_array_foreach(arr, i, v) {
    if (rc != XF_OK) break;
    char path[40];
    snprintf(path, sizeof(path), "datasets[%zu]", i);
    xf_policy_dataset *d = push((void **)&p->datasets, &p->n_datasets, sizeof(*d));
    if (!d) {
      rc = xf_fail(err, XF_ENOMEM, "cannot hold the policy");
      break;
    }
    before.datasets = p->datasets; /* push may have moved them; the first n stay sorted */
    if ((rc = parse_dataset(v, path, d, err)) != XF_OK) break;
    if (!find_site(p, d->site))
      rc = refuse(err, XF_EINVAL, path, "dataset '%s' is at site '%s', which is not in the "
                  "policy: add the site first", d->name, d->site);
    else if (xf_policy_dataset_find(&before, d->name, d->site))
      rc = refuse(err, XF_EEXISTS, path, "dataset '%s' exists at site '%s'", d->name, d->site);
  }
  json_decref(arr);
  return rc;
}

xf_err xf_policy_datasets_add(xf_db *db, const char *datasets_json, const xf_policy_change *chg,
                              uint64_t *version, xf_errctx *err) {
  return commit_change(db, datasets_add_body, datasets_json, chg, version, err);
}

static xf_err rule_add_body(xf_policy **pp, const void *arg, xf_errctx *err) {
  xf_policy *p = *pp;
  xf_policy_rule rule;
  json_t *v;
  memset(&rule, 0, sizeof(rule));
  XF_GUARD(load_json(arg, JSON_DECODE_ANY, &v, err));
  xf_err rc = parse_rule(v, "rule", &rule, err);
  json_decref(v);
  XF_GUARD(rc);
  if (find_rule(p, rule.id) < p->n_rules)
    return refuse(err, XF_EEXISTS, "rule.id", "rule id '%s' is in use", rule.id);
  xf_policy_rule *r = push((void **)&p->rules, &p->n_rules, sizeof(*r));
  if (!r) return xf_fail(err, XF_ENOMEM, "cannot hold the policy");
  *r = rule;
  return XF_OK;
}

xf_err xf_policy_rule_add(xf_db *db, const char *rule_json, const xf_policy_change *chg,
                          uint64_t *version, xf_errctx *err) {
  return commit_change(db, rule_add_body, rule_json, chg, version, err);
}

static xf_err rule_rm_body(xf_policy **pp, const void *arg, xf_errctx *err) {
  xf_policy *p = *pp;
  const char *id = arg;
  size_t i = id ? find_rule(p, id) : p->n_rules;
  if (i == p->n_rules)
    return refuse(err, XF_ENOENT, "rule", "there is no rule '%.64s'", id ? id : "");
  memmove(&p->rules[i], &p->rules[i + 1], (p->n_rules - i - 1) * sizeof(p->rules[0]));
  p->n_rules--;
  return XF_OK;
}

xf_err xf_policy_rule_rm(xf_db *db, const char *rule_id, const xf_policy_change *chg,
                         uint64_t *version, xf_errctx *err) {
  return commit_change(db, rule_rm_body, rule_id, chg, version, err);
}

/* ---- one edit, on a database or on a document ----------------------------------------- */

/* By kind, in the enum's order. */
static const char *const edit_names[] = {"import",      "region_add",       "site_add",
                                         "dataset_add", "dataset_tag",      "dataset_classify",
                                         "rule_add",    "rule_rm",          "datasets_add"};
#define N_EDIT_NAMES (sizeof(edit_names) / sizeof(edit_names[0]))

const char *xf_policy_edit_name(xf_policy_edit_kind k) {
  return (size_t)k < N_EDIT_NAMES ? edit_names[k] : "?";
}

xf_err xf_policy_edit_kind_parse(const char *name, xf_policy_edit_kind *out, xf_errctx *err) {
  for (size_t i = 0; name && i < N_EDIT_NAMES; i++)
    if (strcmp(name, edit_names[i]) == 0) {
      *out = (xf_policy_edit_kind)i;
      return XF_OK;
    }
  return refuse(err, XF_EINVAL, "edit",
                "'%.64s' is not a policy edit: use import, region_add, site_add, dataset_add, "
                "dataset_tag, dataset_classify, rule_add, rule_rm or datasets_add",
                name ? name : "");
}

/* The body of an edit and the argument it takes. */
static xf_err edit_body(const xf_policy_edit *e, change_fn *fn, const void **arg,
                        edit_args *args, xf_errctx *err) {
  *args = (edit_args){e->a, e->b, e->c};
  *arg = args;
  switch (e->kind) {
  case XF_POLICY_EDIT_IMPORT: *fn = import_body; *arg = e->a; break;
  case XF_POLICY_EDIT_REGION_ADD: *fn = region_add_body; break;
  case XF_POLICY_EDIT_SITE_ADD: *fn = site_add_body; break;
  case XF_POLICY_EDIT_DATASET_ADD: *fn = dataset_add_body; break;
  case XF_POLICY_EDIT_DATASET_TAG: *fn = dataset_tag_body; break;
  case XF_POLICY_EDIT_DATASET_CLASSIFY: *fn = dataset_classify_body; break;
  case XF_POLICY_EDIT_RULE_ADD: *fn = rule_add_body; *arg = e->a; break;
  case XF_POLICY_EDIT_RULE_RM: *fn = rule_rm_body; *arg = e->a; break;
  case XF_POLICY_EDIT_DATASETS_ADD: *fn = datasets_add_body; *arg = e->a; break;
  default: return refuse(err, XF_EINVAL, "edit", "unknown kind of policy edit %d", (int)e->kind);
  }
  if ((e->kind == XF_POLICY_EDIT_IMPORT || e->kind == XF_POLICY_EDIT_RULE_ADD ||
       e->kind == XF_POLICY_EDIT_DATASETS_ADD) &&
      !e->a)
    return refuse(err, XF_EINVAL, "edit", "the edit carries no JSON text");
  return XF_OK;
}

xf_err xf_policy_commit(xf_db *db, const xf_policy_edit *e, const xf_policy_change *chg,
                        uint64_t *version, xf_errctx *err) {
  change_fn fn = NULL;
  const void *arg = NULL;
  edit_args args;
  XF_GUARD(edit_body(e, &fn, &arg, &args, err));
  return commit_change(db, fn, arg, chg, version, err);
}

xf_err xf_policy_commit_keep(xf_db *db, const xf_policy *current, const xf_policy_edit *e,
                             const xf_policy_change *chg, uint64_t *version, xf_policy **model,
                             xf_errctx *err) {
  change_fn fn = NULL;
  const void *arg = NULL;
  edit_args args;
  *model = NULL;
  XF_GUARD(edit_body(e, &fn, &arg, &args, err));
  return commit_change_keep(db, fn, arg, chg, current, version, model, err);
}

xf_err xf_policy_edit_document(const char *json_text, const xf_policy_edit *e, char **out,
                               xf_errctx *err) {
  *out = NULL;
  change_fn fn = NULL;
  const void *arg = NULL;
  edit_args args;
  XF_GUARD(edit_body(e, &fn, &arg, &args, err));
  xf_policy *p = NULL;
  XF_GUARD(xf_policy_parse(json_text, &p, err));
  xf_err rc = fn(&p, arg, err);
  if (rc == XF_OK) {
    sort_model(p);
    rc = check_model(p, err);
  }
  if (rc == XF_OK) rc = xf_policy_format(p, out, err);
  xf_policy_free(p);
  return rc;
}

/* ---- the log -------------------------------------------------------------------------------------- */

void xf_policy_log_free(xf_policy_version_info *log, size_t n) {
  for (size_t i = 0; log && i < n; i++) {
    xf_free(log[i].author);
    xf_free(log[i].reason);
  }
  xf_free(log);
}

xf_err xf_policy_log(xf_db *db, xf_policy_version_info **out, size_t *n, xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  xf_policy_version_info *log = NULL;
  size_t count = 0;
  *out = NULL;
  *n = 0;
  XF_GUARD(xf_db_prepare(db, "SELECT version, at, author, reason FROM policy_version "
                             "ORDER BY version", &st, err));
  xf_err rc = XF_OK;
  int s;
  while ((s = sqlite3_step(st)) == SQLITE_ROW) {
    xf_policy_version_info *e = push((void **)&log, &count, sizeof(*e));
    if (!e) {
      rc = xf_fail(err, XF_ENOMEM, "cannot hold the policy log");
      break;
    }
    e->version = (uint64_t)sqlite3_column_int64(st, 0);
    e->at = sqlite3_column_double(st, 1);
    const char *a = (const char *)sqlite3_column_text(st, 2);
    const char *r = (const char *)sqlite3_column_text(st, 3);
    e->author = xf_strdup(a ? a : "");
    e->reason = xf_strdup(r ? r : "");
    if (!e->author || !e->reason) {
      rc = xf_fail(err, XF_ENOMEM, "cannot hold the policy log");
      break;
    }
  }
  if (rc == XF_OK && s != SQLITE_DONE) rc = xf_db_fail(db, err, "reading the policy log");
  sqlite3_finalize(st);
  if (rc != XF_OK) {
    xf_policy_log_free(log, count);
    return rc;
  }
  *out = log;
  *n = count;
  return XF_OK;
}

/* ---- the diff ----------------------------------------------------------------------------------------- */

typedef struct text_buf {
  char *s;
  size_t len, cap;
  bool failed;
} text_buf;

static void text_add(text_buf *t, const char *fmt, ...) XF_PRINTF(2, 3);
static void text_add(text_buf *t, const char *fmt, ...) {
  if (t->failed) return;
  va_list ap;
  va_start(ap, fmt);
  int need = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (need < 0 || t->len + (size_t)need + 1 > t->cap) {
    size_t cap = (t->len + (size_t)(need < 0 ? 0 : need) + 1) * 2;
    char *grown = need < 0 ? NULL : xf_realloc(t->s, cap);
    if (!grown) {
      t->failed = true;
      return;
    }
    t->s = grown;
    t->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
  va_end(ap);
  t->len += (size_t)need;
}

/* One kind of thing in both versions, by key. The items are compared field
 * by field and written as JSON only for the lines of the diff: a change to
 * a policy of 60,000 sites formats the few things it touched, not all. */
typedef struct keyed {
  char key[2 * XF_POLICY_NAME_MAX + 2];
  const void *item; /* borrowed from the model */
} keyed;

static int by_key(const void *a, const void *b) { return strcmp(a, b); }

/* what: 0 regions, 1 sites, 2 datasets, 3 rules. */
static xf_err keyed_list(const xf_policy *p, int what, keyed **out, size_t *n, xf_errctx *err) {
  size_t count = what == 0 ? p->n_regions : what == 1 ? p->n_sites
                 : what == 2 ? p->n_datasets : p->n_rules;
  keyed *k = count ? xf_calloc(count, sizeof(*k)) : NULL;
  *out = NULL;
  *n = 0;
  if (count && !k) return xf_fail(err, XF_ENOMEM, "cannot compare policy versions");
  for (size_t i = 0; i < count; i++) {
    if (what == 0) {
      snprintf(k[i].key, sizeof(k[i].key), "%s", p->regions[i].name);
      k[i].item = &p->regions[i];
    } else if (what == 1) {
      snprintf(k[i].key, sizeof(k[i].key), "%s", p->sites[i].name);
      k[i].item = &p->sites[i];
    } else if (what == 2) {
      snprintf(k[i].key, sizeof(k[i].key), "%s@%s", p->datasets[i].name, p->datasets[i].site);
      k[i].item = &p->datasets[i];
    } else {
      snprintf(k[i].key, sizeof(k[i].key), "%s", p->rules[i].id);
      k[i].item = &p->rules[i];
    }
  }
  if (count) qsort(k, count, sizeof(*k), by_key);
  *out = k;
  *n = count;
  return XF_OK;
}

/* The item as one line of compact JSON (free with free: jansson's), or
 * NULL when out of memory. */
static char *item_text(int what, const void *item) {
  json_t *v = what == 0   ? region_json(item)
              : what == 1 ? site_json(item)
              : what == 2 ? dataset_json(item)
                          : rule_json(item);
  char *text =
      v ? json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17)) : NULL;
  json_decref(v);
  return text;
}

/* Whether two items of the same key are the same. Regions, sites and
 * datasets are compared field by field (tags are sorted in both); a rule,
 * with its many optional conditions, by its JSON text. -1 when out of
 * memory. */
static int same_item(int what, const void *a, const void *b) {
  if (what == 0) {
    const xf_policy_region *x = a, *y = b;
    return strcmp(x->jurisdiction, y->jurisdiction) == 0;
  }
  if (what == 1) {
    const xf_policy_site *x = a, *y = b;
    return strcmp(x->region, y->region) == 0;
  }
  if (what == 2) {
    const xf_policy_dataset *x = a, *y = b;
    if (x->classification != y->classification || x->n_tags != y->n_tags) return 0;
    for (size_t i = 0; i < x->n_tags; i++)
      if (strcmp(x->tags[i], y->tags[i]) != 0) return 0;
    return 1;
  }
  char *x = item_text(what, a), *y = item_text(what, b);
  int same = x && y ? strcmp(x, y) == 0 : -1;
  free(x);
  free(y);
  return same;
}

static void diff_kind(text_buf *t, int what, const char *noun, const keyed *a, size_t na,
                      const keyed *b, size_t nb) {
  size_t i = 0, j = 0;
  while (!t->failed && (i < na || j < nb)) {
    int c = i == na ? 1 : j == nb ? -1 : strcmp(a[i].key, b[j].key);
    if (c < 0) {
      text_add(t, "- %s %s\n", noun, a[i++].key);
      continue;
    }
    if (c > 0) {
      char *text = item_text(what, b[j].item);
      if (text) text_add(t, "+ %s %s: %s\n", noun, b[j].key, text);
      else t->failed = true;
      free(text);
      j++;
      continue;
    }
    int same = same_item(what, a[i].item, b[j].item);
    if (same == 0) {
      char *from = item_text(what, a[i].item), *to = item_text(what, b[j].item);
      if (from && to) text_add(t, "~ %s %s: %s -> %s\n", noun, a[i].key, from, to);
      else t->failed = true;
      free(from);
      free(to);
    } else if (same < 0) {
      t->failed = true;
    }
    i++;
    j++;
  }
}

xf_err xf_policy_diff(xf_db *db, uint64_t from, uint64_t to, char **text, xf_errctx *err) {
  xf_policy *a = NULL, *b = NULL;
  *text = NULL;
  xf_err rc = xf_policy_load(db, from, &a, err);
  if (rc == XF_OK) rc = xf_policy_load(db, to, &b, err);
  if (rc == XF_OK) rc = xf_policy_diff_models(a, b, text, err);
  xf_policy_free(a);
  xf_policy_free(b);
  return rc;
}

xf_err xf_policy_diff_models(const xf_policy *a, const xf_policy *b, char **text,
                             xf_errctx *err) {
  static const char *const nouns[4] = {"region", "site", "dataset", "rule"};
  text_buf t = {0};
  *text = NULL;
  xf_err rc = XF_OK;
  for (int w = 0; rc == XF_OK && w < 4; w++) {
    keyed *ka = NULL, *kb = NULL;
    size_t na = 0, nb = 0;
    rc = keyed_list(a, w, &ka, &na, err);
    if (rc == XF_OK) rc = keyed_list(b, w, &kb, &nb, err);
    if (rc == XF_OK) diff_kind(&t, w, nouns[w], ka, na, kb, nb);
    xf_free(ka);
    xf_free(kb);
  }
  if (rc == XF_OK && !t.s) {
    t.s = xf_strdup("");
    t.failed = !t.s;
  }
  if (rc == XF_OK && t.failed) rc = xf_fail(err, XF_ENOMEM, "cannot compare policy versions");
  if (rc != XF_OK) {
    xf_free(t.s);
    return rc;
  }
  *text = t.s;
  return XF_OK;
}
