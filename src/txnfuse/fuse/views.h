// Views — every transaction sees the file system through kernel inodes of its own.
//
// The kernel keeps one inode, dentry, page cache, ACL copy and size per FUSE nodeid. A
// nodeid the daemon hands out is (slot << 48) | object, where object is the nodeid of
// the plain object (its backing inode number; 1: the root) and slot says through whose
// eyes the kernel sees it: 0 for everyone outside transactions (the plain, committed
// state), 1 .. kSlots-2 for one open transaction each, kDirSlot for MNT/.txnfs, the
// directory whose entry "ID" is the root of transaction ID's view. So the kernel keeps
// separate inodes, dentries, pages and attributes for a transaction and for everyone
// else, and a request says by its nodeid which transaction it belongs to.
//
// Invariants (all under mu_, a leaf: src/sync/lock_order.h):
//   - a slot belongs to one transaction from attach() until end(); after end() its
//     nodeids answer ESTALE (txn() is null) until the slot is given again;
//   - a slot is given again only once the kernel has forgotten every lookup of every
//     nodeid in it (lookups == 0): the kernel must never find a cached inode of an
//     ended view under a nodeid of a new one (its cached attributes and pages are
//     another transaction's). The generation cannot tell them apart: the kernel
//     compares only its low 32 bits, which XFS uses;
//   - the handlers see object nodeids only: ops.cc strips the slot from every nodeid
//     argument and sets the request's slot (current()); every entry handed to the
//     kernel goes through to_kernel(), which puts it back and counts the lookup.
#pragma once
#define FUSE_USE_VERSION 318
#include <fuse_lowlevel.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "sync/mutex.h"
#include "txnfuse/txn/transaction.h"

namespace txnfs {

class Views {
 public:
  static constexpr unsigned kShift = 48;
  static constexpr uint64_t kObjectMask = (uint64_t(1) << kShift) - 1;
  static constexpr uint32_t kSlots = 1u << 15;
  static constexpr uint32_t kDirSlot = kSlots - 1;  // MNT/.txnfs
  static constexpr uint64_t kDirNodeid = (uint64_t(kDirSlot) << kShift) | 1;
  static constexpr const char *kDirName = ".txnfs";  // in the root of the tree

  static uint32_t slot_of(uint64_t nodeid) { return uint32_t(nodeid >> kShift) & (kSlots - 1); }
  static uint64_t object_of(uint64_t nodeid) { return nodeid & kObjectMask; }
  static uint64_t nodeid(uint32_t slot, uint64_t object) {
    return (uint64_t(slot) << kShift) | object;
  }

  Views();
  // The slot of `t`'s view, given on first use; 0 when every slot is taken (ENFILE).
  uint32_t attach(const TxnPtr &t) EXCLUDES(mu_);
  // The open transaction of `slot`, or null (its transaction ended: ESTALE).
  TxnPtr txn(uint32_t slot) EXCLUDES(mu_);
  // Transaction `txn_id` ended: its view's nodeids answer ESTALE from now on. Returns
  // the slot it had (0: it had none), and adds to `revoke` the kernel nodeids of the
  // view that still have passthrough opens (the caller revokes them).
  uint32_t end(uint64_t txn_id, std::vector<uint64_t> *revoke = nullptr) EXCLUDES(mu_);
  // The kernel took one lookup of a nodeid in `slot` / forgot n of them.
  void looked_up(uint32_t slot) EXCLUDES(mu_);
  void forgot(uint32_t slot, uint64_t n) EXCLUDES(mu_);
  // Plain requests changing directory `object` now (Op::plain_changes_dir): views
  // answer its attributes with no lifetime meanwhile.
  void plain_change_begins(uint64_t object) EXCLUDES(mu_);
  void plain_change_done(uint64_t object) EXCLUDES(mu_);
  bool plain_changing(uint64_t object) EXCLUDES(mu_);

  // Views open now (txnfs status), and their slots.
  size_t open() EXCLUDES(mu_);
  // Ended views whose nodeids the kernel has not forgotten yet (txnfs status): their
  // slots are not free. A name of one left in the kernel's cache keeps it so for good
  // (performance.md: the chains of the kernel's inode hash grow with them).
  size_t held() EXCLUDES(mu_);
  std::vector<uint32_t> live_slots() EXCLUDES(mu_);

