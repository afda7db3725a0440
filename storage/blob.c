/* SPDX-License-Identifier: Apache-2.0 */
/* The content-addressed blob store: streaming writers that hash as they
 * write and publish by rename, and reads that re-hash what they return.
 * Functions that hold resources release them at one `out:` label; argument
 * checks before anything is held return early. */
#include "storage/blob.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/file.h"
#include "storage/storage_internal.h"

/* Room after the store directory for "/<2 hex>/<62 hex>" or
 * "/tmp/<32 hex>.part" and the terminator. */
#define XF__BLOB_SUFFIX_MAX 72

/* Attempts at a fresh temporary name before giving up; a clash needs a
 * 128-bit collision or a cleaner removing the file between create and lock. */
#define XF__BLOB_BEGIN_TRIES 8

struct xf_blob_store {
  char *dir;
  char *tmp_dir;
};

struct xf_blob_writer {
  xf_digest_ctx hash; /* 64-byte aligned: the writer comes from xf_aligned_alloc */
  xf_blob_store *store;
  char *tmp_path;
  int fd;
  int spoiled; /* a write failed: the file no longer matches the hash */
  uint64_t size;
};

static xf_err xf__blob_errno_fail(xf_errctx *err, const char *path, int e, const char *what) {
  char ebuf[128];
  return xf__storage_fail(err, path, e == ENOMEM ? XF_ENOMEM : XF_EIO, "%s: %s", what,
                          xf__storage_errno(e, ebuf, sizeof(ebuf)));
}

/* mkdir that accepts an existing directory; *created tells which. */
static xf_err xf__blob_mkdir(const char *path, int *created, xf_errctx *err) {
  *created = 0;
  if (mkdir(path, 0700) == 0) {
    *created = 1;
    return XF_OK;
  }
  if (errno != EEXIST)
    return xf__blob_errno_fail(err, path, errno,
                               "cannot create the blob directory (its parent must exist and "
                               "be writable)");
  struct stat st;
  if (stat(path, &st) != 0)
    return xf__blob_errno_fail(err, path, errno, "cannot inspect the blob directory");
  if (!S_ISDIR(st.st_mode))
    return xf__storage_fail(err, path, XF_EEXISTS,
                            "is %s, not a directory; move it away or choose another blob "
                            "directory",
                            xf_file_kind(st.st_mode));
  return XF_OK;
}

/* Removes temporary files whose writer is gone. A live writer holds an
 * exclusive flock on its file until commit or abort, and the kernel drops it
 * when the writer dies, so a file we can lock has no writer. */
static xf_err xf__blob_remove_stale(const xf_blob_store *store, xf_errctx *err) {
  DIR *d = opendir(store->tmp_dir);
  if (!d) return xf__blob_errno_fail(err, store->tmp_dir, errno, "cannot list temporary blobs");
  int removed = 0;
  struct dirent *ent;
  while ((ent = readdir(d)) != NULL) {
    if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0) continue;
    int fd = openat(dirfd(d), ent->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue; /* vanished, or not ours to open: leave it */
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        unlinkat(dirfd(d), ent->d_name, 0) == 0)
      removed++;
    close(fd);
  }
  closedir(d);
  if (removed)
    XF_INFO("blob_stale_temp_removed", "dir=\"%s\" count=%d", store->tmp_dir, removed);
  return XF_OK;
}

