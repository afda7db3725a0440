/* SPDX-License-Identifier: Apache-2.0 */
/* The site's dataset registry in SQLite, the content digest of a dataset
 * directory, and the strict reader and writer of site.json. */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "privacy/accountant.h"
#include "policy/audit.h"
#include "policy/policy.h"
#include "site/registry.h"
#include "storage/db.h"

/* ---- names ---------------------------------------------------------------------- */

static const char *const class_names[] = {NULL, "public", "internal", "confidential",
                                          "restricted"};
#define N_CLASSES 4

const char *xf_site_class_name(xf_site_class c) {
  if (c < XF_SITE_CLASS_PUBLIC || c > XF_SITE_CLASS_RESTRICTED) return "unknown";
  return class_names[c];
}

xf_err xf_site_class_parse(const char *s, xf_site_class *out, xf_errctx *err) {
  for (int i = 1; i <= N_CLASSES; i++)
    if (s && strcmp(s, class_names[i]) == 0) {
      *out = (xf_site_class)i;
      return XF_OK;
    }
  return xf_fail(err, XF_EINVAL,
                 "classification '%s' is not one of public, internal, confidential, restricted",
                 s ? s : "");
}

static xf_err bad_name(xf_errctx *err, const char *what, const char *s) {
  xf_errctx_clear(err);
  xf_errctx_field(err, "%s", what);
  return xf_fail(err, XF_EINVAL,
                 "'%.80s' is not a valid %s: use 1 to 63 lowercase letters, digits, '-' and '_', "
                 "starting with a letter or digit (the rule of job specs and policies)",
                 s ? s : "", what);
}

/* ---- schema ------------------------------------------------------------------------ */

/* The site database's own migration list: append only (storage/db.h). */
static const xf_migration site_migrations[] = {
    {1,
     "CREATE TABLE datasets (\n"
     "  id INTEGER PRIMARY KEY,\n"
     "  name TEXT NOT NULL UNIQUE,\n"
     "  path TEXT NOT NULL,\n"
     "  layout TEXT NOT NULL CHECK (layout IN ('idx', 'csv')),\n"
     "  classification TEXT NOT NULL\n"
     "    CHECK (classification IN ('public', 'internal', 'confidential', 'restricted')),\n"
     "  train_records INTEGER NOT NULL CHECK (train_records >= 0),\n"
     "  test_records INTEGER NOT NULL CHECK (test_records >= 0),\n"
     "  classes INTEGER NOT NULL, features INTEGER NOT NULL,\n"
     "  shape_h INTEGER NOT NULL, shape_w INTEGER NOT NULL, shape_c INTEGER NOT NULL,\n"
     "  registered_at INTEGER NOT NULL,\n"
     "  digest TEXT NOT NULL CHECK (length(digest) = 64),\n"
     "  budget_epsilon REAL CHECK (budget_epsilon IS NULL OR budget_epsilon > 0)\n"
     ");\n"
     "CREATE TABLE tags (\n"
     "  id INTEGER PRIMARY KEY,\n"
     "  name TEXT NOT NULL UNIQUE\n"
     ");\n"
     "CREATE TABLE dataset_tags (\n"
     "  dataset_id INTEGER NOT NULL REFERENCES datasets (id) ON DELETE CASCADE,\n"
     "  tag_id INTEGER NOT NULL REFERENCES tags (id),\n"
     "  PRIMARY KEY (dataset_id, tag_id)\n"
     ");\n"
     "CREATE INDEX dataset_tags_by_tag ON dataset_tags (tag_id);\n"},
    /* The privacy-budget ledger. Rows are keyed by dataset name, not id, so
     * that removing and re-registering a dataset does not reset what it has
     * spent; triggers keep the table append-only. */
    {2,
     "ALTER TABLE datasets ADD COLUMN budget_delta REAL NOT NULL DEFAULT 1e-5\n"
     "  CHECK (budget_delta > 0 AND budget_delta < 1);\n" XF_LEDGER_SCHEMA_SQL},
    /* Top-k error feedback: what a site's compressed updates left out, kept
     * between rounds (and across restarts) per job and dataset. */
    {3,
     "CREATE TABLE residuals (\n"
     "  job TEXT NOT NULL,\n"
     "  dataset TEXT NOT NULL,\n"
     "  round INTEGER NOT NULL CHECK (round >= 1),\n"
     "  n INTEGER NOT NULL CHECK (n >= 1),\n"
     "  data BLOB NOT NULL CHECK (length(data) = 4 * n),\n"
     "  saved_at INTEGER NOT NULL,\n"
     "  PRIMARY KEY (job, dataset, round)\n"
     ");\n"},
    /* The site operator's own residency rules, as numbered immutable versions
     * (policy/policy.h), checked against every offer that carries a
     * residency plan (docs/policy.md, "Site-local rules"). */
    {4, xf_policy_schema_sql},
    /* The site's own hash-chained audit trail (policy/audit.h): its local
     * decisions, the updates it sent out of its region, and policy changes. */
    {5, xf_audit_schema_sql},
    /* The NumPy layouts (npy, npz) join idx and csv. SQLite cannot alter a
     * CHECK constraint, so the table is rebuilt; dataset_tags is set aside
     * and rebuilt too, because dropping datasets with foreign keys on would
     * cascade into it. Row ids are kept, so the tag links stay valid. */
    {6,
     "CREATE TABLE datasets_new (\n"
     "  id INTEGER PRIMARY KEY,\n"
     "  name TEXT NOT NULL UNIQUE,\n"
     "  path TEXT NOT NULL,\n"
     "  layout TEXT NOT NULL CHECK (layout IN ('idx', 'csv', 'npy', 'npz')),\n"
     "  classification TEXT NOT NULL\n"
     "    CHECK (classification IN ('public', 'internal', 'confidential', 'restricted')),\n"
     "  train_records INTEGER NOT NULL CHECK (train_records >= 0),\n"
     "  test_records INTEGER NOT NULL CHECK (test_records >= 0),\n"
     "  classes INTEGER NOT NULL, features INTEGER NOT NULL,\n"
     "  shape_h INTEGER NOT NULL, shape_w INTEGER NOT NULL, shape_c INTEGER NOT NULL,\n"
     "  registered_at INTEGER NOT NULL,\n"
     "  digest TEXT NOT NULL CHECK (length(digest) = 64),\n"
     "  budget_epsilon REAL CHECK (budget_epsilon IS NULL OR budget_epsilon > 0),\n"
     "  budget_delta REAL NOT NULL DEFAULT 1e-5 CHECK (budget_delta > 0 AND budget_delta < 1)\n"
     ");\n"
     "INSERT INTO datasets_new SELECT id, name, path, layout, classification, train_records,\n"
     "  test_records, classes, features, shape_h, shape_w, shape_c, registered_at, digest,\n"
     "  budget_epsilon, budget_delta FROM datasets;\n"
     "CREATE TEMP TABLE dataset_tags_keep AS SELECT dataset_id, tag_id FROM dataset_tags;\n"
     "DROP TABLE dataset_tags;\n"
     "DROP TABLE datasets;\n"
     "ALTER TABLE datasets_new RENAME TO datasets;\n"
     "CREATE TABLE dataset_tags (\n"
     "  dataset_id INTEGER NOT NULL REFERENCES datasets (id) ON DELETE CASCADE,\n"
     "  tag_id INTEGER NOT NULL REFERENCES tags (id),\n"
     "  PRIMARY KEY (dataset_id, tag_id)\n"
     ");\n"
     "CREATE INDEX dataset_tags_by_tag ON dataset_tags (tag_id);\n"
     "INSERT INTO dataset_tags SELECT dataset_id, tag_id FROM dataset_tags_keep;\n"
     "DROP TABLE temp.dataset_tags_keep;\n"},
    /* External trainers (site/trainer.h, docs/trainers.md): the program a
     * dataset's tasks run instead of the site's kernels, its time limit and
     * what it says about record-level DP. NULL trainer: native training. */
    {7,
     "ALTER TABLE datasets ADD COLUMN trainer TEXT CHECK (trainer IS NULL OR substr(trainer, 1, 1) = '/');\n"
     "ALTER TABLE datasets ADD COLUMN trainer_timeout INTEGER NOT NULL DEFAULT 3600\n"
     "  CHECK (trainer_timeout >= 1 AND trainer_timeout <= 604800);\n"
     "ALTER TABLE datasets ADD COLUMN trainer_dp TEXT NOT NULL DEFAULT 'none'\n"
     "  CHECK (trainer_dp IN ('none', 'declared'));\n"},
};