  // Passthrough (see the invariants above). The kernel negotiated FUSE_PASSTHROUGH and
  // the mount did not turn it off (-o nopassthrough).
  // `dev_fd`: the session's /dev/fuse fd.
  void enable_passthrough(int dev_fd) {
    dev_fd_ = dev_fd;
    passthrough_on_ = true;
  }
  bool passthrough_on() const { return passthrough_on_.load(std::memory_order_relaxed); }
  // For an open of `object` by a request of the view `slot` whose backing fd is `fd`:
  // the backing id to reply with (fuse_file_info::backing_id), or 0 (no passthrough).
  // An inode that has a passthrough open gets the same backing id for every open
  // (`want` notwithstanding: the kernel refuses anything else); otherwise only when
  // `want` and the slot's transaction is open.
  int passthrough_open(fuse_req_t req, uint32_t slot, uint64_t object, uint32_t generation,
                       int fd, bool want) EXCLUDES(mu_);
  // One passthrough open of `object` in `slot` was released.
  void passthrough_release(fuse_req_t req, uint32_t slot, uint64_t object) EXCLUDES(mu_);
  // Whether kernel nodeid `nodeid` is to be revoked, and the generation its kernel
  // inode has (a lookup answering another one makes the kernel fail every open of it).
  bool revoking(uint64_t nodeid, uint32_t *generation) EXCLUDES(mu_);
  void revoked(uint64_t nodeid) EXCLUDES(mu_);
  struct Counts {
    uint64_t open = 0;     // passthrough opens not released
    uint64_t opened = 0;   // passthrough opens ever
    uint64_t revoked = 0;  // kernel inodes revoked at a view's end
  };
  Counts passthrough_counts() EXCLUDES(mu_);

  // The slot of the request this thread serves (set by ops.cc for the handler's run).
  static uint32_t current();
  class Scope {
   public:
    explicit Scope(uint32_t slot);
    ~Scope();
    Scope(const Scope &) = delete;
    Scope &operator=(const Scope &) = delete;

   private:
    uint32_t prev_;
  };
  // `object` as the kernel sees it through this request's slot.
  static uint64_t kernel_nodeid(uint64_t object) { return nodeid(current(), object); }
  // Makes an entry reply's object nodeid the kernel's, and counts the lookup the
  // reply gives the kernel (none for a negative entry).
  void to_kernel(fuse_entry_param &e) EXCLUDES(mu_);

 private:
  struct Slot {
    TxnPtr txn;            // null once its transaction ended
    uint64_t txn_id = 0;   // 0: free
    uint64_t lookups = 0;  // the kernel's lookups of nodeids in the slot not forgotten yet
  };
  struct Backing {
    int id = 0;             // the kernel's backing id (FUSE_DEV_IOC_BACKING_OPEN)
    uint32_t opens = 0;     // passthrough opens not released yet
    uint32_t generation = 0;
    bool revoking = false;  // its view ended with opens left: revoke() pending
  };
  Mutex mu_{LockRank::kViews};
  std::vector<Slot> slots_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Backing> backing_ GUARDED_BY(mu_);  // by kernel nodeid
  std::unordered_map<uint64_t, uint32_t> plain_changing_ GUARDED_BY(mu_);  // by object
  uint64_t opened_ GUARDED_BY(mu_) = 0, revoked_ GUARDED_BY(mu_) = 0;
  // Set before requests; cleared for good if the kernel refuses a backing file.
  std::atomic<bool> passthrough_on_{false};
  int dev_fd_ = -1;
  std::unordered_map<uint64_t, uint32_t> by_txn_ GUARDED_BY(mu_);
  uint32_t next_ GUARDED_BY(mu_) = 1;  // where the search for a free slot starts
};

// The requests on MNT/.txnfs and the name itself (views_dir.cc). Each returns true
// when it answered the request.
namespace views_dir {
// LOOKUP of `name` in the tree's root through slot `slot`: ".txnfs" is the views
// directory (plain) or hidden (in a view).
bool lookup_in_root(fuse_req_t req, uint32_t slot, const char *name);
// A request that would make, remove or rename ".txnfs" in the tree's root: EPERM.
bool reserved(fuse_req_t req, uint64_t parent, const char *name);
void lookup(fuse_req_t req, const char *name);
void getattr(fuse_req_t req);
void access(fuse_req_t req, int mask);
}  // namespace views_dir

}  // namespace txnfs
