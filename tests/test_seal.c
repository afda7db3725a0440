/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of sealed update streams (crypto/seal.h): round trips, chunks opened
 * in any order and resent, and refusal of every change to a chunk, its
 * place, its context or the keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sodium.h>
#include <string.h>

#include "crypto/seal.h"

static const uint8_t CONTEXT[] = "job 7 round 3 site 12";
#define CTX_LEN (sizeof(CONTEXT) - 1)

typedef struct pair {
  uint8_t pk[32], sk[32], epk[32];
  xf_seal_sender *tx;
  xf_seal_receiver *rx;
} pair;

static void pair_open(pair *p) {
  assert_int_equal(xf_seal_keypair(p->pk, p->sk), XF_OK);
  assert_int_equal(xf_seal_sender_new(p->pk, CONTEXT, CTX_LEN, &p->tx, p->epk), XF_OK);
  assert_int_equal(xf_seal_receiver_new(p->sk, p->epk, CONTEXT, CTX_LEN, &p->rx), XF_OK);
}

static void pair_close(pair *p) {
  xf_seal_sender_free(p->tx);
  xf_seal_receiver_free(p->rx);
  sodium_memzero(p, sizeof(*p));
}

static void chunks_round_trip(void **state) {
  (void)state;
  pair p;
  pair_open(&p);
  static uint8_t data[70000], sealed[70000 + XF_SEAL_ABYTES], back[70000];
  randombytes_buf(data, sizeof(data));
  size_t sizes[] = {0, 1, 15, 16, 17, 4096, 65536, 70000};
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
    size_t len = sizes[k];
    assert_int_equal(xf_seal_chunk(p.tx, 1000 * k, data, len, sealed), XF_OK);
    if (len >= 16) assert_memory_not_equal(sealed, data, 16); /* it is encrypted */
    assert_int_equal(xf_seal_open_chunk(p.rx, 1000 * k, sealed, len + XF_SEAL_ABYTES, back), XF_OK);
    if (len) assert_memory_equal(back, data, len);
  }
  pair_close(&p);
}

/* Flipping any bit of any byte of a sealed chunk is caught, and the output
 * holds nothing of the plaintext. */
static void any_changed_byte_is_refused(void **state) {
  (void)state;
  pair p;
  pair_open(&p);
  uint8_t data[40], sealed[40 + XF_SEAL_ABYTES], back[40];
  randombytes_buf(data, sizeof(data));
  assert_int_equal(xf_seal_chunk(p.tx, 4096, data, sizeof(data), sealed), XF_OK);
  for (size_t b = 0; b < sizeof(sealed); b++) {
    for (int bit = 0; bit < 8; bit++) {
      sealed[b] ^= (uint8_t)(1 << bit);
      memset(back, 0xaa, sizeof(back));
      assert_int_equal(xf_seal_open_chunk(p.rx, 4096, sealed, sizeof(sealed), back), XF_EINTEGRITY);
      uint8_t zero[40] = {0};
      assert_memory_equal(back, zero, sizeof(back));
      sealed[b] ^= (uint8_t)(1 << bit);
    }
  }
  assert_int_equal(xf_seal_open_chunk(p.rx, 4096, sealed, sizeof(sealed), back), XF_OK);
  pair_close(&p);
}

static void wrong_place_context_or_key_is_refused(void **state) {
  (void)state;
  pair p, q;
  pair_open(&p);
  pair_open(&q);
  uint8_t data[64], sealed[64 + XF_SEAL_ABYTES], back[64];
  randombytes_buf(data, sizeof(data));
  assert_int_equal(xf_seal_chunk(p.tx, 128, data, sizeof(data), sealed), XF_OK);
  /* Another offset, a shorter claimed length, a longer one. */
  assert_int_equal(xf_seal_open_chunk(p.rx, 192, sealed, sizeof(sealed), back), XF_EINTEGRITY);
  assert_int_equal(xf_seal_open_chunk(p.rx, 128, sealed, sizeof(sealed) - 1, back), XF_EINTEGRITY);
  assert_int_equal(xf_seal_open_chunk(p.rx, 128, sealed, 8, back), XF_ETRUNCATED);
  /* Another receiver's stream (other keys), another context, another
   * ephemeral key, the right ephemeral key with another secret key. */
  assert_int_equal(xf_seal_open_chunk(q.rx, 128, sealed, sizeof(sealed), back), XF_EINTEGRITY);
  xf_seal_receiver *r;
  static const uint8_t other[] = "job 7 round 4 site 12";
  assert_int_equal(xf_seal_receiver_new(p.sk, p.epk, other, sizeof(other) - 1, &r), XF_OK);
  assert_int_equal(xf_seal_open_chunk(r, 128, sealed, sizeof(sealed), back), XF_EINTEGRITY);
  xf_seal_receiver_free(r);
  assert_int_equal(xf_seal_receiver_new(p.sk, q.epk, CONTEXT, CTX_LEN, &r), XF_OK);
  assert_int_equal(xf_seal_open_chunk(r, 128, sealed, sizeof(sealed), back), XF_EINTEGRITY);
  xf_seal_receiver_free(r);
  assert_int_equal(xf_seal_receiver_new(q.sk, p.epk, CONTEXT, CTX_LEN, &r), XF_OK);
  assert_int_equal(xf_seal_open_chunk(r, 128, sealed, sizeof(sealed), back), XF_EINTEGRITY);
  xf_seal_receiver_free(r);
  /* Two chunks swapped in place. */
  uint8_t sealed2[64 + XF_SEAL_ABYTES];
  assert_int_equal(xf_seal_chunk(p.tx, 192, data, sizeof(data), sealed2), XF_OK);
  assert_int_equal(xf_seal_open_chunk(p.rx, 128, sealed2, sizeof(sealed2), back), XF_EINTEGRITY);
  pair_close(&p);
  pair_close(&q);
}