struct xf_site_registry {
  xf_db *db;
};

xf_err xf_site_registry_open(const char *db_path, xf_site_registry **out, xf_errctx *err) {
  *out = NULL;
  xf_site_registry *reg = xf_calloc(1, sizeof(*reg));
  if (!reg) {
    xf_errctx_clear(err);
    xf_errctx_file(err, db_path);
    return xf_fail(err, XF_ENOMEM, "cannot allocate the registry");
  }
  xf_err rc = xf_db_open(db_path, site_migrations,
                         sizeof(site_migrations) / sizeof(site_migrations[0]), &reg->db, err);
  if (rc != XF_OK) {
    xf_free(reg);
    return rc;
  }
  *out = reg;
  return XF_OK;
}

xf_db *xf_site_registry_db(xf_site_registry *reg) { return reg->db; }

void xf_site_registry_close(xf_site_registry *reg) {
  if (!reg) return;
  xf_db_close(reg->db);
  xf_free(reg);
}

/* ---- statements --------------------------------------------------------------------- */

static xf_err prepare(xf_site_registry *reg, const char *sql, sqlite3_stmt **st, xf_errctx *err) {
  return xf_db_prepare(reg->db, sql, st, err);
}

static xf_err bind_text(xf_site_registry *reg, sqlite3_stmt *st, int col, const char *s,
                        xf_errctx *err) {
  if (sqlite3_bind_text(st, col, s, -1, SQLITE_TRANSIENT) != SQLITE_OK)
    return xf_db_fail(reg->db, err, "binding a registry statement");
  return XF_OK;
}

/* Steps a statement that returns no rows. */
static xf_err step_done(xf_site_registry *reg, sqlite3_stmt *st, const char *doing,
                        xf_errctx *err) {
  if (sqlite3_step(st) != SQLITE_DONE) return xf_db_fail(reg->db, err, doing);
  return XF_OK;
}

/* The row id of dataset name; XF_ENOENT naming it when unknown. */
static xf_err dataset_id(xf_site_registry *reg, const char *name, sqlite3_int64 *id,
                         xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  XF_GUARD(prepare(reg, "SELECT id FROM datasets WHERE name = ?", &st, err));
  xf_err rc = bind_text(reg, st, 1, name, err);
  if (rc == XF_OK) {
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) *id = sqlite3_column_int64(st, 0);
    else if (s == SQLITE_DONE) {
      xf_errctx_clear(err);
      xf_errctx_field(err, "dataset %s", name);
      rc = xf_fail(err, XF_ENOENT,
                   "no dataset '%s' is registered; 'xfed-site dataset list' shows those that are",
                   name);
    } else
      rc = xf_db_fail(reg->db, err, "looking up the dataset");
  }
  sqlite3_finalize(st);
  return rc;
}

/* Links tag to dataset id (creating the tag), inside the caller's transaction. */
static xf_err link_tag(xf_site_registry *reg, sqlite3_int64 id, const char *tag, xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  xf_err rc = prepare(reg, "INSERT OR IGNORE INTO tags (name) VALUES (?)", &st, err);
  if (rc == XF_OK && (rc = bind_text(reg, st, 1, tag, err)) == XF_OK)
    rc = step_done(reg, st, "recording the tag", err);
  sqlite3_finalize(st);
  st = NULL;
  if (rc != XF_OK) return rc;
  rc = prepare(reg,
               "INSERT OR IGNORE INTO dataset_tags (dataset_id, tag_id) "
               "SELECT ?, id FROM tags WHERE name = ?",
               &st, err);
  if (rc == XF_OK) {
    sqlite3_bind_int64(st, 1, id);
    if ((rc = bind_text(reg, st, 2, tag, err)) == XF_OK)
      rc = step_done(reg, st, "tagging the dataset", err);
  }
  sqlite3_finalize(st);
  return rc;
}

/* Removes tags no dataset carries any more, inside the caller's transaction. */
static xf_err drop_unused_tags(xf_site_registry *reg, xf_errctx *err) {
  return xf_db_exec(reg->db,
                    "DELETE FROM tags WHERE id NOT IN (SELECT tag_id FROM dataset_tags)", err);
}

/* ---- reading records ----------------------------------------------------------------- */

void xf_site_dataset_free(xf_site_dataset *d) {
  if (!d) return;
  xf_free(d->path);
  xf_free(d->trainer);
  for (size_t i = 0; i < d->n_tags; i++) xf_free(d->tags[i]);
  xf_free(d->tags);
  memset(d, 0, sizeof(*d));
}

void xf_site_dataset_list_free(xf_site_dataset *list, size_t n) {
  if (!list) return;
  for (size_t i = 0; i < n; i++) xf_site_dataset_free(&list[i]);
  xf_free(list);
}

#define DATASET_COLUMNS                                                                    \
  "id, name, path, layout, classification, train_records, test_records, classes, "       \
  "features, shape_h, shape_w, shape_c, registered_at, digest, budget_epsilon, budget_delta, " \
  "trainer, trainer_timeout, trainer_dp"

static const char *column_text(sqlite3_stmt *st, int col) {
  const unsigned char *s = sqlite3_column_text(st, col);
  return s ? (const char *)s : "";
}

