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
