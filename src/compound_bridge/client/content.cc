#include "compound_bridge/client/content.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "compound_bridge/client/nfs_client.h"

namespace txnfs::nfs::cli {

std::string pattern(std::string_view seed, uint64_t n) {
  std::string out;
  out.reserve(n);
  while (out.size() < n) {
    size_t start = out.size();
    out += seed;
    out += '@';
    out += std::to_string(start);
    out += '\n';
  }
  out.resize(n);
  return out;
}

uint32_t crc32(std::string_view data) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (char ch : data) c = table[(c ^ static_cast<uint8_t>(ch)) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::string read_local_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path + ": " + std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw Error("cannot read " + path);
  return std::move(s).str();
}

}  // namespace txnfs::nfs::cli
