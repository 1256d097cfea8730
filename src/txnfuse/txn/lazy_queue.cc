// LazyQueue (lazy_queue.h): lazy commits not durable yet, in commit order.
#include "txnfuse/txn/lazy_queue.h"

#include <cassert>

namespace txnfs {

void LazyQueue::push(TxnPtr t) {
  assert(t->commit_seq == seq_ + 1);
  seq_ = t->commit_seq;
  queued_.push_back(std::move(t));
}

void LazyQueue::take_for_round() {
  // (in_round_ is empty: one round at a time, and each ends with end_round)
  in_round_.swap(queued_);
}

void LazyQueue::give_back() {
  for (auto it = in_round_.rbegin(); it != in_round_.rend(); ++it) queued_.push_front(*it);
  in_round_.clear();
}

const Txn *LazyQueue::oldest() const {
  return !in_round_.empty() ? in_round_.front().get()
         : !queued_.empty() ? queued_.front().get()
                            : nullptr;
}

}  // namespace txnfs
