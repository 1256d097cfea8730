#include "store/backing.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "store/error.h"

namespace txnfs {

namespace {

// Generic Linux fid types (include/linux/exportfs.h) that XFS and ext4 produce.
constexpr int kFileIdIno32Gen = 0x01;     // u32 ino, u32 gen
constexpr int kXfsFileIdIno64Gen = 0x81;  // u64 ino, u32 gen (XFS with 64-bit inodes)

uint32_t load32(const unsigned char *p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

BackingId backing_id(int fd) {
  struct stat st;
  if (::fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) throw_errno("stat", errno);
  return backing_id(fd, st);
}

BackingId backing_id(int fd, const struct stat &st) {
  std::vector<char> buf(sizeof(file_handle) + MAX_HANDLE_SZ);
  auto *h = reinterpret_cast<file_handle *>(buf.data());
  h->handle_bytes = MAX_HANDLE_SZ;
  int mount_id;
  if (::name_to_handle_at(fd, "", h, &mount_id, AT_EMPTY_PATH) != 0)
    throw_errno("name_to_handle_at", errno);
  BackingId id;
  const unsigned char *f = h->f_handle;
  id.ino = st.st_ino;
  if (h->handle_type == kXfsFileIdIno64Gen && h->handle_bytes >= 12) {
    id.generation = load32(f + 8);
  } else if (h->handle_type == kFileIdIno32Gen && h->handle_bytes >= 8) {
    // ext4 and XFS with 32-bit inodes put the inode number first; tmpfs puts the
    // generation first.
    id.generation = load32(f) == uint32_t(st.st_ino) ? load32(f + 4) : load32(f);
  } else {
    throw Error("unsupported backing file handle type " + std::to_string(h->handle_type),
                "the store must live on XFS (or ext4 with --allow-copy-backups)");
  }
  int32_t type = h->handle_type;
  id.fh.assign(reinterpret_cast<const char *>(&type), 4);
  id.fh.append(reinterpret_cast<const char *>(f), h->handle_bytes);
  return id;
}

UniqueFd open_by_fh(int mount_fd, const std::string &fh, int flags) {
  if (fh.size() < 4 || fh.size() > 4 + MAX_HANDLE_SZ) {
    errno = ESTALE;
    return UniqueFd(-1);
  }
  std::vector<char> buf(sizeof(file_handle) + MAX_HANDLE_SZ);
  auto *h = reinterpret_cast<file_handle *>(buf.data());
  int32_t type;
  std::memcpy(&type, fh.data(), 4);
  h->handle_type = type;
  h->handle_bytes = unsigned(fh.size() - 4);
  std::memcpy(h->f_handle, fh.data() + 4, fh.size() - 4);
  return UniqueFd(::open_by_handle_at(mount_fd, h, flags));
}

}  // namespace txnfs
