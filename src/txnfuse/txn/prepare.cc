// Two-phase commit on one node (docs/cluster.md): a transaction becomes prepared -- its
// effects, its undo log and a record of its global id durable, its locks kept, bound to
// no owner -- and later commits or rolls back as its cluster decided.
//
// Invariants:
//   - a prepared transaction is in TxnBinding::by_gid_ and by_id_ (so it counts as open:
//     plain requests lock, and what it made stays unreachable) until finish() unbinds it;
//   - its prepared record is durable before prepare() answers, and no request of it runs
//     after: its state is TXNFS_PREPARED, which enter() refuses;
//   - only resolve() ends it, and a commit decision is never turned into a rollback: a
//     commit whose round fails leaves it prepared (finish()), to be resolved again;
//   - recovery never rolls it back on its own (recover.h, RecoveryOptions::decide).
#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "cluster/cluster_conf.h"
#include "txnfuse/txn/txn.h"
#include "txnfuse/txn/txn_env.h"

namespace txnfs {

int TxnManager::prepare(uid_t uid, uint64_t id, const std::string &gid) {
  if (!cluster::valid_gid(gid)) return EINVAL;
  int err;
  TxnPtr t = start_commit(uid, id, &err);  // (as a commit begins)
  if (!t) return err;
  {
    lock_order::assert_none_held("a transaction's requests to finish");
    MutexLock g(t->mu);
    while (t->inflight != 0) {  // (as in finish())
      env_.locks.cancel(*t, ENOENT);
      t->idle.wait_for(t->mu, std::chrono::milliseconds(10));
    }
  }
  // The global id is reserved first (EEXIST leaves the transaction as it was); from here
  // on no request of its owner belongs to it.
  t->gid = gid;
  if (int err = binding_.detach(*t, gid)) {
    t->gid.clear();
    t->state = TXNFS_ACTIVE;
    return err;
  }
  t->prepared_wall = std::chrono::system_clock::now();
  t->preparing = true;
  err = gc_.durable_commit(*t);  // syncfs, then its prepared record, synced
  t->preparing = false;
  if (err) {
    spdlog::error("transaction {}: prepare ({}) failed ({}); rolling back", t->id(), gid,
                  std::strerror(err));
    finish(t, false);
    return EIO;
  }
  t->state = TXNFS_PREPARED;
  prepares_++;
  // Nothing runs through its view any more: it ends now, and what was opened through
  // it answers ESTALE (or EIO, passthrough) -- never the prepared state.
  if (t->view_base.load()) {
    env_.cache->view_ended(t->id());
    env_.cache->flush();
  }
  spdlog::info("transaction {} prepared as {}", t->id(), gid);
  return 0;
}

int TxnManager::resolve(uid_t uid, const std::string &gid, bool commit) {
  if (uid != 0) return EPERM;
  if (!cluster::valid_gid(gid)) return EINVAL;
  TxnPtr t = binding_.find_prepared(gid);
  if (!t) return ENOENT;
  int expected = TXNFS_PREPARED;
  if (!t->state.compare_exchange_strong(expected, commit ? TXNFS_COMMITTING : TXNFS_ABORTED))
    return ENOENT;  // being resolved by another caller
  int err = finish(t, commit);
  if (err == 0) (commit ? resolved_commits_ : resolved_aborts_)++;
  spdlog::info("prepared transaction {} ({}): {}{}", t->id(), gid,
               commit ? "committed" : "rolled back",
               err ? std::string(" failed: ") + std::strerror(err) : std::string());
  return err;
}

std::vector<TxnManager::Prepared> TxnManager::prepared() {
  std::vector<Prepared> out;
  binding_.for_each([&](const TxnPtr &t) {
    if (t->state.load() == TXNFS_PREPARED) out.push_back({t->id(), t->gid, t->prepared_wall});
  });
  return out;
}

}  // namespace txnfs
