#include "txnfuse/fuse/fs.h"

#include "txnfuse/txn/txn.h"

namespace txnfs {

Fs::Fs() : txns(std::make_unique<TxnManager>(*this)) { cache = &inval; }
Fs::~Fs() = default;

}  // namespace txnfs
