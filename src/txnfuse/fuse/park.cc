#include "txnfuse/fuse/park.h"

#include <cstdlib>

namespace txnfs::park {

namespace {
thread_local Site *site = nullptr;
thread_local LoopBuffer *loop_buffer = nullptr;
}  // namespace

Site *current() { return site; }
Scope::Scope(Site *s) : prev_(site) { site = s; }
Scope::~Scope() { site = prev_; }

void set_loop_buffer(LoopBuffer *b) { loop_buffer = b; }

std::shared_ptr<void> take_loop_buffer() {
  if (!loop_buffer || loop_buffer->taken || !loop_buffer->mem) return nullptr;
  loop_buffer->taken = true;
  return std::shared_ptr<void>(loop_buffer->mem, [](void *m) { std::free(m); });
}

namespace {
thread_local const Pool *pool_of_thread = nullptr;
}

void Pool::start(unsigned threads, bool grow) {
  MutexLock g(mu_);
  running_ = true;
  grow_ = grow;
  for (unsigned k = 0; k < threads; k++) threads_.emplace_back([this] { loop(); });
}

bool Pool::mine() const { return pool_of_thread == this; }

void Pool::post(std::function<void()> job) {
  {
    MutexLock g(mu_);
    if (running_) {
      jobs_.push_back(std::move(job));
      if (grow_ && idle_ < jobs_.size()) threads_.emplace_back([this] { loop(); });
      else cv_.notify_one();
      return;
    }
  }
  job();
}

void Pool::loop() {
  pool_of_thread = this;
  MutexLock g(mu_);
  while (true) {
    if (jobs_.empty()) {
      if (!running_) return;
      ++idle_;
      cv_.wait(mu_);
      --idle_;
      continue;
    }
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    g.unlock();
    job();
    job = nullptr;  // (what it captured goes before the mutex is taken again)
    g.lock();
  }
}

void Pool::stop() {
  std::vector<std::thread> threads;
  {
    MutexLock g(mu_);
    running_ = false;  // from now on post() runs jobs itself: no thread is added
    cv_.notify_all();
    threads.swap(threads_);
  }
  for (auto &t : threads) t.join();
}

}  // namespace txnfs::park
