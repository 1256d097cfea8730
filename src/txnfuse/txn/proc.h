// What /proc says about threads and processes, for binding requests to transactions.
#pragma once
#include <sys/types.h>

#include <utility>

namespace txnfs {

// Tgid and PPid of a thread or process; {0, 0} when it is gone.
std::pair<pid_t, pid_t> tgid_ppid(pid_t tid);
// The owner (uid) of process `pid`; uid_t(-1) when it is gone.
uid_t owner_of_process(pid_t pid);

}  // namespace txnfs
