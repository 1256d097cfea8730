// Invalidator — tells the kernel to drop what it cached about objects and names a
// finished transaction changed, from a thread of its own: the notify calls take
// kernel locks that a request handler (or a request waiting on our locks) may hold.
#pragma once
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace txnfs {

class Invalidator {
 public:
  void start(fuse_session *se);
  void stop();
  void inode(uint64_t nodeid);
  void entry(uint64_t parent, const std::string &name);
  // Waits until everything queued before the call has been sent to the kernel. A
  // transaction's commit or abort calls it (after releasing its locks) before it
  // replies, so that the caller's next request cannot meet a dentry the transaction
  // left stale (after an aborted rename, the old name would still lead to the moved
  // object, and a write to it would land in the wrong file).
  void flush();

 private:
  struct Item {
    uint64_t node;
    std::string name;  // empty: the inode
  };
  void loop();
  fuse_session *se_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> q_;
  uint64_t queued_ = 0, sent_ = 0;  // items ever queued / ever sent
  std::condition_variable sent_cv_;
  bool stop_ = false;
  std::thread t_;
};

}  // namespace txnfs
