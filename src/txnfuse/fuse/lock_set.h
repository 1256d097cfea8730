// Predeclared lock sets: a transaction names, before its first request, the objects and
// entries it will touch (txnfs_lock_set, include/txnfs/txnfs.h); the daemon resolves the
// names to nodeids and acquires every lock at once (LockManager::acquire_set).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <string_view>

#include "txnfuse/fuse/fs.h"
#include "txnfuse/txn/txn.h"

namespace txnfs {

// Resolves RECORDS (whole txnfs_lock_rec records) and acquires them for T, waiting up to
// TIMEOUT. Returns 0, EBADMSG (malformed records), EBUSY (T already holds locks),
// ENOENT (T is ending) or ETIMEDOUT — or LockManager::kParked when the set must wait:
// DONE then gets one of those later, on a resume thread (fuse/park.h).
int acquire_lock_set(Fs &fs, const TxnPtr &t, std::string_view records,
                     std::chrono::milliseconds timeout, std::function<void(int)> done);

}  // namespace txnfs
