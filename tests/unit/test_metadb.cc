#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <sys/wait.h>

#include <fstream>
#include <algorithm>
#include <set>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "store/error.h"
#include "store/handle_journal.h"
#include "store/metadb.h"
#include "tests/unit/tmpdir.h"

using namespace txnfs;

namespace {

HandleRow row(uint64_t nodeid, std::optional<uint64_t> parent = {}, std::string name = {}) {
  HandleRow r;
  r.nodeid = nodeid;
  r.generation = 7;
  r.ino = nodeid + 1000;
  r.fh = std::string("\x81\0\0\0abcdefghijkl", 16);
  r.type = 0100000;
  r.parent = parent;
  r.name = name;
  return r;
}

void sql(const std::string &path, const char *stmt) {
  sqlite3 *db;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, stmt, nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}

}  // namespace

TEST_CASE("a new database carries the schema version and a store uuid") {
  TmpDir t;
  auto db = MetaDb::create(t.path + "/m.db");
  CHECK(db->get_meta("schema_version") == std::to_string(kSchemaVersion));
  CHECK(db->get_meta("store_uuid")->size() == 36);
  CHECK(db->handle_count() == 0);
  CHECK_THROWS_AS(MetaDb::create(t.path + "/m.db"), Error);
}

TEST_CASE("handle rows round-trip, get uuids, and follow renames and removals") {
  TmpDir t;
  auto db = MetaDb::create(t.path + "/m.db");
  HandleRow dir = row(5, 1, "d");
  HandleRow file = row(6, 5, "f");
  db->put_handle(dir);
  db->put_handle(file);
  CHECK(file.uuid.size() == 36);
  CHECK(file.uuid != dir.uuid);

  auto got = db->handle(6);
  REQUIRE(got);
  CHECK(got->uuid == file.uuid);
  CHECK(got->fh == file.fh);
  CHECK(got->parent == 5u);
  CHECK(got->name == "f");
  CHECK(got->generation == 7);

  db->set_handle_name(6, 1, "g");
  CHECK(db->handle(6)->name == "g");
  CHECK(db->handle(6)->parent == 1u);
  db->clear_handle_name(1, "g");
  CHECK_FALSE(db->handle(6)->parent.has_value());

  db->remove_handle(6);
  CHECK_FALSE(db->handle(6));
  CHECK(db->handle_count() == 1);
}

TEST_CASE("handle uuids are random version-4 uuids, never repeated, also across a fork") {
  TmpDir t;
  auto db = MetaDb::create(t.path + "/m.db");
  std::set<std::string> seen;
  auto next = [&](uint64_t nodeid) {
    HandleRow r = row(nodeid);
    db->put_handle(r);
    return r.uuid;
  };
  for (uint64_t n = 10; n < 10 + 1000; n++) {  // several of the per-thread buffers
    std::string u = next(n);
    REQUIRE(u.size() == 36);
    CHECK(u[14] == '4');                                          // version 4
    CHECK(std::string("89ab").find(u[19]) != std::string::npos);  // RFC 4122 variant
    CHECK(seen.insert(u).second);
  }
  // A child must not hand out the bytes its parent hands out next.
  int pipefd[2];
  REQUIRE(::pipe(pipefd) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    HandleRow r = row(5000);
    try {
      db->put_handle(r);
    } catch (...) {
    }
    ssize_t w = ::write(pipefd[1], r.uuid.data(), r.uuid.size());
    ::_exit(w == 36 ? 0 : 1);
  }
  ::close(pipefd[1]);
  char buf[36] = {};
  ssize_t got = ::read(pipefd[0], buf, sizeof buf);
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(got == 36);
  std::string child(buf, 36);
  std::string parent = next(5001);
  CHECK(child != parent);
  CHECK(!seen.count(child));
}

TEST_CASE("a row for a reused inode number replaces the stale one") {
  TmpDir t;
  auto db = MetaDb::create(t.path + "/m.db");
  HandleRow a = row(9, 1, "a");
  db->put_handle(a);
  HandleRow b = row(9, 1, "b");
  b.generation = 8;
  db->put_handle(b);
  CHECK(db->handle_count() == 1);
  CHECK(db->handle(9)->generation == 8);
  CHECK(db->handle(9)->uuid == b.uuid);
}

TEST_CASE("a failed transaction leaves no trace") {
  TmpDir t;
  auto db = MetaDb::create(t.path + "/m.db");
  HandleRow a = row(3, 1, "a");
  CHECK_THROWS(db->transaction([&] {
    db->put_handle(a);
    throw std::runtime_error("boom");
  }));
  CHECK_FALSE(db->handle(3));
}

