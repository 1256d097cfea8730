// The operations of a txnfs-nfs command line or batch file, parsed (pure; unit-tested).
//
//   write PATH (@LOCALFILE | =TEXT | --size N) [--mode MODE]
//   read PATH [--count N] [--out FILE|-]
//   mkdir PATH [MODE]
//   remove PATH
//   rename FROM TO
//   link EXISTING NEW
//   symlink TARGET PATH
//   setattr PATH KEY=VALUE...      mode=0644 size=N uid=N gid=N atime=now|SEC[.NSEC] mtime=...
//   getattr PATH
//   readdir PATH [--count N]
//   getfh PATH
//
// MODEs are octal. On the command line operations are separated by a ";" argument; a batch
// file has one per line, "#" starts a comment line, and "=TEXT" runs to the end of its
// line (spaces included).
#pragma once
#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compound_bridge/client/nfs_client.h"

namespace txnfs::nfs::cli {

// Where a write's data comes from.
struct DataSource {
  enum class Kind { kNone, kFile, kLiteral, kPattern } kind = Kind::kNone;
  std::string text;   // kFile: the local path; kLiteral: the data
  uint64_t size = 0;  // kPattern
};

struct OpSpec {
  OpKind kind = OpKind::kGetattr;
  std::string path;
  std::string path2;  // rename/link: the new name; symlink: the link's path (path: target)
  DataSource data;    // write
  uint32_t mode = 0;  // write (0644 unless given), mkdir (0755 unless given)
  std::optional<uint32_t> count;  // read, readdir: most bytes (default: --read-max)
  std::string out;                // read: where the data goes ("-": stdout)
  SetAttrs attrs;                 // setattr
};

// Parses one operation from its words. Throws Error (message without position).
OpSpec parse_op(const std::vector<std::string> &words);

// Operations separated by ";" arguments. Throws Error naming the operation's number.
std::vector<OpSpec> parse_command_line(const std::vector<std::string> &args);

// Splits a batch line into words: whitespace separates them, and a word that starts
// with "=" takes the rest of the line. A blank or comment line has none.
std::vector<std::string> split_batch_line(std::string_view line);

// One operation per line. Throws Error naming NAME and the line number.
std::vector<OpSpec> parse_batch(std::istream &in, const std::string &name);

}  // namespace txnfs::nfs::cli
