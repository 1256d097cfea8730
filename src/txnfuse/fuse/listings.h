// Listings — what the offsets (d_off) of a directory listing mean, and the snapshots
// plain listings are served from while transactions are open.
//
// An offset must mean the same thing to every later opener of the directory, whether
// transactions are open or not when it is handed out and when it comes back: NFS-Ganesha
// (MDCACHE Dir_Chunk = 0) opens the directory anew for every READDIR and seeks to the
// client's cookie, and seekdir() after a reopen does the same locally. So an offset's
// value alone says what it is:
//
//   0                      the start
//   1 .. 0x7fffffff        an XFS directory cookie: continue the tree's own listing there.
//                          XFS hands out 32-bit dataptrs masked to 31 bits (its
//                          end-of-directory value included: 0x200 for a short-form or
//                          block directory, at most 0x7fffffff for larger ones), and
//                          reads a larger offset truncated to 32 bits, so no other offset
//                          may ever reach it.
//   bit 62 set             a snapshot's: bits 31..60 its id, bit 61 clear: the low 31 bits
//                          are the XFS cookie of the tree's entry it follows (the snapshot
//                          is the tree's listing: no open transaction had changed the
//                          directory); bit 61 set: the low 31 bits are a position in the
//                          snapshot (entries open transactions removed have no cookie).
//   anything else          handed out by no one: EINVAL.
//
// Snapshots are kept here, least recently used first out, until `max_count` newer ones
// or `max_bytes` of them push them out or the daemon stops (ids start at random, so one
// of an earlier run is almost never taken for one of this run). A continuation of a
// snapshot that is gone goes on with the tree's listing at the cookie when its offset
// carries one (what a plain listing would have done), and fails with EINVAL when it
// carries a position (NFS-Ganesha answers NFS4ERR_INVAL).
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sync/mutex.h"
#include "txnfuse/txn/committed_view.h"

namespace txnfs {

namespace dir_offset {
inline constexpr uint64_t kXfsMax = 0x7fffffff;  // the largest offset XFS hands out
inline constexpr uint64_t kSnapshot = uint64_t(1) << 62;
inline constexpr uint64_t kByPosition = uint64_t(1) << 61;
inline constexpr int kIdShift = 31;
inline constexpr uint32_t kIdMask = (uint32_t(1) << 30) - 1;
inline constexpr uint64_t kLowMask = kXfsMax;

inline bool is_snapshot(uint64_t off) {
  return (off >> 62) == 1 && ((off >> kIdShift) & kIdMask) != 0;
}
inline uint32_t id_of(uint64_t off) { return uint32_t(off >> kIdShift) & kIdMask; }
inline bool by_position(uint64_t off) { return off & kByPosition; }
inline uint32_t low(uint64_t off) { return uint32_t(off & kLowMask); }
inline uint64_t make(uint32_t id, bool by_position, uint64_t low) {
  return kSnapshot | (by_position ? kByPosition : 0) | (uint64_t(id & kIdMask) << kIdShift) |
         (low & kLowMask);
}
}  // namespace dir_offset

// One snapshot of a directory's listing. Immutable once registered.
struct Listing {
  uint64_t dir = 0;        // the directory's nodeid
  uint64_t view = 0;       // whose view it shows: 0 the committed state, else a transaction's id
  bool by_cookie = false;  // its entries carry the tree's cookies (see the top)
  int64_t ctime_ns = 0;    // the tree directory's ctime before it was read
  std::vector<ListedEntry> entries;
  uint32_t id = 0;  // given by ListingSnapshots::add
  size_t bytes = 0;

  static constexpr size_t npos = size_t(-1);
  // The offset handed out with entry k: where the listing goes on after it.
  uint64_t offset_after(size_t k) const {
    return dir_offset::make(id, !by_cookie, by_cookie ? entries[k].cookie : k + 1);
  }
  // The first entry to serve for `off`, one of this listing's offsets; npos if it is not.
  size_t position(uint64_t off) const;
  // A listing that gives the first k entries of this one, then the names of `now` (in
  // its order) that they did not give: each name once, and every name of `now` (for a
  // reader whose view this one is not: a transaction's, or the committed state now).
  Listing rebased(size_t k, const std::vector<ListedEntry> &now, uint64_t view) const;
};

class ListingSnapshots {
 public:
  explicit ListingSnapshots(size_t max_count = 4096, size_t max_bytes = size_t(64) << 20);

  // Registers `l` and returns it with its id -- or, when the latest snapshot of the same
  // directory and view has the same entries, that one (a directory listed again and
  // again while it does not change takes one slot).
  std::shared_ptr<const Listing> add(Listing l) EXCLUDES(mu_);
  // The snapshot with `id` of directory `dir`, if it is still kept (now the most
  // recently used).
  std::shared_ptr<const Listing> find(uint32_t id, uint64_t dir) EXCLUDES(mu_);
  size_t count() EXCLUDES(mu_);
  size_t bytes() EXCLUDES(mu_);

 private:
  using Lru = std::list<std::shared_ptr<const Listing>>;  // most recently used first
  void evict() REQUIRES(mu_);

  const size_t max_count_, max_bytes_;
  Mutex mu_{LockRank::kListings};  // a leaf (src/sync/lock_order.h)
  Lru lru_ GUARDED_BY(mu_);
  std::unordered_map<uint32_t, Lru::iterator> by_id_ GUARDED_BY(mu_);
  std::map<std::pair<uint64_t, uint64_t>, uint32_t> latest_ GUARDED_BY(mu_);  // (dir, view)
  size_t bytes_ GUARDED_BY(mu_) = 0;
  uint32_t next_id_ GUARDED_BY(mu_);
};

}  // namespace txnfs
