/* SPDX-License-Identifier: Apache-2.0 */
/* Every command that writes a file, run as its user runs it (the real xfed,
 * xfed-site and xfed-coord), aimed at what it must never replace: a symbolic
 * link to a file, a dangling link, a FIFO, a character device node and a
 * directory where it writes a file; a FIFO, a device node and a regular file
 * where it makes a directory. Each is refused with exit status 1 and an
 * error naming the path and what is there, and is left exactly as it was
 * (the link and the file it points to in another directory, where nothing
 * new appears; the device with its numbers). Each command also runs once
 * with nothing in the way and succeeds, with the mode its file must have
 * (0600 for private keys), so that a refusal is the target's doing. One
 * table row per command and target. Device nodes need mknod (root): where
 * it is not permitted, that test is skipped and says so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include "policy/audit.h"
#include "storage/db.h"
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

extern char **environ;

#define RUN_DEADLINE_S 120
#define MAX_ARGS 24

/* What is planted at a row's target. */
typedef enum kind { K_LINK, K_DANGLING, K_FIFO, K_DEVICE, K_DIR, K_FILE, K_COUNT } kind;
#define BIT(k) (1u << (k))
/* Where a command writes a file. */
#define FILE_KINDS (BIT(K_LINK) | BIT(K_DANGLING) | BIT(K_FIFO) | BIT(K_DEVICE) | BIT(K_DIR))
/* Where it makes or fills a directory: a link to a directory is a path like
 * any other there, except where the directory itself is the output. */
#define DIR_KINDS (BIT(K_FIFO) | BIT(K_DEVICE) | BIT(K_FILE))
/* A database opened in place: a link to one is followed. */
#define DB_KINDS (BIT(K_FIFO) | BIT(K_DEVICE) | BIT(K_DIR))

/* The word each kind is named by in the refusal. */
static const char *const kind_words[K_COUNT] = {"symbolic link", "symbolic link", "FIFO",
                                                "character device", "directory",
                                                "regular file"};

typedef enum prog { XFED, XFED_SITE, XFED_COORD, PROG_COUNT } prog;

/* One command and one of the paths it writes. In args, "@x" is x in the
 * case's own fresh directory and "$x" is x in the shared fixture (data,
 * spec, federation). */
typedef struct output_case {
  prog prog;
  const char *args[MAX_ARGS];
  const char *target;              /* under the case directory: what is planted */
  unsigned kinds;                  /* which kinds are planted there */
  void (*setup)(const char *dir);  /* makes what the command needs, or NULL */
  bool control;                    /* with nothing at target it succeeds */
  bool makes_dir;                  /* and leaves a directory there, not a file */
  mode_t mode;                     /* the file's permission bits then (0: not checked) */
} output_case;

static struct {
  char bin[PROG_COUNT][1024];
  char root[512];
  char **env;
  int cases;
} fx;

static const char *const prog_names[PROG_COUNT] = {"xfed", "xfed-site", "xfed-coord"};

/* ---- running the commands --------------------------------------------------------- */

/* "@x" to dir/x, "$x" to the fixture's root/x, anything else as it is. */
static const char *expand(const char *arg, const char *dir, char *buf, size_t n) {
  if (arg[0] != '@' && arg[0] != '$') return arg;
  snprintf(buf, n, "%s/%s", arg[0] == '@' ? dir : fx.root, arg + 1);
  return buf;
}

static void run_prog(xf_test_run *r, prog p, const char *const *args, const char *dir) {
  static char store[MAX_ARGS][PATH_MAX];
  const char *argv[MAX_ARGS + 1];
  int n = 0;
  for (; n < MAX_ARGS && args[n]; n++) argv[n] = expand(args[n], dir, store[n], PATH_MAX);
  argv[n] = NULL;
  xf_test_exec_opts o = {.path = fx.bin[p], .env = fx.env, .deadline_s = RUN_DEADLINE_S};
  xf_test_execv(&o, r, prog_names[p], argv);
}

