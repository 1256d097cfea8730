// Errors on the request path (everything a FUSE request runs: src/txnfuse/fuse, the
// transaction core, the store and undo functions they call):
//
//   - A function that can fail returns `int`: 0, or a positive errno. What it makes
//     comes back through an out-parameter (or a type with an err(), such as InodeFd).
//     A system call's own form (-1 and errno) stays inside the function that makes the
//     call, or a wrapper that stands for the call (CommittedView::read_xattrs for
//     getxattr/listxattr). No function returns a negative errno.
//   - txnfs::Error (below) is thrown by what cannot answer an errno in place: SQLite
//     (MetaDb), set-up, recovery, the CLI. On the request path such an exception stops
//     in one place, serve() in src/txnfuse/fuse/ops.cc: it is logged and the request is
//     answered with its errno (EIO if it has none) -- and in READDIRPLUS, which must
//     still answer the entries it looked up before. A handler answers last, so nothing
//     after its answer may throw; one that must undo something on the way out catches,
//     undoes and rethrows.
//   - The public C library (include/txnfs/txnfs.h, src/libtxnfs) returns -errno, as
//     liburing and the kernel's own interfaces do; the daemon's positive errno becomes
//     negative in that library alone.
//
// txnfs::Error — the one exception type user-facing code throws. Its message says
// what is wrong; `hint` (optional) says how to fix it. The CLI prints both and exits
// non-zero; nothing that throws it has modified the store.
//
// It is a std::system_error: an error that comes from a failed system call keeps its
// errno as code() (generic_category), so callers can turn it back into an errno
// without reading the message (`errno_in`). Other errors have code() 0.
#pragma once
#include <string>
#include <system_error>

namespace txnfs {

class Error : public std::system_error {
 public:
  explicit Error(const std::string &what, std::string hint = {})
      : std::system_error(std::error_code(), what), what_(what), hint_(std::move(hint)) {}
  // "<what>: <strerror(err)>", with `err` kept as code().
  Error(int err, const std::string &what, std::string hint = {})
      : std::system_error(err, std::generic_category(), what),
        what_(what + ": " + std::generic_category().message(err)),
        hint_(std::move(hint)) {}
  const char *what() const noexcept override { return what_.c_str(); }
  const std::string &hint() const { return hint_; }

 private:
  std::string what_;  // the message as given (system_error would append ": Success")
  std::string hint_;
};

// Throws Error("<what>: <strerror(err)>") with code() == err.
[[noreturn]] void throw_errno(const std::string &what, int err);

// The errno an exception carries: code().value() of a std::system_error of the
// generic or system category (0 when it has none); 0 for any other exception.
int errno_in(const std::exception &e) noexcept;

}  // namespace txnfs
