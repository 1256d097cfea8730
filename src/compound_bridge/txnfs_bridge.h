/* txnfs_bridge.h — the C ABI between NFS-Ganesha (ganesha-4.3.patch) and the txnfs
 * COMPOUND bridge (libtxnfs_bridge.so).
 *
 * Ganesha dlopen()s the library named by $TXNFS_BRIDGE_LIB once and calls
 * txnfs_bridge_open(TXNFS_BRIDGE_ABI, ...). Then, for every COMPOUND, on the worker
 * thread that decodes it and runs all of its operations:
 *
 *   begin(minorversion, tag, ops) after decoding, before the first operation; OPS
 *                                 describes every operation of the COMPOUND (what the
 *                                 bridge needs to predeclare its locks)
 *     RUN      run the COMPOUND as usual; end is not called
 *     RUN_TXN  a transaction is open and bound to this thread, and `view` is the
 *              slot of its view; call end
 *     REFUSE   run no operation; answer the COMPOUND with `status` and no results
 *   ... the operations ...
 *   end(status, replay)           just before the reply is completed (and cached)
 *     KEEP     send the reply as it is
 *     REWRITE  set the status of the last result (the failing operation) and of the
 *              COMPOUND to `status`
 *     COLLAPSE replace the results by one result of the first operation after SEQUENCE
 *              (NFSv4.1; NFSv4.0: of the first operation) failing with `status`, and
 *              set the COMPOUND's status to it. Answered only for a COMPOUND whose
 *              status is NFS4_OK, so that every operation has a result.
 *
 * Invariants the caller keeps: begin and end of one COMPOUND run on the same thread with
 * no other COMPOUND between them (no operation of a transactional COMPOUND may complete
 * asynchronously on another thread); for a replay answered from the NFSv4.1 slot cache
 * (replay != 0) the reply is the cached one and is never changed, whatever end answers.
 *
 * Statuses are nfsstat4 values. The ABI version changes whenever this file changes
 * incompatibly; txnfs_bridge_open refuses any other version. */
#ifndef TXNFS_BRIDGE_H
#define TXNFS_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TXNFS_BRIDGE_ABI 3

/* The statuses the bridge answers with (values from RFC 7530 / RFC 8881). */
#define TXNFS_BRIDGE_NFS4_OK 0
#define TXNFS_BRIDGE_NFS4ERR_SERVERFAULT 10006
#define TXNFS_BRIDGE_NFS4ERR_DELAY 10008

enum txnfs_bridge_action {
  TXNFS_BRIDGE_RUN = 0,      /* begin */
  TXNFS_BRIDGE_RUN_TXN = 1,  /* begin */
  TXNFS_BRIDGE_REFUSE = 2,   /* begin */
  TXNFS_BRIDGE_KEEP = 3,     /* end */
  TXNFS_BRIDGE_REWRITE = 4,  /* end */
  TXNFS_BRIDGE_COLLAPSE = 5, /* end */
};

struct txnfs_bridge_verdict {
  uint32_t action; /* enum txnfs_bridge_action */
  uint32_t status; /* nfsstat4 for REFUSE, REWRITE and COLLAPSE; else 0 */
  uint32_t view;   /* RUN_TXN: the slot of the transaction's view (txnfs's FUSE nodeids
                      carry it in their top 16 bits): the caller opens every object of
                      the COMPOUND through it; else 0 */
  uint32_t reserved;
};

/* One operation of a COMPOUND, as decoded: what names the objects it acts on. The
 * pointers point into the decoded arguments and live until begin returns. */
#define TXNFS_BRIDGE_OP_CREATE 1u    /* OPEN: OPEN4_CREATE */
#define TXNFS_BRIDGE_OP_CLAIM_FH 2u  /* OPEN: the current filehandle (CLAIM_FH) */
#define TXNFS_BRIDGE_OP_CLAIM_NULL 4u  /* OPEN: `name` in the current directory */
struct txnfs_bridge_op {
  uint32_t opcode;    /* nfs_opnum4 */
  uint32_t flags;     /* TXNFS_BRIDGE_OP_* */
  const void *fh;     /* PUTFH: the filehandle */
  const char *name;   /* LOOKUP, CREATE, OPEN (CLAIM_NULL), REMOVE, LINK: the name;
                         RENAME: the old name */
  const char *name2;  /* RENAME: the new name */
  uint32_t fh_len, name_len, name2_len, reserved;
};

struct txnfs_bridge_ops {
  struct txnfs_bridge_verdict (*begin)(uint32_t minorversion, const char *tag,
                                       uint32_t tag_len, const struct txnfs_bridge_op *ops,
                                       uint32_t ops_len);
  struct txnfs_bridge_verdict (*end)(uint32_t status, int replay);
};

/* Reads the configuration ($TXNFS_BRIDGE_CONF) and returns the operations, or NULL with
 * a NUL-terminated reason in ERR (ERR_LEN bytes) if ABI is not TXNFS_BRIDGE_ABI or the
 * configuration is unusable. Called once per process. */
const struct txnfs_bridge_ops *txnfs_bridge_open(uint32_t abi, char *err, size_t err_len);

#define TXNFS_BRIDGE_OPEN_SYMBOL "txnfs_bridge_open"
typedef const struct txnfs_bridge_ops *(*txnfs_bridge_open_fn)(uint32_t abi, char *err,
                                                               size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
