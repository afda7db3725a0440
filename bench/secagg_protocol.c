/* SPDX-License-Identifier: Apache-2.0 */
/* The per-round cost of secure aggregation against a malicious aggregator
 * against the semi-honest protocol (bench/secagg_protocol.h).
 *
 * One round of `sites` sites, in one thread, both ways, with the same
 * parameters (threshold 0.66, the default degree, graph, length):
 *  - semi-honest: the sites run crypto/secagg.h's client alone and the
 *    aggregator its server, the routing of shares done here as the
 *    aggregator would;
 *  - malicious-server: the sites run the guarded client a site daemon runs
 *    (crypto/secagg_guard.h with the federation PKI, crypto/secagg_x509.h:
 *    real P-256 keys and certificates of a federation made in a scratch
 *    directory, checked against its CA and CRL) and the aggregator runs its
 *    phase machine (coordinator/saphase.h), with the consistency round.
 * Every site advertises, shares, masks `length` values and reveals; nobody
 * drops. Measured: the CPU time of each site's calls (thread CPU time; the
 * median and the largest over sites), of the aggregator's calls, and the
 * bytes of the secure-aggregation messages each site sends and receives,
 * as protobuf frames (4-byte length prefix included) of net/xfed.proto,
 * built as the daemons build them; the masked vector itself (the same in
 * both: `length` values of `bits` bits) is left out of the bytes. Also the
 * signatures made and checked per site, and the cost of one signature, one
 * check and one certificate check. */
#include "bench/secagg_protocol.h"

#include <dirent.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "bench/bench_util.h"
#include "coordinator/saphase.h"
#include "crypto/digest.h"
#include "crypto/pki.h"
#include "crypto/secagg.h"
#include "crypto/secagg_guard.h"
#include "crypto/secagg_x509.h"
#include "net/xfed.pb-c.h"

#define JOB "1"

static char scratch[512];


static void remove_scratch(void) {
  if (scratch[0]) xf_bench_remove_tree(scratch);
  scratch[0] = '\0';
}

static void die(const char *what, const xf_errctx *err) {
  fprintf(stderr, "xfed-bench-secagg: %s: %s\n", what, err ? err->msg : "");
  remove_scratch();
  exit(1);
}

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One frame's bytes: the length prefix and the packed Envelope. */
static uint64_t frame_bytes(Xfed__Envelope *env) {
  return 4 + (uint64_t)xfed__envelope__get_packed_size(env);
}

/* ---- the identity, counted ------------------------------------------------------------------- */

/* The federation identity of one site, with counts of what it did. */
typedef struct member {
  char name[24];
  EVP_PKEY *key;
  uint8_t *cert;
  size_t cert_len;
  xf_secagg_x509 *x509;
  xf_secagg_identity inner;
  uint64_t signs, verifies, opens;
} member;

static xf_err counted_sign(void *user, const uint8_t *msg, size_t len,
                           uint8_t sig[XF_SECAGG_SIG_BYTES], xf_errctx *err) {
  member *m = user;
  m->signs++;
  return m->inner.sign(m->inner.user, msg, len, sig, err);
}

static xf_err counted_open(void *user, const uint8_t *cert, size_t cert_len, const char *name,
                           void **peer, xf_errctx *err) {
  member *m = user;
  m->opens++;
  return m->inner.open(m->inner.user, cert, cert_len, name, peer, err);
}

static bool counted_verify(void *user, void *peer, const uint8_t *msg, size_t len,
                           const uint8_t sig[XF_SECAGG_SIG_BYTES]) {
  member *m = user;
  m->verifies++;
  return m->inner.verify(m->inner.user, peer, msg, len, sig);
}

static void counted_release(void *user, void *peer) {
  member *m = user;
  m->inner.release(m->inner.user, peer);
}

static xf_secagg_identity counted(member *m) {
  return (xf_secagg_identity){.user = m,
                              .sign = counted_sign,
                              .open = counted_open,
                              .verify = counted_verify,
                              .release = counted_release};
}

/* A federation of `sites` sites under the scratch directory: each site's
 * key, certificate (DER) and identity against the CA and CRL in *trust. */
