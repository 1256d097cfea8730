// The local half of txnfs-nfs's journal: its file formats (journal_format.h), its
// directory (journal_dir.h: creation, refusal of what is not a journal, pending entries,
// leftovers of an interrupted client), and the CLI's journal report.
#include <fstream>
#include <filesystem>

#include <catch2/catch.hpp>

#include "compound_bridge/client/journal_dir.h"
#include "compound_bridge/client/journal_format.h"
#include "compound_bridge/client/journal_report.h"
#include "tests/unit/tmpdir.h"

using namespace txnfs::nfs;
namespace fs = std::filesystem;

namespace {

Operation op(OpKind kind, std::string path, std::string path2 = {}) {
  Operation o;
  o.kind = kind;
  o.path = std::move(path);
  o.path2 = std::move(path2);
  return o;
}

JournalEntry sample_entry() {
  JournalEntry e;
  e.seq = 42;
  e.tag = "txn-lazy";
  e.verifier = std::string("\x01\x02\x03\x04\x00\xff\x10\x20", 8);
  e.ops.push_back(op(OpKind::kMkdir, "/d"));
  e.ops.back().mode = 0700;
  e.ops.push_back(op(OpKind::kWrite, "/d/f"));
  e.ops.back().data = std::string("a\nb\0c", 5);
  e.ops.back().mode = 0640;
  e.ops.back().stable = true;
  e.ops.push_back(op(OpKind::kRename, "/x", "/d/y"));
  e.ops.push_back(op(OpKind::kWrite, "/empty"));
  e.ops.back().mode = 0644;
  e.ops.push_back(op(OpKind::kSymlink, "../t", "/d/l"));
  e.ops.push_back(op(OpKind::kSetattr, "/d/f"));
  SetAttrs &a = e.ops.back().attrs;
  a.mode = 0600;
  a.size = 7;
  a.uid = 5;
  a.gid = 6;
  a.atime = SetTime{.server_time = true, .time = {}};
  a.mtime = SetTime{.server_time = false, .time = {1700000000, 5}};
  e.ops.push_back(op(OpKind::kRead, "/d/f"));
  e.ops.back().count = 4096;
  e.ops.push_back(op(OpKind::kRemove, "/x2"));
  return e;
}

void write_file(const fs::path &p, const std::string &text) {
  std::ofstream(p, std::ios::binary) << text;
}

}  // namespace

TEST_CASE("a journal entry keeps every operation and its data exactly") {
  JournalEntry e = sample_entry();
  std::string bytes = encode_entry(e);
  CHECK(bytes.starts_with("txnfs-nfs entry 1\n{"));
  CHECK(bytes.ends_with(std::string("a\nb\0c", 5)));  // the data follows the JSON line
  CHECK(decode_entry(bytes) == e);
  JournalEntry none;
  none.seq = 1;
  none.tag = "txn-lazy";
  CHECK(decode_entry(encode_entry(none)) == none);  // no verifier yet, no operation
}

TEST_CASE("a damaged journal entry is refused, saying how") {
  std::string bytes = encode_entry(sample_entry());
  CHECK_THROWS_WITH(decode_entry(bytes.substr(0, bytes.size() - 1)), Catch::Contains("truncated"));
  CHECK_THROWS_WITH(decode_entry(bytes + "x"), Catch::Contains("1 bytes after its data"));
  CHECK_THROWS_WITH(decode_entry("hello"), Catch::Contains("not a journal entry"));
  CHECK_THROWS_WITH(decode_entry("txnfs-nfs entry 1\n{\"seq\": 1\n"), Catch::Contains("garbled"));
  CHECK_THROWS_WITH(decode_entry("txnfs-nfs entry 1\n{"), Catch::Contains("truncated"));
  CHECK_THROWS_WITH(decode_entry("txnfs-nfs entry 1\n{\"seq\": 1, \"tag\": \"t\", \"verifier\": "
                                 "\"\", \"ops\": [{\"op\": \"frob\", \"path\": \"/\"}]}\n"),
                    Catch::Contains("unknown operation 'frob'"));
  CHECK_THROWS_WITH(decode_entry("txnfs-nfs entry 1\n{\"seq\": 1, \"tag\": \"t\", \"verifier\": "
                                 "\"abc\", \"ops\": []}\n"),
                    Catch::Contains("bad verifier"));
  JournalEntry bad;
  bad.seq = 1;
  bad.ops.push_back(op(OpKind::kRemove, "/\xff"));
  CHECK_THROWS_WITH(encode_entry(bad), Catch::Contains("not UTF-8"));
}

