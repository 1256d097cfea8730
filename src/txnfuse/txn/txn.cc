// Transactions: begin, request accounting, commit and abort (finish). The other jobs of
// TxnManager have files of their own: the background threads (background.cc), status
// (status.cc), txns rows (txn_rows.cc), shared mappings (txn_writers.cc); and classes of
// their own, which it owns: the binding (TxnBinding, txn_binding.h) and group commit
// with the lazy queue (GroupCommit, group_commit.h).
#include "txnfuse/txn/txn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <spdlog/spdlog.h>

#include "recovery/recover.h"
#include "recovery/undo/undo_exec.h"
#include "recovery/undo/undo_record.h"
#include "store/crash_point.h"
#include "sync/stall_watchdog.h"
#include "txnfuse/txn/proc.h"
#include "txnfuse/txn/txn_env.h"

#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL
#endif

namespace txnfs {

Txn::~Txn() {
  if (pidfd >= 0) ::close(pidfd);
}

TxnManager::TxnManager(TxnEnv &env)
    : env_(env), gc_(env, limits, [this](Txn &t) { after_durable(t); }) {}

TxnManager::~TxnManager() { stop(); }

void TxnManager::start() {
  binding_.open_watch();
  reaper_ = std::thread([this] { reaper_loop(); });
  cleaner_ = std::thread([this] { cleaner_loop(); });
  gc_.start();  // the flusher
  mirror_ = std::make_unique<StepMirror>(*env_.db, [this] {
    mirror_rows();
    try {
      env_.db->flush_handles(true);  // the batch of new objects' handle rows, made durable
    } catch (const std::exception &e) {
      spdlog::warn("handle rows not written yet (they stay journaled): {}", e.what());
    }
  });
  mirror_->start();
}

void TxnManager::stop() {
  if (stopping_.exchange(true)) return;
  binding_.wake();
  gc_.stop();                  // the flusher makes every lazy commit durable first
  { MutexLock g(clean_mu_); }  // the cleaner is waiting, or will see stopping_
  clean_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  binding_.close_watch();
  if (cleaner_.joinable()) cleaner_.join();
  if (mirror_) mirror_->stop();
}

int TxnManager::begin(uid_t uid, pid_t caller_tid, unsigned flags, pid_t pid, uint64_t *id) {
  if (flags & ~unsigned(TXNFS_BIND_PROCESS)) return EINVAL;
  bool process = flags & TXNFS_BIND_PROCESS;
  if (bound(caller_tid) && !(process && pid != 0)) return EBUSY;
  pid_t owner = caller_tid;
  if (process) {
    owner = pid ? pid : tgid_ppid(caller_tid).first;
    if (owner <= 0 || ::kill(owner, 0) != 0) return ESRCH;
    if (uid != 0 && owner_of_process(owner) != uid) return EPERM;
  }
  int pidfd = int(::syscall(SYS_pidfd_open, owner, process ? 0 : PIDFD_THREAD));
  if (pidfd < 0) return errno == EINVAL ? ESRCH : errno;
  uint64_t txid;
  try {
    // No row yet: recovery needs none (it rolls back every log without a commit record),
    // and the views get one from mirror_rows() if the transaction lives that long.
    txid = env_.db->new_txn_id();
    TXNFS_CRASH_POINT("txn.after_begin");
  } catch (const std::exception &e) {
    ::close(pidfd);
    spdlog::error("begin: {}", e.what());
    return EIO;
  }
  auto t = std::make_shared<Txn>(txid, uid, owner, flags);
  t->pidfd = pidfd;
  t->mirror = mirror_.get();
  // The reaper watches the owner from now on (unbind stops it). EBUSY: (~Txn closes
  // the pidfd).
  if (int err = binding_.bind(t)) return err;
  *id = txid;
  return 0;
}

bool TxnManager::unlocked_quiet() const {
  return env_.unlocked_inflight.load(std::memory_order_acquire) == 0;
}

void TxnManager::wait_unlocked() {
  while (!unlocked_quiet()) ::usleep(50);
}

int TxnManager::enter(Txn &t) {
  MutexLock g(t.mu);
  int s = t.state.load();
  if (s == TXNFS_ABORT_ONLY) return t.error ? int(t.error) : EDEADLK;
  if (s != TXNFS_ACTIVE) return ENOENT;  // being committed or aborted
  if (t.ops >= limits.max_ops) {
    spdlog::warn("transaction {} exceeded {} operations; it can only abort", t.id(),
                 limits.max_ops);
    t.doom(EDQUOT);
    return EDQUOT;
  }
  if (t.log && t.log->backup_bytes() > limits.max_backup_bytes) {
    spdlog::warn("transaction {} exceeded {} backup bytes; it can only abort", t.id(),
                 limits.max_backup_bytes);
    t.doom(EDQUOT);
    return EDQUOT;
  }
  t.ops++;
  t.inflight++;
  return 0;
}

void TxnManager::leave(Txn &t) {
  MutexLock g(t.mu);
  if (--t.inflight == 0) t.idle.notify_all();
}

TxnPtr TxnManager::start_commit(uid_t uid, uint64_t id, int *err) {
  TxnPtr t = find(id);
  *err = !t ? ENOENT : uid != 0 && uid != t->uid ? EPERM : 0;
  if (*err) return nullptr;
  // Pages it dirtied through shared mappings join it now, while it still takes requests.
  if (t->state.load() == TXNFS_ACTIVE) write_back_mapped(*t);
  int expected = TXNFS_ACTIVE;
  if (t->state.compare_exchange_strong(expected, TXNFS_COMMITTING)) return t;
  // Already finishing (or prepared); an abort-only one stays open, and only abort ends it.
  *err = expected != TXNFS_ABORT_ONLY ? ENOENT : t->error ? int(t->error) : EDEADLK;
  return nullptr;
}

int TxnManager::commit(uid_t uid, uint64_t id, unsigned flags) {
  if (flags & ~unsigned(TXNFS_COMMIT_LAZY)) return EINVAL;
  int err;
  TxnPtr t = start_commit(uid, id, &err);
  if (!t) return err;
  auto t0 = std::chrono::steady_clock::now();
  err = finish(t, true, flags & TXNFS_COMMIT_LAZY);
  count_commit(std::chrono::steady_clock::now() - t0);
  return err;
}

void TxnManager::count_commit(std::chrono::steady_clock::duration took) {
  double s = std::chrono::duration<double>(took).count();
  for (size_t k = 0; k < std::size(kCommitBuckets); k++)
    if (s <= kCommitBuckets[k]) {
      commit_in_[k].fetch_add(1, std::memory_order_relaxed);
      break;
    }
  commit_count_.fetch_add(1, std::memory_order_relaxed);
  commit_us_sum_.fetch_add(uint64_t(s * 1e6), std::memory_order_relaxed);
}

int TxnManager::abort(uid_t uid, uint64_t id) {
  TxnPtr t = find(id);
  if (!t) return ENOENT;
  if (uid != 0 && uid != t->uid) return EPERM;
  int s = t->state.load();
  while (s == TXNFS_ACTIVE || s == TXNFS_ABORT_ONLY) {
    if (t->state.compare_exchange_weak(s, TXNFS_ABORTED)) return finish(t, false);
  }
  return ENOENT;
}

int TxnManager::set_lock_timeout(uid_t uid, uint64_t id, uint32_t ms) {
  TxnPtr t = find(id);
  if (!t) return ENOENT;
  if (uid != 0 && uid != t->uid) return EPERM;
  t->lock_timeout_ms = int64_t(ms);
  return 0;
}

TxnPtr TxnManager::get(uid_t uid, uint64_t id, int *err) {
  TxnPtr t = find(id);
  *err = !t ? ENOENT : uid != 0 && uid != t->uid ? EPERM : 0;
  return *err ? nullptr : t;
}

int TxnManager::info(uid_t uid, uint64_t id, struct txnfs_info *out) {
  TxnPtr t = find(id);
  if (!t) return ENOENT;
  if (uid != 0 && uid != t->uid) return EPERM;
  *out = (struct txnfs_info){};
  out->id = id;
  out->state = uint32_t(t->state.load());
  out->owner_uid = t->uid;
  out->pid = t->pid;
  out->flags = t->flags;
  out->ops = t->ops;
  {
    MutexLock g(t->mu);
    out->backup_bytes = t->log ? t->log->backup_bytes() : 0;
  }
  out->age_ms = uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - t->started)
                             .count());
  out->error = t->error;
  return 0;
}

