/* SPDX-License-Identifier: Apache-2.0 */
/* Scratch directories for tests. */
#include "support.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int xf_test_mkdtemp(char *buf, size_t n, const char *name) {
  const char *base = getenv("TMPDIR");
  int w = snprintf(buf, n, "%s/xf-%s-XXXXXX", base && *base ? base : "/tmp", name);
  if (w < 0 || (size_t)w >= n) return -1;
  return mkdtemp(buf) ? 0 : -1;
}

void xf_test_remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    if (d) {
      struct dirent *e;
      while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char child[4096];
        snprintf(child, sizeof(child), "%s/%s", path, e->d_name);
        xf_test_remove_tree(child);
      }
      closedir(d);
    }
    rmdir(path);
  } else {
    unlink(path);
  }
}
