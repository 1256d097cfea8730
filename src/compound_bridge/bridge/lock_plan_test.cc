// The lock plan of a COMPOUND (lock_plan.h): what each operation asks for, how handles
// are read, and when the plan is partial.
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "compound_bridge/bridge/lock_plan.h"
#include "txnfs/txnfs.h"

using txnfs::bridge::LockPlan;
using txnfs::bridge::nodeid_of_handle;
using txnfs::bridge::plan_locks;

namespace {

// The records of a plan, one line each: "node 7", "child 0 d", "object 1 A", "entry 0 d X".
std::vector<std::string> lines(const LockPlan &p) {
  static const char *kMode[] = {"IS", "IX", "S", "X", "A"};  // A: TXNFS_LOCK_ATTRS
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < p.records.size()) {
    txnfs_lock_rec r;
    std::memcpy(&r, p.records.data() + pos, sizeof r);
    std::string name = p.records.substr(pos + sizeof r, r.name_len);
    pos += (sizeof r + r.name_len + 7) & ~size_t(7);
    switch (r.kind) {
      case TXNFS_REC_NODE:
        out.push_back("node " + std::to_string(r.node));
        break;
      case TXNFS_REC_CHILD:
        out.push_back("child " + std::to_string(r.ref) + " " + name);
        break;
      case TXNFS_REC_LOCK_OBJECT:
        out.push_back("object " + std::to_string(r.ref) + " " + kMode[r.mode]);
        break;
      default:
        out.push_back("entry " + std::to_string(r.ref) + " " + name + " " + kMode[r.mode]);
    }
  }
  return out;
}

txnfs_bridge_op named(uint32_t opcode, const char *name, uint32_t flags = 0) {
  txnfs_bridge_op o{};
  o.opcode = opcode;
  o.flags = flags;
  o.name = name;
  o.name_len = uint32_t(std::strlen(name));
  return o;
}

txnfs_bridge_op bare(uint32_t opcode) {
  return txnfs_bridge_op{opcode, 0, nullptr, nullptr, nullptr, 0, 0, 0, 0};
}

// Ganesha's NFSv4 handle of FSAL_VFS for a FUSE object: fsid type Major64, one-byte
// kernel handle type 0x81, nodeid (two u32, high first) and generation.
std::vector<uint8_t> fuse_handle(uint64_t nodeid) {
  std::vector<uint8_t> h = {0x41, 0, 1, 0, 0};
  std::vector<uint8_t> vfs = {uint8_t(0x40 | 2)};
  vfs.insert(vfs.end(), 8, 0);  // fsid
  vfs.push_back(0x81);
  uint32_t w[3] = {uint32_t(nodeid >> 32), uint32_t(nodeid), 1};
  const uint8_t *b = reinterpret_cast<const uint8_t *>(w);
  vfs.insert(vfs.end(), b, b + sizeof w);
  h[4] = uint8_t(vfs.size());
  h.insert(h.end(), vfs.begin(), vfs.end());
  return h;
}

}  // namespace

TEST_CASE("lock plan: a file created and written below the root", "[bridge]") {
  std::vector<txnfs_bridge_op> ops = {
      bare(53),       bare(24),
      named(15, "d"), named(18, "f", TXNFS_BRIDGE_OP_CREATE | TXNFS_BRIDGE_OP_CLAIM_NULL),
      bare(38),       bare(4)};
  LockPlan p = plan_locks(ops.data(), uint32_t(ops.size()), 1);
  CHECK_FALSE(p.partial);
  CHECK(lines(p) ==
        std::vector<std::string>{"node 1", "object 0 A",  // PUTROOTFH
                                 "object 0 IS", "entry 0 d S", "child 0 d", "object 1 A",  // LOOKUP
                                 "object 1 IX", "entry 1 f X", "child 1 f", "object 2 A",  // OPEN
                                 "object 2 X",    // (truncation)
                                 "object 2 X"});  // WRITE
}

TEST_CASE("lock plan: handles, saved filehandles and rename", "[bridge]") {
  std::vector<uint8_t> a = fuse_handle(0x100000007), b = fuse_handle(9);
  CHECK(nodeid_of_handle(a.data(), uint32_t(a.size())) == 0x100000007);
  CHECK(nodeid_of_handle(a.data(), 7) == 0);  // cut short
  txnfs_bridge_op pa = bare(22), pb = bare(22);
  pa.fh = a.data(), pa.fh_len = uint32_t(a.size());
  pb.fh = b.data(), pb.fh_len = uint32_t(b.size());
  txnfs_bridge_op rename = named(29, "x");
  rename.name2 = "y", rename.name2_len = 1;
  std::vector<txnfs_bridge_op> ops = {pa, bare(32), pb, rename};
  LockPlan p = plan_locks(ops.data(), uint32_t(ops.size()), 1);
  CHECK_FALSE(p.partial);
  CHECK(lines(p) == std::vector<std::string>{"node 4294967303", "object 0 A", "node 9",
                                             "object 1 A", "object 0 IX", "object 1 IX",
                                             "entry 0 x X", "entry 1 y X", "child 0 x",
                                             "object 2 X", "child 1 y", "object 3 X"});
}

TEST_CASE("lock plan: what cannot be named in advance makes it partial", "[bridge]") {
  // Below a directory the COMPOUND creates: only the entry above it is predeclared.
  std::vector<txnfs_bridge_op> made = {
      bare(24), named(6, "d"), named(18, "f", TXNFS_BRIDGE_OP_CREATE | TXNFS_BRIDGE_OP_CLAIM_NULL),
      bare(38)};
  LockPlan p = plan_locks(made.data(), uint32_t(made.size()), 1);
  CHECK(p.partial);
  CHECK(lines(p) == std::vector<std::string>{"node 1", "object 0 A", "object 0 IX", "entry 0 d X",
                                             "child 0 d", "child 1 f"});
  // A handle that is not a FUSE object's, and an operation the plan does not know.
  uint8_t junk[8] = {0x41, 0, 0, 0, 3, 0, 0, 0};
  txnfs_bridge_op putfh = bare(22);
  putfh.fh = junk, putfh.fh_len = sizeof junk;
  std::vector<txnfs_bridge_op> odd = {putfh, bare(38)};
  CHECK(plan_locks(odd.data(), uint32_t(odd.size()), 1).partial);
  std::vector<txnfs_bridge_op> unknown = {bare(24), bare(19), bare(38)};
  LockPlan u = plan_locks(unknown.data(), uint32_t(unknown.size()), 1);
  CHECK(u.partial);
  CHECK(u.locks == 1);  // PUTROOTFH's ATTRS only
}