xf_err xf_blob_store_open(const char *dir, xf_blob_store **out, xf_errctx *err) {
  XF_ENSURE(out, err, XF_EINVAL, "xf_blob_store_open needs an output handle");
  *out = NULL;
  XF_ENSURE(dir && dir[0], err, XF_EINVAL, "no blob directory given");
  size_t len = strlen(dir);
  if (len + XF__BLOB_SUFFIX_MAX > PATH_MAX)
    return xf__storage_fail(err, dir, XF_ERANGE,
                            "the blob directory path is too long (%zu bytes; at most %d)", len,
                            PATH_MAX - XF__BLOB_SUFFIX_MAX);
  while (len > 1 && dir[len - 1] == '/') len--; /* "blobs/" names the same directory */

  xf_err rc = XF_OK;
  int created = 0;
  int e = 0;
  xf_blob_store *store = xf_calloc(1, sizeof(*store));
  if (!store) {
    rc = xf__storage_fail(err, dir, XF_ENOMEM, "out of memory opening the blob store");
    goto out;
  }
  store->dir = xf_malloc(len + 1);
  store->tmp_dir = xf_malloc(len + sizeof("/tmp"));
  if (!store->dir || !store->tmp_dir) {
    rc = xf__storage_fail(err, dir, XF_ENOMEM, "out of memory opening the blob store");
    goto out;
  }
  memcpy(store->dir, dir, len);
  store->dir[len] = '\0';
  snprintf(store->tmp_dir, len + sizeof("/tmp"), "%s/tmp", store->dir);
  /* New directories are flushed into their parents, so that blobs
   * committed later are not lost with a directory entry that never reached
   * the disk. */
  rc = xf__blob_mkdir(store->dir, &created, err);
  if (rc != XF_OK) goto out;
  if (created && (e = xf__storage_fsync_parent(store->dir)) != 0) {
    rc = xf__blob_errno_fail(err, store->dir, e, "cannot flush the new directory to disk");
    goto out;
  }
  rc = xf__blob_mkdir(store->tmp_dir, &created, err);
  if (rc != XF_OK) goto out;
  if (created && (e = xf__storage_fsync_dir(store->dir)) != 0) {
    rc = xf__blob_errno_fail(err, store->dir, e, "cannot flush the new directory to disk");
    goto out;
  }
  rc = xf__blob_remove_stale(store, err);
  if (rc != XF_OK) goto out;
  *out = store;
  store = NULL;
out:
  xf_blob_store_close(store);
  return rc;
}

void xf_blob_store_close(xf_blob_store *store) {
  if (!store) return;
  xf_free(store->tmp_dir);
  xf_free(store->dir);
  xf_free(store);
}

xf_err xf_blob_path(const xf_blob_store *store, const xf_digest *digest, char *buf, size_t n) {
  char hex[XF_DIGEST_HEX];
  xf_digest_hex(digest, hex);
  int w = snprintf(buf, n, "%s/%.2s/%s", store->dir, hex, hex + 2);
  if (w < 0 || (size_t)w >= n) return XF_ERANGE;
  return XF_OK;
}

bool xf_blob_exists(const xf_blob_store *store, const xf_digest *digest) {
  char path[PATH_MAX];
  struct stat st;
  if (xf_blob_path(store, digest, path, sizeof(path)) != XF_OK) return false;
  return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

xf_err xf_blob_remove(xf_blob_store *store, const xf_digest *digest, xf_errctx *err) {
  XF_ENSURE(store && digest, err, XF_EINVAL, "xf_blob_remove needs a store and a digest");
  char path[PATH_MAX];
  if (xf_blob_path(store, digest, path, sizeof(path)) != XF_OK)
    return xf__storage_fail(err, store->dir, XF_ERANGE, "the blob's path is too long");
  if (unlink(path) != 0) {
    if (errno == ENOENT) return XF_OK;
    return xf__blob_errno_fail(err, path, errno, "cannot remove the blob");
  }
  if (xf__storage_fsync_parent(path) != 0)
    return xf__blob_errno_fail(err, path, errno,
                               "removed the blob but cannot flush its directory");
  return XF_OK;
}

/* Creates this writer's temporary file and locks it. The lock is what tells
 * xf__blob_remove_stale the file is alive; a cleaner in another process may
 * lock and unlink the file in the instant between its creation and our
 * lock, so once locked we check that the name still leads to our file. */
static xf_err xf__blob_create_temp(xf_blob_writer *w, xf_errctx *err) {
  size_t len = strlen(w->store->tmp_dir) + 1 + XF_STORAGE_NAME_HEX + sizeof(".part");
  w->tmp_path = xf_malloc(len);
  if (!w->tmp_path)
    return xf__storage_fail(err, w->store->tmp_dir, XF_ENOMEM,
                            "out of memory starting a blob");
  for (int attempt = 0; attempt < XF__BLOB_BEGIN_TRIES; attempt++) {
    char name[XF_STORAGE_NAME_HEX];
    XF_GUARD(xf__storage_random_name(name, err));
    snprintf(w->tmp_path, len, "%s/%s.part", w->store->tmp_dir, name);
    int fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      return xf__blob_errno_fail(err, w->tmp_path, errno,
                                 "cannot create a temporary blob file (check that the "
                                 "directory is writable and the disk not full)");
    }
    struct stat mine, named;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &mine) == 0 &&
        stat(w->tmp_path, &named) == 0 && mine.st_ino == named.st_ino &&
        mine.st_dev == named.st_dev) {
      w->fd = fd;
      return XF_OK;
    }
    close(fd);
  }
  return xf__storage_fail(err, w->store->tmp_dir, XF_EIO,
                          "could not create a temporary blob file in %d attempts; another "
                          "process keeps removing files in this directory",
                          XF__BLOB_BEGIN_TRIES);
}

