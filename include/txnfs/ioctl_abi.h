// The control channel between libtxnfs and the daemon: ioctls on the mount's root
// directory (any fd of it). FUSE forwards them with the caller's thread id, uid and
// pid, which is what binds a transaction to its thread. Fixed-size, little-endian.
// Not installed. It includes the values it carries (txnfs_types.h), never the library's
// API (txnfs.h): libtxnfs implements that API over this format, which depends on no API.
#pragma once
#include <linux/ioctl.h>
#include <stdint.h>

#include "txnfs/txnfs_types.h"

#define TXNFS_IOC_MAGIC 0xB7

struct txnfs_ioc_begin {
  uint32_t flags;  // in: enum txnfs_flags
  int32_t pid;     // in: process to bind with TXNFS_BIND_PROCESS (0: caller's)
  uint64_t id;     // out
};

// BEGIN2: begin with a per-transaction lock timeout (txnfs_begin2), one request.
struct txnfs_ioc_begin2 {
  uint32_t flags;            // in: enum txnfs_flags
  int32_t pid;               // in: as in txnfs_ioc_begin
  uint32_t lock_timeout_ms;  // in: as txnfs_set_lock_timeout's
  uint32_t reserved;         // 0
  uint64_t id;               // out
};

// BEGIN3: BEGIN2 and a whole predeclared lock set (txnfs_begin3), one request. The
// transaction is begun whatever becomes of its set; set_err tells what did: 0 granted,
// else the errno TXNFS_IOC_LOCK_SET would have answered (ETIMEDOUT: not in time).
// 4 KiB in all; larger sets take BEGIN2 and LOCK_SET (libtxnfs decides).
struct txnfs_ioc_begin3 {
  uint32_t flags;            // in: enum txnfs_flags
  int32_t pid;               // in: as in txnfs_ioc_begin
  uint32_t lock_timeout_ms;  // in: as txnfs_set_lock_timeout's
  uint32_t set_timeout_ms;   // in: longest wait for the whole set
  uint32_t len;              // in: bytes of whole records used in data
  int32_t set_err;           // out: 0 or an errno (see above)
  uint64_t id;               // out
  uint8_t data[4064];        // in: txnfs_lock_rec records
};

struct txnfs_ioc_id {
  uint64_t id;
};

struct txnfs_ioc_lock_timeout {
  uint64_t id;
  uint32_t ms;
  uint32_t reserved;  // 0
};

struct txnfs_ioc_commit {
  uint64_t id;
  uint32_t flags;     // enum txnfs_commit_flags
  uint32_t reserved;  // 0
};

// Status of the whole mount, as JSON text (truncated to fit; `truncated` set then).
struct txnfs_ioc_status {
  uint32_t len;
  uint32_t truncated;
  char json[8184];
};

// A piece of a predeclared lock set (txnfs_lock_set): whole records only. The daemon
// collects the pieces of a transaction (FIRST starts over) and, at LAST, resolves and
// acquires the set. The size keeps the struct within _IOC_SIZE's 14 bits.
#define TXNFS_LOCK_SET_FIRST 1u
#define TXNFS_LOCK_SET_LAST 2u
struct txnfs_ioc_lock_set {
  uint64_t id;
  uint32_t timeout_ms;
  uint32_t flags;     // TXNFS_LOCK_SET_*
  uint32_t len;       // bytes of data used
  uint32_t reserved;  // 0
  uint8_t data[16352];
};

// PREPARE: transaction `id` becomes prepared under the global id gid[0..len).
struct txnfs_ioc_prepare {
  uint64_t id;
  uint32_t len;       // bytes of gid used (1..TXNFS_GID_MAX)
  uint32_t reserved;  // 0
  char gid[TXNFS_GID_MAX];
};

// RESOLVE: the prepared transaction gid[0..len) commits (commit 1) or rolls back (0).
struct txnfs_ioc_resolve {
  uint32_t commit;
  uint32_t len;
  char gid[TXNFS_GID_MAX];
};

#define TXNFS_IOC_BEGIN _IOWR(TXNFS_IOC_MAGIC, 1, struct txnfs_ioc_begin)
#define TXNFS_IOC_COMMIT _IOW(TXNFS_IOC_MAGIC, 2, struct txnfs_ioc_id)
#define TXNFS_IOC_ABORT _IOW(TXNFS_IOC_MAGIC, 3, struct txnfs_ioc_id)
#define TXNFS_IOC_INFO _IOWR(TXNFS_IOC_MAGIC, 4, struct txnfs_info)
#define TXNFS_IOC_STATUS _IOR(TXNFS_IOC_MAGIC, 5, struct txnfs_ioc_status)
#define TXNFS_IOC_LOCK_TIMEOUT _IOW(TXNFS_IOC_MAGIC, 6, struct txnfs_ioc_lock_timeout)
#define TXNFS_IOC_LOCK_SET _IOW(TXNFS_IOC_MAGIC, 7, struct txnfs_ioc_lock_set)
#define TXNFS_IOC_COMMIT2 _IOW(TXNFS_IOC_MAGIC, 8, struct txnfs_ioc_commit)
#define TXNFS_IOC_SYNC _IO(TXNFS_IOC_MAGIC, 9)
#define TXNFS_IOC_BEGIN2 _IOWR(TXNFS_IOC_MAGIC, 10, struct txnfs_ioc_begin2)
#define TXNFS_IOC_BEGIN3 _IOWR(TXNFS_IOC_MAGIC, 11, struct txnfs_ioc_begin3)
#define TXNFS_IOC_PREPARE _IOW(TXNFS_IOC_MAGIC, 12, struct txnfs_ioc_prepare)
#define TXNFS_IOC_RESOLVE _IOW(TXNFS_IOC_MAGIC, 13, struct txnfs_ioc_resolve)
