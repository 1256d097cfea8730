#include "pending.h"

#include <fcntl.h>

namespace txnfs {

void PendingEntries::record(uint64_t txid, uint64_t dir, const std::string &name,
                            EntryBefore before) {
  MutexLock g(mu_);
  auto [it, inserted] = dirs_[dir].try_emplace(name, txid, std::move(before));
  if (inserted) by_txn_[txid].push_back({dir, name});
}

void PendingEntries::forget(uint64_t txid) {
  MutexLock g(mu_);
  std::erase_if(objects_, [&](auto &kv) { return kv.second.txid == txid; });
  auto t = by_txn_.find(txid);
  if (t == by_txn_.end()) return;
  for (auto &[dir, name] : t->second) {
    auto d = dirs_.find(dir);
    if (d == dirs_.end()) continue;
    d->second.erase(name);
    if (d->second.empty()) dirs_.erase(d);
  }
  by_txn_.erase(t);
}

std::optional<EntryBefore> PendingEntries::before(uint64_t dir, const std::string &name) {
  MutexLock g(mu_);
  auto d = dirs_.find(dir);
  if (d == dirs_.end()) return std::nullopt;
  auto e = d->second.find(name);
  if (e == d->second.end()) return std::nullopt;
  return e->second.second;
}

std::map<std::string, EntryBefore> PendingEntries::in_dir(uint64_t dir) {
  MutexLock g(mu_);
  std::map<std::string, EntryBefore> out;
  auto d = dirs_.find(dir);
  if (d != dirs_.end())
    for (auto &[name, v] : d->second) out.emplace(name, v.second);
  return out;
}

bool PendingEntries::empty() {
  MutexLock g(mu_);
  return dirs_.empty();
}

}  // namespace txnfs

namespace txnfs {

void PendingEntries::note_attrs(uint64_t txid, uint64_t nodeid, const struct stat &st, int log_fd) {
  MutexLock g(mu_);
  objects_.try_emplace(nodeid, Noted{txid, log_fd, ObjectState{st, {}, {}}});
}

void PendingEntries::note_range(uint64_t nodeid, uint64_t off, uint64_t end, std::string obj) {
  MutexLock g(mu_);
  auto it = objects_.find(nodeid);
  if (it != objects_.end()) it->second.state.ranges[off] = {end, std::move(obj)};
}

void PendingEntries::note_xattrs(uint64_t nodeid, std::string obj) {
  MutexLock g(mu_);
  auto it = objects_.find(nodeid);
  if (it != objects_.end()) it->second.state.xattrs = std::move(obj);
}

std::optional<ObjectBefore> PendingEntries::object(uint64_t nodeid) {
  MutexLock g(mu_);
  auto it = objects_.find(nodeid);
  if (it == objects_.end()) return std::nullopt;
  ObjectBefore b;
  static_cast<ObjectState &>(b) = it->second.state;
  b.log.reset(::fcntl(it->second.log_fd, F_DUPFD_CLOEXEC, 0));  // the log may close once we unlock
  return b;
}

}  // namespace txnfs