xf_err xf_blob_writer_begin(xf_blob_store *store, xf_blob_writer **out, xf_errctx *err) {
  XF_ENSURE(out, err, XF_EINVAL, "xf_blob_writer_begin needs an output handle");
  *out = NULL;
  XF_ENSURE(store, err, XF_EINVAL, "xf_blob_writer_begin needs a store");
  xf_blob_writer *w = xf_aligned_alloc(sizeof(*w));
  if (!w) return xf__storage_fail(err, store->dir, XF_ENOMEM, "out of memory starting a blob");
  memset(w, 0, sizeof(*w));
  w->store = store;
  w->fd = -1;
  xf_digest_init(&w->hash);
  xf_err rc = xf__blob_create_temp(w, err);
  if (rc != XF_OK) {
    xf_blob_writer_abort(w);
    return rc;
  }
  *out = w;
  return XF_OK;
}

xf_err xf_blob_writer_write(xf_blob_writer *w, const void *data, size_t n, xf_errctx *err) {
  XF_ENSURE(w && (data || n == 0), err, XF_EINVAL, "xf_blob_writer_write needs a writer");
  XF_ENSURE(!w->spoiled, err, XF_EIO,
            "an earlier write to this blob failed; abort it and start again");
  if (n == 0) return XF_OK;
  const uint8_t *p = data;
  size_t left = n;
  while (left > 0) {
    ssize_t wrote = write(w->fd, p, left);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      w->spoiled = 1;
      return xf__blob_errno_fail(err, w->tmp_path, errno,
                                 "cannot write the blob (is the disk full?)");
    }
    p += wrote;
    left -= (size_t)wrote;
  }
  xf_digest_update(&w->hash, data, n);
  w->size += n;
  return XF_OK;
}

/* Whether the file at path holds exactly `size` bytes that hash to digest.
 * Any failure to read counts as "no": the caller then replaces the file. */
static bool xf__blob_file_is_intact(const char *path, const xf_digest *digest, uint64_t size) {
  /* O_NONBLOCK: a FIFO put in a blob's place does not hold the writer up;
   * it is not a regular file, so it is replaced. */
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == size;
  xf_digest_ctx ctx;
  xf_digest_init(&ctx);
  uint64_t total = 0;
  uint8_t chunk[65536];
  while (ok) {
    ssize_t got = read(fd, chunk, sizeof(chunk));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) ok = false;
    if (got <= 0) break;
    xf_digest_update(&ctx, chunk, (size_t)got);
    total += (uint64_t)got;
  }
  close(fd);
  xf_digest found;
  xf_digest_final(&ctx, &found);
  return ok && total == size && memcmp(found.bytes, digest->bytes, XF_DIGEST_BYTES) == 0;
}

xf_err xf_blob_writer_commit(xf_blob_writer *w, xf_digest *out, xf_errctx *err) {
  XF_ENSURE(w && out, err, XF_EINVAL, "xf_blob_writer_commit needs a writer and an output");
  xf_err rc = XF_OK;
  char final_path[PATH_MAX];
  char shard[PATH_MAX];
  xf_digest digest;
  int e = 0;
  int created = 0;
  if (w->spoiled) {
    rc = xf__storage_fail(err, w->tmp_path, XF_EIO,
                          "an earlier write to this blob failed, so it was discarded");
    goto out;
  }
  /* The bytes must be on disk before the name is: otherwise a crash after
   * the rename could show a digest name over a short or empty file. */
  if (fchmod(w->fd, 0400) != 0 || fsync(w->fd) != 0) {
    rc = xf__blob_errno_fail(err, w->tmp_path, errno, "cannot flush the blob to disk");
    goto out;
  }
  xf_digest_final(&w->hash, &digest);
  if (xf_blob_path(w->store, &digest, final_path, sizeof(final_path)) != XF_OK) {
    rc = xf__storage_fail(err, w->store->dir, XF_ERANGE, "the blob path is too long");
    goto out;
  }
  memcpy(shard, final_path, sizeof(shard));
  *strrchr(shard, '/') = '\0';
  rc = xf__blob_mkdir(shard, &created, err);
  if (rc != XF_OK) goto out;
  if (created && (e = xf__storage_fsync_dir(w->store->dir)) != 0) {
    rc = xf__blob_errno_fail(err, w->store->dir, e, "cannot flush the blob directory to disk");
    goto out;
  }
  if (xf__blob_file_is_intact(final_path, &digest, w->size)) {
    unlink(w->tmp_path); /* the same bytes are already published */
  } else if (rename(w->tmp_path, final_path) != 0) {
    rc = xf__blob_errno_fail(err, final_path, errno, "cannot move the blob into place");
    goto out;
  }
  /* Also when the blob existed: its writer may have died before this sync. */
  if ((e = xf__storage_fsync_dir(shard)) != 0) {
    rc = xf__blob_errno_fail(err, shard, e, "cannot flush the blob directory to disk");
    goto out;
  }
  *out = digest;
out:
  xf_blob_writer_abort(w);
  return rc;
}

