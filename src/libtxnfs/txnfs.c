/* libtxnfs — the client side of txnfs transactions (include/txnfs/txnfs.h).
 *
 * Every call issues one ioctl of the control channel (include/txnfs/ioctl_abi.h) on an fd
 * of the mount and returns 0 or a negative errno. The txnfs_*_fd calls take the caller's
 * fd; the others open the given path, call their _fd twin and close it again.
 * The kernel forwards the ioctl to the daemon with the calling thread's id, uid and pid,
 * which is what binds a transaction to the thread (or process) that begins it. */
#include "txnfs/txnfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "txnfs/ioctl_abi.h"

/* ENOTTY, EINVAL and ENOSYS are what a file system answers to an ioctl it does not
 * know: the path is not on a txnfs mount (or its daemon has no control channel). */
static int map_ioctl_errno(int err) {
  if (err == ENOTTY || err == EINVAL || err == ENOSYS) return -ENOTTY;
  return -err;
}

/* Opens PATH for the control channel: an fd, or -errno. O_NONBLOCK|O_NOCTTY so that a
 * FIFO or device inside the mount cannot hang or capture the caller. */
static int open_mount(const char *path) {
  if (path == NULL || *path == '\0') return -EINVAL;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  return fd < 0 ? -errno : fd;
}

/* Closes FD (a close error on a read-only fd changes nothing) and passes RC on. */
static int closing(int fd, int rc) {
  close(fd);
  return rc;
}

/* Issues REQ with ARG on FD; 0 or -errno. */
static int control(int fd, unsigned long req, void *arg) {
  if (fd < 0) return -EBADF;
  while (ioctl(fd, req, arg) < 0) {
    if (errno != EINTR) return map_ioctl_errno(errno);
  }
  return 0;
}

/* The arguments begin and begin2 share: 0 or -EINVAL. */
static int begin_args(unsigned flags, pid_t pid, const txnfs_id_t *id) {
  if (id == NULL) return -EINVAL;
  if (flags != TXNFS_BIND_THREAD && flags != TXNFS_BIND_PROCESS) return -EINVAL;
  if (pid < 0 || (flags == TXNFS_BIND_THREAD && pid != 0)) return -EINVAL;
  return 0;
}

int txnfs_begin_fd(int fd, unsigned flags, pid_t pid, txnfs_id_t *id) {
  struct txnfs_ioc_begin arg = {.flags = flags, .pid = (int32_t)pid}; /* no padding */
  int rc = begin_args(flags, pid, id);
  if (rc == 0) rc = control(fd, TXNFS_IOC_BEGIN, &arg);
  if (rc == 0) *id = arg.id;
  return rc;
}

int txnfs_begin2_fd(int fd, unsigned flags, pid_t pid, uint32_t lock_timeout_ms, txnfs_id_t *id) {
  struct txnfs_ioc_begin2 arg = {
      .flags = flags, .pid = (int32_t)pid, .lock_timeout_ms = lock_timeout_ms}; /* no padding */
  int rc = begin_args(flags, pid, id);
  if (rc == 0) rc = control(fd, TXNFS_IOC_BEGIN2, &arg);
  if (rc == 0) *id = arg.id;
  return rc;
}

int txnfs_commit_fd(int fd, txnfs_id_t id) {
  struct txnfs_ioc_id arg = {.id = id};
  return control(fd, TXNFS_IOC_COMMIT, &arg);
}

int txnfs_commit2_fd(int fd, txnfs_id_t id, unsigned flags) {
  if (flags & ~(unsigned)TXNFS_COMMIT_LAZY) return -EINVAL;
  if (flags == TXNFS_COMMIT_DURABLE) return txnfs_commit_fd(fd, id);
  struct txnfs_ioc_commit arg;
  memset(&arg, 0, sizeof arg);
  arg.id = id;
  arg.flags = flags;
  return control(fd, TXNFS_IOC_COMMIT2, &arg);
}

/* Copies GID into DST (TXNFS_GID_MAX bytes): its length, or -EINVAL. The daemon checks
 * the characters. */
static int gid_arg(const char *gid, char *dst) {
  if (gid == NULL) return -EINVAL;
  size_t n = strnlen(gid, TXNFS_GID_MAX + 1);
  if (n == 0 || n > TXNFS_GID_MAX) return -EINVAL;
  memcpy(dst, gid, n);
  return (int)n;
}

int txnfs_prepare_fd(int fd, txnfs_id_t id, const char *gid) {
  struct txnfs_ioc_prepare arg;
  memset(&arg, 0, sizeof arg);
  arg.id = id;
  int n = gid_arg(gid, arg.gid);
  if (n < 0) return n;
  arg.len = (uint32_t)n;
  return control(fd, TXNFS_IOC_PREPARE, &arg);
}

