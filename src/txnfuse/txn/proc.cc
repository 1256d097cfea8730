#include "txnfuse/txn/proc.h"

#include <sys/stat.h>

#include <fstream>
#include <string>

namespace txnfs {

std::pair<pid_t, pid_t> tgid_ppid(pid_t tid) {
  std::ifstream f("/proc/" + std::to_string(tid) + "/status");
  std::string line;
  pid_t tgid = 0, ppid = 0;
  while (std::getline(f, line)) {
    if (line.rfind("Tgid:", 0) == 0) tgid = pid_t(std::stol(line.substr(5)));
    else if (line.rfind("PPid:", 0) == 0) ppid = pid_t(std::stol(line.substr(5)));
  }
  return {tgid, ppid};
}

uid_t owner_of_process(pid_t pid) {
  struct stat st;
  return ::stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0 ? st.st_uid : uid_t(-1);
}

}  // namespace txnfs
