/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the site's dataset module: IDX and CSV validation on crafted files,
 * write/read round trips, dataset directories, splits and their shards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "base/alloc.h"
#include "base/result.h"
#include "data/dataset.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* ---- scratch files ------------------------------------------------------------ */

typedef struct scratch {
  char dir[256];
} scratch;


/* Every test gets a fresh directory; teardown removes it even when the test
 * failed. */
static int scratch_setup(void **state) {
  scratch *s = calloc(1, sizeof(*s));
  if (!s) return -1;
  const char *base = getenv("TMPDIR");
  snprintf(s->dir, sizeof(s->dir), "%s/xf-dataset-XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(s->dir)) {
    free(s);
    return -1;
  }
  *state = s;
  return 0;
}

static int scratch_teardown(void **state) {
  scratch *s = *state;
  xf_alloc_fail_reset();
  if (s) xf_test_remove_tree(s->dir);
  free(s);
  return 0;
}

static const char *path_in(const scratch *s, const char *name) {
  static char bufs[4][512];
  static int next;
  char *b = bufs[next++ % 4];
  snprintf(b, sizeof(bufs[0]), "%s/%s", s->dir, name);
  return b;
}

typedef struct bytes {
  uint8_t *p;
  size_t n, cap;
} bytes;

static void put(bytes *b, const void *d, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 64;
    b->p = realloc(b->p, b->cap);
    assert_non_null(b->p);
  }
  if (n) memcpy(b->p + b->n, d, n);
  b->n += n;
}

