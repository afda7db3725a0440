/* SPDX-License-Identifier: Apache-2.0 */
/* Datasets the sites registered that the policy does not hold yet: what
 * `xfed policy dataset pending` lists and what an adoption adds to the
 * policy in one version (docs/policy.md, "Datasets the sites register").
 * Pure functions over the journal's rows and a policy model: no database,
 * no sockets. */
#ifndef XF_COORDINATOR_PENDING_H
#define XF_COORDINATOR_PENDING_H

#include <stdbool.h>
#include <stddef.h>

#include "base/result.h"
#include "coordinator/journal.h"
#include "policy/policy.h"

/* The classification an adopted dataset gets unless the adoption names
 * one: the strictest the model has, so that no rule written for a looser
 * class reaches it until a compliance identity says so. */
#define XF_PENDING_DEFAULT_CLASS "restricted"

/* Which pending datasets an adoption takes. Strings are borrowed. */
typedef struct xf_pending_pick {
  const char *const *names; /* dataset names (every site holding one), or */
  size_t n_names;
  bool all;                 /* every pending dataset */
  const char *site;         /* only at this site; NULL or "": at any */
  const char *classification; /* NULL or "": XF_PENDING_DEFAULT_CLASS */
} xf_pending_pick;

/* The argument of the policy edit XF_POLICY_EDIT_DATASETS_ADD that adopts
 * the rows of pending[0..n) that pick selects into `policy` (borrowed; the
 * current version), as a JSON array of {name, site, classification, tags}
 * with the tags the site announced, in pending's order. The caller frees
 * *datasets_json with xf_free; *count gets how many it names.
 *
 * Refused, naming what is wrong and how to go on: no names and no `all`,
 * or both (XF_EUSAGE); a classification that is not one of the model's
 * (XF_EINVAL); a name that is not pending (at the site, when one is given)
 * (XF_ENOENT naming it, and saying when the policy holds it already);
 * nothing pending at all for `all` (XF_ENOENT); a selected dataset at a site
 * the policy does not hold (XF_EINVAL naming the site and its region, and
 * the command that adds it). On failure *datasets_json is NULL. */
xf_err xf_pending_adoption(const xf_journal_pending *pending, size_t n, const xf_policy *policy,
                           const xf_pending_pick *pick, char **datasets_json, size_t *count,
                           xf_errctx *err) XF_WARN_UNUSED;

/* The rows as the answer to a listing: a JSON array of {site, region, name,
 * classification, tags, train_records, test_records, classes, height,
 * width, channels, first_seen, last_seen, site_in_policy}, where
 * classification is what the site registered and site_in_policy says
 * whether `policy` holds the site (adopting needs it). The caller frees
 * *text with xf_free. XF_ENOMEM. */
xf_err xf_pending_json(const xf_journal_pending *pending, size_t n, const xf_policy *policy,
                       char **text, xf_errctx *err) XF_WARN_UNUSED;

#endif
