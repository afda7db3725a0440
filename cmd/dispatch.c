/* SPDX-License-Identifier: Apache-2.0 */
/* The NOUN VERB dispatcher shared by every xfed program (xfed, xfed-site,
 * xfed-coord): finds the command in its table, handles --help and --json for
 * all of them, and runs it. */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/text.h"
#include "cmd/cmd.h"
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
          "  --help, -h  help for %s or for the command it follows\n",
          p->prog);
  if (p->leading_flags && p->leading_flags[0]) {
    fputs("  ", out);
    for (const char *const *f = p->leading_flags; *f; f++)
      fprintf(out, "%s%s", *f, f[1] ? ", " : "");
    fputs("\n              may also stand before NOUN\n", out);
  }
  fprintf(out,
          "\n"
          "exit status: %s.\n"
          "Run '%s NOUN VERB --help' for a command's options.\n",
          p->exit_statuses, p->prog);
}

static void print_noun(const xf_cli_program *p, FILE *out, const char *noun) {
  fprintf(out, "usage: %s %s VERB [OPTIONS]\n\nverbs:\n", p->prog, noun);
  for (const xf_cmd *c = p->commands; c->noun; c++)
    if (strcmp(c->noun, noun) == 0 && c->verb) fprintf(out, "  %-12s %s\n", c->verb, c->summary);
}

static int is_help(const char *a) { return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0; }

/* Words a leading flag at a takes: 1 for "--flag=value", 2 for "--flag
 * value", 0 when a is not one of the program's leading flags. */
static int leading_words(const xf_cli_program *p, const char *a) {
  for (const char *const *f = p->leading_flags; f && *f; f++) {
    size_t n = strlen(*f);
    if (strncmp(a, *f, n) != 0) continue;
    if (a[n] == '=') return 1;
    if (a[n] == '\0') return 2;
  }
  return 0;
}

/* The most words of leading flags before NOUN: every flag of a program
 * twice over is more than anybody types. */
#define LEADING_MAX 32

int xf_cli_main(const xf_cli_program *p, int argc, char **argv) {
  xf_cli cli = {.prog = p->prog};
  xf_errctx lerr;
  xf_errctx_clear(&lerr);
  if (xf_log_format_from_env(&lerr) != XF_OK) {
    fprintf(stderr, "%s: %s\n", p->prog, lerr.msg);
    return XF_EXIT_USAGE;
  }
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

  /* Take the leading flags out; they go back after the command's name. */
  char *leading[LEADING_MAX];
  int n_leading = 0;
  while (argc > 1 && leading_words(p, argv[1])) {
    int w = leading_words(p, argv[1]);
    if (w > argc - 1) return xf_cli_usage(&cli, "%s needs a value", argv[1]);
    if (n_leading + w > LEADING_MAX)
      return xf_cli_usage(&cli, "too many options before the command");
    for (int i = 0; i < w; i++) leading[n_leading++] = argv[1 + i];
    memmove(argv + 1, argv + 1 + w, (size_t)(argc - w) * sizeof(*argv)); /* with the NULL */
    argc -= w;
  }

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
  if (!noun_known) {
    xf_text_nearest near;
    xf_text_nearest_start(&near, noun);
    for (const xf_cmd *c = p->commands; c->noun; c++) xf_text_nearest_offer(&near, c->noun);
    const char *hint = xf_text_nearest_best(&near);
    return xf_cli_usage(&cli, "unknown command '%s'%s%s%s", noun, hint ? "; did you mean '" : "",
                        hint ? hint : "", hint ? "'?" : "");
  }
  if (!found) {
    if (verb && is_help(verb)) {
      print_noun(p, stdout, noun);
      return XF_EXIT_OK;
    }
    print_noun(p, stderr, noun);
    cli.name = noun;
    if (verb) {
      xf_text_nearest near;
      xf_text_nearest_start(&near, verb);
      for (const xf_cmd *c = p->commands; c->noun; c++)
        if (strcmp(c->noun, noun) == 0) xf_text_nearest_offer(&near, c->verb);
      const char *hint = xf_text_nearest_best(&near);
      return xf_cli_usage(&cli, "'%s' is not a verb of '%s'%s%s%s", verb, noun,
                          hint ? "; did you mean '" : "", hint ? hint : "", hint ? "'?" : "");
    }
    return xf_cli_usage(&cli, "'%s' needs a verb", noun);
  }
  int skip = found->verb ? 2 : 1; /* argv[skip] becomes the command's argv[0] */
  if (n_leading) {
    /* argv has room: the words were taken out of it. */
    memmove(argv + skip + 1 + n_leading, argv + skip + 1,
            (size_t)(argc - skip) * sizeof(*argv)); /* with the NULL */
    memcpy(argv + skip + 1, leading, (size_t)n_leading * sizeof(*argv));
    argc += n_leading;
  }
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
