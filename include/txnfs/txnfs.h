/* txnfs.h — transactions on a txnfs mount, for local programs.
 *
 * A transaction groups file-system calls on one txnfs mount so that all of them take
 * effect or none do. It is bound to the thread that begins it, or with
 * TXNFS_BIND_PROCESS to a whole process and every process it starts afterwards:
 * every request such a thread makes on the mount belongs to the transaction.
 *
 * All functions return 0 on success or a negative errno:
 *   -ENOTTY   MOUNT is not a txnfs mount        -EBUSY   caller already in a transaction
 *   -ENOENT   no such (open) transaction         -EPERM   not the owner (uid) nor root
 *   -EDEADLK  the transaction lost a deadlock or lock wait and can only abort
 *   -EIO      commit failed; the transaction was rolled back
 * A transaction whose owning process exits before it commits is aborted.
 */
#ifndef TXNFS_H
#define TXNFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* txnfs_id_t, the flags, struct txnfs_info, struct txnfs_lock_rec: the values that also
 * cross the control channel unchanged */
#include "txnfs/txnfs_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Begins a transaction on the mount that contains MOUNT_PATH. With
 * TXNFS_BIND_PROCESS, PID names the process to bind (0: the caller's process). */
int txnfs_begin(const char *mount_path, unsigned flags, pid_t pid, txnfs_id_t *id);
int txnfs_commit(const char *mount_path, txnfs_id_t id);
/* Commits with FLAGS (enum txnfs_commit_flags); txnfs_commit is FLAGS 0. */
int txnfs_commit2(const char *mount_path, txnfs_id_t id, unsigned flags);
/* Makes every commit on the mount made before the call durable (lazy ones included). */
int txnfs_sync(const char *mount_path);
int txnfs_abort(const char *mount_path, txnfs_id_t id);
int txnfs_info(const char *mount_path, txnfs_id_t id, struct txnfs_info *info);

/* How long each lock wait of the transaction may last, in milliseconds, before the
 * request fails with ETIMEDOUT and the transaction becomes abort-only (0: fail at once
 * on any conflict). The default is the mount's --lock-timeout-ms. A short timeout suits
 * callers that retry whole transactions, such as the NFS bridge: waits that pass
 * through locks txnfs cannot see (the kernel's inode locks, an NFS server's own) end
 * quickly instead of after the mount's default. */
int txnfs_set_lock_timeout(const char *mount_path, txnfs_id_t id, uint32_t ms);

/* txnfs_begin and txnfs_set_lock_timeout(LOCK_TIMEOUT_MS) in one request to the daemon
 * (what a caller that starts many short transactions, like the NFS bridge, saves). */
int txnfs_begin2(const char *mount_path, unsigned flags, pid_t pid, uint32_t lock_timeout_ms,
                 txnfs_id_t *id);

/* Predeclared lock sets (docs/isolation.md): a transaction that knows what it will touch
 * before its first request acquires all of it at once. RECORDS is a sequence of
 * struct txnfs_lock_rec, each followed by its name (name_len bytes) and zero padding to
 * a multiple of 8 bytes. NODE and CHILD records define references, numbered from 0 in
 * order: NODE an object by nodeid (`node`; 1 is the mount's root), CHILD the object the
 * name `name` of reference `ref` (a directory) designates. LOCK_OBJECT asks `mode` on
 * reference `ref`, LOCK_ENTRY `mode` on the entry `name` of directory `ref`. The daemon
 * resolves references without waiting; a reference it cannot resolve (an unknown
 * nodeid, a name that does not exist) and the locks on it are left out: its requests
 * lock one by one as usual. Then every lock is granted at once, or none: the call waits
 * up to TIMEOUT_MS, holding none of them, until the whole set can be granted
 * (-ETIMEDOUT then). The transaction must not hold locks yet (-EBUSY). The record, its
 * kinds and modes: txnfs_types.h. */
int txnfs_lock_set(const char *mount_path, txnfs_id_t id, const void *records, size_t len,
                   uint32_t timeout_ms);

/* txnfs_begin2 and txnfs_lock_set(RECORDS, LEN, SET_TIMEOUT_MS) in one request to the
 * daemon when the set is small (under 4 KiB; else in two or more). Returns 0 once the
 * transaction has begun, with *SET_ERR what txnfs_lock_set would have returned (0: all
 * granted; -ETIMEDOUT: not granted in time, the caller should abort or retry it; other
 * errors leave its requests to lock one by one). Returns a negative errno, and begins
 * nothing, as txnfs_begin2 does. */
int txnfs_begin3(const char *mount_path, unsigned flags, pid_t pid, uint32_t lock_timeout_ms,
                 const void *records, size_t len, uint32_t set_timeout_ms, txnfs_id_t *id,
                 int *set_err);

/* Two-phase commit, for a coordinator that commits one global transaction across several
 * txnfs mounts (docs/cluster.md). txnfs_prepare makes transaction ID prepared under the
 * global id GID (1..TXNFS_GID_MAX bytes of [A-Za-z0-9._-], unique among the mount's
 * prepared transactions: -EEXIST): every effect and its undo log are durable, and so is
 * a record of GID; it keeps its locks, is bound to no thread or process any more (its
 * owner may exit), and its view ends. Nothing but txnfs_resolve ends it, not even a
 * restart: recovery keeps it and asks for its decision. -EINVAL: a bad GID; -EDEADLK
 * (or the error that made it abort-only): it cannot prepare, only abort; -EIO: it could
 * not be made durable and was rolled back.
 * txnfs_resolve commits (COMMIT != 0) or rolls back the prepared transaction GID, as the
 * global decision says (root only: -EPERM). -ENOENT: no prepared transaction has that
 * id (it was resolved already, or never prepared). -EIO: a commit that could not be
 * made durable; it stays prepared, and may be resolved again. */
int txnfs_prepare(const char *mount_path, txnfs_id_t id, const char *gid);
int txnfs_resolve(const char *mount_path, const char *gid, int commit);

/* A buffer of this size always holds the status text and its NUL. */
#define TXNFS_STATUS_JSON_MAX 8192

/* Copies the status of the whole mount (open transactions and counters) as JSON text,
 * NUL-terminated, into BUF of LEN bytes. Returns 0, or 1 if the daemon had to shorten
 * the text to fit the control channel, or a negative errno (-ERANGE: LEN too small).
 * Shape: {"transactions":[{"id":1,"state":"active","uid":0,"pid":123,"flags":1,
 *   "age_ms":5,"ops":3,"backup_bytes":4096,"locks_held":2,"locks_waiting":0,"error":0}],
 *  "counters":{"commits":0,"aborts":0,"deadlocks":0,"timeouts":0,"recoveries":0,
 *   "lazy_commits":0,"lazy_flushes":0,"lazy_commits_here":0},
 *  "lazy":{"not_durable":0,"oldest_ms":0,"flush_ms":5}} */
int txnfs_status_json(const char *mount_path, char *buf, size_t len);

/* A transaction's view: the file system as transaction ID sees it, through kernel
 * inodes of its own (docs/isolation.md, "Views"). Only what reaches the mount through
 * the view belongs to the transaction whoever does it, and nobody outside it sees its
 * uncommitted state, not even through the kernel's caches. Only ID's owner and root
 * may enter it (-EACCES); once ID ends, everything reached through it answers ESTALE.
 *
 * txnfs_view_path() writes "MOUNT/.txnfs/ID" into BUF (LEN bytes; -ERANGE if too
 * small), MOUNT being the mount point of the mount that holds MOUNT_PATH: paths below
 * it are the view's.
 *
 * txnfs_enter_view() makes MOUNT itself show the view, for the calling thread and the
 * processes it starts from then on: a private mount namespace with the view bind-mounted
 * over MOUNT. Root gets a mount namespace of its own; another user a user namespace too,
 * which maps only its own uid and gid (files of other owners show as nobody, set-ID
 * programs run without their privileges), and which only a single-threaded process can
 * enter (-EINVAL otherwise). `txnfs run` runs its command this way. There is no way
 * back: enter in a child process (after fork) or a thread that ends with the
 * transaction. */
int txnfs_view_path(const char *mount_path, txnfs_id_t id, char *buf, size_t len);
int txnfs_enter_view(const char *mount_path, txnfs_id_t id);

/* The same calls on an fd the caller keeps open on the mount (any file or directory of
 * it, e.g. open(MOUNT, O_RDONLY | O_DIRECTORY)), for callers that make many: each call is
 * then one request to the daemon instead of an open, the request and a close. The fd
 * identifies only the mount: a transaction is still bound to the calling thread or
 * process. -EBADF for a negative fd. */
int txnfs_begin_fd(int fd, unsigned flags, pid_t pid, txnfs_id_t *id);
int txnfs_begin2_fd(int fd, unsigned flags, pid_t pid, uint32_t lock_timeout_ms, txnfs_id_t *id);
int txnfs_commit_fd(int fd, txnfs_id_t id);
int txnfs_commit2_fd(int fd, txnfs_id_t id, unsigned flags);
int txnfs_sync_fd(int fd);
int txnfs_abort_fd(int fd, txnfs_id_t id);
int txnfs_info_fd(int fd, txnfs_id_t id, struct txnfs_info *info);
int txnfs_set_lock_timeout_fd(int fd, txnfs_id_t id, uint32_t ms);
int txnfs_lock_set_fd(int fd, txnfs_id_t id, const void *records, size_t len, uint32_t timeout_ms);
int txnfs_begin3_fd(int fd, unsigned flags, pid_t pid, uint32_t lock_timeout_ms,
                    const void *records, size_t len, uint32_t set_timeout_ms, txnfs_id_t *id,
                    int *set_err);
int txnfs_status_json_fd(int fd, char *buf, size_t len);
int txnfs_prepare_fd(int fd, txnfs_id_t id, const char *gid);
int txnfs_resolve_fd(int fd, const char *gid, int commit);

#ifdef __cplusplus
}
#endif
#endif
