#include "fs.h"

#include "txn.h"

namespace txnfs {

Fs::Fs() : txns(std::make_unique<TxnManager>(*this)) {}
Fs::~Fs() = default;

}  // namespace txnfs