/* Runs a command that must succeed (a row's setup, the fixture). */
static void run_ok(prog p, const char *dir, ...) {
  const char *args[MAX_ARGS + 1];
  int n = 0;
  va_list ap;
  va_start(ap, dir);
  for (const char *a; n < MAX_ARGS && (a = va_arg(ap, const char *));) args[n++] = a;
  va_end(ap);
  args[n] = NULL;
  xf_test_run r = {0};
  run_prog(&r, p, args, dir);
  if (r.status != 0) {
    xf_test_run_show(&r);
    fail_msg("%s: exit %d", r.line, r.status);
  }
  xf_test_run_free(&r);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_true(fputs(text, f) >= 0);
  assert_int_equal(fclose(f), 0);
}

/* ---- what rows need besides their target -------------------------------------------- */

static void make_dir(const char *dir, const char *name) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  assert_int_equal(mkdir(path, 0700), 0);
}

static void setup_policy_db(const char *dir) {
  run_ok(XFED, dir, "policy", "region", "add", "--db", "@policy.db", "--name", "eu", "--reason",
         "setup", "--author", "test", NULL);
}

static void setup_audit_db(const char *dir) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/audit.db", dir);
  /* A real trail of one row: export reads trails read-only and refuses a
   * file that is not one. */
  xf_db *db = NULL;
  xf_errctx err = {0};
  assert_int_equal(xf_audit_open(path, &db, &err), XF_OK);
  assert_int_equal(xf_audit_append(db, 1.0, "test", "job", "job/1", "{}", NULL, &err), XF_OK);
  xf_db_close(db);
}

/* A model file to evaluate or export: the fixture's spec trained on its data. */
static void setup_model_file(const char *dir) {
  run_ok(XFED, dir, "train", "--spec", "$spec.json", "--data", "$data", "--save", "@model.xfm",
         NULL);
}

static void setup_fed_dir(const char *dir) { make_dir(dir, "fed"); }

static void setup_federation(const char *dir) {
  run_ok(XFED, dir, "pki", "init", "--federation", "acme", "--dir", "@fed", NULL);
}

/* A federation whose CRL is to be written afresh. */
static void setup_federation_without_crl(const char *dir) {
  setup_federation(dir);
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/fed/crl.pem", dir);
  assert_int_equal(unlink(path), 0);
}

static void setup_site_dir(const char *dir) { make_dir(dir, "site"); }

/* A federation with bob's identity in it, to revoke. */
static void setup_federation_with_bob(const char *dir) {
  setup_federation(dir);
  run_ok(XFED, dir, "pki", "issue", "--dir", "@fed", "--kind", "user", "--name", "bob", "--role",
         "researcher", NULL);
}

static void setup_state_dir(const char *dir) { make_dir(dir, "state"); }

static void setup_state(const char *dir) {
  make_dir(dir, "state");
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/state/coord.db", dir);
  write_text(path, ""); /* an empty journal */
}

/* ---- the table ---------------------------------------------------------------------- */

/* The connection flags of `xfed job`: a real user identity and a port
 * nothing listens on, so that only a refusal before dialing succeeds. */
#define CONNECTION                                                                         \
  "--coordinator", "127.0.0.1:9", "--cert", "$fed/issued/alice.crt", "--key",               \
      "$fed/issued/alice.key", "--ca", "$fed/ca.crt", "--crl", "$fed/crl.pem", "--timeout", "5"

