// The record format (version 1). One line of space-separated fields, no terminator:
//
//   "1" kind seq obj fields-of-kind... " #" checksum
//     A (Attrs)    obj mode uid gid size atime mtime
//     D (Data)     obj off len
//     C (Created)  obj dir name flags
//     M (Made)     obj name flags            obj: the directory the name is made in
//     L (Linked)   obj dir name
//     R (Removed)  obj dir name flags
//     N (Renamed)  obj dir name dir2 name2 flags displaced
//     X (Xattrs)   obj
//
//   numbers  decimal, except mode (octal)
//   id       ino ":" generation ":" hex(fh)   ino/generation repeat what fh holds, for
//                                            readers; decode checks they agree
//   name     length ":" raw bytes             any byte but '/' and NUL, so spaces and
//                                            newlines need no escaping
//   time     seconds "." nanoseconds (exactly 9 digits)
//   displaced "0" or "1"
//   checksum 8 lower-case hex digits: FNV-1a (32 bit) of every byte before " #"
//
// Decoding is strict: every field present, nothing after the checksum, numbers in
// range, names valid directory entries, the checksum right. Anything else is a
// damaged record. The checksum makes every truncation and every single changed byte
// detectable (FNV-1a steps are bijections), which positional parsing alone cannot
// promise: a record cut inside its last number would still parse.
#include "recovery/undo/undo_step.h"

#include <charconv>
#include <cstring>

#include <fmt/format.h>

#include "store/error.h"
#include "store/names.h"

