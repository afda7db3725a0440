/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the job spec parser: any input either fails with a code
 * and a message, or parses into a spec whose canonical JSON parses back to
 * the same canonical JSON. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "job/jobspec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  xf_jobspec spec;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_jobspec_parse_string((const char *)data, size, "fuzz", &spec, &err);
  if (rc != XF_OK) {
    /* Every failure carries a message for the user. */
    if (err.code != rc || err.msg[0] == '\0') abort();
    return 0;
  }
  char *json = NULL, *again = NULL;
  if (xf_jobspec_to_json(&spec, &json) != XF_OK) abort();
  xf_jobspec back;
  if (xf_jobspec_parse_string(json, strlen(json), "fuzz:canonical", &back, &err) != XF_OK) abort();
  if (xf_jobspec_to_json(&back, &again) != XF_OK) abort();
  if (strcmp(json, again) != 0) abort();
  xf_free(json);
  xf_free(again);
  return 0;
}