static void put_u32be(bytes *b, uint32_t v) {
  uint8_t q[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
  put(b, q, 4);
}

static void put_str(bytes *b, const char *s) { put(b, s, strlen(s)); }

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_true(fputs(text, f) >= 0);
  assert_int_equal(fclose(f), 0);
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

/* An IDX image file of n images of h x w with pixel (i * 7 + seed) & 0xff. */
static bytes idx_images(uint32_t n, uint32_t h, uint32_t w, uint8_t seed) {
  bytes b = {0};
  put(&b, "\x00\x00\x08\x03", 4);
  put_u32be(&b, n);
  put_u32be(&b, h);
  put_u32be(&b, w);
  for (uint64_t i = 0; i < (uint64_t)n * h * w; i++) {
    uint8_t px = (uint8_t)((i * 7 + seed) & 0xff);
    put(&b, &px, 1);
  }
  return b;
}

/* An IDX label file with labels i % classes. */
static bytes idx_labels(uint32_t n, uint32_t classes) {
  bytes b = {0};
  put(&b, "\x00\x00\x08\x01", 4);
  put_u32be(&b, n);
  for (uint32_t i = 0; i < n; i++) {
    uint8_t y = (uint8_t)(i % classes);
    put(&b, &y, 1);
  }
  return b;
}

static bytes gzip_of(const bytes *in) {
  z_stream zs;
  memset(&zs, 0, sizeof(zs));
  assert_int_equal(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  bytes out = {0};
  out.cap = deflateBound(&zs, in->n) + 64;
  out.p = malloc(out.cap);
  assert_non_null(out.p);
  zs.next_in = in->p;
  zs.avail_in = (uInt)in->n;
  zs.next_out = out.p;
  zs.avail_out = (uInt)out.cap;
  assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.n = out.cap - zs.avail_out;
  deflateEnd(&zs);
  return out;
}

static void bytes_free(bytes *b) {
  free(b->p);
  memset(b, 0, sizeof(*b));
}

static void assert_msg_contains(const xf_errctx *err, const char *needle) {
  if (!strstr(err->msg, needle)) fail_msg("message '%s' lacks '%s'", err->msg, needle);
}

/* Parses images and labels and expects code, with the error naming `file`. */
static void expect_idx_error(const bytes *img, const bytes *lbl, xf_err code, const char *file,
                             const char *needle) {
  xf_dataset ds;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_idx_parse(img->p, img->n, "train-images-idx3-ubyte.gz", lbl->p, lbl->n,
                           "train-labels-idx1-ubyte.gz", &ds, &err);
  if (rc != code)
    fail_msg("got %s (%s), expected %s", xf_err_name(rc), err.msg, xf_err_name(code));
  assert_string_equal(err.file, file);
  assert_msg_contains(&err, needle);
  assert_null(ds.x);
  assert_null(ds.y);
  assert_int_equal(ds.n, 0);
}

/* ---- IDX ------------------------------------------------------------------------ */

static void idx_plain_and_gzip_parse_alike(void **state) {
  (void)state;
  bytes img = idx_images(5, 4, 3, 1), lbl = idx_labels(5, 3);
  bytes gimg = gzip_of(&img), glbl = gzip_of(&lbl);
  xf_dataset a, b;
  assert_int_equal(xf_idx_parse(img.p, img.n, NULL, lbl.p, lbl.n, NULL, &a, NULL), XF_OK);
  assert_int_equal(xf_idx_parse(gimg.p, gimg.n, NULL, glbl.p, glbl.n, NULL, &b, NULL), XF_OK);
  assert_int_equal(a.n, 5);
  assert_int_equal(a.h, 4);
  assert_int_equal(a.w, 3);
  assert_int_equal(a.c, 1);
  assert_int_equal(a.features, 12);
  assert_int_equal(a.classes, 3);
  assert_memory_equal(a.x, b.x, 60 * sizeof(float));
  assert_memory_equal(a.y, b.y, 5 * sizeof(int32_t));
  /* Pixels are byte / 255 in NHWC order. */
  assert_true(a.x[0] == 1.0f / 255.0f);
  assert_true(a.x[13] == (float)((13 * 7 + 1) & 0xff) / 255.0f);
  assert_int_equal(a.y[4], 1);
  xf_dataset_free(&a);
  xf_dataset_free(&b);
  /* Concatenated gzip members read as one stream, as gunzip does. */
  bytes head = {0}, tail = {0};
  put(&head, img.p, 20);
  put(&tail, img.p + 20, img.n - 20);
  bytes g1 = gzip_of(&head), g2 = gzip_of(&tail), cat = {0};
  put(&cat, g1.p, g1.n);
  put(&cat, g2.p, g2.n);
  assert_int_equal(xf_idx_parse(cat.p, cat.n, NULL, lbl.p, lbl.n, NULL, &a, NULL), XF_OK);
  assert_int_equal(a.n, 5);
  xf_dataset_free(&a);
  bytes_free(&head);
  bytes_free(&tail);
  bytes_free(&g1);
  bytes_free(&g2);
  bytes_free(&cat);
  bytes_free(&img);
  bytes_free(&lbl);
  bytes_free(&gimg);
  bytes_free(&glbl);
}

static void idx_round_trips_through_the_gzip_writer(void **state) {
  scratch *s = *state;
  xf_dataset ds;
  assert_int_equal(xf_dataset_alloc(&ds, 9, 5, 4, 1, 7, NULL), XF_OK);
  for (uint32_t i = 0; i < 9 * 20; i++) ds.x[i] = (float)((i * 31) % 256) / 255.0f;
  for (uint32_t i = 0; i < 9; i++) ds.y[i] = (int32_t)(i % 7);
  const char *ip = path_in(s, "img.gz"), *lp = path_in(s, "lbl.gz");
  assert_int_equal(xf_idx_write(ip, lp, &ds, NULL), XF_OK);
  FILE *f = fopen(ip, "rb");
  assert_non_null(f);
  uint8_t magic[2];
  assert_int_equal(fread(magic, 1, 2, f), 2);
  fclose(f);
  assert_int_equal(magic[0], 0x1f); /* written compressed */
  assert_int_equal(magic[1], 0x8b);
  xf_dataset back;
  assert_int_equal(xf_idx_read(ip, lp, &back, NULL), XF_OK);
  assert_int_equal(back.n, 9);
  assert_int_equal(back.h, 5);
  assert_int_equal(back.w, 4);
  assert_int_equal(back.classes, 7);
  assert_memory_equal(back.x, ds.x, 9 * 20 * sizeof(float));
  assert_memory_equal(back.y, ds.y, 9 * sizeof(int32_t));
  xf_dataset_free(&back);
  /* Four dimensions carry channels. */
  xf_dataset rgb;
  assert_int_equal(xf_dataset_alloc(&rgb, 2, 2, 2, 3, 2, NULL), XF_OK);
  for (uint32_t i = 0; i < 24; i++) rgb.x[i] = (float)i / 255.0f;
  rgb.y[1] = 1;
  assert_int_equal(xf_idx_write(ip, lp, &rgb, NULL), XF_OK);
  assert_int_equal(xf_idx_read(ip, lp, &back, NULL), XF_OK);
  assert_int_equal(back.c, 3);
  assert_memory_equal(back.x, rgb.x, 24 * sizeof(float));
  xf_dataset_free(&back);
  /* Values that are not bytes / 255 are refused, not silently clipped. */
  rgb.x[5] = 1.5f;
  xf_errctx err;
  assert_int_equal(xf_idx_write(ip, lp, &rgb, &err), XF_ERANGE);
  assert_msg_contains(&err, "outside [0, 1]");
  xf_dataset_free(&rgb);
  xf_dataset_free(&ds);
}

static void idx_rejects_wrong_magic(void **state) {
  (void)state;
  bytes lbl = idx_labels(3, 2), zip = {0};
  put_str(&zip, "PK\x03\x04 this is a zip archive");
  expect_idx_error(&zip, &lbl, XF_EFORMAT, "train-images-idx3-ubyte.gz",
                   "not an IDX image file: it starts with 50 4b 03 04");
  /* A label file given where the images belong, and the reverse. */
  expect_idx_error(&lbl, &lbl, XF_EFORMAT, "train-images-idx3-ubyte.gz",
                   "is this a label file?");
  bytes img = idx_images(3, 2, 2, 0);
  expect_idx_error(&img, &img, XF_EFORMAT, "train-labels-idx1-ubyte.gz",
                   "is this an image file?");
  bytes tiny = {0};
  put(&tiny, "\x00\x00", 2);
  expect_idx_error(&tiny, &lbl, XF_ETRUNCATED, "train-images-idx3-ubyte.gz", "too short");
  bytes_free(&tiny);
  bytes_free(&zip);
  bytes_free(&img);
  bytes_free(&lbl);
}

static void idx_rejects_unsupported_type_codes(void **state) {
  (void)state;
  bytes img = idx_images(3, 2, 2, 0), lbl = idx_labels(3, 2);
  img.p[2] = 0x0D; /* float32: a real IDX type xfed does not read */
  expect_idx_error(&img, &lbl, XF_EUNSUPPORTED, "train-images-idx3-ubyte.gz",
                   "IDX element type 0x0D (32-bit float) is not supported");
  img.p[2] = 0x42; /* no IDX type at all */
  expect_idx_error(&img, &lbl, XF_EFORMAT, "train-images-idx3-ubyte.gz",
                   "0x42 is not an IDX element type");
  bytes_free(&img);
  bytes_free(&lbl);
}

static void idx_rejects_truncated_payload_and_header(void **state) {
  (void)state;
  bytes lbl = idx_labels(60000, 10), img = {0};
  put(&img, "\x00\x00\x08\x03", 4);
  put_u32be(&img, 60000);
  put_u32be(&img, 28);
  put_u32be(&img, 28);
  uint8_t zeros[1200] = {0};
  put(&img, zeros, sizeof(zeros));
  expect_idx_error(&img, &lbl, XF_ETRUNCATED, "train-images-idx3-ubyte.gz",
                   "header says 60000 images of 28x28 (47040000 bytes) but 1200 bytes follow: "
                   "the file is truncated; download it again");
  img.n = 10; /* cut inside the dimensions */
  expect_idx_error(&img, &lbl, XF_ETRUNCATED, "train-images-idx3-ubyte.gz",
                   "the header is cut short");
  bytes short_labels = idx_labels(5, 2);
  short_labels.n -= 2;
  bytes five = idx_images(5, 2, 2, 0);
  expect_idx_error(&five, &short_labels, XF_ETRUNCATED, "train-labels-idx1-ubyte.gz",
                   "header says 5 labels (5 bytes) but 3 bytes follow");
  bytes_free(&five);
  bytes_free(&short_labels);
  bytes_free(&img);
  bytes_free(&lbl);
}

static void idx_rejects_trailing_bytes(void **state) {
  (void)state;
  bytes img = idx_images(4, 3, 3, 9), lbl = idx_labels(4, 2);
  put_str(&img, "junk!");
  expect_idx_error(&img, &lbl, XF_EFORMAT, "train-images-idx3-ubyte.gz",
                   "(36 bytes) but 41 bytes follow: 5 bytes of trailing data");
  put_str(&lbl, "x");
  img.n -= 5;
  expect_idx_error(&img, &lbl, XF_EFORMAT, "train-labels-idx1-ubyte.gz", "trailing data");
  bytes_free(&img);
  bytes_free(&lbl);
}

static void idx_rejects_zero_and_absurd_dimensions(void **state) {
  (void)state;
  bytes lbl = idx_labels(3, 2), img = {0};
  put(&img, "\x00\x00\x08\x03", 4);
  put_u32be(&img, 3);
  put_u32be(&img, 0);
  put_u32be(&img, 28);
  expect_idx_error(&img, &lbl, XF_ERANGE, "train-images-idx3-ubyte.gz",
                   "dimension 2 (rows) is 0");
  bytes_free(&img);
  put(&img, "\x00\x00\x08\x03", 4);
  put_u32be(&img, 4000000000u);
  put_u32be(&img, 65536);
  put_u32be(&img, 65536);
  expect_idx_error(&img, &lbl, XF_ERANGE, "train-images-idx3-ubyte.gz",
                   "header says 4000000000 images of 65536x65536, more than the 1073741824 "
                   "values");
  bytes empty_labels = {0};
  put(&empty_labels, "\x00\x00\x08\x01\x00\x00\x00\x00", 8);
  bytes three = idx_images(3, 2, 2, 0);
  expect_idx_error(&three, &empty_labels, XF_ERANGE, "train-labels-idx1-ubyte.gz",
                   "holds no labels");
  bytes_free(&three);
  bytes_free(&empty_labels);
  bytes_free(&img);
  bytes_free(&lbl);
}

static void idx_rejects_corrupt_and_cut_gzip(void **state) {
  (void)state;
  bytes img = idx_images(50, 8, 8, 3), lbl = idx_labels(50, 5);
  bytes gz = gzip_of(&img);
  /* Flipped bits in the compressed body: a bad block or a CRC mismatch. */
  bytes bad = {0};
  put(&bad, gz.p, gz.n);
  for (size_t i = 20; i < 40; i++) bad.p[i] ^= 0x5a;
  expect_idx_error(&bad, &lbl, XF_EINTEGRITY, "train-images-idx3-ubyte.gz",
                   "the gzip data is corrupt");
  /* A CRC that does not match the (intact) data. */
  memcpy(bad.p, gz.p, gz.n);
  bad.p[gz.n - 6] ^= 0xff;
  expect_idx_error(&bad, &lbl, XF_EINTEGRITY, "train-images-idx3-ubyte.gz", "corrupt");
  /* A download cut short. */
  bad.n = gz.n - 10;
  memcpy(bad.p, gz.p, gz.n);
  expect_idx_error(&bad, &lbl, XF_ETRUNCATED, "train-images-idx3-ubyte.gz",
                   "the gzip stream ends early");
  /* Junk after the last member. */
  bad.n = gz.n;
  put_str(&bad, "garbage");
  expect_idx_error(&bad, &lbl, XF_EFORMAT, "train-images-idx3-ubyte.gz",
                   "7 bytes of trailing data after the gzip stream");
  bytes_free(&bad);
  bytes_free(&gz);
  bytes_free(&img);
  bytes_free(&lbl);
}

static void idx_rejects_label_and_image_count_mismatch(void **state) {
  (void)state;
  bytes img = idx_images(10, 2, 2, 0), lbl = idx_labels(9, 3);
  expect_idx_error(&img, &lbl, XF_EFORMAT, "train-labels-idx1-ubyte.gz",
                   "has 9 labels but train-images-idx3-ubyte.gz has 10 images: the two files "
                   "do not belong together");
  bytes_free(&img);
  bytes_free(&lbl);
}

/* Peak resident memory of this process, in bytes. */
static uint64_t peak_rss(void) {
  struct rusage ru;
  assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
  return (uint64_t)ru.ru_maxrss * 1024; /* kilobytes on Linux */
}

/* 256 MiB of zeros behind a valid header of 10 images of 28x28 compress to
 * a few hundred kilobytes. The reader inflates no further than the 7856
 * bytes the header declares and refuses the file, naming that size; it
 * used to inflate all of it (430 MB of memory) before refusing. Runs first
 * in its group, so that the peak memory it checks is its own. */
static void idx_gzip_bomb_is_refused_at_the_declared_size(void **state) {
  scratch *s = *state;
  const char *img = path_in(s, "train-images-idx3-ubyte.gz");
  const char *lbl = path_in(s, "train-labels-idx1-ubyte.gz");
  gzFile gz = gzopen(img, "wb6");
  assert_non_null(gz);
  uint8_t hdr[16] = {0, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 28, 0, 0, 0, 28};
  assert_int_equal(gzwrite(gz, hdr, sizeof(hdr)), (int)sizeof(hdr));
  static uint8_t zeros[1 << 20];
  for (int i = 0; i < 256; i++)
    assert_int_equal(gzwrite(gz, zeros, sizeof(zeros)), (int)sizeof(zeros));
  assert_int_equal(gzclose(gz), Z_OK);
  bytes labels = idx_labels(10, 3), glabels = gzip_of(&labels);
  write_bytes(lbl, glabels.p, glabels.n);
  struct stat st;
  assert_int_equal(stat(img, &st), 0);
  assert_true(st.st_size < 4 * 1024 * 1024);

  uint64_t before = peak_rss();
  xf_dataset ds;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_idx_read(img, lbl, &ds, &err), XF_ERANGE);
  assert_null(ds.x);
  assert_string_equal(err.file, img);
  assert_msg_contains(&err, "inflates to more than the 7856 bytes its IDX header declares");
  /* O(declared size), not O(what the stream holds): the peak grows by far
   * less than the 256 MiB the old reader held. */
  uint64_t grew = peak_rss() - before;
  if (grew > 64u * 1024 * 1024)
    fail_msg("reading the bomb raised peak memory by %llu bytes", (unsigned long long)grew);

  /* The same bytes in memory are refused the same way. */
  uint8_t *raw = malloc((size_t)st.st_size);
  assert_non_null(raw);
  FILE *f = fopen(img, "rb");
  assert_non_null(f);
  assert_int_equal(fread(raw, 1, (size_t)st.st_size, f), (size_t)st.st_size);
  fclose(f);
  xf_errctx_clear(&err);
  assert_int_equal(xf_idx_parse(raw, (size_t)st.st_size, "bomb.gz", glabels.p, glabels.n,
                                "labels.gz", &ds, &err),
                   XF_ERANGE);
  assert_string_equal(err.file, "bomb.gz");
  free(raw);
  bytes_free(&labels);
  bytes_free(&glabels);
}

static void idx_parser_frees_everything_when_allocations_fail(void **state) {
  (void)state;
  bytes img = idx_images(40, 6, 6, 2), lbl = idx_labels(40, 4);
  bytes gimg = gzip_of(&img), glbl = gzip_of(&lbl);
  xf_err rc = XF_ENOMEM;
  long n = 0;
  for (; rc == XF_ENOMEM && n < 1000; n++) {
    xf_dataset ds;
    xf_errctx err;
    xf_alloc_fail_after(n);
    rc = xf_idx_parse(gimg.p, gimg.n, "img.gz", glbl.p, glbl.n, "lbl.gz", &ds, &err);
    xf_alloc_fail_reset();
    if (rc == XF_ENOMEM) {
      assert_null(ds.x); /* nothing handed out; ASan finds anything leaked */
      assert_int_equal(err.code, XF_ENOMEM);
      assert_true(err.file[0] != '\0');
    } else {
      assert_int_equal(rc, XF_OK);
      assert_int_equal(ds.n, 40);
      xf_dataset_free(&ds);
    }
  }
  assert_int_equal(rc, XF_OK);
  assert_true(n > 3); /* inflate state, output, features and labels were each failed */
  bytes_free(&img);
  bytes_free(&lbl);
  bytes_free(&gimg);
  bytes_free(&glbl);
}

/* ---- CSV ------------------------------------------------------------------------ */

static xf_err csv(const char *text, const xf_csv_options *opt, xf_dataset *ds, xf_errctx *err) {
  xf_errctx_clear(err);
  return xf_csv_parse(text, strlen(text), "data.csv", opt, ds, err);
}

static void expect_csv_error(const char *text, const xf_csv_options *opt, xf_err code,
                             const char *line) {
  xf_dataset ds;
  xf_errctx err;
  xf_err rc = csv(text, opt, &ds, &err);
  char buf[1200];
  xf_errctx_format(&err, buf, sizeof(buf));
  if (rc != code) fail_msg("got %s (%s), expected %s", xf_err_name(rc), buf, xf_err_name(code));
  if (strcmp(buf, line) != 0) fail_msg("error '%s', expected '%s'", buf, line);
  assert_null(ds.x);
}

static void csv_detects_header_and_tolerates_crlf_and_blank_lines(void **state) {
  (void)state;
  xf_dataset ds;
  xf_errctx err;
  assert_int_equal(csv("a,b,label\r\n1,2,0\r\n\r\n   \r\n3.5, -4e1 ,2\r\n", NULL, &ds, &err),
                   XF_OK);
  assert_int_equal(ds.n, 2);
  assert_int_equal(ds.features, 2);
  assert_int_equal(ds.h, 1);
  assert_int_equal(ds.w, 1);
  assert_int_equal(ds.c, 2);
  assert_int_equal(ds.classes, 3);
  assert_true(ds.x[0] == 1.0f && ds.x[1] == 2.0f && ds.x[2] == 3.5f && ds.x[3] == -40.0f);
  assert_int_equal(ds.y[0], 0);
  assert_int_equal(ds.y[1], 2);
  xf_dataset_free(&ds);
  /* No header: every line is data; no final newline; a byte order mark. */
  assert_int_equal(csv("\xEF\xBB\xBF" "1,2,1\n3,4,0", NULL, &ds, &err), XF_OK);
  assert_int_equal(ds.n, 2);
  assert_true(ds.x[0] == 1.0f);
  assert_int_equal(ds.classes, 2);
  xf_dataset_free(&ds);
  /* Quoted fields, with a doubled quote inside. */
  assert_int_equal(csv("\"x \"\"1\"\"\",\"label\"\n \"5\" , 7\n", NULL, &ds, &err), XF_OK);
  assert_int_equal(ds.n, 1);
  assert_true(ds.x[0] == 5.0f);
  assert_int_equal(ds.y[0], 7);
  xf_dataset_free(&ds);
}

static void csv_finds_the_label_column_by_name_or_number(void **state) {
  (void)state;
  xf_dataset ds;
  xf_errctx err;
  xf_csv_options by_name = {.label_name = "species"};
  assert_int_equal(csv("w,species,h\n1.5,2,3\n4,0,6\n", &by_name, &ds, &err), XF_OK);
  assert_int_equal(ds.features, 2);
  assert_true(ds.x[0] == 1.5f && ds.x[1] == 3.0f);
  assert_int_equal(ds.y[0], 2);
  xf_dataset_free(&ds);
  xf_csv_options first = {.label_column = 1};
  assert_int_equal(csv("1,2,3\n0,5,6\n", &first, &ds, &err), XF_OK);
  assert_int_equal(ds.y[0], 1);
  assert_true(ds.x[0] == 2.0f);
  xf_dataset_free(&ds);
  expect_csv_error("a,b\n1,2\n", &by_name, XF_EINVAL,
                   "data.csv: line 1: the header has no column named 'species' (invalid "
                   "argument)");
  expect_csv_error("1,2\n", &by_name, XF_EINVAL,
                   "data.csv: line 1: the label column is named 'species' but the file has no "
                   "header line (its first line is all numbers); name the label column by "
                   "number instead (invalid argument)");
  xf_csv_options ninth = {.label_column = 9};
  expect_csv_error("1,2\n", &ninth, XF_EINVAL,
                   "data.csv: line 1: column 9 is named as the label column but the file has 2 "
                   "columns (invalid argument)");
}

static void csv_names_line_and_column_of_a_non_number(void **state) {
  (void)state;
  char text[1024] = "f1,f2,f3,f4,label\n";
  for (int line = 2; line < 17; line++) strcat(text, "1,2,3,4,0\n");
  strcat(text, "1,2,3,abc,0\n");
  expect_csv_error(text, NULL, XF_EFORMAT,
                   "data.csv: line 17, column 4: 'abc' is not a number (malformed input)");
  expect_csv_error("a,b\n1,\n", NULL, XF_EFORMAT,
                   "data.csv: line 2, column 2: label '' is not a whole number in [0, 65535] "
                   "(malformed input)");
  /* Non-finite values are not numbers (on a first line they make a header). */
  expect_csv_error("a,b,c\n1,nan,0\n", NULL, XF_EFORMAT,
                   "data.csv: line 2, column 2: 'nan' is not a number (malformed input)");
  expect_csv_error("a,b,c\n1,1e999,0\n", NULL, XF_EFORMAT,
                   "data.csv: line 2, column 2: '1e999' is not a number (malformed input)");
  expect_csv_error("1,1e300,0\n", NULL, XF_ERANGE,
                   "data.csv: line 1, column 2: '1e300' is beyond the range of a 32-bit float "
                   "(value out of range)");
  expect_csv_error("1,\"2,0\n", NULL, XF_EFORMAT,
                   "data.csv: line 1, column 2: a quoted field is not closed on its line "
                   "(quoted fields cannot span lines) (malformed input)");
}

static void csv_rejects_ragged_rows(void **state) {
  (void)state;
  expect_csv_error("a,b,c\n1,2,0\n1,2\n", NULL, XF_EFORMAT,
                   "data.csv: line 3: 2 fields but line 1 has 3: every line must have the same "
                   "number of fields (malformed input)");
  expect_csv_error("1,2,0\n\n1,2,0,4\n", NULL, XF_EFORMAT,
                   "data.csv: line 3: more than the 3 fields of line 1: every line must have "
                   "the same number of fields (malformed input)");
}

static void csv_rejects_labels_that_are_not_small_whole_numbers(void **state) {
  (void)state;
  expect_csv_error("1,-1\n", NULL, XF_EFORMAT,
                   "data.csv: line 1, column 2: label '-1' is not a whole number in [0, 65535] "
                   "(malformed input)");
  expect_csv_error("1,2.5\n", NULL, XF_EFORMAT,
                   "data.csv: line 1, column 2: label '2.5' is not a whole number in [0, "
                   "65535] (malformed input)");
  expect_csv_error("1,65536\n", NULL, XF_EFORMAT,
                   "data.csv: line 1, column 2: label '65536' is not a whole number in [0, "
                   "65535] (malformed input)");
  xf_dataset ds;
  xf_errctx err;
  assert_int_equal(csv("1,65535\n2,3.0\n", NULL, &ds, &err), XF_OK);
  assert_int_equal(ds.classes, 65536);
  assert_int_equal(ds.y[1], 3);
  xf_dataset_free(&ds);
}

static void csv_rejects_empty_files_and_single_columns(void **state) {
  (void)state;
  expect_csv_error("", NULL, XF_EFORMAT, "data.csv: the file is empty: no data rows (malformed "
                                         "input)");
  expect_csv_error("\n\r\n", NULL, XF_EFORMAT,
                   "data.csv: the file is empty: no data rows (malformed input)");
  expect_csv_error("a,b,label\n", NULL, XF_EFORMAT,
                   "data.csv: only a header line: no data rows (malformed input)");
  expect_csv_error("label\n1\n", NULL, XF_EFORMAT,
                   "data.csv: line 1: 1 column: a dataset needs at least one feature column "
                   "and a label column, separated by commas (malformed input)");
}

static void csv_round_trips_through_the_writer(void **state) {
  scratch *s = *state;
  xf_dataset ds;
  assert_int_equal(xf_dataset_alloc(&ds, 3, 1, 1, 4, 5, NULL), XF_OK);
  for (uint32_t i = 0; i < 12; i++) ds.x[i] = (float)i / 3.0f - 1e-7f * (float)i;
  ds.x[5] = -1.0e30f;
  ds.y[0] = 4;
  const char *p = path_in(s, "rt.csv");
  assert_int_equal(xf_csv_write(p, &ds, NULL), XF_OK);
  xf_dataset back;
  assert_int_equal(xf_csv_read(p, NULL, &back, NULL), XF_OK);
  assert_int_equal(back.n, 3);
  assert_int_equal(back.features, 4);
  assert_memory_equal(back.x, ds.x, 12 * sizeof(float));
  assert_memory_equal(back.y, ds.y, 3 * sizeof(int32_t));
  xf_dataset_free(&back);
  xf_dataset_free(&ds);
}

static void csv_and_split_free_everything_when_allocations_fail(void **state) {
  (void)state;
  char text[4096] = "a,b,label\n";
  for (int i = 0; i < 150; i++) {
    char row[32];
    snprintf(row, sizeof(row), "%d,%d.5,%d\n", i, i, i % 4);
    strcat(text, row);
  }
  xf_err rc = XF_ENOMEM;
  long n = 0;
  for (; rc == XF_ENOMEM && n < 1000; n++) {
    xf_dataset ds;
    xf_alloc_fail_after(n);
    rc = xf_csv_parse(text, strlen(text), "data.csv", NULL, &ds, NULL);
    xf_alloc_fail_reset();
    if (rc == XF_ENOMEM) assert_null(ds.x);
    else xf_dataset_free(&ds);
  }
  assert_int_equal(rc, XF_OK);
  xf_dataset train, test;
  assert_int_equal(xf_csv_parse(text, strlen(text), "train.csv", NULL, &train, NULL), XF_OK);
  assert_int_equal(xf_csv_parse(text, strlen(text), "test.csv", NULL, &test, NULL), XF_OK);
  const char *schemes[] = {"iid", "dirichlet:1", "classes:2"};
  for (size_t i = 0; i < 3; i++) {
    xf_split_scheme sc;
    assert_int_equal(xf_split_scheme_parse(schemes[i], &sc, NULL), XF_OK);
    rc = XF_ENOMEM;
    for (n = 0; rc == XF_ENOMEM && n < 1000; n++) {
      xf_split sp;
      xf_alloc_fail_after(n);
      rc = xf_dataset_split(&train, &test, 3, &sc, 9, NULL, &sp, NULL);
      xf_alloc_fail_reset();
      if (rc == XF_ENOMEM) assert_null(sp.shards);
      else xf_split_free(&sp);
    }
    assert_int_equal(rc, XF_OK);
  }
  xf_dataset_free(&train);
  xf_dataset_free(&test);
}


/* ---- dataset directories ----------------------------------------------------------- */

static void write_idx_dir(const scratch *s, const char *sub, uint32_t ntrain, uint32_t ntest,
                          uint32_t h) {
  char dir[512];
  snprintf(dir, sizeof(dir), "%s/%s", s->dir, sub);
  mkdir(dir, 0777);
  bytes a = idx_images(ntrain, h, h, 1), b = idx_labels(ntrain, 4);
  bytes c = idx_images(ntest, 28, 28, 2), d = idx_labels(ntest, 4);
  bytes ga = gzip_of(&a), gb = gzip_of(&b);
  char p[600];
  snprintf(p, sizeof(p), "%s/train-images-idx3-ubyte.gz", dir);
  write_bytes(p, ga.p, ga.n);
  snprintf(p, sizeof(p), "%s/train-labels-idx1-ubyte.gz", dir);
  write_bytes(p, gb.p, gb.n);
  snprintf(p, sizeof(p), "%s/t10k-images-idx3-ubyte", dir); /* plain works too */
  write_bytes(p, c.p, c.n);
  snprintf(p, sizeof(p), "%s/t10k-labels-idx1-ubyte", dir);
  write_bytes(p, d.p, d.n);
  bytes_free(&a);
  bytes_free(&b);
  bytes_free(&c);
  bytes_free(&d);
  bytes_free(&ga);
  bytes_free(&gb);
}

static void load_dir_reads_the_idx_layout(void **state) {
  scratch *s = *state;
  write_idx_dir(s, "fm", 30, 12, 28);
  xf_dataset train, test;
  xf_dataset_layout layout;
  xf_errctx err;
  assert_int_equal(xf_dataset_load_dir_with(path_in(s, "fm"), NULL, &layout, &train, &test, &err),
                   XF_OK);
  assert_int_equal(layout, XF_LAYOUT_IDX);
  assert_int_equal(train.n, 30);
  assert_int_equal(test.n, 12);
  assert_int_equal(train.features, 784);
  assert_int_equal(train.classes, 4);
  assert_int_equal(test.classes, 4);
  xf_dataset_free(&train);
  xf_dataset_free(&test);
  /* dataset.json fixes the classes; a label at or above them is an error. */
  write_text(path_in(s, "fm/dataset.json"), "{\"classes\": 10}");
  assert_int_equal(xf_dataset_load_dir(path_in(s, "fm"), &train, &test, &err), XF_OK);
  assert_int_equal(train.classes, 10);
  xf_dataset_free(&train);
  xf_dataset_free(&test);
  write_text(path_in(s, "fm/dataset.json"), "{\"classes\": 3}");
  assert_int_equal(xf_dataset_load_dir(path_in(s, "fm"), &train, &test, &err), XF_ERANGE);
  assert_string_equal(err.file, path_in(s, "fm/train-labels-idx1-ubyte.gz"));
  assert_msg_contains(&err, "record 4 has label 3 but dataset.json declares 3 classes");
  assert_null(train.x);
  assert_null(test.x);
  write_text(path_in(s, "fm/dataset.json"), "{\"classes\": 300}");
  assert_int_equal(xf_dataset_load_dir(path_in(s, "fm"), &train, &test, &err), XF_ERANGE);
  assert_string_equal(err.field, "classes");
  /* Train and test of different shapes do not form one dataset. */
  write_idx_dir(s, "odd", 30, 12, 27);
  assert_int_equal(xf_dataset_load_dir(path_in(s, "odd"), &train, &test, &err), XF_EFORMAT);
  assert_string_equal(err.file, path_in(s, "odd/t10k-images-idx3-ubyte"));
  assert_msg_contains(&err, "holds images of 28x28x1 but");
  assert_null(train.x);
}

static void load_dir_names_the_files_it_looked_for(void **state) {
  scratch *s = *state;
  xf_dataset train, test;
  xf_errctx err;
  mkdir(path_in(s, "empty"), 0777);
  assert_int_equal(xf_dataset_load_dir(path_in(s, "empty"), &train, &test, &err), XF_ENOENT);
  assert_msg_contains(&err, "holds no dataset: looked for the IDX layout (train-images-idx3-ubyte,"
                            " train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
                            "t10k-labels-idx1-ubyte, each plain or .gz), the CSV layout "
                            "(train.csv, test.csv), the NPY layout (train-x.npy, train-y.npy, "
                            "test-x.npy, test-y.npy) and the NPZ layout (train.npz, test.npz)");
  assert_int_equal(xf_dataset_load_dir(path_in(s, "nowhere"), &train, &test, &err), XF_ENOENT);
  write_idx_dir(s, "part", 5, 5, 28);
  unlink(path_in(s, "part/t10k-labels-idx1-ubyte"));
  assert_int_equal(xf_dataset_load_dir(path_in(s, "part"), &train, &test, &err), XF_ENOENT);
  assert_msg_contains(&err, "holds part of the IDX layout: t10k-labels-idx1-ubyte[.gz] is "
                            "missing");
  write_text(path_in(s, "part/train.csv"), "1,0\n");
  assert_int_equal(xf_dataset_load_dir(path_in(s, "part"), &train, &test, &err), XF_EFORMAT);
  assert_msg_contains(&err, "keep one layout");
}

static void load_dir_reads_the_csv_layout(void **state) {
  scratch *s = *state;
  mkdir(path_in(s, "c"), 0777);
  write_text(path_in(s, "c/train.csv"), "a,b,y\n1,2,0\n3,4,1\n");
  write_text(path_in(s, "c/test.csv"), "a,b,y\r\n5,6,2\r\n");
  xf_dataset train, test;
  xf_dataset_layout layout;
  xf_errctx err;
  assert_int_equal(xf_dataset_load_dir_with(path_in(s, "c"), NULL, &layout, &train, &test, &err),
                   XF_OK);
  assert_int_equal(layout, XF_LAYOUT_CSV);
  assert_int_equal(train.classes, 3); /* the larger of the two parts */
  assert_int_equal(test.classes, 3);
  xf_dataset_free(&train);
  xf_dataset_free(&test);
  write_text(path_in(s, "c/test.csv"), "a,b,c,y\n5,6,7,2\n");
  assert_int_equal(xf_dataset_load_dir(path_in(s, "c"), &train, &test, &err), XF_EFORMAT);
  assert_string_equal(err.file, path_in(s, "c/test.csv"));
  assert_msg_contains(&err, "has 3 features but");
  write_text(path_in(s, "c/test.csv"), "a,b,y\n5,x,2\n");
  assert_int_equal(xf_dataset_load_dir(path_in(s, "c"), &train, &test, &err), XF_EFORMAT);
  assert_string_equal(err.field, "line 2, column 2");
}

/* ---- splits ------------------------------------------------------------------------ */

/* n records of 2 features in `classes` classes with uneven class sizes. */
static void synthetic(xf_dataset *ds, uint32_t n, uint32_t classes, uint32_t salt) {
  assert_int_equal(xf_dataset_alloc(ds, n, 1, 1, 2, classes, NULL), XF_OK);
  for (uint32_t i = 0; i < n; i++) {
    uint32_t r = (i * 2654435761u + salt) >> 7;
    ds->y[i] = (int32_t)((r % (classes * 3)) % classes == 0 ? 0 : r % classes);
    ds->x[2 * i] = (float)i;
    ds->x[2 * i + 1] = (float)ds->y[i];
  }
}

static bool plans_equal(const xf_split_plan *a, const xf_split_plan *b, uint32_t ntrain,
                        uint32_t ntest) {
  return a->sites == b->sites &&
         memcmp(a->train_off, b->train_off, ((size_t)a->sites + 1) * 4) == 0 &&
         memcmp(a->train_idx, b->train_idx, (size_t)ntrain * 4) == 0 &&
         memcmp(a->test_off, b->test_off, ((size_t)a->sites + 1) * 4) == 0 &&
         memcmp(a->test_idx, b->test_idx, (size_t)ntest * 4) == 0;
}

/* Each index appears exactly once, ascending within each site. */
static void assert_partition(const uint32_t *off, const uint32_t *idx, int sites, uint32_t n) {
  assert_int_equal(off[0], 0);
  assert_int_equal(off[sites], n);
  uint8_t *seen = calloc(n, 1);
  assert_non_null(seen);
  for (int s = 0; s < sites; s++)
    for (uint32_t p = off[s]; p < off[s + 1]; p++) {
      assert_true(idx[p] < n);
      assert_false(seen[idx[p]]);
      seen[idx[p]] = 1;
      if (p > off[s]) assert_true(idx[p] > idx[p - 1]);
    }
  free(seen);
}

static void split_is_deterministic_and_assigns_every_record_once(void **state) {
  (void)state;
  xf_dataset train, test;
  synthetic(&train, 3000, 10, 1);
  synthetic(&test, 700, 10, 2);
  const char *schemes[] = {"iid", "dirichlet:0.3", "dirichlet:5", "classes:2", "classes:10"};
  for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
    xf_split_scheme sc;
    assert_int_equal(xf_split_scheme_parse(schemes[i], &sc, NULL), XF_OK);
    xf_split_plan a, b, c;
    xf_errctx err;
    xf_err rc = xf_split_plan_make(&train, &test, 7, &sc, 42, NULL, &a, &err);
    if (rc != XF_OK) fail_msg("%s: %s", schemes[i], err.msg);
    assert_int_equal(xf_split_plan_make(&train, &test, 7, &sc, 42, NULL, &b, NULL), XF_OK);
    assert_int_equal(xf_split_plan_make(&train, &test, 7, &sc, 43, NULL, &c, NULL), XF_OK);
    assert_true(plans_equal(&a, &b, train.n, test.n));
    assert_false(plans_equal(&a, &c, train.n, test.n));
    assert_partition(a.train_off, a.train_idx, 7, train.n);
    assert_partition(a.test_off, a.test_idx, 7, test.n);
    for (int s = 0; s < 7; s++) {
      assert_true(a.train_off[s + 1] - a.train_off[s] >= 10);
      assert_true(a.test_off[s + 1] > a.test_off[s]);
    }
    xf_split_plan_free(&a);
    xf_split_plan_free(&b);
    xf_split_plan_free(&c);
  }
  xf_dataset_free(&train);
  xf_dataset_free(&test);
}

