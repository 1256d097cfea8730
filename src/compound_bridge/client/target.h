// Target: what an operation's PATH argument names, parsed.
//
//   /a/b, a/b        the entry a/b below the export's root
//   /                the export's root
//   fh:HEX           the file whose handle (as GETFH returned it) is HEX
//   fh:HEX/a/b       the entry a/b below the directory whose handle is HEX
//
// "." and ".." are refused (NFSv4 LOOKUP takes neither); repeated slashes are one.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace txnfs::nfs {

struct Target {
  std::vector<uint8_t> fh;              // empty: start at the export's root
  std::vector<std::string> components;  // looked up one by one from there
};

// Throws Error for an empty path, a bad handle, or a "." / ".." component.
Target parse_target(std::string_view text);

std::string to_hex(const std::vector<uint8_t> &bytes);
// Throws Error unless TEXT is an even number of hex digits.
std::vector<uint8_t> from_hex(std::string_view text);

}  // namespace txnfs::nfs
