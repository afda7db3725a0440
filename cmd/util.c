/* SPDX-License-Identifier: Apache-2.0 */
/* Shared CLI helpers: error reporting, usage errors, strict flag parsing. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/text.h"
#include "cmd/cmd.h"

/* The --json form of an error: {"error": {code, message, file, field, peer}} on stdout. */
static void print_json_error(xf_err rc, const char *msg, const char *file, const char *field,
                             const char *peer) {
  json_t *e = json_pack("{s:{s:s,s:s,s:s,s:s,s:s}}", "error", "code", xf_err_name(rc), "message",
                        msg, "file", file, "field", field, "peer", peer);
  if (e) {
    json_dumpf(e, stdout, JSON_INDENT(2));
    fputc('\n', stdout);
    json_decref(e);
  }
}

int xf_cli_fail(xf_cli *cli, xf_err rc) {
  xf_errctx ctx = cli->err;
  if (ctx.code != rc) {
    xf_errctx_clear(&ctx);
    ctx.code = rc;
  }
  char line[1200];
  xf_errctx_format(&ctx, line, sizeof(line));
  fprintf(stderr, "%s %s: %s\n", cli->prog, cli->name ? cli->name : "", line);
  if (cli->json)
    print_json_error(rc, ctx.msg[0] ? ctx.msg : xf_strerror(rc), ctx.file, ctx.field, ctx.peer);
  if (rc == XF_EUSAGE) return XF_EXIT_USAGE;
  if (rc == XF_EDENIED) return XF_EXIT_DENIED;
  return XF_EXIT_ERROR;
}

int xf_cli_fail_unauthorized(xf_cli *cli) {
  const xf_errctx *ctx = &cli->err;
  char line[1200];
  snprintf(line, sizeof(line), "%s%s%s%s (not authorized)", ctx->peer[0] ? "peer " : "",
           ctx->peer, ctx->peer[0] ? ": " : "", ctx->msg[0] ? ctx->msg : "refused");
  fprintf(stderr, "%s %s: %s\n", cli->prog, cli->name ? cli->name : "", line);
  if (cli->json)
    print_json_error(XF_EDENIED, ctx->msg[0] ? ctx->msg : "not authorized", ctx->file,
                     ctx->field, ctx->peer);
  return XF_EXIT_ERROR;
}

int xf_cli_usage(xf_cli *cli, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const char *name = cli->name ? cli->name : "";
  /* A message that ends in a question ("did you mean 'job'?") is its own sentence. */
  size_t len = strlen(msg);
  bool question = len && msg[len - 1] == '?';
  fprintf(stderr, "%s%s%s: %s%s '%s%s%s --help'\n", cli->prog, *name ? " " : "", name, msg,
          question ? " See" : "; see", cli->prog, *name ? " " : "", name);
  if (cli->json) print_json_error(XF_EUSAGE, msg, "", "", "");
  return XF_EXIT_USAGE;
}

xf_err xf_cli_parse_int(xf_cli *cli, const char *flag, const char *s, long min, long max,
                        long *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end != '\0' || v < min || v > max)
    return xf_fail(&cli->err, XF_EUSAGE, "%s '%s' is not a whole number in [%ld, %ld]", flag, s,
                   min, max);
  *out = v;
  return XF_OK;
}

xf_err xf_cli_parse_double(xf_cli *cli, const char *flag, const char *s, double min,
                           double max, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end != '\0' || !isfinite(v) || v < min || v > max)
    return xf_fail(&cli->err, XF_EUSAGE, "%s '%s' is not a number in [%g, %g]", flag, s, min,
                   max);
  *out = v;
  return XF_OK;
}

bool xf_cli_interactive(void) { return isatty(STDERR_FILENO); }

int xf_cli_option_error(xf_cli *cli, int ch, char **argv, const struct option *opts) {
  if (ch == ':') return xf_cli_usage(cli, "%s needs a value", argv[optind - 1]);
  /* optopt names an unknown short option, which may not end its argv word */
  if (optopt) return xf_cli_usage(cli, "unknown option '-%c'", optopt);
  const char *word = argv[optind - 1];
  /* The nearest long option to what stands between "--" and any "=". */
  char typed[XF_TEXT_WORD_MAX + 1] = "";
  if (strncmp(word, "--", 2) == 0) {
    size_t len = strcspn(word + 2, "=");
    if (len <= XF_TEXT_WORD_MAX) {
      memcpy(typed, word + 2, len);
      typed[len] = '\0';
    }
  }
  xf_text_nearest near;
  xf_text_nearest_start(&near, typed);
  for (const struct option *o = opts; typed[0] && o && o->name; o++)
    xf_text_nearest_offer(&near, o->name);
  const char *hint = xf_text_nearest_best(&near);
  if (hint) return xf_cli_usage(cli, "unknown option '%s'; did you mean '--%s'?", word, hint);
  return xf_cli_usage(cli, "unknown option '%s'", word);
}

xf_err xf_cli_parse_time(xf_cli *cli, const char *flag, const char *s, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (!errno && end != s && *end == '\0' && isfinite(v) && v >= 0 && strchr(s, '-') == NULL) {
    *out = v;
    return XF_OK;
  }
  struct tm tm = {0};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0, used = 0;
  int n = sscanf(s, "%4d-%2d-%2d%n", &y, &mo, &d, &used);
  const char *rest = n == 3 ? s + used : NULL;
  if (rest && *rest == 'T') {
    int u2 = 0;
    if (sscanf(rest, "T%2d:%2d%n", &h, &mi, &u2) != 2) rest = NULL;
    else {
      rest += u2;
      if (*rest == ':') {
        int u3 = 0;
        if (sscanf(rest, ":%2d%n", &sec, &u3) != 1) rest = NULL;
        else rest += u3;
      }
    }
  }
  if (rest && *rest == 'Z') rest++;
  if (!rest || *rest != '\0' || y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 ||
      mi > 59 || sec > 60 || h < 0 || mi < 0 || sec < 0)
    return xf_fail(&cli->err, XF_EUSAGE,
                   "%s '%s' is not Unix seconds or an ISO 8601 UTC time such as "
                   "2024-05-01T12:00:00Z",
                   flag, s);
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  *out = (double)timegm(&tm);
  return XF_OK;
}

void xf_cli_print_json(json_t *o) {
  if (!o) return;
  json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  fputc('\n', stdout);
  json_decref(o);
}

const char *xf_cli_utc_text(double t, char buf[32]) {
  time_t s = (time_t)floor(t);
  struct tm tm;
  if (!isfinite(t) || !gmtime_r(&s, &tm) || !strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm))
    snprintf(buf, 32, "%.0f", t);
  return buf;
}
