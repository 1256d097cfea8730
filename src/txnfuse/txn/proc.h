// What /proc says about threads and processes, for binding requests to transactions.
#pragma once
#include <sys/types.h>

#include <optional>
#include <utility>

namespace txnfs {

// Tgid and PPid of a thread or process; {0, 0} when it is gone.
std::pair<pid_t, pid_t> tgid_ppid(pid_t tid);
// The owner (uid) of process `pid`; uid_t(-1) when it is gone.
uid_t owner_of_process(pid_t pid);

inline constexpr int kCapFowner = 3;  // CAP_FOWNER (linux/capability.h)
inline constexpr int kCapFsetid = 4;  // CAP_FSETID
// Whether thread `tid` has capability `cap` in its effective set, as the kernel's
// capable() would answer for it: a thread in another user namespace than this process
// has none here (capabilities count in their own namespace only). nullopt when /proc
// cannot tell (the thread is gone).
std::optional<bool> has_capability(pid_t tid, int cap);
// Whether thread `tid` has a file with inode number `ino` open for writing, from
// /proc/TID/fdinfo alone (nothing is opened or stat'ed through a mount: the caller may be
// serving a request of that very file). nullopt when /proc cannot tell.
std::optional<bool> has_open_for_writing(pid_t tid, ino_t ino);

}  // namespace txnfs
