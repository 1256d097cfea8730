// Undo recording: what a transactional request writes to its transaction's undo log
// before it changes the tree. Each function is called with the request's locks held
// and before the change it protects; it returns 0 or an errno (the request then
// fails, and the transaction becomes abort-only, since its log may be incomplete).
//
// No crash may leave a namespace change without its record: a new object's record
// (Made) is written before the object is made; a removed object is renamed into the
// log directory (see undo_log.h and docs/crash-model.md).
#pragma once
#include <sys/types.h>

#include <functional>

#include "store/unique_fd.h"
#include "txnfuse/txn/inode.h"
#include "txnfuse/txn/txn.h"
#include "txnfuse/txn/txn_env.h"

namespace txnfs {

// Before changing the attributes (mode, owner, size, times) of `obj`.
int save_attrs(TxnEnv &env, Txn &t, const Inode &obj);
// Before overwriting [off, off+len) of `obj`: its attributes, and the parts of the
// range that held data when the transaction began and are not saved yet.
int save_range(TxnEnv &env, Txn &t, const Inode &obj, uint64_t off, uint64_t len);
// Before truncating `obj` to `size`.
int save_truncate(TxnEnv &env, Txn &t, const Inode &obj, uint64_t size);
// Before setting or removing an xattr of `obj`.
int save_xattrs(TxnEnv &env, Txn &t, const Inode &obj);

// Makes a new object `name` in `parent`: `make(dirfd, name)` creates it in place, as a
// plain creation does (owner included; on failure it leaves nothing), and may keep an
// open fd of it itself. Replies nothing; returns 0 or an errno (EEXIST when `name`
// exists). `made`, if given, receives an O_PATH fd of the new object (saves the caller
// opening it again).
int txn_make(TxnEnv &env, Txn &t, const Inode &parent, const char *name, mode_t mode,
             const std::function<int(int dirfd, const char *name)> &make, UniqueFd *made = nullptr);
// unlink (is_dir false) or rmdir (true) of `name` in `parent`.
int txn_remove(TxnEnv &env, Txn &t, const Inode &parent, const char *name, bool is_dir);
// *exposed is set when the rename moves a name the kernel may cache with a lifetime to
// where others can look it up: the caller must have the kernel expire it before replying
// (the kernel moves the dentry, lifetime and all, once the request succeeds).
int txn_rename(TxnEnv &env, Txn &t, const Inode &parent, const char *name, const Inode &newparent,
               const char *newname, unsigned flags, bool *exposed);
int txn_link(TxnEnv &env, Txn &t, const Inode &obj, const Inode &newparent, const char *newname);

// Keeps the handle row's name of `nodeid` so that an abort can put it back. Call it
// before the MetaDb transaction that renames the row, never inside it: Txn::mu ranks
// above MetaDb's mutex (src/sync/lock_order.h). Abort replays these newest first, so
// the first name kept for a row (read before any rename of the transaction changed
// it) is the one that stays.
void save_row_name(TxnEnv &env, Txn &t, uint64_t nodeid) EXCLUDES(t.mu);

}  // namespace txnfs
