/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the policy document parser (policy/policy.h): any bytes
 * either parse into a policy whose canonical form parses again to the same
 * canonical form, or are refused with an error that names what is wrong; the
 * parser never reads outside the input. A parsed policy is also run through
 * the decision for a job on one of its datasets, which must not fail. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "policy/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* The parser takes a NUL-terminated text: copy so that ASan sees its end. */
  char *text = malloc(size + 1);
  if (!text) abort();
  memcpy(text, data, size);
  text[size] = '\0';
  xf_policy *p = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_policy_parse(text, &p, &err) != XF_OK) {
    if (!err.msg[0]) abort(); /* a refusal always says why */
    free(text);
    return 0;
  }
  char *once = NULL, *twice = NULL;
  xf_policy *q = NULL;
  if (xf_policy_format(p, &once, NULL) != XF_OK) abort();
  if (xf_policy_parse(once, &q, NULL) != XF_OK) abort();
  if (xf_policy_format(q, &twice, NULL) != XF_OK) abort();
  if (strcmp(once, twice) != 0) abort();
  if (p->n_datasets > 0) {
    xf_policy_job job = {0};
    job.dataset = p->datasets[0].name;
    job.min_sites = 1;
    job.coordinator_region = p->n_regions ? p->regions[0].name : "";
    xf_policy_decision d;
    if (xf_policy_decide(p, &job, 0, &d, NULL) == XF_OK) xf_policy_decision_free(&d);
  }
  xf_free(once);
  xf_free(twice);
  xf_policy_free(q);
  xf_policy_free(p);
  free(text);
  return 0;
}