static member *make_federation(uint32_t sites, xf_pki_trust **trust) {
  const char *tmp = getenv("TMPDIR");
  snprintf(scratch, sizeof(scratch), "%s/xf-bench-secagg-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(scratch)) {
    scratch[0] = '\0';
    die("cannot make a scratch directory", NULL);
  }
  atexit(remove_scratch);
  char dir[600], path[700], crl[700];
  snprintf(dir, sizeof(dir), "%s/fed", scratch);
  xf_errctx err = {0};
  xf_federation *fed = NULL;
  if (xf_federation_init(dir, "bench", 0, &fed, &err) != XF_OK) die("federation", &err);
  member *m = calloc(sites, sizeof(*m));
  if (!m) die("out of memory", NULL);
  for (uint32_t i = 0; i < sites; i++) {
    snprintf(m[i].name, sizeof(m[i].name), "site-%03u", i + 1);
    xf_pki_issue_opts o = {.kind = XF_PKI_KIND_SITE, .name = m[i].name, .region = "eu"};
    if (xf_federation_issue(fed, &o, NULL, &err) != XF_OK) die("issue", &err);
  }
  xf_federation_close(fed);
  snprintf(path, sizeof(path), "%s/ca.crt", dir);
  snprintf(crl, sizeof(crl), "%s/crl.pem", dir);
  if (xf_pki_trust_load(path, crl, trust, &err) != XF_OK) die("trust", &err);
  for (uint32_t i = 0; i < sites; i++) {
    snprintf(path, sizeof(path), "%s/issued/%s.key", dir, m[i].name);
    if (xf_pki_key_load(path, &m[i].key, &err) != XF_OK) die("key", &err);
    snprintf(path, sizeof(path), "%s/issued/%s.crt", dir, m[i].name);
    X509 *cert = NULL;
    if (xf_pki_cert_load(path, &cert, &err) != XF_OK ||
        xf_secagg_x509_cert_der(cert, &m[i].cert, &m[i].cert_len, &err) != XF_OK)
      die("certificate", &err);
    X509_free(cert);
    if (xf_secagg_x509_new(*trust, m[i].key, &m[i].x509, &err) != XF_OK) die("identity", &err);
    m[i].inner = xf_secagg_x509_identity(m[i].x509);
  }
  return m;
}

static void free_federation(member *m, uint32_t sites, xf_pki_trust *trust) {
  for (uint32_t i = 0; i < sites; i++) {
    xf_secagg_x509_free(m[i].x509);
    EVP_PKEY_free(m[i].key);
    xf_free(m[i].cert);
  }
  free(m);
  xf_pki_trust_free(trust);
}

/* ---- what one round cost --------------------------------------------------------------------- */

typedef struct tally {
  double *site_cpu; /* index - 1 */
  double server_cpu;
  uint64_t *up, *down; /* bytes, index - 1 */
} tally;

static void tally_init(tally *t, uint32_t n) {
  t->site_cpu = calloc(n, sizeof(double));
  t->up = calloc(n, sizeof(uint64_t));
  t->down = calloc(n, sizeof(uint64_t));
  t->server_cpu = 0;
  if (!t->site_cpu || !t->up || !t->down) die("out of memory", NULL);
}

