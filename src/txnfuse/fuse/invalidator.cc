#include "txnfuse/fuse/invalidator.h"

#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace txnfs {

void Invalidator::start(fuse_session *se) {
  se_ = se;
  t_ = std::thread([this] { loop(); });
}

void Invalidator::stop() {
  {
    MutexLock g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  sent_cv_.notify_all();
  if (t_.joinable()) t_.join();
}

void Invalidator::inode(uint64_t nodeid) {
  if (!se_) return;
  {
    MutexLock g(mu_);
    q_.push_back({nodeid, {}});
    queued_++;
  }
  if (Views::slot_of(nodeid) == 0) dir_changed(nodeid);
}

void Invalidator::dir_changed(uint64_t object) {
  if (!se_) return;
  InodePtr i = inodes_.get(object);
  if (!i || !S_ISDIR(i->type)) return;
  std::vector<uint32_t> slots = views_.live_slots();
  if (slots.empty()) return;
  {
    MutexLock g(mu_);
    for (uint32_t s : slots) {
      q_.push_back({Views::nodeid(s, object), {}});
      queued_++;
    }
  }
  cv_.notify_one();
}

void Invalidator::entry(uint64_t parent, const std::string &name) {
  if (!se_) return;
  {
    MutexLock g(mu_);
    q_.push_back({parent, name});
    queued_++;
  }
}

void Invalidator::post() { cv_.notify_one(); }

bool Invalidator::quick(uint64_t nodeid) {
  InodePtr i = inodes_.get(nodeid);
  return !i || (S_ISDIR(i->type) && !i->listing_cached.load());
}

void Invalidator::inode_now(uint64_t nodeid) {
  // Offset -1: the attributes (and cached ACLs) only. The kernel takes no lock for
  // that but its inode hash's; it holds no page of such a directory to drop.
  if (se_) fuse_lowlevel_notify_inval_inode(se_, nodeid, -1, 0);
  views_attrs_now(nodeid);
}

void Invalidator::views_attrs_now(uint64_t object) {
  if (!se_) return;
  for (uint32_t s : views_.live_slots())
    fuse_lowlevel_notify_inval_inode(se_, Views::nodeid(s, object), -1, 0);
}

void Invalidator::xattrs_restored(uint64_t nodeid) {
  if (InodePtr i = inodes_.get(nodeid)) i->default_acl = Inode::kUnknown;
}

void Invalidator::gone(uint64_t nodeid, uint64_t generation) {
  if (InodePtr i = inodes_.get(nodeid); i && i->generation == generation) i->gone = true;
}

void Invalidator::view_ended(uint64_t txn_id) {
  std::vector<uint64_t> open;
  if (!views_.end(txn_id, &open)) return;
  entry(Views::kDirNodeid, std::to_string(txn_id));
  if (!se_) return;
  MutexLock g(mu_);
  for (uint64_t n : open) {
    q_.push_back({n, {}, true});
    queued_++;
  }
}

std::string Invalidator::revoke_name(uint64_t nodeid) { return fmt::format("~{:x}", nodeid); }

uint64_t Invalidator::revoke_nodeid(const char *name) {
  if (name[0] != '~') return 0;
  uint64_t n = 0;
  const char *end = name + std::strlen(name);
  auto [p, ec] = std::from_chars(name + 1, end, n, 16);
  return ec == std::errc() && p == end ? n : 0;
}

void Invalidator::revoke(uint64_t nodeid) {
  std::string name = revoke_name(nodeid);
  std::string path = mountpoint_ + "/" + Views::kDirName + "/" + name;
  struct stat st;
  if (::fstatat(AT_FDCWD, path.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    spdlog::warn("could not revoke passthrough opens of an ended view ({}): {}", path,
                 std::strerror(errno));
  fuse_lowlevel_notify_inval_entry(se_, Views::kDirNodeid, name.c_str(), name.size());
  views_.revoked(nodeid);
}

bool Invalidator::expire_names() {
  if (!se_) return true;
  int err = fuse_lowlevel_notify_increment_epoch(se_);
  if (err != 0) {
    static std::once_flag once;
    std::call_once(once, [err] {
      spdlog::warn(
          "the kernel cannot expire its cached names (FUSE_NOTIFY_INC_EPOCH: {}): a "
          "name a transaction renames is hidden from others only once the rename "
          "has returned",
          std::strerror(-err));
    });
  }
  return err == 0;
}

void Invalidator::flush() {
  // The kernel may wait for a request that waits for a mutex held here.
  lock_order::assert_none_held("the kernel's invalidations");
  MutexLock g(mu_);
  uint64_t upto = queued_;
  while (!stop_ && popped_ < upto) send_next();
  while (!stop_ && !sent_upto(upto)) {    // the thread is sending an earlier one
    wake_at_ = std::min(wake_at_, upto);  // (re-registered after every wake-up)
    sent_cv_.wait(mu_);
  }
}

void Invalidator::send_next() {
  Item it = std::move(q_.front());
  q_.pop_front();
  uint64_t n = ++popped_;
  sending_.insert(n);
  mu_.unlock();
  // Errors (ENOENT: the kernel holds nothing for it) need no handling.
  if (it.revoke) revoke(it.node);
  else if (it.name.empty()) fuse_lowlevel_notify_inval_inode(se_, it.node, 0, 0);
  else fuse_lowlevel_notify_inval_entry(se_, it.node, it.name.c_str(), it.name.size());
  mu_.lock();
  sending_.erase(n);
  if (wake_at_ != UINT64_MAX && sent_upto(wake_at_)) {
    wake_at_ = UINT64_MAX;
    sent_cv_.notify_all();
  }
}

void Invalidator::loop() {
  MutexLock g(mu_);
  while (true) {
    while (!stop_ && q_.empty()) cv_.wait(mu_);
    if (stop_) return;
    send_next();
  }
}

}  // namespace txnfs
