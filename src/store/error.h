// txnfs::Error — the one exception type user-facing code throws. Its message says
// what is wrong; `hint` (optional) says how to fix it. The CLI prints both and exits
// non-zero; nothing that throws it has modified the store.
#pragma once
#include <stdexcept>
#include <string>

namespace txnfs {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string &what, std::string hint = {})
      : std::runtime_error(what), hint_(std::move(hint)) {}
  const std::string &hint() const { return hint_; }

 private:
  std::string hint_;
};

// Throws Error("<what>: <strerror(err)>").
[[noreturn]] void throw_errno(const std::string &what, int err);

}  // namespace txnfs