static const output_case cases[] = {
    {XFED, {"train", "--spec", "$spec.json", "--data", "$data", "--save", "@model.xfm"},
     "model.xfm", FILE_KINDS, NULL, true, false, 0644},
    {XFED, {"train", "--spec", "$spec.json", "--data", "$data", "--blobs", "@blobs"}, "blobs",
     DIR_KINDS, NULL, true, true, 0},
    {XFED,
     {"data", "split", "--data", "$data", "--sites", "2", "--scheme", "iid", "--seed", "1",
      "--out", "@shards"},
     "shards", BIT(K_LINK) | BIT(K_DANGLING) | BIT(K_FIFO) | BIT(K_DEVICE) | BIT(K_FILE), NULL,
     true, true, 0},
    {XFED, {"job", "export", "7", "--out", "@model.xfm", CONNECTION}, "model.xfm", FILE_KINDS,
     NULL, false, false, 0},
    {XFED, {"job", "export", "7", "--out", "@model.npy", CONNECTION}, "model.npy", FILE_KINDS,
     NULL, false, false, 0},
    {XFED, {"job", "export", "7", "--out", "@model.npy", CONNECTION}, "model.npy.json",
     FILE_KINDS, NULL, false, false, 0},
    {XFED, {"job", "export", "7", "--out", "@model.onnx", CONNECTION}, "model.onnx", FILE_KINDS,
     NULL, false, false, 0},
    {XFED, {"job", "export", "7", "--out", "@model.npz", CONNECTION}, "model.npz", FILE_KINDS,
     NULL, false, false, 0},
    {XFED, {"model", "eval", "@model.xfm", "--data", "$data", "--predictions", "@pred.csv"},
     "pred.csv", FILE_KINDS, setup_model_file, true, false, 0644},
    {XFED, {"model", "export", "@model.xfm", "--out", "@model.onnx"}, "model.onnx", FILE_KINDS,
     setup_model_file, true, false, 0644},
#ifdef XF_HAVE_REPORT /* a build without it refuses the command (test_features) */
    {XFED, {"job", "report", "7", "--out", "@report.png", CONNECTION}, "report.png", FILE_KINDS,
     NULL, false, false, 0},
#endif
    {XFED, {"policy", "export", "--db", "@policy.db", "--out", "@policy.json"}, "policy.json",
     FILE_KINDS, setup_policy_db, true, false, 0644},
    {XFED,
     {"policy", "region", "add", "--db", "@policy.db", "--name", "eu", "--reason", "r",
      "--author", "test"},
     "policy.db", DB_KINDS, NULL, true, false, 0600},
    {XFED, {"audit", "export", "--db", "@audit.db", "--out", "@audit.jsonl"}, "audit.jsonl",
     FILE_KINDS, setup_audit_db, true, false, 0600},
    {XFED, {"pki", "init", "--federation", "acme", "--dir", "@fed"}, "fed", DIR_KINDS, NULL,
     true, true, 0},
    {XFED, {"pki", "init", "--federation", "acme", "--dir", "@fed"}, "fed/ca.key", FILE_KINDS,
     setup_fed_dir, true, false, 0600},
    {XFED, {"pki", "init", "--federation", "acme", "--dir", "@fed"}, "fed/ca.crt", FILE_KINDS,
     setup_fed_dir, true, false, 0644},
    {XFED, {"pki", "init", "--federation", "acme", "--dir", "@fed"}, "fed/crl.pem", FILE_KINDS,
     setup_fed_dir, true, false, 0644},
    {XFED, {"pki", "init", "--federation", "acme", "--dir", "@fed"}, "fed/index.json",
     FILE_KINDS, setup_fed_dir, true, false, 0644},
    {XFED,
     {"pki", "issue", "--dir", "@fed", "--kind", "user", "--name", "bob", "--role",
      "researcher"},
     "fed/issued/bob.key", FILE_KINDS, setup_federation, true, false, 0600},
    {XFED,
     {"pki", "issue", "--dir", "@fed", "--kind", "user", "--name", "bob", "--role",
      "researcher"},
     "fed/issued/bob.crt", FILE_KINDS, setup_federation, true, false, 0644},
    {XFED, {"pki", "crl", "--dir", "@fed"}, "fed/crl.pem", FILE_KINDS,
     setup_federation_without_crl, true, false, 0644},
    {XFED, {"pki", "revoke", "--dir", "@fed", "--name", "bob"}, "fed/crl.pem", FILE_KINDS,
     setup_federation_with_bob, true, false, 0644},
    {XFED_SITE,
     {"init", "--dir", "@site", "--name", "berlin", "--region", "eu", "--coordinator",
      "127.0.0.1:7443"},
     "site", DIR_KINDS, NULL, true, true, 0},
    {XFED_SITE,
     {"init", "--dir", "@site", "--name", "berlin", "--region", "eu", "--coordinator",
      "127.0.0.1:7443"},
     "site/site.json", FILE_KINDS, setup_site_dir, true, false, 0600},
    {XFED_SITE,
     {"init", "--dir", "@site", "--name", "berlin", "--region", "eu", "--coordinator",
      "127.0.0.1:7443"},
     "site/site.db", DB_KINDS, setup_site_dir, true, false, 0600},
    {XFED_COORD, {"backup", "--state", "@state", "--out", "@backup.db"}, "backup.db",
     FILE_KINDS, setup_state, true, false, 0600},
    {XFED_COORD,
     {"run", "--cert", "$fed/issued/coord.crt", "--key", "$fed/issued/coord.key", "--ca",
      "$fed/ca.crt", "--crl", "$fed/crl.pem", "--state", "@state", "--listen", "127.0.0.1:0",
      "--residency-policy", "off", "--port-file", "@port"},
     "port", FILE_KINDS, NULL, false, false, 0},
    {XFED_COORD,
     {"run", "--cert", "$fed/issued/coord.crt", "--key", "$fed/issued/coord.key", "--ca",
      "$fed/ca.crt", "--crl", "$fed/crl.pem", "--state", "@state", "--listen", "127.0.0.1:0",
      "--residency-policy", "off"},
     "state", DIR_KINDS, NULL, false, true, 0},
    {XFED_COORD,
     {"run", "--cert", "$fed/issued/coord.crt", "--key", "$fed/issued/coord.key", "--ca",
      "$fed/ca.crt", "--crl", "$fed/crl.pem", "--state", "@state", "--listen", "127.0.0.1:0",
      "--residency-policy", "off"},
     "state/coord.db", DB_KINDS, setup_state_dir, false, false, 0},
};

