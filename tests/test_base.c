/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the common ground: error table and context, allocation failure
 * injection, the bounds-checked cursor, the reproducible RNG, digests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cursor.h"
#include "base/log.h"
#include "base/name.h"
#include "base/result.h"
#include "base/rng.h"
#include "base/text.h"
#include "crypto/digest.h"

static void every_error_has_a_name_and_message(void **state) {
  (void)state;
  for (int i = 0; i < XF_ERR_COUNT; i++) {
    assert_non_null(xf_strerror((xf_err)i));
    assert_true(strncmp(xf_err_name((xf_err)i), "XF_E", 4) == 0);
  }
  assert_string_equal(xf_err_name(XF_ENOMEM), "XF_ENOMEM");
  assert_string_equal(xf_strerror((xf_err)999), "unknown error");
}

static void error_context_names_file_field_and_fix(void **state) {
  (void)state;
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  xf_errctx_file(&ctx, "job.json");
  xf_errctx_field(&ctx, "local.lr");
  xf_err rc = xf_fail(&ctx, XF_ERANGE, "must be > 0, got %d", -1);
  assert_int_equal(rc, XF_ERANGE);
  char buf[256];
  xf_errctx_format(&ctx, buf, sizeof(buf));
  assert_string_equal(buf, "job.json: local.lr: must be > 0, got -1 (value out of range)");
  /* A NULL context is allowed everywhere. */
  assert_int_equal(xf_fail(NULL, XF_EIO, "x"), XF_EIO);
  assert_int_equal(xf_fail_in_file(NULL, XF_EIO, "f", "g", "x"), XF_EIO);
  /* A failure in a file replaces what ctx held: the old field goes when the
   * new one has none. */
  xf_errctx_peer(&ctx, "spiffe://x");
  rc = xf_fail_in_file(&ctx, XF_EFORMAT, "result.json", NULL, "not one object");
  assert_int_equal(rc, XF_EFORMAT);
  xf_errctx_format(&ctx, buf, sizeof(buf));
  assert_string_equal(buf, "result.json: not one object (malformed input)");
  assert_string_equal(ctx.peer, "");
  xf_fail_in_file(&ctx, XF_ERANGE, "result.json", "dp.clip", "is %d", 0);
  xf_errctx_format(&ctx, buf, sizeof(buf));
  assert_string_equal(buf, "result.json: dp.clip: is 0 (value out of range)");
}

/* A wrapper puts the caller's context before the callee's cause once: never
 * the cause twice, never ": " before an empty cause, never the file both
 * before the message and quoted in it, never the code's message twice. */
