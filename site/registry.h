/* SPDX-License-Identifier: Apache-2.0 */
/* A site's local state: the registry of datasets it holds (in the site's own
 * SQLite database, with classification, tags, shape, content digest and the
 * operator's privacy-budget cap) and its configuration file site.json.
 * docs/operator-guide.md is the operator's page for both. */
#ifndef XF_SITE_REGISTRY_H
#define XF_SITE_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/name.h"
#include "base/result.h"
#include "crypto/digest.h"
#include "data/dataset.h"
#include "privacy/ledger.h"

/* ---- names ------------------------------------------------------------------ */

/* A dataset name or a tag, and a site or region name, follow base/name.h
 * (xf_name_valid, xf_label_valid). */
#define XF_SITE_NAME_MAX XF_NAME_MAX

/* How sensitive a dataset is: the value residency rules select on. Ordered
 * from least to most sensitive. */
typedef enum xf_site_class {
  XF_SITE_CLASS_PUBLIC = 1,   /* "public": may be published */
  XF_SITE_CLASS_INTERNAL,     /* "internal": the organisation's own, no personal data */
  XF_SITE_CLASS_CONFIDENTIAL, /* "confidential": personal or business-sensitive */
  XF_SITE_CLASS_RESTRICTED    /* "restricted": special-category or regulated data */
} xf_site_class;

/* "public", "internal", "confidential" or "restricted"; "unknown" otherwise. */
const char *xf_site_class_name(xf_site_class c);
/* Parses one of the four words; XF_EINVAL listing them otherwise. */
xf_err xf_site_class_parse(const char *s, xf_site_class *out, xf_errctx *err) XF_WARN_UNUSED;

/* ---- the dataset registry ------------------------------------------------------ */

/* The open site database. One thread at a time (as xf_db). */
typedef struct xf_site_registry xf_site_registry;

/* One registered dataset, as read back from the registry. Owned by the
 * caller: release with xf_site_dataset_free. */
typedef struct xf_site_dataset {
  char name[XF_SITE_NAME_MAX + 1];
  char *path; /* absolute path of the dataset directory (xf_malloc) */
  xf_dataset_layout layout;
  xf_site_class classification;
  char **tags; /* n_tags tags in alphabetical order (xf_malloc) */
  size_t n_tags;
  uint32_t train_records, test_records;
  uint32_t classes, features;
  uint32_t h, w, c;      /* shape of one record */
  int64_t registered_at; /* Unix seconds */
  char digest[XF_DIGEST_HEX]; /* the data's digest at registration */
  bool has_budget;
  double budget_epsilon; /* the per-dataset privacy budget cap, when has_budget */
  double budget_delta;   /* the delta the cap is stated at (default 1e-5) */
  char *trainer;             /* the external trainer's absolute path (xf_malloc), or NULL for
                                native training (docs/trainers.md) */
  uint32_t trainer_timeout;  /* its time limit per task, seconds */
  bool trainer_dp_declared;  /* it reports the DP-SGD it did ("declared"), else "none" */
} xf_site_dataset;

/* A trainer's time limit unless the operator says otherwise, and the most. */
#define XF_SITE_TRAINER_TIMEOUT_DEFAULT 3600u
#define XF_SITE_TRAINER_TIMEOUT_MAX 604800u

/* The delta a budget is stated at unless the operator says otherwise. */
#define XF_SITE_BUDGET_DELTA_DEFAULT 1e-5

/* Frees what d owns and zeroes it; NULL-safe, safe on a zeroed struct. */
void xf_site_dataset_free(xf_site_dataset *d);
/* Frees n datasets and the array (from xf_site_registry_list); NULL-safe. */
void xf_site_dataset_list_free(xf_site_dataset *list, size_t n);

/* What xf_site_registry_add registers. Everything is borrowed. */
typedef struct xf_site_dataset_spec {
  const char *name;
  const char *path;             /* the dataset directory; resolved to an absolute path */
  xf_site_class classification; /* 0 means internal */
  const char *const *tags;      /* n_tags names; repeats are recorded once */
  size_t n_tags;
  bool has_budget;
  double budget_epsilon; /* finite and > 0 */
  const char *trainer;          /* NULL: native training; else an absolute program path */
  uint32_t trainer_timeout;     /* seconds, 1..XF_SITE_TRAINER_TIMEOUT_MAX; 0: the default */
  bool trainer_dp_declared;     /* the trainer reports its DP-SGD in result.json */
} xf_site_dataset_spec;

/* Opens or creates the site database at db_path (mode 0600, WAL) and brings
 * its schema up to date (the site's own migration list). On success the
 * caller owns *out (xf_site_registry_close); on failure *out is NULL and err
 * names the file. */