static void split_iid_gives_equal_parts(void **state) {
  (void)state;
  xf_dataset train, test;
  synthetic(&train, 1003, 5, 3);
  synthetic(&test, 200, 5, 4);
  xf_split_scheme sc = {.kind = XF_SPLIT_IID};
  xf_split_plan p;
  assert_int_equal(xf_split_plan_make(&train, &test, 4, &sc, 1, NULL, &p, NULL), XF_OK);
  for (int s = 0; s < 4; s++) {
    uint32_t n = p.train_off[s + 1] - p.train_off[s];
    assert_true(n == 250 || n == 251);
  }
  xf_split_plan_free(&p);
  xf_errctx err;
  assert_int_equal(xf_split_plan_make(&train, &test, 101, &sc, 1, NULL, &p, &err), XF_EINVAL);
  assert_msg_contains(&err, "1003 train records cannot give each of 101 sites at least 10");
  xf_dataset_free(&train);
  xf_dataset_free(&test);
}

/* Mean over sites of the share of the site's largest class. */
static double label_skew(const xf_split *sp) {
  double sum = 0;
  uint64_t counts[16];
  for (int s = 0; s < sp->sites; s++) {
    xf_dataset_label_counts(&sp->shards[s].train, counts);
    uint64_t max = 0;
    for (uint32_t k = 0; k < sp->classes; k++)
      if (counts[k] > max) max = counts[k];
    sum += (double)max / sp->shards[s].train.n;
  }
  return sum / sp->sites;
}

