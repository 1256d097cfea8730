// libtxnfs_bridge.so: runs opted-in NFSv4 COMPOUNDs of a patched NFS-Ganesha as txnfs
// transactions (the ABI is txnfs_bridge.h; the Ganesha side is ganesha-4.3.patch).
//
// A COMPOUND is transactional when its tag starts with `tag_prefix` (or `all_compounds`
// is set). Then:
//   begin  txnfs_begin(TXNFS_BIND_THREAD): every file-system call the worker
//          thread makes for the COMPOUND's operations joins the transaction. If it
//          cannot begin, the COMPOUND is refused without running any operation -- it
//          must never run outside the transaction its client asked for. Then the
//          COMPOUND's lock set (lock_plan.h) is acquired at once (in the same request
//          as the begin, txnfs_begin3), before any operation runs, waiting up to
//          lock_set_timeout_ms: the worker holds no lock of
//          Ganesha's, the kernel's or txnfs's yet, so conflicting COMPOUNDs queue here
//          instead of timing out inside FUSE requests. A set not granted in time:
//          NFS4ERR_DELAY, no operation run. Last, it opens MOUNT/.txnfs/ID, which
//          gives the transaction its view, holds it open until end, and answers the
//          view's slot: the patch runs the COMPOUND through it (README.md, Views).
//   end    status NFS4_OK      commit; if the commit fails (it is rolled back), the reply
//                              is collapsed into one NFS4ERR_DELAY: the client must not
//                              see results of operations that did not take effect.
//          status not NFS4_OK  abort; if the transaction lost a deadlock or a lock wait
//                              (EDEADLK, ETIMEDOUT), the failing operation's status
//                              becomes NFS4ERR_DELAY (retryable), else the reply is kept.
//          slot-cache replay   abort (only SEQUENCE ran); the cached reply is kept.
// A COMPOUND whose tag starts with `lazy_tag_prefix` (the client opted in) commits
// lazily: the reply says OK once the transaction is final, before it is durable. A
// crash of the server may then lose it whole (never part of it, and only together with
// every later lazy one). The changed write verifier tells the client that lazy
// COMPOUNDs may be lost, not which; txnfs-nfs's journal marker tells exactly, and it
// sends those again (docs/crash-model.md, Lazy commit, NFS clients). Every other
// transaction is durable before its reply.
//
// Two-phase commit (docs/cluster.md), with `cluster` configured; P is tag_prefix:
//   P-prepare:GID   a transaction as above, except that at its end, if every operation
//                   succeeded, it is prepared under the global id GID (txnfs_prepare)
//                   instead of committed: NFS4_OK means prepared. If it cannot be, it is
//                   rolled back and the reply collapses into NFS4ERR_DELAY.
//   P-commit:GID,   no transaction: before the COMPOUND runs (plain), the bridge reads
//   P-abort:GID     the decision for GID from etcd and, if it is the one the tag names,
//                   resolves the prepared transaction GID with it (txnfs_resolve; one
//                   that is not there any more was resolved already). So a client can
//                   only hasten what etcd decided, never decide. No decision, or another
//                   one: NFS4ERR_SERVERFAULT; etcd unreachable or a commit that failed
//                   (it stays prepared): NFS4ERR_DELAY, and the node resolves it itself.
//
// State: the open transaction lives in a thread_local. Ganesha runs one COMPOUND at a
// time on a worker thread and calls begin and end for it on that thread (the patch
// stops the server rather than let a transactional COMPOUND resume elsewhere), so the
// thread identifies the COMPOUND -- as it identifies the transaction to the daemon.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <unistd.h>

#include "compound_bridge/bridge/config.h"
#include "compound_bridge/bridge/lock_plan.h"
#include "compound_bridge/bridge/log.h"
#include "cluster/cluster_conf.h"
#include "cluster/decisions.h"
#include "cluster/etcd.h"
#include "compound_bridge/txnfs_bridge.h"
#include "txnfs/txnfs.h"