// Ends `t`: makes a commit durable (or, lazy, queues it to become durable), or rolls
// back; then releases its locks, drops what the kernel cached about its changes, and
// unbinds it.
int TxnManager::finish(TxnPtr t, bool commit, bool lazy, bool *here) {
  // Once no request of `t` is in flight nothing else changes what it recorded (enter()
  // refuses new ones): take what the commit or rollback needs, then let go of t->mu,
  // which must not be held across SQLite, syncs and the undo executor.
  UndoLog *log;
  std::vector<Txn::RowName> row_names;
  {
    lock_order::assert_none_held("a transaction's requests to finish");
    MutexLock g(t->mu);
    while (t->inflight != 0) {
      // A request of `t` parked for a lock (or its lock set) would hold the end up to its
      // lock timeout: it fails now with ENOENT, as a request arriving after the commit or
      // abort began does (enter()). Requests being served finish first; one may park
      // after this pass, hence the next.
      env_.locks.cancel(*t, ENOENT);
      t->idle.wait_for(t->mu, std::chrono::milliseconds(10));
    }
    log = t->log.get();
    row_names = t->row_names;
  }
  int err = 0;
  bool commit_failed = false;  // its record may say 'committed', durably or not
  lazy = lazy && !t->wants_durable.load();
  if (commit) {
    // A durable commit that changed nothing still promises that everything it could see
    // is durable: the lazy commits before it become durable first.
    if (!log) err = lazy ? 0 : before_plain_change();
    else err = lazy ? gc_.lazy_commit(t) : gc_.durable_commit(*t);
    if (err && !t->gid.empty()) {
      // Prepared, and its cluster decided to commit: it stays prepared, locks and all,
      // to be resolved again (prepare.cc).
      spdlog::error("prepared transaction {} ({}): commit failed ({}); it stays prepared",
                    t->id(), t->gid, std::strerror(err));
      t->state = TXNFS_PREPARED;
      return EIO;
    }
    if (err) {
      spdlog::error("transaction {}: commit failed ({}); rolling back", t->id(),
                    std::strerror(err));
      commit = false;
      commit_failed = true;
      err = EIO;
    }
  }
  if (commit) {
    t->state = TXNFS_COMMITTED;
    update_rows(*t);
    // A lazy commit's log stays whole until the group-commit round that makes it
    // durable runs this (one without a log has nothing to make durable).
    if (!lazy || !log) after_durable(*t);
    commits_++;
    if (lazy) lazy_commits_++;
  } else {
    t->state = TXNFS_ABORTED;
    try {
      if (log) {
        // The rollback removes the log before the handle rows below follow it: until
        // they have, a durable record tells recovery to reconcile the handle table
        // (recover.cc), the log being gone. One sync per rollback; begin writes no row.
        // (Set back from 'committed' where a commit's record was written and its sync
        // failed: recovery must go on rolling back, never discard the log.)
        env_.db->record_rolling_back(txn_row(*t));
        try {
          env_.db->sync();
        } catch (const std::exception &e) {
          // A failed commit's record may be durable as 'committed' and the 'active' row
          // not: a rollback cut short would then be taken for a finished commit and
          // its log discarded, half undone. It is left to recovery (the catch below).
          if (commit_failed) throw;
          // An abort's row only tells recovery to reconcile the handle table (no record
          // ever said committed): the rollback goes on, rather than leave the aborted
          // changes visible to everyone until the next mount.
          spdlog::error("abort of transaction {}: {}; rolling back all the same", t->id(),
                        e.what());
        }
        // A step that cannot be undone marks the store damaged (durably, before the log
        // goes; the log is kept in .txnfs/damaged): fsck and the next mount report it.
        UndoContext ctx{env_.tree_fd, env_.backups_fd,
                        [](const UndoStep &) { TXNFS_CRASH_POINT("abort.mid_undo"); },
                        damage_keeper(env_.paths, *env_.db, "abort")};
        UndoResult r = undo_transaction(ctx, t->id());
        TXNFS_CRASH_POINT("abort.after_undo");
        for (auto &p : r.problems) spdlog::error("abort of {}: {}", t->id(), p);
        // An incomplete rollback is an error the caller must hear of.
        if (!r.problems.empty()) err = EIO;
        // A removed object may have gone before the rollback (the transaction removed
        // what it had made) and XFS may have given its inode number, its nodeid, to
        // another object since: only what still names this object goes.
        for (auto &obj : r.removed) {
          uint64_t nodeid = env_.nodeid_of(obj.ino);
          if (auto row = env_.db->handle(nodeid); row && row->generation == obj.generation)
            env_.db->remove_handle(nodeid);
          env_.cache->gone(nodeid, obj.generation);  // before its locks are released
          env_.fds.drop_unlinked(obj.ino);           // (gone: no request pins it again)
        }
        for (auto &obj : r.touched) env_.cache->inode(env_.nodeid_of(obj.ino));
        {
          MutexLock g(t->mu);  // (before the locks go: a creation in a directory whose
          for (auto &[nodeid, o] : t->objects)  // default ACL came back must see it)
            if (o.xattrs_saved) env_.cache->xattrs_restored(nodeid);
        }
      }
      for (auto it = row_names.rbegin(); it != row_names.rend(); ++it)
        env_.db->set_handle_name(it->nodeid, it->parent, it->name);
      if (!t->gid.empty()) env_.db->forget_prepared(t->id());
      env_.db->delete_txn(t->id());
    } catch (const std::exception &e) {
      // The log stays; the next mount's recovery finishes the rollback.
      spdlog::error("abort of transaction {} failed: {}", t->id(), e.what());
      err = EIO;
    }
    aborts_++;
  }
  env_.view.forget(t->id());
  env_.locks.release_all(*t);
  Invalidations inv;
  {
    MutexLock g(t->mu);
    inv = end_invalidations(*t, commit);
  }
  // Before the caller hears the outcome: its next request must not find a name the
  // kernel still maps to what it meant inside the transaction (locks are released,
  // so no request the invalidations wait for is waiting for us). On a thread that
  // serves requests only what waits for no kernel lock is sent (commit_here).
  // Its view (if it had one) answers ESTALE from now on, and the kernel drops it.
  bool viewed = t->view_base.load() != 0;
  if (viewed) env_.cache->view_ended(t->id());
  bool now = here && commit && !viewed && std::all_of(inv.begin(), inv.end(), [this](auto &i) {
               return i.second.empty() && env_.cache->quick(i.first);
             });
  if (now) {
    for (auto &i : inv) env_.cache->inode_now(i.first);
  } else {
    for (auto &[node, name] : inv) {
      if (name.empty()) env_.cache->inode(node);
      else env_.cache->entry(node, name);
    }
    if (here) {
      *here = true;  // end_later() sends them
      return err;
    }
    env_.cache->flush();
  }
  binding_.unbind(*t);
  return err;
}

