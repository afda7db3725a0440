/* SPDX-License-Identifier: Apache-2.0 */
/* The `xfed` CLI: its table of NOUN VERB commands (cli/commands.c) and their
 * entry points, one file each, on the dispatcher of cmd/cmd.h. */
#ifndef XF_CLI_CLI_H
#define XF_CLI_CLI_H

#include "cmd/cmd.h"

/* The table, in cli/commands.c. Terminated by an entry with noun NULL. */
extern const xf_cmd xf_cli_commands[];

/* Command entry points, one file each. */
int xf_cmd_data_split(xf_cli *cli, int argc, char **argv);
int xf_cmd_data_stats(xf_cli *cli, int argc, char **argv);
int xf_cmd_dp_epsilon(xf_cli *cli, int argc, char **argv);
int xf_cmd_dp_calibrate(xf_cli *cli, int argc, char **argv);
int xf_cmd_job_submit(xf_cli *cli, int argc, char **argv);
int xf_cmd_job_status(xf_cli *cli, int argc, char **argv);
int xf_cmd_job_list(xf_cli *cli, int argc, char **argv);
int xf_cmd_job_watch(xf_cli *cli, int argc, char **argv);
int xf_cmd_job_cancel(xf_cli *cli, int argc, char **argv);
int xf_cmd_job_metrics(xf_cli *cli, int argc, char **argv);
int xf_cmd_job_export(xf_cli *cli, int argc, char **argv);
int xf_cmd_job_report(xf_cli *cli, int argc, char **argv);
int xf_cmd_model_eval(xf_cli *cli, int argc, char **argv);
int xf_cmd_model_export(xf_cli *cli, int argc, char **argv);
int xf_cmd_dashboard(xf_cli *cli, int argc, char **argv);
int xf_cmd_pki_init(xf_cli *cli, int argc, char **argv);
int xf_cmd_pki_issue(xf_cli *cli, int argc, char **argv);
int xf_cmd_pki_revoke(xf_cli *cli, int argc, char **argv);
int xf_cmd_pki_show(xf_cli *cli, int argc, char **argv);
int xf_cmd_pki_crl(xf_cli *cli, int argc, char **argv);
int xf_cmd_policy_region(xf_cli *cli, int argc, char **argv);
int xf_cmd_policy_site(xf_cli *cli, int argc, char **argv);
int xf_cmd_policy_dataset(xf_cli *cli, int argc, char **argv);
int xf_cmd_policy_rule(xf_cli *cli, int argc, char **argv);
int xf_cmd_policy_export(xf_cli *cli, int argc, char **argv);
int xf_cmd_policy_import(xf_cli *cli, int argc, char **argv);
int xf_cmd_policy_log(xf_cli *cli, int argc, char **argv);
int xf_cmd_policy_diff(xf_cli *cli, int argc, char **argv);
int xf_cmd_policy_check(xf_cli *cli, int argc, char **argv);
int xf_cmd_policy_test(xf_cli *cli, int argc, char **argv);
int xf_cmd_policy_push(xf_cli *cli, int argc, char **argv);
int xf_cmd_policy_pull(xf_cli *cli, int argc, char **argv);
int xf_cmd_audit_list(xf_cli *cli, int argc, char **argv);
int xf_cmd_audit_verify(xf_cli *cli, int argc, char **argv);
int xf_cmd_audit_export(xf_cli *cli, int argc, char **argv);
int xf_cmd_train(xf_cli *cli, int argc, char **argv);
int xf_cmd_version(xf_cli *cli, int argc, char **argv);

#endif