TEST_CASE("open refuses missing, foreign, corrupt and newer databases") {
  TmpDir t;
  std::string path = t.path + "/m.db";
  CHECK_THROWS_WITH(MetaDb::open(path), Catch::Contains("no metadata database"));

  std::ofstream(path) << std::string(8192, 'x');
  CHECK_THROWS_WITH(MetaDb::open(path), Catch::Contains("unreadable"));
  std::remove(path.c_str());

  MetaDb::create(path).reset();
  sql(path, "PRAGMA user_version = 99");
  CHECK_THROWS_WITH(MetaDb::open(path), Catch::Contains("schema version 99"));

  std::string other = t.path + "/other.db";
  sql(other, "CREATE TABLE x(y)");
  CHECK_THROWS_WITH(MetaDb::open(other), Catch::Contains("schema version 0"));
}

TEST_CASE("the database survives reopening") {
  TmpDir t;
  std::string path = t.path + "/m.db";
  std::string uuid;
  {
    auto db = MetaDb::create(path);
    HandleRow r = row(4, 1, "x");
    db->put_handle(r);
    uuid = r.uuid;
    db->sync();
  }
  auto db = MetaDb::open(path);
  REQUIRE(db->handle(4));
  CHECK(db->handle(4)->uuid == uuid);
}

TEST_CASE("damage rows mark the store until accepted, without duplicates, and stay as history") {
  TmpDir t;
  std::string path = t.path + "/m.db";
  {
    auto db = MetaDb::create(path);
    CHECK(db->open_damage().empty());
    db->add_damage("recovery", 5, {"step 1 (Data): missing", "step 2 (Removed): EEXIST"},
                   ".txnfs/damaged/5");
    // the same problem of the same transaction again (a recovery repeated after a crash)
    db->add_damage("recovery", 5, {"step 2 (Removed): EEXIST"}, ".txnfs/damaged/5-2");
    db->add_damage("abort", 9, {"step 2 (Removed): EEXIST"}, "");
  }
  auto db = MetaDb::open(path);  // durable across connections
  auto open = db->open_damage();
  REQUIRE(open.size() == 3);
  CHECK(open[0].txid == 5u);
  CHECK(open[0].source == "recovery");
  CHECK(open[0].kept == ".txnfs/damaged/5");
  CHECK(open[1].problem == "step 2 (Removed): EEXIST");
  CHECK(open[2].txid == 9u);
  CHECK(open[2].kept.empty());
  CHECK(!open[0].found.empty());

  CHECK(db->accept_damage(open[1].id) == 2);  // only what was seen
  auto left = db->open_damage();
  REQUIRE(left.size() == 1);
  CHECK(left[0].txid == 9u);
  // an accepted problem found again is a new mark
  db->add_damage("recovery", 5, {"step 1 (Data): missing"}, "");
  CHECK(db->open_damage().size() == 2);
}

TEST_CASE("a schema-3 database gets the damage table when opened for writing") {
  TmpDir t;
  std::string path = t.path + "/m.db";
  MetaDb::create(path);
  sql(path, "DROP TABLE damage; PRAGMA user_version = 3");
  CHECK_THROWS_WITH(MetaDb::open(path, true), Catch::Contains("schema version 3"));
  auto db = MetaDb::open(path);
  CHECK(db->upgraded_from() == 3);
  CHECK(db->open_damage().empty());
  db->add_damage("abort", 1, {"x"}, "");
  CHECK(db->open_damage().size() == 1);
}

