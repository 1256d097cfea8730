#include "compound_bridge/bridge/lock_plan.h"

#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "txnfs/txnfs.h"

namespace txnfs::bridge {

namespace {

// NFSv4 operation numbers (RFC 7530, RFC 8881, RFC 7862, RFC 8276).
enum Op : uint32_t {
  ACCESS = 3,
  CLOSE = 4,
  COMMIT = 5,
  CREATE = 6,
  DELEGPURGE = 7,
  DELEGRETURN = 8,
  GETATTR = 9,
  GETFH = 10,
  LINK = 11,
  LOCK = 12,
  LOCKT = 13,
  LOCKU = 14,
  LOOKUP = 15,
  LOOKUPP = 16,
  NVERIFY = 17,
  OPEN = 18,
  OPEN_CONFIRM = 20,
  OPEN_DOWNGRADE = 21,
  PUTFH = 22,
  PUTPUBFH = 23,
  PUTROOTFH = 24,
  READ = 25,
  READDIR = 26,
  READLINK = 27,
  REMOVE = 28,
  RENAME = 29,
  RENEW = 30,
  RESTOREFH = 31,
  SAVEFH = 32,
  SETATTR = 34,
  SETCLIENTID = 35,
  SETCLIENTID_CONFIRM = 36,
  VERIFY = 37,
  WRITE = 38,
  RELEASE_LOCKOWNER = 39,
  FREE_STATEID = 45,
  SEQUENCE = 53,
  TEST_STATEID = 55,
  RECLAIM_COMPLETE = 58,
  ALLOCATE = 59,
  DEALLOCATE = 62,
  READ_PLUS = 68,
  SEEK = 69,
  GETXATTR = 72,
  SETXATTR = 73,
  LISTXATTRS = 74,
  REMOVEXATTR = 75,
};

constexpr uint8_t kFuseHandleType = 0x81;  // fs/fuse/inode.c: nodeid (2 x u32) + generation

class Planner {
 public:
  explicit Planner(uint64_t root) : root_(root) {}

  // A reference to the object nodeid N.
  uint32_t node(uint64_t n) {
    auto [it, fresh] = nodes_.emplace(n, next_);
    if (fresh) add(TXNFS_REC_NODE, 0, 0, n, {});
    return it->second;
  }
  // A reference to the object NAME in directory reference DIR.
  uint32_t child(uint32_t dir, std::string_view name) {
    auto [it, fresh] = children_.emplace(std::make_pair(dir, std::string(name)), next_);
    if (fresh) add(TXNFS_REC_CHILD, 0, dir, 0, name);
    if (made_.count(dir)) made_.insert(it->second);  // below a new directory: new too
    return it->second;
  }
  // REF names an object the COMPOUND creates (CREATE): it cannot be resolved before it
  // runs, and nothing below it can.
  void created(uint32_t ref) { made_.insert(ref); }
  // Locks on created objects and their entries are left to their requests.
  void object(uint32_t ref, uint8_t mode) {
    if (made_.count(ref)) {
      plan.partial = true;
      return;
    }
    add(TXNFS_REC_LOCK_OBJECT, mode, ref, 0, {});
    ++plan.locks;
  }
  void entry(uint32_t dir, std::string_view name, uint8_t mode) {
    if (made_.count(dir)) {
      plan.partial = true;
      return;
    }
    add(TXNFS_REC_LOCK_ENTRY, mode, dir, 0, name);
    ++plan.locks;
  }
  uint64_t root() const { return root_; }

  LockPlan plan;

 private:
  void add(uint8_t kind, uint8_t mode, uint32_t ref, uint64_t node, std::string_view name) {
    txnfs_lock_rec r{};
    r.kind = kind;
    r.mode = mode;
    r.name_len = uint16_t(name.size());
    r.ref = ref;
    r.node = node;
    plan.records.append(reinterpret_cast<const char *>(&r), sizeof r);
    plan.records.append(name);
    plan.records.append((8 - (sizeof r + name.size()) % 8) % 8, '\0');
    if (kind == TXNFS_REC_NODE || kind == TXNFS_REC_CHILD) ++next_;
  }

