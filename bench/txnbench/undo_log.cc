#include "bench/txnbench/undo_log.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <dirent.h>
#include <sys/xattr.h>

#include "bench/lib/files.h"

namespace txnbench {

using namespace bench;

bool is_record_name(std::string_view n) {
  return n.size() == 16 && std::all_of(n.begin(), n.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::pair<uint64_t, uint64_t> count_log(const std::string &dir) {
  uint64_t records = 0, other = 0;
  DIR *d = opendir(dir.c_str());
  if (!d) return {0, 0};
  while (dirent *e = readdir(d)) {
    if (is_dot_or_dotdot(e->d_name)) continue;
    if (e->d_type == DT_LNK && is_record_name(e->d_name)) ++records;
    else if (e->d_type != DT_LNK) ++other;
  }
  closedir(d);
  std::vector<char> names(65536);
  ssize_t len = listxattr(dir.c_str(), names.data(), names.size());
  const std::string_view prefix = "trusted.txnfs.";
  for (ssize_t i = 0; i < len; i += ssize_t(strlen(names.data() + i)) + 1) {
    std::string_view n(names.data() + i);
    if (n.substr(0, prefix.size()) == prefix && is_record_name(n.substr(prefix.size()))) ++records;
  }
  return {records, other};
}

std::string only_log_dir(const std::string &backups) {
  std::string found;
  DIR *d = opendir(backups.c_str());
  if (!d) return "";
  int n = 0;
  while (dirent *e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    found = backups + "/" + e->d_name;
    ++n;
  }
  closedir(d);
  return n == 1 ? found : "";
}

}  // namespace txnbench
