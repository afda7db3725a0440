/* SPDX-License-Identifier: Apache-2.0 */
/* Writing a split to disk: the manifest, and shard directories built in a
 * temporary sibling that is renamed into place only once complete. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "data/dataset_internal.h"
#include "base/file.h"

/* snprintf into a path buffer; false when the path does not fit. */
static bool pathf(char *buf, size_t n, const char *fmt, ...) XF_PRINTF(3, 4);

static bool pathf(char *buf, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf, n, fmt, ap);
  va_end(ap);
  return w >= 0 && (size_t)w < n;
}

static json_t *label_counts_json(const xf_dataset *ds, uint64_t *counts) {
  xf_dataset_label_counts(ds, counts);
  json_t *a = json_array();
  for (uint32_t k = 0; a && k < ds->classes; k++)
    if (json_array_append_new(a, json_integer((json_int_t)counts[k])) != 0) {
      json_decref(a);
      return NULL;
    }
  return a;
}

static json_t *seed_json(uint64_t seed) {
  /* JSON integers are signed 64-bit in jansson; larger seeds go as text. */
  if (seed <= (uint64_t)INT64_MAX) return json_integer((json_int_t)seed);
  char buf[24];
  snprintf(buf, sizeof(buf), "%llu", (unsigned long long)seed);
  return json_string(buf);
}

static json_t *manifest_build(const xf_split *split, const char *source, xf_dataset_layout layout,
                              uint64_t *counts) {
  char scheme[64];
  xf_split_scheme_format(&split->scheme, scheme, sizeof(scheme));
  const xf_dataset *first = split->sites > 0 ? &split->shards[0].train : NULL;
  uint64_t train_total = 0, test_total = 0;
  for (int s = 0; s < split->sites; s++) {
    train_total += split->shards[s].train.n;
    test_total += split->shards[s].test.n;
  }
  json_t *root = json_pack("{s:i,s:s,s:s,s:s,s:o,s:i,s:[i,i,i],s:I,s:I,s:i,s:[]}", "format", 1,
                           "source", source ? source : "", "layout",
                           xf_dataset_layout_name(layout), "scheme", scheme, "seed",
                           seed_json(split->seed), "classes", (json_int_t)split->classes,
                           "shape", first ? (int)first->h : 0, first ? (int)first->w : 0,
                           first ? (int)first->c : 0, "train_records", (json_int_t)train_total,
                           "test_records", (json_int_t)test_total, "min_records",
                           (int)split->min_records, "sites");
  if (!root) return NULL;
  json_t *sites = json_object_get(root, "sites");
  for (int s = 0; s < split->sites; s++) {
    char name[32];
    snprintf(name, sizeof(name), "site-%d", s + 1);
    const xf_dataset_pair *p = &split->shards[s];
    json_t *tr = label_counts_json(&p->train, counts);
    json_t *te = label_counts_json(&p->test, counts);
    json_t *site = (tr && te) ? json_pack("{s:s,s:I,s:I,s:o,s:o}", "name", name, "train_records",
                                          (json_int_t)p->train.n, "test_records",
                                          (json_int_t)p->test.n, "train_label_counts", tr,
                                          "test_label_counts", te)
                              : NULL;
    if (!site || json_array_append_new(sites, site) != 0) {
      if (!site) {
        json_decref(tr);
        json_decref(te);
      }
      json_decref(root);
      return NULL;
    }
  }
  return root;
}

xf_err xf_split_manifest(const xf_split *split, const char *source, xf_dataset_layout layout,
                         char **json, xf_errctx *err) {
  *json = NULL;
  uint64_t *counts = xf_calloc(split->classes ? split->classes : 1, sizeof(uint64_t));
  if (!counts) return xf_fail(err, XF_ENOMEM, "out of memory for the manifest");
  json_t *root = manifest_build(split, source, layout, counts);
  xf_free(counts);
  char *text = root ? json_dumps(root, JSON_INDENT(2)) : NULL;
  json_decref(root);
  if (!text) return xf_fail(err, XF_ENOMEM, "out of memory for the manifest");
  /* Hand over a copy from our allocator, so the caller frees with xf_free. */
  *json = xf_strdup(text);
  free(text);
  if (!*json) return xf_fail(err, XF_ENOMEM, "out of memory for the manifest");
  return XF_OK;
}

/* XF_OK when the directory that would hold outdir exists. */
static xf_err check_parent(const char *outdir, xf_errctx *err) {
  char parent[PATH_MAX];
  if (!pathf(parent, sizeof(parent), "%s", outdir))
    return xf__data_fail(err, outdir, XF_EINVAL, "not a usable output directory name");
  size_t n = strlen(parent);
  while (n > 1 && parent[n - 1] == '/') parent[--n] = '\0';
  char *slash = strrchr(parent, '/');
  if (!slash) return XF_OK; /* relative to the working directory, which exists */
  if (slash == parent) return XF_OK;
  *slash = '\0';
  struct stat st;
  if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
    return xf__data_fail(err, outdir, XF_ENOENT,
                         "its parent directory %s does not exist: create it first", parent);
  return XF_OK;
}

