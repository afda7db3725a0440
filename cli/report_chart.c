/* SPDX-License-Identifier: Apache-2.0 */
/* Draws a job's training report with cairo (cli/report_chart.h): a title,
 * then four panels in a 2x2 grid, each with its axes, ticks, grid lines,
 * tick labels and a legend, written through base/file.h's writer. */
#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <cairo.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cli/report_chart.h"
#include "job/jobprogress.h"
#include "base/file.h"

#if defined(__SANITIZE_ADDRESS__)
/* fontconfig, which cairo's text goes through, keeps a few hundred bytes of
 * its configuration unreachable at exit (not ours to free, and not growing
 * with use); LeakSanitizer reads this hook in every program that draws. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libfontconfig.so\n"; }
#endif

bool xf_chart_format_parse(const char *name, xf_chart_format *out) {
  static const char *const names[] = {"png", "svg", "pdf"};
  for (int i = 0; i < 3; i++)
    if (strcmp(name, names[i]) == 0) {
      *out = (xf_chart_format)i;
      return true;
    }
  return false;
}

bool xf_chart_format_of_path(const char *path, xf_chart_format *out) {
  const char *dot = strrchr(path, '.');
  const char *slash = strrchr(path, '/');
  if (!dot || (slash && dot < slash)) return false;
  static const char *const exts[] = {".png", ".svg", ".pdf"};
  for (int i = 0; i < 3; i++)
    if (strcasecmp(dot, exts[i]) == 0) {
      *out = (xf_chart_format)i;
      return true;
    }
  return false;
}

const char *xf_chart_format_name(xf_chart_format f) {
  return f == XF_CHART_SVG ? "svg" : f == XF_CHART_PDF ? "pdf" : "png";
}

/* ---- what the panels show -------------------------------------------------------- */

typedef struct rgb {
  double r, g, b;
} rgb;

/* The curves' colours, as initializers: the panel table below is a constant. */
#define BLUE {0.12, 0.41, 0.70}
#define ORANGE {0.89, 0.43, 0.09}
#define GREEN {0.15, 0.56, 0.27}
#define PURPLE {0.55, 0.24, 0.64}
static const rgb INK = {0.13, 0.13, 0.13}, MUTED = {0.40, 0.40, 0.40},
                 GRID = {0.88, 0.88, 0.88}, FRAME = {0.75, 0.75, 0.75};

/* One curve: the field of xf_chart_round it plots (a double, by offset).
 * A dashed curve, drawn over a solid one, lets both show where they meet
 * (uplink and downlink are often nearly equal). */
typedef struct curve {
  const char *label;
  rgb colour;
  size_t field;
  bool dashed;
} curve;

typedef struct panel {
  const char *title;
  const char *missing; /* shown when no round carries the figure */
  curve curves[2];
  int n_curves;
  bool from_zero;       /* the y axis starts at 0 (counts, budgets) */
  bool unit_interval;   /* the y axis stays within [0, 1] (accuracy) */
  bool bytes;           /* values in bytes, shown in a decimal unit */
} panel;

static const panel PANELS[4] = {
    {"test accuracy", XF_JOB_NOTE_NO_ACCURACY,
     {{"test accuracy", BLUE, offsetof(xf_chart_round, test_accuracy), false}}, 1, false, true, false},
    {"loss", XF_JOB_NOTE_NO_LOSS,
     {{"train", ORANGE, offsetof(xf_chart_round, train_loss), false},
      {"test", BLUE, offsetof(xf_chart_round, test_loss), false}},
     2, false, false, false},
    {"\xce\xb5 spent", XF_JOB_NOTE_NO_EPSILON,
     {{"\xce\xb5", PURPLE, offsetof(xf_chart_round, epsilon), false}}, 1, true, false, false},
    {"bytes per round", XF_JOB_NOTE_NO_BYTES,
     {{"uplink", GREEN, offsetof(xf_chart_round, bytes_up), false},
      {"downlink", ORANGE, offsetof(xf_chart_round, bytes_down), true}},
     2, true, false, true},
};

static double value_of(const xf_chart_round *r, size_t field) {
  double v;
  memcpy(&v, (const char *)r + field, sizeof(v));
  return v;
}

/* ---- axes ------------------------------------------------------------------------ */

/* A step of 1, 2 or 5 times a power of ten that cuts span into about
 * `target` parts. */
