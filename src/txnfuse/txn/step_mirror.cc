#include "txnfuse/txn/step_mirror.h"

#include <cctype>
#include <string>

#include <spdlog/spdlog.h>

#include "store/error.h"

namespace txnfs {

namespace {

UndoRecordRow row_of(uint64_t txid, const UndoStep &s) {
  UndoRecordRow r;
  r.txid = txid;
  r.seq = s.seq;
  r.kind = step_kind_name(s.kind);
  for (char &c : r.kind) c = char(std::tolower(static_cast<unsigned char>(c)));
  r.ino = s.obj.ino;
  r.generation = s.obj.generation;
  switch (s.kind) {
    case StepKind::Data:
      r.off = s.off;
      r.len = s.len;
      break;
    case StepKind::Created:
    case StepKind::Linked:
    case StepKind::Removed:
      r.dir = s.dir.ino;
      r.name = s.name;
      break;
    case StepKind::Made:  // (obj is the directory: the object does not exist yet)
      r.dir = s.obj.ino;
      r.name = s.name;
      break;
    case StepKind::Renamed:
      r.dir = s.dir.ino;
      r.name = s.name;
      r.dir2 = s.dir2.ino;
      r.name2 = s.name2;
      break;
    case StepKind::Attrs:
    case StepKind::Xattrs:
      break;
  }
  return r;
}

}  // namespace

void StepMirror::start() {
  thread_ = std::thread([this] { loop(); });
}

void StepMirror::stop() {
  {
    MutexLock g(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  flush();
}

void StepMirror::add(uint64_t txid, const UndoStep &s) {
  MutexLock g(mu_);
  queue_.push_back(row_of(txid, s));
}

void StepMirror::flush() {
  if (before_flush_) before_flush_();
  std::vector<UndoRecordRow> batch;
  {
    MutexLock g(mu_);
    batch.swap(queue_);
  }
  if (batch.empty()) return;
  try {
    db_.insert_undo_records(batch);
  } catch (const Error &e) {
    // Only the inspection copy is incomplete; the undo log itself is intact.
    spdlog::warn("undo_records: {} rows not mirrored: {}", batch.size(), e.what());
  }
}

void StepMirror::loop() {
  MutexLock lk(mu_);
  while (!stopping_) {
    auto until = std::chrono::steady_clock::now() + kInterval;
    while (!stopping_ && cv_.wait_until(mu_, until)) {
    }
    lk.unlock();
    flush();
    lk.lock();
  }
}

}  // namespace txnfs