xf_err xf_split_check_out(const char *outdir, xf_errctx *err) {
  struct stat st;
  /* The last component is not followed: the finished split is renamed onto
   * it, which would replace a link, not fill the directory it points to. */
  if (lstat(outdir, &st) != 0) {
    if (errno == ENOENT) return check_parent(outdir, err);
    return xf__data_fail(err, outdir, XF_EIO, "cannot inspect the output directory: %s",
                         strerror(errno));
  }
  if (S_ISLNK(st.st_mode))
    return xf__data_fail(err, outdir, XF_EEXISTS,
                         "is a symbolic link; xfed never writes through a link: give the real "
                         "directory, or pick another output directory");
  if (!S_ISDIR(st.st_mode))
    return xf__data_fail(err, outdir, XF_EEXISTS,
                         "exists and is not a directory (it is %s): remove it or pick another "
                         "output directory", xf_file_kind(st.st_mode));
  DIR *d = opendir(outdir);
  if (!d)
    return xf__data_fail(err, outdir, XF_EIO, "cannot read the output directory: %s",
                         strerror(errno));
  struct dirent *e;
  int entries = 0;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) entries++;
  closedir(d);
  if (entries)
    return xf__data_fail(err, outdir, XF_EEXISTS,
                         "exists and is not empty: remove it or pick another output directory");
  return XF_OK;
}

/* Removes what xf_split_write may have created under tmp, and tmp itself;
 * names only files it writes, so nothing else is ever deleted. */
static void remove_partial(const char *tmp, int sites) {
  char path[PATH_MAX];
  size_t nfiles;
  const char *const *files = xf__dataset_dir_files(&nfiles);
  for (int s = 0; s < sites; s++) {
    for (size_t i = 0; i < nfiles; i++)
      if (pathf(path, sizeof(path), "%s/site-%d/%s", tmp, s + 1, files[i])) unlink(path);
    if (pathf(path, sizeof(path), "%s/site-%d", tmp, s + 1)) rmdir(path);
  }
  if (pathf(path, sizeof(path), "%s/manifest.json", tmp)) unlink(path);
  rmdir(tmp);
}

static xf_err write_text(const char *path, const char *text, xf_errctx *err) {
  xf_file_writer *w = NULL;
  XF_GUARD(xf_file_writer_begin(path, 0644, &w, err));
  xf_err rc = xf_file_writer_write(w, text, strlen(text), err);
  if (rc == XF_OK) rc = xf_file_writer_write(w, "\n", 1, err);
  if (rc != XF_OK) {
    xf_file_writer_abort(w);
    return rc;
  }
  return xf_file_writer_commit(w, err);
}

static xf_err write_shards(const xf_split *split, const char *source, xf_dataset_layout layout,
                           const char *tmp, const char *manifest, xf_errctx *err) {
  char scheme[64], path[PATH_MAX];
  xf_split_scheme_format(&split->scheme, scheme, sizeof(scheme));
  for (int s = 0; s < split->sites; s++) {
    if (!pathf(path, sizeof(path), "%s/site-%d", tmp, s + 1))
      return xf__data_fail(err, tmp, XF_ERANGE, "output path too long");
    if (mkdir(path, 0777) != 0)
      return xf__data_fail(err, path, XF_EIO, "cannot create: %s", strerror(errno));
    char name[32];
    snprintf(name, sizeof(name), "site-%d", s + 1);
    json_t *extra = json_pack("{s:s,s:s,s:o,s:s}", "site", name, "scheme", scheme, "seed",
                              seed_json(split->seed), "source", source ? source : "");
    char *extra_text = extra ? json_dumps(extra, JSON_COMPACT) : NULL;
    json_decref(extra);
    if (!extra_text) return xf__data_fail(err, path, XF_ENOMEM, "out of memory");
    xf_err rc = xf_dataset_write_dir(path, layout, &split->shards[s].train,
                                     &split->shards[s].test, extra_text, err);
    free(extra_text);
    XF_GUARD(rc);
  }
  if (!pathf(path, sizeof(path), "%s/manifest.json", tmp))
    return xf__data_fail(err, tmp, XF_ERANGE, "output path too long");
  return write_text(path, manifest, err);
}

xf_err xf_split_write(const xf_split *split, const char *source, xf_dataset_layout layout,
                      const char *outdir, xf_errctx *err) {
  XF_GUARD(xf_split_check_out(outdir, err));
  /* "out/" and "out" are the same directory; the sibling is "out.tmp-...". */
  char target[PATH_MAX], tmp[PATH_MAX];
  int w = snprintf(target, sizeof(target), "%s", outdir);
  if (w < 0 || (size_t)w + 12 >= sizeof(target) || w == 0)
    return xf__data_fail(err, outdir, XF_EINVAL, "not a usable output directory name");
  while (w > 1 && target[w - 1] == '/') target[--w] = '\0';
  if (!pathf(tmp, sizeof(tmp), "%s.tmp-XXXXXX", target))
    return xf__data_fail(err, outdir, XF_EINVAL, "not a usable output directory name");
  char *manifest = NULL;
  XF_GUARD(xf_split_manifest(split, source, layout, &manifest, err));
  if (!mkdtemp(tmp)) {
    int e = errno;
    xf_free(manifest);
    return xf__data_fail(err, outdir, e == ENOENT ? XF_ENOENT : XF_EIO,
                         "cannot create a working directory next to it: %s", strerror(e));
  }
  /* mkdtemp makes the directory private; give it the usual permissions. */
  mode_t mask = umask(0);
  umask(mask);
  xf_err rc = chmod(tmp, 0777 & ~mask) == 0
                  ? XF_OK
                  : xf__data_fail(err, tmp, XF_EIO, "chmod failed: %s", strerror(errno));
  if (rc == XF_OK) rc = write_shards(split, source, layout, tmp, manifest, err);
  xf_free(manifest);
  if (rc == XF_OK && rename(tmp, target) != 0) {
    int e = errno;
    rc = xf__data_fail(err, outdir, e == ENOTEMPTY || e == EEXIST ? XF_EEXISTS : XF_EIO,
                       "cannot move the finished split into place: %s%s", strerror(e),
                       e == ENOTEMPTY || e == EEXIST
                           ? " (something was written there meanwhile; remove it or pick "
                             "another output directory)"
                           : "");
  }
  if (rc != XF_OK) remove_partial(tmp, split->sites);
  return rc;
}