static void tally_free(tally *t) {
  free(t->site_cpu);
  free(t->up);
  free(t->down);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(const double *v, size_t n) {
  double *c = malloc(n * sizeof(*c));
  if (!c) die("out of memory", NULL);
  memcpy(c, v, n * sizeof(*c));
  qsort(c, n, sizeof(*c), cmp_double);
  double m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
  free(c);
  return m;
}

static double largest(const double *v, size_t n) {
  double m = v[0];
  for (size_t i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
  return m;
}

static double median_u64(const uint64_t *v, size_t n) {
  double *d = malloc(n * sizeof(*d));
  if (!d) die("out of memory", NULL);
  for (size_t i = 0; i < n; i++) d[i] = (double)v[i];
  double m = median(d, n);
  free(d);
  return m;
}

/* A site's masked input: `length` uniform words below 2^bits. */
static uint32_t *input_words(uint64_t length, uint32_t bits) {
  uint32_t *w = xf_mallocarray(length, sizeof(uint32_t));
  if (!w) die("out of memory", NULL);
  randombytes_buf(w, length * sizeof(uint32_t));
  uint32_t mask = bits == 32 ? UINT32_MAX : (1u << bits) - 1;
  for (uint64_t k = 0; k < length; k++) w[k] &= mask;
  return w;
}

/* ---- the semi-honest round ------------------------------------------------------------------- */

static void run_plain(const xf_secagg_params *p, tally *t) {
  uint32_t n = p->n;
  size_t k = p->degree;
  xf_errctx err = {0};
  xf_secagg_client **c = calloc(n + 1, sizeof(*c));
  uint8_t *adverts = malloc((size_t)n * XF_SECAGG_ADVERT_BYTES);
  xf_secagg_share_msg *msgs = malloc((size_t)n * k * sizeof(*msgs));
  size_t *counts = calloc(n + 1, sizeof(*counts));
  uint32_t *u2 = malloc(n * sizeof(*u2)), *u3 = malloc(n * sizeof(*u3));
  /* The routing: the shares for each receiver, sender and ciphertext. */
  uint32_t *route_from = malloc((size_t)n * k * sizeof(*route_from));
  uint8_t *route_cts = malloc((size_t)n * k * XF_SECAGG_SHARE_BYTES);
  size_t *start = calloc(n + 2, sizeof(*start));
  size_t cap = xf_secagg_reveal_max_bytes(p), len = 0;
  uint8_t *reveal = malloc(cap);
  uint32_t *sum = xf_mallocarray(p->length, sizeof(uint32_t));
  if (!c || !adverts || !msgs || !counts || !u2 || !u3 || !route_from || !route_cts || !start ||
      !reveal || !sum)
    die("out of memory", NULL);
  xf_secagg_server *s = NULL;
  double s0 = cpu_now();
  if (xf_secagg_server_new(p, &s, &err) != XF_OK) die("server", &err);
  t->server_cpu += cpu_now() - s0;

  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  for (uint32_t i = 1; i <= n; i++) {
    double c0 = cpu_now();
    if (xf_secagg_client_new(p, i, &c[i], &err) != XF_OK) die("client", &err);
    uint8_t *a = adverts + (size_t)(i - 1) * XF_SECAGG_ADVERT_BYTES;
    xf_secagg_client_advertise(c[i], a);
    t->site_cpu[i - 1] += cpu_now() - c0;
    Xfed__SecAggAdvert m = XFED__SEC_AGG_ADVERT__INIT;
    m.job_id = JOB;
    m.round = m.attempt = 1;
    m.advert = (ProtobufCBinaryData){XF_SECAGG_ADVERT_BYTES, a};
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_ADVERT;
    env.secagg_advert = &m;
    t->up[i - 1] += frame_bytes(&env);
    s0 = cpu_now();
    if (xf_secagg_server_advert(s, i, a, &err) != XF_OK) die("advert", &err);
    t->server_cpu += cpu_now() - s0;
  }
  s0 = cpu_now();
  xf_secagg_server_adverts(s, adverts);
  t->server_cpu += cpu_now() - s0;
  {
    Xfed__SecAggKeys m = XFED__SEC_AGG_KEYS__INIT;
    m.job_id = JOB;
    m.round = m.attempt = 1;
    m.adverts = (ProtobufCBinaryData){(size_t)n * XF_SECAGG_ADVERT_BYTES, adverts};
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_KEYS;
    env.secagg_keys = &m;
    uint64_t b = frame_bytes(&env);
    for (uint32_t i = 1; i <= n; i++) t->down[i - 1] += b;
  }
  ProtobufCBinaryData *cts = malloc((k ? k : 1) * sizeof(*cts));
  uint32_t *to = malloc((k ? k : 1) * sizeof(*to));
  if (!cts || !to) die("out of memory", NULL);
  for (uint32_t i = 1; i <= n; i++) {
    xf_secagg_share_msg *mine = msgs + (size_t)(i - 1) * k;
    double c0 = cpu_now();
    if (xf_secagg_client_share(c[i], adverts, mine, k, &counts[i], &err) != XF_OK)
      die("share", &err);
    t->site_cpu[i - 1] += cpu_now() - c0;
    for (size_t m = 0; m < counts[i]; m++) {
      to[m] = mine[m].to;
      cts[m] = (ProtobufCBinaryData){XF_SECAGG_SHARE_BYTES, mine[m].ciphertext};
    }
    Xfed__SecAggShares m = XFED__SEC_AGG_SHARES__INIT;
    m.job_id = JOB;
    m.round = m.attempt = 1;
    m.n_to = m.n_ciphertexts = counts[i];
    m.to = to;
    m.ciphertexts = cts;
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_SHARES;
    env.secagg_shares = &m;
    t->up[i - 1] += frame_bytes(&env);
    s0 = cpu_now();
    if (xf_secagg_server_shared(s, i, &err) != XF_OK) die("shared", &err);
    t->server_cpu += cpu_now() - s0;
  }
  /* The aggregator routes: every share to its receiver (a counting sort,
   * as the phase machine does). */
  s0 = cpu_now();
  size_t n_u2 = 0;
  if (xf_secagg_server_routed(s, u2, &n_u2, &err) != XF_OK) die("routed", &err);
  for (uint32_t i = 1; i <= n; i++)
    for (size_t m = 0; m < counts[i]; m++) start[msgs[(size_t)(i - 1) * k + m].to + 1]++;
  for (uint32_t j = 1; j <= n + 1; j++) start[j] += start[j - 1];
  for (uint32_t i = 1; i <= n; i++)
    for (size_t m = 0; m < counts[i]; m++) {
      const xf_secagg_share_msg *sh = &msgs[(size_t)(i - 1) * k + m];
      size_t at = start[sh->to]++;
      route_from[at] = i;
      memcpy(route_cts + at * XF_SECAGG_SHARE_BYTES, sh->ciphertext, XF_SECAGG_SHARE_BYTES);
    }
  t->server_cpu += cpu_now() - s0;
  uint32_t *y = xf_mallocarray(p->length, sizeof(uint32_t));
  if (!y) die("out of memory", NULL);
  for (uint32_t j = 1; j <= n; j++) {
    /* After the placing, start[j] is where j's shares end. */
    size_t lo = j == 1 ? 0 : start[j - 1], hi = start[j];
    for (size_t m = lo; m < hi; m++)
      cts[m - lo] = (ProtobufCBinaryData){XF_SECAGG_SHARE_BYTES,
                                          route_cts + m * XF_SECAGG_SHARE_BYTES};
    Xfed__SecAggRouted r = XFED__SEC_AGG_ROUTED__INIT;
    r.job_id = JOB;
    r.round = r.attempt = 1;
    r.n_u2 = n_u2;
    r.u2 = u2;
    r.n_from = r.n_ciphertexts = hi - lo;
    r.from = route_from + lo;
    r.ciphertexts = cts;
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_ROUTED;
    env.secagg_routed = &r;
    t->down[j - 1] += frame_bytes(&env);
    uint32_t *x = input_words(p->length, p->bits);
    double c0 = cpu_now();
    for (size_t m = lo; m < hi; m++)
      if (xf_secagg_client_receive(c[j], route_from[m], route_cts + m * XF_SECAGG_SHARE_BYTES,
                                   &err) != XF_OK)
        die("receive", &err);
    if (xf_secagg_client_routed(c[j], u2, n_u2, &err) != XF_OK ||
        xf_secagg_client_mask(c[j], x, 0, p->length, y, &err) != XF_OK)
      die("mask", &err);
    t->site_cpu[j - 1] += cpu_now() - c0;
    xf_free(x);
    s0 = cpu_now();
    if (xf_secagg_server_add_masked(s, j, 0, p->length, y, &err) != XF_OK) die("masked", &err);
    t->server_cpu += cpu_now() - s0;
  }
  xf_free(y);
  s0 = cpu_now();
  size_t n_u3 = 0;
  if (xf_secagg_server_survivors(s, u3, &n_u3, &err) != XF_OK) die("survivors", &err);
  t->server_cpu += cpu_now() - s0;
  for (uint32_t i = 1; i <= n; i++) {
    Xfed__SecAggUnmask u = XFED__SEC_AGG_UNMASK__INIT;
    u.job_id = JOB;
    u.round = u.attempt = 1;
    u.n_u3 = n_u3;
    u.u3 = u3;
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_UNMASK;
    env.secagg_unmask = &u;
    t->down[i - 1] += frame_bytes(&env);
    double c0 = cpu_now();
    if (xf_secagg_client_unmask(c[i], u3, n_u3, reveal, cap, &len, &err) != XF_OK)
      die("unmask", &err);
    t->site_cpu[i - 1] += cpu_now() - c0;
    Xfed__SecAggReveal r = XFED__SEC_AGG_REVEAL__INIT;
    r.job_id = JOB;
    r.round = r.attempt = 1;
    r.reveal = (ProtobufCBinaryData){len, reveal};
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_REVEAL;
    env.secagg_reveal = &r;
    t->up[i - 1] += frame_bytes(&env);
    s0 = cpu_now();
    if (xf_secagg_server_add_reveal(s, i, reveal, len, &err) != XF_OK) die("reveal", &err);
    t->server_cpu += cpu_now() - s0;
  }
  s0 = cpu_now();
  if (xf_secagg_server_finish(s, sum, &err) != XF_OK) die("finish", &err);
  t->server_cpu += cpu_now() - s0;
  for (uint32_t i = 1; i <= n; i++) xf_secagg_client_free(c[i]);
  xf_secagg_server_free(s);
  free(c);
  free(adverts);
  free(msgs);
  free(counts);
  free(u2);
  free(u3);
  free(route_from);
  free(route_cts);
  free(start);
  free(reveal);
  free(cts);
  free(to);
  xf_free(sum);
}

/* ---- the malicious-server round -------------------------------------------------------------- */

/* What the machine sent each site, copied out of its actions. */
typedef struct inbox {
  uint32_t *u2, *from, *u3, *signers;
  uint8_t *cts, *share_sigs, *sigs;
  size_t n_u2, n_cts, n_u3, n_signers;
} inbox;

typedef struct guarded {
  const xf_secagg_params *p;
  xf_saphase *sa;
  uint64_t *ids;
  member *m;
  xf_secagg_guard **g; /* index - 1 */
  inbox *in;           /* index - 1 */
  /* SEND_KEYS is the same for every site: kept once. */
  uint8_t *adverts, *advert_sigs, *certs;
  uint32_t *cert_lens;
  size_t certs_len;
  bool keys, done;
} guarded;

static void *dup_of(const void *p, size_t len) {
  void *c = malloc(len ? len : 1);
  if (!c) die("out of memory", NULL);
  if (len) memcpy(c, p, len);
  return c;
}

static void collect(guarded *r) {
  size_t n;
  const xf_saphase_action *a = xf_saphase_actions(r->sa, &n);
  for (size_t k = 0; k < n; k++) {
    uint32_t i = a[k].site ? xf_saphase_index(r->sa, a[k].site) : 0;
    inbox *in = i ? &r->in[i - 1] : NULL;
    switch (a[k].kind) {
    case XF_SAPHASE_ACT_SEND_KEYS:
      if (!r->keys) {
        r->adverts = dup_of(a[k].adverts, a[k].adverts_len);
        r->advert_sigs = dup_of(a[k].sigs, (size_t)r->p->n * XF_SECAGG_SIG_BYTES);
        r->certs = dup_of(a[k].certs, a[k].certs_len);
        r->certs_len = a[k].certs_len;
        r->cert_lens = dup_of(a[k].cert_lens, r->p->n * sizeof(uint32_t));
        r->keys = true;
      }
      break;
    case XF_SAPHASE_ACT_SEND_ROUTED:
      in->u2 = dup_of(a[k].u2, a[k].n_u2 * sizeof(uint32_t));
      in->n_u2 = a[k].n_u2;
      in->from = dup_of(a[k].from, a[k].n_cts * sizeof(uint32_t));
      in->cts = malloc((a[k].n_cts ? a[k].n_cts : 1) * XF_SECAGG_SHARE_BYTES);
      if (!in->cts) die("out of memory", NULL);
      for (size_t m = 0; m < a[k].n_cts; m++)
        memcpy(in->cts + m * XF_SECAGG_SHARE_BYTES, a[k].cts[m], XF_SECAGG_SHARE_BYTES);
      in->share_sigs = dup_of(a[k].sigs, a[k].n_cts * XF_SECAGG_SIG_BYTES);
      in->n_cts = a[k].n_cts;
      break;
    case XF_SAPHASE_ACT_SEND_CHECK:
      in->u3 = dup_of(a[k].u3, a[k].n_u3 * sizeof(uint32_t));
      in->n_u3 = a[k].n_u3;
      break;
    case XF_SAPHASE_ACT_SEND_UNMASK:
      in->signers = dup_of(a[k].signers, a[k].n_signers * sizeof(uint32_t));
      in->sigs = dup_of(a[k].sigs, a[k].n_signers * XF_SECAGG_SIG_BYTES);
      in->n_signers = a[k].n_signers;
      break;
    case XF_SAPHASE_ACT_DROP:
    case XF_SAPHASE_ACT_FAILED: {
      xf_errctx e = {0};
      snprintf(e.msg, sizeof(e.msg), "%s", a[k].why);
      die("the phase machine gave up", &e);
      break;
    }
    case XF_SAPHASE_ACT_DONE: r->done = true; break;
    }
  }
}

static ProtobufCBinaryData *byte_fields(const uint8_t *base, size_t each, size_t n) {
  ProtobufCBinaryData *v = malloc((n ? n : 1) * sizeof(*v));
  if (!v) die("out of memory", NULL);
  for (size_t i = 0; i < n; i++) v[i] = (ProtobufCBinaryData){each, (uint8_t *)base + i * each};
  return v;
}

static void run_guarded(const xf_saphase_config *cfg, member *members, tally *t) {
  guarded r = {0};
  xf_errctx err = {0};
  double s0 = cpu_now();
  if (xf_saphase_create(cfg, 0.0, &r.sa, &err) != XF_OK) die("phase machine", &err);
  t->server_cpu += cpu_now() - s0;
  r.p = xf_saphase_params(r.sa);
  uint32_t n = r.p->n;
  size_t k = r.p->degree;
  r.m = members;
  r.g = calloc(n, sizeof(*r.g));
  r.in = calloc(n, sizeof(*r.in));
  const char **names = calloc(n, sizeof(*names));
  char **names_rw = calloc(n, sizeof(*names_rw));
  if (!r.g || !r.in || !names || !names_rw) die("out of memory", NULL);
  for (uint32_t i = 0; i < n; i++) names[i] = names_rw[i] = members[i].name;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  /* The Go's setup names the cohort: what that adds to each site's Go. */
  {
    Xfed__SecAggSetup su = XFED__SEC_AGG_SETUP__INIT;
    size_t without = xfed__sec_agg_setup__get_packed_size(&su);
    su.n_cohort = n;
    su.cohort = names_rw;
    size_t with = xfed__sec_agg_setup__get_packed_size(&su);
    for (uint32_t i = 0; i < n; i++) t->down[i] += with - without;
  }
  for (uint32_t i = 1; i <= n; i++) {
    xf_update_secagg setup;
    if (xf_saphase_setup(r.sa, cfg->sites[i - 1], &setup) != XF_OK) die("setup", NULL);
    xf_secagg_session session = {
        .job = JOB, .round = 1, .attempt = 1, .params = setup.params, .cohort = names};
    xf_secagg_identity id = counted(&members[i - 1]);
    double c0 = cpu_now();
    if (xf_secagg_guard_new(&session, i, &id, &r.g[i - 1], &err) != XF_OK) die("guard", &err);
    t->site_cpu[i - 1] += cpu_now() - c0;
  }
  /* Keys. */
  for (uint32_t i = 1; i <= n; i++) {
    uint8_t advert[XF_SECAGG_ADVERT_BYTES], sig[XF_SECAGG_SIG_BYTES];
    double c0 = cpu_now();
    if (xf_secagg_guard_advertise(r.g[i - 1], advert, sig, &err) != XF_OK) die("advertise", &err);
    t->site_cpu[i - 1] += cpu_now() - c0;
    Xfed__SecAggAdvert m = XFED__SEC_AGG_ADVERT__INIT;
    m.job_id = JOB;
    m.round = m.attempt = 1;
    m.advert = (ProtobufCBinaryData){sizeof(advert), advert};
    m.signature = (ProtobufCBinaryData){sizeof(sig), sig};
    m.certificate = (ProtobufCBinaryData){members[i - 1].cert_len, members[i - 1].cert};
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_ADVERT;
    env.secagg_advert = &m;
    t->up[i - 1] += frame_bytes(&env);
    xf_saphase_keys keys = {.advert = advert, .advert_len = sizeof(advert), .sig = sig,
                            .sig_len = sizeof(sig), .cert = members[i - 1].cert,
                            .cert_len = members[i - 1].cert_len};
    s0 = cpu_now();
    if (xf_saphase_advert(r.sa, cfg->sites[i - 1], &keys, 0.0, &err) != XF_OK) die("keys", &err);
    t->server_cpu += cpu_now() - s0;
    collect(&r);
  }
  if (!r.keys) die("no keys were sent", NULL);
  ProtobufCBinaryData *sig_v = byte_fields(r.advert_sigs, XF_SECAGG_SIG_BYTES, n);
  ProtobufCBinaryData *cert_v = malloc(n * sizeof(*cert_v));
  xf_secagg_member_keys *keys = malloc(n * sizeof(*keys));
  if (!cert_v || !keys) die("out of memory", NULL);
  for (size_t i = 0, at = 0; i < n; at += r.cert_lens[i], i++) {
    cert_v[i] = (ProtobufCBinaryData){r.cert_lens[i], r.certs + at};
    keys[i] = (xf_secagg_member_keys){.advert = r.adverts + i * XF_SECAGG_ADVERT_BYTES,
                                      .sig = r.advert_sigs + i * XF_SECAGG_SIG_BYTES,
                                      .cert = r.certs + at,
                                      .cert_len = r.cert_lens[i]};
  }
  {
    Xfed__SecAggKeys m = XFED__SEC_AGG_KEYS__INIT;
    m.job_id = JOB;
    m.round = m.attempt = 1;
    m.adverts = (ProtobufCBinaryData){(size_t)n * XF_SECAGG_ADVERT_BYTES, r.adverts};
    m.n_signatures = m.n_certificates = n;
    m.signatures = sig_v;
    m.certificates = cert_v;
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_KEYS;
    env.secagg_keys = &m;
    uint64_t b = frame_bytes(&env);
    for (uint32_t i = 0; i < n; i++) t->down[i] += b;
  }
  free(sig_v);
  free(cert_v);
  /* Shares. */
  size_t room = k ? k : 1;
  const uint8_t **cts = malloc(room * sizeof(*cts)), **sigs = malloc(room * sizeof(*sigs));
  size_t *lens = malloc(room * sizeof(*lens)), *sig_lens = malloc(room * sizeof(*sig_lens));
  ProtobufCBinaryData *ct_v = malloc(room * sizeof(*ct_v)), *sg_v = malloc(room * sizeof(*sg_v));
  xf_secagg_signed_share *out = malloc(room * sizeof(*out));
  uint32_t *to = malloc(room * sizeof(*to));
  if (!out || !to || !cts || !sigs || !lens || !sig_lens || !ct_v || !sg_v)
    die("out of memory", NULL);
  for (uint32_t i = 1; i <= n; i++) {
    size_t count = 0;
    double c0 = cpu_now();
    if (xf_secagg_guard_share(r.g[i - 1], keys, out, k, &count, &err) != XF_OK) die("share", &err);
    t->site_cpu[i - 1] += cpu_now() - c0;
    for (size_t m = 0; m < count; m++) {
      to[m] = out[m].to;
      cts[m] = out[m].ciphertext;
      sigs[m] = out[m].sig;
      lens[m] = XF_SECAGG_SHARE_BYTES;
      sig_lens[m] = XF_SECAGG_SIG_BYTES;
      ct_v[m] = (ProtobufCBinaryData){XF_SECAGG_SHARE_BYTES, out[m].ciphertext};
      sg_v[m] = (ProtobufCBinaryData){XF_SECAGG_SIG_BYTES, out[m].sig};
    }
    Xfed__SecAggShares m = XFED__SEC_AGG_SHARES__INIT;
    m.job_id = JOB;
    m.round = m.attempt = 1;
    m.n_to = m.n_ciphertexts = m.n_signatures = count;
    m.to = to;
    m.ciphertexts = ct_v;
    m.signatures = sg_v;
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_SHARES;
    env.secagg_shares = &m;
    t->up[i - 1] += frame_bytes(&env);
    s0 = cpu_now();
    xf_saphase_shares_msg msg = {to, count, cts, lens, count, sigs, sig_lens, count};
    if (xf_saphase_shares(r.sa, cfg->sites[i - 1], &msg, 0.0, &err) != XF_OK)
      die("shares", &err);
    t->server_cpu += cpu_now() - s0;
    collect(&r);
  }
  /* Masked inputs. */
  for (uint32_t i = 1; i <= n; i++) {
    inbox *in = &r.in[i - 1];
    ProtobufCBinaryData *rc = byte_fields(in->cts, XF_SECAGG_SHARE_BYTES, in->n_cts);
    ProtobufCBinaryData *rs = byte_fields(in->share_sigs, XF_SECAGG_SIG_BYTES, in->n_cts);
    Xfed__SecAggRouted m = XFED__SEC_AGG_ROUTED__INIT;
    m.job_id = JOB;
    m.round = m.attempt = 1;
    m.n_u2 = in->n_u2;
    m.u2 = in->u2;
    m.n_from = m.n_ciphertexts = m.n_signatures = in->n_cts;
    m.from = in->from;
    m.ciphertexts = rc;
    m.signatures = rs;
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_ROUTED;
    env.secagg_routed = &m;
    t->down[i - 1] += frame_bytes(&env);
    free(rc);
    free(rs);
    uint32_t *words = input_words(r.p->length, r.p->bits);
    double c0 = cpu_now();
    for (size_t m2 = 0; m2 < in->n_cts; m2++)
      if (xf_secagg_guard_receive(r.g[i - 1], in->from[m2], in->cts + m2 * XF_SECAGG_SHARE_BYTES,
                                  in->share_sigs + m2 * XF_SECAGG_SIG_BYTES, &err) != XF_OK)
        die("receive", &err);
    if (xf_secagg_guard_routed(r.g[i - 1], in->u2, in->n_u2, &err) != XF_OK ||
        xf_secagg_client_mask(xf_secagg_guard_client(r.g[i - 1]), words, 0, r.p->length, words,
                              &err) != XF_OK)
      die("mask", &err);
    t->site_cpu[i - 1] += cpu_now() - c0;
    s0 = cpu_now();
    if (xf_saphase_masked(r.sa, cfg->sites[i - 1], &words, r.p->length, 0.0, &err) != XF_OK)
      die("masked", &err);
    t->server_cpu += cpu_now() - s0;
    collect(&r);
  }
  s0 = cpu_now();
  xf_saphase_close(r.sa, 0.0);
  t->server_cpu += cpu_now() - s0;
  collect(&r);
  /* The consistency round. */
  for (uint32_t i = 1; i <= n; i++) {
    inbox *in = &r.in[i - 1];
    Xfed__SecAggCheck c = XFED__SEC_AGG_CHECK__INIT;
    c.job_id = JOB;
    c.round = c.attempt = 1;
    c.n_u3 = in->n_u3;
    c.u3 = in->u3;
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_CHECK;
    env.secagg_check = &c;
    t->down[i - 1] += frame_bytes(&env);
    uint8_t sig[XF_SECAGG_SIG_BYTES];
    double c0 = cpu_now();
    if (xf_secagg_guard_sign_survivors(r.g[i - 1], in->u3, in->n_u3, sig, &err) != XF_OK)
      die("sign the survivors", &err);
    t->site_cpu[i - 1] += cpu_now() - c0;
    Xfed__SecAggCheckSig cs = XFED__SEC_AGG_CHECK_SIG__INIT;
    cs.job_id = JOB;
    cs.round = cs.attempt = 1;
    cs.signature = (ProtobufCBinaryData){sizeof(sig), sig};
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_CHECK_SIG;
    env.secagg_check_sig = &cs;
    t->up[i - 1] += frame_bytes(&env);
    s0 = cpu_now();
    if (xf_saphase_check_sig(r.sa, cfg->sites[i - 1], sig, sizeof(sig), 0.0, &err) != XF_OK)
      die("check", &err);
    t->server_cpu += cpu_now() - s0;
    collect(&r);
  }
  /* Reveals. */
  size_t cap = xf_secagg_reveal_max_bytes(r.p), len = 0;
  uint8_t *reveal = malloc(cap);
  if (!reveal) die("out of memory", NULL);
  for (uint32_t i = 1; i <= n; i++) {
    inbox *in = &r.in[i - 1];
    ProtobufCBinaryData *us = byte_fields(in->sigs, XF_SECAGG_SIG_BYTES, in->n_signers);
    Xfed__SecAggUnmask u = XFED__SEC_AGG_UNMASK__INIT;
    u.job_id = JOB;
    u.round = u.attempt = 1;
    u.n_u3 = in->n_u3;
    u.u3 = in->u3;
    u.n_signers = u.n_signatures = in->n_signers;
    u.signers = in->signers;
    u.signatures = us;
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_UNMASK;
    env.secagg_unmask = &u;
    t->down[i - 1] += frame_bytes(&env);
    free(us);
    double c0 = cpu_now();
    if (xf_secagg_guard_unmask(r.g[i - 1], in->u3, in->n_u3, in->signers, in->sigs,
                               in->n_signers, reveal, cap, &len, &err) != XF_OK)
      die("unmask", &err);
    t->site_cpu[i - 1] += cpu_now() - c0;
    Xfed__SecAggReveal rv = XFED__SEC_AGG_REVEAL__INIT;
    rv.job_id = JOB;
    rv.round = rv.attempt = 1;
    rv.reveal = (ProtobufCBinaryData){len, reveal};
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_REVEAL;
    env.secagg_reveal = &rv;
    t->up[i - 1] += frame_bytes(&env);
    s0 = cpu_now();
    if (xf_saphase_reveal(r.sa, cfg->sites[i - 1], reveal, len, 0.0, &err) != XF_OK)
      die("reveal", &err);
    t->server_cpu += cpu_now() - s0;
    collect(&r);
  }
  if (!r.done) die("the round did not unmask", NULL);
  free(reveal);
  free(out);
  free(to);
  free(cts);
  free(sigs);
  free(lens);
  free(sig_lens);
  free(ct_v);
  free(sg_v);
  free(keys);
  for (uint32_t i = 0; i < n; i++) {
    xf_secagg_guard_free(r.g[i]);
    free(r.in[i].u2);
    free(r.in[i].from);
    free(r.in[i].u3);
    free(r.in[i].signers);
    free(r.in[i].cts);
    free(r.in[i].share_sigs);
    free(r.in[i].sigs);
  }
  free(r.g);
  free(r.in);
  free(names);
  free(names_rw);
  free(r.adverts);
  free(r.advert_sigs);
  free(r.certs);
  free(r.cert_lens);
  xf_saphase_free(r.sa);
}

/* ---- one operation at a time ----------------------------------------------------------------- */

/* Mean seconds of a signature, a check of one, and a certificate check
 * (chain, validity, CRL, name), over `reps` each. */
static void unit_costs(member *m, int reps, double *sign_s, double *verify_s, double *open_s) {
  uint8_t msg[96], sig[XF_SECAGG_SIG_BYTES];
  randombytes_buf(msg, sizeof(msg));
  xf_errctx err = {0};
  double t0 = cpu_now();
  for (int i = 0; i < reps; i++)
    if (m->inner.sign(m->inner.user, msg, sizeof(msg), sig, &err) != XF_OK) die("sign", &err);
  *sign_s = (cpu_now() - t0) / reps;
  void *peer = NULL;
  t0 = cpu_now();
  for (int i = 0; i < reps; i++) {
    if (m->inner.open(m->inner.user, m->cert, m->cert_len, m->name, &peer, &err) != XF_OK)
      die("certificate check", &err);
    if (i + 1 < reps) m->inner.release(m->inner.user, peer);
  }
  *open_s = (cpu_now() - t0) / reps;
  bool ok = true;
  t0 = cpu_now();
  for (int i = 0; i < reps; i++) ok &= m->inner.verify(m->inner.user, peer, msg, sizeof(msg), sig);
  *verify_s = (cpu_now() - t0) / reps;
  m->inner.release(m->inner.user, peer);
  if (!ok) die("a signature did not verify", NULL);
}

int xf_bench_secagg_protocol(uint32_t sites, uint32_t bits, uint64_t length) {
  if (sites < 3 || sites > 1000) {
    fprintf(stderr, "xfed-bench-secagg: -s takes 3 to 1000 sites\n");
    return 1;
  }
  if (xf_crypto_init() != XF_OK) return 1;
  xf_pki_trust *trust = NULL;
  member *m = make_federation(sites, &trust);
  uint64_t *ids = malloc(sites * sizeof(*ids));
  uint8_t seed[32];
  if (!ids) die("out of memory", NULL);
  for (uint32_t i = 0; i < sites; i++) ids[i] = 1000 + i;
  randombytes_buf(seed, sizeof(seed));
  xf_saphase_config cfg = {.n = sites, .sites = ids, .threshold = 0.66, .bits = bits,
                           .n_params = length, .clip = 1.0, .phase_s = 30.0, .graph_seed = seed};
  /* The semi-honest round runs on the very parameters the machine chose. */
  xf_saphase *probe = NULL;
  xf_errctx err = {0};
  if (xf_saphase_create(&cfg, 0.0, &probe, &err) != XF_OK) die("phase machine", &err);
  xf_secagg_params p = *xf_saphase_params(probe);
  xf_saphase_free(probe);

  tally plain, guarded_t;
  tally_init(&plain, sites);
  tally_init(&guarded_t, sites);
  run_plain(&p, &plain);
  run_guarded(&cfg, m, &guarded_t);
  double sign_s, verify_s, open_s;
  unit_costs(&m[0], 200, &sign_s, &verify_s, &open_s);
  double signs = 0, verifies = 0, opens = 0;
  for (uint32_t i = 0; i < sites; i++) {
    signs += (double)m[i].signs;
    verifies += (double)m[i].verifies;
    opens += (double)m[i].opens;
  }
  char cpu[256];
  xf_bench_cpu_model(cpu, sizeof(cpu));
  printf("{\"mode\": \"protocol\", \"device\": \"%s\", \"cpus\": %ld, \"sites\": %u, "
         "\"threshold\": %u, \"degree\": %u, \"bits\": %u, \"length\": %llu, "
         "\"plain_site_ms\": %.4f, \"plain_site_max_ms\": %.4f, \"plain_server_ms\": %.4f, "
         "\"guarded_site_ms\": %.4f, \"guarded_site_max_ms\": %.4f, \"guarded_server_ms\": %.4f, "
         "\"plain_up\": %.0f, \"plain_down\": %.0f, \"guarded_up\": %.0f, \"guarded_down\": %.0f, "
         "\"signs_per_site\": %.2f, \"verifies_per_site\": %.2f, \"cert_checks_per_site\": %.2f, "
         "\"sign_us\": %.2f, \"verify_us\": %.2f, \"cert_check_us\": %.2f}\n",
         cpu, sysconf(_SC_NPROCESSORS_ONLN), sites, p.threshold, p.degree, bits,
         (unsigned long long)length, 1e3 * median(plain.site_cpu, sites),
         1e3 * largest(plain.site_cpu, sites), 1e3 * plain.server_cpu,
         1e3 * median(guarded_t.site_cpu, sites), 1e3 * largest(guarded_t.site_cpu, sites),
         1e3 * guarded_t.server_cpu, median_u64(plain.up, sites), median_u64(plain.down, sites),
         median_u64(guarded_t.up, sites), median_u64(guarded_t.down, sites), signs / sites,
         verifies / sites, opens / sites, 1e6 * sign_s, 1e6 * verify_s, 1e6 * open_s);
  tally_free(&plain);
  tally_free(&guarded_t);
  free(ids);
  free_federation(m, sites, trust);
  remove_scratch();
  return 0;
}
