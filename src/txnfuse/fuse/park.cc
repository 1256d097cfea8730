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

void Resumer::start(unsigned threads) {
  MutexLock g(mu_);
  running_ = true;
  for (unsigned k = 0; k < threads; k++) threads_.emplace_back([this] { loop(); });
}

void Resumer::post(std::function<void()> job) {
  {
    MutexLock g(mu_);
    if (running_) {
      jobs_.push_back(std::move(job));
      cv_.notify_one();
      return;
    }
  }
  job();
}

void Resumer::loop() {
  MutexLock g(mu_);
  while (true) {
    if (jobs_.empty()) {
      if (!running_) return;
      cv_.wait(mu_);
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

void Resumer::stop() {
  {
    MutexLock g(mu_);
    running_ = false;
    cv_.notify_all();
  }
  for (auto &t : threads_) t.join();
  threads_.clear();
}

}  // namespace txnfs::park
