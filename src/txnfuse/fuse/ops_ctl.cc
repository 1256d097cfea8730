// The control channel: transaction ioctls on any directory or file of the mount.
// The caller's thread id, uid and pid come with the request (fuse_req_ctx).
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <functional>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "txnfuse/fuse/fs.h"
#include "txnfuse/fuse/lock_set.h"
#include "txnfs/ioctl_abi.h"
#include "txnfuse/txn/txn.h"

namespace txnfs {

namespace {

// The largest lock set a transaction may declare (about 100,000 names).
constexpr size_t kMaxLockSetBytes = 16 << 20;

// Sends a begin's reply once no request that started without locks is in flight
// (TxnManager::unlocked_quiet): at once when none is, which is nearly always, so a begin
// runs on the thread that read it. The wait is for requests other threads are serving;
// a thread that reads requests leaves even that to the control pool.
void reply_when_quiet(Fs &fs, std::function<void()> reply) {
  TxnManager &tm = *fs.txns;
  if (tm.unlocked_quiet()) return reply();
  if (!fs.control.mine() && park::current())
    return fs.control.post([&tm, reply = std::move(reply)] {
      tm.wait_unlocked();
      reply();
    });
  tm.wait_unlocked();
  reply();
}

// One control request: what every command's handler reads.
struct Ctl {
  fuse_req_t req;
  Fs &fs;
  TxnManager &tm;
  const fuse_ctx *ctx;
  const void *in_buf;
  size_t in_bufsz;
  size_t out_bufsz;
  // Copies the request's argument into `v`; false if it is too short.
  template <class T>
  bool in(T &v) const {
    if (in_bufsz < sizeof v) return false;
    std::memcpy(&v, in_buf, sizeof v);
    return true;
  }
};

void ctl_begin(const Ctl &c) {
  fuse_req_t req = c.req;
  txnfs_ioc_begin b;
  if (!c.in(b) || c.out_bufsz < sizeof b) return (void)fuse_reply_err(req, EINVAL);
  int err = c.tm.begin(c.ctx->uid, c.ctx->pid, b.flags, b.pid, &b.id);
  if (err) return (void)fuse_reply_err(req, err);
  return reply_when_quiet(c.fs, [req, b] { fuse_reply_ioctl(req, 0, &b, sizeof b); });
}

void ctl_begin2(const Ctl &c) {
  fuse_req_t req = c.req;
  txnfs_ioc_begin2 b;
  if (!c.in(b) || c.out_bufsz < sizeof b || b.reserved != 0)
    return (void)fuse_reply_err(req, EINVAL);
  int err = c.tm.begin(c.ctx->uid, c.ctx->pid, b.flags, b.pid, &b.id);
  if (!err) err = c.tm.set_lock_timeout(c.ctx->uid, b.id, b.lock_timeout_ms);  // cannot fail
  if (err) return (void)fuse_reply_err(req, err);
  return reply_when_quiet(c.fs, [req, b] { fuse_reply_ioctl(req, 0, &b, sizeof b); });
}

// The transaction begins whatever becomes of its lock set; the reply (the struct's
// head, up to its data) says what did, now or once the set is decided.
void ctl_begin3(const Ctl &c) {
  fuse_req_t req = c.req;
  Fs &fs = c.fs;
  constexpr size_t kHead = offsetof(txnfs_ioc_begin3, data);
  if (c.in_bufsz < sizeof(txnfs_ioc_begin3) || c.out_bufsz < kHead)
    return (void)fuse_reply_err(req, EINVAL);
  auto *a = static_cast<const txnfs_ioc_begin3 *>(c.in_buf);
  if (a->len > sizeof a->data || a->set_err != 0) return (void)fuse_reply_err(req, EINVAL);
  uint64_t id = 0;
  int err = c.tm.begin(c.ctx->uid, c.ctx->pid, a->flags, a->pid, &id);
  if (!err) err = c.tm.set_lock_timeout(c.ctx->uid, id, a->lock_timeout_ms);  // cannot fail
  if (err) return (void)fuse_reply_err(req, err);
  auto answer = [req, id, &fs](int set_err) {
    reply_when_quiet(fs, [req, id, set_err] {
      txnfs_ioc_begin3 head{};
      head.id = id;
      head.set_err = set_err;
      fuse_reply_ioctl(req, 0, &head, kHead);
    });
  };
  if (a->len == 0) return answer(0);
  TxnPtr t = c.tm.get(c.ctx->uid, id, &err);
  if (!t) return answer(err);
  err = acquire_lock_set(fs, t, {reinterpret_cast<const char *>(a->data), a->len},
                         std::chrono::milliseconds(a->set_timeout_ms), answer);
  if (err == LockManager::kParked) return;  // answered when the set is decided
  return answer(err);
}

void ctl_commit(const Ctl &c) {
  txnfs_ioc_id id;
  if (!c.in(id)) return (void)fuse_reply_err(c.req, EINVAL);
  int err = c.tm.commit(c.ctx->uid, id.id);
  if (err) return (void)fuse_reply_err(c.req, err);
  return (void)fuse_reply_ioctl(c.req, 0, nullptr, 0);
}

void ctl_abort(const Ctl &c) {
  txnfs_ioc_id id;
  if (!c.in(id)) return (void)fuse_reply_err(c.req, EINVAL);
  int err = c.tm.abort(c.ctx->uid, id.id);
  if (err) return (void)fuse_reply_err(c.req, err);
  return (void)fuse_reply_ioctl(c.req, 0, nullptr, 0);
}

// The global id of a PREPARE or RESOLVE: `len` bytes of `gid` (TxnManager checks them).
template <class A>
bool gid_of(const A &a, std::string *gid) {
  if (a.len == 0 || a.len > sizeof a.gid) return false;
  gid->assign(a.gid, a.len);
  return true;
}

void ctl_prepare(const Ctl &c) {
  txnfs_ioc_prepare a;
  std::string gid;
  if (!c.in(a) || a.reserved != 0 || !gid_of(a, &gid)) return (void)fuse_reply_err(c.req, EINVAL);
  int err = c.tm.prepare(c.ctx->uid, a.id, gid);
  if (err) return (void)fuse_reply_err(c.req, err);
  return (void)fuse_reply_ioctl(c.req, 0, nullptr, 0);
}

void ctl_resolve(const Ctl &c) {
  txnfs_ioc_resolve a;
  std::string gid;
  if (!c.in(a) || a.commit > 1 || !gid_of(a, &gid)) return (void)fuse_reply_err(c.req, EINVAL);
  int err = c.tm.resolve(c.ctx->uid, gid, a.commit == 1);
  if (err) return (void)fuse_reply_err(c.req, err);
  return (void)fuse_reply_ioctl(c.req, 0, nullptr, 0);
}

void ctl_commit2(const Ctl &c) {
  txnfs_ioc_commit a;
  if (!c.in(a) || a.reserved != 0 || (a.flags & ~unsigned(TXNFS_COMMIT_LAZY)))
    return (void)fuse_reply_err(c.req, EINVAL);
  int err = c.tm.commit(c.ctx->uid, a.id, a.flags);
  if (err) return (void)fuse_reply_err(c.req, err);
  return (void)fuse_reply_ioctl(c.req, 0, nullptr, 0);
}

void ctl_sync(const Ctl &c) {
  int err = c.tm.sync();
  if (err) return (void)fuse_reply_err(c.req, err);
  return (void)fuse_reply_ioctl(c.req, 0, nullptr, 0);
}

void ctl_info(const Ctl &c) {
  struct txnfs_info i;
  if (!c.in(i) || c.out_bufsz < sizeof i) return (void)fuse_reply_err(c.req, EINVAL);
  int err = c.tm.info(c.ctx->uid, i.id, &i);
  if (err) return (void)fuse_reply_err(c.req, err);
  return (void)fuse_reply_ioctl(c.req, 0, &i, sizeof i);
}

void ctl_lock_timeout(const Ctl &c) {
  txnfs_ioc_lock_timeout t;
  if (!c.in(t) || t.reserved != 0) return (void)fuse_reply_err(c.req, EINVAL);
  int err = c.tm.set_lock_timeout(c.ctx->uid, t.id, t.ms);
  if (err) return (void)fuse_reply_err(c.req, err);
  return (void)fuse_reply_ioctl(c.req, 0, nullptr, 0);
}

// A piece of a predeclared lock set; the last one acquires the whole set.
void ctl_lock_set(const Ctl &c) {
  fuse_req_t req = c.req;
  if (c.in_bufsz < sizeof(txnfs_ioc_lock_set)) return (void)fuse_reply_err(req, EINVAL);
  auto *a = static_cast<const txnfs_ioc_lock_set *>(c.in_buf);
  if (a->reserved != 0 || a->len > sizeof a->data ||
      (a->flags & ~(TXNFS_LOCK_SET_FIRST | TXNFS_LOCK_SET_LAST)))
    return (void)fuse_reply_err(req, EBADMSG);
  int err = 0;
  TxnPtr t = c.tm.get(c.ctx->uid, a->id, &err);
  if (!t) return (void)fuse_reply_err(req, err);
  std::string records;
  {
    MutexLock g(t->mu);
    if (a->flags & TXNFS_LOCK_SET_FIRST) t->declared.clear();
    if (t->declared.size() + a->len > kMaxLockSetBytes) {
      t->declared.clear();
      return (void)fuse_reply_err(req, E2BIG);
    }
    t->declared.append(reinterpret_cast<const char *>(a->data), a->len);
    if (a->flags & TXNFS_LOCK_SET_LAST) records.swap(t->declared);
  }
  if (a->flags & TXNFS_LOCK_SET_LAST) {
    err =
        acquire_lock_set(c.fs, t, records, std::chrono::milliseconds(a->timeout_ms), [req](int e) {
          if (e) fuse_reply_err(req, e);
          else fuse_reply_ioctl(req, 0, nullptr, 0);
        });
    if (err == LockManager::kParked) return;  // answered when the set is granted
  }
  if (err) return (void)fuse_reply_err(req, err);
  return (void)fuse_reply_ioctl(req, 0, nullptr, 0);
}

void ctl_status(const Ctl &c) {
  fuse_req_t req = c.req;
  if (c.out_bufsz < sizeof(txnfs_ioc_status)) return (void)fuse_reply_err(req, EINVAL);
  auto st = std::make_unique<txnfs_ioc_status>();
  // The daemon's share: the objects the kernel knows and the fds held for them.
  nlohmann::json j = nlohmann::json::parse(c.tm.status_json());
  Fs &fs = c.fs;
  j["inodes"] = {{"known", fs.inodes.size()},
                 {"fd_cache", fs.fds.size()},
                 {"fd_cache_capacity", fs.fds.capacity()}};
  // How requests arrive (this one's transport), and those waiting for locks now and
  // ever (park.h; lock sets included).
  j["transport"] = fuse_req_is_uring(req) ? "io_uring" : "dev_fuse";
  j["parked"] = {{"now", fs.locks.parked()}, {"total", fs.locks.parked_total()}};
  j["views"] = {{"open", fs.views.open()}, {"held", fs.views.held()}};
  Views::Counts pt = fs.views.passthrough_counts();
  j["passthrough"] = {{"on", fs.views.passthrough_on()},
                      {"open", pt.open},
                      {"opened", pt.opened},
                      {"revoked", pt.revoked}};
  if (fs.resolver) {  // a cluster node (docs/cluster.md): its role and etcd's last check
    const cluster::ClusterConf &cc = fs.resolver->conf();
    Resolver::Health h = fs.resolver->health();
    auto ago = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - h.at);
    j["cluster"] = {{"cluster", cc.cluster},
                    {"node", cc.node},
                    {"role", "participant"},
                    {"prepared_timeout_ms", cc.prepared_timeout.count()},
                    {"resolved_by_node", fs.resolver->resolved()},
                    {"etcd",
                     {{"checked", h.checked},
                      {"healthy", h.ok},
                      {"members", h.members},
                      {"members_ok", h.members_ok},
                      {"endpoint", h.endpoint},
                      {"error", h.error},
                      {"checked_ms_ago", h.checked ? ago.count() : -1}}}};
  }
  std::string json = j.dump();
  st->truncated = json.size() >= sizeof st->json;
  st->len = uint32_t(std::min(json.size(), sizeof st->json - 1));
  std::memcpy(st->json, json.data(), st->len);
  st->json[st->len] = 0;
  return (void)fuse_reply_ioctl(req, 0, st.get(), sizeof *st);
}

// The control commands. `waits`: the command waits for other requests or for the
// kernel, so it runs on the control pool (park.h): on a thread that reads requests (a
// ring thread serves a CPU's queue) it could wait for a request queued behind it.
// (Begins only rarely wait: reply_when_quiet.)
struct CtlCommand {
  unsigned int cmd;
  void (*handler)(const Ctl &);
  bool waits;
};

constexpr CtlCommand kCommands[] = {
    {TXNFS_IOC_BEGIN, ctl_begin, false},
    {TXNFS_IOC_BEGIN2, ctl_begin2, false},
    {TXNFS_IOC_BEGIN3, ctl_begin3, false},
    {TXNFS_IOC_COMMIT, ctl_commit, true},
    {TXNFS_IOC_ABORT, ctl_abort, true},
    {TXNFS_IOC_COMMIT2, ctl_commit2, true},
    {TXNFS_IOC_SYNC, ctl_sync, true},
    {TXNFS_IOC_INFO, ctl_info, false},
    {TXNFS_IOC_LOCK_TIMEOUT, ctl_lock_timeout, false},
    {TXNFS_IOC_LOCK_SET, ctl_lock_set, false},
    {TXNFS_IOC_STATUS, ctl_status, false},
    {TXNFS_IOC_PREPARE, ctl_prepare, true},
    {TXNFS_IOC_RESOLVE, ctl_resolve, true},
};

const CtlCommand *command(unsigned int cmd) {
  for (const CtlCommand &c : kCommands)
    if (c.cmd == cmd) return &c;
  return nullptr;
}

// A lazy commit that waits for nothing runs on the thread that read it, sparing two
// hand-offs between threads (TxnManager::commit_here says when). True if it replied
// (or will, from the control pool).
bool commit_here(fuse_req_t req, Fs &fs, const void *in_buf, size_t in_bufsz) {
  TxnManager &tm = *fs.txns;
  txnfs_ioc_commit c;
  if (in_bufsz < sizeof c) return false;
  std::memcpy(&c, in_buf, sizeof c);
  int err = 0;
  TxnPtr later;
  switch (c.reserved ? TxnManager::Here::kNo
                     : tm.commit_here(fuse_req_ctx(req)->uid, c.id, c.flags, &err, &later)) {
    case TxnManager::Here::kDone:
      if (err) fuse_reply_err(req, err);
      else fuse_reply_ioctl(req, 0, nullptr, 0);
      return true;
    case TxnManager::Here::kLater:
      fs.control.post([&tm, req, err, later] {
        tm.end_later(*later);
        if (err) return (void)fuse_reply_err(req, err);
        fuse_reply_ioctl(req, 0, nullptr, 0);
      });
      return true;
    case TxnManager::Here::kNo:
      break;
  }
  return false;
}

void op_ioctl(fuse_req_t req, fuse_ino_t, unsigned int cmd, void *, fuse_file_info *,
              unsigned flags, const void *in_buf, size_t in_bufsz, size_t out_bufsz) {
  if (flags & FUSE_IOCTL_COMPAT) return (void)fuse_reply_err(req, ENOSYS);
  Fs &fs = fs_of(req);
  const CtlCommand *c = command(cmd);
  if (c && c->waits && !fs.control.mine() && park::current()) {
    if (cmd == TXNFS_IOC_COMMIT2 && commit_here(req, fs, in_buf, in_bufsz)) return;
    return fs.control.post(park::current()->capture());
  }
  if (!c) return (void)fuse_reply_err(req, ENOTTY);
  c->handler(Ctl{req, fs, *fs.txns, fuse_req_ctx(req), in_buf, in_bufsz, out_bufsz});
}

}  // namespace

void add_ctl_ops(fuse_lowlevel_ops &ops) { ops.ioctl = op_ioctl; }

}  // namespace txnfs
