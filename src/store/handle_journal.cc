#include "store/handle_journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <fstream>

#include <fmt/format.h>

#include "store/backing.h"
#include "store/error.h"

namespace txnfs {

namespace {

std::string hex(std::string_view b) {
  static const char *d = "0123456789abcdef";
  std::string s;
  s.reserve(b.size() * 2);
  for (unsigned char c : b) {
    s.push_back(d[c >> 4]);
    s.push_back(d[c & 15]);
  }
  return s;
}

std::optional<std::string> unhex(std::string_view s) {
  if (s.size() % 2) return std::nullopt;
  std::string b;
  b.reserve(s.size() / 2);
  for (size_t k = 0; k < s.size(); k += 2) {
    unsigned v = 0;
    auto r = std::from_chars(s.data() + k, s.data() + k + 2, v, 16);
    if (r.ec != std::errc() || r.ptr != s.data() + k + 2) return std::nullopt;
    b.push_back(char(v));
  }
  return b;
}

bool number(std::string_view s, uint64_t &v) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace

// A row:     nodeid generation ino type fh(hex) uuid parent|- name(hex)
// A removal: - nodeid
std::string encode_handle_line(const HandleChange &c) {
  if (c.removal) return fmt::format("- {}\n", c.row.nodeid);
  const HandleRow &r = c.row;
  return fmt::format("{} {} {} {} {} {} {} {}\n", r.nodeid, r.generation, r.ino, r.type, hex(r.fh),
                     r.uuid, r.parent ? std::to_string(*r.parent) : "-",
                     r.parent ? hex(r.name) : "-");
}

std::optional<HandleChange> decode_handle_line(std::string_view line) {
  std::vector<std::string_view> f;
  while (!line.empty()) {
    size_t sp = line.find(' ');
    f.push_back(line.substr(0, sp));
    if (sp == std::string_view::npos) break;
    line.remove_prefix(sp + 1);
  }
  HandleChange c;
  if (f.size() == 2 && f[0] == "-") {
    c.removal = true;
    if (!number(f[1], c.row.nodeid)) return std::nullopt;
    return c;
  }
  if (f.size() != 8) return std::nullopt;
  HandleRow &r = c.row;
  uint64_t type = 0;
  if (!number(f[0], r.nodeid) || !number(f[1], r.generation) || !number(f[2], r.ino) ||
      !number(f[3], type) || f[5].empty())
    return std::nullopt;
  r.type = uint32_t(type);
  auto fh = unhex(f[4]);
  if (!fh || fh->empty()) return std::nullopt;
  r.fh = *fh;
  r.uuid = f[5];
  if (f[6] != "-") {
    uint64_t p = 0;
    auto name = unhex(f[7]);
    if (!number(f[6], p) || !name) return std::nullopt;
    r.parent = p;
    r.name = *name;
  }
  return c;
}

std::unique_ptr<HandleJournal> HandleJournal::open(const std::string &path) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!fd) throw_errno("open " + path, fd.err());
  return std::unique_ptr<HandleJournal>(new HandleJournal(std::move(fd), path));
}

void HandleJournal::append(const HandleChange &change) {
  std::string line = encode_handle_line(change);
  ssize_t n = ::write(fd_.get(), line.data(), line.size());
  if (n != ssize_t(line.size())) {
    int err = n < 0 ? errno : ENOSPC;
    // A torn line is skipped by the replay (it does not decode); cut it off anyway.
    if (n > 0) {
      struct stat st;
      if (::fstat(fd_.get(), &st) == 0) [[maybe_unused]]
        int r = ::ftruncate(fd_.get(), st.st_size - n);
    }
    throw_errno("append to " + path_, err);
  }
}

void HandleJournal::clear() {
  if (::ftruncate(fd_.get(), 0) != 0) throw_errno("truncate " + path_, errno);
}

void HandleJournal::sync() {
  if (::fdatasync(fd_.get()) != 0) throw_errno("fdatasync " + path_, errno);
}

std::vector<HandleChange> read_handle_journal(const std::string &path) {
  std::vector<HandleChange> changes;
  std::ifstream in(path);
  std::string line;
  while (in && std::getline(in, line))
    if (auto c = decode_handle_line(line)) changes.push_back(std::move(*c));  // (torn: skipped)
  return changes;
}

namespace {
// Does the object `row` names exist (with a name)? Its handle holds the generation: a
// later object with the same inode number does not open.
bool exists(int tree_fd, const HandleRow &row) {
  UniqueFd fd = open_by_fh(tree_fd, row.fh, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  return fd && ::fstat(fd.get(), &st) == 0 && uint64_t(st.st_ino) == row.ino && st.st_nlink > 0;
}
}  // namespace

size_t replay_handle_journal(const std::string &path, int tree_fd, MetaDb &db) {
  size_t written = 0;
  for (auto &c : read_handle_journal(path)) {
    std::optional<HandleRow> now = db.handle(c.row.nodeid);
    if (c.removal) {
      if (!now || exists(tree_fd, *now)) continue;  // (a rollback brought it back)
      db.remove_handle(c.row.nodeid);
    } else {
      if (now || !exists(tree_fd, c.row)) continue;
      db.put_handle(c.row);
    }
    written++;
  }
  if (::truncate(path.c_str(), 0) != 0 && errno != ENOENT) throw_errno("truncate " + path, errno);
  return written;
}

}  // namespace txnfs
