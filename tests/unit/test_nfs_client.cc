// The pure parts of the txnfs-nfs client: paths and handles, the CLI's operation
// parsing, the content pattern, attribute values, and that the request size the client
// computes is exactly what it encodes.
#include <sstream>

#include <catch2/catch.hpp>

#include "compound_bridge/client/cli_ops.h"
#include "compound_bridge/client/content.h"
#include "compound_bridge/client/counting_xdr.h"
#include "compound_bridge/client/fattr.h"
#include "compound_bridge/client/report.h"
#include "compound_bridge/client/target.h"

using namespace txnfs::nfs;
using namespace txnfs::nfs::cli;

TEST_CASE("paths become LOOKUP components below the export root") {
  Target t = parse_target("/a//b/c");
  CHECK(t.fh.empty());
  CHECK(t.components == std::vector<std::string>{"a", "b", "c"});
  CHECK(parse_target("a/b").components == std::vector<std::string>{"a", "b"});
  CHECK(parse_target("/").components.empty());
  CHECK_THROWS_AS(parse_target(""), Error);
  CHECK_THROWS_WITH(parse_target("/a/../b"), Catch::Contains("without . and .."));
  CHECK_THROWS_AS(parse_target("/a/./b"), Error);
}

TEST_CASE("fh:HEX names a handle, fh:HEX/NAME an entry below it") {
  Target t = parse_target("fh:43000a0B");
  CHECK(t.fh == std::vector<uint8_t>{0x43, 0x00, 0x0a, 0x0b});
  CHECK(t.components.empty());
  Target u = parse_target("fh:ff/x/y");
  CHECK(u.fh == std::vector<uint8_t>{0xff});
  CHECK(u.components == std::vector<std::string>{"x", "y"});
  CHECK_THROWS_AS(parse_target("fh:"), Error);
  CHECK_THROWS_AS(parse_target("fh:abc"), Error);  // odd
  CHECK_THROWS_AS(parse_target("fh:zz"), Error);
  CHECK_THROWS_WITH(parse_target("fh:" + std::string(258, 'a')), Catch::Contains("at most 128"));
  CHECK(to_hex(from_hex("00ff10")) == "00ff10");
}

TEST_CASE("write takes its data from @FILE, =TEXT or --size") {
  OpSpec a = parse_op({"write", "/a", "@/etc/hostname"});
  CHECK(a.kind == OpKind::kWrite);
  CHECK(a.data.kind == DataSource::Kind::kFile);
  CHECK(a.data.text == "/etc/hostname");
  CHECK(a.mode == 0644);
  OpSpec b = parse_op({"write", "/b", "=hello world", "--mode", "600"});
  CHECK(b.data.kind == DataSource::Kind::kLiteral);
  CHECK(b.data.text == "hello world");
  CHECK(b.mode == 0600);
  OpSpec c = parse_op({"write", "/c", "--size", "4K"});
  CHECK(c.data.kind == DataSource::Kind::kPattern);
  CHECK(c.data.size == 4096);
  CHECK_THROWS_WITH(parse_op({"write", "/d"}), Catch::Contains("needs its data"));
  CHECK_THROWS_WITH(parse_op({"write", "/d", "=x", "=y"}), Catch::Contains("unexpected '=y'"));
  CHECK_THROWS_WITH(parse_op({"write", "/d", "--size", "4Q"}), Catch::Contains("bad size"));
  CHECK_THROWS_WITH(parse_op({"write", "/d", "=x", "--mode", "9"}), Catch::Contains("mode"));
}

TEST_CASE("the other operations and their arguments") {
  OpSpec r = parse_op({"read", "/r", "--count", "1M", "--out", "-"});
  CHECK(r.count == 1u << 20);
  CHECK(r.out == "-");
  CHECK(parse_op({"mkdir", "/m"}).mode == 0755);
  CHECK(parse_op({"mkdir", "/m", "0700"}).mode == 0700);
  OpSpec mv = parse_op({"rename", "/x", "/y"});
  CHECK((mv.path == "/x" && mv.path2 == "/y"));
  OpSpec sl = parse_op({"symlink", "../t", "/l"});
  CHECK((sl.path == "../t" && sl.path2 == "/l"));
  OpSpec s = parse_op({"setattr", "/s", "mode=0640", "size=0", "uid=7", "gid=8", "atime=now",
                       "mtime=1700000000.25"});
  CHECK(s.attrs.mode == 0640u);
  CHECK(s.attrs.size == 0u);
  CHECK(s.attrs.uid == 7u);
  CHECK(s.attrs.gid == 8u);
  CHECK(s.attrs.atime->server_time);
  CHECK(s.attrs.mtime->time.sec == 1700000000);
  CHECK(s.attrs.mtime->time.nsec == 250000000u);
  CHECK_THROWS_WITH(parse_op({"setattr", "/s"}), Catch::Contains("at least one"));
  CHECK_THROWS_WITH(parse_op({"setattr", "/s", "color=red"}), Catch::Contains("unknown attribute"));
  CHECK_THROWS_WITH(parse_op({"remove", "/a", "/b"}), Catch::Contains("too many arguments"));
  CHECK_THROWS_WITH(parse_op({"rename", "/a"}), Catch::Contains("usage: rename FROM TO"));
  CHECK_THROWS_WITH(parse_op({"frobnicate", "/a"}), Catch::Contains("unknown operation"));
}

