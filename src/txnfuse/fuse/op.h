// Op — one FUSE request's view of transactions. Constructed first thing in every
// handler that touches the tree:
//   - it finds the transaction the calling thread belongs to (or none);
//   - lock() takes the locks the request needs: a transaction keeps them until it
//     ends, a plain request only until its reply (it behaves as a one-operation
//     transaction); while no transaction is open, plain requests take no locks. A lock
//     that must wait parks the request (park.h): lock() does not return, the handler
//     is unwound, and runs again from the start once the lock is granted;
//   - cacheable() says whether the kernel may cache what the reply returns:
//     nothing a transaction sees may outlive it in a kernel cache.
#pragma once
#include <memory>
#include <vector>

#include "txnfuse/fuse/fs.h"
#include "txnfuse/txn/txn.h"

namespace txnfs {

class Op {
 public:
  // What a request keeps from one run of its handler to the next while it is parked.
  struct State {
    Fs *fs = nullptr;
    TxnPtr txn;
    std::unique_ptr<LockOwner> plain;  // a plain request's own locks
    bool entered = false;              // counted in its transaction's requests in flight
    bool mutating = false;             // took an X or IX lock: the request changes the tree
    bool doomed = false;               // its transaction is abort-only: served as a plain request
    int err = 0;
    // Directories a plain request took IX or X on while views were open: each counted
    // in Views::plain_changing until the request ends (Op::plain_changes_dir).
    std::vector<uint64_t> changing;
    State() = default;
    // A moved-from State is empty: it releases and leaves nothing.
    State(State &&o) noexcept { *this = std::move(o); }
    State &operator=(State &&o) noexcept;
    // Releases a plain request's locks; leaves its transaction.
    ~State();
  };

  explicit Op(fuse_req_t req);
  // For a WRITE through the open file `fi`: one that names no caller (the kernel's
  // writeback of a shared mapping) belongs to the transaction that opened `fi` for
  // writing, if that one has not committed (TxnManager::writer_of, txn_writers.cc).
  Op(fuse_req_t req, const fuse_file_info *fi);
  ~Op();
  Op(const Op &) = delete;
  Op &operator=(const Op &) = delete;

  // Non-zero when the request must fail before it starts (its transaction is
  // abort-only or ending, or over its limits).
  int error() const { return s_.err; }
  // For requests that only read (getattr, lookup): a transaction that can only abort
  // is still served -- as a plain request, seeing the committed state it will return
  // to -- so that its own thread can reach the control channel to end it.
  int read_error() const { return s_.doomed ? 0 : s_.err; }
  Txn *txn() const { return s_.txn.get(); }
  bool cacheable() const { return !s_.txn; }
  // A plain request while transactions are open: it must not see their changes.
  bool plain_isolated() const { return !s_.txn && !lockless_; }
  Fs &fs() const { return fs_; }

  // The inode a request acts on, and the errno to reply with instead (0: go on).
  struct Target {
    InodePtr inode;
    int err = 0;
  };
  // The opening most handlers share: error() when the request must fail, else ESTALE
  // when `nodeid` is unknown, else the result of taking `mode` on the object:
  //   auto [i, err] = op.on(nodeid, LockMode::X);
  Target on(uint64_t nodeid, LockMode mode);
  // The same without a lock (the handler takes its own, or needs none).
  Target on(uint64_t nodeid);
  // As on(nodeid), for requests that only read: read_error() instead of error().
  Target on_read(uint64_t nodeid);

  // Takes `mode` on `key`; returns 0 or an errno to reply with. A transaction that
  // cannot get a lock (deadlock victim, timeout) becomes abort-only. Inside a wrapped
  // handler a lock that must wait parks the request and throws park::Unwind.
  int lock(const LockKey &key, LockMode mode);
  int lock_object(uint64_t nodeid, LockMode mode) { return lock(LockKey::object(nodeid), mode); }
  // IX (or IS for reads) on the directory and X (or S) on the entry.
  int lock_entry(uint64_t dir, const char *name, bool write);

  // fi->fh for the backing fd `fd` of an open of `inode` this request makes; an open
  // with write access by a transaction is registered as that transaction's writer.
  void set_fh(fuse_file_info *fi, int fd, const InodePtr &inode) const;
  // After set_fh: lets the kernel read and write the backing file itself when the open
  // is of a regular file this request's transaction made, through its view (or of an
  // inode that already has such an open: views.h).
  void passthrough(fuse_file_info *fi, const Inode &inode) const;

  // Attributes as this request's transaction must see them.
  void adjust(struct stat &st) const {
    if (s_.txn) s_.txn->adjust(st, fs_.nodeid_of(st.st_ino));
    fs_.txns->adjust_lazy(st, fs_.nodeid_of(st.st_ino));
  }

  // Cache lifetimes of a reply. What a transaction changed (`changed_entry`: the
  // entry itself; and every object it touched that existed before it) must not outlive
  // the reply in a kernel cache; what it only read is committed state, which it keeps
  // locked until it ends; what it made only it can reach until it ends.
  void set_timeouts(fuse_entry_param &e, bool changed_entry = false) const;
  double attr_timeout(uint64_t nodeid) const;
  // Whether a name in directory `parent` that this request's transaction changed is
  // reachable by others: not in a directory the transaction made, which no one else
  // can reach (its own name lives in a directory that existed before, and gets no
  // cache lifetime). Names in made directories may therefore be cached: the walks
  // through a tree the transaction creates then look up only its top.
  bool shared_name(uint64_t parent) const { return s_.txn && !s_.txn->made(parent); }

  // The next Op constructed on this thread continues with `s` (a resumed request).
  static void adopt_next(std::unique_ptr<State> s);
  // Drops a state adopt_next() left that no Op took.
  static void drop_adopted();

 private:
  // Parks the request until `mode` on `key` is granted; returns only when that wait was
  // answered at once (0 or an errno), else throws park::Unwind.
  int park(LockOwner &owner, const LockKey &key, LockMode mode, std::chrono::milliseconds timeout);

  void start(const fuse_file_info *writeback_fi);
  void plain_changes_dir(uint64_t nodeid);

  fuse_req_t req_;
  Fs &fs_;
  State s_;
  bool lockless_ = false;  // counted in fs.unlocked_inflight
};

}  // namespace txnfs