/* Fills d's tags from the link table. */
static xf_err read_tags(xf_site_registry *reg, sqlite3_int64 id, xf_site_dataset *d,
                        xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  XF_GUARD(prepare(reg,
                   "SELECT t.name FROM dataset_tags dt JOIN tags t ON t.id = dt.tag_id "
                   "WHERE dt.dataset_id = ? ORDER BY t.name",
                   &st, err));
  sqlite3_bind_int64(st, 1, id);
  xf_err rc = XF_OK;
  size_t cap = 0;
  int s;
  while ((s = sqlite3_step(st)) == SQLITE_ROW) {
    if (d->n_tags == cap) {
      size_t ncap = cap ? 2 * cap : 4;
      char **grown = xf_realloc(d->tags, ncap * sizeof(char *));
      if (!grown) {
        rc = xf_fail(err, XF_ENOMEM, "cannot allocate the tags of '%s'", d->name);
        break;
      }
      d->tags = grown;
      cap = ncap;
    }
    char *t = xf_strdup(column_text(st, 0));
    if (!t) {
      rc = xf_fail(err, XF_ENOMEM, "cannot allocate the tags of '%s'", d->name);
      break;
    }
    d->tags[d->n_tags++] = t;
  }
  if (rc == XF_OK && s != SQLITE_DONE) rc = xf_db_fail(reg->db, err, "reading the tags");
  sqlite3_finalize(st);
  return rc;
}

/* One row of DATASET_COLUMNS into d (zeroed first), tags included. */
static xf_err read_row(xf_site_registry *reg, sqlite3_stmt *st, xf_site_dataset *d,
                       xf_errctx *err) {
  memset(d, 0, sizeof(*d));
  sqlite3_int64 id = sqlite3_column_int64(st, 0);
  snprintf(d->name, sizeof(d->name), "%s", column_text(st, 1));
  d->path = xf_strdup(column_text(st, 2));
  if (!d->path) return xf_fail(err, XF_ENOMEM, "cannot allocate the record of '%s'", d->name);
  const char *layout = column_text(st, 3);
  d->layout = strcmp(layout, "idx") == 0   ? XF_LAYOUT_IDX
              : strcmp(layout, "npy") == 0 ? XF_LAYOUT_NPY
              : strcmp(layout, "npz") == 0 ? XF_LAYOUT_NPZ
                                           : XF_LAYOUT_CSV;
  xf_site_class c = XF_SITE_CLASS_INTERNAL;
  for (int i = 1; i <= N_CLASSES; i++)
    if (strcmp(column_text(st, 4), class_names[i]) == 0) c = (xf_site_class)i;
  d->classification = c;
  d->train_records = (uint32_t)sqlite3_column_int64(st, 5);
  d->test_records = (uint32_t)sqlite3_column_int64(st, 6);
  d->classes = (uint32_t)sqlite3_column_int64(st, 7);
  d->features = (uint32_t)sqlite3_column_int64(st, 8);
  d->h = (uint32_t)sqlite3_column_int64(st, 9);
  d->w = (uint32_t)sqlite3_column_int64(st, 10);
  d->c = (uint32_t)sqlite3_column_int64(st, 11);
  d->registered_at = sqlite3_column_int64(st, 12);
  snprintf(d->digest, sizeof(d->digest), "%s", column_text(st, 13));
  d->has_budget = sqlite3_column_type(st, 14) != SQLITE_NULL;
  d->budget_epsilon = d->has_budget ? sqlite3_column_double(st, 14) : 0.0;
  d->budget_delta = sqlite3_column_double(st, 15);
  if (sqlite3_column_type(st, 16) != SQLITE_NULL) {
    d->trainer = xf_strdup(column_text(st, 16));
    if (!d->trainer) return xf_fail(err, XF_ENOMEM, "cannot allocate the record of '%s'", d->name);
  }
  d->trainer_timeout = (uint32_t)sqlite3_column_int64(st, 17);
  d->trainer_dp_declared = strcmp(column_text(st, 18), "declared") == 0;
  return read_tags(reg, id, d, err);
}

xf_err xf_site_registry_get(xf_site_registry *reg, const char *name, xf_site_dataset *out,
                            xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  sqlite3_stmt *st = NULL;
  XF_GUARD(prepare(reg, "SELECT " DATASET_COLUMNS " FROM datasets WHERE name = ?", &st, err));
  xf_err rc = bind_text(reg, st, 1, name, err);
  if (rc == XF_OK) {
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
      rc = read_row(reg, st, out, err);
      if (rc != XF_OK) xf_site_dataset_free(out);
    } else if (s == SQLITE_DONE) {
      xf_errctx_clear(err);
      xf_errctx_field(err, "dataset %s", name);
      rc = xf_fail(err, XF_ENOENT,
                   "no dataset '%s' is registered; 'xfed-site dataset list' shows those that are",
                   name);
    } else
      rc = xf_db_fail(reg->db, err, "reading the dataset");
  }
  sqlite3_finalize(st);
  return rc;
}

xf_err xf_site_registry_list(xf_site_registry *reg, xf_site_dataset **out, size_t *n,
                             xf_errctx *err) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *st = NULL;
  XF_GUARD(prepare(reg, "SELECT " DATASET_COLUMNS " FROM datasets ORDER BY name", &st, err));
  xf_site_dataset *list = NULL;
  size_t count = 0, cap = 0;
  xf_err rc = XF_OK;
  int s;
  while ((s = sqlite3_step(st)) == SQLITE_ROW) {
    if (count == cap) {
      size_t ncap = cap ? 2 * cap : 8;
      xf_site_dataset *grown = xf_realloc(list, ncap * sizeof(*list));
      if (!grown) {
        rc = xf_fail(err, XF_ENOMEM, "cannot allocate the dataset list");
        break;
      }
      list = grown;
      cap = ncap;
    }
    rc = read_row(reg, st, &list[count], err);
    count++; /* a half-read record is freed with the rest */
    if (rc != XF_OK) break;
  }
  if (rc == XF_OK && s != SQLITE_DONE) rc = xf_db_fail(reg->db, err, "listing the datasets");
  sqlite3_finalize(st);
  if (rc != XF_OK) {
    xf_site_dataset_list_free(list, count);
    return rc;
  }
  *out = list;
  *n = count;
  return XF_OK;
}

/* ---- content digest ------------------------------------------------------------------ */

/* The files each layout's loader reads, in digest order (data/dataset.c holds
 * the same names; dataset.json is added after them when present). */