static void split_dirichlet_skews_more_for_smaller_alpha(void **state) {
  (void)state;
  xf_dataset train, test;
  synthetic(&train, 6000, 10, 5);
  synthetic(&test, 1500, 10, 6);
  xf_split_scheme skewed, flat;
  assert_int_equal(xf_split_scheme_parse("dirichlet:0.1", &skewed, NULL), XF_OK);
  assert_int_equal(xf_split_scheme_parse("dirichlet:100", &flat, NULL), XF_OK);
  xf_split a, b;
  assert_int_equal(xf_dataset_split(&train, &test, 10, &skewed, 7, NULL, &a, NULL), XF_OK);
  assert_int_equal(xf_dataset_split(&train, &test, 10, &flat, 7, NULL, &b, NULL), XF_OK);
  double sa = label_skew(&a), sb = label_skew(&b);
  if (!(sa > sb + 0.25)) fail_msg("skew alpha 0.1: %.3f, alpha 100: %.3f", sa, sb);
  /* Every site's test part follows its train part: per class, the test count
   * is the site's train share of that class times the class's test records,
   * rounded down or up. */
  uint64_t total_train[10], total_test[10], tr[10], te[10];
  xf_dataset_label_counts(&train, total_train);
  xf_dataset_label_counts(&test, total_test);
  for (int s = 0; s < a.sites; s++) {
    assert_int_equal(a.shards[s].train.classes, 10);
    assert_int_equal(a.shards[s].test.classes, 10);
    xf_dataset_label_counts(&a.shards[s].train, tr);
    xf_dataset_label_counts(&a.shards[s].test, te);
    for (int k = 0; k < 10; k++) {
      double want = (double)total_test[k] * tr[k] / total_train[k];
      assert_true(fabs((double)te[k] - want) < 1.0);
    }
  }
  xf_split_free(&a);
  xf_split_free(&b);
  /* An impossible demand fails after bounded draws, saying what to change. */
  xf_split_options strict = {.min_records = 590, .max_draws = 50};
  xf_errctx err;
  assert_int_equal(xf_dataset_split(&train, &test, 10, &skewed, 7, &strict, &a, &err), XF_EINVAL);
  assert_msg_contains(&err, "did not give every site at least 590 train records");
  assert_msg_contains(&err, "in 50 draws: raise alpha");
  assert_null(a.shards);
  xf_dataset_free(&train);
  xf_dataset_free(&test);
}

