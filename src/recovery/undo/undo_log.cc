#include "recovery/undo/undo_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include <fmt/format.h>

#include "store/crash_point.h"
#include "store/error.h"
#include "store/fault_point.h"
#include "recovery/undo/undo_io.h"
#include "recovery/undo/undo_record.h"

namespace txnfs {

// Sequence numbers start at 1 (0 means "nothing recorded") and are taken atomically,
// so threads of one transaction may append concurrently; the caller orders changes
// to any one object (its locks), and so the steps of one object are in seq order.
struct UndoLog::Counters {
  std::atomic<uint64_t> next_seq{1};
  std::atomic<uint64_t> steps{0};
  std::atomic<uint64_t> backup_bytes{0};
  std::atomic<uint64_t> xattr_records{0};  // records tried as xattrs (undo_record.h)
};

namespace {

std::string data_name(uint64_t seq) { return step_name(seq) + ".d"; }

[[noreturn]] void misuse(const char *call, const UndoStep &s) {
  throw Error(fmt::format("UndoLog::{} cannot record a {} step", call, step_kind_name(s.kind)));
}

}  // namespace

UndoLog::UndoLog(UniqueFd dir_fd, uint64_t txid, bool reflink)
    : dir_fd_(std::move(dir_fd)),
      txid_(txid),
      reflink_(reflink),
      c_(std::make_unique<Counters>()) {}

UndoLog::~UndoLog() = default;

std::unique_ptr<UndoLog> UndoLog::create(int backups_fd, uint64_t txid, bool reflink) {
  std::string name = std::to_string(txid);
  if (::mkdirat(backups_fd, name.c_str(), 0700) != 0)
    throw_errno("create undo log backups/" + name, errno);
  UniqueFd fd(::openat(backups_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    ::unlinkat(backups_fd, name.c_str(), AT_REMOVEDIR);
    throw_errno("open undo log backups/" + name, fd.err());
  }
  TXNFS_CRASH_POINT("undo.after_log_dir");
  return std::unique_ptr<UndoLog>(new UndoLog(std::move(fd), txid, reflink));
}

uint64_t UndoLog::steps() const { return c_->steps.load(); }
uint64_t UndoLog::backup_bytes() const { return c_->backup_bytes.load(); }

// The record is one fsetxattr() of the log directory (or symlinkat(), undo_record.h): a
// single journaled metadata operation, ordered in the XFS log before any change the
// caller makes after we return. Returns 0 or an errno (nothing written). Once it returns
// 0 the record exists, and whatever it vouches for (a data object) must stay, whatever
// happens next: callers clean up only on an errno.
int UndoLog::put_record(uint64_t seq, UndoStep &s) {
  s.seq = seq;
  std::string text = encode_step(s);
  if (int e = TXNFS_FAULT("undo.record")) return e;
  bool as_xattr = c_->xattr_records.fetch_add(1) < kMaxXattrRecords, refused = false;
  if (int e = put_record_text(dir_fd_.get(), seq, text, as_xattr, &refused)) return e;
  if (refused) c_->xattr_records = kMaxXattrRecords;  // symlinks from here on
  c_->steps++;
  return 0;
}

// After a record is written: the crash point, then the observer (which may throw).
void UndoLog::recorded(const UndoStep &s) {
  TXNFS_CRASH_POINT("undo.after_record");
  if (observer_) observer_(txid_, s);
}

uint64_t UndoLog::write_record(uint64_t seq, UndoStep &s) {
  if (int e = put_record(seq, s))
    throw_errno(fmt::format("write undo record {}/{}", txid_, step_name(seq)), e);
  recorded(s);
  return seq;
}

uint64_t UndoLog::append(UndoStep s) {
  bool ok = s.kind == StepKind::Attrs || s.kind == StepKind::Linked || s.kind == StepKind::Made ||
            (s.kind == StepKind::Renamed && !s.displaced);
  if (!ok) misuse("append", s);
  return write_record(c_->next_seq++, s);
}

uint64_t UndoLog::backup_range(int fd, UndoStep s) {
  if (s.kind != StepKind::Data) misuse("backup_range", s);
  struct stat st;
  if (::fstat(fd, &st) != 0) throw_errno("backup_range: stat", errno);
  if (!S_ISREG(st.st_mode)) throw_errno("backup_range", EINVAL);
  if (s.off + s.len < s.off) throw_errno("backup_range", EINVAL);
  uint64_t size = uint64_t(st.st_size);
  if (s.len == 0 || s.off >= size) return 0;  // no byte of the range holds data now

  // The block-aligned superset of [off, off+len), clipped to EOF: FICLONERANGE takes
  // aligned ranges only, except one that ends exactly at the source's EOF.
  uint64_t bs = undo_io::clone_block(fd);
  uint64_t start = s.off / bs * bs;
  uint64_t end = s.off + s.len > UINT64_MAX - bs ? UINT64_MAX : (s.off + s.len + bs - 1) / bs * bs;
  end = std::min(end, size);

  // FICLONERANGE needs a readable source; pread needs a fd without O_DIRECT.
  int fl = ::fcntl(fd, F_GETFL);
  UniqueFd reopened;
  if (fl < 0 || (fl & O_PATH) || (fl & O_ACCMODE) == O_WRONLY || (!reflink_ && (fl & O_DIRECT))) {
    reopened = UniqueFd(::open(proc_path(fd).c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
    if (!reopened) throw_errno("backup_range: reopen for reading", reopened.err());
    fd = reopened.get();
  }

  uint64_t seq = c_->next_seq++;
  std::string dname = data_name(seq);
  UniqueFd d(::openat(dir_fd_.get(), dname.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!d) throw_errno(fmt::format("create backup {}/{}", txid_, dname), d.err());
  int e = TXNFS_FAULT("undo.backup");
  if (!e) e = reflink_ ? undo_io::clone_range(fd, d.get(), start, end - start) : EOPNOTSUPP;
  if (e == EOPNOTSUPP || e == EXDEV || e == ENOTTY || e == EINVAL) {
    // Copy mode, a file system without reflink, or a layout the kernel will not remap
    // (EINVAL; the range is aligned as the kernel asks, so this should not happen).
    // The copy lives in the page cache, so unlike a clone it must be flushed before the
    // caller overwrites the original.
    e = undo_io::copy_range(fd, d.get(), start, end - start);
    if (e == 0 && ::fdatasync(d.get()) != 0) e = errno;
  }
  if (e != 0) {
    ::unlinkat(dir_fd_.get(), dname.c_str(), 0);
    throw_errno(fmt::format("back up {} bytes at {}", end - start, start), e);
  }
  s.off = start;
  s.len = end - start;
  TXNFS_CRASH_POINT("undo.after_backup");
  if (int err = put_record(seq, s)) {
    ::unlinkat(dir_fd_.get(), dname.c_str(), 0);
    throw_errno(fmt::format("write undo record {}/{}", txid_, step_name(seq)), err);
  }
  c_->backup_bytes += s.len;
  recorded(s);
  return seq;
}

int UndoLog::stash(int dirfd, const char *name, UndoStep s, uint64_t *seq_out) {
  if (s.kind != StepKind::Removed && !(s.kind == StepKind::Renamed && s.displaced))
    misuse("stash", s);
  uint64_t seq = c_->next_seq++;
  int err;
  try {
    err = put_record(seq, s);
  } catch (const Error &) {
    return EINVAL;  // (from encode_step) a name no directory entry can have
  }
  if (err) return err;
  TXNFS_CRASH_POINT("undo.after_record");
  int e = TXNFS_FAULT("undo.stash");
  if (e || ::renameat2(dirfd, name, dir_fd_.get(), data_name(seq).c_str(), RENAME_NOREPLACE) != 0) {
    if (!e) e = errno;
    if (remove_record(dir_fd_.get(), seq) == 0) c_->steps--;
    return e;
  }
  TXNFS_CRASH_POINT("undo.after_stash");
  if (observer_) observer_(txid_, s);
  if (seq_out) *seq_out = seq;
  return 0;
}

uint64_t UndoLog::snapshot_xattrs(int fd, UndoStep s) {
  if (s.kind != StepKind::Xattrs) misuse("snapshot_xattrs", s);
  struct stat st;
  if (::fstat(fd, &st) != 0) throw_errno("snapshot_xattrs: stat", errno);
  undo_io::Xattrs xs;
  if (int e = undo_io::read_xattrs(proc_path(fd), xs)) throw_errno("snapshot_xattrs: read", e);

  // A directory's snapshot is a directory: default ACLs exist only on directories.
  uint64_t seq = c_->next_seq++;
  std::string dname = data_name(seq);
  bool dir = S_ISDIR(st.st_mode);
  if (dir && ::mkdirat(dir_fd_.get(), dname.c_str(), 0700) != 0)
    throw_errno(fmt::format("create xattr snapshot {}/{}", txid_, dname), errno);
  UniqueFd d(::openat(
      dir_fd_.get(), dname.c_str(),
      (dir ? O_RDONLY | O_DIRECTORY : O_RDWR | O_CREAT | O_EXCL) | O_NOFOLLOW | O_CLOEXEC, 0600));
  int e = d ? TXNFS_FAULT("undo.backup") : d.err();
  // Drop what the kernel may have put on the new object (inherited default ACLs,
  // security labels), so the snapshot holds exactly the xattrs of `fd`.
  undo_io::Xattrs own;
  if (e == 0) e = undo_io::read_xattrs(proc_path(d.get()), own);
  for (auto it = own.begin(); e == 0 && it != own.end(); ++it)
    if (::fremovexattr(d.get(), it->first.c_str()) != 0 && errno != ENODATA) e = errno;
  for (auto it = xs.begin(); e == 0 && it != xs.end(); ++it)
    if (::fsetxattr(d.get(), it->first.c_str(), it->second.data(), it->second.size(), 0) != 0)
      e = errno;
  if (e != 0) {
    ::unlinkat(dir_fd_.get(), dname.c_str(), dir ? AT_REMOVEDIR : 0);
    throw_errno(fmt::format("snapshot xattrs into {}/{}", txid_, dname), e);
  }
  TXNFS_CRASH_POINT("undo.after_backup");
  if (int err = put_record(seq, s)) {
    ::unlinkat(dir_fd_.get(), dname.c_str(), dir ? AT_REMOVEDIR : 0);
    throw_errno(fmt::format("write undo record {}/{}", txid_, step_name(seq)), err);
  }
  recorded(s);
  return seq;
}

int mark_lazy_commit(int log_fd, uint64_t seq) {
  if (int e = TXNFS_FAULT("commit.lazy_marker")) return e;
  return put_lazy_marker(log_fd, seq);
}

std::optional<uint64_t> lazy_commit_seq(int backups_fd, uint64_t txid) {
  std::string name = std::to_string(txid);
  UniqueFd log(::openat(backups_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!log) return std::nullopt;
  return read_lazy_marker(log.get());
}

}  // namespace txnfs