static const char *const idx_files[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                        "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
static const char *const csv_files[] = {"train.csv", "test.csv"};
static const char *const npy_files[] = {"train-x.npy", "train-y.npy", "test-x.npy", "test-y.npy"};
static const char *const npz_files[] = {"train.npz", "test.npz"};

static bool exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* Hashes one file as name, 8-byte little-endian size, bytes. */
static xf_err digest_file(xf_digest_ctx *ctx, const char *path, const char *name,
                          xf_errctx *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    xf_errctx_clear(err);
    xf_errctx_file(err, path);
    return xf_fail(err, e == ENOENT ? XF_ENOENT : XF_EIO, "cannot open: %s", strerror(e));
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    xf_errctx_clear(err);
    xf_errctx_file(err, path);
    return xf_fail(err, XF_EIO, "not a regular file");
  }
  uint8_t size[8];
  uint64_t sz = (uint64_t)sb.st_size;
  for (int i = 0; i < 8; i++) size[i] = (uint8_t)(sz >> (8 * i));
  xf_digest_update(ctx, name, strlen(name) + 1);
  xf_digest_update(ctx, size, sizeof(size));
  uint8_t buf[16384];
  uint64_t total = 0;
  for (;;) {
    ssize_t got = read(fd, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      int e = errno;
      close(fd);
      xf_errctx_clear(err);
      xf_errctx_file(err, path);
      return xf_fail(err, XF_EIO, "cannot read: %s", strerror(e));
    }
    if (got == 0) break;
    xf_digest_update(ctx, buf, (size_t)got);
    total += (uint64_t)got;
  }
  close(fd);
  if (total != sz) {
    xf_errctx_clear(err);
    xf_errctx_file(err, path);
    return xf_fail(err, XF_EIO, "the file changed size while it was read");
  }
  return XF_OK;
}

xf_err xf_site_data_digest(const char *dir, xf_dataset_layout layout, xf_digest *out,
                           xf_errctx *err) {
  const char *const *names = csv_files;
  size_t count = 2;
  if (layout == XF_LAYOUT_IDX) names = idx_files, count = 4;
  else if (layout == XF_LAYOUT_NPY) names = npy_files, count = 4;
  else if (layout == XF_LAYOUT_NPZ) names = npz_files, count = 2;
  xf_digest_ctx ctx;
  xf_digest_init(&ctx);
  static const char version[] = "xfed-site-data-v1";
  xf_digest_update(&ctx, version, sizeof(version));
  char path[PATH_MAX], name[128];
  /* The data files, then dataset.json and schema.json when present (a
   * directory without them digests as it always did). */
  for (size_t i = 0; i < count + 2; i++) {
    bool optional = i >= count;
    snprintf(name, sizeof(name), "%s",
             !optional ? names[i] : i == count ? "dataset.json" : "schema.json");
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path) - 3) {
      xf_errctx_clear(err);
      xf_errctx_file(err, dir);
      return xf_fail(err, XF_ERANGE, "the path is too long");
    }
    if (!exists(path)) {
      if (optional) continue;
      snprintf(name, sizeof(name), "%s.gz", names[i]);
      snprintf(path, sizeof(path), "%s/%s", dir, name);
      if (!exists(path)) {
        xf_errctx_clear(err);
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        xf_errctx_file(err, path);
        return xf_fail(err, XF_ENOENT, "missing (neither %s nor %s.gz is there)", names[i],
                       names[i]);
      }
    }
    XF_GUARD(digest_file(&ctx, path, name, err));
  }
  xf_digest_final(&ctx, out);
  return XF_OK;
}

/* ---- changes ------------------------------------------------------------------------- */

static xf_err check_budget(double eps, xf_errctx *err) {
  if (!isfinite(eps) || eps <= 0 || eps > 1e6) {
    xf_errctx_clear(err);
    xf_errctx_field(err, "budget_epsilon");
    return xf_fail(err, XF_ERANGE, "a privacy budget must be a number above 0 and at most 1e6, got %g",
                   eps);
  }
  return XF_OK;
}

