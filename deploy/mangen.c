/* SPDX-License-Identifier: Apache-2.0 */
/* Writes a man page from its source (docs/man/) with the commands and
 * options the program's own --help prints, so the page says what the
 * command tables say and cannot drift from them.
 *
 * usage: xfed-mangen SOURCE OUT PROGRAM
 *
 * SOURCE is roff with directive lines, each replaced by roff made from
 * PROGRAM's help:
 *   @COMMANDS        every command of `PROGRAM --help` ("commands:"), each a
 *                    subsection with its summary and the option lines (those
 *                    that start "  -", with their indented continuations) of
 *                    `PROGRAM NOUN [VERB] --help`;
 *   @GLOBAL_OPTIONS  the option lines of `PROGRAM --help` ("global options:").
 * Every other line is copied. A command whose help cannot be read, or a
 * help with no command, fails the build. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define HELP_MAX (256u * 1024u)
#define COMMANDS_MAX 128
#define NAME_MAX_LEN 64

static const char *program;
static const char *prog_name; /* program's base name, as the help says it */

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "xfed-mangen: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

/* The standard output of PROGRAM WORDS... --help, NUL-terminated; the
 * caller frees it. Fails the build unless it exits 0. */
static char *help_of(const char *noun, const char *verb) {
  int fds[2];
  if (pipe(fds) != 0) die("pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) die("fork: %s", strerror(errno));
  if (pid == 0) {
    char *argv[5];
    int n = 0;
    argv[n++] = (char *)program;
    if (noun) argv[n++] = (char *)noun;
    if (verb) argv[n++] = (char *)verb;
    argv[n++] = "--help";
    argv[n] = NULL;
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    unsetenv("XF_LOG_FORMAT"); /* the build's environment is not the program's to judge */
    execv(program, argv);
    _exit(127);
  }
  close(fds[1]);
  char *buf = malloc(HELP_MAX);
  if (!buf) die("out of memory");
  size_t len = 0;
  ssize_t got;
  while ((got = read(fds[0], buf + len, HELP_MAX - 1 - len)) > 0) len += (size_t)got;
  close(fds[0]);
  buf[len] = '\0';
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
      len == HELP_MAX - 1)
    die("'%s%s%s%s%s --help' failed or printed more than 256 KiB", program, noun ? " " : "",
        noun ? noun : "",
        verb ? " " : "", verb ? verb : "");
  return buf;
}

/* Roff text of s: a backslash as \e, a hyphen that starts a word (an
 * option's dashes) as \-; a leading '.' or '\'' is guarded by \&. */
static void put_text(FILE *out, const char *s, size_t n) {
  if (n && (s[0] == '.' || s[0] == '\'')) fputs("\\&", out);
  bool dash_run = false;
  for (size_t i = 0; i < n; i++) {
    char ch = s[i];
    bool word_start = i == 0 || strchr(" ([|,=/\"", s[i - 1]) != NULL;
    if (ch == '-' && (word_start || dash_run)) {
      fputs("\\-", out);
      dash_run = true;
      continue;
    }
    dash_run = false;
    if (ch == '\\') fputs("\\e", out);
    else fputc(ch, out);
  }
}

/* The term of an option line: its flags bold, their arguments italic. */
static void put_term(FILE *out, const char *s, size_t n) {
  size_t i = 0;
  bool first = true;
  while (i < n) {
    size_t j = i;
    while (j < n && s[j] != ' ') j++;
    if (!first) fputc(' ', out);
    fputs(s[i] == '-' || s[i] == '[' ? "\\fB" : "\\fI", out);
    put_text(out, s + i, j - i);
    fputs("\\fR", out);
    first = false;
    while (j < n && s[j] == ' ') j++;
    i = j;
  }
}

static size_t indent_of(const char *line) {
  size_t k = 0;
  while (line[k] == ' ') k++;
  return k;
}

/* The option lines of help (from `from` on, or all when from is NULL) as
 * roff .TP entries: "  -TERM  TEXT" and the lines indented further that
 * follow it. Returns how many it wrote. */
