#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>

#include <catch2/catch.hpp>

#include "txnfuse/txn/interval_set.h"
#include "txnfuse/txn/lock_manager.h"

using namespace txnfs;
using namespace std::chrono_literals;

namespace {
const LockKey kA = LockKey::object(10), kB = LockKey::object(11);
const auto kLong = std::chrono::milliseconds(5000);
}  // namespace

TEST_CASE("compatibility follows the multi-granularity matrix") {
  using M = LockMode;
  CHECK(lock_compatible(M::IS, M::IX));
  CHECK(lock_compatible(M::IX, M::IX));
  CHECK(lock_compatible(M::S, M::S));
  CHECK(lock_compatible(M::IS, M::S));
  CHECK_FALSE(lock_compatible(M::IX, M::S));
  CHECK_FALSE(lock_compatible(M::S, M::X));
  CHECK_FALSE(lock_compatible(M::IS, M::X));
  CHECK(lock_sup(M::IS, M::IX) == M::IX);
  CHECK(lock_sup(M::IS, M::S) == M::S);
  CHECK(lock_sup(M::IX, M::S) == M::X);
}

TEST_CASE("shared locks coexist; exclusive ones do not") {
  LockManager lm;
  LockOwner a(1), b(2);
  CHECK(lm.acquire(a, kA, LockMode::S, kLong) == 0);
  CHECK(lm.acquire(b, kA, LockMode::S, kLong) == 0);
  CHECK(lm.acquire(b, kA, LockMode::X, 50ms) == ETIMEDOUT);  // a's S blocks the upgrade
  CHECK(lm.timeouts() == 1);
  lm.release_all(a);
  CHECK(lm.acquire(b, kA, LockMode::X, kLong) == 0);
  CHECK(lm.acquire(a, kA, LockMode::S, 10ms, false) == EDEADLK);  // no-wait conflict
  lm.release_all(b);
  CHECK_FALSE(lm.contended(kA, LockMode::X));
}

TEST_CASE("a waiter is granted when the holder releases") {
  LockManager lm;
  LockOwner a(1), b(2);
  REQUIRE(lm.acquire(a, kA, LockMode::X, kLong) == 0);
  std::atomic<int> got{-1};
  std::thread t([&] { got = lm.acquire(b, kA, LockMode::S, kLong); });
  std::this_thread::sleep_for(50ms);
  CHECK(got == -1);
  CHECK(lm.counts(b).second == 1);  // waiting
  lm.release_all(a);
  t.join();
  CHECK(got == 0);
  lm.release_all(b);
}

TEST_CASE("a cycle in the waits-for graph fails the request that would close it") {
  LockManager lm;
  LockOwner a(1), b(2);
  REQUIRE(lm.acquire(a, kA, LockMode::X, kLong) == 0);
  REQUIRE(lm.acquire(b, kB, LockMode::X, kLong) == 0);
  std::atomic<int> a_result{-1};
  std::thread t([&] { a_result = lm.acquire(a, kB, LockMode::X, kLong); });  // a waits for b
  std::this_thread::sleep_for(50ms);
  auto t0 = std::chrono::steady_clock::now();
  CHECK(lm.acquire(b, kA, LockMode::X, kLong) == EDEADLK);  // b would wait for a: cycle
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);        // found, not timed out
  CHECK(lm.deadlocks() == 1);
  lm.release_all(b);  // the victim aborts
  t.join();
  CHECK(a_result == 0);
  lm.release_all(a);
}

TEST_CASE("two shared holders upgrading at once deadlock, and one is told") {
  LockManager lm;
  LockOwner a(1), b(2);
  REQUIRE(lm.acquire(a, kA, LockMode::S, kLong) == 0);
  REQUIRE(lm.acquire(b, kA, LockMode::S, kLong) == 0);
  std::atomic<int> a_result{-1};
  std::thread t([&] { a_result = lm.acquire(a, kA, LockMode::X, kLong); });
  std::this_thread::sleep_for(50ms);
  CHECK(lm.acquire(b, kA, LockMode::X, kLong) == EDEADLK);
  lm.release_all(b);
  t.join();
  CHECK(a_result == 0);
  lm.release_all(a);
}