/* Inserts the record and its tags; the caller holds the transaction. */
static xf_err insert_dataset(xf_site_registry *reg, const xf_site_dataset_spec *spec,
                             const char *abs_path, xf_dataset_layout layout,
                             xf_site_class cls, const xf_dataset *train, const xf_dataset *test,
                             const char *digest, int64_t now, xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  XF_GUARD(prepare(reg,
                   "INSERT INTO datasets (name, path, layout, classification, train_records, "
                   "test_records, classes, features, shape_h, shape_w, shape_c, registered_at, "
                   "digest, budget_epsilon) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   &st, err));
  xf_err rc = XF_OK;
  if ((rc = bind_text(reg, st, 1, spec->name, err)) != XF_OK ||
      (rc = bind_text(reg, st, 2, abs_path, err)) != XF_OK ||
      (rc = bind_text(reg, st, 3, xf_dataset_layout_name(layout), err)) != XF_OK ||
      (rc = bind_text(reg, st, 4, xf_site_class_name(cls), err)) != XF_OK ||
      (rc = bind_text(reg, st, 13, digest, err)) != XF_OK) {
    sqlite3_finalize(st);
    return rc;
  }
  uint32_t classes = train->classes > test->classes ? train->classes : test->classes;
  sqlite3_bind_int64(st, 5, train->n);
  sqlite3_bind_int64(st, 6, test->n);
  sqlite3_bind_int64(st, 7, classes);
  sqlite3_bind_int64(st, 8, train->features);
  sqlite3_bind_int64(st, 9, train->h);
  sqlite3_bind_int64(st, 10, train->w);
  sqlite3_bind_int64(st, 11, train->c);
  sqlite3_bind_int64(st, 12, (sqlite3_int64)now);
  if (spec->has_budget) sqlite3_bind_double(st, 14, spec->budget_epsilon);
  else sqlite3_bind_null(st, 14);
  int s = sqlite3_step(st);
  if (s == SQLITE_CONSTRAINT) {
    xf_errctx_clear(err);
    xf_errctx_field(err, "dataset %s", spec->name);
    rc = xf_fail(err, XF_EEXISTS, "a dataset named '%s' is already registered", spec->name);
  } else if (s != SQLITE_DONE)
    rc = xf_db_fail(reg->db, err, "recording the dataset");
  sqlite3_finalize(st);
  if (rc != XF_OK) return rc;
  sqlite3_int64 id = sqlite3_last_insert_rowid(xf_db_handle(reg->db));
  for (size_t i = 0; i < spec->n_tags; i++) XF_GUARD(link_tag(reg, id, spec->tags[i], err));
  return XF_OK;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The record add() stores, as get() would read it back: tags sorted, each
 * once. On failure *d is freed. */
static xf_err make_record(const xf_site_dataset_spec *spec, const char *abs_path,
                          xf_dataset_layout layout, xf_site_class cls, const xf_dataset *train,
                          const xf_dataset *test, const char *digest, int64_t now,
                          xf_site_dataset *d, xf_errctx *err) {
  memset(d, 0, sizeof(*d));
  snprintf(d->name, sizeof(d->name), "%s", spec->name);
  d->layout = layout;
  d->classification = cls;
  d->train_records = train->n;
  d->test_records = test->n;
  d->classes = train->classes > test->classes ? train->classes : test->classes;
  d->features = train->features;
  d->h = train->h;
  d->w = train->w;
  d->c = train->c;
  d->registered_at = now;
  snprintf(d->digest, sizeof(d->digest), "%s", digest);
  d->has_budget = spec->has_budget;
  d->budget_epsilon = spec->has_budget ? spec->budget_epsilon : 0.0;
  d->budget_delta = XF_SITE_BUDGET_DELTA_DEFAULT;
  d->path = xf_strdup(abs_path);
  if (!d->path) goto nomem;
  d->trainer_timeout = spec->trainer_timeout ? spec->trainer_timeout : XF_SITE_TRAINER_TIMEOUT_DEFAULT;
  d->trainer_dp_declared = spec->trainer_dp_declared;
  if (spec->trainer && !(d->trainer = xf_strdup(spec->trainer))) goto nomem;
  if (spec->n_tags) {
    d->tags = xf_mallocarray(spec->n_tags, sizeof(char *));
    if (!d->tags) goto nomem;
    for (size_t i = 0; i < spec->n_tags; i++) {
      bool seen = false;
      for (size_t j = 0; j < d->n_tags; j++) seen = seen || strcmp(d->tags[j], spec->tags[i]) == 0;
      if (seen) continue;
      if (!(d->tags[d->n_tags] = xf_strdup(spec->tags[i]))) goto nomem;
      d->n_tags++;
    }
    qsort(d->tags, d->n_tags, sizeof(char *), compare_names);
  }
  return XF_OK;
nomem:
  xf_site_dataset_free(d);
  return xf_fail(err, XF_ENOMEM, "cannot allocate the record of '%s'", spec->name);
}

/* Records spec's trainer on the dataset just inserted, inside the caller's
 * transaction. */
static xf_err set_trainer(xf_site_registry *reg, const xf_site_dataset_spec *spec,
                          xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  XF_GUARD(prepare(reg, "UPDATE datasets SET trainer = ?, trainer_timeout = ?, trainer_dp = ? "
                   "WHERE name = ?", &st, err));
  xf_err rc = bind_text(reg, st, 1, spec->trainer, err);
  sqlite3_bind_int64(st, 2, spec->trainer_timeout ? spec->trainer_timeout
                                                  : XF_SITE_TRAINER_TIMEOUT_DEFAULT);
  if (rc == XF_OK)
    rc = bind_text(reg, st, 3, spec->trainer_dp_declared ? "declared" : "none", err);
  if (rc == XF_OK) rc = bind_text(reg, st, 4, spec->name, err);
  if (rc == XF_OK) rc = step_done(reg, st, "recording the trainer", err);
  sqlite3_finalize(st);
  return rc;
}

xf_err xf_site_registry_add(xf_site_registry *reg, const xf_site_dataset_spec *spec,
                            xf_site_dataset *out, xf_errctx *err) {
  if (out) memset(out, 0, sizeof(*out));
  if (!xf_name_valid(spec->name)) return bad_name(err, "dataset name", spec->name);
  for (size_t i = 0; i < spec->n_tags; i++)
    if (!xf_name_valid(spec->tags[i])) return bad_name(err, "tag", spec->tags[i]);
  xf_site_class cls = spec->classification ? spec->classification : XF_SITE_CLASS_INTERNAL;
  if (cls < XF_SITE_CLASS_PUBLIC || cls > XF_SITE_CLASS_RESTRICTED)
    return xf_fail(err, XF_EINVAL, "unknown classification %d", (int)cls);
  if (spec->has_budget) XF_GUARD(check_budget(spec->budget_epsilon, err));
  if (!spec->path || !*spec->path) return xf_fail(err, XF_EINVAL, "no dataset directory given");
  if (spec->trainer && spec->trainer[0] != '/')
    return xf_fail(err, XF_EINVAL, "the trainer '%s' is not an absolute path; give its full path",
                   spec->trainer);
  if (spec->trainer_timeout > XF_SITE_TRAINER_TIMEOUT_MAX)
    return xf_fail(err, XF_ERANGE, "the trainer's time limit %u s is above %u s (a week)",
                   spec->trainer_timeout, XF_SITE_TRAINER_TIMEOUT_MAX);
  if (!spec->trainer && (spec->trainer_timeout || spec->trainer_dp_declared))
    return xf_fail(err, XF_EINVAL, "a trainer time limit or DP declaration needs a trainer "
                   "(--trainer PROGRAM)");

  /* Refuse a known name before reading what may be gigabytes of data; the
   * UNIQUE constraint still decides a race with another writer. */
  sqlite3_int64 id;
  xf_err rc = dataset_id(reg, spec->name, &id, err);
  if (rc == XF_OK) {
    xf_errctx_clear(err);
    xf_errctx_field(err, "dataset %s", spec->name);
    return xf_fail(err, XF_EEXISTS,
                   "a dataset named '%s' is already registered; remove it first "
                   "('xfed-site dataset rm --name %s') or pick another name",
                   spec->name, spec->name);
  }
  if (rc != XF_ENOENT) return rc;
  xf_errctx_clear(err);

  char abs_path[PATH_MAX];
  if (!realpath(spec->path, abs_path)) {
    int e = errno;
    xf_errctx_clear(err);
    xf_errctx_file(err, spec->path);
    return xf_fail(err, e == ENOENT ? XF_ENOENT : XF_EIO, "cannot open the dataset directory: %s",
                   strerror(e));
  }

  xf_dataset train = {0}, test = {0};
  xf_dataset_layout layout = XF_LAYOUT_IDX;
  XF_GUARD(xf_dataset_load_dir_with(abs_path, NULL, &layout, &train, &test, err));
  xf_digest digest;
  char hex[XF_DIGEST_HEX];
  int64_t now = (int64_t)time(NULL);
  xf_site_dataset rec = {0};
  rc = xf_site_data_digest(abs_path, layout, &digest, err);
  if (rc == XF_OK) {
    xf_digest_hex(&digest, hex);
    /* The caller's copy is built before the commit, so that running out of
     * memory after it can never report a failure for a recorded dataset. */
    if (out) rc = make_record(spec, abs_path, layout, cls, &train, &test, hex, now, &rec, err);
  }
  if (rc == XF_OK) {
    rc = xf_db_begin(reg->db, err);
    if (rc == XF_OK) {
      rc = insert_dataset(reg, spec, abs_path, layout, cls, &train, &test, hex, now, err);
      if (rc == XF_OK && spec->trainer) rc = set_trainer(reg, spec, err);
      if (rc == XF_OK) rc = xf_db_commit(reg->db, err);
      if (rc != XF_OK) xf_db_rollback(reg->db);
    }
  }
  xf_dataset_free(&train);
  xf_dataset_free(&test);
  if (rc != XF_OK) {
    xf_site_dataset_free(&rec);
    return rc;
  }
  if (out) *out = rec;
  return XF_OK;
}

/* Runs body(reg, id, arg, err) for dataset name inside one transaction. */
typedef xf_err (*change_fn)(xf_site_registry *reg, sqlite3_int64 id, const void *arg,
                            xf_errctx *err);

static xf_err change(xf_site_registry *reg, const char *name, change_fn body, const void *arg,
                     xf_errctx *err) {
  XF_GUARD(xf_db_begin(reg->db, err));
  sqlite3_int64 id;
  xf_err rc = dataset_id(reg, name, &id, err);
  if (rc == XF_OK) rc = body(reg, id, arg, err);
  if (rc == XF_OK) rc = xf_db_commit(reg->db, err);
  if (rc != XF_OK) xf_db_rollback(reg->db);
  return rc;
}

static xf_err remove_body(xf_site_registry *reg, sqlite3_int64 id, const void *arg,
                          xf_errctx *err) {
  (void)arg;
  sqlite3_stmt *st = NULL;
  XF_GUARD(prepare(reg, "DELETE FROM datasets WHERE id = ?", &st, err));
  sqlite3_bind_int64(st, 1, id);
  xf_err rc = step_done(reg, st, "removing the dataset", err);
  sqlite3_finalize(st);
  if (rc != XF_OK) return rc;
  return drop_unused_tags(reg, err);
}

xf_err xf_site_registry_remove(xf_site_registry *reg, const char *name, xf_errctx *err) {
  return change(reg, name, remove_body, NULL, err);
}

static xf_err tag_add_body(xf_site_registry *reg, sqlite3_int64 id, const void *arg,
                           xf_errctx *err) {
  return link_tag(reg, id, arg, err);
}

xf_err xf_site_registry_tag_add(xf_site_registry *reg, const char *name, const char *tag,
                                xf_errctx *err) {
  if (!xf_name_valid(tag)) return bad_name(err, "tag", tag);
  return change(reg, name, tag_add_body, tag, err);
}

static xf_err tag_remove_body(xf_site_registry *reg, sqlite3_int64 id, const void *arg,
                              xf_errctx *err) {
  const char *tag = arg;
  sqlite3_stmt *st = NULL;
  XF_GUARD(prepare(reg,
                   "DELETE FROM dataset_tags WHERE dataset_id = ? AND "
                   "tag_id = (SELECT id FROM tags WHERE name = ?)",
                   &st, err));
  sqlite3_bind_int64(st, 1, id);
  xf_err rc = bind_text(reg, st, 2, tag, err);
  if (rc == XF_OK) rc = step_done(reg, st, "removing the tag", err);
  sqlite3_finalize(st);
  if (rc != XF_OK) return rc;
  if (sqlite3_changes(xf_db_handle(reg->db)) == 0) {
    xf_errctx_clear(err);
    xf_errctx_field(err, "tag %s", tag);
    return xf_fail(err, XF_ENOENT, "the dataset does not carry the tag '%s'", tag);
  }
  return drop_unused_tags(reg, err);
}

xf_err xf_site_registry_tag_remove(xf_site_registry *reg, const char *name, const char *tag,
                                   xf_errctx *err) {
  /* No name rule here: a tag registered under an older, looser rule can
   * still be removed. */
  if (!tag || !*tag || strlen(tag) > XF_SITE_NAME_MAX) return bad_name(err, "tag", tag);
  return change(reg, name, tag_remove_body, tag, err);
}

typedef struct budget_arg {
  const double *epsilon, *delta;
} budget_arg;

static xf_err budget_body(xf_site_registry *reg, sqlite3_int64 id, const void *arg,
                          xf_errctx *err) {
  const budget_arg *b = arg;
  sqlite3_stmt *st = NULL;
  XF_GUARD(prepare(reg,
                   "UPDATE datasets SET budget_epsilon = ?, "
                   "budget_delta = coalesce(?, budget_delta) WHERE id = ?",
                   &st, err));
  if (b->epsilon) sqlite3_bind_double(st, 1, *b->epsilon);
  else sqlite3_bind_null(st, 1);
  if (b->delta) sqlite3_bind_double(st, 2, *b->delta);
  else sqlite3_bind_null(st, 2);
  sqlite3_bind_int64(st, 3, id);
  xf_err rc = step_done(reg, st, "setting the budget", err);
  sqlite3_finalize(st);
  return rc;
}

xf_err xf_site_registry_set_budget(xf_site_registry *reg, const char *name,
                                   const double *epsilon, const double *delta,
                                   xf_errctx *err) {
  if (epsilon) XF_GUARD(check_budget(*epsilon, err));
  if (delta && !(isfinite(*delta) && *delta > 0 && *delta < 1)) {
    xf_errctx_clear(err);
    xf_errctx_field(err, "budget_delta");
    return xf_fail(err, XF_ERANGE, "a budget's delta must lie strictly between 0 and 1, got %g",
                   *delta);
  }
  budget_arg b = {epsilon, delta};
  return change(reg, name, budget_body, &b, err);
}

/* ---- the privacy-budget ledger (privacy/ledger.h) --------------------------------------- */

xf_err xf_site_ledger_jobs(xf_site_registry *reg, const char *dataset, xf_ledger_job **out,
                           size_t *n, xf_errctx *err) {
  double delta = XF_SITE_BUDGET_DELTA_DEFAULT;
  sqlite3_stmt *st = NULL;
  XF_GUARD(prepare(reg, "SELECT budget_delta FROM datasets WHERE name = ?", &st, err));
  xf_err rc = bind_text(reg, st, 1, dataset, err);
  if (rc == XF_OK && sqlite3_step(st) == SQLITE_ROW) delta = sqlite3_column_double(st, 0);
  sqlite3_finalize(st);
  if (rc != XF_OK) return rc;
  return xf_ledger_jobs(reg->db, dataset, delta, out, n, err);
}

/* ---- top-k residuals ------------------------------------------------------------------- */

xf_err xf_site_residual_load(xf_site_registry *reg, const char *job, const char *dataset,
                             uint32_t round, float *out, size_t n, bool *found,
                             xf_errctx *err) {
  *found = false;
  memset(out, 0, n * sizeof(float));
  sqlite3_stmt *st = NULL;
  XF_GUARD(prepare(reg,
                   "SELECT n, data FROM residuals WHERE job = ? AND dataset = ? AND round < ? "
                   "ORDER BY round DESC LIMIT 1",
                   &st, err));
  xf_err rc = bind_text(reg, st, 1, job, err);
  if (rc == XF_OK) rc = bind_text(reg, st, 2, dataset, err);
  if (rc == XF_OK) {
    sqlite3_bind_int64(st, 3, round);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
      /* A residual of another size (a different model under the same job id)
       * is not this job's: start from zero. */
      if ((size_t)sqlite3_column_int64(st, 0) == n &&
          (size_t)sqlite3_column_bytes(st, 1) == n * sizeof(float)) {
        const void *blob = sqlite3_column_blob(st, 1);
        if (blob) {
          memcpy(out, blob, n * sizeof(float));
          *found = true;
        }
      }
    } else if (s != SQLITE_DONE) {
      rc = xf_db_fail(reg->db, err, "reading the residual");
    }
  }
  sqlite3_finalize(st);
  return rc;
}

xf_err xf_site_residual_save(xf_site_registry *reg, const char *job, const char *dataset,
                             uint32_t round, const float *r, size_t n, int64_t now,
                             xf_errctx *err) {
  if (n == 0 || n > (size_t)INT32_MAX / sizeof(float))
    return xf_fail(err, XF_EINVAL, "a residual of %zu values", n);
  XF_GUARD(xf_db_begin(reg->db, err));
  sqlite3_stmt *st = NULL;
  xf_err rc = prepare(reg,
                      "INSERT OR REPLACE INTO residuals (job, dataset, round, n, data, saved_at) "
                      "VALUES (?, ?, ?, ?, ?, ?)",
                      &st, err);
  if (rc == XF_OK) rc = bind_text(reg, st, 1, job, err);
  if (rc == XF_OK) rc = bind_text(reg, st, 2, dataset, err);
  if (rc == XF_OK) {
    sqlite3_bind_int64(st, 3, round);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)n);
    if (sqlite3_bind_blob(st, 5, r, (int)(n * sizeof(float)), SQLITE_STATIC) != SQLITE_OK)
      rc = xf_db_fail(reg->db, err, "binding the residual");
    sqlite3_bind_int64(st, 6, now);
  }
  if (rc == XF_OK) rc = step_done(reg, st, "saving the residual", err);
  sqlite3_finalize(st);
  st = NULL;
  /* The residual before this round stays for a retried attempt of it; older
   * ones are no longer needed. */
  if (rc == XF_OK)
    rc = prepare(reg, "DELETE FROM residuals WHERE job = ? AND dataset = ? AND round < ?", &st,
                 err);
  if (rc == XF_OK) rc = bind_text(reg, st, 1, job, err);
  if (rc == XF_OK) rc = bind_text(reg, st, 2, dataset, err);
  if (rc == XF_OK) {
    sqlite3_bind_int64(st, 3, (sqlite3_int64)round - 1);
    rc = step_done(reg, st, "dropping old residuals", err);
  }
  sqlite3_finalize(st);
  if (rc == XF_OK) rc = xf_db_commit(reg->db, err);
  if (rc != XF_OK) xf_db_rollback(reg->db);
  return rc;
}

