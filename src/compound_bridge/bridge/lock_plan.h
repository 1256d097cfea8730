// The lock set of a COMPOUND, derived from its decoded operations before the first one
// runs (docs/isolation.md, "Predeclared lock sets").
//
// The plan follows the current and saved filehandles through the COMPOUND: PUTFH names
// an object by the FUSE nodeid inside its FSAL_VFS handle, PUTROOTFH the export's root,
// LOOKUP / LOOKUPP / OPEN / CREATE a name below the current directory (resolved by the
// daemon), SAVEFH / RESTOREFH copy between the two. Each operation asks for the modes the
// FUSE requests it makes will take: ATTRS on every object it positions on (Ganesha refreshes
// its attributes: the daemon takes IS on a directory, S on anything else), IS + S entry for a lookup, IX + X entry (+ X on the object it
// replaces or removes) for a change of a name, X on an object written, S on one read.
//
// Invariants: the plan never names an object by a guess -- an operation on a filehandle
// the plan cannot follow (an unparsable handle, an unknown operation before it) makes the
// plan `partial`, and from there on that filehandle contributes no lock: those requests
// lock one by one as before. Names the daemon cannot resolve (an entry the COMPOUND
// creates, anything below it) likewise contribute nothing but the entry locks above
// them, which already keep every other transaction away from the new objects.
#pragma once
#include <cstdint>
#include <string>

#include "compound_bridge/txnfs_bridge.h"

namespace txnfs::bridge {

struct LockPlan {
  std::string records;   // txnfs_lock_rec records for txnfs_lock_set()
  uint32_t locks = 0;    // lock records in it
  bool partial = false;  // some operation's objects could not be named in advance
};

// The nodeid inside an FSAL_VFS handle of a FUSE object (kernel handle type 0x81:
// nodeid and generation), or 0.
uint64_t nodeid_of_handle(const void *fh, uint32_t len);

LockPlan plan_locks(const txnfs_bridge_op *ops, uint32_t n, uint64_t root_nodeid);

}  // namespace txnfs::bridge
