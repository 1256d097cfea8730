#include "recovery/recover.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "store/crash_point.h"
#include "store/error.h"
#include "store/handle_journal.h"
#include "recovery/fsck.h"
#include "recovery/undo/undo_exec.h"
#include "recovery/undo/undo_io.h"
#include "recovery/undo/undo_log.h"
#include "recovery/undo/undo_record.h"

namespace txnfs {

using Clock = std::chrono::steady_clock;

RecoveryReport recover_store(const StorePaths &paths, MetaDb &db, const RecoveryOptions &opts) {
  auto t0 = Clock::now();
  RecoveryReport rep;
  UniqueFd tree(::open(paths.tree.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!tree) throw_errno("open " + paths.tree, tree.err());
  UniqueFd backups(::open(paths.backups.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!backups) throw_errno("open " + paths.backups, backups.err());
  struct stat tst;
  if (::fstat(tree.get(), &tst) != 0) throw_errno("stat " + paths.tree, errno);

  std::vector<uint64_t> committed = db.committed_txns();
  size_t records = db.all_txns().size();
  std::vector<uint64_t> logs = logged_transactions(backups.get());
  // A lazy commit is committed when its log's marker is at or below the durable mark
  // (set_lazy_durable), as much as one with a commit record.
  uint64_t mark = lazy_durable_upto(backups.get());
  std::map<uint64_t, uint64_t> lazy_seq;  // txid -> its marker
  for (uint64_t id : logs)
    if (auto s = lazy_commit_seq(backups.get(), id)) {
      lazy_seq[id] = *s;
      if (*s <= mark) committed.push_back(id);
    }
  // Prepared transactions: their cluster decides, before anything is touched.
  for (const MetaDb::PreparedRow &p : db.prepared_txns()) {
    if (std::find(logs.begin(), logs.end(), p.txid) == logs.end() ||
        std::find(committed.begin(), committed.end(), p.txid) != committed.end())
      continue;  // nothing to decide: its log is gone, or its commit record is there
    if (!opts.decide)
      throw Error(fmt::format("transaction {} is prepared (global id {}, since {}) and waits "
                              "for its cluster's decision",
                              p.txid, p.gid, p.prepared),
                  "mount the store with --cluster FILE (the node's cluster configuration), "
                  "or resolve it with `txnfs recover STORE --cluster FILE`; nothing was changed");
    if (opts.decide(p)) committed.push_back(p.txid);
  }
  std::sort(committed.begin(), committed.end());
  auto is_committed = [&](uint64_t id) {
    return std::binary_search(committed.begin(), committed.end(), id);
  };
  // The order of rollbacks: transactions that never committed first (they are
  // isolated from each other, and nothing committed can have built on them), then the
  // lazily committed ones that did not become durable (no record, above the mark), latest
  // commit first — a later one may have changed what an earlier one left (see
  // docs/crash-model.md, Lazy commit). Committed logs are only discarded.
  {
    std::vector<std::pair<uint64_t, uint64_t>> keyed;  // (0 or seq, txid)
    for (uint64_t id : logs)
      keyed.emplace_back(is_committed(id) || !lazy_seq.count(id) ? 0 : lazy_seq[id], id);
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto &a, const auto &b) {
      if ((a.first == 0) != (b.first == 0)) return a.first == 0;
      return a.first > b.first;
    });
    for (size_t k = 0; k < logs.size(); k++) logs[k] = keyed[k].second;
  }

  // Look at every log to roll back before touching any: a damaged one stops recovery
  // while the store is still as the crash left it.
  std::vector<uint64_t> steps_of(logs.size());
  std::vector<std::string> damage;
  for (size_t k = 0; k < logs.size(); k++) {
    if (is_committed(logs[k])) continue;
    for (auto &p : inspect_log(backups.get(), logs[k], &steps_of[k]))
      damage.push_back(fmt::format("transaction {}: {}", logs[k], p));
  }
  if (!damage.empty()) {
    if (!opts.force) {
      std::string all;
      for (auto &d : damage) all += "\n  " + d;
      throw Error(fmt::format("cannot recover {}: undo logs are damaged (was something in {} "
                              "deleted or changed by hand?); nothing was changed:{}",
                              paths.root, paths.backups, all),
                  "`txnfs recover --force STORE` rolls back everything else and reports what "
                  "it could not restore");
    }
    for (auto &d : damage) rep.problems.push_back(d);
  }

  // Progress, at most about once a second.
  auto last = t0;
  size_t index = 0;
  uint64_t txid = 0, done = 0, total = 0;
  auto tick = [&](bool force_line) {
    if (!opts.progress) return;
    auto now = Clock::now();
    if (!force_line && now - last < std::chrono::seconds(1)) return;
    last = now;
    opts.progress(
        fmt::format("recovery: transaction {} ({} of {}): step {} of {}, "
                    "{:.1f} s",
                    txid, index + 1, logs.size(), done, total,
                    std::chrono::duration<double>(now - t0).count()));
  };

  // Each rollback removes its log, and the handle table is reconciled only at the end:
  // a durable record of every transaction rolled back makes the next recovery
  // reconcile it even if a crash comes in between, the logs being gone (begin writes
  // no record).
  bool noted = false;
  for (uint64_t id : logs)
    if (!is_committed(id)) {
      db.note_rollback(id);
      noted = true;
    }
  if (noted) {
    db.sync();
    records = db.all_txns().size();
  }

  UndoContext ctx{tree.get(), backups.get(),
                  [&](const UndoStep &) {
                    TXNFS_CRASH_POINT("recover.mid_undo");
                    done++;
                    tick(false);
                  },
                  damage_keeper(paths, db, "recovery")};
  for (index = 0; index < logs.size(); index++) {
    txid = logs[index];
    TXNFS_CRASH_POINT("recover.before_txn");
    if (is_committed(txid)) {
      // Committed: its effects stay; the log is only what is left of the cleanup.
      discard_log(ctx, txid);
      rep.discarded++;
      rep.finished_ids.push_back(txid);
      continue;
    }
    done = 0;
    total = steps_of[index];
    UndoResult r = undo_transaction(ctx, txid);
    TXNFS_CRASH_POINT("recover.after_txn");
    rep.rolled_back++;
    rep.rolled_back_ids.push_back(txid);
    rep.steps += r.steps;
    rep.steps_undone += r.undone;
    rep.bytes_restored += r.bytes_restored;
    for (auto &p : r.problems) rep.problems.push_back(fmt::format("transaction {}: {}", txid, p));
    for (auto &obj : r.removed) {  // (only rows that still name it: see TxnManager::finish)
      uint64_t nodeid = obj.ino == uint64_t(tst.st_ino) ? 1 : obj.ino;
      if (auto row = db.handle(nodeid); row && row->generation == obj.generation)
        db.remove_handle(nodeid);
    }
  }
  // Handle rows a killed daemon had journaled but not written, of objects that are
  // still there (after the rollbacks: none of an object a rollback removed).
  rep.handles_replayed = replay_handle_journal(paths.handle_journal, tree.get(), db);
  // Every log is gone for good before the records that explain them go.
  if (::syncfs(tree.get()) != 0) throw_errno("syncfs", errno);
  TXNFS_CRASH_POINT("recover.before_forget");
  // A daemon whose handle-row write failed after its change marked the table stale.
  bool stale = handles_stale_reason(paths).has_value();
  if (!logs.empty() || records > 0 || stale || !db.orphan_undo_records().empty()) {
    // A crash can leave rows of objects that are gone (created by a rolled-back
    // transaction, removed by a committed one) and names a rollback moved back.
    // Reconciled before the records go: while a record remains, the next recovery
    // reconciles again.
    rep.handle_fixes = reconcile_handles(tree.get(), db);
    db.clear_txns();
    rep.records_forgotten = records;
    db.sync();
    if (stale) clear_handles_stale(paths);  // (after the sync: a crash before reconciles again)
  }
  rep.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return rep;
}

std::string damaged_dir(const StorePaths &paths) { return paths.internal + "/damaged"; }

std::function<void(uint64_t, const UndoResult &)> damage_keeper(const StorePaths &paths, MetaDb &db,
                                                                std::string source) {
  return [&paths, &db, source](uint64_t txid, const UndoResult &r) {
    std::string dir = damaged_dir(paths);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) throw_errno("mkdir " + dir, errno);
    std::string name = std::to_string(txid);
    struct stat st;
    for (int k = 2; ::lstat((dir + "/" + name).c_str(), &st) == 0; k++)
      name = fmt::format("{}-{}", txid, k);
    if (errno != ENOENT) throw_errno("stat " + dir + "/" + name, errno);
    std::string kept = ".txnfs/damaged/" + name;
    // Durable before the log moves: the log is the only other record of the damage.
    db.add_damage(source, txid, r.problems, kept);
    std::string from = paths.backups + "/" + std::to_string(txid), to = dir + "/" + name;
    if (::rename(from.c_str(), to.c_str()) != 0) throw_errno("keep " + from + " as " + to, errno);
  };
}

