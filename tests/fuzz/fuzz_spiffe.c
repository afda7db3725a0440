/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the SPIFFE ID parser: any input either fails with
 * XF_EFORMAT and a message, or parses into an identity whose formatted URI
 * is exactly the input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/pki.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* The parser takes a C string: fuzz with a NUL-terminated copy, cut at
   * the first NUL as a certificate's URI would be refused before that. */
  char uri[2 * XF_SPIFFE_MAX];
  size_t n = size < sizeof(uri) - 1 ? size : sizeof(uri) - 1;
  memcpy(uri, data, n);
  uri[n] = '\0';
  xf_spiffe_id id;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_spiffe_parse(uri, &id, &err);
  if (rc != XF_OK) {
    if (rc != XF_EFORMAT || err.code != rc || err.msg[0] == '\0') abort();
    return 0;
  }
  char back[XF_SPIFFE_MAX];
  if (xf_spiffe_format(&id, back, NULL) != XF_OK) abort();
  if (strcmp(back, uri) != 0) abort();
  if (id.kind == XF_PKI_KIND_NONE) abort();
  return 0;
}
