// Invalidator — tells the kernel to drop what it cached about objects and names a
// finished transaction changed, never from a thread that serves requests: the notify
// calls take kernel locks that a request handler (or a request waiting on our locks)
// may hold. A commit queues its invalidations and sends them itself (flush(), on the
// control pool); a request handler that cannot wait posts them to a thread of its own.
// The one kind that waits for nothing -- the attributes of a directory whose listing the
// kernel never cached -- a lazy commit may send at once from a ring thread (quick()).
// An object an abort removed (its transaction had created it) is also marked gone in
// the daemon's inode table, at once (see Inode::gone).
#pragma once
#define FUSE_USE_VERSION 318
#include <fuse_lowlevel.h>

#include <cstdint>
#include <deque>
#include <set>
#include <string>
#include <thread>

#include "sync/mutex.h"
#include "txnfuse/fuse/inode_table.h"
#include "txnfuse/fuse/views.h"
#include "txnfuse/txn/txn_env.h"

namespace txnfs {

class Invalidator final : public CacheInvalidator {
 public:
  Invalidator(InodeTable &inodes, Views &views) : inodes_(inodes), views_(views) {}
  void start(fuse_session *se);
  void stop() EXCLUDES(mu_);
  // (A plain directory's: also its attributes in every open view, dir_changed.)
  void inode(uint64_t nodeid) override EXCLUDES(mu_);
  // Committed directory `object` changed (its entries, so its size, link count and
  // times): every open view that may cache its attributes drops them. Views cache a
  // directory's attributes, which they read committed (IS, docs/isolation.md); a
  // transaction's end makes them stale there (a plain request's change: views_attrs_now).
  // Queued for the thread (flush() sends it); waits for nothing. Not a directory: nothing.
  void dir_changed(uint64_t object) EXCLUDES(mu_);
  // The same at once, attributes only (waits for nothing: a view never caches a
  // directory's listing), from any thread; the caller knows `object` is a directory (for
  // another object it only costs the views one GETATTR).
  void views_attrs_now(uint64_t object);
  void entry(uint64_t parent, const std::string &name) override EXCLUDES(mu_);
  // Returns once everything queued before the call has been sent to the kernel. A
  // transaction's commit or abort calls it (after releasing its locks) before it
  // replies, so that the caller's next request cannot meet a dentry the transaction
  // left stale (after an aborted rename, the old name would still lead to the moved
  // object, and a write to it would land in the wrong file). The caller sends what is
  // still queued itself rather than waking the thread and waiting for it: it would
  // wait for the same kernel calls, holding nothing either way.
  void flush() override EXCLUDES(mu_);
  bool quick(uint64_t nodeid) override;
  void inode_now(uint64_t nodeid) override;
  void post() override;
  void gone(uint64_t nodeid, uint64_t generation) override;
  bool known(uint64_t nodeid) override { return inodes_.get(nodeid) != nullptr; }
  void xattrs_restored(uint64_t nodeid) override;
  // Frees the view's slot (Views::end) and drops its root's entry in MNT/.txnfs, with
  // everything the kernel cached below it; revokes the view's inodes that still have
  // passthrough opens (revoke()).
  void view_ended(uint64_t txn_id) override EXCLUDES(mu_);
  // Where revoke() looks up: the mount point (set before requests are served).
  void set_mountpoint(std::string m) { mountpoint_ = std::move(m); }
  // The name in MNT/.txnfs whose lookup revokes kernel nodeid `nodeid`, and back (0: not one).
  static std::string revoke_name(uint64_t nodeid);
  static uint64_t revoke_nodeid(const char *name);
  // FUSE_NOTIFY_INC_EPOCH (protocol 7.44): the kernel counts its cached names stale.
  bool expire_names() override;

 private:
  struct Item {
    uint64_t node;
    std::string name;  // empty: the inode
    bool revoke = false;
  };
  // Makes the kernel fail every open of kernel nodeid `nodeid` from now on: this thread
  // looks up revoke_name(nodeid) in MNT/.txnfs, which the daemon answers with the same
  // nodeid and another generation (views_dir::lookup). The kernel then takes its
  // inode for a reused nodeid's and marks it bad (fuse_iget: "any I/O on the old inode
  // should fail"), which even a passthrough open obeys; the new inode (link count 0)
  // goes with the name, dropped right after.
  void revoke(uint64_t nodeid);
  void loop() EXCLUDES(mu_);
  // Pops the next item (mu_ held), sends it without mu_, then marks it sent.
  void send_next() REQUIRES(mu_);
  InodeTable &inodes_;
  Views &views_;
  fuse_session *se_ = nullptr;
  Mutex mu_{LockRank::kInvalidator};  // a leaf (src/sync/lock_order.h); taken under Txn::mu
  CondVar cv_;
  std::deque<Item> q_ GUARDED_BY(mu_);
  // Items are numbered 1, 2, ... as queued; `popped_` of them have left q_ (in order),
  // and `sending_` holds the numbers of those being sent now (by the thread or by
  // flushers). Everything up to n is sent when popped_ >= n and no number <= n is in
  // sending_: sent_upto().
  uint64_t queued_ GUARDED_BY(mu_) = 0, popped_ GUARDED_BY(mu_) = 0;
  std::set<uint64_t> sending_ GUARDED_BY(mu_);
  bool sent_upto(uint64_t n) REQUIRES(mu_) {
    return popped_ >= n && (sending_.empty() || *sending_.begin() > n);
  }
  // The smallest item number a flush() waits for (UINT64_MAX: none). Waiters are woken
  // only when it is sent, not after every item: a commit of a transaction that touched
  // thousands of objects would otherwise be woken (and rescheduled) once per
  // invalidation. Invariant: every waiter whose target is sent has been notified.
  uint64_t wake_at_ GUARDED_BY(mu_) = UINT64_MAX;
  CondVar sent_cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread t_;
  std::string mountpoint_;
};

}  // namespace txnfs