/* ---- verification ---------------------------------------------------------------------- */

const char *xf_site_data_state_name(xf_site_data_state s) {
  switch (s) {
  case XF_SITE_DATA_OK: return "ok";
  case XF_SITE_DATA_CHANGED: return "changed";
  case XF_SITE_DATA_MISSING: return "missing";
  case XF_SITE_DATA_UNREADABLE: return "unreadable";
  }
  return "unknown";
}

static void verify_one(const xf_site_dataset *d, xf_site_verify_result *r) {
  memset(r, 0, sizeof(*r));
  snprintf(r->name, sizeof(r->name), "%s", d->name);
  snprintf(r->registered, sizeof(r->registered), "%s", d->digest);
  struct stat sb;
  if (stat(d->path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    r->state = XF_SITE_DATA_MISSING;
    snprintf(r->detail, sizeof(r->detail), "%s: the dataset directory is gone", d->path);
    return;
  }
  xf_errctx e;
  xf_errctx_clear(&e);
  xf_digest now;
  xf_err rc = xf_site_data_digest(d->path, d->layout, &now, &e);
  if (rc != XF_OK) {
    r->state = rc == XF_ENOENT ? XF_SITE_DATA_MISSING : XF_SITE_DATA_UNREADABLE;
    xf_errctx_format(&e, r->detail, sizeof(r->detail));
    return;
  }
  xf_digest_hex(&now, r->current);
  r->state = strcmp(r->current, r->registered) == 0 ? XF_SITE_DATA_OK : XF_SITE_DATA_CHANGED;
}

xf_err xf_site_registry_verify(xf_site_registry *reg, const char *name,
                               xf_site_verify_result **out, size_t *n, xf_errctx *err) {
  *out = NULL;
  *n = 0;
  xf_site_dataset *list = NULL;
  size_t count = 0;
  xf_site_dataset one;
  if (name) {
    XF_GUARD(xf_site_registry_get(reg, name, &one, err));
    list = &one;
    count = 1;
  } else {
    XF_GUARD(xf_site_registry_list(reg, &list, &count, err));
  }
  xf_err rc = XF_OK;
  xf_site_verify_result *res = NULL;
  if (count) {
    res = xf_mallocarray(count, sizeof(*res));
    if (!res) rc = xf_fail(err, XF_ENOMEM, "cannot allocate the verification report");
  }
  for (size_t i = 0; rc == XF_OK && i < count; i++) verify_one(&list[i], &res[i]);
  if (name) xf_site_dataset_free(&one);
  else xf_site_dataset_list_free(list, count);
  if (rc != XF_OK) return rc;
  *out = res;
  *n = count;
  return XF_OK;
}

/* ---- site.json ------------------------------------------------------------------------- */

static const char *const config_keys[] = {"site", "region",   "coordinator", "cert",    "key",
                                          "ca",   "crl",      "data_root",   "threads", "backend"};
#define N_CONFIG_KEYS (sizeof(config_keys) / sizeof(config_keys[0]))

static xf_err config_fail(xf_errctx *err, const char *name, const char *field, xf_err code,
                          const char *fmt, ...) XF_PRINTF(5, 6);
static xf_err config_fail(xf_errctx *err, const char *name, const char *field, xf_err code,
                          const char *fmt, ...) {
  xf_errctx_clear(err);
  if (name) xf_errctx_file(err, name);
  if (field) xf_errctx_field(err, "%s", field);
  va_list ap;
  va_start(ap, fmt);
  xf_err rc = xf_vfail(err, code, fmt, ap);
  va_end(ap);
  return rc;
}

static const char *json_type_word(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  case JSON_NULL: return "null";
  }
  return "an unknown type";
}