static void split_classes_gives_each_site_exactly_k_classes(void **state) {
  (void)state;
  xf_dataset train, test;
  synthetic(&train, 5000, 10, 8);
  synthetic(&test, 1000, 10, 9);
  for (uint32_t k = 1; k <= 4; k++) {
    for (int sites = 3; sites <= 12; sites += 3) {
      xf_split_scheme sc = {.kind = XF_SPLIT_CLASSES, .k = k};
      xf_split sp;
      xf_errctx err;
      xf_err rc = xf_dataset_split(&train, &test, sites, &sc, 11, NULL, &sp, &err);
      if ((uint64_t)sites * k < 10) {
        assert_int_equal(rc, XF_EINVAL);
        assert_msg_contains(&err, "records of the others would be dropped");
        continue;
      }
      if (rc != XF_OK) fail_msg("classes:%u over %d sites: %s", k, sites, err.msg);
      uint64_t held_by[10] = {0};
      for (int s = 0; s < sites; s++) {
        uint64_t tr[10], te[10];
        xf_dataset_label_counts(&sp.shards[s].train, tr);
        xf_dataset_label_counts(&sp.shards[s].test, te);
        uint32_t distinct = 0;
        for (int c = 0; c < 10; c++) {
          distinct += tr[c] > 0;
          held_by[c] += tr[c] > 0;
          if (te[c]) assert_true(tr[c] > 0); /* test only has the site's classes */
        }
        assert_int_equal(distinct, k);
      }
      for (int c = 0; c < 10; c++) assert_true(held_by[c] >= 1); /* no class dropped */
      xf_split_free(&sp);
    }
  }
  xf_split_scheme eleven = {.kind = XF_SPLIT_CLASSES, .k = 11};
  xf_split sp;
  xf_errctx err;
  assert_int_equal(xf_dataset_split(&train, &test, 4, &eleven, 1, NULL, &sp, &err), XF_EINVAL);
  assert_msg_contains(&err, "asks for 11 classes per site but the train set has 10 classes");
  xf_dataset_free(&train);
  xf_dataset_free(&test);
}