static double nice_step(double span, int target) {
  double raw = span / target;
  double mag = pow(10.0, floor(log10(raw)));
  double f = raw / mag;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

typedef struct axis {
  double lo, hi, step;
  int decimals;
} axis;

/* An axis covering [lo, hi] whose ends fall on ticks. */
static axis make_axis(double lo, double hi, bool from_zero, bool unit_interval, bool integer) {
  if (from_zero && lo > 0) lo = 0;
  if (!(hi > lo)) {
    double pad = fabs(hi) > 0 ? fabs(hi) * 0.1 : 1.0;
    if (integer && pad < 1) pad = 1;
    lo = (from_zero || (integer && lo - pad < 0)) ? fmin(lo, 0) : lo - pad;
    hi = hi + pad;
  }
  axis a;
  a.step = nice_step(hi - lo, integer ? 8 : 5);
  if (integer && a.step < 1) a.step = 1;
  a.lo = integer ? lo : floor(lo / a.step) * a.step;
  a.hi = integer ? hi : ceil(hi / a.step) * a.step;
  if (unit_interval) {
    if (a.lo < 0) a.lo = 0;
    if (a.hi > 1) a.hi = 1;
  }
  a.decimals = a.step >= 1 ? 0 : (int)ceil(-log10(a.step) - 1e-9);
  if (a.decimals > 6) a.decimals = 6;
  return a;
}

/* The decimal unit that keeps the largest count below a thousand. */
static void bytes_unit(double max, double *scale, const char **name) {
  static const char *const names[] = {"B", "kB", "MB", "GB", "TB"};
  int i = 0;
  *scale = 1;
  while (i < 4 && max >= 1000 * *scale) {
    *scale *= 1000;
    i++;
  }
  *name = names[i];
}

/* ---- drawing --------------------------------------------------------------------- */

typedef struct box {
  double x, y, w, h;
} box;

static void set_colour(cairo_t *cr, rgb c) { cairo_set_source_rgb(cr, c.r, c.g, c.b); }

/* Text with its left (align 0), centre (0.5) or right (1) at x and its
 * baseline at y. */
static void text_at(cairo_t *cr, const char *s, double x, double y, double align) {
  cairo_text_extents_t e;
  cairo_text_extents(cr, s, &e);
  cairo_move_to(cr, x - align * e.x_advance, y);
  cairo_show_text(cr, s);
}

static void font(cairo_t *cr, double size, bool bold) {
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

/* The legend of the curves that have data (drawn[i]), right-aligned on the
 * panel's title line. */
static void draw_legend(cairo_t *cr, const panel *p, const bool *drawn, double right,
                        double baseline, double u) {
  font(cr, 12 * u, false);
  double x = right;
  for (int i = p->n_curves - 1; i >= 0; i--) {
    if (!drawn[i]) continue;
    cairo_text_extents_t e;
    cairo_text_extents(cr, p->curves[i].label, &e);
    x -= e.x_advance;
    set_colour(cr, INK);
    cairo_move_to(cr, x, baseline);
    cairo_show_text(cr, p->curves[i].label);
    x -= 6 * u;
    set_colour(cr, p->curves[i].colour);
    cairo_set_line_width(cr, 3 * u);
    double dash[] = {5 * u, 3 * u};
    cairo_set_dash(cr, dash, p->curves[i].dashed ? 2 : 0, 0);
    cairo_move_to(cr, x - 21 * u, baseline - 4 * u);
    cairo_line_to(cr, x, baseline - 4 * u);
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
    x -= 21 * u + 14 * u;
  }
}

static void draw_panel(cairo_t *cr, const xf_chart *c, const panel *p, box b, double u) {
  set_colour(cr, FRAME);
  cairo_set_line_width(cr, 1 * u);
  cairo_rectangle(cr, b.x + 0.5, b.y + 0.5, b.w - 1, b.h - 1);
  cairo_stroke(cr);

  /* The figures' range, and for bytes the unit they are shown in. */
  double lo = INFINITY, hi = -INFINITY, scale = 1;
  const char *unit = NULL;
  bool drawn[2] = {false, false};
  for (size_t i = 0; i < c->n_rounds; i++)
    for (int k = 0; k < p->n_curves; k++) {
      double v = value_of(&c->rounds[i], p->curves[k].field);
      if (!isfinite(v)) continue;
      drawn[k] = true;
      lo = fmin(lo, v);
      hi = fmax(hi, v);
    }
  bool any = isfinite(lo);
  if (any && p->bytes) bytes_unit(hi, &scale, &unit);

  char title[96];
  snprintf(title, sizeof(title), "%s%s%s%s", p->title, unit ? " (" : "", unit ? unit : "",
           unit ? ")" : "");
  set_colour(cr, INK);
  font(cr, 15 * u, true);
  text_at(cr, title, b.x + 12 * u, b.y + 22 * u, 0);

  box plot = {b.x + 72 * u, b.y + 38 * u, 0, 0};
  plot.w = b.x + b.w - 18 * u - plot.x;
  plot.h = b.y + b.h - 46 * u - plot.y;
  if (!any) {
    set_colour(cr, MUTED);
    font(cr, 13 * u, false);
    text_at(cr, p->missing, plot.x + plot.w / 2, plot.y + plot.h / 2, 0.5);
    return;
  }
  draw_legend(cr, p, drawn, b.x + b.w - 14 * u, b.y + 22 * u, u);
  axis ya = make_axis(lo / scale, hi / scale, p->from_zero, p->unit_interval, false);
  axis xa = make_axis(c->rounds[0].round, c->rounds[c->n_rounds - 1].round, false, false, true);
  double xspan = xa.hi - xa.lo, yspan = ya.hi - ya.lo;
#define PX(v) (plot.x + ((v) - xa.lo) / xspan * plot.w)
#define PY(v) (plot.y + plot.h - ((v) - ya.lo) / yspan * plot.h)

  /* Grid lines and tick labels of y. */
  font(cr, 12 * u, false);
  char label[32];
  cairo_set_line_width(cr, 1 * u);
  for (double v = ya.lo; v <= ya.hi + ya.step / 2; v += ya.step) {
    double y = PY(v);
    set_colour(cr, GRID);
    cairo_move_to(cr, plot.x, y);
    cairo_line_to(cr, plot.x + plot.w, y);
    cairo_stroke(cr);
    snprintf(label, sizeof(label), "%.*f", ya.decimals, fabs(v) < ya.step * 1e-9 ? 0.0 : v);
    set_colour(cr, INK);
    text_at(cr, label, plot.x - 8 * u, y + 4 * u, 1);
  }
  /* Ticks and labels of x: rounds. */
  double first = ceil(xa.lo / xa.step) * xa.step;
  for (double v = first; v <= xa.hi + 1e-9; v += xa.step) {
    double x = PX(v);
    set_colour(cr, INK);
    cairo_move_to(cr, x, plot.y + plot.h);
    cairo_line_to(cr, x, plot.y + plot.h + 5 * u);
    cairo_stroke(cr);
    snprintf(label, sizeof(label), "%.0f", v);
    text_at(cr, label, x, plot.y + plot.h + 19 * u, 0.5);
  }
  set_colour(cr, MUTED);
  text_at(cr, "round", plot.x + plot.w / 2, plot.y + plot.h + 37 * u, 0.5);
  /* The axes. */
  set_colour(cr, INK);
  cairo_set_line_width(cr, 1.2 * u);
  cairo_move_to(cr, plot.x, plot.y);
  cairo_line_to(cr, plot.x, plot.y + plot.h);
  cairo_line_to(cr, plot.x + plot.w, plot.y + plot.h);
  cairo_stroke(cr);

  /* The curves, clipped to the plot, broken where a round lacks the figure;
   * with markers while rounds are few enough to tell apart. */
  cairo_save(cr);
  cairo_rectangle(cr, plot.x - 4 * u, plot.y - 4 * u, plot.w + 8 * u, plot.h + 8 * u);
  cairo_clip(cr);
  bool markers = c->n_rounds <= 80;
  for (int k = 0; k < p->n_curves; k++) {
    set_colour(cr, p->curves[k].colour);
    cairo_set_line_width(cr, 2.2 * u);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    double dash[] = {7 * u, 5 * u};
    cairo_set_dash(cr, dash, p->curves[k].dashed ? 2 : 0, 0);
    bool pen = false;
    for (size_t i = 0; i < c->n_rounds; i++) {
      double v = value_of(&c->rounds[i], p->curves[k].field);
      if (!isfinite(v)) {
        pen = false;
        continue;
      }
      double x = PX(c->rounds[i].round), y = PY(v / scale);
      if (pen) cairo_line_to(cr, x, y);
      else cairo_move_to(cr, x, y);
      pen = true;
    }
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
    for (size_t i = 0; markers && !p->curves[k].dashed && i < c->n_rounds; i++) {
      double v = value_of(&c->rounds[i], p->curves[k].field);
      if (!isfinite(v)) continue;
      cairo_new_sub_path(cr);
      cairo_arc(cr, PX(c->rounds[i].round), PY(v / scale), 3 * u, 0, 2 * M_PI);
    }
    cairo_fill(cr);
  }
  cairo_restore(cr);
#undef PX
#undef PY
}

static void draw(cairo_t *cr, const xf_chart *c) {
  double W = c->width, H = c->height;
  double u = fmin(W / XF_CHART_DEFAULT_WIDTH, H / XF_CHART_DEFAULT_HEIGHT);
  if (u < 0.6) u = 0.6;
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  double m = 16 * u;
  set_colour(cr, INK);
  font(cr, 22 * u, true);
  text_at(cr, c->title ? c->title : "", m, m + 20 * u, 0);
  double top = m + 34 * u;
  if (c->subtitle && *c->subtitle) {
    set_colour(cr, MUTED);
    font(cr, 14 * u, false);
    text_at(cr, c->subtitle, m, m + 42 * u, 0);
    top = m + 56 * u;
  }
  double pw = (W - 3 * m) / 2, ph = (H - top - 2 * m) / 2;
  for (int i = 0; i < 4; i++) {
    box b = {m + (i % 2) * (pw + m), top + (i / 2) * (ph + m), pw, ph};
    draw_panel(cr, c, &PANELS[i], b, u);
  }
}

/* ---- output ---------------------------------------------------------------------- */

/* cairo's write callback onto the file writer; the first failure is kept
 * and every later write refused. */
typedef struct sink {
  xf_file_writer *w;
  xf_errctx *err;
  xf_err rc;
} sink;

static cairo_status_t sink_write(void *closure, const unsigned char *data, unsigned int len) {
  sink *s = closure;
  if (s->rc == XF_OK) s->rc = xf_file_writer_write(s->w, data, len, s->err);
  return s->rc == XF_OK ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

static xf_err cairo_failed(xf_errctx *err, const char *what, cairo_status_t st) {
  return xf_fail(err, XF_EIO, "cairo could not %s: %s", what, cairo_status_to_string(st));
}

/* Draws onto a surface made for the format and sends its bytes to s. */
static xf_err render(const xf_chart *c, xf_chart_format f, sink *s) {
  cairo_surface_t *surface;
  if (f == XF_CHART_SVG)
    surface = cairo_svg_surface_create_for_stream(sink_write, s, c->width, c->height);
  else if (f == XF_CHART_PDF)
    surface = cairo_pdf_surface_create_for_stream(sink_write, s, c->width, c->height);
  else
    surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, c->width, c->height);
  cairo_status_t st = cairo_surface_status(surface);
  if (st != CAIRO_STATUS_SUCCESS) {
    cairo_surface_destroy(surface);
    return s->rc != XF_OK ? s->rc : cairo_failed(s->err, "create the drawing surface", st);
  }
  if (f == XF_CHART_PDF && c->title)
    cairo_pdf_surface_set_metadata(surface, CAIRO_PDF_METADATA_TITLE, c->title);
  cairo_t *cr = cairo_create(surface);
  draw(cr, c);
  st = cairo_status(cr);
  cairo_destroy(cr);
  if (st == CAIRO_STATUS_SUCCESS) {
    if (f == XF_CHART_PNG) st = cairo_surface_write_to_png_stream(surface, sink_write, s);
    else cairo_surface_finish(surface); /* writes out the rest of the document */
    if (st == CAIRO_STATUS_SUCCESS) st = cairo_surface_status(surface);
  }
  cairo_surface_destroy(surface);
  if (s->rc != XF_OK) return s->rc;
  if (st != CAIRO_STATUS_SUCCESS) return cairo_failed(s->err, "draw the report", st);
  return XF_OK;
}

xf_err xf_chart_write(const xf_chart *c, xf_chart_format f, const char *path, xf_errctx *err) {
  XF_ENSURE(c->width >= XF_CHART_MIN_WIDTH && c->width <= XF_CHART_MAX_SIDE &&
                c->height >= XF_CHART_MIN_HEIGHT && c->height <= XF_CHART_MAX_SIDE,
            err, XF_ERANGE, "a report of %dx%d is out of bounds: the width must be %d to %d and "
            "the height %d to %d", c->width, c->height, XF_CHART_MIN_WIDTH, XF_CHART_MAX_SIDE,
            XF_CHART_MIN_HEIGHT, XF_CHART_MAX_SIDE);
  XF_ENSURE(c->n_rounds > 0, err, XF_ERANGE, "there are no rounds to draw");
  xf_file_writer *w = NULL;
  XF_GUARD(xf_file_writer_begin(path, 0644, &w, err));
  sink s = {w, err, XF_OK};
  xf_err rc = render(c, f, &s);
  if (rc != XF_OK) {
    xf_file_writer_abort(w);
    return rc;
  }
  return xf_file_writer_commit(w, err);
}
