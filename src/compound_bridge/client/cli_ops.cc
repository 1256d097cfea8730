#include "compound_bridge/client/cli_ops.h"

#include <cctype>
#include <charconv>
#include <limits>

#include "compound_bridge/client/target.h"

namespace txnfs::nfs::cli {
namespace {

struct Syntax {
  OpKind kind;
  std::string_view usage;
};

constexpr Syntax kSyntax[] = {
    {OpKind::kWrite, "write PATH (@LOCALFILE | =TEXT | --size N) [--mode MODE]"},
    {OpKind::kRead, "read PATH [--count N] [--out FILE|-]"},
    {OpKind::kMkdir, "mkdir PATH [MODE]"},
    {OpKind::kRemove, "remove PATH"},
    {OpKind::kRename, "rename FROM TO"},
    {OpKind::kLink, "link EXISTING NEW"},
    {OpKind::kSymlink, "symlink TARGET PATH"},
    {OpKind::kSetattr, "setattr PATH KEY=VALUE... (mode= size= uid= gid= atime= mtime=)"},
    {OpKind::kGetattr, "getattr PATH"},
    {OpKind::kReaddir, "readdir PATH [--count N]"},
    {OpKind::kGetfh, "getfh PATH"},
};

[[noreturn]] void usage(OpKind kind, const std::string &what) {
  for (const Syntax &s : kSyntax) {
    if (s.kind == kind) throw Error(what + " (usage: " + std::string(s.usage) + ")");
  }
  throw Error(what);
}

uint64_t parse_number(std::string_view text, const std::string &what, int base = 10) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, base);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw Error("bad " + what + " '" + std::string(text) + "'");
  }
  return v;
}

uint32_t parse_u32(std::string_view text, const std::string &what) {
  uint64_t v = parse_number(text, what);
  if (v > std::numeric_limits<uint32_t>::max())
    throw Error(what + " too large: " + std::string(text));
  return static_cast<uint32_t>(v);
}

// A byte count: decimal, optionally followed by K, M or G (binary multiples).
uint64_t parse_size(std::string_view text, const std::string &what) {
  uint64_t scale = 1;
  if (!text.empty()) {
    switch (std::toupper(static_cast<unsigned char>(text.back()))) {
      case 'K':
        scale = uint64_t{1} << 10;
        break;
      case 'M':
        scale = uint64_t{1} << 20;
        break;
      case 'G':
        scale = uint64_t{1} << 30;
        break;
      default:
        break;
    }
    if (scale != 1) text.remove_suffix(1);
  }
  uint64_t v = parse_number(text, what);
  if (v > std::numeric_limits<uint64_t>::max() / scale) throw Error(what + " too large");
  return v * scale;
}

uint32_t parse_mode(std::string_view text) {
  uint64_t v = parse_number(text, "mode (octal)", 8);
  if (v > 07777) throw Error("bad mode '" + std::string(text) + "' (at most 07777)");
  return static_cast<uint32_t>(v);
}

// "now", or seconds since the epoch with an optional fraction: "1700000000.5".
SetTime parse_time(std::string_view text, const std::string &what) {
  SetTime t;
  if (text == "now") {
    t.server_time = true;
    return t;
  }
  size_t dot = text.find('.');
  t.time.sec = static_cast<int64_t>(parse_number(text.substr(0, dot), what));
  if (dot != std::string_view::npos) {
    std::string frac(text.substr(dot + 1));
    if (frac.empty() || frac.size() > 9)
      throw Error("bad " + what + " '" + std::string(text) + "'");
    frac.resize(9, '0');
    t.time.nsec = static_cast<uint32_t>(parse_number(frac, what));
  }
  return t;
}

std::optional<OpKind> kind_of(std::string_view name) {
  for (const Syntax &s : kSyntax) {
    if (op_name(s.kind) == name) return s.kind;
  }
  return std::nullopt;
}

void parse_setattr(OpSpec &op, const std::vector<std::string> &words) {
  for (size_t i = 2; i < words.size(); i++) {
    std::string_view w = words[i];
    size_t eq = w.find('=');
    if (eq == std::string_view::npos) usage(op.kind, "'" + words[i] + "' is not KEY=VALUE");
    std::string_view key = w.substr(0, eq), value = w.substr(eq + 1);
    if (key == "mode") {
      op.attrs.mode = parse_mode(value);
    } else if (key == "size") {
      op.attrs.size = parse_size(value, "size");
    } else if (key == "uid") {
      op.attrs.uid = parse_u32(value, "uid");
    } else if (key == "gid") {
      op.attrs.gid = parse_u32(value, "gid");
    } else if (key == "atime") {
      op.attrs.atime = parse_time(value, "atime");
    } else if (key == "mtime") {
      op.attrs.mtime = parse_time(value, "mtime");
    } else {
      usage(op.kind, "unknown attribute '" + std::string(key) + "'");
    }
  }
  if (op.attrs.empty()) usage(op.kind, "setattr needs at least one KEY=VALUE");
}