TEST_CASE("the journal state, the marker and entry names") {
  JournalState s{.id = new_journal_id(), .next = 9, .durable = 4, .marker = true};
  CHECK(s.id.size() == 32);
  CHECK(s.id != new_journal_id());
  CHECK(decode_state(encode_state(s)) == s);
  CHECK_THROWS_WITH(decode_state("{}"), Catch::Contains("not a txnfs-nfs journal"));
  CHECK_THROWS_WITH(decode_state("txnfs-nfs journal 1\n{\"id\": 3}"), Catch::Contains("garbled"));
  JournalState behind = s;
  behind.durable = 9;  // durable must stay below next
  CHECK_THROWS_WITH(decode_state(encode_state(behind)), Catch::Contains("next 9 durable 9"));

  CHECK(marker_text(17) == "17\n");
  CHECK(parse_marker("17\n") == 17u);
  CHECK(parse_marker("0\n") == 0u);
  CHECK_FALSE(parse_marker("17"));
  CHECK_FALSE(parse_marker("017\n"));
  CHECK_FALSE(parse_marker("garbage\n"));
  CHECK_FALSE(parse_marker(""));

  CHECK(entry_name(5, false) == "5");
  CHECK(entry_name(5, true) == "5.pending");
  CHECK(parse_entry_name("5")->seq == 5);
  CHECK(parse_entry_name("5.pending")->pending);
  CHECK_FALSE(parse_entry_name("0"));
  CHECK_FALSE(parse_entry_name("x5"));
  CHECK_FALSE(parse_entry_name("5.tmp"));
  CHECK(verifier_from_hex(verifier_hex(sample_entry().verifier)) == sample_entry().verifier);
}

TEST_CASE("a journal directory is created, reopened, and keeps entries in order") {
  TmpDir t;
  std::string dir = t.path + "/j";
  std::string id;
  {
    JournalDir d(dir);
    id = d.state().id;
    CHECK(d.kept().empty());
    CHECK(d.next() == 1);
    JournalEntry e = sample_entry();
    e.seq = d.next();
    d.save(e, true);
    CHECK(d.pending() == 1u);
    CHECK(d.next() == 2);
    d.save(e, false);  // answered: kept, the pending file gone
    CHECK_FALSE(d.pending());
    e.seq = 2;
    d.save(e, false);
    CHECK(d.load(2, false) == e);
  }
  CHECK(fs::exists(dir + "/1"));
  CHECK_FALSE(fs::exists(dir + "/1.pending"));
  JournalDir d(dir);
  CHECK(d.state().id == id);
  CHECK(d.kept() == std::set<uint64_t>{1, 2});
  CHECK(d.next() == 3);
}

TEST_CASE("a journal directory repairs what an interrupted client left") {
  TmpDir t;
  std::string dir = t.path + "/j";
  {
    JournalDir d(dir);
    JournalEntry e = sample_entry();
    for (uint64_t seq : {1, 2, 3}) {
      e.seq = seq;
      d.save(e, false);
    }
    e.seq = 4;
    d.save(e, true);
    JournalState s = d.state();
    s.next = d.next();
    s.durable = 2;  // a sync that stopped after saving the state
    d.save_state(s);
  }
  fs::copy_file(dir + "/3", dir + "/3.pending");  // a send whose unlink was lost
  write_file(dir + "/5.tmp", "half");             // a write that did not finish
  JournalDir d(dir);
  CHECK(d.kept() == std::set<uint64_t>{3});  // 1 and 2 are durable
  CHECK(d.pending() == 4u);
  CHECK_FALSE(fs::exists(dir + "/3.pending"));
  CHECK_FALSE(fs::exists(dir + "/5.tmp"));
  d.keep_pending();
  CHECK(d.kept() == std::set<uint64_t>{3, 4});
}

TEST_CASE("what is not a journal is refused, and left alone") {
  TmpDir t;
  write_file(t.path + "/file", "x");
  CHECK_THROWS_WITH(JournalDir(t.path + "/file"), Catch::Contains("not a directory"));
  CHECK_THROWS_WITH(JournalDir(t.path + "/no/such"), Catch::Contains("cannot create it"));
  fs::create_directory(t.path + "/other");
  write_file(t.path + "/other/data", "mine");
  CHECK_THROWS_WITH(JournalDir(t.path + "/other"), Catch::Contains("not a txnfs-nfs journal"));
  CHECK(std::distance(fs::directory_iterator(t.path + "/other"), fs::directory_iterator()) == 1);
  fs::create_directory(t.path + "/garbled");
  write_file(t.path + "/garbled/journal", "txnfs-nfs journal 1\n{");
  CHECK_THROWS_WITH(JournalDir(t.path + "/garbled"), Catch::Contains("garbled journal state"));
  { JournalDir ok(t.path + "/j"); }
  write_file(t.path + "/j/notes.txt", "?");
  CHECK_THROWS_WITH(JournalDir(t.path + "/j"), Catch::Contains("unexpected file notes.txt"));
  fs::remove(t.path + "/j/notes.txt");
  write_file(t.path + "/j/3", "txnfs-nfs entry 1\n{\n");
  JournalDir j(t.path + "/j");
  CHECK_THROWS_WITH(j.load(3, false), Catch::Contains("garbled journal entry"));
}

TEST_CASE("what txnfs-nfs prints about a sync") {
  Journal::Synced s{.durable = 3, .resent = 2, .dropped = 0, .marker = 7, .rounds = 2};
  CHECK(cli::sync_line(s) == "sync: 3 durable, 2 lost and sent again (marker 7)");
  CHECK(cli::sync_json(s).dump() ==
        R"({"status":"ok","durable":3,"resent":2,"dropped":0,"marker":7,"rounds":2})");
  s.dropped = 1;
  CHECK_THAT(cli::sync_line(s), Catch::Contains("1 never answered"));
}
