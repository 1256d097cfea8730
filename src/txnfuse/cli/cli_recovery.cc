#include "txnfuse/cli/cli_recovery.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstdio>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "store/crash_point.h"
#include "store/fault_point.h"
#include "store/error.h"
#include "recovery/fsck.h"
#include "store/metadb.h"
#include "cluster/cluster_conf.h"
#include "recovery/recover.h"
#include "txnfuse/txn/resolver.h"
#include "store/store.h"
#include "recovery/undo/undo_io.h"

namespace txnfs::cli {

namespace {

RecoveryOptions printing_options(bool force) {
  RecoveryOptions o;
  o.force = force;
  o.progress = [](const std::string &line) {
    fmt::print(stderr, "{}\n", line);
    std::fflush(stderr);
  };
  return o;
}

void print_report(const std::string &store, const RecoveryReport &rep, bool verbose) {
  for (size_t k = 0; k < rep.handle_fixes.size() && (verbose || k < 10); k++)
    fmt::print("handle table: {}\n", rep.handle_fixes[k]);
  if (!verbose && rep.handle_fixes.size() > 10)
    fmt::print("handle table: ... and {} more changes (--verbose lists them)\n",
               rep.handle_fixes.size() - 10);
  for (auto &p : rep.problems) fmt::print("NOT RESTORED: {}\n", p);
  if (verbose && !recovery_ids(rep).empty()) fmt::print("transactions: {}\n", recovery_ids(rep));
  fmt::print("{}: {}\n", store, recovery_summary(rep));
}

}  // namespace

int recover_command(const std::string &store, bool force, bool verbose,
                    const std::string &cluster_conf) {
  StorePaths paths = StorePaths::of(store);
  check_store_layout(paths);
  StoreLock lock(paths);  // refuses a mounted store
  auto db = MetaDb::open(paths.db);
  RecoveryOptions ro = printing_options(force);
  if (!cluster_conf.empty()) {
    std::string error;
    std::optional<cluster::ClusterConf> conf = cluster::load_cluster_conf(cluster_conf, &error);
    if (!conf) throw Error(error);
    ro.decide = recovery_decider(*conf);
  }
  RecoveryReport rep = recover_store(paths, *db, ro);
  print_report(store, rep, verbose);
  if (!rep.problems.empty()) {
    fmt::print(stderr,
               "txnfs: error: {} undo steps could not be applied: the files they name may "
               "hold changes of rolled-back transactions (listed above)\n",
               rep.problems.size());
  }
  // This run's problems and those of earlier rollbacks alike: the store is damaged
  // until someone accepts it, and recover says so every time, as fsck and mount do.
  auto damage = db->open_damage();
  for (auto &d : damage) fmt::print("DAMAGED: {}\n", describe_damage(paths, d));
  if (!damage.empty()) {
    fmt::print(stderr, "txnfs: error: store {} is marked damaged ({} problem{}, listed above)\n",
               store, damage.size(), damage.size() == 1 ? "" : "s");
    fmt::print(stderr, "  hint: {}\n", damage_hint());
  }
  return rep.problems.empty() && damage.empty() ? 0 : 1;
}

namespace {

// --accept-damage: clears the mark of the rows that existed before this run's recovery
// (what the administrator has seen), deletes the undo logs kept for them.
void accept_damage(const StorePaths &paths, MetaDb &db, const std::vector<DamageRow> &seen) {
  if (seen.empty()) {
    fmt::print("accept-damage: the store is not marked damaged; nothing to accept\n");
    return;
  }
  std::set<std::string> kept;
  for (auto &d : seen) {
    fmt::print("accepted: {}\n", describe_damage(paths, d));
    if (!d.kept.empty()) kept.insert(d.kept);
  }
  db.accept_damage(seen.back().id);
  UniqueFd root(::open(paths.root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root) throw_errno("open " + paths.root, root.err());
  for (auto &k : kept) {
    std::string_view name = std::string_view(k).substr(std::min(k.size(), size_t(15)));
    if (!k.starts_with(".txnfs/damaged/") || name.empty() || name.find('/') != name.npos ||
        name == "." || name == "..") {
      fmt::print("accepted: left {} alone (not a kept undo log)\n", k);
      continue;
    }
    undo_io::remove_tree(root.get(), k);
    fmt::print("accepted: deleted the kept undo log {}/{}\n", paths.root, k);
  }
  if (::syncfs(root.get()) != 0) throw_errno("syncfs", errno);
}

}  // namespace

int fsck_command(const std::string &store, bool repair, bool accept) {
  StorePaths paths = StorePaths::of(store);
  if (repair) {
    struct stat st;
    // A missing backup area is the one piece of the layout a repair can make again.
    if (::stat(paths.db.c_str(), &st) == 0 && ::stat(paths.tree.c_str(), &st) == 0 &&
        ::stat(paths.backups.c_str(), &st) != 0 && errno == ENOENT) {
      if (::mkdir(paths.backups.c_str(), 0700) != 0) throw_errno("mkdir " + paths.backups, errno);
      fmt::print(
          "repaired: recreated the missing backup area {} (undo logs of unfinished "
          "transactions that were in it are lost: their changes stay)\n",
          paths.backups);
    }
    check_store_layout(paths);
    StoreLock lock(paths);  // refuses a mounted store
    auto db = MetaDb::open(paths.db);
    std::vector<DamageRow> seen = db->open_damage();  // before recovery adds any
    RecoveryReport rep = recover_store(paths, *db, printing_options(false));
    if (rep.anything()) fmt::print("repaired: recovery {}\n", recovery_summary(rep));
    for (auto &f : rep.handle_fixes) fmt::print("repaired: handle table: {}\n", f);
    for (auto &p : rep.problems) fmt::print("NOT RESTORED: {}\n", p);
    if (rep.handle_fixes.empty()) {
      UniqueFd tree(::open(paths.tree.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!tree) throw_errno("open " + paths.tree, tree.err());
      for (auto &f : reconcile_handles(tree.get(), *db))
        fmt::print("repaired: handle table: {}\n", f);
      db->sync();
    }
    if (accept) accept_damage(paths, *db, seen);
    else if (!db->open_damage().empty())
      fmt::print(
          "the store stays marked damaged (listed below): a repair cannot know what "
          "the files should hold. Check them, then run txnfs fsck --repair "
          "--accept-damage {}\n",
          store);
  }
  FsckReport rep = fsck_store(paths);
  for (auto &p : rep.problems) fmt::print("{}\n", p);
  // Not a problem of the store's consistency, but of who can break it: anyone who can
  // enter STORE can change STORE/tree without locks or undo.
  if (struct stat st; ::stat(paths.root.c_str(), &st) == 0 && (st.st_mode & (S_IXGRP | S_IXOTH)))
    fmt::print(stderr,
               "txnfs: warning: {} is mode {:04o}: users other than its owner can enter it and "
               "change files in {}/tree behind txnfs (no locks, no undo); the mount is the way "
               "in: chmod 0700 {}\n",
               store, st.st_mode & 07777, store, store);
  fmt::print("{}: {} handle rows, {} objects in the tree, {}\n", store, rep.rows, rep.objects,
             rep.clean() ? "clean"
                         : fmt::format("{} problem{}", rep.problems.size(),
                                       rep.problems.size() == 1 ? "" : "s"));
  return rep.clean() ? 0 : 1;
}

int crash_points_command() {
  for (const auto &p : crash::kPoints) fmt::print("{}\t{}\t{}\n", p.name, p.where, p.tests);
  return 0;
}

int fault_points_command() {
  for (const auto &p : fault::kPoints) fmt::print("{}\t{}\t{}\n", p.name, p.where, p.caller);
  return 0;
}

}  // namespace txnfs::cli
