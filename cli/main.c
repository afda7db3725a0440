/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed NOUN VERB`: the one CLI for researchers, compliance teams and admins. */
#include "cli/cli.h"

int main(int argc, char **argv) {
  static const xf_cli_program xfed = {
      .prog = "xfed",
      .about = "xfed is the command line of the xfed federated training platform.",
      .exit_statuses = "0 ok, 1 error, 2 usage, 3 denied by policy",
      .commands = xf_cli_commands,
  };
  return xf_cli_main(&xfed, argc, argv);
}
