// UniqueFd — the one owner of a file descriptor: closes it when it dies. Built from
// the result of open(2) and friends, it keeps the errno of a failed call (err()), so
// that `UniqueFd fd(::open(...)); if (!fd) ... fd.err()` needs no errno juggling.
#pragma once
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace txnfs {

class UniqueFd {
 public:
  UniqueFd() = default;
  // Takes `fd`; fd < 0 means none, and keeps the current errno as err().
  explicit UniqueFd(int fd) noexcept : fd_(fd), err_(fd < 0 ? errno : 0) {}
  UniqueFd(UniqueFd &&o) noexcept : fd_(std::exchange(o.fd_, -1)), err_(o.err_) {}
  UniqueFd &operator=(UniqueFd &&o) noexcept {
    if (this != &o) {
      reset(std::exchange(o.fd_, -1));
      err_ = o.err_;
    }
    return *this;
  }
  UniqueFd(const UniqueFd &) = delete;
  UniqueFd &operator=(const UniqueFd &) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  // The errno of the call that failed to give an fd (0 when there is one).
  int err() const { return err_; }
  explicit operator bool() const { return fd_ >= 0; }
  // Gives the fd up without closing it.
  int release() { return std::exchange(fd_, -1); }
  // Closes the fd held (if any) and takes `fd`.
  void reset(int fd = -1) noexcept {
    int err = fd < 0 ? errno : 0;  // before close() can change it
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
    err_ = err;
  }

 private:
  int fd_ = -1;
  int err_ = 0;
};

}  // namespace txnfs