  uint64_t root_;
  uint32_t next_ = 0;
  std::map<uint64_t, uint32_t> nodes_;
  std::map<std::pair<uint32_t, std::string>, uint32_t> children_;
  std::set<uint32_t> made_;
};

bool usable_name(const char *p, uint32_t len) {
  if (p == nullptr || len == 0 || len > TXNFS_LOCK_REC_NAME_MAX) return false;
  std::string_view n(p, len);
  return n != "." && n != ".." && n.find('/') == n.npos && n.find('\0') == n.npos;
}

}  // namespace

uint64_t nodeid_of_handle(const void *fh, uint32_t len) {
  // Ganesha's NFSv4 handle (file_handle_v4_t): version, flags, export id (2), fs_len,
  // then FSAL_VFS's wire handle: flags byte (fsid type | handle-type width | dummy),
  // the fsid, the kernel handle type (1, 2 or 4 bytes), the kernel handle.
  auto *b = static_cast<const uint8_t *>(fh);
  if (b == nullptr || len < 6) return 0;
  uint32_t fs_len = b[4];
  if (5 + fs_len > len || fs_len < 1) return 0;
  const uint8_t *h = b + 5;
  uint8_t flags = h[0];
  if (flags & 0x20) return 0;                                // HANDLE_DUMMY
  static const uint32_t kFsidBytes[] = {0, 8, 8, 16, 8, 8};  // enum fsid_type
  uint32_t fsid_type = flags & 0x1f;
  if (fsid_type >= sizeof kFsidBytes / sizeof kFsidBytes[0]) return 0;
  uint32_t pos = 1 + kFsidBytes[fsid_type];
  int32_t type = 0;
  switch (flags & 0xc0) {
    case 0x40:
      if (pos + 1 > fs_len) return 0;
      type = h[pos];
      pos += 1;
      break;
    case 0x80: {
      int16_t t16;
      if (pos + 2 > fs_len) return 0;
      std::memcpy(&t16, h + pos, 2);
      type = t16;
      pos += 2;
      break;
    }
    case 0xc0:
      if (pos + 4 > fs_len) return 0;
      std::memcpy(&type, h + pos, 4);
      pos += 4;
      break;
    default:
      return 0;
  }
  if (type != kFuseHandleType || fs_len - pos != 12) return 0;
  uint32_t w[2];
  std::memcpy(w, h + pos, 8);
  return uint64_t(w[0]) << 32 | w[1];
}

LockPlan plan_locks(const txnfs_bridge_op *ops, uint32_t n, uint64_t root_nodeid) {
  Planner p(root_nodeid);
  // The current and saved filehandles: a reference, or nullopt when it cannot be followed.
  std::optional<uint32_t> cur, saved;
  bool cur_set = false, saved_set = false;  // nullopt + !set: no filehandle yet (nothing to lock)
  auto lost = [&](bool needed) {
    if (needed) p.plan.partial = true;
  };
  // Marks the current object with MODE; an unknown current filehandle makes the plan partial.
  auto on_cur = [&](uint8_t mode) {
    if (cur) p.object(*cur, mode);
    else lost(cur_set);
  };
  auto position = [&](std::optional<uint32_t> ref) {
    cur = ref;
    cur_set = true;
    if (cur) p.object(*cur, TXNFS_LOCK_ATTRS);  // Ganesha reads its attributes
  };
  for (uint32_t i = 0; i < n; i++) {
    const txnfs_bridge_op &o = ops[i];
    bool named = usable_name(o.name, o.name_len);
    switch (o.opcode) {
      case PUTFH: {
        uint64_t node = nodeid_of_handle(o.fh, o.fh_len);
        if (node == 0) p.plan.partial = true;
        position(node ? std::optional<uint32_t>(p.node(node)) : std::nullopt);
        break;
      }
      case PUTROOTFH:
      case PUTPUBFH:
        position(p.root() ? std::optional<uint32_t>(p.node(p.root())) : std::nullopt);
        if (!p.root()) p.plan.partial = true;
        break;
      case SAVEFH:
        saved = cur;
        saved_set = cur_set;
        break;
      case RESTOREFH:
        cur = saved;
        cur_set = saved_set;
        break;
      case LOOKUP:
        if (cur && named) {
          p.object(*cur, TXNFS_LOCK_IS);
          p.entry(*cur, {o.name, o.name_len}, TXNFS_LOCK_S);
          position(p.child(*cur, {o.name, o.name_len}));
        } else {
          lost(cur_set && !cur);
          position(std::nullopt);
        }
        break;
      case LOOKUPP:
        lost(cur_set && !cur);
        position(cur ? std::optional<uint32_t>(p.child(*cur, "..")) : std::nullopt);
        break;
      case OPEN:
        if (o.flags & TXNFS_BRIDGE_OP_CLAIM_FH) {
          on_cur(TXNFS_LOCK_S);
        } else if ((o.flags & TXNFS_BRIDGE_OP_CLAIM_NULL) && cur && named) {
          bool create = o.flags & TXNFS_BRIDGE_OP_CREATE;
          std::string_view name(o.name, o.name_len);
          p.object(*cur, create ? TXNFS_LOCK_IX : TXNFS_LOCK_IS);
          p.entry(*cur, name, create ? TXNFS_LOCK_X : TXNFS_LOCK_S);
          uint32_t file = p.child(*cur, name);
          position(file);
          if (create) p.object(file, TXNFS_LOCK_X);  // an existing file is truncated
        } else {
          lost(true);
          position(std::nullopt);
        }
        break;
      case CREATE:
        if (cur && named) {
          std::string_view name(o.name, o.name_len);
          p.object(*cur, TXNFS_LOCK_IX);
          p.entry(*cur, name, TXNFS_LOCK_X);
          uint32_t made = p.child(*cur, name);
          p.created(made);
          position(made);
        } else {
          lost(true);
          position(std::nullopt);
        }
        break;
      case REMOVE:
        if (cur && named) {
          std::string_view name(o.name, o.name_len);
          p.object(*cur, TXNFS_LOCK_IX);
          p.entry(*cur, name, TXNFS_LOCK_X);
          p.object(p.child(*cur, name), TXNFS_LOCK_X);
        } else {
          lost(true);
        }
        break;
      case RENAME:  // saved: source directory, current: target directory
        if (cur && saved && named && usable_name(o.name2, o.name2_len)) {
          std::string_view from(o.name, o.name_len), to(o.name2, o.name2_len);
          p.object(*saved, TXNFS_LOCK_IX);
          p.object(*cur, TXNFS_LOCK_IX);
          p.entry(*saved, from, TXNFS_LOCK_X);
          p.entry(*cur, to, TXNFS_LOCK_X);
          p.object(p.child(*saved, from), TXNFS_LOCK_X);
          p.object(p.child(*cur, to), TXNFS_LOCK_X);
        } else {
          lost(true);
        }
        break;
      case LINK:  // saved: the object, current: the target directory
        if (cur && saved && named) {
          std::string_view name(o.name, o.name_len);
          p.object(*cur, TXNFS_LOCK_IX);
          p.entry(*cur, name, TXNFS_LOCK_X);
          p.object(*saved, TXNFS_LOCK_X);
        } else {
          lost(true);
        }
        break;
      case GETATTR:
      case ACCESS:
      case VERIFY:
      case NVERIFY:
      case GETFH:
        on_cur(TXNFS_LOCK_ATTRS);
        break;
      case READ:
      case READ_PLUS:
      case READLINK:
      case READDIR:
      case SEEK:
      case GETXATTR:
      case LISTXATTRS:
        on_cur(TXNFS_LOCK_S);
        break;
      case WRITE:
      case SETATTR:
      case ALLOCATE:
      case DEALLOCATE:
      case SETXATTR:
      case REMOVEXATTR:
        on_cur(TXNFS_LOCK_X);
        break;
      // NFSv4 state only: nothing of the file system is locked.
      case SEQUENCE:
      case CLOSE:
      case COMMIT:
      case OPEN_CONFIRM:
      case OPEN_DOWNGRADE:
      case LOCK:
      case LOCKT:
      case LOCKU:
      case RENEW:
      case SETCLIENTID:
      case SETCLIENTID_CONFIRM:
      case RELEASE_LOCKOWNER:
      case DELEGPURGE:
      case DELEGRETURN:
      case TEST_STATEID:
      case FREE_STATEID:
      case RECLAIM_COMPLETE:
        break;
      default:  // not understood: its objects lock one by one, and so may the rest's
        p.plan.partial = true;
        cur.reset();
        saved.reset();
        break;
    }
  }
  return std::move(p.plan);
}

}  // namespace txnfs::bridge
