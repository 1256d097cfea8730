#include "txnfuse/fuse/lock_set.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "store/unique_fd.h"
#include "txnfs/txnfs.h"

namespace txnfs {

namespace {

// A reference of the set, resolved: its nodeid, and an fd to look names up in.
struct Ref {
  uint64_t nodeid = 0;
  int fd = -1;  // borrowed from `pin` or owned by `own`
  InodePtr inode;
  UniqueFd own;
  InodeFd pin;  // the inode's O_PATH fd, pinned in the fd cache while the set resolves
};

bool valid_name(std::string_view n, bool dotdot_ok) {
  if (n.empty() || n.size() > TXNFS_LOCK_REC_NAME_MAX) return false;
  if (n.find('/') != std::string_view::npos || n.find('\0') != std::string_view::npos) return false;
  if (n == ".") return false;
  return dotdot_ok || n != "..";
}

}  // namespace

// The mode of a LOCK_OBJECT record on REF: TXNFS_LOCK_ATTRS is what reading attributes
// takes (op_getattr): IS on a directory, S on anything else.
LockMode object_mode(const Ref &ref, uint8_t mode) {
  if (mode != TXNFS_LOCK_ATTRS) return LockMode(mode);
  struct stat st;
  return ::fstat(ref.fd, &st) == 0 && S_ISDIR(st.st_mode) ? LockMode::IS : LockMode::S;
}

int acquire_lock_set(Fs &fs, const TxnPtr &txn, std::string_view records,
                     std::chrono::milliseconds timeout, std::function<void(int)> done) {
  Txn &t = *txn;
  // Invariant: refs[i] is the i-th NODE/CHILD record, nullopt when it did not resolve;
  // a lock on an unresolved reference is left out (its requests lock as usual).
  std::vector<std::optional<Ref>> refs;
  std::vector<std::pair<LockKey, LockMode>> set;
  size_t pos = 0;
  while (pos < records.size()) {
    txnfs_lock_rec r;
    if (records.size() - pos < sizeof r) return EBADMSG;
    std::memcpy(&r, records.data() + pos, sizeof r);
    size_t size = (sizeof r + r.name_len + 7) & ~size_t(7);
    if (size > records.size() - pos) return EBADMSG;
    std::string_view name = records.substr(pos + sizeof r, r.name_len);
    pos += size;
    bool needs_ref = r.kind != TXNFS_REC_NODE;
    if (needs_ref && r.ref >= refs.size()) return EBADMSG;
    if (r.mode > TXNFS_LOCK_ATTRS ||
        (r.mode == TXNFS_LOCK_ATTRS && r.kind != TXNFS_REC_LOCK_OBJECT))
      return EBADMSG;
    const std::optional<Ref> *base = needs_ref ? &refs[r.ref] : nullptr;
    switch (r.kind) {
      case TXNFS_REC_NODE: {
        InodePtr i = r.node == FUSE_ROOT_ID ? fs.root : fs.inodes.get(r.node);
        InodeFd pin = i && !i->gone ? fs.pin(*i) : InodeFd(ESTALE);
        if (pin) {
          int fd = pin.get();
          refs.push_back(Ref{r.node, fd, i, {}, std::move(pin)});
        } else {
          refs.emplace_back();
        }
        break;
      }
      case TXNFS_REC_CHILD: {
        if (!valid_name(name, true)) return EBADMSG;
        std::optional<Ref> child;
        if (*base) {
          std::string n(name);
          bool root_up = (*base)->nodeid == FUSE_ROOT_ID && n == "..";
          UniqueFd fd(
              ::openat((*base)->fd, root_up ? "." : n.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
          struct stat st;
          if (fd && ::fstat(fd.get(), &st) == 0) {
            child.emplace();
            child->nodeid = fs.nodeid_of(st.st_ino);
            child->fd = fd.get();
            child->own = std::move(fd);
          }
        }
        refs.push_back(std::move(child));
        break;
      }
      case TXNFS_REC_LOCK_OBJECT:
        if (*base) set.push_back({LockKey::object((*base)->nodeid), object_mode(**base, r.mode)});
        break;
      case TXNFS_REC_LOCK_ENTRY:
        if (!valid_name(name, false)) return EBADMSG;
        if (*base) set.push_back({LockKey{(*base)->nodeid, std::string(name)}, LockMode(r.mode)});
        break;
      default:
        return EBADMSG;
    }
  }
  if (t.state.load() != TXNFS_ACTIVE) return ENOENT;
  if (fs.locks.counts(t).first != 0) return EBUSY;
  // Ended while it waited (its owner died: the reaper aborted it, releasing what it held,
  // which was nothing yet): the locks just granted must not outlive it.
  auto granted = [&fs, txn](int err) {
    if (err) return err;
    int s = txn->state.load();
    if (s != TXNFS_ACTIVE && s != TXNFS_ABORT_ONLY) {
      fs.locks.release_all(*txn);
      return ENOENT;
    }
    return 0;
  };
  // The wait occupies no thread (a ring thread must not wait up to the set's 20 s):
  // the outcome is handed to `done` from the resume threads.
  int err = fs.locks.acquire_set_async(t, set, timeout, [&fs, granted, done](int e) {
    fs.resumer.post([granted, done, e] { done(granted(e)); });
  });
  return err == LockManager::kParked ? err : granted(err);
}

}  // namespace txnfs