/* Copies a string member into dst (cap bytes); absent leaves dst empty. */
static xf_err config_string(json_t *root, const char *key, const char *name, char *dst,
                            size_t cap, bool required, xf_errctx *err) {
  json_t *v = json_object_get(root, key);
  if (!v) {
    if (required)
      return config_fail(err, name, key, XF_EFORMAT, "required; 'xfed-site init' writes it");
    return XF_OK;
  }
  if (!json_is_string(v))
    return config_fail(err, name, key, XF_EFORMAT, "expected a string, got %s",
                       json_type_word(v));
  const char *s = json_string_value(v);
  size_t n = json_string_length(v);
  if (n != strlen(s))
    return config_fail(err, name, key, XF_EFORMAT, "the string holds a NUL character");
  if (n == 0) return config_fail(err, name, key, XF_EFORMAT, "must not be empty; leave it out");
  if (n >= cap)
    return config_fail(err, name, key, XF_ERANGE, "longer than %zu characters", cap - 1);
  memcpy(dst, s, n + 1);
  return XF_OK;
}

static xf_err config_from_json(json_t *root, const char *name, xf_site_config *c,
                               xf_errctx *err) {
  if (!json_is_object(root))
    return config_fail(err, name, NULL, XF_EFORMAT, "expected a JSON object, got %s",
                       json_type_word(root));
  const char *key;
  json_t *value;
  json_object_foreach(root, key, value) {
    bool known = false;
    for (size_t i = 0; i < N_CONFIG_KEYS; i++) known = known || strcmp(key, config_keys[i]) == 0;
    if (!known)
      return config_fail(err, name, key, XF_EFORMAT,
                         "unknown field; the fields are site, region, coordinator, cert, key, "
                         "ca, crl, data_root, threads, backend");
  }
  XF_GUARD(config_string(root, "site", name, c->site, sizeof(c->site), true, err));
  if (!xf_label_valid(c->site))
    return config_fail(err, name, "site", XF_EINVAL,
                       "'%s' is not a site name: 1 to 63 of a-z, 0-9 and '-', not first or last",
                       c->site);
  XF_GUARD(config_string(root, "region", name, c->region, sizeof(c->region), true, err));
  if (!xf_label_valid(c->region))
    return config_fail(err, name, "region", XF_EINVAL,
                       "'%s' is not a region name: 1 to 63 of a-z, 0-9 and '-', not first or "
                       "last",
                       c->region);
  XF_GUARD(config_string(root, "coordinator", name, c->coordinator, sizeof(c->coordinator), true,
                         err));
  if (xf_address_parse(c->coordinator, c->coordinator_host, sizeof(c->coordinator_host),
                            &c->coordinator_port, err) != XF_OK) {
    xf_errctx_file(err, name);
    xf_errctx_field(err, "coordinator");
    return err ? err->code : XF_EINVAL;
  }
  XF_GUARD(config_string(root, "cert", name, c->cert, sizeof(c->cert), false, err));
  XF_GUARD(config_string(root, "key", name, c->key, sizeof(c->key), false, err));
  XF_GUARD(config_string(root, "ca", name, c->ca, sizeof(c->ca), false, err));
  XF_GUARD(config_string(root, "crl", name, c->crl, sizeof(c->crl), false, err));
  XF_GUARD(config_string(root, "data_root", name, c->data_root, sizeof(c->data_root), false, err));
  json_t *t = json_object_get(root, "threads");
  if (t) {
    if (!json_is_integer(t))
      return config_fail(err, name, "threads", XF_EFORMAT, "expected an integer, got %s",
                         json_type_word(t));
    json_int_t v = json_integer_value(t);
    if (v < 0 || v > 1024)
      return config_fail(err, name, "threads", XF_ERANGE,
                         "must be between 0 (all cores) and 1024, got %lld", (long long)v);
    c->threads = (uint32_t)v;
  }
  snprintf(c->backend, sizeof(c->backend), "auto");
  char backend[16] = "";
  XF_GUARD(config_string(root, "backend", name, backend, sizeof(backend), false, err));
  if (backend[0]) {
    if (strcmp(backend, "auto") != 0 && strcmp(backend, "cpu") != 0 &&
        strcmp(backend, "cuda") != 0)
      return config_fail(err, name, "backend", XF_EINVAL,
                         "'%s' is not a backend: use auto, cpu or cuda", backend);
    /* One of the three names above, so it fits; memcpy keeps GCC's
     * truncation analysis (which cannot see that) quiet at -O0. */
    memcpy(c->backend, backend, strlen(backend) + 1);
  }
  return XF_OK;
}

