/* SPDX-License-Identifier: Apache-2.0 */
/* The one result type of xfed, its error table, and the error context that
 * carries details (file, field, peer, what would fix it) back to the user. */
#ifndef XF_BASE_RESULT_H
#define XF_BASE_RESULT_H

#include <stdarg.h>
#include <stdio.h>

#define XF_WARN_UNUSED __attribute__((warn_unused_result))
#define XF_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))

/* X(NAME, message). The order is the wire and exit-code-independent numbering:
 * append only, never reorder. */
#define XF_ERRNO_MAP(X)                                                        \
  X(OK, "success")                                                             \
  X(NOMEM, "out of memory")                                                    \
  X(INVAL, "invalid argument")                                                 \
  X(USAGE, "usage error")                                                      \
  X(IO, "input/output error")                                                  \
  X(NOENT, "no such file or object")                                           \
  X(EXISTS, "already exists")                                                  \
  X(FORMAT, "malformed input")                                                 \
  X(TRUNCATED, "input ends before its declared size")                          \
  X(RANGE, "value out of range")                                               \
  X(UNSUPPORTED, "not supported")                                              \
  X(INTEGRITY, "integrity check failed")                                       \
  X(DB, "database error")                                                      \
  X(BACKEND, "compute backend error")                                          \
  X(NODEVICE, "no usable compute device")                                      \
  X(DENIED, "denied by policy")                                                \
  X(INTERNAL, "internal error")

typedef enum xf_err {
#define XF__ERR_ENUM(name, msg) XF_E##name,
  XF_ERRNO_MAP(XF__ERR_ENUM)
#undef XF__ERR_ENUM
  XF_ERR_COUNT
} xf_err;

#define XF_OK XF_EOK

/* Message and symbolic name ("XF_ENOMEM") of a code; never NULL. */
const char *xf_strerror(xf_err code);
const char *xf_err_name(xf_err code);

/* Details of the last failure, filled by the function that failed and printed
 * by the CLI or daemon. Every field is an empty string when not known. A
 * context is owned by the caller; functions that take one may be passed NULL. */
typedef struct xf_errctx {
  xf_err code;
  char file[256];  /* the file at fault */
  char field[128]; /* the field, record, line or offset at fault */
  char peer[128];  /* the remote party at fault */
  char msg[512];   /* what is wrong and, where known, how to fix it */
} xf_errctx;

void xf_errctx_clear(xf_errctx *ctx);

/* Records code and a formatted message in ctx (if not NULL) and returns code,
 * so a failing function can `return xf_fail(ctx, XF_EFORMAT, "...")`. */
xf_err xf_fail(xf_errctx *ctx, xf_err code, const char *fmt, ...) XF_PRINTF(3, 4);

/* xf_fail with a va_list, for modules that wrap it in their own helpers. */
xf_err xf_vfail(xf_errctx *ctx, xf_err code, const char *fmt, va_list ap) XF_PRINTF(3, 0);

/* A failure that wraps the cause ctx already holds (what a callee put
 * there) in what the caller was doing: the message becomes "CONTEXT: CAUSE"
 * and the code becomes code; file, field and peer stay, except a file the
 * context itself names in quotes ('FILE'), which is not named twice. The
 * cause is copied before the context is formatted, so fmt's arguments may be
 * ctx->msg itself. Nothing is said twice: an empty cause adds no ": ", a
 * context that already holds the cause is the whole message, and a cause
 * that already begins with the context (wrapped once before) stays as it
 * is. With a NULL ctx it only returns code. */
xf_err xf_fail_wrap(xf_errctx *ctx, xf_err code, const char *fmt, ...) XF_PRINTF(3, 4);
/* xf_fail_wrap with a va_list, for modules that wrap it. */
xf_err xf_vfail_wrap(xf_errctx *ctx, xf_err code, const char *fmt, va_list ap) XF_PRINTF(3, 0);

/* A failure in a file: ctx (if not NULL) is cleared, then gets code, the
 * message, the file and, when field is not NULL, the field. For readers
 * whose errors name "FILE: FIELD: what is wrong". Returns code. */
xf_err xf_fail_in_file(xf_errctx *ctx, xf_err code, const char *file, const char *field,
                       const char *fmt, ...) XF_PRINTF(5, 6);
/* xf_fail_in_file with a va_list, for modules that wrap it. */
xf_err xf_vfail_in_file(xf_errctx *ctx, xf_err code, const char *file, const char *field,
                        const char *fmt, va_list ap) XF_PRINTF(5, 0);

/* Set the file, field or peer of ctx (if not NULL). Formatting is printf's. */
void xf_errctx_file(xf_errctx *ctx, const char *path);
void xf_errctx_field(xf_errctx *ctx, const char *fmt, ...) XF_PRINTF(2, 3);
void xf_errctx_peer(xf_errctx *ctx, const char *peer);

/* One line for a person: "FILE: FIELD: MSG (code message)", parts omitted when
 * empty, and the code's message omitted when MSG already ends with it ("out
 * of memory (out of memory)" says it twice). Writes at most n bytes
 * including the terminator; returns buf. */
char *xf_errctx_format(const xf_errctx *ctx, char *buf, size_t n);

/* Guards that keep the happy path straight. XF_GUARD returns the callee's
 * error unchanged; XF_ENSURE fails with the given code and message. */
#define XF_GUARD(expr)                                                         \
  do {                                                                         \
    xf_err xf__rc = (expr);                                                    \
    if (xf__rc != XF_OK) return xf__rc;                                        \
  } while (0)

#define XF_ENSURE(cond, ctx, code, ...)                                        \
  do {                                                                         \
    if (!(cond)) return xf_fail((ctx), (code), __VA_ARGS__);                   \
  } while (0)

#endif
