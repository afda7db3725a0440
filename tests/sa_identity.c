/* SPDX-License-Identifier: Apache-2.0 */
/* A name-keyed stand-in for secure aggregation's identity in tests
 * (tests/sa_identity.h). */
#include "sa_identity.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char LABEL[] = "xf-test-signer v1";

/* The signing key of the site `name`. */
static void key_of(const char *name, uint8_t key[crypto_generichash_KEYBYTES]) {
  crypto_generichash_state h;
  crypto_generichash_init(&h, NULL, 0, crypto_generichash_KEYBYTES);
  crypto_generichash_update(&h, (const uint8_t *)LABEL, sizeof(LABEL) - 1);
  crypto_generichash_update(&h, (const uint8_t *)name, strlen(name));
  crypto_generichash_final(&h, key, crypto_generichash_KEYBYTES);
}

static void mac(const char *name, const uint8_t *msg, size_t len,
                uint8_t out[XF_SECAGG_SIG_BYTES]) {
  uint8_t key[crypto_generichash_KEYBYTES];
  key_of(name, key);
  crypto_generichash(out, XF_SECAGG_SIG_BYTES, msg, len, key, sizeof(key));
}

static xf_err sign(void *user, const uint8_t *msg, size_t len, uint8_t sig[XF_SECAGG_SIG_BYTES],
                   xf_errctx *err) {
  (void)err;
  mac(((const xf_test_signer *)user)->name, msg, len, sig);
  return XF_OK;
}

/* The "certificate" is the name itself; the peer handle a copy of it. */
static xf_err open_peer(void *user, const uint8_t *cert, size_t cert_len, const char *name,
                        void **peer, xf_errctx *err) {
  (void)user;
  *peer = NULL;
  if (cert_len != strlen(name) || memcmp(cert, name, cert_len) != 0)
    return xf_fail(err, XF_EINTEGRITY, "it was issued to the site '%.*s', not to the site '%s'",
                   (int)(cert_len > 63 ? 63 : cert_len), (const char *)cert, name);
  char *copy = malloc(cert_len + 1);
  if (!copy) return xf_fail(err, XF_ENOMEM, "no memory for a peer");
  memcpy(copy, name, cert_len + 1);
  *peer = copy;
  return XF_OK;
}

static bool verify(void *user, void *peer, const uint8_t *msg, size_t len,
                   const uint8_t sig[XF_SECAGG_SIG_BYTES]) {
  (void)user;
  uint8_t want[XF_SECAGG_SIG_BYTES];
  mac((const char *)peer, msg, len, want);
  return sodium_memcmp(want, sig, sizeof(want)) == 0;
}

static void release(void *user, void *peer) {
  (void)user;
  free(peer);
}

xf_secagg_identity xf_test_signer_identity(xf_test_signer *s, const char *name) {
  snprintf(s->name, sizeof(s->name), "%s", name);
  return (xf_secagg_identity){
      .user = s, .sign = sign, .open = open_peer, .verify = verify, .release = release};
}
