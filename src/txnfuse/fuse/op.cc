#include "txnfuse/fuse/op.h"

#include <atomic>
#include <cerrno>

#include "store/crash_point.h"
#include "sync/stall_watchdog.h"

namespace txnfs {

namespace {
std::atomic<uint64_t> next_plain_id{uint64_t(1) << 62};
}

Op::Op(fuse_req_t req) : req_(req), fs_(fs_of(req)) {
  TxnManager &tm = *fs_.txns;
  if (!tm.any_open()) {
    // Fast path. begin() waits for these to drain before its transaction acts.
    fs_.unlocked_inflight.fetch_add(1, std::memory_order_seq_cst);
    if (!tm.any_open()) {
      lockless_ = true;
      return;
    }
    fs_.unlocked_inflight.fetch_sub(1, std::memory_order_seq_cst);
  }
  txn_ = tm.bound(fuse_req_ctx(req)->pid);
  if (txn_) {
    err_ = tm.enter(*txn_);
    entered_ = err_ == 0;
    if (err_ && txn_->state.load() == TXNFS_ABORT_ONLY) {
      doomed_ = true;  // see read_error()
      txn_.reset();
    }
  }
  if (!txn_) plain_ = std::make_unique<LockOwner>(next_plain_id++);
}

Op::~Op() {
  if (lockless_) fs_.unlocked_inflight.fetch_sub(1, std::memory_order_seq_cst);
  if (plain_) fs_.locks.release_all(*plain_);
  if (entered_) {
    fs_.txns->leave(*txn_);
    if (mutating_) TXNFS_CRASH_POINT("txn.after_change");
  }
}

int Op::lock(const LockKey &key, LockMode mode) {
  bool change = mode == LockMode::X || mode == LockMode::IX;
  // A plain change must not land on what a rollback of a lazily committed transaction
  // would undo: every lazy commit becomes durable first (docs/crash-model.md). Checked
  // once the lock is held: no transaction can commit lazily on this object after that.
  auto plain_change = [&] { return change && !txn_ ? fs_.txns->before_plain_change() : 0; };
  if (lockless_) return plain_change();
  if (change) mutating_ = true;
  LockOwner &owner = txn_ ? static_cast<LockOwner &>(*txn_) : *plain_;
  auto timeout = fs_.txns->lock_timeout(txn_.get());
  stall::expect_wait(timeout);  // waiting up to the lock timeout is not a stall
  int err = fs_.locks.acquire(owner, key, mode, timeout);
  if (err && txn_) txn_->doom(err);
  return err ? err : plain_change();
}

int Op::lock_entry(uint64_t dir, const char *name, bool write) {
  if (int err = lock(LockKey::object(dir), write ? LockMode::IX : LockMode::IS)) return err;
  return lock(LockKey::entry(dir, name), write ? LockMode::X : LockMode::S);
}

void Op::set_timeouts(fuse_entry_param &e, bool changed_entry) const {
  if (e.ino) adjust(e.attr);
  e.attr_timeout = attr_timeout(e.ino);
  e.entry_timeout = (txn_ && changed_entry) ? 0 : fs_.opts.entry_timeout;
}

double Op::attr_timeout(uint64_t nodeid) const {
  // An object the transaction made is reachable by no one else until it ends: its name
  // is X-locked by the transaction, plain readers are shown the committed state without
  // it, and the kernel keeps the name's dentry for no time (set_timeouts).
  // Its attributes may therefore be cached like those of a plain object -- which saves
  // the GETATTR of every permission check on it (the open right after a create) -- and
  // are dropped from the kernel's cache when the transaction ends, with everything else
  // it touched (TxnManager::finish). An object that existed before is shared: what the
  // transaction changed of it must not outlive the reply.
  if (txn_ && txn_->changed_shared(nodeid)) return 0;
  return fs_.opts.attr_timeout;
}

Op::Target Op::on(uint64_t nodeid) {
  Target t{inode_of(req_, nodeid)};
  t.err = err_ ? err_ : !t.inode ? ESTALE : 0;
  return t;
}

Op::Target Op::on_read(uint64_t nodeid) {
  Target t{inode_of(req_, nodeid)};
  t.err = read_error() ? read_error() : !t.inode ? ESTALE : 0;
  return t;
}

Op::Target Op::on(uint64_t nodeid, LockMode mode) {
  Target t = on(nodeid);
  if (!t.err) t.err = lock_object(nodeid, mode);
  if (!t.err && t.inode->gone) t.err = ESTALE;  // its creator aborted while we waited
  return t;
}

}  // namespace txnfs
