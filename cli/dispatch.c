/* SPDX-License-Identifier: Apache-2.0 */
/* The NOUN VERB dispatcher shared by every xfed program (xfed, xfed-site):
 * finds the command in its table, handles --help and --json for all of them,
 * and runs it. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "crypto/digest.h"

static void print_overview(const xf_cli_program *p, FILE *out) {
  fprintf(out, "usage: %s [--json] NOUN [VERB] [OPTIONS]\n\n%s\n\ncommands:\n", p->prog,
          p->about);
  for (const xf_cmd *c = p->commands; c->noun; c++) {
    char name[64];
    snprintf(name, sizeof(name), "%s%s%s", c->noun, c->verb ? " " : "", c->verb ? c->verb : "");
    fprintf(out, "  %-18s %s\n", name, c->summary);
  }
  fprintf(out,
          "\n"
          "global options:\n"
          "  --json      machine-readable output: one JSON document on stdout\n"
          "  --help, -h  help for %s or for the command it follows\n"
          "\n"
          "exit status: %s.\n"
          "Run '%s NOUN VERB --help' for a command's options.\n",
          p->prog, p->exit_statuses, p->prog);
}

static void print_noun(const xf_cli_program *p, FILE *out, const char *noun) {
  fprintf(out, "usage: %s %s VERB [OPTIONS]\n\nverbs:\n", p->prog, noun);
  for (const xf_cmd *c = p->commands; c->noun; c++)
    if (strcmp(c->noun, noun) == 0 && c->verb) fprintf(out, "  %-12s %s\n", c->verb, c->summary);
}

static int is_help(const char *a) { return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0; }

int xf_cli_main(const xf_cli_program *p, int argc, char **argv) {
  xf_cli cli = {.prog = p->prog};
  if (xf_crypto_init() != XF_OK) {
    fprintf(stderr, "%s: libsodium could not start (no entropy source?)\n", p->prog);
    return XF_EXIT_ERROR;
  }
  /* Take --json out wherever it stands, so commands see only their own flags. */
  int n = 0;
  for (int i = 0; i < argc; i++) {
    if (i > 0 && strcmp(argv[i], "--json") == 0) cli.json = true;
    else argv[n++] = argv[i];
  }
  argc = n;
  argv[argc] = NULL;

  if (argc < 2 || is_help(argv[1])) {
    print_overview(p, argc < 2 ? stderr : stdout);
    return argc < 2 ? XF_EXIT_USAGE : XF_EXIT_OK;
  }
  const char *noun = argv[1];
  const char *verb = argc > 2 ? argv[2] : NULL;
  const xf_cmd *found = NULL;
  bool noun_known = false;
  for (const xf_cmd *c = p->commands; c->noun; c++) {
    if (strcmp(c->noun, noun) != 0) continue;
    noun_known = true;
    if (!c->verb || (verb && strcmp(c->verb, verb) == 0)) {
      found = c;
      break;
    }
  }
  if (!noun_known) return xf_cli_usage(&cli, "'%s' is not a command of %s", noun, p->prog);
  if (!found) {
    if (verb && is_help(verb)) {
      print_noun(p, stdout, noun);
      return XF_EXIT_OK;
    }
    print_noun(p, stderr, noun);
    cli.name = noun;
    if (verb) return xf_cli_usage(&cli, "'%s' is not a verb of '%s'", verb, noun);
    return xf_cli_usage(&cli, "'%s' needs a verb", noun);
  }
  int skip = found->verb ? 2 : 1; /* argv[skip] becomes the command's argv[0] */
  char name[64];
  snprintf(name, sizeof(name), "%s%s%s", found->noun, found->verb ? " " : "",
           found->verb ? found->verb : "");
  cli.name = name;
  for (int i = skip + 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) break;
    if (is_help(argv[i])) {
      fputs(found->usage, stdout);
      return XF_EXIT_OK;
    }
  }
  argv[skip] = name;
  return found->run(&cli, argc - skip, argv + skip);
}