xf_err xf_site_registry_open(const char *db_path, xf_site_registry **out,
                             xf_errctx *err) XF_WARN_UNUSED;
/* NULL-safe. */
void xf_site_registry_close(xf_site_registry *reg);

/* The registry's database connection, for the modules that keep tables in
 * the site database beside the registry: the site's local residency policy
 * (policy/policy.h) and its audit trail (policy/audit.h). Borrowed: valid
 * until xf_site_registry_close; one thread at a time, as the registry. */
struct xf_db;
struct xf_db *xf_site_registry_db(xf_site_registry *reg);

/* Registers a dataset. Checks the name, tags (XF_EINVAL naming them) and the
 * budget (XF_ERANGE), refuses a name already registered (XF_EEXISTS), then
 * loads the directory with xf_dataset_load_dir: data it refuses is refused
 * here with the loader's error unchanged (file, line, what is wrong). The
 * content digest (xf_site_data_digest) is taken, and the dataset and its tags
 * are recorded in one transaction, so a failure records nothing. out may be
 * NULL; otherwise it receives the new record (the caller owns it) and is
 * zeroed on failure. */
xf_err xf_site_registry_add(xf_site_registry *reg, const xf_site_dataset_spec *spec,
                            xf_site_dataset *out, xf_errctx *err) XF_WARN_UNUSED;

/* Every registered dataset in name order. *out (n entries, NULL when none) is
 * owned by the caller: xf_site_dataset_list_free. */
xf_err xf_site_registry_list(xf_site_registry *reg, xf_site_dataset **out, size_t *n,
                             xf_errctx *err) XF_WARN_UNUSED;

/* The dataset called name; XF_ENOENT when none is. The caller owns *out
 * (zeroed on failure). */
xf_err xf_site_registry_get(xf_site_registry *reg, const char *name, xf_site_dataset *out,
                            xf_errctx *err) XF_WARN_UNUSED;

/* Forgets a dataset and its tag links (the data itself is not touched).
 * XF_ENOENT when it is not registered. */
xf_err xf_site_registry_remove(xf_site_registry *reg, const char *name,
                               xf_errctx *err) XF_WARN_UNUSED;

/* Adds a tag to a dataset; adding one it already has is a no-op. XF_EINVAL
 * for an invalid tag, XF_ENOENT for an unknown dataset. */
xf_err xf_site_registry_tag_add(xf_site_registry *reg, const char *name, const char *tag,
                                xf_errctx *err) XF_WARN_UNUSED;
/* Removes a tag from a dataset; XF_ENOENT when the dataset is unknown or does
 * not carry the tag. */
xf_err xf_site_registry_tag_remove(xf_site_registry *reg, const char *name, const char *tag,
                                   xf_errctx *err) XF_WARN_UNUSED;

/* Sets the dataset's privacy budget cap to *epsilon (finite, > 0; else
 * XF_ERANGE), or clears it when epsilon is NULL; with delta, also the delta
 * the cap is stated at (in (0, 1); else XF_ERANGE), which otherwise stays as
 * it is. XF_ENOENT for an unknown dataset. */
xf_err xf_site_registry_set_budget(xf_site_registry *reg, const char *name,
                                   const double *epsilon, const double *delta,
                                   xf_errctx *err) XF_WARN_UNUSED;

/* ---- top-k residuals ------------------------------------------------------------------ */

/* The error-feedback residual (n floats) that job's compressed updates on
 * dataset left out, as saved by the latest round before `round` (so a retried
 * attempt of a round starts from the same residual as the first). Zeroes and
 * *found false when there is none, or one of another size. XF_EDB. */
xf_err xf_site_residual_load(xf_site_registry *reg, const char *job, const char *dataset,
                             uint32_t round, float *out, size_t n, bool *found,
                             xf_errctx *err) XF_WARN_UNUSED;

/* Saves the residual left after round's update, in one transaction that
 * also drops residuals older than round - 1. XF_EINVAL for n of 0 or above
 * 2^29, XF_EDB. */
xf_err xf_site_residual_save(xf_site_registry *reg, const char *job, const char *dataset,
                             uint32_t round, const float *r, size_t n, int64_t now,
                             xf_errctx *err) XF_WARN_UNUSED;

/* The jobs that charged dataset (privacy/ledger.h's xf_ledger_jobs at the
 * dataset's budget delta), oldest first. *out (n entries, NULL when none) is
 * owned by the caller: xf_free. The ledger itself is privacy/ledger.h's, on
 * this registry's database (xf_site_registry_db). */
xf_err xf_site_ledger_jobs(xf_site_registry *reg, const char *dataset, xf_ledger_job **out,
                           size_t *n, xf_errctx *err) XF_WARN_UNUSED;

