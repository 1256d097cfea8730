#include "compound_bridge/client/target.h"

#include "compound_bridge/client/nfs_client.h"

namespace txnfs::nfs {
namespace {

constexpr std::string_view kFhPrefix = "fh:";
constexpr size_t kMaxHandle = 128;  // NFS4_FHSIZE

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string to_hex(const std::vector<uint8_t> &bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

std::vector<uint8_t> from_hex(std::string_view text) {
  if (text.size() % 2 != 0) throw Error("odd number of hex digits in '" + std::string(text) + "'");
  std::vector<uint8_t> bytes;
  bytes.reserve(text.size() / 2);
  for (size_t i = 0; i < text.size(); i += 2) {
    int hi = hex_digit(text[i]), lo = hex_digit(text[i + 1]);
    if (hi < 0 || lo < 0) throw Error("not hex: '" + std::string(text) + "'");
    bytes.push_back(static_cast<uint8_t>(hi << 4 | lo));
  }
  return bytes;
}

Target parse_target(std::string_view text) {
  if (text.empty()) throw Error("empty path");
  Target t;
  std::string_view rest = text;
  if (rest.starts_with(kFhPrefix)) {
    rest.remove_prefix(kFhPrefix.size());
    size_t slash = rest.find('/');
    std::string_view hex = rest.substr(0, slash);
    if (hex.empty()) throw Error("no handle after fh: in '" + std::string(text) + "'");
    t.fh = from_hex(hex);
    if (t.fh.size() > kMaxHandle) {
      throw Error("handle of " + std::to_string(t.fh.size()) + " bytes in '" + std::string(text) +
                  "' (NFSv4 handles have at most 128)");
    }
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  }
  while (!rest.empty()) {
    size_t slash = rest.find('/');
    std::string_view name = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    if (name.empty()) continue;
    if (name == "." || name == "..") {
      throw Error("'" + std::string(name) + "' in path '" + std::string(text) +
                  "': give paths without . and ..");
    }
    t.components.emplace_back(name);
  }
  return t;
}

}  // namespace txnfs::nfs
