/* SPDX-License-Identifier: Apache-2.0 */
/* What xfed and xfed-site print alike (--json honoured): an audit trail's
 * rows and a verification's verdict, and a policy's versions. */
#ifndef XF_CMD_PRINT_H
#define XF_CMD_PRINT_H

#include <stddef.h>

#include "cmd/cmd.h"

/* An audit trail's rows and a verification's verdict, printed the same way
 * by `xfed audit` and `xfed-site audit` (cmd/print_audit.c).
 * The verdict printer returns the exit status: 0 intact, 1 damaged; trail
 * (may be NULL) names what kind of file was verified. */
struct xf_audit_row;
struct xf_audit_verdict;
void xf_cli_audit_rows_print(xf_cli *cli, const struct xf_audit_row *rows, size_t n);
int xf_cli_audit_verdict_print(xf_cli *cli, const struct xf_audit_verdict *v,
                               const char *trail);

/* A policy's versions as `xfed policy log` prints them. */
struct xf_policy_version_info;
void xf_cli_policy_log_print(xf_cli *cli, const struct xf_policy_version_info *log, size_t n);

/* Rows ({seq, at, actor, kind, subject, detail, prev, digest}, from the
 * local trail or the coordinator's) as xf_cli_audit_rows_print prints them.
 * Takes the reference. */
void xf_cli_audit_rows_print_json(xf_cli *cli, struct json_t *rows);

/* Versions ([{version, at, author, reason}], the coordinator's answer or
 * the local log in that form) as xf_cli_policy_log_print prints them. Takes
 * the reference. */
void xf_cli_policy_versions_print(xf_cli *cli, struct json_t *versions);

#endif