static void wrapped_error_says_each_part_once(void **state) {
  (void)state;
  xf_errctx ctx;
  char buf[1200];
  /* The callee's cause, then the caller's context before it. */
  xf_fail_in_file(&ctx, XF_EIO, "/nonexistent/chart.js", NULL, "cannot open: %s",
                  "No such file or directory");
  assert_int_equal(xf_fail_wrap(&ctx, XF_EIO, "XF_CHARTJS names '%s', which cannot be read as "
                                "Chart.js", "/nonexistent/chart.js"),
                   XF_EIO);
  xf_errctx_format(&ctx, buf, sizeof(buf));
  assert_string_equal(buf, "XF_CHARTJS names '/nonexistent/chart.js', which cannot be read as "
                           "Chart.js: cannot open: No such file or directory "
                           "(input/output error)");
  /* Wrapping the same context again adds nothing. */
  xf_fail_wrap(&ctx, XF_EIO, "XF_CHARTJS names '%s', which cannot be read as Chart.js",
               "/nonexistent/chart.js");
  xf_errctx_format(&ctx, buf, sizeof(buf));
  assert_int_equal(strstr(buf, "XF_CHARTJS") - buf, 0);
  assert_null(strstr(buf + 1, "XF_CHARTJS"));
  /* A caller that formats the cause in itself (ctx->msg as an argument) does
   * not read what it is writing: the cause appears once. */
  xf_fail(&ctx, XF_ENOENT, "no file x.json");
  xf_fail_wrap(&ctx, XF_ENOENT, "the config cannot be read: %s", ctx.msg);
  assert_string_equal(ctx.msg, "the config cannot be read: no file x.json");
  /* An empty cause: the context alone, with no dangling ": ". */
  xf_errctx_clear(&ctx);
  xf_fail_wrap(&ctx, XF_EIO, "cannot read the model");
  xf_errctx_format(&ctx, buf, sizeof(buf));
  assert_string_equal(buf, "cannot read the model (input/output error)");
  /* The file stays unless the context names it; field and peer stay. */
  xf_fail_in_file(&ctx, XF_EFORMAT, "job.json", "rounds", "must be a number");
  xf_errctx_peer(&ctx, "127.0.0.1:7443");
  xf_fail_wrap(&ctx, XF_EFORMAT, "the job is refused");
  xf_errctx_format(&ctx, buf, sizeof(buf));
  assert_string_equal(buf, "peer 127.0.0.1:7443: job.json: rounds: the job is refused: must be a "
                           "number (malformed input)");
  /* A NULL context is allowed. */
  assert_int_equal(xf_fail_wrap(NULL, XF_EIO, "x"), XF_EIO);
  /* A message that is the code's own message is not followed by it again. */
  xf_errctx_clear(&ctx);
  xf_fail(&ctx, XF_ENOMEM, "out of memory");
  xf_errctx_format(&ctx, buf, sizeof(buf));
  assert_string_equal(buf, "out of memory");
  xf_fail(&ctx, XF_ENOMEM, "writing the admission: out of memory");
  xf_errctx_format(&ctx, buf, sizeof(buf));
  assert_string_equal(buf, "writing the admission: out of memory");
}

static void allocation_fails_on_the_nth_call(void **state) {
  (void)state;
  xf_alloc_fail_after(2);
  void *a = xf_malloc(8), *b = xf_malloc(8), *c = xf_malloc(8);
  assert_non_null(a);
  assert_non_null(b);
  assert_null(c);
  assert_null(xf_calloc(1, 1));
  xf_alloc_fail_reset();
  void *d = xf_malloc(8);
  assert_non_null(d);
  xf_free(a);
  xf_free(b);
  xf_free(d);
  assert_null(xf_calloc(SIZE_MAX / 2, 4)); /* overflow is refused, not wrapped */
}

static void cursor_refuses_reads_past_the_end(void **state) {
  (void)state;
  const uint8_t bytes[] = {0x00, 0x00, 0x08, 0x03, 0xAA};
  xf_cursor c = xf_cursor_make(bytes, sizeof(bytes));
  uint32_t v;
  assert_int_equal(xf_cursor_u32be(&c, &v), XF_OK);
  assert_int_equal(v, 0x0803);
  assert_int_equal(xf_cursor_u32be(&c, &v), XF_ETRUNCATED);
  assert_int_equal(c.off, 4); /* a failed read does not move the cursor */
  uint8_t b;
  assert_int_equal(xf_cursor_u8(&c, &b), XF_OK);
  assert_int_equal(b, 0xAA);
  assert_int_equal(xf_cursor_skip(&c, 1), XF_ETRUNCATED);
}

static void cursor_splits_lines_with_and_without_cr(void **state) {
  (void)state;
  const char text[] = "a,b\r\nc\nlast";
  xf_cursor c = xf_cursor_make(text, strlen(text));
  const char *line;
  size_t n;
  assert_int_equal(xf_cursor_line(&c, &line, &n), XF_OK);
  assert_int_equal(n, 3);
  assert_memory_equal(line, "a,b", 3);
  assert_int_equal(xf_cursor_line(&c, &line, &n), XF_OK);
  assert_int_equal(n, 1);
  assert_int_equal(xf_cursor_line(&c, &line, &n), XF_OK);
  assert_int_equal(n, 4);
  assert_int_equal(xf_cursor_line(&c, &line, &n), XF_ENOENT);
}