static void split_schemes_parse_and_print_back(void **state) {
  (void)state;
  const char *ok[] = {"iid", "dirichlet:0.5", "dirichlet:0.1", "dirichlet:100", "classes:2"};
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
    xf_split_scheme sc;
    char buf[64];
    assert_int_equal(xf_split_scheme_parse(ok[i], &sc, NULL), XF_OK);
    xf_split_scheme_format(&sc, buf, sizeof(buf));
    assert_string_equal(buf, ok[i]);
  }
  const char *bad[] = {"", "IID", "dirichlet:", "dirichlet:0", "dirichlet:-1", "dirichlet:x",
                       "dirichlet:nan", "classes:0", "classes:", "classes:2x", "classes:-1",
                       "classes:99999999999999999999", "shards:3"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    xf_split_scheme sc;
    xf_errctx err;
    xf_errctx_clear(&err);
    if (xf_split_scheme_parse(bad[i], &sc, &err) != XF_EINVAL) fail_msg("accepted '%s'", bad[i]);
    assert_true(err.msg[0] != '\0');
  }
}

/* ---- writing a split ------------------------------------------------------------------ */

static bool dir_has_prefix(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  bool found = false;
  while ((e = readdir(d)))
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) found = true;
  closedir(d);
  return found;
}

static void split_write_makes_shards_that_load_back(void **state) {
  scratch *s = *state;
  write_idx_dir(s, "src", 400, 120, 28);
  xf_dataset train, test;
  xf_dataset_layout layout;
  assert_int_equal(xf_dataset_load_dir_with(path_in(s, "src"), NULL, &layout, &train, &test, NULL),
                   XF_OK);
  xf_split_scheme sc;
  assert_int_equal(xf_split_scheme_parse("dirichlet:0.5", &sc, NULL), XF_OK);
  xf_split sp;
  assert_int_equal(xf_dataset_split(&train, &test, 3, &sc, 5, NULL, &sp, NULL), XF_OK);
  xf_errctx err;
  const char *out = path_in(s, "out");
  if (xf_split_write(&sp, "src", layout, out, &err) != XF_OK) fail_msg("%s", err.msg);
  assert_false(dir_has_prefix(s->dir, "out.tmp-"));
  /* The manifest describes every site and adds up to the source. */
  json_error_t jerr;
  json_t *m = json_load_file(path_in(s, "out/manifest.json"), 0, &jerr);
  assert_non_null(m);
  assert_string_equal(json_string_value(json_object_get(m, "scheme")), "dirichlet:0.5");
  assert_int_equal(json_integer_value(json_object_get(m, "seed")), 5);
  assert_string_equal(json_string_value(json_object_get(m, "source")), "src");
  assert_string_equal(json_string_value(json_object_get(m, "layout")), "idx");
  assert_int_equal(json_integer_value(json_object_get(m, "classes")), 4);
  json_t *sites = json_object_get(m, "sites");
  assert_int_equal(json_array_size(sites), 3);
  json_int_t train_sum = 0, test_sum = 0;
  for (size_t i = 0; i < 3; i++) {
    json_t *site = json_array_get(sites, i);
    char name[16];
    snprintf(name, sizeof(name), "site-%zu", i + 1);
    assert_string_equal(json_string_value(json_object_get(site, "name")), name);
    json_int_t tr = json_integer_value(json_object_get(site, "train_records"));
    json_int_t counted = 0;
    json_t *counts = json_object_get(site, "train_label_counts");
    assert_int_equal(json_array_size(counts), 4);
    for (size_t k = 0; k < 4; k++) counted += json_integer_value(json_array_get(counts, k));
    assert_int_equal(counted, tr);
    assert_int_equal(json_array_size(json_object_get(site, "test_label_counts")), 4);
    train_sum += tr;
    test_sum += json_integer_value(json_object_get(site, "test_records"));
    /* Each shard is a dataset directory with the source's names. */
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/%s", out, name);
    xf_dataset a, b;
    assert_int_equal(xf_dataset_load_dir(dir, &a, &b, NULL), XF_OK);
    assert_int_equal(a.n, sp.shards[i].train.n);
    assert_int_equal(b.n, sp.shards[i].test.n);
    assert_int_equal(a.classes, 4); /* from the shard's dataset.json */
    assert_memory_equal(a.x, sp.shards[i].train.x, (size_t)a.n * a.features * sizeof(float));
    xf_dataset_free(&a);
    xf_dataset_free(&b);
  }
  assert_int_equal(train_sum, 400);
  assert_int_equal(test_sum, 120);
  json_decref(m);
  /* A used output directory is refused; an empty one is filled. */
  assert_int_equal(xf_split_write(&sp, "src", layout, out, &err), XF_EEXISTS);
  assert_msg_contains(&err, "exists and is not empty: remove it or pick another");
  mkdir(path_in(s, "empty-out"), 0777);
  assert_int_equal(xf_split_write(&sp, "src", layout, path_in(s, "empty-out/"), &err), XF_OK);
  assert_true(dir_has_prefix(path_in(s, "empty-out"), "manifest.json"));
  /* A missing parent fails before anything is written. */
  assert_int_equal(xf_split_write(&sp, "src", layout, path_in(s, "no/such/out"), &err), XF_ENOENT);
  assert_msg_contains(&err, "/no/such does not exist: create it first");
  assert_int_equal(xf_split_check_out(path_in(s, "no/such/out"), &err), XF_ENOENT);
  write_text(path_in(s, "file"), "x");
  assert_int_equal(xf_split_check_out(path_in(s, "file"), &err), XF_EEXISTS);
  assert_msg_contains(&err, "exists and is not a directory");
  xf_split_free(&sp);
  xf_dataset_free(&train);
  xf_dataset_free(&test);
}