/* ---- planting and checking ------------------------------------------------------------ */

/* What was planted, as it was. */
typedef struct planted {
  struct stat st;
  char link[PATH_MAX];  /* a link's text */
  char victim[PATH_MAX]; /* the file a link points to (K_LINK) or would (K_DANGLING) */
  struct stat victim_st;
} planted;

#define VICTIM_TEXT "precious: must not change\n"

/* Makes kind k at path (in the case directory dir). A link points into
 * dir/elsewhere, a directory of its own: to a file, or to an empty
 * directory where the output is a directory. */
static void plant(kind k, const char *dir, const char *path, bool dir_victim, planted *p) {
  memset(p, 0, sizeof(*p));
  int rc = 0;
  switch (k) {
  case K_LINK:
    snprintf(p->victim, sizeof(p->victim), "%s/elsewhere", dir);
    assert_int_equal(mkdir(p->victim, 0700), 0);
    snprintf(p->victim, sizeof(p->victim), "%s/elsewhere/victim", dir);
    if (dir_victim) assert_int_equal(mkdir(p->victim, 0700), 0);
    else write_text(p->victim, VICTIM_TEXT);
    assert_int_equal(stat(p->victim, &p->victim_st), 0);
    rc = symlink(p->victim, path);
    break;
  case K_DANGLING:
    snprintf(p->victim, sizeof(p->victim), "%s/never-made", dir);
    rc = symlink(p->victim, path);
    break;
  case K_FIFO: rc = mkfifo(path, 0600); break;
  case K_DEVICE:
    /* The numbers of /dev/null: harmless even if something wrote to it. */
    rc = mknod(path, S_IFCHR | 0600, makedev(1, 3));
    break;
  case K_DIR: rc = mkdir(path, 0700); break;
  case K_FILE: write_text(path, VICTIM_TEXT); break;
  case K_COUNT: break;
  }
  assert_int_equal(rc, 0);
  assert_int_equal(lstat(path, &p->st), 0);
  if (S_ISLNK(p->st.st_mode)) assert_true(readlink(path, p->link, sizeof(p->link) - 1) > 0);
}

static int count_entries(const char *dir, const char *holding) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strstr(e->d_name, holding)) n++;
  closedir(d);
  return n;
}

static bool file_holds(const char *path, const char *text) {
  char buf[256] = {0};
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  return n == strlen(text) && memcmp(buf, text, n) == 0;
}

