// LazyQueue: the lazily committed transactions whose commit records are not durable
// yet, in commit order (TXNFS_COMMIT_LAZY; docs/crash-model.md, *Lazy commit*).
//
// It has no mutex of its own: GroupCommit holds it GUARDED_BY its gc_mu_, the mutex
// that also orders the rounds, so that taking a sequence number, writing it into the
// log as the marker and queueing the transaction is one step in commit order, and a
// round takes the queue whole. Invariants:
//   - sequence numbers: each push() is the commit last_seq() + 1, and the first after
//     start(mark) is mark + 1 (a marker at or below the durable mark would count as
//     durable after a crash); so the queue is in sequence order;
//   - a lazy commit is in the queue, or in the round that took it (in_round), from its
//     push until that round made it durable; every one in the round precedes every one
//     queued in commit order;
//   - a round that failed gives its commits back to the front of the queue, in order:
//     they stay committed, and the next round tries again.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "txnfuse/txn/transaction.h"

namespace txnfs {

class LazyQueue {
 public:
  // Numbers on from the durable mark.
  void start(uint64_t mark) { seq_ = mark; }
  uint64_t last_seq() const { return seq_; }
  // Queues `t`, whose t->commit_seq is last_seq() + 1.
  void push(TxnPtr t);
  bool empty() const { return queued_.empty(); }
  const TxnPtr &front() const { return queued_.front(); }
  // The running round takes every queued commit.
  void take_for_round();
  // What the running round took (none if it took nothing), in commit order.
  std::vector<TxnPtr> in_round() const { return {in_round_.begin(), in_round_.end()}; }
  // The round failed: its commits go back to the front of the queue.
  void give_back();
  // The round is over: its commits are durable, or were given back.
  void end_round() { in_round_.clear(); }
  // The oldest lazy commit not durable yet (the round's first, else the queue's), or null.
  const Txn *oldest() const;
  // fn(const TxnPtr &) for each, the queued ones first.
  template <class F>
  void for_each(F fn) const {
    for (auto *q : {&queued_, &in_round_})
      for (auto &t : *q) fn(t);
  }

 private:
  std::deque<TxnPtr> queued_;    // commit order
  std::deque<TxnPtr> in_round_;  // taken by the running round
  uint64_t seq_ = 0;             // the last lazy commit's sequence number
};

}  // namespace txnfs
