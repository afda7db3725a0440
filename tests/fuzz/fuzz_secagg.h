/* SPDX-License-Identifier: Apache-2.0 */
/* The round of secure aggregation the secure-aggregation fuzz targets run
 * (fuzz_secagg_server, fuzz_site_task) and their seeds are made for
 * (fuzz_seeds.c): a cohort of FZ_SA_N sites "s1".."sN" in job "7", round 1,
 * attempt 1, and an identity for the guard (crypto/secagg_guard.h) that
 * stands in for the sites' certificates: a site's certificate is the bytes
 * "fuzz-cert:" and its name, and its signature of a statement is the keyed
 * BLAKE2b-512 of the statement under its name. Both are checked as strictly
 * as the federation's (a certificate for another name does not open, a
 * signature by another site does not verify); they only make seeds
 * writable without a certificate authority. */
#ifndef XF_TESTS_FUZZ_SECAGG_H
#define XF_TESTS_FUZZ_SECAGG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "coordinator/saphase.h"
#include "crypto/secagg.h"
#include "crypto/secagg_guard.h"
#include "job/admission.h"

#define FZ_SA_N 3
#define FZ_SA_THRESHOLD 0.6 /* t = 2 of 3 */
#define FZ_SA_BITS 16
#define FZ_SA_PARAMS 8
#define FZ_SA_JOB "7"
#define FZ_SA_CERT_PREFIX "fuzz-cert:"

static const char *const fz_sa_names[FZ_SA_N] = {"s1", "s2", "s3"};

/* The graph seed of the round: fixed, so that seeds hold. */
static const uint8_t fz_sa_graph_seed[32] = {7, 1, 1, 9};

static inline uint64_t fz_sa_site(unsigned i) { return xf_admit_site_id(fz_sa_names[i]); }

/* The aggregator's configuration (coordinator/saphase.h); sites and
 * weights point into the caller's arrays of FZ_SA_N. */
static inline xf_saphase_config fz_sa_config(uint64_t *sites, uint64_t *weights) {
  for (unsigned i = 0; i < FZ_SA_N; i++) {
    sites[i] = fz_sa_site(i);
    weights[i] = 100 + 50 * i;
  }
  return (xf_saphase_config){.n = FZ_SA_N,
                             .sites = sites,
                             .weights = weights,
                             .threshold = FZ_SA_THRESHOLD,
                             .bits = FZ_SA_BITS,
                             .n_params = FZ_SA_PARAMS,
                             .clip = 1.0,
                             .phase_s = 10.0,
                             .graph_seed = fz_sa_graph_seed};
}

/* The site of fuzz_site_task: the dataset its tasks train on (its shape,
 * classes and training records) and the job the seeds offer it. */
#define FZ_SITE_H 2
#define FZ_SITE_W 2
#define FZ_SITE_C 1
#define FZ_SITE_CLASSES 2
#define FZ_SITE_RECORDS 1000
#define FZ_SITE_SPEC                                                                        \
  "{\"name\": \"f\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": \"d\"}, " \
  "\"rounds\": 2, \"secure_aggregation\": {\"enabled\": true, \"bits\": 16, "            \
  "\"threshold\": 0.6}}"

/* ---- the identity ------------------------------------------------------------------------ */

/* A site's certificate (cap bytes at least FZ_SA_CERT_MAX); its length. */
#define FZ_SA_CERT_MAX 80
static inline size_t fz_sa_cert(const char *name, uint8_t *out) {
  int n = snprintf((char *)out, FZ_SA_CERT_MAX, FZ_SA_CERT_PREFIX "%s", name);
  return n > 0 ? (size_t)n : 0;
}

static inline void fz_sa_sig_of(const char *name, const uint8_t *msg, size_t len,
                                uint8_t sig[XF_SECAGG_SIG_BYTES]) {
  crypto_generichash(sig, XF_SECAGG_SIG_BYTES, msg, len, (const uint8_t *)name, strlen(name));
}

static inline xf_err fz_sa_sign(void *user, const uint8_t *msg, size_t len,
                                uint8_t sig[XF_SECAGG_SIG_BYTES], xf_errctx *err) {
  (void)err;
  fz_sa_sig_of(user, msg, len, sig);
  return XF_OK;
}

static inline xf_err fz_sa_open(void *user, const uint8_t *cert, size_t cert_len, const char *name,
                                void **peer, xf_errctx *err) {
  (void)user;
  uint8_t want[FZ_SA_CERT_MAX];
  size_t n = fz_sa_cert(name, want);
  if (cert_len != n || !cert || memcmp(cert, want, n) != 0)
    return xf_fail(err, XF_EINTEGRITY, "the certificate is not site %s's", name);
  for (unsigned i = 0; i < FZ_SA_N; i++)
    if (strcmp(name, fz_sa_names[i]) == 0) {
      *peer = (void *)fz_sa_names[i];
      return XF_OK;
    }
  return xf_fail(err, XF_EINTEGRITY, "site %s is not of this federation", name);
}

static inline bool fz_sa_verify(void *user, void *peer, const uint8_t *msg, size_t len,
                                const uint8_t sig[XF_SECAGG_SIG_BYTES]) {
  (void)user;
  uint8_t want[XF_SECAGG_SIG_BYTES];
  fz_sa_sig_of(peer, msg, len, want);
  return sodium_memcmp(want, sig, XF_SECAGG_SIG_BYTES) == 0;
}

static inline void fz_sa_release(void *user, void *peer) {
  (void)user;
  (void)peer;
}

/* The identity of site `name` (a string that outlives the guard). */
static inline xf_secagg_identity fz_sa_identity(const char *name) {
  return (xf_secagg_identity){.user = (void *)name,
                              .sign = fz_sa_sign,
                              .open = fz_sa_open,
                              .verify = fz_sa_verify,
                              .release = fz_sa_release};
}

#endif