namespace txnfs::bridge {
namespace {

// Written once by txnfs_bridge_open before Ganesha calls begin/end; read-only afterwards.
Config config;
Log logger;
uint64_t root_nodeid = 0;  // the export root's FUSE nodeid (PUTROOTFH), 0: unknown
// The mount's root, open for the bridge's lifetime: every control call (begin, lock
// timeout, lock set, commit, abort) is one ioctl on it, instead of an open, the ioctl
// and a close -- three FUSE requests each, per COMPOUND four times over. Ganesha holds
// the export open anyway, so the fd keeps nothing mounted that would not be.
int control_fd = -1;

// With `cluster` configured: etcd and the decisions kept there (thread-safe).
std::unique_ptr<cluster::Etcd> etcd;
std::unique_ptr<cluster::Decisions> decisions;

struct OpenTxn {
  txnfs_id_t id;
  std::string gid;            // P-prepare:GID: prepared at the end instead of committed
  uint32_t minorversion;
  std::string tag;            // for log lines only
  bool complete_set = false;  // every lock it takes was predeclared and granted at begin
  bool lazy = false;          // commits lazily (the tag opted in)
  int view_fd = -1;           // the view's root, held open while the COMPOUND runs
};
thread_local std::optional<OpenTxn> current;

constexpr size_t kTagShown = 64;  // bytes of a tag that a log line shows

std::string shown(std::string_view tag) {
  std::string s(tag.substr(0, kTagShown));
  if (tag.size() > kTagShown) s += "...";
  return s;
}

std::string describe(const OpenTxn &t) {
  return fmt::format("transaction {} (COMPOUND v4.{} tag '{}')", t.id, t.minorversion, t.tag);
}

txnfs_bridge_verdict verdict(txnfs_bridge_action action, uint32_t status = 0, uint32_t view = 0) {
  return {uint32_t(action), status, view, 0};
}

// The FUSE nodeid of PATH (relative to DIRFD; "": DIRFD itself), from its kernel handle
// as FSAL_VFS makes it, or 0.
uint64_t nodeid_at(int dirfd, const char *path) {
  struct {
    struct file_handle h;
    unsigned char bytes[MAX_HANDLE_SZ];
  } fh{};
  fh.h.handle_bytes = MAX_HANDLE_SZ;
  int mount_id = 0;
  if (name_to_handle_at(dirfd, path, &fh.h, &mount_id, *path ? 0 : AT_EMPTY_PATH) != 0) return 0;
  if (fh.h.handle_type != 0x81 || fh.h.handle_bytes != 12) return 0;
  uint32_t w[2];
  std::memcpy(w, fh.h.f_handle, sizeof w);
  return uint64_t(w[0]) << 32 | w[1];
}

// Opens T's view (docs/isolation.md, Views) and returns its slot, which the patch opens
// every object of the COMPOUND through: the top 16 bits of its root's nodeid. Looking
// the root up, MOUNT/.txnfs/ID, is what gives the transaction its view. The root stays
// open (t.view_fd) until the COMPOUND ends: its entry has no cache lifetime, so the
// kernel would drop it with the last fd, and the root reached by handle again has no
// parent to be reconnected through (ESTALE). 0: no view (every slot taken: ENFILE).
uint32_t open_view(OpenTxn &t) {
  std::string root = fmt::format(".txnfs/{}", t.id);
  t.view_fd = openat(control_fd, root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (t.view_fd < 0) return 0;
  return uint32_t(nodeid_at(t.view_fd, "") >> 48);
}

void close_view(OpenTxn &t) {
  if (t.view_fd >= 0) close(t.view_fd);
  t.view_fd = -1;
}

// What to answer a COMPOUND whose transaction could not begin (ERR: a positive errno).
// A shortage of memory or file descriptors passes: NFS4ERR_DELAY makes the client retry.
// Anything else -- the mount is gone (ENOTCONN, ENOENT), is not txnfs (ENOTTY), the
// daemon's database failed (EIO), the thread is still bound (EBUSY) -- would fail the
// same way again: NFS4ERR_SERVERFAULT, so that clients do not retry forever.
uint32_t refusal_status(int err) {
  switch (err) {
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case EAGAIN:
      return TXNFS_BRIDGE_NFS4ERR_DELAY;
    default:
      return TXNFS_BRIDGE_NFS4ERR_SERVERFAULT;
  }
}

// Aborts T; a failure is only logged: the reply already reports a failure, and a
// transaction the daemon could not roll back is rolled back by its recovery.
void abort_txn(const OpenTxn &t) {
  int rc = txnfs_abort_fd(control_fd, t.id);
  if (rc != 0 && rc != -ENOENT)
    logger.line("error: abort of {} failed: {}", describe(t), std::strerror(-rc));
}

// What became of T's predeclared lock set PLAN (RC: what txnfs_lock_set returned): 0,
// or the verdict's status to refuse the COMPOUND with (T is then aborted by the caller).
uint32_t predeclared(OpenTxn &t, const LockPlan &plan, int rc) {
  if (rc == -ETIMEDOUT) {
    logger.line(
        "{}: its {} predeclared locks were not granted within {} ms; answering "
        "NFS4ERR_DELAY without running it",
        describe(t), plan.locks, config.lock_set_timeout_ms);
    return TXNFS_BRIDGE_NFS4ERR_DELAY;
  }
  if (rc != 0) {  // runs with per-request locking only, which is always correct
    logger.line("error: cannot predeclare the locks of {}: {}; locking per request", describe(t),
                std::strerror(-rc));
    return 0;
  }
  t.complete_set = !plan.partial;
  if (config.verbose)
    logger.line("{}: {} locks predeclared{}", describe(t), plan.locks,
                plan.partial ? " (partial: the rest per request)" : "");
  return 0;
}

// The two-phase-commit tags: which one TAG is (its GID in *gid), or kNone.
enum class TwoPc { kNone, kPrepare, kCommit, kAbort };
TwoPc two_pc(std::string_view tag, std::string *gid) {
  if (!tag.starts_with(config.tag_prefix)) return TwoPc::kNone;
  std::string_view rest = tag.substr(config.tag_prefix.size());
  for (auto [word, kind] : {std::pair{"-prepare:", TwoPc::kPrepare},
                            std::pair{"-commit:", TwoPc::kCommit},
                            std::pair{"-abort:", TwoPc::kAbort}})
    if (rest.starts_with(word)) {
      *gid = rest.substr(std::string_view(word).size());
      return kind;
    }
  return TwoPc::kNone;
}

// P-commit:GID and P-abort:GID: resolves the prepared transaction GID as etcd's decision
// says, if that is what the tag names. RUN (the COMPOUND then runs plain) or REFUSE.
txnfs_bridge_verdict resolve(TwoPc kind, const std::string &gid, std::string_view tag) {
  bool commit = kind == TwoPc::kCommit;
  if (!decisions) {
    logger.line("error: COMPOUND tag '{}': two-phase commit needs `cluster` in the bridge's "
                "configuration; answering NFS4ERR_SERVERFAULT",
                shown(tag));
    return verdict(TXNFS_BRIDGE_REFUSE, TXNFS_BRIDGE_NFS4ERR_SERVERFAULT);
  }
  cluster::Decision d = cluster::Decision::kNone;
  std::string why;
  if (int err = decisions->read(gid, &d, &why)) {
    logger.line("error: {} of {}: cannot read its decision from etcd ({}); answering "
                "NFS4ERR_DELAY (the node resolves it itself)",
                commit ? "commit" : "abort", gid, why);
    (void)err;
    return verdict(TXNFS_BRIDGE_REFUSE, TXNFS_BRIDGE_NFS4ERR_DELAY);
  }
  if (d != (commit ? cluster::Decision::kCommit : cluster::Decision::kAbort)) {
    logger.line("error: COMPOUND tag '{}' asks to {} {}, but etcd's decision is {}; "
                "answering NFS4ERR_SERVERFAULT",
                shown(tag), commit ? "commit" : "abort", gid, cluster::name(d));
    return verdict(TXNFS_BRIDGE_REFUSE, TXNFS_BRIDGE_NFS4ERR_SERVERFAULT);
  }
  int rc = txnfs_resolve_fd(control_fd, gid.c_str(), commit);
  if (rc != 0 && rc != -ENOENT) {
    logger.line("error: {} of prepared transaction {} failed: {}; answering NFS4ERR_DELAY",
                commit ? "commit" : "abort", gid, std::strerror(-rc));
    return verdict(TXNFS_BRIDGE_REFUSE, TXNFS_BRIDGE_NFS4ERR_DELAY);
  }
  if (config.verbose)
    logger.line("prepared transaction {}: {}", gid,
                rc == -ENOENT ? "resolved already" : commit ? "committed" : "rolled back");
  return verdict(TXNFS_BRIDGE_RUN);
}

txnfs_bridge_verdict begin(uint32_t minorversion, const char *tag, uint32_t tag_len,
                           const txnfs_bridge_op *ops, uint32_t ops_len) {
  std::string_view tag_view = tag_len ? std::string_view(tag, tag_len) : std::string_view{};
  if (current) {  // cannot happen while the patch keeps its invariant
    logger.line("error: {} was never ended; aborting it", describe(*current));
    abort_txn(*current);
    current.reset();
  }
  std::string gid;
  TwoPc kind = two_pc(tag_view, &gid);
  if (kind != TwoPc::kNone && !cluster::valid_gid(gid)) {
    logger.line("error: COMPOUND tag '{}': a global id is 1 to 64 of [A-Za-z0-9._-]; "
                "answering NFS4ERR_SERVERFAULT without running it", shown(tag_view));
    return verdict(TXNFS_BRIDGE_REFUSE, TXNFS_BRIDGE_NFS4ERR_SERVERFAULT);
  }
  if (kind == TwoPc::kCommit || kind == TwoPc::kAbort) return resolve(kind, gid, tag_view);
  if (kind == TwoPc::kPrepare && !decisions) {
    logger.line("error: COMPOUND tag '{}': two-phase commit needs `cluster` in the bridge's "
                "configuration; answering NFS4ERR_SERVERFAULT without running it",
                shown(tag_view));
    return verdict(TXNFS_BRIDGE_REFUSE, TXNFS_BRIDGE_NFS4ERR_SERVERFAULT);
  }
  if (!config.transactional(tag_view)) return verdict(TXNFS_BRIDGE_RUN);
  OpenTxn t{.id = 0,
            .gid = gid,
            .minorversion = minorversion,
            .tag = shown(tag_view),
            .lazy = kind == TwoPc::kNone && config.lazy(tag_view)};
  // begin, this transaction's lock timeout and its lock set in one request
  LockPlan plan;
  if (config.lock_set_timeout_ms != 0 && ops != nullptr)
    plan = plan_locks(ops, ops_len, root_nodeid);
  int set_rc = 0;
  int rc = plan.locks == 0
               ? txnfs_begin2_fd(control_fd, TXNFS_BIND_THREAD, 0, config.lock_timeout_ms, &t.id)
               : txnfs_begin3_fd(control_fd, TXNFS_BIND_THREAD, 0, config.lock_timeout_ms,
                                 plan.records.data(), plan.records.size(),
                                 config.lock_set_timeout_ms, &t.id, &set_rc);
  if (rc != 0) {
    uint32_t status = refusal_status(-rc);
    logger.line(
        "error: cannot begin a transaction on {} for COMPOUND v4.{} tag '{}': {}; "
        "answering {} without running it",
        config.mount, minorversion, t.tag, std::strerror(-rc),
        status == TXNFS_BRIDGE_NFS4ERR_DELAY ? "NFS4ERR_DELAY" : "NFS4ERR_SERVERFAULT");
    return verdict(TXNFS_BRIDGE_REFUSE, status);
  }
  if (uint32_t status = plan.locks == 0 ? 0 : predeclared(t, plan, set_rc)) {
    abort_txn(t);
    return verdict(TXNFS_BRIDGE_REFUSE, status);
  }
  uint32_t view = open_view(t);
  if (view == 0) {
    int err = errno;
    logger.line("error: {} has no view: {}; answering NFS4ERR_DELAY without running it",
                describe(t), std::strerror(err));
    close_view(t);
    abort_txn(t);
    return verdict(TXNFS_BRIDGE_REFUSE, TXNFS_BRIDGE_NFS4ERR_DELAY);
  }
  current = std::move(t);
  return verdict(TXNFS_BRIDGE_RUN_TXN, 0, view);
}

txnfs_bridge_verdict end(uint32_t status, int replay) {
  if (!current) {  // cannot happen while the patch keeps its invariant
    logger.line("error: end of a COMPOUND without a transaction on this thread");
    return verdict(TXNFS_BRIDGE_KEEP);
  }
  OpenTxn t = std::move(*current);
  current.reset();
  close_view(t);  // the COMPOUND ran; commit or abort ends the view anyway

  if (replay) {
    abort_txn(t);
    if (config.verbose) logger.line("{}: slot-cache replay, nothing ran; aborted", describe(t));
    return verdict(TXNFS_BRIDGE_KEEP);
  }
  if (status == TXNFS_BRIDGE_NFS4_OK && !t.gid.empty()) {
    int rc = txnfs_prepare_fd(control_fd, t.id, t.gid.c_str());
    if (rc == 0) {
      if (config.verbose) logger.line("{}: prepared as {}", describe(t), t.gid);
      return verdict(TXNFS_BRIDGE_KEEP);
    }
    logger.line("error: prepare of {} as {} failed: {}; aborting it, answering NFS4ERR_DELAY",
                describe(t), t.gid, std::strerror(-rc));
    abort_txn(t);
    return verdict(TXNFS_BRIDGE_COLLAPSE, TXNFS_BRIDGE_NFS4ERR_DELAY);
  }
  if (status == TXNFS_BRIDGE_NFS4_OK) {
    // A lazy COMPOUND's reply comes before it is durable; a WRITE with FILE_SYNC4 or a
    // COMMIT inside it (an fsync) makes the commit durable after all.
    int rc = txnfs_commit2_fd(control_fd, t.id, t.lazy ? TXNFS_COMMIT_LAZY : TXNFS_COMMIT_DURABLE);
    if (rc == 0) {
      if (config.verbose) logger.line("{}: committed{}", describe(t), t.lazy ? " lazily" : "");
      return verdict(TXNFS_BRIDGE_KEEP);
    }
    // A refused commit (abort-only transaction) leaves it open; a failed one rolled it back.
    logger.line("error: commit of {} failed: {}; aborting it, answering NFS4ERR_DELAY", describe(t),
                std::strerror(-rc));
    abort_txn(t);
    return verdict(TXNFS_BRIDGE_COLLAPSE, TXNFS_BRIDGE_NFS4ERR_DELAY);
  }
  // Read before aborting: afterwards the daemon no longer knows the transaction.
  struct txnfs_info info {};
  int info_rc = txnfs_info_fd(control_fd, t.id, &info);
  abort_txn(t);
  if (info_rc == 0 && (info.error == EDEADLK || info.error == ETIMEDOUT)) {
    if (t.complete_set)  // should not happen: every lock it needed was granted at begin
      logger.line("warning: {} lost a lock wait ({}) although its lock set was complete",
                  describe(t), info.error == EDEADLK ? "deadlock" : "timeout");
    else if (config.verbose)
      logger.line("{}: aborted, lost a lock wait ({}); failing op answered NFS4ERR_DELAY",
                  describe(t), info.error == EDEADLK ? "deadlock" : "timeout");
    return verdict(TXNFS_BRIDGE_REWRITE, TXNFS_BRIDGE_NFS4ERR_DELAY);
  }
  if (config.verbose) logger.line("{}: aborted (COMPOUND status {})", describe(t), status);
  return verdict(TXNFS_BRIDGE_KEEP);
}

const txnfs_bridge_ops ops = {begin, end};

// Loads the configuration and checks that the mount is a txnfs mount; "" or the reason.
std::string start() {
  const char *path = std::getenv("TXNFS_BRIDGE_CONF");
  if (path == nullptr || *path == '\0') return "TXNFS_BRIDGE_CONF is not set";
  std::string error;
  std::optional<Config> c = load_config(path, &error);
  if (!c) return error;
  config = std::move(*c);
  if (!logger.open(config.log, &error)) return error;
  if (!config.cluster.empty()) {
    std::optional<cluster::ClusterConf> cc = cluster::load_cluster_conf(config.cluster, &error);
    if (!cc) return error;
    etcd = std::make_unique<cluster::Etcd>(cc->etcd, cc->etcd_timeout);
    decisions = std::make_unique<cluster::Decisions>(*etcd, cc->cluster);
  }
  root_nodeid = nodeid_at(AT_FDCWD, config.mount.c_str());
  control_fd = open(config.mount.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (control_fd < 0) return config.mount + ": " + std::strerror(errno);
  char status[TXNFS_STATUS_JSON_MAX];
  int rc = txnfs_status_json_fd(control_fd, status, sizeof status);
  if (rc < 0) {
    close(control_fd);
    control_fd = -1;
    return config.mount + (rc == -ENOTTY ? std::string(" is not a txnfs mount")
                                         : std::string(": ") + std::strerror(-rc));
  }
  logger.line("ready: mount {}; {}{}", config.mount,
              config.all_compounds
                  ? std::string("every COMPOUND is a transaction")
                  : "COMPOUNDs whose tag starts with '" + config.tag_prefix + "' are transactions",
              config.lazy_tag_prefix.empty()
                  ? std::string("; no lazy commits")
                  : "; those whose tag starts with '" + config.lazy_tag_prefix + "' commit lazily");
  return {};
}

}  // namespace
}  // namespace txnfs::bridge

extern "C" __attribute__((visibility("default"))) const txnfs_bridge_ops *txnfs_bridge_open(
    uint32_t abi, char *err, size_t err_len) {
  static std::atomic<bool> opened{false};
  std::string error;
  if (abi != TXNFS_BRIDGE_ABI)
    error = fmt::format("Ganesha speaks bridge ABI {}, this library ABI {}", abi, TXNFS_BRIDGE_ABI);
  else if (opened.exchange(true)) error = "txnfs_bridge_open called twice";
  else error = txnfs::bridge::start();
  if (error.empty()) return &txnfs::bridge::ops;
  if (err_len > 0) {
    size_t n = std::min(error.size(), err_len - 1);
    std::memcpy(err, error.data(), n);
    err[n] = '\0';
  }
  return nullptr;
}
