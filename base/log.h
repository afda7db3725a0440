/* SPDX-License-Identifier: Apache-2.0 */
/* Structured logging to stderr: one line per event, key=value fields, so that
 * operators can grep and ship logs without a parser of ours. */
#ifndef XF_BASE_LOG_H
#define XF_BASE_LOG_H

#include "base/result.h"

typedef enum xf_log_level {
  XF_LOG_DEBUG = 0,
  XF_LOG_INFO,
  XF_LOG_WARN,
  XF_LOG_ERROR,
  XF_LOG_OFF
} xf_log_level;

/* The threshold starts at XF_LOG_LEVEL from the environment (debug, info,
 * warn, error, off; default info). */
void xf_log_set_level(xf_log_level level);
xf_log_level xf_log_get_level(void);
/* Parses "debug"...; returns XF_EINVAL for anything else. */
xf_err xf_log_parse_level(const char *s, xf_log_level *out) XF_WARN_UNUSED;

/* The line format, from XF_LOG_FORMAT: "kv" (default) or "json" (one JSON
 * object per line: ts, level, event, and each key=value field as a member;
 * docs/operator-guide.md, "Logs"). */
typedef enum xf_log_format { XF_LOG_FORMAT_KV = 0, XF_LOG_FORMAT_JSON } xf_log_format;
void xf_log_set_format(xf_log_format format);
/* Reads XF_LOG_FORMAT (unset or empty: kv); XF_EINVAL with a message
 * naming the accepted values when it is anything else. Programs call it at
 * startup and refuse to start on an error. */
xf_err xf_log_format_from_env(xf_errctx *err) XF_WARN_UNUSED;

/* The JSON object for one line (without the line feed) into out (n
 * bytes, cut to a valid object when it does not fit): "ts", "level",
 * "event", then the members of `fields` (key=value words; a value in
 * double quotes may hold spaces; a value that is a JSON number stays a
 * number, every other one is a string). Words without '=' go together into
 * "text". Strings are escaped as JSON needs (quotes, backslashes, control
 * characters; bytes that are not UTF-8 become U+FFFD). Returns the length. */
size_t xf_log_json_line(char *out, size_t n, const char *ts, const char *level,
                        const char *event, const char *fields);

/* Writes "ts=... level=L event=EVENT " followed by the formatted fields, as
 * one write, so lines from several threads never interleave. `fields` should
 * itself be key=value pairs; values with spaces should be quoted by the
 * caller. Never log keys, masks or raw updates. */
void xf_log(xf_log_level level, const char *event, const char *fields, ...) XF_PRINTF(3, 4);

#define XF_DEBUG(event, ...) xf_log(XF_LOG_DEBUG, event, __VA_ARGS__)
#define XF_INFO(event, ...) xf_log(XF_LOG_INFO, event, __VA_ARGS__)
#define XF_WARN(event, ...) xf_log(XF_LOG_WARN, event, __VA_ARGS__)
#define XF_ERROR(event, ...) xf_log(XF_LOG_ERROR, event, __VA_ARGS__)

#endif