static void split_write_leaves_nothing_behind_on_failure(void **state) {
  scratch *s = *state;
  xf_dataset train, test;
  synthetic(&train, 300, 3, 1);
  synthetic(&test, 90, 3, 2);
  xf_split_scheme sc = {.kind = XF_SPLIT_IID};
  xf_split sp;
  assert_int_equal(xf_dataset_split(&train, &test, 3, &sc, 1, NULL, &sp, NULL), XF_OK);
  /* These features are not pixels: the IDX writer refuses site-1's test part,
   * after site-1's train files are written. */
  xf_errctx err;
  assert_int_equal(xf_split_write(&sp, "synthetic", XF_LAYOUT_IDX, path_in(s, "out"), &err),
                   XF_ERANGE);
  assert_false(dir_has_prefix(s->dir, "out"));
  /* As CSV they are fine. */
  assert_int_equal(xf_split_write(&sp, "synthetic", XF_LAYOUT_CSV, path_in(s, "out"), &err),
                   XF_OK);
  xf_dataset a, b;
  xf_dataset_layout layout;
  assert_int_equal(xf_dataset_load_dir_with(path_in(s, "out/site-2"), NULL, &layout, &a, &b, NULL),
                   XF_OK);
  assert_int_equal(layout, XF_LAYOUT_CSV);
  assert_int_equal(a.n, sp.shards[1].train.n);
  assert_memory_equal(a.x, sp.shards[1].train.x, (size_t)a.n * 2 * sizeof(float));
  xf_dataset_free(&a);
  xf_dataset_free(&b);
  xf_split_free(&sp);
  xf_dataset_free(&train);
  xf_dataset_free(&test);
}