void TxnManager::end_later(Txn &t) {
  env_.cache->flush();
  binding_.unbind(t);
}

// Each object and each name once: a transaction that made thousands of files in one
// directory drops that directory's attributes and listing once, not per name.
TxnManager::Invalidations TxnManager::end_invalidations(Txn &t, bool commit) {
  Invalidations inv;
  // An object the transaction made was reachable by it alone, so what the kernel
  // caches of it is what the commit made committed: only an abort drops it (and its
  // pages, which a read after the commit would otherwise find).
  for (auto &[nodeid, o] : t.objects)
    if (!commit || !o.created) inv.emplace_back(nodeid, std::string());
  // An abort drops the pages of its shared mappings too (txn_writers.cc): dirty ones
  // come back as WRITEs it refuses, and the next fault reads the rolled-back data.
  if (!commit)
    for (auto &[nodeid, i] : t.opened_for_writing)
      if (i->paged.load(std::memory_order_relaxed) && !t.objects.count(nodeid))
        inv.emplace_back(nodeid, std::string());
  uint64_t last_dir = 0;
  for (auto &[key, made] : t.entries) {
    auto &[dir, name] = key;
    // A name that holds what the transaction made there: the kernel's dentry of it is
    // the one the creation filled in, with no lifetime (or, in a directory the
    // transaction made, one no one else could reach), so after a commit it is right.
    // Through a view, though, the creation filled in the view's dentry: the plain one
    // may be a cached miss (unless the directory is one the transaction made).
    bool plain_miss = t.view_base.load() && !(t.objects.count(dir) && t.objects[dir].created);
    if (!(commit && made) || plain_miss) inv.emplace_back(dir, name);
    // (also drops the kernel's cached listing of dir; `entries` is sorted by dir)
    if (dir != last_dir && !t.objects.count(dir)) inv.emplace_back(dir, std::string());
    last_dir = dir;
  }
  return inv;
}

