#include "recover.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include <fmt/format.h>

#include "error.h"
#include "undo_exec.h"

namespace txnfs {

RecoveryReport recover_store(const StorePaths &paths, MetaDb &db) {
  auto t0 = std::chrono::steady_clock::now();
  RecoveryReport rep;
  int tree_fd = ::open(paths.tree.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (tree_fd < 0) throw_errno("open " + paths.tree, errno);
  int backups_fd = ::open(paths.backups.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (backups_fd < 0) {
    int err = errno;
    ::close(tree_fd);
    throw_errno("open " + paths.backups, err);
  }
  UndoContext ctx{tree_fd, backups_fd, {}};
  std::vector<uint64_t> committed = db.committed_txns();
  struct stat tst;
  ::fstat(tree_fd, &tst);
  try {
    for (uint64_t id : logged_transactions(backups_fd)) {
      if (std::binary_search(committed.begin(), committed.end(), id)) {
        discard_log(ctx, id);
        rep.discarded++;
        continue;
      }
      UndoResult r = undo_transaction(ctx, id);
      rep.rolled_back++;
      rep.steps_undone += r.undone;
      rep.bytes_restored += r.bytes_restored;
      for (auto &p : r.problems) rep.problems.push_back(fmt::format("transaction {}: {}", id, p));
      for (auto &obj : r.removed) db.remove_handle(obj.ino == uint64_t(tst.st_ino) ? 1 : obj.ino);
    }
    // Every log is gone for good before the records that explain them go.
    if (::syncfs(tree_fd) != 0) throw_errno("syncfs", errno);
    db.transaction([&] {
      for (uint64_t id : committed) db.delete_txn(id);
    });
    db.clear_txns();
  } catch (...) {
    ::close(tree_fd);
    ::close(backups_fd);
    throw;
  }
  ::close(tree_fd);
  ::close(backups_fd);
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace txnfs