static void check_untouched(const xf_test_run *r, kind k, const char *path, const planted *p) {
  struct stat now;
  bool same = lstat(path, &now) == 0 && now.st_mode == p->st.st_mode &&
              now.st_ino == p->st.st_ino && now.st_rdev == p->st.st_rdev;
  const char *what = same ? NULL : "it was replaced or changed";
  if (same && S_ISLNK(now.st_mode)) {
    char link[PATH_MAX] = {0};
    if (readlink(path, link, sizeof(link) - 1) <= 0 || strcmp(link, p->link) != 0)
      what = "the link points elsewhere";
  }
  if (!what && k == K_LINK) {
    struct stat v;
    if (stat(p->victim, &v) != 0 || v.st_ino != p->victim_st.st_ino ||
        v.st_mode != p->victim_st.st_mode ||
        (S_ISDIR(v.st_mode) ? count_entries(p->victim, "") != 0
                            : !file_holds(p->victim, VICTIM_TEXT)))
      what = "the file the link points to changed";
    char elsewhere[PATH_MAX];
    snprintf(elsewhere, sizeof(elsewhere), "%s", p->victim);
    *strrchr(elsewhere, '/') = '\0';
    if (!what && count_entries(elsewhere, "") != 1)
      what = "a file was made beside the one the link points to";
  }
  if (!what && k == K_DANGLING && access(p->victim, F_OK) == 0)
    what = "a file was made where the dangling link points";
  if (!what && k == K_DIR && count_entries(path, "") != 0)
    what = "something was written into the directory";
  if (!what && k == K_FILE && !file_holds(path, VICTIM_TEXT)) what = "its content changed";
  if (what) {
    xf_test_run_show(r);
    fail_msg("%s: %s: %s", r->line, path, what);
  }
}

/* A fresh directory for one case under the fixture's root. */
static void case_dir(char *dir, size_t n) {
  snprintf(dir, n, "%s/case-%d", fx.root, ++fx.cases);
  assert_int_equal(mkdir(dir, 0700), 0);
}

static void parent_of(const char *path, char *out, size_t n) {
  snprintf(out, n, "%s", path);
  char *slash = strrchr(out, '/');
  if (slash) *slash = '\0';
}

static void run_refusal(const output_case *c, kind k) {
  char dir[600], path[PATH_MAX], parent[PATH_MAX];
  case_dir(dir, sizeof(dir));
  if (c->setup) c->setup(dir);
  snprintf(path, sizeof(path), "%s/%s", dir, c->target);
  xf_test_remove_tree(path); /* what the setup made there (a federation's crl.pem) */
  planted p;
  plant(k, dir, path, c->makes_dir, &p);
  parent_of(path, parent, sizeof(parent));
  int temporaries = count_entries(parent, ".tmp");
  xf_test_run r = {0};
  run_prog(&r, c->prog, c->args, dir);
  if (r.status != 1 || !strstr(r.err, path) || !strstr(r.err, kind_words[k])) {
    xf_test_run_show(&r);
    fail_msg("%s: with %s at %s: expected exit 1 and an error naming the path and '%s'",
             r.line, kind_words[k], c->target, kind_words[k]);
  }
  check_untouched(&r, k, path, &p);
  if (count_entries(parent, ".tmp") != temporaries) {
    xf_test_run_show(&r);
    fail_msg("%s: left a temporary file in %s", r.line, parent);
  }
  xf_test_run_free(&r);
}

static void run_control(const output_case *c) {
  char dir[600], path[PATH_MAX];
  case_dir(dir, sizeof(dir));
  if (c->setup) c->setup(dir);
  snprintf(path, sizeof(path), "%s/%s", dir, c->target);
  xf_test_remove_tree(path);
  xf_test_run r = {0};
  run_prog(&r, c->prog, c->args, dir);
  struct stat st;
  bool made = lstat(path, &st) == 0 && (c->makes_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
  if (r.status != 0 || !made) {
    xf_test_run_show(&r);
    fail_msg("%s: with nothing at %s: expected exit 0 and a %s there", r.line, c->target,
             c->makes_dir ? "directory" : "regular file");
  }
  if (c->mode && (st.st_mode & 07777) != c->mode) {
    xf_test_run_show(&r);
    fail_msg("%s: %s has mode %04o, not %04o", r.line, c->target,
             (unsigned)(st.st_mode & 07777), (unsigned)c->mode);
  }
  xf_test_run_free(&r);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void shared_fixture(void);

static void every_output_refuses_what_is_not_a_regular_file_and_leaves_it(void **state) {
  (void)state;
  shared_fixture();
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    for (kind k = 0; k < K_COUNT; k++)
      if (k != K_DEVICE && (cases[i].kinds & BIT(k))) run_refusal(&cases[i], k);
}

/* Whether this process may make a device node (root, outside a container
 * that forbids it); if not, why. */
static bool may_mknod(char *why, size_t n) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/mknod-probe", fx.root);
  if (mknod(path, S_IFCHR | 0600, makedev(1, 3)) == 0) {
    assert_int_equal(unlink(path), 0);
    return true;
  }
  snprintf(why, n, "mknod of a character device in %s: %s (device nodes need root)", fx.root,
           strerror(errno));
  return false;
}

static void every_output_refuses_a_device_node_and_leaves_it(void **state) {
  (void)state;
  shared_fixture();
  char why[PATH_MAX + 128];
  if (!may_mknod(why, sizeof(why))) {
    fprintf(stderr, "skipped: %s\n", why);
    skip();
  }
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    if (cases[i].kinds & BIT(K_DEVICE)) run_refusal(&cases[i], K_DEVICE);
}

static void every_output_is_written_when_nothing_is_in_the_way(void **state) {
  (void)state;
  shared_fixture();
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    if (cases[i].control) run_control(&cases[i]);
}

/* ---- fixture ---------------------------------------------------------------------------- */

/* Our environment with XF_BACKEND=cpu: the small training runs anywhere. */
static char **child_environment(void) {
  size_t n = 0;
  while (environ[n]) n++;
  char **env = calloc(n + 2, sizeof(char *));
  if (!env) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "XF_BACKEND=", 11) != 0) env[k++] = environ[i];
  env[k++] = "XF_BACKEND=cpu";
  env[k] = NULL;
  return env;
}