/* ---- content digests and verification --------------------------------------------- */

/* The digest of the files of a dataset directory in the given layout:
 * BLAKE2b-256 over a version prefix and, in this fixed order, each file the
 * loader reads (IDX: train images, train labels, t10k images, t10k labels;
 * CSV: train, test; each the plain file when present, else its ".gz"), then
 * dataset.json when present; each file enters as its name, its size and its
 * bytes, so renaming, moving bytes between files or adding dataset.json all
 * change it. XF_ENOENT when a file of the layout is missing (err->file names
 * it), XF_EIO when one cannot be read. */
xf_err xf_site_data_digest(const char *dir, xf_dataset_layout layout, xf_digest *out,
                           xf_errctx *err) XF_WARN_UNUSED;

typedef enum xf_site_data_state {
  XF_SITE_DATA_OK = 0,     /* the files are as registered */
  XF_SITE_DATA_CHANGED,    /* the digest differs */
  XF_SITE_DATA_MISSING,    /* the directory or one of its files is gone */
  XF_SITE_DATA_UNREADABLE  /* a file is there but cannot be read */
} xf_site_data_state;

/* "ok", "changed", "missing", "unreadable". */
const char *xf_site_data_state_name(xf_site_data_state s);

/* One dataset's verification. */
typedef struct xf_site_verify_result {
  char name[XF_SITE_NAME_MAX + 1];
  xf_site_data_state state;
  char registered[XF_DIGEST_HEX]; /* the digest taken at registration */
  char current[XF_DIGEST_HEX];    /* the digest now; "" unless ok or changed */
  char detail[512];               /* for missing or unreadable: what and which file */
} xf_site_verify_result;

/* Recomputes the digest of one dataset (name) or of every dataset (name
 * NULL) and compares it with the one taken at registration. Changed, missing
 * and unreadable data is reported in the results, not as an error; errors are
 * XF_ENOENT for an unknown name, XF_EDB, XF_ENOMEM. *out (n entries, NULL
 * when none) is owned by the caller and released with xf_free. */
xf_err xf_site_registry_verify(xf_site_registry *reg, const char *name,
                               xf_site_verify_result **out, size_t *n,
                               xf_errctx *err) XF_WARN_UNUSED;

/* ---- site.json ---------------------------------------------------------------------- */

/* Longest path accepted in site.json. */
#define XF_SITE_PATH_MAX 1023
/* Longest coordinator host name (base/name.h). */
#define XF_SITE_HOST_MAX XF_HOST_MAX

/* A site's configuration (format in docs/operator-guide.md). Empty strings
 * mean "not set". Relative paths are relative to the directory that holds
 * site.json; they are kept as written. */
typedef struct xf_site_config {
  char site[XF_SITE_NAME_MAX + 1];   /* "site": required, a label */
  char region[XF_SITE_NAME_MAX + 1]; /* "region": required, a label */
  char coordinator[XF_SITE_HOST_MAX + 10]; /* "coordinator": required, HOST:PORT */
  char coordinator_host[XF_SITE_HOST_MAX + 1]; /* host part, without IPv6 brackets */
  uint16_t coordinator_port;
  char cert[XF_SITE_PATH_MAX + 1]; /* "cert", "key", "ca", "crl": optional paths */
  char key[XF_SITE_PATH_MAX + 1];
  char ca[XF_SITE_PATH_MAX + 1];
  char crl[XF_SITE_PATH_MAX + 1];
  char data_root[XF_SITE_PATH_MAX + 1]; /* "data_root": optional directory */
  uint32_t threads;                     /* "threads": 0..1024, 0 = all cores (default) */
  char backend[8];                      /* "backend": auto (default), cpu or cuda */
} xf_site_config;

/* Parses site.json text strictly: one JSON object, no duplicate keys, no
 * unknown keys, every value of its type and within its range, the three
 * required fields present. Errors are XF_EFORMAT / XF_EINVAL / XF_ERANGE with
 * err->field naming the field and err->file set to name. The text is
 * borrowed; on failure *out is zeroed. */
xf_err xf_site_config_parse(const char *text, size_t len, const char *name,
                            xf_site_config *out, xf_errctx *err) XF_WARN_UNUSED;
/* Reads and parses the file at path. XF_ENOENT when it is missing. */
xf_err xf_site_config_load(const char *path, xf_site_config *out,
                           xf_errctx *err) XF_WARN_UNUSED;
/* The configuration as site.json text (unset optional fields left out) that
 * xf_site_config_parse reads back to the same values. *json is owned by the
 * caller (xf_free). */
xf_err xf_site_config_format(const xf_site_config *cfg, char **json,
                             xf_errctx *err) XF_WARN_UNUSED;

#endif
