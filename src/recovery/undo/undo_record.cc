#include "recovery/undo/undo_record.h"

#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "recovery/undo/undo_io.h"
#include "store/error.h"
#include "recovery/undo/undo_step.h"

namespace txnfs {

namespace {

constexpr const char *kLazyXattr = "trusted.txnfs.lazy";
constexpr const char *kLazySymlink = "lazy";
constexpr const char *kLazyDurableXattr = "trusted.txnfs.lazy_durable";

// The xattr cannot be written here, but a symlink may be: trusted xattrs need
// CAP_SYS_ADMIN and a file system that has them; ext4 keeps an inode's xattrs in one
// block (ENOSPC when it is full). On XFS, ENOSPC means the disk is full, and the
// symlink then fails the same way.
bool xattr_refused(int e) {
  return e == ENOTSUP || e == EOPNOTSUPP || e == EPERM || e == ENOSPC || e == E2BIG;
}

std::optional<uint64_t> decimal(std::string_view s) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

std::string record_xattr_name(uint64_t seq) {
  return std::string(kRecordXattrPrefix) + step_name(seq);
}

bool record_seq(std::string_view n, uint64_t &seq) {
  if (n.size() != 16) return false;
  for (char c : n)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  std::from_chars(n.data(), n.data() + n.size(), seq, 16);
  return true;
}

int put_record_text(int log_fd, uint64_t seq, const std::string &text, bool as_xattr,
                    bool *refused) {
  if (as_xattr) {
    if (::fsetxattr(log_fd, record_xattr_name(seq).c_str(), text.data(), text.size(),
                    XATTR_CREATE) == 0)
      return 0;
    if (!xattr_refused(errno)) return errno;
    if (refused) *refused = true;
  }
  if (::symlinkat(text.c_str(), log_fd, step_name(seq).c_str()) != 0) return errno;
  return 0;
}

std::vector<StoredRecord> read_records(int log_fd, std::vector<std::string> &problems) {
  std::map<uint64_t, std::string> found;  // seq -> text
  char buf[kMaxEncoded + 1];

  std::vector<char> names(65536);
  ssize_t len = ::flistxattr(log_fd, names.data(), names.size());
  if (len < 0 && errno != ENOTSUP && errno != EOPNOTSUPP) {
    problems.push_back(
        fmt::format("the records kept as xattrs cannot be listed: {}", std::strerror(errno)));
    len = 0;
  }
  for (ssize_t i = 0; i < len; i += ssize_t(std::strlen(names.data() + i)) + 1) {
    std::string_view n(names.data() + i);
    uint64_t seq;
    if (n.substr(0, kRecordXattrPrefix.size()) != kRecordXattrPrefix ||
        !record_seq(n.substr(kRecordXattrPrefix.size()), seq))
      continue;  // the lazy marker, or an xattr that is none of ours
    std::string name(n);
    ssize_t k = ::fgetxattr(log_fd, name.c_str(), buf, sizeof buf);
    if (k < 0 && errno == ENODATA) continue;  // removed since the listing
    if (k < 0 && errno == ERANGE) {
      problems.push_back(fmt::format("record {}: longer than any record", name));
    } else if (k < 0) {
      problems.push_back(fmt::format("record {}: {}", name, std::strerror(errno)));
    } else {
      found.emplace(seq, std::string(buf, size_t(k)));
    }
  }

  for (const auto &e : undo_io::list_dir(log_fd)) {
    uint64_t seq;
    if (!record_seq(e.name, seq)) continue;  // data objects, the lazy marker, strays
    ssize_t k = ::readlinkat(log_fd, e.name.c_str(), buf, sizeof buf);
    if (k < 0 && errno == ENOENT) continue;
    if (k < 0) {
      problems.push_back(fmt::format("record {}: {}", e.name, std::strerror(errno)));
    } else if (size_t(k) > kMaxEncoded) {
      problems.push_back(fmt::format("record {}: longer than any record", e.name));
    } else if (!found.emplace(seq, std::string(buf, size_t(k))).second) {
      problems.push_back(
          fmt::format("record {}: stored both as a symlink and as an xattr", e.name));
    }
  }

  std::vector<StoredRecord> out;
  out.reserve(found.size());
  for (auto &[seq, text] : found) out.push_back({seq, std::move(text)});
  return out;
}

int remove_record(int log_fd, uint64_t seq) {
  if (::fremovexattr(log_fd, record_xattr_name(seq).c_str()) == 0) return 0;
  if (errno != ENODATA && errno != ENOTSUP && errno != EOPNOTSUPP && errno != EPERM) return errno;
  if (::unlinkat(log_fd, step_name(seq).c_str(), 0) == 0) return 0;
  return errno;
}

int put_lazy_marker(int log_fd, uint64_t commit_seq) {
  std::string v = std::to_string(commit_seq);
  if (::fsetxattr(log_fd, kLazyXattr, v.data(), v.size(), XATTR_CREATE) == 0) return 0;
  if (!xattr_refused(errno)) return errno;
  if (::symlinkat(v.c_str(), log_fd, kLazySymlink) == 0) return 0;
  return errno;
}

std::optional<uint64_t> read_lazy_marker(int log_fd) {
  char buf[32];
  ssize_t n = ::fgetxattr(log_fd, kLazyXattr, buf, sizeof buf);
  if (n < 0) n = ::readlinkat(log_fd, kLazySymlink, buf, sizeof buf);
  if (n <= 0 || size_t(n) >= sizeof buf) return std::nullopt;
  return decimal(std::string_view(buf, size_t(n)));
}

int set_lazy_durable(int backups_fd, uint64_t seq) {
  std::string v = std::to_string(seq);
  return ::fsetxattr(backups_fd, kLazyDurableXattr, v.data(), v.size(), 0) == 0 ? 0 : errno;
}

bool lazy_durable_refused(int err) { return xattr_refused(err); }

uint64_t lazy_durable_upto(int backups_fd) {
  char buf[32];
  ssize_t n = ::fgetxattr(backups_fd, kLazyDurableXattr, buf, sizeof buf);
  if (n < 0 && (errno == ENODATA || xattr_refused(errno))) return 0;
  if (n < 0) throw_errno(std::string("read ") + kLazyDurableXattr, errno);
  std::optional<uint64_t> v;
  if (size_t(n) < sizeof buf) v = decimal(std::string_view(buf, size_t(n)));
  if (!v)
    throw Error(fmt::format("the backups directory's {} is garbled: \"{}\"", kLazyDurableXattr,
                            std::string_view(buf, std::min(size_t(n), sizeof buf))),
                "it holds the highest commit sequence number of the lazy commits made "
                "durable; recovery cannot tell which of them are committed without it");
  return *v;
}

}  // namespace txnfs
