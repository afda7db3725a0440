/* SPDX-License-Identifier: Apache-2.0 */
/* The training report of `xfed job report`: four panels (test accuracy,
 * loss, ε spent, bytes up and down) over a job's rounds, drawn with cairo
 * as PNG, SVG or PDF. Knows nothing of the coordinator: it draws the
 * figures it is given. */
#ifndef XF_CLI_REPORT_CHART_H
#define XF_CLI_REPORT_CHART_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"

typedef enum xf_chart_format { XF_CHART_PNG = 0, XF_CHART_SVG, XF_CHART_PDF } xf_chart_format;

/* The bounds of a drawing in pixels (PNG) or points (SVG, PDF): small
 * enough that a PNG's pixels (4 bytes each) stay below 64 MiB, large
 * enough that the tick labels do not collide. */
#define XF_CHART_MIN_WIDTH 480
#define XF_CHART_MIN_HEIGHT 360
#define XF_CHART_MAX_SIDE 4096
#define XF_CHART_DEFAULT_WIDTH 1200
#define XF_CHART_DEFAULT_HEIGHT 800

/* One round's figures. NaN marks a figure no report of the round carried
 * (no evaluation, no privacy accounting); its curve has a gap there. */
typedef struct xf_chart_round {
  uint32_t round;
  double test_accuracy; /* in [0, 1] */
  double train_loss;
  double test_loss;
  double epsilon;       /* spent once the round committed */
  double bytes_up;      /* over the round's sites */
  double bytes_down;
} xf_chart_round;

/* What to draw. Strings are borrowed UTF-8; rounds are in ascending round
 * order. */
typedef struct xf_chart {
  const char *title;    /* e.g. "job 7: quickstart" */
  const char *subtitle; /* one line under it, or NULL */
  const xf_chart_round *rounds;
  size_t n_rounds;
  int width, height;    /* within the bounds above */
} xf_chart;

/* "png", "svg" or "pdf" (lower case) into *out; false for anything else. */
bool xf_chart_format_parse(const char *name, xf_chart_format *out);

/* The format a path's extension names (.png, .svg, .pdf, any case); false
 * when it names none of them. */
bool xf_chart_format_of_path(const char *path, xf_chart_format *out);

/* "png", "svg" or "pdf". */
const char *xf_chart_format_name(xf_chart_format f);

/* Draws c and writes it to path in format f through base/file.h's
 * writer (a regular file or nothing at path; replaced atomically, mode
 * 0644). XF_ERANGE for a size out of bounds or no rounds; XF_EIO when cairo
 * fails (its status named) or the file cannot be written; XF_EEXISTS for a
 * path that is not a regular file. */
xf_err xf_chart_write(const xf_chart *c, xf_chart_format f, const char *path,
                      xf_errctx *err) XF_WARN_UNUSED;

#endif
