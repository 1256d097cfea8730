// The annotated mutexes and the run-time lock-order checker (src/sync/mutex.h).
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "sync/mutex.h"

using namespace txnfs;

namespace {

std::string last_report;
void capture(const std::string &m) { last_report = m; }

// Counts the violations `fn` reports (none reach stderr; nothing aborts).
template <typename F>
unsigned long violations_in(F &&fn) {
  ::unsetenv("TXNFS_LOCK_ORDER_ABORT");
  lock_order::set_reporter(capture);
  last_report.clear();
  unsigned long before = lock_order::violations();
  fn();
  lock_order::set_reporter(nullptr);
  return lock_order::violations() - before;
}

}  // namespace

TEST_CASE("acquiring mutexes down the hierarchy is no violation") {
  if (!lock_order::kEnabled) return;  // built without -Dlock_order_check
  Mutex txn(LockRank::kTxn), pending(LockRank::kCommittedView);
  RecursiveMutex db(LockRank::kMetaDb);
  CHECK(violations_in([&] {
          MutexLock a(txn);
          RecursiveMutexLock b(db);
          RecursiveMutexLock again(db);  // recursive: fine
          MutexLock c(pending);
        }) == 0);
}

TEST_CASE("acquiring up the hierarchy is reported with both mutexes' names") {
  if (!lock_order::kEnabled) return;  // built without -Dlock_order_check
  Mutex txn(LockRank::kTxn);
  RecursiveMutex db(LockRank::kMetaDb);
  // The op_rename deadlock: Txn::mu inside a MetaDb transaction.
  CHECK(violations_in([&] {
          RecursiveMutexLock a(db);
          MutexLock b(txn);
        }) == 1);
  CHECK(last_report.find("acquiring Txn::mu (rank 20) while holding MetaDb::mu_ (rank 30)") !=
        std::string::npos);
  // Two mutexes of one rank (two transactions' mutexes) are not ordered either.
  Mutex other(LockRank::kTxn);
  CHECK(violations_in([&] {
          MutexLock a(txn);
          MutexLock b(other);
        }) == 1);
}

TEST_CASE("released mutexes leave the thread's stack, also out of order") {
  if (!lock_order::kEnabled) return;  // built without -Dlock_order_check
  Mutex a(LockRank::kTxnBinding), b(LockRank::kTxn), c(LockRank::kCommittedView);
  CHECK(violations_in([&] {
          {
            MutexLock la(a);
            MutexLock lb(b);
            la.unlock();  // a released before b
            MutexLock lc(c);
          }
          MutexLock la(a);  // nothing held any more
        }) == 0);
}

TEST_CASE("assert_held and assert_none_held check the thread's stack") {
  if (!lock_order::kEnabled) return;  // built without -Dlock_order_check
  Mutex m(LockRank::kCommittedView);
  CHECK(violations_in([&] { m.assert_held(); }) == 1);
  CHECK(violations_in([&] {
          MutexLock g(m);
          m.assert_held();
        }) == 0);
  CHECK(violations_in([&] {
          MutexLock g(m);
          lock_order::assert_none_held("a test");
        }) == 1);
  CHECK(last_report.find("waiting for a test while holding a mutex") != std::string::npos);
}

TEST_CASE("each thread has its own stack") {
  if (!lock_order::kEnabled) return;  // built without -Dlock_order_check
  Mutex db(LockRank::kMetaDb), txn(LockRank::kTxn);
  CHECK(violations_in([&] {
          MutexLock a(db);
          std::thread([&] { MutexLock b(txn); }).join();  // holds nothing on its thread
        }) == 0);
}

TEST_CASE("CondVar waits release the mutex and report timeouts") {
  Mutex m(LockRank::kCommittedView);
  CondVar cv;
  bool ready = false;
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    MutexLock g(m);
    ready = true;
    cv.notify_all();
  });
  {
    MutexLock g(m);
    while (!ready) cv.wait(m);
    CHECK(ready);
    CHECK_FALSE(cv.wait_for(m, std::chrono::milliseconds(10)));  // nobody notifies
  }
  t.join();
  // While waiting, m stays on the thread's stack: after the wait it is still the top.
  Mutex leaf(LockRank::kInvalidator);
  CHECK(violations_in([&] {
          MutexLock g(m);
          cv.wait_for(m, std::chrono::milliseconds(1));
          MutexLock l(leaf);
        }) == 0);
}
