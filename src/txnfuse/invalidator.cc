#include "invalidator.h"

namespace txnfs {

void Invalidator::start(fuse_session *se) {
  se_ = se;
  t_ = std::thread([this] { loop(); });
}

void Invalidator::stop() {
  {
    std::lock_guard g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  sent_cv_.notify_all();
  if (t_.joinable()) t_.join();
}

void Invalidator::inode(uint64_t nodeid) {
  if (!se_) return;
  {
    std::lock_guard g(mu_);
    q_.push_back({nodeid, {}});
    queued_++;
  }
  cv_.notify_one();
}

void Invalidator::entry(uint64_t parent, const std::string &name) {
  if (!se_) return;
  {
    std::lock_guard g(mu_);
    q_.push_back({parent, name});
    queued_++;
  }
  cv_.notify_one();
}

void Invalidator::flush() {
  std::unique_lock g(mu_);
  uint64_t upto = queued_;
  sent_cv_.wait(g, [&] { return stop_ || sent_ >= upto; });
}

void Invalidator::loop() {
  std::unique_lock g(mu_);
  while (true) {
    cv_.wait(g, [this] { return stop_ || !q_.empty(); });
    if (stop_) return;
    Item it = std::move(q_.front());
    q_.pop_front();
    g.unlock();
    // Errors (ENOENT: the kernel holds nothing for it) need no handling.
    if (it.name.empty())
      fuse_lowlevel_notify_inval_inode(se_, it.node, 0, 0);
    else
      fuse_lowlevel_notify_inval_entry(se_, it.node, it.name.c_str(), it.name.size());
    g.lock();
    sent_++;
    sent_cv_.notify_all();
  }
}

}  // namespace txnfs
