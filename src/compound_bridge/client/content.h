// File contents for txnfs-nfs: the deterministic test pattern of `write PATH --size N`,
// and the checksum `read` prints (pure; unit-tested).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace txnfs::nfs::cli {

// N bytes of records "<seed>@<offset>\n", where offset is where the record starts; the
// last one is cut at N. So a test predicts the content from the PATH as given:
//   out = b""
//   while len(out) < n: out += f"{seed}@{len(out)}\n".encode()
//   out = out[:n]
std::string pattern(std::string_view seed, uint64_t n);

// CRC-32 (IEEE 802.3, as zlib.crc32).
uint32_t crc32(std::string_view data);

// The whole of a local file; throws Error.
std::string read_local_file(const std::string &path);

}  // namespace txnfs::nfs::cli