TEST_CASE("handle rows kept back: read at once, in order with other changes, journaled") {
  TmpDir t;
  std::string path = t.path + "/m.db", journal = t.path + "/handles.journal";
  auto db = MetaDb::create(path);
  db->defer_handles(HandleJournal::open(journal));
  HandleRow a = row(10, 1, "a"), b = row(11, 1, "b");
  db->put_handle(a);
  db->put_handle(b);
  // Kept: the database does not have them yet, handle() does, the journal has both.
  {
    auto other = MetaDb::open(path, true);
    CHECK_FALSE(other->handle(10));
  }
  REQUIRE(db->handle(10));
  CHECK(db->handle(10)->name == "a");
  std::ifstream in(journal);
  std::string l1, l2;
  REQUIRE(std::getline(in, l1));
  REQUIRE(std::getline(in, l2));
  CHECK(decode_handle_line(l1)->row.uuid == a.uuid);
  CHECK(decode_handle_line(l2)->row.name == "b");
  // Another change of the table writes the kept rows first; the journal keeps them until
  // they are durable in SQLite (a replay of rows that have one changes nothing).
  db->set_handle_name(10, 1, "renamed");
  CHECK(db->handle(10)->name == "renamed");
  {
    auto other = MetaDb::open(path, true);
    REQUIRE(other->handle(11));
    CHECK(other->handle(10)->name == "renamed");
  }
  auto journal_lines = [&] {
    std::ifstream in(journal);
    size_t n = 0;
    for (std::string l; std::getline(in, l);) n++;
    return n;
  };
  CHECK(journal_lines() == 2);
  // Whether another connection finds nodeid's row in the table.
  auto in_table = [&](uint64_t nodeid) { return bool(MetaDb::open(path, true)->handle(nodeid)); };
  // A sync with nothing kept: all of it is durable in SQLite now, the journal goes.
  db->sync();
  CHECK(journal_lines() == 0);
  // A sync(false) (a group-commit round only the lazy-commit timer asked for) with rows
  // kept writes no SQLite transaction: the journal, synced, is what makes them durable
  // (recovery replays it). The settling flush empties it.
  HandleRow k = row(13, 1, "k");
  db->put_handle(k);
  db->sync(false);
  CHECK_FALSE(in_table(13));
  CHECK(journal_lines() == 1);
  db->flush_handles(true);
  CHECK(journal_lines() == 0);
  CHECK(in_table(13));
  // A plain sync() (a durable commit, an fsync) writes kept rows to SQLite first.
  db->remove_handle(13);
  HandleRow m = row(14, 1, "m");
  db->put_handle(m);
  db->sync();
  CHECK(in_table(14));
  CHECK_FALSE(in_table(13));
  CHECK(journal_lines() == 0);
  db->remove_handle(14);
  db->flush_handles(true);
  // A row put twice before a flush is kept once, the last one.
  HandleRow c = row(12, 1, "c");
  db->put_handle(c);
  c.name = "c2";
  db->put_handle(c);
  db->flush_handles();
  CHECK(db->handle(12)->name == "c2");
  CHECK(db->handle_count() == 3);
  // A removal is kept too: gone for handle() at once, from the table at the flush, and
  // a row put again afterwards (a reused inode number) survives it.
  db->remove_handle(11);
  CHECK_FALSE(db->handle(11));
  CHECK(in_table(11));
  db->remove_handle(12);
  HandleRow reused = row(12, 1, "again");
  db->put_handle(reused);
  db->flush_handles();
  CHECK_FALSE(db->handle(11));
  CHECK(db->handle(12)->name == "again");
  CHECK(db->handle_count() == 2);
}

TEST_CASE("a journal line round-trips; a torn or foreign one is refused") {
  HandleRow r = row(42, 7, std::string("a name\nwith \x01 bytes", 19));
  r.uuid = "0b1c9a3e-0000-4000-8000-000000000042";
  std::string line = encode_handle_line({false, r});
  REQUIRE(line.back() == '\n');
  line.pop_back();
  auto back = decode_handle_line(line);
  REQUIRE(back);
  CHECK_FALSE(back->removal);
  CHECK(back->row.nodeid == 42);
  CHECK(back->row.fh == r.fh);
  CHECK(back->row.parent == std::optional<uint64_t>(7));
  CHECK(back->row.name == r.name);
  HandleRow unnamed = row(43);
  unnamed.uuid = "u";
  std::string l2 = encode_handle_line({false, unnamed});
  l2.pop_back();
  CHECK_FALSE(decode_handle_line(l2)->row.parent);
  std::string l3 = encode_handle_line({true, unnamed});
  l3.pop_back();
  CHECK(decode_handle_line(l3)->removal);
  CHECK(decode_handle_line(l3)->row.nodeid == 43);
  CHECK_FALSE(decode_handle_line("- x"));
  CHECK_FALSE(decode_handle_line(line.substr(0, line.size() / 2)));
  CHECK_FALSE(decode_handle_line("garbage"));
  CHECK_FALSE(decode_handle_line(""));
}

// Ids come from blocks of kTxnIdBlock reserved durably (metadb.h); a begin takes one
// without the database mutex, which a group commit holds across its fdatasync.
TEST_CASE("transaction ids are unique across threads and blocks, and never reused") {
  TmpDir t;
  std::vector<uint64_t> all;
  {
    auto db = MetaDb::create(t.path + "/m.db");
    constexpr int kThreads = 4, kEach = int(MetaDb::kTxnIdBlock) / 2 + 100;  // 2+ blocks
    std::vector<std::vector<uint64_t>> got(kThreads);
    std::vector<std::thread> ths;
    for (int k = 0; k < kThreads; ++k)
      ths.emplace_back([&, k] {
        for (int i = 0; i < kEach; ++i) got[k].push_back(db->new_txn_id());
      });
    // Meanwhile the database mutex is taken and held as a group commit does.
    for (int i = 0; i < 200; ++i) db->sync();
    for (auto &th : ths) th.join();
    for (auto &g : got) {
      CHECK(std::is_sorted(g.begin(), g.end()));  // each thread's ids increase
      all.insert(all.end(), g.begin(), g.end());
    }
  }
  std::set<uint64_t> unique(all.begin(), all.end());
  CHECK(unique.size() == all.size());
  CHECK(*unique.begin() >= 1);
  // A new process starts past every block reserved before, used or not.
  auto db = MetaDb::open(t.path + "/m.db");
  CHECK(db->new_txn_id() > *unique.rbegin());
  CHECK(std::stoull(*db->get_meta("txn_ids_reserved")) >= *unique.rbegin());
}
