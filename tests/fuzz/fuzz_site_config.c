/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: a site's site.json is edited by hand, so every malformed
 * config must be refused cleanly; an accepted one must format and parse back
 * to the same text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "site/registry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  xf_site_config cfg, back;
  if (xf_site_config_parse((const char *)data, size, "fuzz", &cfg, NULL) != XF_OK) return 0;
  char *a = NULL, *b = NULL;
  if (xf_site_config_format(&cfg, &a, NULL) == XF_OK &&
      xf_site_config_parse(a, strlen(a), "fuzz", &back, NULL) == XF_OK &&
      xf_site_config_format(&back, &b, NULL) == XF_OK && strcmp(a, b) != 0)
    abort(); /* formatting must be a fixed point of parsing */
  xf_free(a);
  xf_free(b);
  return 0;
}