TEST_CASE("a command line separates operations with ';'") {
  auto ops = parse_command_line({"write", "/a", "=1", ";", "remove", "/b", ";", ";", "getfh", "/"});
  REQUIRE(ops.size() == 3);
  CHECK(ops[1].kind == OpKind::kRemove);
  CHECK(ops[2].kind == OpKind::kGetfh);
  CHECK_THROWS_WITH(parse_command_line({"getfh", "/", ";", "remove"}),
                    Catch::StartsWith("operation 2: "));
}

TEST_CASE("a batch file has one operation a line, comments, and =TEXT to the end") {
  CHECK(split_batch_line("  write /a =two  words ") ==
        std::vector<std::string>{"write", "/a", "=two  words "});
  CHECK(split_batch_line("   # a comment").empty());
  CHECK(split_batch_line("").empty());
  CHECK(split_batch_line("write /a =x\r") == std::vector<std::string>{"write", "/a", "=x"});
  std::istringstream in("# files\nmkdir /d\n\nwrite /d/f --size 10\n");
  auto ops = parse_batch(in, "b.txt");
  REQUIRE(ops.size() == 2);
  CHECK(ops[1].data.size == 10);
  std::istringstream bad("mkdir /d\nremove\n");
  CHECK_THROWS_WITH(parse_batch(bad, "b.txt"), Catch::StartsWith("b.txt:2: "));
}

TEST_CASE("the write pattern is the records PATH@OFFSET, cut at N") {
  CHECK(pattern("/f", 0).empty());
  CHECK(pattern("/f", 12) == "/f@0\n/f@5\n/f");
  std::string p = pattern("/x/y", 4096);
  CHECK(p.size() == 4096);
  CHECK(p.substr(0, 7) == "/x/y@0\n");
  CHECK(crc32("123456789") == 0xcbf43926u);
  CHECK(crc32("") == 0u);
}

TEST_CASE("attributes decode in attribute-number order; unknown ones are refused") {
  // type=NF4REG, size=5, mode=0640, owner="0"
  bitmap4 mask{};
  mask.bitmap4_len = 2;
  mask.map[0] = 1u << FATTR4_TYPE | 1u << FATTR4_SIZE;
  mask.map[1] = 1u << (FATTR4_MODE - 32) | 1u << (FATTR4_OWNER - 32);
  const std::string values(
      "\0\0\0\1"          // type
      "\0\0\0\0\0\0\0\5"  // size
      "\0\0\1\xa0"        // mode
      "\0\0\0\1"
      "0\0\0\0",  // owner
      24);
  auto v = decode_attrs(mask, values);
  REQUIRE(v);
  CHECK(v->file.type == NF4REG);
  CHECK(v->file.size == 5);
  CHECK(v->file.mode == 0640);
  CHECK(v->file.owner == "0");
  CHECK_FALSE(decode_attrs(mask, values.substr(0, 20)));  // short
  bitmap4 unknown{};
  unknown.bitmap4_len = 1;
  unknown.map[0] = 1u << 2;  // FATTR4_FH_EXPIRE_TYPE: never asked for
  CHECK_FALSE(decode_attrs(unknown, values.substr(0, 4)));
  EncodedAttrs e = encode_attrs({.mode = 0600, .size = 0});
  CHECK(e.mask.map[0] == 1u << FATTR4_SIZE);
  CHECK(e.mask.map[1] == 1u << (FATTR4_MODE - 32));
  CHECK(e.values.size() == 12);
}

namespace {

// What OP really encodes to, with ntirpc's memory stream.
size_t encoded_size(nfs_argop4 &op) {
  alignas(8) static char buf[64 * 1024];
  XDR xdrs;
  xdrmem_ncreate(&xdrs, buf, sizeof buf, XDR_ENCODE);
  REQUIRE(xdr_nfs_argop4(&xdrs, &op));
  return XDR_GETPOS(&xdrs);
}

size_t counted_size(nfs_argop4 &op) {
  CountingXdr counter;
  REQUIRE(xdr_nfs_argop4(counter.xdrs(), &op));
  return counter.bytes();
}

}  // namespace

