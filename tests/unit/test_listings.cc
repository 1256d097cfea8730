// Directory offsets and the snapshots of plain listings (src/txnfuse/fuse/listings.h).
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "txnfuse/fuse/listings.h"

using namespace txnfs;

namespace {

std::vector<ListedEntry> entries(std::vector<std::string> names, uint32_t first_cookie = 10) {
  std::vector<ListedEntry> out;
  uint32_t c = first_cookie;
  for (auto &n : names) out.push_back({n, 100 + out.size(), S_IFREG, c += 8});
  return out;
}

Listing listing(uint64_t dir, std::vector<std::string> names, bool by_cookie, uint64_t view = 0) {
  Listing l;
  l.dir = dir;
  l.view = view;
  l.by_cookie = by_cookie;
  l.entries = entries(std::move(names));
  return l;
}

std::vector<std::string> names_from(const Listing &l, size_t k) {
  std::vector<std::string> out;
  for (; k < l.entries.size(); k++) out.push_back(l.entries[k].name);
  return out;
}

}  // namespace

TEST_CASE("snapshot offsets never look like an XFS cookie, and XFS cookies never like them") {
  for (uint64_t c : {uint64_t(1), uint64_t(0x200), dir_offset::kXfsMax}) {
    CHECK_FALSE(dir_offset::is_snapshot(c));
  }
  for (uint32_t id : {1u, 77u, dir_offset::kIdMask}) {
    for (bool pos : {false, true}) {
      for (uint64_t low : {uint64_t(0), uint64_t(12), dir_offset::kXfsMax}) {
        uint64_t off = dir_offset::make(id, pos, low);
        CHECK(off > dir_offset::kXfsMax);
        CHECK(int64_t(off) > 0);  // an off_t the kernel accepts
        CHECK(dir_offset::is_snapshot(off));
        CHECK(dir_offset::id_of(off) == id);
        CHECK(dir_offset::by_position(off) == pos);
        CHECK(dir_offset::low(off) == low);
      }
    }
  }
  CHECK_FALSE(dir_offset::is_snapshot(dir_offset::kSnapshot));  // id 0 is no one's
  CHECK_FALSE(dir_offset::is_snapshot(uint64_t(1) << 63 | dir_offset::make(5, true, 1)));
}

TEST_CASE("a listing finds where each of its offsets goes on, and no other offset") {
  ListingSnapshots reg;
  for (bool by_cookie : {true, false}) {
    auto l = reg.add(listing(1, {".", "..", "a", "b", "c"}, by_cookie));
    for (size_t k = 0; k < l->entries.size(); k++) CHECK(l->position(l->offset_after(k)) == k + 1);
    CHECK(l->position(dir_offset::make(l->id + 1, !by_cookie, 1)) == Listing::npos);
    CHECK(l->position(dir_offset::make(l->id, by_cookie, 1)) == Listing::npos);  // other kind
    CHECK(l->position(dir_offset::make(l->id, !by_cookie, 9999)) == Listing::npos);
    CHECK(l->position(12) == Listing::npos);  // an XFS cookie
  }
}

TEST_CASE("a rebased listing keeps what was given and gives every other name of now once") {
  Listing l = listing(1, {"a", "b", "c", "d"}, false, 7);
  l.id = 3;
  auto now = entries({"d", "x", "b", "y"});
  Listing r = l.rebased(2, now, 0);
  CHECK(r.view == 0);
  CHECK_FALSE(r.by_cookie);
  CHECK(names_from(r, 0) == std::vector<std::string>{"a", "b", "d", "x", "y"});
  CHECK(names_from(r, 2) == std::vector<std::string>{"d", "x", "y"});
}

TEST_CASE("the same listing of a directory takes one snapshot; a changed one a new one") {
  ListingSnapshots reg;
  auto a = reg.add(listing(1, {"a", "b"}, true));
  auto b = reg.add(listing(1, {"a", "b"}, true));
  CHECK(a == b);
  auto c = reg.add(listing(1, {"a", "b", "c"}, true));
  CHECK(c->id != a->id);
  auto t = reg.add(listing(1, {"a", "b", "c"}, false, 9));  // a transaction's view
  CHECK(t->id != c->id);
  CHECK(reg.count() == 3);
  CHECK(reg.find(a->id, 1) == a);
  CHECK(reg.find(a->id, 2) == nullptr);  // another directory's offset
}

TEST_CASE("snapshots are kept least recently used first out, by count and by bytes") {
  ListingSnapshots reg(3, size_t(1) << 30);
  auto s1 = reg.add(listing(1, {"a"}, true));
  auto s2 = reg.add(listing(2, {"a"}, true));
  auto s3 = reg.add(listing(3, {"a"}, true));
  CHECK(reg.find(s1->id, 1));  // now the most recently used
  auto s4 = reg.add(listing(4, {"a"}, true));
  CHECK(reg.count() == 3);
  CHECK(reg.find(s2->id, 2) == nullptr);
  CHECK(reg.find(s1->id, 1));
  CHECK(reg.find(s3->id, 3));
  CHECK(reg.find(s4->id, 4));

  std::vector<std::string> many;
  for (int k = 0; k < 1000; k++) many.push_back("a-fairly-long-name-" + std::to_string(k));
  ListingSnapshots small(100, 64 << 10);
  auto big1 = small.add(listing(1, many, true));
  CHECK(small.count() == 1);  // the newest stays, however large
  auto big2 = small.add(listing(2, many, true));
  CHECK(small.count() == 1);
  CHECK(small.find(big1->id, 1) == nullptr);
  CHECK(small.find(big2->id, 2) == big2);
  CHECK(small.bytes() == big2->bytes);
}

TEST_CASE("snapshot ids are distinct and never 0") {
  ListingSnapshots reg(10000);
  std::set<uint32_t> ids;
  for (uint64_t d = 1; d <= 5000; d++) {
    auto l = reg.add(listing(d, {"a"}, true));
    CHECK(l->id != 0);
    ids.insert(l->id);
  }
  CHECK(ids.size() == 5000);
}