/* ---- the real data ------------------------------------------------------------------- */

static double seconds_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fashion_mnist_loads_and_splits(void **state) {
  (void)state;
  struct stat st;
  if (stat(FMNIST_DIR, &st) != 0) {
    print_message("skipped: %s is absent (apt-get install dataset-fashion-mnist)\n", FMNIST_DIR);
    skip();
  }
  xf_dataset train, test;
  xf_errctx err;
  double t0 = seconds_now();
  if (xf_dataset_load_dir(FMNIST_DIR, &train, &test, &err) != XF_OK)
    fail_msg("%s: %s", err.file, err.msg);
  double took = seconds_now() - t0;
  print_message("loaded Fashion-MNIST in %.2f s\n", took);
  assert_int_equal(train.n, 60000);
  assert_int_equal(test.n, 10000);
  assert_int_equal(train.h, 28);
  assert_int_equal(train.w, 28);
  assert_int_equal(train.c, 1);
  assert_int_equal(train.classes, 10);
  assert_int_equal(test.classes, 10);
  uint64_t counts[10];
  xf_dataset_label_counts(&train, counts);
  for (int k = 0; k < 10; k++) assert_int_equal(counts[k], 6000); /* balanced by design */
  float lo = 1, hi = 0;
  for (size_t i = 0; i < (size_t)train.n * train.features; i++) {
    if (train.x[i] < lo) lo = train.x[i];
    if (train.x[i] > hi) hi = train.x[i];
  }
  assert_true(lo == 0.0f && hi == 1.0f);
  xf_split_scheme sc;
  assert_int_equal(xf_split_scheme_parse("dirichlet:0.5", &sc, NULL), XF_OK);
  xf_split sp;
  assert_int_equal(xf_dataset_split(&train, &test, 6, &sc, 42, NULL, &sp, NULL), XF_OK);
  uint32_t tr = 0, te = 0;
  for (int s = 0; s < 6; s++) {
    tr += sp.shards[s].train.n;
    te += sp.shards[s].test.n;
  }
  assert_int_equal(tr, 60000);
  assert_int_equal(te, 10000);
  xf_split_free(&sp);
  xf_dataset_free(&train);
  xf_dataset_free(&test);
}

int main(void) {
#define T(fn) cmocka_unit_test_setup_teardown(fn, scratch_setup, scratch_teardown)
  const struct CMUnitTest tests[] = {
      T(idx_gzip_bomb_is_refused_at_the_declared_size),
      T(idx_plain_and_gzip_parse_alike),
      T(idx_round_trips_through_the_gzip_writer),
      T(idx_rejects_wrong_magic),
      T(idx_rejects_unsupported_type_codes),
      T(idx_rejects_truncated_payload_and_header),
      T(idx_rejects_trailing_bytes),
      T(idx_rejects_zero_and_absurd_dimensions),
      T(idx_rejects_corrupt_and_cut_gzip),
      T(idx_rejects_label_and_image_count_mismatch),
      T(idx_parser_frees_everything_when_allocations_fail),
      T(csv_detects_header_and_tolerates_crlf_and_blank_lines),
      T(csv_finds_the_label_column_by_name_or_number),
      T(csv_names_line_and_column_of_a_non_number),
      T(csv_rejects_ragged_rows),
      T(csv_rejects_labels_that_are_not_small_whole_numbers),
      T(csv_rejects_empty_files_and_single_columns),
      T(csv_round_trips_through_the_writer),
      T(csv_and_split_free_everything_when_allocations_fail),
      T(load_dir_reads_the_idx_layout),
      T(load_dir_names_the_files_it_looked_for),
      T(load_dir_reads_the_csv_layout),
      T(split_is_deterministic_and_assigns_every_record_once),
      T(split_iid_gives_equal_parts),
      T(split_dirichlet_skews_more_for_smaller_alpha),
      T(split_classes_gives_each_site_exactly_k_classes),
      T(split_schemes_parse_and_print_back),
      T(split_write_makes_shards_that_load_back),
      T(split_write_leaves_nothing_behind_on_failure),
      T(fashion_mnist_loads_and_splits),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