/* Three classes of two features, easily told apart. */
static void write_csv(const char *path, int rows) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("f1,f2,label\n", f);
  for (int i = 0; i < rows; i++) {
    int k = i % 3;
    fprintf(f, "%.3f,%.3f,%d\n", k + (i % 7) * 0.1, -k + (i % 5) * 0.1, k);
  }
  assert_int_equal(fclose(f), 0);
}

static int group_setup(void **state) {
  (void)state;
  const char *build = getenv("XF_BUILD_DIR");
  if (!build || !*build) {
    fprintf(stderr, "test_cli_outputs: XF_BUILD_DIR is not set; run it through ctest\n");
    return -1;
  }
  static const char *const where[PROG_COUNT] = {"cli/xfed", "site/xfed-site",
                                                "coordinator/xfed-coord"};
  for (int p = 0; p < PROG_COUNT; p++) {
    snprintf(fx.bin[p], sizeof(fx.bin[p]), "%s/%s", build, where[p]);
    if (access(fx.bin[p], X_OK) != 0) {
      fprintf(stderr, "test_cli_outputs: %s is not an executable: build it\n", fx.bin[p]);
      return -1;
    }
  }
  fx.env = child_environment();
  if (!fx.env || xf_test_mkdtemp(fx.root, sizeof(fx.root), "cli-outputs") != 0) return -1;
  return 0;
}

/* The shared data, spec and federation, made by the first test that runs. */
static void shared_fixture(void) {
  static bool made;
  if (made) return;
  made = true;
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/data", fx.root);
  assert_int_equal(mkdir(path, 0700), 0);
  snprintf(path, sizeof(path), "%s/data/train.csv", fx.root);
  write_csv(path, 60);
  snprintf(path, sizeof(path), "%s/data/test.csv", fx.root);
  write_csv(path, 18);
  snprintf(path, sizeof(path), "%s/spec.json", fx.root);
  write_text(path, "{\"name\": \"outputs\", \"model\": {\"arch\": \"logreg\"},\n"
                   " \"data\": {\"dataset\": \"tiny\"}, \"rounds\": 1,\n"
                   " \"local\": {\"epochs\": 1, \"batch_size\": 16, \"lr\": 0.1}, \"seed\": 7}\n");
  run_ok(XFED, fx.root, "pki", "init", "--federation", "acme", "--dir", "$fed", NULL);
  run_ok(XFED, fx.root, "pki", "issue", "--dir", "$fed", "--kind", "coordinator", "--name",
         "coord", NULL);
  run_ok(XFED, fx.root, "pki", "issue", "--dir", "$fed", "--kind", "user", "--name", "alice",
         "--role", "researcher", NULL);
}

static int group_teardown(void **state) {
  (void)state;
  xf_test_remove_tree(fx.root);
  free(fx.env);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_output_is_written_when_nothing_is_in_the_way),
      cmocka_unit_test(every_output_refuses_what_is_not_a_regular_file_and_leaves_it),
      cmocka_unit_test(every_output_refuses_a_device_node_and_leaves_it),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
