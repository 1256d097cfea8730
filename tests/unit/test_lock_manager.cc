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

// The parking path: acquire_async never blocks its caller; continuations run on the
// thread that settles the wait (release_all, the timer, cancel).
namespace {
struct Outcome {
  std::atomic<int> err{-1};
  std::atomic<std::thread::id> by{};
  LockResume resume() {
    return [this](int e) {
      by = std::this_thread::get_id();
      err = e;
    };
  }
};
}  // namespace

TEST_CASE("a parked wait is granted by the releasing thread, in arrival order") {
  LockManager lm;
  LockOwner h(1), w1(2), w2(3), w3(4);
  REQUIRE(lm.acquire_async(h, kA, LockMode::X, kLong, nullptr) == 0);
  Outcome o1, o2, o3;
  CHECK(lm.acquire_async(w1, kA, LockMode::S, kLong, o1.resume()) == LockManager::kParked);
  CHECK(lm.acquire_async(w2, kA, LockMode::X, kLong, o2.resume()) == LockManager::kParked);
  CHECK(lm.acquire_async(w3, kA, LockMode::S, kLong, o3.resume()) == LockManager::kParked);
  CHECK(lm.parked() == 3);
  CHECK(lm.counts(w1) == std::pair<size_t, size_t>{0, 1});
  lm.release_all(h);
  // w1 (S) is granted; w2 (X) conflicts with it; w3 (S) arrived after w2 and waits.
  CHECK(o1.err == 0);
  CHECK(o1.by.load() == std::this_thread::get_id());
  CHECK(o2.err == -1);
  CHECK(o3.err == -1);
  CHECK(lm.counts(w1).first == 1);
  lm.release_all(w1);
  CHECK(o2.err == 0);
  CHECK(o3.err == -1);
  lm.release_all(w2);
  CHECK(o3.err == 0);
  CHECK(lm.parked() == 0);
  CHECK(lm.parked_total() == 3);
  lm.release_all(w3);
}

TEST_CASE("a parked wait times out on the timer thread; the next one moves up") {
  LockManager lm;
  LockOwner h(1), a(2), b(3);
  REQUIRE(lm.acquire_async(h, kA, LockMode::S, kLong, nullptr) == 0);
  Outcome oa, ob;
  CHECK(lm.acquire_async(a, kA, LockMode::X, 50ms, oa.resume()) == LockManager::kParked);
  CHECK(lm.acquire_async(b, kA, LockMode::S, kLong, ob.resume()) == LockManager::kParked);
  for (int k = 0; k < 200 && oa.err == -1; k++) std::this_thread::sleep_for(10ms);
  CHECK(oa.err == ETIMEDOUT);
  CHECK(oa.by.load() != std::this_thread::get_id());
  CHECK(lm.timeouts() == 1);
  // b waited behind a's X only; with a gone it joins h's S.
  for (int k = 0; k < 200 && ob.err == -1; k++) std::this_thread::sleep_for(10ms);
  CHECK(ob.err == 0);
  CHECK(lm.counts(a) == std::pair<size_t, size_t>{0, 0});
  lm.release_all(b);
  lm.release_all(h);
}

TEST_CASE("a wait that would close a cycle fails at once, parking nothing") {
  LockManager lm;
  LockOwner a(1), b(2);
  REQUIRE(lm.acquire_async(a, kA, LockMode::X, kLong, nullptr) == 0);
  REQUIRE(lm.acquire_async(b, kB, LockMode::X, kLong, nullptr) == 0);
  Outcome oa;
  CHECK(lm.acquire_async(a, kB, LockMode::X, kLong, oa.resume()) == LockManager::kParked);
  Outcome ob;
  CHECK(lm.acquire_async(b, kA, LockMode::X, kLong, ob.resume()) == EDEADLK);
  CHECK(lm.deadlocks() == 1);
  CHECK(lm.parked() == 1);
  lm.release_all(b);  // the victim aborts
  CHECK(oa.err == 0);
  CHECK(ob.err == -1);  // never called
  lm.release_all(a);
}

TEST_CASE("two parked waits of one owner; cancel settles both with its error") {
  LockManager lm;
  LockOwner h(1), t(2), other(3);
  REQUIRE(lm.acquire_async(h, kA, LockMode::X, kLong, nullptr) == 0);
  REQUIRE(lm.acquire_async(h, kB, LockMode::X, kLong, nullptr) == 0);
  Outcome o1, o2, o3;
  CHECK(lm.acquire_async(t, kA, LockMode::S, kLong, o1.resume()) == LockManager::kParked);
  CHECK(lm.acquire_async(t, kB, LockMode::S, kLong, o2.resume()) == LockManager::kParked);
  CHECK(lm.acquire_async(other, kA, LockMode::S, kLong, o3.resume()) == LockManager::kParked);
  CHECK(lm.counts(t).second == 2);
  CHECK(lm.cancel(t, ENOENT) == 2);
  CHECK(o1.err == ENOENT);
  CHECK(o2.err == ENOENT);
  CHECK(o3.err == -1);
  CHECK(lm.cancel_all(ENODEV) == 1);
  CHECK(o3.err == ENODEV);
  CHECK(lm.parked() == 0);
  lm.release_all(h);
}

TEST_CASE("a parked lock set is granted whole when its keys come free") {
  LockManager lm;
  LockOwner h(1), set(2);
  REQUIRE(lm.acquire_async(h, kB, LockMode::X, kLong, nullptr) == 0);
  Outcome o;
  CHECK(lm.acquire_set_async(set, {{kA, LockMode::X}, {kB, LockMode::S}}, kLong, o.resume()) ==
        LockManager::kParked);
  CHECK(lm.counts(set).first == 0);  // nothing held while it waits
  lm.release_all(h);
  CHECK(o.err == 0);
  CHECK(lm.counts(set).first == 2);
  Outcome late;
  CHECK(lm.acquire_set_async(h, {{kA, LockMode::S}}, 0ms, late.resume()) == ETIMEDOUT);
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
