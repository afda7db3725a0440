/* SPDX-License-Identifier: Apache-2.0 */
/* The drawing of `xfed job report` (cli/report_chart.h): a known series
 * rendered to PNG, SVG and PDF in a scratch directory and read back — the
 * PNG by cairo, pixel by pixel in each panel; the SVG by an XML parser; the
 * PDF by its structure — with every check shown to reject an empty drawing
 * of the same size. */
#define _GNU_SOURCE /* memmem */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <cairo.h>
#include <expat.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/report_chart.h"
#include "support.h"

static char dir[512];

static int setup(void **state) {
  (void)state;
  return xf_test_mkdtemp(dir, sizeof(dir), "chart");
}

static int teardown(void **state) {
  (void)state;
  xf_test_remove_tree(dir);
  cairo_debug_reset_static_data();
  return 0;
}

static void path_of(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s/%s", dir, name);
}

/* 40 rounds of a job that learns: accuracy rising, losses falling, ε
 * growing like the square root of the rounds, bytes steady with a dip. */
#define ROUNDS 40
static xf_chart_round series[ROUNDS];

static xf_chart known_chart(int w, int h) {
  for (int i = 0; i < ROUNDS; i++) {
    double t = i + 1;
    series[i] = (xf_chart_round){.round = (uint32_t)(i + 1),
                                 .test_accuracy = 0.86 - 0.5 * exp(-t / 6),
                                 .train_loss = 0.35 + 1.6 * exp(-t / 5),
                                 .test_loss = 0.42 + 1.4 * exp(-t / 6),
                                 .epsilon = 0.45 * sqrt(t),
                                 .bytes_up = (i == 17 ? 4 : 6) * 318040.0,
                                 .bytes_down = (i == 17 ? 4 : 6) * 318220.0};
  }
  return (xf_chart){.title = "job 7: quickstart",
                    .subtitle = "done \xc2\xb7 40 of 40 rounds reported",
                    .rounds = series,
                    .n_rounds = ROUNDS,
                    .width = w,
                    .height = h};
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static unsigned char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  if (b) b[n] = 0;
  *len = (size_t)n;
  return b;
}

/* ---- the checks, each a verdict so that it can be shown to reject ---------------- */

/* What a PNG holds in one panel: pixels that are not the white background,
 * how many distinct colours, and whether a curve's colour (within 3 of each
 * channel) is among them. */
typedef struct panel_stats {
  long inked;
  int colours;
  bool has[2];
} panel_stats;

static bool near(uint32_t px, const int want[3]) {
  int r = (px >> 16) & 0xff, g = (px >> 8) & 0xff, b = px & 0xff;
  return abs(r - want[0]) <= 3 && abs(g - want[1]) <= 3 && abs(b - want[2]) <= 3;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* The curve colours of report_chart.c, by panel (accuracy blue, loss orange
 * and blue, ε purple, bytes green and orange), as 0..255. */
static const int CURVE[4][2][3] = {{{31, 105, 179}, {31, 105, 179}},
                                   {{227, 110, 23}, {31, 105, 179}},
                                   {{140, 61, 163}, {140, 61, 163}},
                                   {{38, 143, 69}, {227, 110, 23}}};

/* The panels are the quadrants of the image below its title band (the top
 * tenth). */
static panel_stats png_panel(cairo_surface_t *s, int panel) {
  int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
  int stride = cairo_image_surface_get_stride(s);
  const unsigned char *data = cairo_image_surface_get_data(s);
  int top = h / 10, qw = w / 2, qh = (h - top) / 2;
  int x0 = (panel % 2) * qw, y0 = top + (panel / 2) * qh;
  uint32_t *seen = malloc((size_t)qw * (size_t)qh * sizeof(*seen));
  assert_non_null(seen);
  panel_stats ps = {0};
  size_t n = 0;
  for (int y = y0; y < y0 + qh; y++)
    for (int x = x0; x < x0 + qw; x++) {
      uint32_t px;
      memcpy(&px, data + (size_t)y * (size_t)stride + (size_t)x * 4, 4);
      px &= 0xffffff;
      if (px != 0xffffff) ps.inked++;
      for (int k = 0; k < 2; k++)
        if (near(px, CURVE[panel][k])) ps.has[k] = true;
      seen[n++] = px;
    }
  qsort(seen, n, sizeof(*seen), cmp_u32);
  for (size_t i = 0; i < n; i++)
    if (i == 0 || seen[i] != seen[i - 1]) ps.colours++;
  free(seen);
  return ps;
}

/* NULL when path is a PNG of w x h whose four panels each show a drawing
 * (at least 2% of their pixels inked, 12 or more colours) with their
 * curves' colours; else what is wrong. */
static const char *png_verdict(const char *path, int w, int h) {
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  size_t len = 0;
  unsigned char *b = slurp(path, &len);
  if (!b) return "cannot read the file";
  bool sig_ok = len > 8 && memcmp(b, sig, 8) == 0;
  free(b);
  if (!sig_ok) return "no PNG signature";
  if (len < 20000) return "smaller than a drawing of four panels";
  cairo_surface_t *s = cairo_image_surface_create_from_png(path);
  const char *why = NULL;
  if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) why = "cairo cannot read it back";
  else if (cairo_image_surface_get_width(s) != w || cairo_image_surface_get_height(s) != h)
    why = "not the size asked for";
  for (int p = 0; !why && p < 4; p++) {
    panel_stats ps = png_panel(s, p);
    long area = (long)(w / 2) * ((h - h / 10) / 2);
    if (ps.inked * 50 < area) why = "a panel is almost empty";
    else if (ps.colours < 12) why = "a panel has too few colours for axes, text and curves";
    else if (!(ps.has[0] && ps.has[1])) why = "a panel lacks its curves";
  }
  cairo_surface_destroy(s);
  return why;
}