/* A stream cut into chunks opens in any order; a resent chunk is sealed to
 * the same bytes and opens again; two senders to the same key differ. */
static void chunks_open_out_of_order_and_resend(void **state) {
  (void)state;
  pair p;
  pair_open(&p);
  enum { CHUNKS = 8, SIZE = 1000 };
  static uint8_t data[CHUNKS * SIZE], sealed[CHUNKS][SIZE + XF_SEAL_ABYTES], back[CHUNKS * SIZE];
  randombytes_buf(data, sizeof(data));
  for (int k = 0; k < CHUNKS; k++)
    assert_int_equal(xf_seal_chunk(p.tx, (uint64_t)k * SIZE, data + k * SIZE, SIZE, sealed[k]),
                     XF_OK);
  int order[CHUNKS] = {5, 2, 7, 0, 3, 6, 1, 4};
  for (int k = 0; k < CHUNKS; k++) {
    int c = order[k];
    assert_int_equal(xf_seal_open_chunk(p.rx, (uint64_t)c * SIZE, sealed[c], SIZE + XF_SEAL_ABYTES,
                                        back + c * SIZE),
                     XF_OK);
  }
  assert_memory_equal(back, data, sizeof(data));
  uint8_t again[SIZE + XF_SEAL_ABYTES];
  assert_int_equal(xf_seal_chunk(p.tx, 3 * SIZE, data + 3 * SIZE, SIZE, again), XF_OK);
  assert_memory_equal(again, sealed[3], sizeof(again));
  xf_seal_sender *other;
  uint8_t epk2[32];
  assert_int_equal(xf_seal_sender_new(p.pk, CONTEXT, CTX_LEN, &other, epk2), XF_OK);
  assert_memory_not_equal(epk2, p.epk, 32);
  assert_int_equal(xf_seal_chunk(other, 3 * SIZE, data + 3 * SIZE, SIZE, again), XF_OK);
  assert_memory_not_equal(again, sealed[3], sizeof(again));
  xf_seal_sender_free(other);
  pair_close(&p);
}

static void bad_keys_and_ranges_are_refused(void **state) {
  (void)state;
  uint8_t zero[32] = {0}, epk[32], sk[32] = {1};
  xf_seal_sender *s = NULL;
  xf_seal_receiver *r = NULL;
  assert_int_equal(xf_seal_sender_new(zero, NULL, 0, &s, epk), XF_EINTEGRITY); /* low order */
  assert_null(s);
  assert_int_equal(xf_seal_receiver_new(sk, zero, NULL, 0, &r), XF_EINTEGRITY);
  assert_null(r);
  assert_int_equal(xf_seal_sender_new(NULL, NULL, 0, &s, epk), XF_EINVAL);
  pair p;
  pair_open(&p);
  uint8_t in[1] = {0}, out[1 + XF_SEAL_ABYTES];
  assert_int_equal(xf_seal_chunk(p.tx, UINT64_MAX, in, 1, out), XF_ERANGE);
  assert_int_equal(xf_seal_chunk(p.tx, 0, in, XF_SEAL_MAX_CHUNK + 1, out), XF_ERANGE);
  pair_close(&p);
}

int main(void) {
  if (sodium_init() < 0) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(chunks_round_trip),
      cmocka_unit_test(any_changed_byte_is_refused),
      cmocka_unit_test(wrong_place_context_or_key_is_refused),
      cmocka_unit_test(chunks_open_out_of_order_and_resend),
      cmocka_unit_test(bad_keys_and_ranges_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
