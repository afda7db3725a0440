/* SPDX-License-Identifier: Apache-2.0 */
/* Error messages and the error context. */
#include "base/result.h"

#include <stdarg.h>
#include <stdbool.h>
#include <string.h>

static const char *const xf__messages[] = {
#define XF__ERR_MSG(name, msg) msg,
    XF_ERRNO_MAP(XF__ERR_MSG)
#undef XF__ERR_MSG
};

static const char *const xf__names[] = {
#define XF__ERR_NAME(name, msg) "XF_E" #name,
    XF_ERRNO_MAP(XF__ERR_NAME)
#undef XF__ERR_NAME
};

const char *xf_strerror(xf_err code) {
  if ((unsigned)code >= XF_ERR_COUNT) return "unknown error";
  return xf__messages[code];
}

const char *xf_err_name(xf_err code) {
  if ((unsigned)code >= XF_ERR_COUNT) return "XF_EUNKNOWN";
  return xf__names[code];
}

void xf_errctx_clear(xf_errctx *ctx) {
  if (ctx) memset(ctx, 0, sizeof(*ctx));
}

xf_err xf_vfail(xf_errctx *ctx, xf_err code, const char *fmt, va_list ap) {
  if (ctx) {
    ctx->code = code;
    vsnprintf(ctx->msg, sizeof(ctx->msg), fmt, ap);
  }
  return code;
}

xf_err xf_fail(xf_errctx *ctx, xf_err code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  xf_vfail(ctx, code, fmt, ap);
  va_end(ap);
  return code;
}

/* dst = a, sep, b, cut where dst's n bytes end. */
static void join(char *dst, size_t n, const char *a, const char *sep, const char *b) {
  size_t used = 0;
  const char *parts[] = {a, sep, b};
  for (size_t i = 0; i < 3 && used + 1 < n; i++) {
    size_t len = strlen(parts[i]);
    if (len > n - 1 - used) len = n - 1 - used;
    memcpy(dst + used, parts[i], len);
    used += len;
  }
  dst[used] = '\0';
}

xf_err xf_vfail_wrap(xf_errctx *ctx, xf_err code, const char *fmt, va_list ap) {
  if (!ctx) return code;
  char cause[sizeof(ctx->msg)], context[sizeof(ctx->msg)];
  snprintf(cause, sizeof(cause), "%s", ctx->msg);
  vsnprintf(context, sizeof(context), fmt, ap);
  size_t clen = strlen(context);
  ctx->code = code;
  if (!cause[0] || strstr(context, cause))
    join(ctx->msg, sizeof(ctx->msg), context, "", "");
  else if (clen && strncmp(cause, context, clen) == 0)
    join(ctx->msg, sizeof(ctx->msg), cause, "", "");
  else
    join(ctx->msg, sizeof(ctx->msg), context, ": ", cause);
  if (ctx->file[0]) {
    char quoted[sizeof(ctx->file) + 2];
    snprintf(quoted, sizeof(quoted), "'%s'", ctx->file);
    if (strstr(context, quoted)) ctx->file[0] = '\0';
  }
  return code;
}

xf_err xf_fail_wrap(xf_errctx *ctx, xf_err code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  xf_vfail_wrap(ctx, code, fmt, ap);
  va_end(ap);
  return code;
}

xf_err xf_vfail_in_file(xf_errctx *ctx, xf_err code, const char *file, const char *field,
                        const char *fmt, va_list ap) {
  xf_errctx_clear(ctx);
  xf_vfail(ctx, code, fmt, ap);
  xf_errctx_file(ctx, file);
  if (field) xf_errctx_field(ctx, "%s", field);
  return code;
}

xf_err xf_fail_in_file(xf_errctx *ctx, xf_err code, const char *file, const char *field,
                       const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  xf_vfail_in_file(ctx, code, file, field, fmt, ap);
  va_end(ap);
  return code;
}

void xf_errctx_file(xf_errctx *ctx, const char *path) {
  if (ctx) snprintf(ctx->file, sizeof(ctx->file), "%s", path ? path : "");
}

void xf_errctx_field(xf_errctx *ctx, const char *fmt, ...) {
  if (!ctx) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx->field, sizeof(ctx->field), fmt, ap);
  va_end(ap);
}

void xf_errctx_peer(xf_errctx *ctx, const char *peer) {
  if (ctx) snprintf(ctx->peer, sizeof(ctx->peer), "%s", peer ? peer : "");
}

char *xf_errctx_format(const xf_errctx *ctx, char *buf, size_t n) {
  if (n == 0) return buf;
  buf[0] = '\0';
  size_t used = 0;
#define XF__APPEND(...)                                                        \
  do {                                                                         \
    if (used < n) {                                                            \
      int w = snprintf(buf + used, n - used, __VA_ARGS__);                     \
      if (w > 0) used += (size_t)w;                                            \
    }                                                                          \
  } while (0)
  if (ctx->peer[0]) XF__APPEND("peer %s: ", ctx->peer);
  if (ctx->file[0]) XF__APPEND("%s: ", ctx->file);
  if (ctx->field[0]) XF__APPEND("%s: ", ctx->field);
  const char *what = xf_strerror(ctx->code);
  size_t mlen = strlen(ctx->msg), wlen = strlen(what);
  bool says_it = mlen >= wlen && strcmp(ctx->msg + mlen - wlen, what) == 0;
  if (ctx->msg[0] && !says_it)
    XF__APPEND("%s (%s)", ctx->msg, what);
  else if (ctx->msg[0])
    XF__APPEND("%s", ctx->msg);
  else
    XF__APPEND("%s", xf_strerror(ctx->code));
#undef XF__APPEND
  return buf;
}
