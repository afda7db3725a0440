/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed NOUN VERB`: the one CLI for researchers, compliance teams and admins. */
#include <stdlib.h>

#include "base/log.h"
#include "cli/cli.h"

int main(int argc, char **argv) {
  /* The connection flags of the commands that talk to the coordinator may
   * come first, as in scripts that keep them in one variable. */
  static const char *const connection_flags[] = {"--coordinator", "--cert", "--key", "--ca",
                                                 "--crl", "--timeout", NULL};
  static const xf_cli_program xfed = {
      .prog = "xfed",
      .about = "xfed is the command line of the xfed federated training platform.",
      .exit_statuses = "0 ok, 1 error, 2 usage, 3 denied by policy",
      .commands = xf_cli_commands,
      .leading_flags = connection_flags,
  };
  /* A person reads this program's stderr: only warnings and errors, unless
   * XF_LOG_LEVEL asks for more. */
  if (!getenv("XF_LOG_LEVEL")) xf_log_set_level(XF_LOG_WARN);
  return xf_cli_main(&xfed, argc, argv);
}