int txnfs_resolve_fd(int fd, const char *gid, int commit) {
  struct txnfs_ioc_resolve arg;
  memset(&arg, 0, sizeof arg);
  arg.commit = commit != 0;
  int n = gid_arg(gid, arg.gid);
  if (n < 0) return n;
  arg.len = (uint32_t)n;
  return control(fd, TXNFS_IOC_RESOLVE, &arg);
}

int txnfs_sync_fd(int fd) { return control(fd, TXNFS_IOC_SYNC, NULL); }

int txnfs_abort_fd(int fd, txnfs_id_t id) {
  struct txnfs_ioc_id arg = {.id = id};
  return control(fd, TXNFS_IOC_ABORT, &arg);
}

int txnfs_info_fd(int fd, txnfs_id_t id, struct txnfs_info *info) {
  if (info == NULL) return -EINVAL;
  struct txnfs_info arg;
  memset(&arg, 0, sizeof arg);
  arg.id = id;
  int rc = control(fd, TXNFS_IOC_INFO, &arg);
  if (rc == 0) *info = arg;
  return rc;
}

int txnfs_set_lock_timeout_fd(int fd, txnfs_id_t id, uint32_t ms) {
  struct txnfs_ioc_lock_timeout arg;
  memset(&arg, 0, sizeof arg);
  arg.id = id;
  arg.ms = ms;
  return control(fd, TXNFS_IOC_LOCK_TIMEOUT, &arg);
}

/* Bytes of the record at P (of LEFT bytes), or 0 if it is cut short. */
static size_t lock_rec_size(const uint8_t *p, size_t left) {
  struct txnfs_lock_rec r;
  if (left < sizeof r) return 0;
  memcpy(&r, p, sizeof r);
  size_t n = (sizeof r + r.name_len + 7) & ~(size_t)7;
  return n <= left ? n : 0;
}

int txnfs_lock_set_fd(int fd, txnfs_id_t id, const void *records, size_t len, uint32_t timeout_ms) {
  if (records == NULL && len != 0) return -EINVAL;
  struct txnfs_ioc_lock_set *arg = calloc(1, sizeof *arg); /* 16 KiB: not on the stack */
  if (arg == NULL) return -ENOMEM;
  const uint8_t *p = records;
  size_t done = 0;
  int rc = 0;
  arg->id = id;
  arg->timeout_ms = timeout_ms;
  arg->flags = TXNFS_LOCK_SET_FIRST;
  do { /* pieces of whole records; an empty set is one empty piece */
    arg->len = 0;
    while (done < len) {
      size_t n = lock_rec_size(p + done, len - done);
      if (n == 0 || n > sizeof arg->data) {
        free(arg);
        return -EINVAL;
      }
      if (arg->len + n > sizeof arg->data) break;
      memcpy(arg->data + arg->len, p + done, n);
      arg->len += (uint32_t)n;
      done += n;
    }
    if (done == len) arg->flags |= TXNFS_LOCK_SET_LAST;
    rc = control(fd, TXNFS_IOC_LOCK_SET, arg);
    arg->flags = 0;
  } while (rc == 0 && done < len);
  free(arg);
  return rc;
}

/* 1 if RECORDS (LEN bytes) are whole records, else 0. */
static int whole_records(const uint8_t *p, size_t len) {
  size_t done = 0;
  while (done < len) {
    size_t n = lock_rec_size(p + done, len - done);
    if (n == 0) return 0;
    done += n;
  }
  return 1;
}

int txnfs_begin3_fd(int fd, unsigned flags, pid_t pid, uint32_t lock_timeout_ms,
                    const void *records, size_t len, uint32_t set_timeout_ms, txnfs_id_t *id,
                    int *set_err) {
  int rc = begin_args(flags, pid, id);
  if (rc != 0) return rc;
  if (set_err == NULL || (records == NULL && len != 0) || !whole_records(records, len))
    return -EINVAL;
  struct txnfs_ioc_begin3 *arg = NULL;
  if (len <= sizeof arg->data) arg = calloc(1, sizeof *arg); /* 4 KiB: not on the stack */
  if (arg != NULL) {
    arg->flags = flags;
    arg->pid = (int32_t)pid;
    arg->lock_timeout_ms = lock_timeout_ms;
    arg->set_timeout_ms = set_timeout_ms;
    arg->len = (uint32_t)len;
    if (len) memcpy(arg->data, records, len);
    rc = control(fd, TXNFS_IOC_BEGIN3, arg);
    if (rc == 0) {
      *id = arg->id;
      *set_err = -arg->set_err;
    }
    free(arg);
    if (rc != -ENOTTY) return rc; /* a daemon without BEGIN3: two requests, as below */
  }
  rc = txnfs_begin2_fd(fd, flags, pid, lock_timeout_ms, id);
  if (rc == 0) *set_err = txnfs_lock_set_fd(fd, *id, records, len, set_timeout_ms);
  return rc;
}

