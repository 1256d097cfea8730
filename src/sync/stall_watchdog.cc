#include "sync/stall_watchdog.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

extern char **environ;

namespace txnfs::stall {

namespace {

constexpr int kMaxDumps = 5;  // per daemon: one stall tends to trip many requests
constexpr auto kPeriod = std::chrono::milliseconds(500);

// The slots of all request threads (never freed: a thread that exits frees its slot
// for the next one) and the watchdog's stop flag.
struct Registry {
  Mutex mu{LockRank::kStallWatchdog};
  CondVar cv;
  std::vector<std::unique_ptr<Slot>> slots GUARDED_BY(mu);
  bool stopping GUARDED_BY(mu) = false;
};
Registry &registry() {
  static Registry *r = new Registry;  // outlives every thread's slot holder
  return *r;
}

std::atomic<int64_t> g_threshold_ns{int64_t(30) * 1'000'000'000};

Slot *acquire_slot() {
  Registry &r = registry();
  MutexLock g(r.mu);
  Slot *s = nullptr;
  for (auto &p : r.slots)
    if (!p->in_use.load(std::memory_order_relaxed)) {
      s = p.get();
      break;
    }
  if (!s) {
    r.slots.push_back(std::make_unique<Slot>());
    s = r.slots.back().get();
  }
  s->in_use.store(true, std::memory_order_relaxed);
  s->tid = pid_t(::syscall(SYS_gettid));
  s->start_ns.store(0, std::memory_order_relaxed);
  return s;
}

// This thread's slot and the nesting depth of its InFlight scopes.
struct ThreadState {
  Slot *slot = nullptr;
  int depth = 0;
  ~ThreadState() {
    if (slot) {
      slot->start_ns.store(0, std::memory_order_release);
      slot->in_use.store(false, std::memory_order_release);
    }
  }
};
thread_local ThreadState t_state;

// TXNFS_DEBUG_BLOCK_LOOKUP=NAME:SECONDS, parsed once.
struct BlockHook {
  std::string name;
  unsigned seconds = 0;
};
const BlockHook *block_hook() {
  static const BlockHook *h = []() -> const BlockHook * {
    const char *v = std::getenv("TXNFS_DEBUG_BLOCK_LOOKUP");
    if (!v || !*v) return nullptr;
    std::string s = v;
    auto colon = s.rfind(':');
    if (colon == std::string::npos) return nullptr;
    auto *b = new BlockHook;
    b->name = s.substr(0, colon);
    b->seconds = unsigned(std::strtoul(s.c_str() + colon + 1, nullptr, 10));
    return b;
  }();
  return h;
}

}  // namespace

int64_t now_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

int64_t threshold_ns() { return g_threshold_ns.load(std::memory_order_relaxed); }

InFlight::InFlight(const char *op, uint64_t nodeid) {
  ThreadState &ts = t_state;
  if (ts.depth++ > 0) {
    slot_ = nullptr;
    return;
  }
  if (!ts.slot) ts.slot = acquire_slot();
  slot_ = ts.slot;
  int64_t now = now_ns();
  slot_->op.store(op, std::memory_order_relaxed);
  slot_->nodeid.store(nodeid, std::memory_order_relaxed);
  slot_->deadline_ns.store(now + threshold_ns(), std::memory_order_relaxed);
  slot_->start_ns.store(now, std::memory_order_release);
}

InFlight::~InFlight() {
  t_state.depth--;
  if (slot_) slot_->start_ns.store(0, std::memory_order_release);
}

void expect_wait(std::chrono::milliseconds wait) {
  Slot *s = t_state.slot;
  if (!s || t_state.depth == 0) return;
  int64_t d = now_ns() + int64_t(wait.count()) * 1'000'000 + threshold_ns();
  if (d > s->deadline_ns.load(std::memory_order_relaxed))
    s->deadline_ns.store(d, std::memory_order_relaxed);
}

void lookup_hook(const char *name) {
  const BlockHook *h = block_hook();
  if (__builtin_expect(h != nullptr, 0) && name && h->name == name) {
    spdlog::warn("TXNFS_DEBUG_BLOCK_LOOKUP: holding LOOKUP {} for {} s", name, h->seconds);
    ::sleep(h->seconds);
  }
}

void Watchdog::start() {
  if (const char *v = std::getenv("TXNFS_STALL_SECONDS"); v && *v) {
    double s = std::strtod(v, nullptr);
    if (s > 0) g_threshold_ns = int64_t(s * 1e9);
  }
  if (const char *v = std::getenv("TXNFS_STALL_DUMP"); v && *v) {
    dump_dir_ = v;
    // gdb, our child, attaches to us: allow it where Yama restricts ptrace to ancestors.
    ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  }
  block_hook();  // parse it now, not inside the first request
  {
    Registry &r = registry();
    MutexLock g(r.mu);
    r.stopping = false;
  }
  thread_ = std::thread([this] { loop(); });
}

void Watchdog::stop() {
  if (!thread_.joinable()) return;
  Registry &r = registry();
  {
    MutexLock g(r.mu);
    r.stopping = true;
  }
  r.cv.notify_all();
  thread_.join();
}

namespace {

// Saves every thread's stack of this process to `path` (after `header`); the file
// appears under that name once it is complete.
void save_stacks(const std::string &path, const std::string &header) {
  std::string tmp = path + ".partial";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    spdlog::error("stall dump: cannot create {}: {}", tmp, std::strerror(errno));
    return;
  }
  [[maybe_unused]] auto n = ::write(fd, header.data(), header.size());
  std::string pid = std::to_string(::getpid());
  const char *argv[] = {"gdb",  "-batch", "-nx", "-p", pid.c_str(), "-ex", "thread apply all bt",
                        nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd, 1);
  posix_spawn_file_actions_adddup2(&fa, fd, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t child;
  int rc = ::posix_spawnp(&child, "gdb", &fa, nullptr, const_cast<char **>(argv), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    std::string m = fmt::format("\n(cannot run gdb: {})\n", std::strerror(rc));
    n = ::write(fd, m.data(), m.size());
  } else {
    int status;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    spdlog::error("stall dump: cannot rename {}: {}", tmp, std::strerror(errno));
}

}  // namespace

void Watchdog::loop() {
  Registry &r = registry();
  MutexLock g(r.mu);
  while (!r.stopping) {
    r.cv.wait_for(r.mu, kPeriod);
    if (r.stopping) break;
    int64_t now = now_ns();
    std::string report;
    for (auto &p : r.slots) {
      Slot &s = *p;
      int64_t start = s.start_ns.load(std::memory_order_acquire);
      if (start == 0 || start == s.reported) continue;
      if (now <= s.deadline_ns.load(std::memory_order_relaxed)) continue;
      s.reported = start;
      const char *op = s.op.load(std::memory_order_relaxed);
      std::string line = fmt::format(
          "stalled request: {} nodeid {} on thread {} unanswered for {:.1f} s", op ? op : "?",
          s.nodeid.load(std::memory_order_relaxed), s.tid, double(now - start) / 1e9);
      spdlog::error("{}", line);
      report += line + "\n";
    }
    if (report.empty() || dump_dir_.empty() || dumps_ >= kMaxDumps) continue;
    std::string path = fmt::format("{}/stall-{}-{}.txt", dump_dir_, ::getpid(), ++dumps_);
    g.unlock();  // request threads starting meanwhile must not wait for gdb
    save_stacks(path, report + "\n");
    spdlog::error("stalled request: every thread's stack saved to {}", path);
    g.lock();
  }
}

}  // namespace txnfs::stall