/* What an SVG holds: its root element, and how many <path> elements. */
typedef struct svg_scan {
  char root[16];
  int depth, paths;
} svg_scan;

static void XMLCALL svg_start(void *ud, const XML_Char *name, const XML_Char **attrs) {
  (void)attrs;
  svg_scan *s = ud;
  const char *local = strrchr(name, ':') ? strrchr(name, ':') + 1 : name;
  if (s->depth++ == 0) snprintf(s->root, sizeof(s->root), "%s", local);
  if (strcmp(local, "path") == 0) s->paths++;
}

static void XMLCALL svg_end(void *ud, const XML_Char *name) {
  (void)name;
  ((svg_scan *)ud)->depth--;
}

/* NULL when path parses as XML with an <svg> root and at least 50 paths
 * (glyphs, axes and curves); else what is wrong. */
static const char *svg_verdict(const char *path) {
  size_t len = 0;
  unsigned char *b = slurp(path, &len);
  if (!b) return "cannot read the file";
  XML_Parser p = XML_ParserCreateNS(NULL, ':');
  svg_scan s = {0};
  XML_SetUserData(p, &s);
  XML_SetElementHandler(p, svg_start, svg_end);
  bool parsed = XML_Parse(p, (const char *)b, (int)len, 1) == XML_STATUS_OK;
  XML_ParserFree(p);
  free(b);
  if (!parsed) return "not well-formed XML";
  if (strcmp(s.root, "svg") != 0) return "the root element is not svg";
  if (s.paths < 50) return "too few paths for axes, text and curves";
  return NULL;
}

/* NULL when path is a PDF (header, %%EOF) of one page of w x h points,
 * more than min_len bytes; else what is wrong. */
static const char *pdf_verdict(const char *path, int w, int h, long min_len) {
  size_t len = 0;
  unsigned char *b = slurp(path, &len);
  if (!b) return "cannot read the file";
  const char *why = NULL;
  char box[64];
  snprintf(box, sizeof(box), "/MediaBox [ 0 0 %d %d ]", w, h);
  if (len < 16 || memcmp(b, "%PDF-1.", 7) != 0) why = "no PDF header";
  else if (!strstr((const char *)b + len - 16, "%%EOF")) why = "no %%EOF at the end";
  else if (!memmem(b, len, box, strlen(box))) why = "the page is not the size asked for";
  else if ((long)len <= min_len) why = "no larger than an empty page";
  free(b);
  return why;
}

/* An empty drawing of the same size in format f: white, nothing on it. */
static void write_blank(const char *path, xf_chart_format f, int w, int h) {
  cairo_surface_t *s = f == XF_CHART_SVG   ? cairo_svg_surface_create(path, w, h)
                       : f == XF_CHART_PDF ? cairo_pdf_surface_create(path, w, h)
                                           : cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
  cairo_t *cr = cairo_create(s);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  cairo_destroy(cr);
  if (f == XF_CHART_PNG) assert_int_equal(cairo_surface_write_to_png(s, path), 0);
  cairo_surface_finish(s);
  cairo_surface_destroy(s);
}

/* ---- the tests ----------------------------------------------------------------- */

static void report_renders_a_known_series_as_png_with_four_inked_panels(void **state) {
  (void)state;
  char path[600], blank[600];
  path_of(path, sizeof(path), "report.png");
  xf_chart c = known_chart(1200, 800);
  xf_errctx err = {0};
  assert_int_equal(xf_chart_write(&c, XF_CHART_PNG, path, &err), XF_OK);
  const char *why = png_verdict(path, 1200, 800);
  if (why) fail_msg("%s: %s", path, why);
  /* Another size is honoured. */
  c = known_chart(1600, 1000);
  assert_int_equal(xf_chart_write(&c, XF_CHART_PNG, path, &err), XF_OK);
  why = png_verdict(path, 1600, 1000);
  if (why) fail_msg("%s at 1600x1000: %s", path, why);
  /* The checks reject an empty drawing. */
  path_of(blank, sizeof(blank), "blank.png");
  write_blank(blank, XF_CHART_PNG, 1200, 800);
  assert_non_null(png_verdict(blank, 1200, 800));
}