int txnfs_status_json_fd(int fd, char *buf, size_t len) {
  if (buf == NULL || len == 0) return -EINVAL;
  /* 8 KiB: on the heap rather than on the caller's (possibly small) thread stack */
  struct txnfs_ioc_status *arg = calloc(1, sizeof *arg);
  if (arg == NULL) return -ENOMEM;
  int rc = control(fd, TXNFS_IOC_STATUS, arg);
  if (rc == 0) {
    size_t n = arg->len;
    if (n > sizeof arg->json) n = sizeof arg->json; /* never trust a length from outside */
    n = strnlen(arg->json, n);                      /* and stop at an embedded NUL */
    if (n + 1 > len) {
      rc = -ERANGE;
    } else {
      memcpy(buf, arg->json, n);
      buf[n] = '\0';
      rc = arg->truncated ? 1 : 0;
    }
  }
  free(arg);
  return rc;
}

/* The path forms: open, call the _fd twin, close. */
int txnfs_begin(const char *mount_path, unsigned flags, pid_t pid, txnfs_id_t *id) {
  int fd = open_mount(mount_path);
  return fd < 0 ? fd : closing(fd, txnfs_begin_fd(fd, flags, pid, id));
}

int txnfs_begin2(const char *mount_path, unsigned flags, pid_t pid, uint32_t lock_timeout_ms,
                 txnfs_id_t *id) {
  int fd = open_mount(mount_path);
  return fd < 0 ? fd : closing(fd, txnfs_begin2_fd(fd, flags, pid, lock_timeout_ms, id));
}

int txnfs_commit(const char *mount_path, txnfs_id_t id) {
  int fd = open_mount(mount_path);
  return fd < 0 ? fd : closing(fd, txnfs_commit_fd(fd, id));
}

int txnfs_commit2(const char *mount_path, txnfs_id_t id, unsigned flags) {
  int fd = open_mount(mount_path);
  return fd < 0 ? fd : closing(fd, txnfs_commit2_fd(fd, id, flags));
}

int txnfs_sync(const char *mount_path) {
  int fd = open_mount(mount_path);
  return fd < 0 ? fd : closing(fd, txnfs_sync_fd(fd));
}

int txnfs_abort(const char *mount_path, txnfs_id_t id) {
  int fd = open_mount(mount_path);
  return fd < 0 ? fd : closing(fd, txnfs_abort_fd(fd, id));
}

int txnfs_info(const char *mount_path, txnfs_id_t id, struct txnfs_info *info) {
  int fd = open_mount(mount_path);
  return fd < 0 ? fd : closing(fd, txnfs_info_fd(fd, id, info));
}

int txnfs_set_lock_timeout(const char *mount_path, txnfs_id_t id, uint32_t ms) {
  int fd = open_mount(mount_path);
  return fd < 0 ? fd : closing(fd, txnfs_set_lock_timeout_fd(fd, id, ms));
}

int txnfs_lock_set(const char *mount_path, txnfs_id_t id, const void *records, size_t len,
                   uint32_t timeout_ms) {
  int fd = open_mount(mount_path);
  return fd < 0 ? fd : closing(fd, txnfs_lock_set_fd(fd, id, records, len, timeout_ms));
}

int txnfs_begin3(const char *mount_path, unsigned flags, pid_t pid, uint32_t lock_timeout_ms,
                 const void *records, size_t len, uint32_t set_timeout_ms, txnfs_id_t *id,
                 int *set_err) {
  int fd = open_mount(mount_path);
  return fd < 0 ? fd
                : closing(fd, txnfs_begin3_fd(fd, flags, pid, lock_timeout_ms, records, len,
                                              set_timeout_ms, id, set_err));
}

int txnfs_status_json(const char *mount_path, char *buf, size_t len) {
  int fd = open_mount(mount_path);
  return fd < 0 ? fd : closing(fd, txnfs_status_json_fd(fd, buf, len));
}

int txnfs_prepare(const char *mount_path, txnfs_id_t id, const char *gid) {
  int fd = open_mount(mount_path);
  return fd < 0 ? fd : closing(fd, txnfs_prepare_fd(fd, id, gid));
}

int txnfs_resolve(const char *mount_path, const char *gid, int commit) {
  int fd = open_mount(mount_path);
  return fd < 0 ? fd : closing(fd, txnfs_resolve_fd(fd, gid, commit));
}
