/* libtxnfs — a transaction's view (include/txnfs/txnfs.h, txnfs_view_path and
 * txnfs_enter_view; docs/isolation.md, "Views").
 *
 * The daemon shows transaction ID's view of a mount at MOUNT/.txnfs/ID, to its owner and
 * root alone. A program may use that path; txnfs_enter_view() instead bind-mounts the
 * view over MOUNT in a private mount namespace of the calling thread, so that every path
 * on MOUNT (absolute or relative to a working directory there) reaches the view. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "txnfs/txnfs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

/* The mount point of the mount that holds PATH, in BUF (LEN bytes): the longest prefix
 * of PATH's real path on the same device. 0 or -errno. */
static int mount_root(const char *path, char *buf, size_t len) {
  char real[PATH_MAX], up[PATH_MAX];
  if (path == NULL || *path == '\0') return -EINVAL;
  if (realpath(path, real) == NULL) return -errno;
  struct stat st, ust;
  if (stat(real, &st) != 0) return -errno;
  while (strcmp(real, "/") != 0) {
    char *slash = strrchr(real, '/');
    size_t n = slash == real ? 1 : (size_t)(slash - real);
    memcpy(up, real, n);
    up[n] = '\0';
    if (stat(up, &ust) != 0 || ust.st_dev != st.st_dev) break;
    strcpy(real, up);
  }
  if (strlen(real) + 1 > len) return -ERANGE;
  strcpy(buf, real);
  return 0;
}

int txnfs_view_path(const char *mount_path, txnfs_id_t id, char *buf, size_t len) {
  char root[PATH_MAX];
  int rc = mount_root(mount_path, root, sizeof root);
  if (rc < 0) return rc;
  int n = snprintf(buf, len, "%s/.txnfs/%llu", strcmp(root, "/") == 0 ? "" : root,
                   (unsigned long long)id);
  if (n < 0) return -EINVAL;
  return (size_t)n >= len ? -ERANGE : 0;
}

/* Writes TEXT to /proc/self/FILE (the maps of a new user namespace). */
static int write_proc(const char *file, const char *text) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/%s", file);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t n = write(fd, text, strlen(text));
  int rc = n == (ssize_t)strlen(text) ? 0 : n < 0 ? -errno : -EIO;
  close(fd);
  return rc;
}

int txnfs_enter_view(const char *mount_path, txnfs_id_t id) {
  char root[PATH_MAX], view[PATH_MAX + 32], cwd[PATH_MAX];
  int rc = mount_root(mount_path, root, sizeof root);
  if (rc < 0) return rc;
  rc = txnfs_view_path(root, id, view, sizeof view);
  if (rc < 0) return rc;
  struct stat st;
  if (stat(view, &st) != 0) return -errno; /* not its owner (EACCES), not open (ENOENT) */
  int have_cwd = getcwd(cwd, sizeof cwd) != NULL;
  uid_t uid = geteuid();
  gid_t gid = getegid();
  if (uid == 0) {
    if (unshare(CLONE_NEWNS) != 0) return -errno;
  } else {
    /* An unprivileged caller: a user namespace that maps its own ids to themselves
     * (single-threaded callers only: the kernel says EINVAL otherwise). */
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return -errno;
    char map[64];
    if ((rc = write_proc("setgroups", "deny")) < 0) return rc;
    snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
    if ((rc = write_proc("uid_map", map)) < 0) return rc;
    snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
    if ((rc = write_proc("gid_map", map)) < 0) return rc;
  }
  /* Nothing mounted here from now on reaches the caller's old namespace. */
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return -errno;
  if (mount(view, root, NULL, MS_BIND, NULL) != 0) return -errno;
  /* A working directory on the mount still names the plain directory: walk to it again,
   * now through the view. */
  if (have_cwd && strncmp(cwd, root, strlen(root)) == 0 && chdir(cwd) != 0) return -errno;
  return 0;
}
