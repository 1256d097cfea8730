/* txnfs_types.h — the values and records of txnfs transactions that both the API
 * (txnfs.h) and the control channel between libtxnfs and the daemon (ioctl_abi.h) carry
 * unchanged. Both include this header; neither includes the other, so the wire format
 * does not depend on the library's API. System headers only. Installed with txnfs.h. */
#ifndef TXNFS_TYPES_H
#define TXNFS_TYPES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t txnfs_id_t;

enum txnfs_flags {
  TXNFS_BIND_THREAD = 0,  /* the calling thread (default) */
  TXNFS_BIND_PROCESS = 1, /* a process (pid, or the caller's) and its descendants */
};

/* Durability of a commit (txnfs_commit2). */
enum txnfs_commit_flags {
  TXNFS_COMMIT_DURABLE = 0, /* durable before the call returns (txnfs_commit) */
  TXNFS_COMMIT_LAZY = 1,    /* final and visible at once, durable at the next group
                               commit (within the mount's --lazy-flush-ms), or earlier
                               when anything asks for durability. After a crash a lazy
                               transaction is entirely present or entirely absent, and
                               the lost ones are the latest (docs/crash-model.md). An
                               fsync inside the transaction makes its commit durable. */
};

enum txnfs_state {
  TXNFS_ACTIVE = 1,
  TXNFS_ABORT_ONLY = 2, /* an operation failed in a way that allows only abort */
  TXNFS_COMMITTING = 3,
  TXNFS_COMMITTED = 4,
  TXNFS_ABORTED = 5,
  TXNFS_PREPARED = 6, /* the first phase of a two-phase commit is done (txnfs_prepare):
                         durable, locks held, bound to nothing; only txnfs_resolve ends it */
};

/* A global transaction id (txnfs_prepare): 1..TXNFS_GID_MAX bytes of [A-Za-z0-9._-]. */
#define TXNFS_GID_MAX 64

struct txnfs_info {
  txnfs_id_t id;
  uint32_t state; /* enum txnfs_state */
  uint32_t owner_uid;
  int32_t pid;           /* bound thread or process */
  uint32_t flags;        /* enum txnfs_flags */
  uint64_t ops;          /* operations performed in the transaction */
  uint64_t backup_bytes; /* bytes of data backed up for undo */
  uint64_t age_ms;
  int32_t error; /* errno that made it abort-only, else 0 */
  uint32_t reserved;
};

/* A predeclared lock set (txnfs_lock_set in txnfs.h) is a sequence of these records, each
 * followed by its name (name_len bytes) and zero padding to a multiple of 8 bytes. */
enum txnfs_lock_rec_kind {
  TXNFS_REC_NODE = 1,
  TXNFS_REC_CHILD = 2,
  TXNFS_REC_LOCK_OBJECT = 3,
  TXNFS_REC_LOCK_ENTRY = 4,
};
/* TXNFS_LOCK_ATTRS (LOCK_OBJECT only): what reading the object's attributes takes -- IS on
 * a directory, S on anything else (docs/isolation.md); the daemon decides when it resolves
 * the reference, so a caller need not know the object's type. */
enum txnfs_lock_mode {
  TXNFS_LOCK_IS = 0,
  TXNFS_LOCK_IX = 1,
  TXNFS_LOCK_S = 2,
  TXNFS_LOCK_X = 3,
  TXNFS_LOCK_ATTRS = 4
};
struct txnfs_lock_rec {
  uint8_t kind;      /* enum txnfs_lock_rec_kind */
  uint8_t mode;      /* enum txnfs_lock_mode (LOCK_*) */
  uint16_t name_len; /* CHILD, LOCK_ENTRY: 1..255 */
  uint32_t ref;      /* CHILD, LOCK_*: an earlier reference */
  uint64_t node;     /* NODE */
};
#define TXNFS_LOCK_REC_NAME_MAX 255

#ifdef __cplusplus
}
#endif
#endif