static void rng_repeats_for_a_seed_and_differs_across_streams(void **state) {
  (void)state;
  xf_rng a, b, c;
  xf_rng_seed(&a, 42, 0);
  xf_rng_seed(&b, 42, 0);
  xf_rng_seed(&c, 42, 1);
  int same_stream_equal = 1, other_stream_equal = 1;
  for (int i = 0; i < 100; i++) {
    uint64_t x = xf_rng_next(&a), y = xf_rng_next(&b), z = xf_rng_next(&c);
    same_stream_equal &= x == y;
    other_stream_equal &= x == z;
  }
  assert_true(same_stream_equal);
  assert_false(other_stream_equal);
}

static void rng_distributions_have_the_right_moments(void **state) {
  (void)state;
  xf_rng r;
  xf_rng_seed(&r, 7, 3);
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0, sg = 0;
  for (int i = 0; i < n; i++) {
    su += xf_rng_uniform(&r);
    double z = xf_rng_normal(&r);
    sn += z;
    sn2 += z * z;
    sg += xf_rng_gamma(&r, 0.5);
  }
  /* Five standard errors: fails by chance with probability below 1e-6. */
  assert_true(fabs(su / n - 0.5) < 5 * sqrt(1.0 / 12 / n));
  assert_true(fabs(sn / n) < 5 * sqrt(1.0 / n));
  assert_true(fabs(sn2 / n - 1.0) < 5 * sqrt(2.0 / n));
  assert_true(fabs(sg / n - 0.5) < 5 * sqrt(0.5 / n));
  uint64_t counts[3] = {0};
  for (int i = 0; i < 30000; i++) counts[xf_rng_below(&r, 3)]++;
  for (int i = 0; i < 3; i++) assert_true(counts[i] > 9500 && counts[i] < 10500);
}

static void digest_matches_blake2b_known_answer(void **state) {
  (void)state;
  assert_int_equal(xf_crypto_init(), XF_OK);
  /* BLAKE2b-256 of the empty string (RFC 7693 parameters, 32-byte output). */
  xf_digest d;
  xf_digest_buf("", 0, &d);
  char hex[XF_DIGEST_HEX];
  xf_digest_hex(&d, hex);
  assert_string_equal(hex, "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8");
  xf_digest p;
  assert_int_equal(xf_digest_parse(hex, &p), XF_OK);
  assert_memory_equal(p.bytes, d.bytes, XF_DIGEST_BYTES);
  assert_int_equal(xf_digest_parse("zz", &p), XF_EFORMAT);
  /* Streaming equals one-shot. */
  xf_digest_ctx ctx;
  xf_digest_init(&ctx);
  xf_digest_update(&ctx, "ab", 2);
  xf_digest_update(&ctx, "c", 1);
  xf_digest s, o;
  xf_digest_final(&ctx, &s);
  xf_digest_buf("abc", 3, &o);
  assert_memory_equal(s.bytes, o.bytes, XF_DIGEST_BYTES);
}

static void text_append_joins_clauses_and_cuts_at_the_end(void **state) {
  (void)state;
  char buf[16] = "";
  xf_text_append(buf, sizeof(buf), "a %d", 1);
  assert_string_equal(buf, "a 1");
  xf_text_append(buf, sizeof(buf), "%s", "b");
  assert_string_equal(buf, "a 1; b");
  xf_text_append(buf, sizeof(buf), "%s", "a long clause");
  assert_string_equal(buf, "a 1; b; a long ");
  xf_text_append(buf, sizeof(buf), "%s", "more");
  assert_string_equal(buf, "a 1; b; a long ");
}

static void text_distance_counts_edits_and_swaps(void **state) {
  (void)state;
  assert_int_equal(xf_text_distance("job", "job"), 0);
  assert_int_equal(xf_text_distance("jbo", "job"), 1);      /* a swap is one edit */
  assert_int_equal(xf_text_distance("lsit", "list"), 1);
  assert_int_equal(xf_text_distance("rounsd", "rounds"), 1);
  assert_int_equal(xf_text_distance("", "abc"), 3);
  assert_int_equal(xf_text_distance("kitten", "sitting"), 3);
  char longer[XF_TEXT_WORD_MAX + 2];
  memset(longer, 'a', sizeof(longer) - 1);
  longer[sizeof(longer) - 1] = '\0';
  assert_true(xf_text_distance(longer, "a") == SIZE_MAX);
}

