#include "txnfuse/fuse/op.h"

#include <atomic>
#include <cerrno>
#include <utility>

#include "store/crash_point.h"
#include "txnfuse/fuse/park.h"
#include "sync/stall_watchdog.h"

namespace txnfs {

namespace {
std::atomic<uint64_t> next_plain_id{uint64_t(1) << 62};
thread_local std::unique_ptr<Op::State> adopted;
}  // namespace

Op::State::~State() {
  if (plain) fs->locks.release_all(*plain);
  for (uint64_t n : changing) fs->views.plain_change_done(n);  // (after the reply)
  if (entered) {
    fs->txns->leave(*txn);
    if (mutating) TXNFS_CRASH_POINT("txn.after_change");
  }
}

Op::State &Op::State::operator=(State &&o) noexcept {
  fs = o.fs;
  txn = std::move(o.txn);
  plain = std::move(o.plain);
  entered = std::exchange(o.entered, false);
  mutating = std::exchange(o.mutating, false);
  doomed = std::exchange(o.doomed, false);
  err = std::exchange(o.err, 0);
  changing = std::move(o.changing);
  o.changing.clear();
  return *this;
}

void Op::adopt_next(std::unique_ptr<State> s) { adopted = std::move(s); }
void Op::drop_adopted() { adopted.reset(); }

Op::Op(fuse_req_t req) : req_(req), fs_(fs_of(req)) { start(nullptr); }

Op::Op(fuse_req_t req, const fuse_file_info *fi) : req_(req), fs_(fs_of(req)) {
  start((fi->fh & kTxnWriterFh) && fuse_req_ctx(req)->pid == 0 ? fi : nullptr);
}

void Op::start(const fuse_file_info *writeback_fi) {
  if (adopted) {  // a parked request runs again: it goes on where it was
    s_ = std::move(*adopted);
    adopted.reset();
    return;
  }
  s_.fs = &fs_;
  TxnManager &tm = *fs_.txns;
  uint32_t slot = Views::current();
  if (slot) {
    // Through a transaction's view: the request is that transaction's, whoever sends
    // it (views_dir.cc let only its owner and root in). An ended view is stale.
    s_.txn = fs_.views.txn(slot);
    if (!s_.txn) s_.err = ESTALE;
  } else {
    if (!tm.any_open()) {
      // Fast path. begin() waits for these to drain before its transaction acts.
      fs_.unlocked_inflight.fetch_add(1, std::memory_order_seq_cst);
      if (!tm.any_open()) {
        lockless_ = true;
        return;
      }
      fs_.unlocked_inflight.fetch_sub(1, std::memory_order_seq_cst);
    }
    s_.txn = writeback_fi ? tm.writer_of(fd_of(writeback_fi)) : tm.bound(fuse_req_ctx(req_)->pid);
  }
  if (s_.txn) {
    s_.err = tm.enter(*s_.txn);
    s_.entered = s_.err == 0;
    if (s_.err && s_.txn->state.load() == TXNFS_ABORT_ONLY) {
      s_.doomed = true;  // see read_error()
      s_.txn.reset();
    } else if (s_.err == ENOENT && slot) {
      s_.err = ESTALE;  // its transaction is ending: so is the view
    }
  }
  if (!s_.txn) s_.plain = std::make_unique<LockOwner>(next_plain_id++);
}

void Op::set_fh(fuse_file_info *fi, int fd, const InodePtr &inode) const {
  txnfs::set_fh(fi, fd);
  if (s_.txn && inode && (fi->flags & O_ACCMODE) != O_RDONLY) {
    fs_.txns->opened_for_writing(fd, s_.txn, inode);
    fi->fh |= kTxnWriterFh;
  }
}

void Op::passthrough(fuse_file_info *fi, const Inode &i) const {
  bool want = s_.txn && S_ISREG(i.type) && s_.txn->made(i.nodeid);
  int id = fs_.views.passthrough_open(req_, Views::current(), i.nodeid, i.generation, fd_of(fi), want);
  if (!id) return;
  fi->backing_id = id;
  fi->direct_io = 0;  // (the kernel's page cache is the backing file's)
  fi->keep_cache = 0;
  fi->fh = (fi->fh & ~kDirectIoFh) | kPassthroughFh;
}

Op::~Op() {
  if (lockless_) fs_.unlocked_inflight.fetch_sub(1, std::memory_order_seq_cst);
}

int Op::lock(const LockKey &key, LockMode mode) {
  bool change = mode == LockMode::X || mode == LockMode::IX;
  // A plain change must not land on what a rollback of a lazily committed transaction
  // would undo: every lazy commit becomes durable first (docs/crash-model.md). Checked
  // once the lock is held: no transaction can commit lazily on this object after that.
  TxnPtr txn = s_.txn;
  auto plain_change = [&] { return change && !txn ? fs_.txns->before_plain_change() : 0; };
  if (lockless_) return plain_change();
  if (change) s_.mutating = true;
  LockOwner &owner = txn ? static_cast<LockOwner &>(*txn) : *s_.plain;
  auto timeout = fs_.txns->lock_timeout(txn.get());
  int err;
  if (park::current()) {
    err = fs_.locks.try_acquire(owner, key, mode);
    if (err == EWOULDBLOCK) err = park(owner, key, mode, timeout);
  } else {
    stall::expect_wait(timeout);  // waiting up to the lock timeout is not a stall
    err = fs_.locks.acquire(owner, key, mode, timeout);
  }
  if (err && txn) txn->doom(err);
  if (!err && change && !txn && key.name.empty()) plain_changes_dir(key.node);
  return err ? err : plain_change();
}

// A view caches a directory's attributes (read committed): a plain change of it must not
// leave the old ones there once it returned. So, before the change, the views' copies
// go (attributes only: a view never caches a listing, so that waits for nothing), and
// until the request ends every view gets them with no lifetime.
void Op::plain_changes_dir(uint64_t nodeid) {
  InodePtr i = fs_.inodes.get(nodeid);
  if (!i || !S_ISDIR(i->type)) return;
  fs_.views.plain_change_begins(nodeid);
  s_.changing.push_back(nodeid);
  fs_.inval.views_attrs_now(nodeid);
}

int Op::park(LockOwner &owner, const LockKey &key, LockMode mode,
             std::chrono::milliseconds timeout) {
  // Everything the request needs to go on lives in `p` before the wait is queued: the
  // lock may be granted, and the continuation run, before acquire_async returns.
  struct Parked {
    fuse_req_t req;
    std::function<void()> rerun;
    std::unique_ptr<State> state;
  };
  auto p = std::make_shared<Parked>();
  p->req = req_;
  p->rerun = park::current()->capture();
  p->state = std::make_unique<State>(std::move(s_));
  Fs *fs = &fs_;
  int err = fs_.locks.acquire_async(owner, key, mode, timeout, [p, fs](int e) {
    fs->resumer.post([p, e] {
      if (e == 0) {  // granted: the handler runs again, finding the lock held
        adopt_next(std::move(p->state));
        p->rerun();
        drop_adopted();
        return;
      }
      // Timed out (the transaction becomes abort-only, as for a wait that fails at
      // once), or its transaction ended, or the daemon unmounts.
      if (e == ETIMEDOUT && p->state->txn) p->state->txn->doom(e);
      fuse_reply_err(p->req, e);
      p->state.reset();
    });
  });
  if (err == LockManager::kParked) throw park::Unwind{};
  s_ = std::move(*p->state);  // answered at once: go on in this run
  return err;
}

int Op::lock_entry(uint64_t dir, const char *name, bool write) {
  if (int err = lock(LockKey::object(dir), write ? LockMode::IX : LockMode::IS)) return err;
  return lock(LockKey::entry(dir, name), write ? LockMode::X : LockMode::S);
}

void Op::set_timeouts(fuse_entry_param &e, bool changed_entry) const {
  if (e.ino) adjust(e.attr);
  e.attr_timeout = attr_timeout(e.ino);
  // Through a view the kernel's dentry is the transaction's alone (and a name it changed
  // is X-locked by it until it ends): it keeps its lifetime. Elsewhere the dentry is
  // everyone's.
  e.entry_timeout = (s_.txn && changed_entry && !Views::current()) ? 0 : fs_.opts.entry_timeout;
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
  // Through a view, the kernel's inode is the transaction's alone, and what it changed
  // it holds X on: the attributes may be cached. A directory's are read committed (IS):
  // other transactions and plain requests may change its entries meanwhile: a commit
  // drops the views' copies (Invalidator::dir_changed), and a plain change gets them
  // none while it runs (plain_changes_dir).
  if (Views::current())  // (a directory a plain request is changing: none)
    return fs_.views.plain_changing(nodeid) ? 0 : fs_.opts.attr_timeout;
  if (s_.txn && s_.txn->changed_shared(nodeid)) return 0;
  return fs_.opts.attr_timeout;
}

Op::Target Op::on(uint64_t nodeid) {
  Target t{inode_of(req_, nodeid)};
  t.err = s_.err ? s_.err : !t.inode ? ESTALE : 0;
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