static int put_options(FILE *out, const char *help, const char *from) {
  const char *p = help;
  if (from) {
    p = strstr(help, from);
    if (!p) return 0;
  }
  int entries = 0;
  bool in_entry = false;
  while (*p) {
    const char *end = strchr(p, '\n');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    size_t ind = indent_of(p);
    if (ind == 2 && n > 2 && p[2] == '-') {
      const char *term = p + 2, *sep = strstr(term, "  ");
      size_t tn = sep && sep < p + n ? (size_t)(sep - term) : n - 2;
      fputs(".TP\n", out);
      put_term(out, term, tn);
      fputc('\n', out);
      if (sep && sep < p + n) {
        const char *text = sep;
        while (*text == ' ') text++;
        put_text(out, text, (size_t)(p + n - text));
        fputc('\n', out);
      }
      in_entry = true;
      entries++;
    } else if (in_entry && ind >= 4 && ind < n) {
      put_text(out, p + ind, n - ind);
      fputc('\n', out);
    } else {
      in_entry = false;
      if (from && n == 0 && entries) break; /* the block of `from` ends at a blank line */
    }
    if (!end) break;
    p = end + 1;
  }
  return entries;
}

typedef struct command {
  char noun[NAME_MAX_LEN], verb[NAME_MAX_LEN];
  char summary[512];
} command;

/* The commands of the overview's "commands:" block: "  NAME  SUMMARY". */
static size_t commands_of(const char *overview, command *cmds) {
  const char *p = strstr(overview, "\ncommands:\n");
  if (!p) die("'%s --help' lists no commands", program);
  p += strlen("\ncommands:\n");
  size_t n = 0;
  while (*p == ' ' && n < COMMANDS_MAX) {
    const char *end = strchr(p, '\n');
    if (!end) break;
    const char *name = p + indent_of(p), *sep = strstr(name, "  ");
    if (!sep || sep > end)
      die("a command line of '%s --help' has no summary: %.*s", program, (int)(end - p), p);
    command *c = &cmds[n++];
    const char *space = memchr(name, ' ', (size_t)(sep - name));
    const char *noun_end = space ? space : sep;
    if (noun_end - name >= NAME_MAX_LEN || (space && sep - space > NAME_MAX_LEN))
      die("a command name of '%s --help' is too long: %.*s", program, (int)(sep - name), name);
    snprintf(c->noun, sizeof(c->noun), "%.*s", (int)(noun_end - name), name);
    snprintf(c->verb, sizeof(c->verb), "%.*s", space ? (int)(sep - space - 1) : 0,
             space ? space + 1 : "");
    while (*sep == ' ') sep++;
    snprintf(c->summary, sizeof(c->summary), "%.*s", (int)(end - sep), sep);
    p = end + 1;
  }
  if (n == 0) die("'%s --help' lists no commands", program);
  return n;
}

static void put_commands(FILE *out, const char *overview) {
  static command cmds[COMMANDS_MAX];
  size_t n = commands_of(overview, cmds);
  for (size_t i = 0; i < n; i++) {
    const command *c = &cmds[i];
    char *help = help_of(c->noun, c->verb[0] ? c->verb : NULL);
    fprintf(out, ".SS \"%s %s%s%s\"\n", prog_name, c->noun, c->verb[0] ? " " : "", c->verb);
    put_text(out, c->summary, strlen(c->summary));
    fputc('\n', out);
    put_options(out, help, NULL);
    free(help);
  }
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: xfed-mangen SOURCE OUT PROGRAM\n");
    return 2;
  }
  program = argv[3];
  prog_name = strrchr(program, '/') ? strrchr(program, '/') + 1 : program;
  FILE *in = fopen(argv[1], "r");
  if (!in) die("cannot open %s: %s", argv[1], strerror(errno));
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s.tmp", argv[2]);
  FILE *out = fopen(tmp, "w");
  if (!out) die("cannot write %s: %s", tmp, strerror(errno));
  char *overview = help_of(NULL, NULL);
  char line[4096];
  while (fgets(line, sizeof(line), in)) {
    if (strcmp(line, "@COMMANDS\n") == 0) {
      put_commands(out, overview);
    } else if (strcmp(line, "@GLOBAL_OPTIONS\n") == 0) {
      if (put_options(out, overview, "\nglobal options:\n") == 0)
        die("'%s --help' has no global options", program);
    } else {
      fputs(line, out);
    }
  }
  free(overview);
  fclose(in);
  if (ferror(out) | fclose(out) || rename(tmp, argv[2]) != 0)
    die("cannot write %s: %s", argv[2], strerror(errno));
  return 0;
}
