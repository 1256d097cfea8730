#include "txnfuse/fuse/fs.h"

#include "txnfuse/txn/txn.h"

namespace txnfs {

Fs::Fs() : inval(inodes, views), txns(std::make_unique<TxnManager>(*this)) { cache = &inval; }
Fs::~Fs() = default;

}  // namespace txnfs