TxnManager::Here TxnManager::commit_here(uid_t uid, uint64_t id, unsigned flags, int *err,
                                         TxnPtr *later) {
  if (flags != TXNFS_COMMIT_LAZY) return Here::kNo;
  TxnPtr t = find(id);
  if (!t || (uid != 0 && uid != t->uid) || t->wants_durable.load() || t->view_base.load())
    return Here::kNo;  // (a view's end waits for the kernel's directory lock)
  {
    // Decided under t->mu, which enter() takes: once it is committing no request of it
    // starts. One still in flight (the RELEASE of a file it closed, served on another
    // thread) finish() waits for, which is safe here: it waits for no request queued
    // behind this one, as it has not started. What it changes of the invalidations,
    // finish() finds and leaves to the control pool; if it is an fsync, the commit turns
    // durable, still here: the group commit waits for the disk, not for requests.
    MutexLock g(t->mu);
    if (t->state.load() != TXNFS_ACTIVE) return Here::kNo;
    for (auto &[nodeid, i] : t->opened_for_writing)
      if (i->paged.load(std::memory_order_relaxed)) return Here::kNo;  // write_back_mapped
    for (auto &[node, name] : end_invalidations(*t, true))
      if (!name.empty() || !env_.cache->quick(node)) return Here::kNo;
    int expected = TXNFS_ACTIVE;
    if (!t->state.compare_exchange_strong(expected, TXNFS_COMMITTING)) return Here::kNo;
  }
  bool deferred = false;
  auto t0 = std::chrono::steady_clock::now();
  *err = finish(t, true, true, &deferred);
  count_commit(std::chrono::steady_clock::now() - t0);
  if (!deferred) {
    lazy_commits_here_++;
    return Here::kDone;
  }
  *later = std::move(t);
  return Here::kLater;
}