static void text_nearest_suggests_close_words_only(void **state) {
  (void)state;
  static const char *const verbs[] = {"submit", "status", "list", "watch", "cancel"};
  xf_text_nearest n;
  xf_text_nearest_start(&n, "lsit");
  for (size_t i = 0; i < 5; i++) xf_text_nearest_offer(&n, verbs[i]);
  assert_string_equal(xf_text_nearest_best(&n), "list");
  xf_text_nearest_start(&n, "stauts");
  for (size_t i = 0; i < 5; i++) xf_text_nearest_offer(&n, verbs[i]);
  assert_string_equal(xf_text_nearest_best(&n), "status");
  /* Too far, too short to tell, or the word itself: no suggestion. */
  const char *const typed[] = {"frobnicate", "ls", "list"};
  for (size_t t = 0; t < 3; t++) {
    xf_text_nearest_start(&n, typed[t]);
    for (size_t i = 0; i < 5; i++) xf_text_nearest_offer(&n, verbs[i]);
    assert_null(xf_text_nearest_best(&n));
  }
}

static void log_json_line_escapes_and_keeps_numbers(void **state) {
  (void)state;
  char out[1024];
  size_t n = xf_log_json_line(out, sizeof(out), "2026-01-01T00:00:00.000Z", "info", "round_done",
                              "job=7 loss=0.25 neg=-3e-2 name=\"a \\\"b\\\" c\" id=007 "
                              "path=C:\\x tab=a\tb ctl=\x01 utf=r\xc3\xa9gion "
                              "bad=\xff x=1.e3 inf=inf loose words");
  assert_int_equal(n, strlen(out));
  assert_string_equal(out, "{\"ts\":\"2026-01-01T00:00:00.000Z\",\"level\":\"info\","
                           "\"event\":\"round_done\",\"job\":7,\"loss\":0.25,\"neg\":-3e-2,"
                           "\"name\":\"a \\\\\\\"b\\\\\\\" c\",\"id\":\"007\","
                           "\"path\":\"C:\\\\x\",\"tab\":\"a\\tb\",\"ctl\":\"\\u0001\","
                           "\"utf\":\"r\xc3\xa9gion\",\"bad\":\"\\ufffd\",\"x\":\"1.e3\","
                           "\"inf\":\"inf\",\"text\":\"loose words\"}");
}

static void log_json_line_stays_an_object_when_cut(void **state) {
  (void)state;
  char out[64];
  size_t n = xf_log_json_line(out, sizeof(out), "t", "warn", "e",
                              "a=1 b=\"a long value that does not fit in the line at all\"");
  assert_int_equal(n, strlen(out));
  assert_string_equal(out, "{\"ts\":\"t\",\"level\":\"warn\",\"event\":\"e\",\"a\":1}");
}

static void log_format_refuses_unknown_values_naming_the_accepted_ones(void **state) {
  (void)state;
  xf_errctx err;
  xf_errctx_clear(&err);
  setenv("XF_LOG_FORMAT", "yaml", 1);
  assert_int_equal(xf_log_format_from_env(&err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "'yaml'"));
  assert_non_null(strstr(err.msg, "kv"));
  assert_non_null(strstr(err.msg, "json"));
  setenv("XF_LOG_FORMAT", "json", 1);
  assert_int_equal(xf_log_format_from_env(&err), XF_OK);
  unsetenv("XF_LOG_FORMAT");
  assert_int_equal(xf_log_format_from_env(&err), XF_OK);
}

static void log_level_parses_names(void **state) {
  (void)state;
  xf_log_level l;
  assert_int_equal(xf_log_parse_level("warn", &l), XF_OK);
  assert_int_equal(l, XF_LOG_WARN);
  assert_int_equal(xf_log_parse_level("loud", &l), XF_EINVAL);
}