TEST_CASE("the counted size of an operation is what it encodes to") {
  std::string data(4093, 'd');  // not a multiple of 4: padding
  std::string name = "file-name";
  std::string owner = "txnfs-nfs/owner";
  EncodedAttrs attrs = encode_attrs({.mode = 0644, .size = 0});

  nfs_argop4 write{};
  write.argop = NFS4_OP_WRITE;
  write.nfs_argop4_u.opwrite.data = {static_cast<u_int>(data.size()), data.data()};
  CHECK(counted_size(write) == encoded_size(write));
  CHECK(counted_size(write) == 4 + 16 + 8 + 4 + 4 + 4096);

  nfs_argop4 open{};
  open.argop = NFS4_OP_OPEN;
  OPEN4args &o = open.nfs_argop4_u.opopen;
  o.owner.owner = {static_cast<u_int>(owner.size()), owner.data()};
  o.openhow.opentype = OPEN4_CREATE;
  o.openhow.openflag4_u.how.mode = UNCHECKED4;
  o.openhow.openflag4_u.how.createhow4_u.createattrs =
      fattr4{attrs.mask, {static_cast<u_int>(attrs.values.size()), attrs.values.data()}};
  o.claim.claim = CLAIM_NULL;
  o.claim.open_claim4_u.file = {static_cast<u_int>(name.size()), name.data()};
  CHECK(counted_size(open) == encoded_size(open));

  nfs_argop4 lookup{};
  lookup.argop = NFS4_OP_LOOKUP;
  lookup.nfs_argop4_u.oplookup.objname = {static_cast<u_int>(name.size()), name.data()};
  CHECK(counted_size(lookup) == encoded_size(lookup));
  CHECK(counted_size(lookup) == 4 + 4 + 12);
}

TEST_CASE("what the CLI prints for operations and for a COMPOUND that does not fit") {
  OpResult w;
  w.kind = OpKind::kWrite;
  w.path = "/a/b";
  w.state = OpResult::State::kOk;
  w.bytes = w.requested = 4096;
  CHECK(op_line(w) == "ok write /a/b 4096 bytes");
  CHECK(incomplete(w, true).empty());
  w.bytes = 100;
  CHECK(incomplete(w, true) == "write /a/b: the server took 100 of 4096 bytes");
  OpResult rd;
  rd.kind = OpKind::kRead;
  rd.path = "/big";
  rd.state = OpResult::State::kOk;
  rd.bytes = rd.requested = 65536;
  rd.attrs = FileAttrs{};
  rd.attrs->size = 100000;
  CHECK(incomplete(rd, false).empty());  // --count given: a part was asked for
  CHECK(incomplete(rd, true) ==
        "read /big: got the first 65536 of 100000 bytes; give --count (or --read-max)");
  rd.eof = true;
  CHECK(incomplete(rd, true).empty());
  OpResult r;
  r.kind = OpKind::kRemove;
  r.path = "/x";
  r.state = OpResult::State::kFailed;
  r.status = 2;
  r.failed_at = "REMOVE x";
  CHECK(op_line(r) == "NFS4ERR_NOENT remove /x (at REMOVE x)");
  OpResult n;
  n.kind = OpKind::kRename;
  n.path = "/p";
  n.path2 = "/q";
  CHECK(op_line(n) == "not run rename /p /q");

  Fit f;
  f.request_bytes = 4288120;
  f.max_request = 1048576;
  f.nfs_ops = 5001;
  f.max_operations = 16384;
  f.ops_that_fit = 244;
  CHECK(fit_message(f, 1000) ==
        "the COMPOUND does not fit: 4288120 request bytes (the session allows 1048576); "
        "the first 244 of its 1000 operations fit");
}

TEST_CASE("a COMPOUND refused as a whole gets a hint; a failed operation does not") {
  CompoundResult r;
  r.nfs_ops = 16500;
  r.status = kNfs4ErrTooManyOps;  // the patched server, NFSv4.1, above its limit
  CHECK(refusal_hint(r) ==
        "the server refused the COMPOUND as a whole (no operation ran); it takes fewer "
        "operations per COMPOUND than this one's 16500");
  r.status = kNfs4ErrResource;  // stock Ganesha 4.3, above its 100
  CHECK(refusal_hint(r).find("at most 100 operations") != std::string::npos);
  r.nfs_results = 3;  // an operation failed with it: not a refusal of the whole
  CHECK(refusal_hint(r).empty());
  r.nfs_results = 0;
  r.status = kNfs4ErrDelay;
  CHECK(refusal_hint(r).empty());
}