xf_err xf_site_config_parse(const char *text, size_t len, const char *name,
                            xf_site_config *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    char where[64];
    snprintf(where, sizeof(where), "line %d, column %d", je.line, je.column);
    return config_fail(err, name, where, XF_EFORMAT, "not valid JSON: %s", je.text);
  }
  xf_err rc = config_from_json(root, name, out, err);
  json_decref(root);
  if (rc != XF_OK) memset(out, 0, sizeof(*out));
  return rc;
}

xf_err xf_site_config_load(const char *path, xf_site_config *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    return config_fail(err, path, NULL, e == ENOENT ? XF_ENOENT : XF_EIO,
                       "cannot open the site configuration: %s%s", strerror(e),
                       e == ENOENT ? "; 'xfed-site init' creates it" : "");
  }
  /* site.json is a few hundred bytes; 1 MiB is far beyond any valid one. */
  enum { MAX_CONFIG = 1 << 20 };
  char *buf = xf_malloc(MAX_CONFIG + 1);
  if (!buf) {
    fclose(f);
    return config_fail(err, path, NULL, XF_ENOMEM, "cannot allocate a buffer for the file");
  }
  size_t n = fread(buf, 1, MAX_CONFIG + 1, f);
  int bad = ferror(f);
  fclose(f);
  xf_err rc;
  if (bad) rc = config_fail(err, path, NULL, XF_EIO, "cannot read the file");
  else if (n > MAX_CONFIG) rc = config_fail(err, path, NULL, XF_ERANGE, "larger than 1 MiB");
  else rc = xf_site_config_parse(buf, n, path, out, err);
  xf_free(buf);
  return rc;
}

xf_err xf_site_config_format(const xf_site_config *cfg, char **json, xf_errctx *err) {
  *json = NULL;
  json_t *o = json_object();
  if (!o) return xf_fail(err, XF_ENOMEM, "cannot build site.json");
  int bad = 0;
  bad |= json_object_set_new(o, "site", json_string(cfg->site));
  bad |= json_object_set_new(o, "region", json_string(cfg->region));
  bad |= json_object_set_new(o, "coordinator", json_string(cfg->coordinator));
  const struct {
    const char *key, *value;
  } paths[] = {{"cert", cfg->cert},
               {"key", cfg->key},
               {"ca", cfg->ca},
               {"crl", cfg->crl},
               {"data_root", cfg->data_root}};
  for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
    if (paths[i].value[0]) bad |= json_object_set_new(o, paths[i].key, json_string(paths[i].value));
  bad |= json_object_set_new(o, "threads", json_integer(cfg->threads));
  bad |= json_object_set_new(o, "backend", json_string(cfg->backend[0] ? cfg->backend : "auto"));
  char *text = bad ? NULL : json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(o);
  if (!text) return xf_fail(err, XF_ENOMEM, "cannot build site.json");
  size_t n = strlen(text);
  char *copy = xf_malloc(n + 2);
  if (copy) {
    memcpy(copy, text, n);
    copy[n] = '\n';
    copy[n + 1] = '\0';
  }
  free(text);
  if (!copy) return xf_fail(err, XF_ENOMEM, "cannot build site.json");
  *json = copy;
  return XF_OK;
}
