#include "compound_bridge/client/journal_format.h"

#include <charconv>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace txnfs::nfs {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kStateHeader = "txnfs-nfs journal 1\n";
constexpr std::string_view kEntryHeader = "txnfs-nfs entry 1\n";

bool is_hex(std::string_view s) {
  return s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::optional<uint64_t> parse_u64(std::string_view text) {
  uint64_t v = 0;
  if (text.empty() || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<OpKind> kind_named(std::string_view name) {
  for (int k = 0; k <= static_cast<int>(OpKind::kGetfh); k++) {
    if (op_name(static_cast<OpKind>(k)) == name) return static_cast<OpKind>(k);
  }
  return std::nullopt;
}

json time_json(const SetTime &t) {
  if (t.server_time) return "now";
  return json{{"sec", t.time.sec}, {"nsec", t.time.nsec}};
}

SetTime time_of(const json &j) {
  if (j.is_string()) {
    if (j.get<std::string>() != "now") throw Error("bad time " + j.dump());
    return {.server_time = true, .time = {}};
  }
  return {.time = {j.at("sec").get<int64_t>(), j.at("nsec").get<uint32_t>()}};
}

json attrs_json(const SetAttrs &a) {
  json j = json::object();
  if (a.mode) j["mode"] = *a.mode;
  if (a.size) j["size"] = *a.size;
  if (a.uid) j["uid"] = *a.uid;
  if (a.gid) j["gid"] = *a.gid;
  if (a.atime) j["atime"] = time_json(*a.atime);
  if (a.mtime) j["mtime"] = time_json(*a.mtime);
  return j;
}

SetAttrs attrs_of(const json &j) {
  SetAttrs a;
  if (j.contains("mode")) a.mode = j["mode"].get<uint32_t>();
  if (j.contains("size")) a.size = j["size"].get<uint64_t>();
  if (j.contains("uid")) a.uid = j["uid"].get<uint32_t>();
  if (j.contains("gid")) a.gid = j["gid"].get<uint32_t>();
  if (j.contains("atime")) a.atime = time_of(j["atime"]);
  if (j.contains("mtime")) a.mtime = time_of(j["mtime"]);
  return a;
}

}  // namespace

std::string encode_state(const JournalState &s) {
  json j = {{"id", s.id}, {"next", s.next}, {"durable", s.durable}, {"marker", s.marker}};
  return std::string(kStateHeader) + j.dump() + "\n";
}

JournalState decode_state(std::string_view text) {
  if (!text.starts_with(kStateHeader)) throw Error("not a txnfs-nfs journal (no header line)");
  JournalState s;
  try {
    json j = json::parse(text.substr(kStateHeader.size()));
    s.id = j.at("id").get<std::string>();
    s.next = j.at("next").get<uint64_t>();
    s.durable = j.at("durable").get<uint64_t>();
    s.marker = j.at("marker").get<bool>();
  } catch (const json::exception &e) {
    throw Error(std::string("garbled journal state: ") + e.what());
  }
  if (s.id.size() != 32 || !is_hex(s.id))
    throw Error("garbled journal state: bad id '" + s.id + "'");
  if (s.next < 1 || s.durable >= s.next) {
    throw Error(fmt::format("garbled journal state: next {} durable {}", s.next, s.durable));
  }
  return s;
}

std::string new_journal_id() {
  std::random_device random;  // getrandom(2)
  std::string id;
  for (int i = 0; i < 4; i++) id += fmt::format("{:08x}", random());
  return id;
}

std::string encode_entry(const JournalEntry &e) {
  json ops = json::array();
  std::string data;
  for (const Operation &op : e.ops) {
    json j = {{"op", op_name(op.kind)}, {"path", op.path}};
    if (!op.path2.empty()) j["path2"] = op.path2;
    switch (op.kind) {
      case OpKind::kWrite:
        j["mode"] = op.mode;
        j["stable"] = op.stable;
        j["data"] = op.data.size();
        data += op.data;
        break;
      case OpKind::kMkdir:
        j["mode"] = op.mode;
        break;
      case OpKind::kRead:
      case OpKind::kReaddir:
        j["count"] = op.count;
        break;
      case OpKind::kSetattr:
        j["attrs"] = attrs_json(op.attrs);
        break;
      default:
        break;
    }
    ops.push_back(std::move(j));
  }
  json head = {{"seq", e.seq},
               {"tag", e.tag},
               {"verifier", verifier_hex(e.verifier)},
               {"ops", std::move(ops)}};
  std::string line;
  try {
    line = head.dump();
  } catch (const json::exception &) {
    throw Error("a path or tag is not UTF-8: a journal keeps them as text");
  }
  return std::string(kEntryHeader) + line + "\n" + data;
}

JournalEntry decode_entry(std::string_view bytes) {
  if (!bytes.starts_with(kEntryHeader)) throw Error("not a journal entry (no header line)");
  bytes.remove_prefix(kEntryHeader.size());
  size_t eol = bytes.find('\n');
  if (eol == std::string_view::npos) throw Error("truncated journal entry (no JSON line)");
  JournalEntry e;
  std::string_view data = bytes.substr(eol + 1);
  try {
    json head = json::parse(bytes.substr(0, eol));
    e.seq = head.at("seq").get<uint64_t>();
    e.tag = head.at("tag").get<std::string>();
    e.verifier = verifier_from_hex(head.at("verifier").get<std::string>());
    for (const json &j : head.at("ops")) {
      Operation op;
      std::string name = j.at("op").get<std::string>();
      std::optional<OpKind> kind = kind_named(name);
      if (!kind) throw Error("unknown operation '" + name + "'");
      op.kind = *kind;
      op.path = j.at("path").get<std::string>();
      op.path2 = j.value("path2", std::string());
      op.mode = j.value("mode", 0u);
      op.stable = j.value("stable", false);
      op.count = j.value("count", 0u);
      if (j.contains("attrs")) op.attrs = attrs_of(j["attrs"]);
      if (op.kind == OpKind::kWrite) {
        uint64_t n = j.at("data").get<uint64_t>();
        if (n > data.size()) throw Error("truncated journal entry (write data)");
        op.data = data.substr(0, n);
        data.remove_prefix(n);
      }
      e.ops.push_back(std::move(op));
    }
  } catch (const json::exception &ex) {
    throw Error(std::string("garbled journal entry: ") + ex.what());
  }
  if (!data.empty())
    throw Error(fmt::format("garbled journal entry: {} bytes after its data", data.size()));
  if (e.seq == 0) throw Error("garbled journal entry: sequence number 0");
  return e;
}

std::string entry_name(uint64_t seq, bool pending) {
  return std::to_string(seq) + (pending ? ".pending" : "");
}

std::optional<EntryName> parse_entry_name(std::string_view name) {
  EntryName n;
  if (name.ends_with(".pending")) {
    n.pending = true;
    name.remove_suffix(8);
  }
  std::optional<uint64_t> seq = parse_u64(name);
  if (!seq || *seq == 0) return std::nullopt;
  n.seq = *seq;
  return n;
}

std::string marker_text(uint64_t seq) { return std::to_string(seq) + "\n"; }

std::optional<uint64_t> parse_marker(std::string_view text) {
  if (!text.ends_with('\n')) return std::nullopt;
  text.remove_suffix(1);
  return parse_u64(text);
}

std::string verifier_hex(std::string_view verifier) {
  std::string hex;
  for (unsigned char c : verifier) hex += fmt::format("{:02x}", c);
  return hex;
}

std::string verifier_from_hex(std::string_view hex) {
  if (hex.empty()) return {};
  if (hex.size() != 16 || !is_hex(hex)) throw Error("bad verifier '" + std::string(hex) + "'");
  std::string v;
  for (size_t i = 0; i < hex.size(); i += 2) {
    v += static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16));
  }
  return v;
}

}  // namespace txnfs::nfs