// At commit, before the locks go (also for a lazy commit: a later transaction may reuse
// a name at once): the handle rows of objects whose names the transaction removed.
void TxnManager::update_rows(Txn &t) {
  UndoLog *log;
  std::multimap<uint64_t, Txn::Unlinked> unlinked = t.unlinked_names(&log);
  try {
    for (auto &[nodeid, u] : unlinked) {
      struct stat st;
      if (::fstatat(log->dir_fd(), u.stash.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      // Gone once the log lets go of it: every link left is one of this log's stashes
      // (an object that lost two names here has two).
      if (S_ISDIR(st.st_mode) || st.st_nlink <= unlinked.count(nodeid))
        env_.db->remove_handle(nodeid);
      else env_.db->clear_handle_name(u.parent, u.name);
    }
  } catch (const std::exception &e) {
    spdlog::error("transaction {}: updating handle rows: {}", t.id(), e.what());
  }
}

// Runs once the commit record of `t` is durable (a lazy one's: in the group-commit
// round that wrote it; until then recovery may need every part of the log).
void TxnManager::after_durable(Txn &t) {
  UndoLog *log;
  std::multimap<uint64_t, Txn::Unlinked> unlinked = t.unlinked_names(&log);
  // The removed names are gone for good: drop the log's links to their objects now, so
  // link counts are right as soon as a durable commit returns (the rest of the log goes
  // in the background).
  for (auto &[nodeid, u] : unlinked) {
    struct stat st;
    if (::fstatat(log->dir_fd(), u.stash.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    ::unlinkat(log->dir_fd(), u.stash.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0);
    // An object that lost its last name here keeps no blocks for the fd cache: its fd
    // goes now, or when the kernel forgets the object (fd_cache.h). (Checked after the
    // unlink: a FORGET before it found the stash's link and kept the fd.)
    if (!env_.cache->known(nodeid)) env_.fds.drop_unlinked(st.st_ino);
  }
  TXNFS_CRASH_POINT("commit.after_rows");
  if (log) {
    MutexLock g(clean_mu_);
    to_discard_.push_back({t.id(), t.has_row});
    clean_cv_.notify_one();
    return;
  }
  // Nothing to discard: the record goes with the next group-commit round (or the
  // cleaner's, kForgetDelay from now), not in a SQLite write of its own.
  gc_.forget_now(t.id());
  MutexLock g(clean_mu_);
  if (!forget_armed_) {
    forget_wake_ = true;
    clean_cv_.notify_one();
  }
}

}  // namespace txnfs
