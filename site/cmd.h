/* SPDX-License-Identifier: Apache-2.0 */
/* What the files of `xfed-site` share: opening the site directory, and the
 * commands kept in files of their own (cmd_policy.c, cmd_audit.c, cmd_stats.c), listed in
 * main.c's table. */
#ifndef XF_SITE_CMD_H
#define XF_SITE_CMD_H

#include "cmd/cmd.h"
#include "site/registry.h"

/* Opens the site directory dir (NULL: XFED_SITE_DIR, else the current
 * directory): loads site.json into *cfg and opens site.db. On failure the
 * error is in cli->err and *reg is NULL; XF_EUSAGE for a --dir too long.
 * The caller closes *reg with xf_site_registry_close. */
xf_err xf_site_cli_open(xf_cli *cli, const char *dir, xf_site_config *cfg,
                        xf_site_registry **reg) XF_WARN_UNUSED;

/* Who runs a command that changes or releases something, when --author is
 * not given: $USER, else the name of the account running the command (a
 * service account's environment often has no USER). NULL when neither is
 * known. */
const char *xf_site_operator_name(void);

/* `xfed-site policy import|export|log|rules` (cmd_policy.c). */
int xf_site_cmd_policy_import(xf_cli *cli, int argc, char **argv);
int xf_site_cmd_policy_export(xf_cli *cli, int argc, char **argv);
int xf_site_cmd_policy_log(xf_cli *cli, int argc, char **argv);
int xf_site_cmd_policy_rules(xf_cli *cli, int argc, char **argv);

/* `xfed-site dataset stats` (cmd_stats.c). */
int xf_site_cmd_dataset_stats(xf_cli *cli, int argc, char **argv);

/* `xfed-site audit list|verify|export` (cmd_audit.c). */
int xf_site_cmd_audit_list(xf_cli *cli, int argc, char **argv);
int xf_site_cmd_audit_verify(xf_cli *cli, int argc, char **argv);
int xf_site_cmd_audit_export(xf_cli *cli, int argc, char **argv);

#endif
