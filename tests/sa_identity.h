/* SPDX-License-Identifier: Apache-2.0 */
/* A stand-in for the federation PKI as secure aggregation's identity
 * (crypto/secagg_guard.h) in tests that play many sites without
 * certificates: a site's "certificate" is its name, and its "signature" of
 * a statement is BLAKE2b-512 keyed with a key derived from that name. Any
 * change to a statement, or a statement passed off as another site's, fails
 * to verify, which is all the job machine's and the phase machine's tests
 * need; what ECDSA and X.509 add is tested with real certificates in
 * test_secagg_guard and test_secagg_malicious. */
#ifndef XF_TESTS_SA_IDENTITY_H
#define XF_TESTS_SA_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#include "crypto/secagg_guard.h"

/* One site's identity; it must outlive every guard made with it. */
typedef struct xf_test_signer {
  char name[XF_SECAGG_NAME_MAX + 1];
} xf_test_signer;

/* The identity of the site `name` (copied into s). */
xf_secagg_identity xf_test_signer_identity(xf_test_signer *s, const char *name);

#endif