namespace txnfs {

namespace {

constexpr char kVersion = '1';
constexpr int kFileIdIno32Gen = 0x01;     // as in backing.cc: u32 ino, u32 gen
constexpr int kXfsFileIdIno64Gen = 0x81;  // u64 ino, u32 gen
constexpr size_t kMaxFh = 4 + 128;        // handle_type + MAX_HANDLE_SZ

bool valid_kind(char c) {
  switch (static_cast<StepKind>(c)) {
    case StepKind::Attrs:
    case StepKind::Data:
    case StepKind::Created:
    case StepKind::Linked:
    case StepKind::Removed:
    case StepKind::Renamed:
    case StepKind::Xattrs:
    case StepKind::Made:
      return true;
  }
  return false;
}

uint32_t fnv1a(std::string_view s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}

// Checks fh against (ino, gen) when fh is of a type backing_id() produces; other
// types are taken as they are. Returns what is wrong, or nullptr.
const char *check_fh(const std::string &fh, uint64_t ino, uint64_t gen) {
  if (fh.size() < 5) return "file handle too short";
  int32_t type;
  std::memcpy(&type, fh.data(), 4);
  const char *f = fh.data() + 4;
  size_t n = fh.size() - 4;
  uint64_t i = 0;
  uint32_t g = 0, i32 = 0;
  if (type == kXfsFileIdIno64Gen) {
    if (n < 12) return "file handle too short";
    std::memcpy(&i, f, 8);
    std::memcpy(&g, f + 8, 4);
  } else if (type == kFileIdIno32Gen) {
    if (n < 8) return "file handle too short";
    std::memcpy(&i32, f, 4);
    std::memcpy(&g, f + 4, 4);
    i = i32;
  } else {
    return nullptr;
  }
  return i == ino && g == gen ? nullptr : "file handle disagrees with inode/generation";
}

class Writer {
 public:
  explicit Writer(const UndoStep &s) {
    out_ += kVersion;
    out_ += ' ';
    out_ += static_cast<char>(s.kind);
    num(s.seq);
    id(s.obj, "obj");
  }
  void num(uint64_t v) { fmt::format_to(std::back_inserter(out_), " {}", v); }
  void octal(uint32_t v) { fmt::format_to(std::back_inserter(out_), " {:o}", v); }
  void time(const timespec &t) {
    if (t.tv_nsec < 0 || t.tv_nsec >= 1'000'000'000)
      throw Error("undo step: nanoseconds out of range");
    fmt::format_to(std::back_inserter(out_), " {}.{:09}", int64_t(t.tv_sec), long(t.tv_nsec));
  }
  void id(const BackingId &b, const char *what) {
    const char *why =
        b.fh.size() > kMaxFh ? "file handle too long" : check_fh(b.fh, b.ino, b.generation);
    if (why) throw Error(fmt::format("undo step: {}: {}", what, why));
    fmt::format_to(std::back_inserter(out_), " {}:{}:", b.ino, b.generation);
    static const char kHex[] = "0123456789abcdef";
    for (unsigned char c : b.fh) {
      out_ += kHex[c >> 4];
      out_ += kHex[c & 15];
    }
  }
  void name(const std::string &n) {
    if (check_name(n) != 0) throw Error("undo step: invalid entry name");
    fmt::format_to(std::back_inserter(out_), " {}:", n.size());
    out_ += n;
  }
  std::string done() {
    fmt::format_to(std::back_inserter(out_), " #{:08x}", fnv1a(out_));
    if (out_.size() > kMaxEncoded)
      throw Error(
          fmt::format("undo step: record of {} bytes exceeds {}", out_.size(), kMaxEncoded));
    return std::move(out_);
  }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  [[noreturn]] void bad(const char *what) const {
    throw Error(fmt::format("damaged undo record: {} at byte {}", what, pos_));
  }
  void space() {
    if (pos_ >= s_.size() || s_[pos_] != ' ') bad("missing field separator");
    ++pos_;
  }
  // " #" checksum of everything before it, and nothing after.
  void end() {
    size_t body = pos_;
    space();
    expect('#', "missing checksum");
    uint32_t sum = 0;
    for (int i = 0; i < 8; ++i) {
      int v = hex(ch());
      if (v < 0) bad("bad checksum");
      sum = sum << 4 | uint32_t(v);
    }
    if (pos_ != s_.size()) bad("trailing bytes");
    if (sum != fnv1a(s_.substr(0, body))) bad("checksum mismatch");
  }
  char ch() {
    if (pos_ >= s_.size()) bad("truncated");
    return s_[pos_++];
  }
  template <class T>
  T num(int base = 10) {
    T v{};
    const char *b = s_.data() + pos_, *e = s_.data() + s_.size();
    auto [p, ec] = std::from_chars(b, e, v, base);
    if (ec != std::errc() || p == b) bad("bad number");
    pos_ += size_t(p - b);
    return v;
  }
  uint64_t u64() {
    space();
    return num<uint64_t>();
  }
  uint32_t u32(int base = 10) {
    space();
    return num<uint32_t>(base);
  }
  void expect(char c, const char *what) {
    if (ch() != c) {
      --pos_;
      bad(what);
    }
  }
  timespec time() {
    space();
    timespec t{};
    t.tv_sec = num<int64_t>();
    expect('.', "bad time");
    size_t start = pos_;
    for (int i = 0; i < 9; ++i)
      if (char c = ch(); c < '0' || c > '9') bad("bad nanoseconds");
    long ns = 0;
    for (size_t i = start; i < pos_; ++i) ns = ns * 10 + (s_[i] - '0');
    t.tv_nsec = ns;
    return t;
  }
  BackingId id() {
    space();
    BackingId b;
    b.ino = num<uint64_t>();
    expect(':', "bad id");
    b.generation = num<uint64_t>();
    expect(':', "bad id");
    while (pos_ < s_.size() && s_[pos_] != ' ') {
      int hi = hex(ch()), lo = pos_ < s_.size() ? hex(ch()) : -1;
      if (hi < 0 || lo < 0) bad("bad file handle");
      b.fh += char(hi << 4 | lo);
    }
    if (b.fh.size() > kMaxFh) bad("file handle too long");
    if (const char *why = check_fh(b.fh, b.ino, b.generation)) bad(why);
    return b;
  }
  std::string name() {
    space();
    size_t n = num<size_t>();
    expect(':', "bad name");
    if (n > s_.size() - pos_) bad("truncated name");
    std::string out(s_.substr(pos_, n));
    pos_ += n;
    if (check_name(out) != 0) bad("invalid entry name");
    return out;
  }

 private:
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }
  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

std::string encode_step(const UndoStep &s) {
  if (!valid_kind(static_cast<char>(s.kind))) throw Error("undo step: unknown kind");
  Writer w(s);
  switch (s.kind) {
    case StepKind::Attrs:
      w.octal(s.mode);
      w.num(s.uid);
      w.num(s.gid);
      w.num(s.size);
      w.time(s.atime);
      w.time(s.mtime);
      break;
    case StepKind::Data:
      w.num(s.off);
      w.num(s.len);
      break;
    case StepKind::Created:
    case StepKind::Removed:
      w.id(s.dir, "dir");
      w.name(s.name);
      w.num(s.flags);
      break;
    case StepKind::Linked:
      w.id(s.dir, "dir");
      w.name(s.name);
      break;
    case StepKind::Made:
      w.name(s.name);
      w.num(s.flags);
      break;
    case StepKind::Renamed:
      w.id(s.dir, "dir");
      w.name(s.name);
      w.id(s.dir2, "dir2");
      w.name(s.name2);
      w.num(s.flags);
      w.num(s.displaced ? 1 : 0);
      break;
    case StepKind::Xattrs:
      break;
  }
  return w.done();
}

UndoStep decode_step(std::string_view text) {
  Reader r(text);
  if (r.ch() != kVersion) r.bad("unknown record version");
  r.space();
  UndoStep s;
  char k = r.ch();
  if (!valid_kind(k)) r.bad("unknown step kind");
  s.kind = static_cast<StepKind>(k);
  s.seq = r.u64();
  s.obj = r.id();
  switch (s.kind) {
    case StepKind::Attrs:
      s.mode = r.u32(8);
      s.uid = r.u32();
      s.gid = r.u32();
      s.size = r.u64();
      s.atime = r.time();
      s.mtime = r.time();
      break;
    case StepKind::Data:
      s.off = r.u64();
      s.len = r.u64();
      if (s.off + s.len < s.off) r.bad("range overflows");
      break;
    case StepKind::Created:
    case StepKind::Removed:
      s.dir = r.id();
      s.name = r.name();
      s.flags = r.u32();
      break;
    case StepKind::Linked:
      s.dir = r.id();
      s.name = r.name();
      break;
    case StepKind::Made:
      s.name = r.name();
      s.flags = r.u32();
      if (s.flags > 1) r.bad("bad directory flag");
      break;
    case StepKind::Renamed: {
      s.dir = r.id();
      s.name = r.name();
      s.dir2 = r.id();
      s.name2 = r.name();
      s.flags = r.u32();
      uint32_t d = r.u32();
      if (d > 1) r.bad("bad displaced flag");
      s.displaced = d == 1;
      break;
    }
    case StepKind::Xattrs:
      break;
  }
  r.end();
  return s;
}

std::string step_name(uint64_t seq) { return fmt::format("{:016x}", seq); }

const char *step_kind_name(StepKind k) {
  switch (k) {
    case StepKind::Attrs:
      return "Attrs";
    case StepKind::Data:
      return "Data";
    case StepKind::Created:
      return "Created";
    case StepKind::Linked:
      return "Linked";
    case StepKind::Removed:
      return "Removed";
    case StepKind::Renamed:
      return "Renamed";
    case StepKind::Xattrs:
      return "Xattrs";
    case StepKind::Made:
      return "Made";
  }
  return "unknown";
}

}  // namespace txnfs