// The words after the paths of write/read/readdir: a data source and --options.
void parse_options(OpSpec &op, const std::vector<std::string> &words, size_t from) {
  for (size_t i = from; i < words.size(); i++) {
    const std::string &w = words[i];
    auto value = [&]() -> const std::string & {
      if (i + 1 >= words.size()) usage(op.kind, w + " needs a value");
      return words[++i];
    };
    bool is_write = op.kind == OpKind::kWrite;
    bool has_data = op.data.kind != DataSource::Kind::kNone;
    if (is_write && !has_data && w.size() > 1 && w[0] == '@') {
      op.data = {DataSource::Kind::kFile, w.substr(1), 0};
    } else if (is_write && !has_data && !w.empty() && w[0] == '=') {
      op.data = {DataSource::Kind::kLiteral, w.substr(1), 0};
    } else if (is_write && !has_data && w == "--size") {
      op.data = {DataSource::Kind::kPattern, {}, parse_size(value(), "size")};
    } else if (is_write && w == "--mode") {
      op.mode = parse_mode(value());
    } else if (!is_write && w == "--count") {
      uint64_t n = parse_size(value(), "count");
      if (n == 0 || n > std::numeric_limits<uint32_t>::max()) usage(op.kind, "bad --count");
      op.count = static_cast<uint32_t>(n);
    } else if (op.kind == OpKind::kRead && w == "--out") {
      op.out = value();
    } else {
      usage(op.kind, "unexpected '" + w + "'");
    }
  }
  if (op.kind == OpKind::kWrite && op.data.kind == DataSource::Kind::kNone) {
    usage(op.kind, "write needs its data");
  }
}

}  // namespace

OpSpec parse_op(const std::vector<std::string> &words) {
  if (words.empty()) throw Error("empty operation");
  std::optional<OpKind> kind = kind_of(words[0]);
  if (!kind) {
    std::string names;
    for (const Syntax &s : kSyntax)
      names += (names.empty() ? "" : ", ") + std::string(op_name(s.kind));
    throw Error("unknown operation '" + words[0] + "' (one of: " + names + ")");
  }
  OpSpec op;
  op.kind = *kind;
  const size_t paths =
      (op.kind == OpKind::kRename || op.kind == OpKind::kLink || op.kind == OpKind::kSymlink) ? 2
                                                                                              : 1;
  if (words.size() < 1 + paths) usage(op.kind, "missing argument");
  op.path = words[1];
  if (paths == 2) op.path2 = words[2];
  // Path syntax is checked here, before connecting; a symlink's target is free text.
  if (op.kind != OpKind::kSymlink) parse_target(op.path);
  if (paths == 2) parse_target(op.path2);
  const size_t rest = 1 + paths;
  switch (op.kind) {
    case OpKind::kWrite:
      op.mode = 0644;
      parse_options(op, words, rest);
      break;
    case OpKind::kRead:
    case OpKind::kReaddir:
      parse_options(op, words, rest);
      break;
    case OpKind::kMkdir:
      op.mode = 0755;
      if (words.size() > rest + 1) usage(op.kind, "too many arguments");
      if (words.size() == rest + 1) op.mode = parse_mode(words[rest]);
      break;
    case OpKind::kSetattr:
      parse_setattr(op, words);
      break;
    default:
      if (words.size() > rest) usage(op.kind, "too many arguments");
      break;
  }
  return op;
}

std::vector<OpSpec> parse_command_line(const std::vector<std::string> &args) {
  std::vector<OpSpec> ops;
  std::vector<std::string> words;
  auto flush = [&] {
    if (words.empty()) return;
    try {
      ops.push_back(parse_op(words));
    } catch (const Error &e) {
      throw Error("operation " + std::to_string(ops.size() + 1) + ": " + e.what());
    }
    words.clear();
  };
  for (const std::string &a : args) {
    if (a == ";") {
      flush();
    } else {
      words.push_back(a);
    }
  }
  flush();
  return ops;
}

std::vector<std::string> split_batch_line(std::string_view line) {
  std::vector<std::string> words;
  size_t i = 0;
  auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (i < line.size()) {
    while (i < line.size() && space(line[i])) i++;
    if (i == line.size()) break;
    if (words.empty() && line[i] == '#') break;
    if (line[i] == '=') {
      std::string_view text = line.substr(i);
      if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
      words.emplace_back(text);
      break;
    }
    size_t start = i;
    while (i < line.size() && !space(line[i])) i++;
    words.emplace_back(line.substr(start, i - start));
  }
  return words;
}

std::vector<OpSpec> parse_batch(std::istream &in, const std::string &name) {
  std::vector<OpSpec> ops;
  std::string line;
  for (size_t n = 1; std::getline(in, line); n++) {
    std::vector<std::string> words = split_batch_line(line);
    if (words.empty()) continue;
    try {
      ops.push_back(parse_op(words));
    } catch (const Error &e) {
      throw Error(name + ":" + std::to_string(n) + ": " + e.what());
    }
  }
  if (in.bad()) throw Error("cannot read " + name);
  return ops;
}

}  // namespace txnfs::nfs::cli