static void report_renders_svg_that_parses_as_xml_with_paths(void **state) {
  (void)state;
  char path[600], blank[600];
  path_of(path, sizeof(path), "report.svg");
  xf_chart c = known_chart(1200, 800);
  xf_errctx err = {0};
  assert_int_equal(xf_chart_write(&c, XF_CHART_SVG, path, &err), XF_OK);
  const char *why = svg_verdict(path);
  if (why) fail_msg("%s: %s", path, why);
  path_of(blank, sizeof(blank), "blank.svg");
  write_blank(blank, XF_CHART_SVG, 1200, 800);
  assert_non_null(svg_verdict(blank));
}

static void report_renders_a_one_page_pdf_of_the_size_asked(void **state) {
  (void)state;
  char path[600], blank[600];
  path_of(blank, sizeof(blank), "blank.pdf");
  write_blank(blank, XF_CHART_PDF, 1200, 800);
  long blank_len = file_size(blank);
  assert_true(blank_len > 0);
  path_of(path, sizeof(path), "report.pdf");
  xf_chart c = known_chart(1200, 800);
  xf_errctx err = {0};
  assert_int_equal(xf_chart_write(&c, XF_CHART_PDF, path, &err), XF_OK);
  const char *why = pdf_verdict(path, 1200, 800, 4 * blank_len);
  if (why) fail_msg("%s: %s", path, why);
  assert_non_null(pdf_verdict(blank, 1200, 800, 4 * blank_len));
}

static void report_without_privacy_says_so_in_the_epsilon_panel(void **state) {
  (void)state;
  char path[600];
  path_of(path, sizeof(path), "no-dp.png");
  xf_chart c = known_chart(1200, 800);
  for (int i = 0; i < ROUNDS; i++) series[i].epsilon = NAN;
  xf_errctx err = {0};
  assert_int_equal(xf_chart_write(&c, XF_CHART_PNG, path, &err), XF_OK);
  /* The ε panel (the third) has its message but no curve; the others draw. */
  cairo_surface_t *s = cairo_image_surface_create_from_png(path);
  assert_int_equal(cairo_surface_status(s), CAIRO_STATUS_SUCCESS);
  for (int p = 0; p < 4; p++) {
    panel_stats ps = png_panel(s, p);
    assert_true(ps.inked > 0);
    if (p == 2) assert_false(ps.has[0]);
    else assert_true(ps.has[0] && ps.has[1]);
  }
  cairo_surface_destroy(s);
}

static void report_refuses_sizes_out_of_bounds_and_writes_nothing(void **state) {
  (void)state;
  char path[600];
  path_of(path, sizeof(path), "tiny.png");
  xf_chart c = known_chart(100, 100);
  xf_errctx err = {0};
  assert_int_equal(xf_chart_write(&c, XF_CHART_PNG, path, &err), XF_ERANGE);
  assert_non_null(strstr(err.msg, "480"));
  assert_int_equal(file_size(path), -1);
  c = known_chart(1200, 800);
  c.n_rounds = 0;
  assert_int_equal(xf_chart_write(&c, XF_CHART_PNG, path, &err), XF_ERANGE);
  assert_int_equal(file_size(path), -1);
}

static void report_onto_a_directory_is_refused_and_left_alone(void **state) {
  (void)state;
  char path[600];
  path_of(path, sizeof(path), "a-directory.png");
  assert_int_equal(mkdir(path, 0700), 0);
  xf_chart c = known_chart(1200, 800);
  xf_errctx err = {0};
  assert_int_equal(xf_chart_write(&c, XF_CHART_SVG, path, &err), XF_EEXISTS);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
}

static void format_follows_the_extension_in_any_case(void **state) {
  (void)state;
  xf_chart_format f;
  assert_true(xf_chart_format_of_path("a/b.PNG", &f));
  assert_int_equal(f, XF_CHART_PNG);
  assert_true(xf_chart_format_of_path("report.svg", &f));
  assert_int_equal(f, XF_CHART_SVG);
  assert_true(xf_chart_format_of_path("./x.Pdf", &f));
  assert_int_equal(f, XF_CHART_PDF);
  assert_false(xf_chart_format_of_path("report", &f));
  assert_false(xf_chart_format_of_path("dir.png/report", &f));
  assert_false(xf_chart_format_of_path("report.jpg", &f));
  assert_true(xf_chart_format_parse("pdf", &f));
  assert_int_equal(f, XF_CHART_PDF);
  assert_false(xf_chart_format_parse("PNG ", &f));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(report_renders_a_known_series_as_png_with_four_inked_panels,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(report_renders_svg_that_parses_as_xml_with_paths, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(report_renders_a_one_page_pdf_of_the_size_asked, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(report_without_privacy_says_so_in_the_epsilon_panel, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(report_refuses_sizes_out_of_bounds_and_writes_nothing,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(report_onto_a_directory_is_refused_and_left_alone, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(format_follows_the_extension_in_any_case, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