void xf_blob_writer_abort(xf_blob_writer *w) {
  if (!w) return;
  if (w->fd >= 0) close(w->fd);
  /* After a commit the temporary name is gone (renamed or removed) and this
   * unlink fails harmlessly: names are random, never reused. */
  if (w->tmp_path) unlink(w->tmp_path);
  xf_free(w->tmp_path);
  xf_aligned_free(w);
}

xf_err xf_blob_put(xf_blob_store *store, const void *data, size_t n, xf_digest *out,
                   xf_errctx *err) {
  xf_blob_writer *w = NULL;
  XF_GUARD(xf_blob_writer_begin(store, &w, err));
  xf_err rc = xf_blob_writer_write(w, data, n, err);
  if (rc != XF_OK) {
    xf_blob_writer_abort(w);
    return rc;
  }
  return xf_blob_writer_commit(w, out, err);
}

xf_err xf_blob_get(xf_blob_store *store, const xf_digest *digest, void **data, size_t *n,
                   xf_errctx *err) {
  XF_ENSURE(data && n, err, XF_EINVAL, "xf_blob_get needs output pointers");
  *data = NULL;
  *n = 0;
  XF_ENSURE(store && digest, err, XF_EINVAL, "xf_blob_get needs a store and a digest");
  char path[PATH_MAX];
  if (xf_blob_path(store, digest, path, sizeof(path)) != XF_OK)
    return xf__storage_fail(err, store->dir, XF_ERANGE, "the blob path is too long");

  xf_err rc = XF_OK;
  uint8_t *buf = NULL;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return xf__storage_fail(err, path, XF_ENOENT,
                              "no blob with this digest; it was never stored here, or the "
                              "store directory is not the one that holds it");
    return xf__blob_errno_fail(err, path, errno, "cannot open the blob");
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    rc = xf__blob_errno_fail(err, path, errno, "cannot inspect the blob");
    goto out;
  }
  if (!S_ISREG(st.st_mode) || st.st_size < 0 || (uint64_t)st.st_size > SIZE_MAX) {
    rc = xf__storage_fail(err, path, XF_EINTEGRITY,
                          "is not a regular file of a size this machine can load; it is not "
                          "a blob: move it away");
    goto out;
  }
  size_t size = (size_t)st.st_size;
  buf = xf_malloc(size);
  if (!buf) {
    rc = xf__storage_fail(err, path, XF_ENOMEM, "out of memory loading a %zu-byte blob", size);
    goto out;
  }
  size_t have = 0;
  while (have < size) {
    ssize_t got = read(fd, buf + have, size - have);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      rc = xf__blob_errno_fail(err, path, errno, "cannot read the blob");
      goto out;
    }
    if (got == 0) break; /* shrank since fstat: the digest check below fails */
    have += (size_t)got;
  }
  xf_digest found;
  xf_digest_buf(buf, have, &found);
  if (have != size || memcmp(found.bytes, digest->bytes, XF_DIGEST_BYTES) != 0) {
    char want[XF_DIGEST_HEX], got_hex[XF_DIGEST_HEX];
    xf_digest_hex(digest, want);
    xf_digest_hex(&found, got_hex);
    rc = xf__storage_fail(err, path, XF_EINTEGRITY,
                          "content does not match its digest (bit rot or tampering): it "
                          "hashes to %.16s..., not %.16s...; restore the blob from a backup "
                          "or store the checkpoint again",
                          got_hex, want);
    goto out;
  }
  *data = buf;
  *n = size;
  buf = NULL;
out:
  xf_free(buf);
  close(fd);
  return rc;
}