std::string describe_damage(const StorePaths &paths, const DamageRow &d) {
  std::string s = d.txid ? fmt::format("transaction {}", *d.txid) : std::string("store");
  s += fmt::format(" ({}, {}): {}", d.source == "abort" ? "abort in the daemon" : d.source, d.found,
                   d.problem);
  if (d.kept.empty()) return s;
  s += fmt::format("; its undo log is kept in {}/{}", paths.root, d.kept);
  // "step <seq> (...)": what that step had saved or stashed, if it is still there.
  std::string_view p = d.problem;
  if (p.starts_with("step ") && p.size() >= 21) {
    std::string obj = fmt::format("{}/{}/{}.d", paths.root, d.kept, p.substr(5, 16));
    struct stat st;
    if (::lstat(obj.c_str(), &st) == 0) s += fmt::format(" (what that step saved: {})", obj);
  }
  return s;
}

std::string damage_hint() {
  return "a rollback could not restore everything: the files these steps name may hold "
         "changes of a transaction that was rolled back, or miss what it removed (look in "
         "the kept undo log). Check and fix them; then `txnfs fsck --repair --accept-damage "
         "STORE` clears the mark (and deletes the kept logs). `txnfs mount --force` serves "
         "the store as it is meanwhile";
}

std::string recovery_summary(const RecoveryReport &r) {
  if (!r.anything()) return fmt::format("nothing to recover ({:.3f} s)", r.seconds);
  std::string s = fmt::format(
      "rolled back {} transaction{} ({} operations undone of {} recorded, {} bytes restored), "
      "finished {} committed one{}, forgot {} transaction record{}, fixed {} handle row{}, in "
      "{:.3f} s",
      r.rolled_back, r.rolled_back == 1 ? "" : "s", r.steps_undone, r.steps, r.bytes_restored,
      r.discarded, r.discarded == 1 ? "" : "s", r.records_forgotten,
      r.records_forgotten == 1 ? "" : "s", r.handle_fixes.size(),
      r.handle_fixes.size() == 1 ? "" : "s", r.seconds);
  if (r.handles_replayed)
    s += fmt::format("; wrote {} handle row{} a stopped daemon had journaled", r.handles_replayed,
                     r.handles_replayed == 1 ? "" : "s");
  if (!r.problems.empty()) s += fmt::format("; {} PROBLEMS", r.problems.size());
  return s;
}

std::string recovery_ids(const RecoveryReport &r) {
  auto list = [](const std::vector<uint64_t> &ids) {
    constexpr size_t kShown = 20;
    std::vector<uint64_t> shown(ids.begin(), ids.begin() + std::min(ids.size(), kShown));
    std::string s = fmt::format("{}", fmt::join(shown, ", "));
    if (ids.size() > kShown) s += fmt::format(" and {} more", ids.size() - kShown);
    return s;
  };
  std::string s;
  if (!r.rolled_back_ids.empty()) s = "rolled back " + list(r.rolled_back_ids);
  if (!r.finished_ids.empty()) s += (s.empty() ? "" : "; ") + ("finished " + list(r.finished_ids));
  return s;
}

}  // namespace txnfs