TEST_CASE("requests queue in arrival order: readers cannot starve a writer") {
  LockManager lm;
  LockOwner r1(1), w(2), r2(3);
  REQUIRE(lm.acquire(r1, kA, LockMode::S, kLong) == 0);
  std::atomic<int> w_result{-1};
  std::thread t([&] { w_result = lm.acquire(w, kA, LockMode::X, kLong); });
  std::this_thread::sleep_for(50ms);
  // r2 is compatible with the holder but must queue behind the waiting writer.
  CHECK(lm.acquire(r2, kA, LockMode::S, 100ms) == ETIMEDOUT);
  lm.release_all(r1);
  t.join();
  CHECK(w_result == 0);
  lm.release_all(w);
  CHECK(lm.acquire(r2, kA, LockMode::S, kLong) == 0);
  lm.release_all(r2);
}

TEST_CASE("entry locks are independent of each other and of other directories") {
  LockManager lm;
  LockOwner a(1), b(2);
  CHECK(lm.acquire(a, LockKey::object(5), LockMode::IX, kLong) == 0);
  CHECK(lm.acquire(a, LockKey::entry(5, "x"), LockMode::X, kLong) == 0);
  CHECK(lm.acquire(b, LockKey::object(5), LockMode::IX, kLong) == 0);
  CHECK(lm.acquire(b, LockKey::entry(5, "y"), LockMode::X, kLong) == 0);
  CHECK(lm.acquire(b, LockKey::entry(5, "x"), LockMode::S, 20ms) == ETIMEDOUT);
  CHECK(lm.acquire(b, LockKey::object(5), LockMode::S, 20ms) == ETIMEDOUT);  // listing
  lm.release_all(a);
  lm.release_all(b);
}

TEST_CASE("a lock set is granted whole or not at all, and its waiter blocks no one") {
  LockManager lm;
  LockOwner holder(1), set(2), single(3);
  REQUIRE(lm.acquire(holder, kB, LockMode::X, kLong) == 0);
  // kA is free but kB is not: nothing is granted, not even kA.
  CHECK(lm.acquire_set(set, {{kA, LockMode::X}, {kB, LockMode::X}}, 50ms) == ETIMEDOUT);
  CHECK(lm.counts(set).first == 0);
  CHECK(lm.set_timeouts() == 1);
  std::atomic<int> got{-1};
  std::thread t([&] { got = lm.acquire_set(set, {{kA, LockMode::X}, {kB, LockMode::S}}, kLong); });
  while (lm.set_waits() < 2) std::this_thread::yield();  // the first call waited too
  // While the set waits, kA stays free: a single request takes it and gives it back,
  // and waiting on a set closes no cycle for anyone.
  CHECK(lm.acquire(single, kA, LockMode::X, kLong) == 0);
  lm.release_all(single);
  lm.release_all(holder);
  t.join();
  CHECK(got == 0);
  CHECK(lm.counts(set).first == 2);
  CHECK(lm.acquire(single, kB, LockMode::S, kLong) == 0);  // the set holds kB in S
  lm.release_all(single);
  lm.release_all(set);
}

TEST_CASE("duplicate keys of a set merge into the weakest covering mode") {
  LockManager lm;
  LockOwner set(1), other(2);
  REQUIRE(lm.acquire_set(set, {{kA, LockMode::IX}, {kA, LockMode::S}}, kLong) == 0);
  CHECK(lm.acquire(other, kA, LockMode::IS, 10ms, false) == EDEADLK);  // IX+S = X
  lm.release_all(set);
}

TEST_CASE("interval sets report what is missing and merge what is added") {
  IntervalSet s;
  using V = std::vector<std::pair<uint64_t, uint64_t>>;
  CHECK(s.missing(0, 10) == V{{0, 10}});
  s.add(2, 4);
  s.add(6, 8);
  CHECK(s.missing(0, 10) == V{{0, 2}, {4, 6}, {8, 10}});
  CHECK(s.missing(2, 4).empty());
  CHECK(s.missing(3, 7) == V{{4, 6}});
  s.add(4, 6);
  CHECK(s.missing(0, 10) == V{{0, 2}, {8, 10}});
  s.add(0, 100);
  CHECK(s.missing(0, 100).empty());
}