static void address_parse_takes_names_ipv4_and_bracketed_ipv6(void **state) {
  (void)state;
  char host[XF_HOST_MAX + 1];
  uint16_t port = 0;
  xf_errctx err = {0};
  assert_int_equal(xf_address_parse("agg-eu.example.org:7443", host, sizeof(host), &port, &err),
                   XF_OK);
  assert_string_equal(host, "agg-eu.example.org");
  assert_int_equal(port, 7443);
  assert_int_equal(xf_address_parse("[::1]:9", host, sizeof(host), &port, &err), XF_OK);
  assert_string_equal(host, "::1");
  assert_int_equal(port, 9);
  assert_int_equal(xf_address_parse("localhost:1", host, sizeof(host), &port, &err), XF_OK);
  assert_string_equal(host, "localhost"); /* a name, left to the resolver */
}

static void address_parse_refuses_port_zero_unless_a_listener_asks(void **state) {
  (void)state;
  char host[XF_HOST_MAX + 1];
  uint16_t port = 1;
  xf_errctx err = {0};
  assert_int_equal(xf_address_parse("127.0.0.1:0", host, sizeof(host), &port, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "from 1 to 65535"));
  assert_int_equal(xf_address_parse_as("127.0.0.1:0", XF_ADDRESS_PORT0, host, sizeof(host), &port,
                                       &err),
                   XF_OK);
  assert_int_equal(port, 0);
  assert_int_equal(xf_address_parse_as("127.0.0.1:65536", XF_ADDRESS_PORT0, host, sizeof(host),
                                       &port, &err),
                   XF_EINVAL);
  assert_non_null(strstr(err.msg, "from 0 to 65535"));
}

static void address_parse_reads_localhost_as_loopback_when_asked(void **state) {
  (void)state;
  char host[XF_HOST_MAX + 1];
  uint16_t port = 0;
  xf_errctx err = {0};
  assert_int_equal(xf_address_parse_as("localhost:7443", XF_ADDRESS_LOOPBACK, host, sizeof(host),
                                       &port, &err),
                   XF_OK);
  assert_string_equal(host, "127.0.0.1");
  assert_int_equal(port, 7443);
}

static void address_parse_names_what_is_wrong(void **state) {
  (void)state;
  char host[XF_HOST_MAX + 1];
  uint16_t port = 0;
  xf_errctx err = {0};
  assert_int_equal(xf_address_parse("7443", host, sizeof(host), &port, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "is not HOST:PORT"));
  assert_int_equal(xf_address_parse("::1:7443", host, sizeof(host), &port, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "in brackets"));
  assert_int_equal(xf_address_parse("a_b:7443", host, sizeof(host), &port, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "only letters, digits"));
  assert_int_equal(xf_address_parse("host:80x", host, sizeof(host), &port, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "the port must be a number"));
  char small[4];
  assert_int_equal(xf_address_parse("abcd:1", small, sizeof(small), &port, &err), XF_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_error_has_a_name_and_message),
      cmocka_unit_test(error_context_names_file_field_and_fix),
      cmocka_unit_test(wrapped_error_says_each_part_once),
      cmocka_unit_test(allocation_fails_on_the_nth_call),
      cmocka_unit_test(cursor_refuses_reads_past_the_end),
      cmocka_unit_test(cursor_splits_lines_with_and_without_cr),
      cmocka_unit_test(rng_repeats_for_a_seed_and_differs_across_streams),
      cmocka_unit_test(rng_distributions_have_the_right_moments),
      cmocka_unit_test(digest_matches_blake2b_known_answer),
      cmocka_unit_test(log_level_parses_names),
      cmocka_unit_test(log_json_line_escapes_and_keeps_numbers),
      cmocka_unit_test(log_json_line_stays_an_object_when_cut),
      cmocka_unit_test(log_format_refuses_unknown_values_naming_the_accepted_ones),
      cmocka_unit_test(text_append_joins_clauses_and_cuts_at_the_end),
      cmocka_unit_test(text_distance_counts_edits_and_swaps),
      cmocka_unit_test(text_nearest_suggests_close_words_only),
      cmocka_unit_test(address_parse_takes_names_ipv4_and_bracketed_ipv6),
      cmocka_unit_test(address_parse_refuses_port_zero_unless_a_listener_asks),
      cmocka_unit_test(address_parse_reads_localhost_as_loopback_when_asked),
      cmocka_unit_test(address_parse_names_what_is_wrong),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
