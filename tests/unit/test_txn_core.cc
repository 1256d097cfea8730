// The transaction core (src/txnfuse/txn) on a real store on a loop-mounted XFS, with no
// FUSE mount: TxnManager's begin, binding, commit and abort through TxnEnv, the real
// recorder, the one undo executor, and the committed view plain readers are served from;
// and the daemon's inode table.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "store/backing.h"
#include "store/store.h"
#include "store/unique_fd.h"
#include "txnfuse/fuse/inode_table.h"
#include "txnfuse/txn/recorder.h"
#include "txnfuse/txn/txn.h"
#include "txnfuse/txn/txn_env.h"
#include "tests/unit/xfs_image.h"

using namespace txnfs;

namespace {

// A store on a fresh XFS image, served by a TxnManager with no cache in front of it.
struct Core {
  XfsImage xfs;
  NoCache no_cache;
  TxnEnv env;
  std::unique_ptr<TxnManager> txns;

  Core() {
    if (!xfs.ok()) return;
    init_store(xfs.mnt + "/store", false);
    env.paths = StorePaths::of(xfs.mnt + "/store");
    env.tree_fd = ::open(env.paths.tree.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    env.backups_fd = ::open(env.paths.backups.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(env.tree_fd >= 0);
    REQUIRE(env.backups_fd >= 0);
    env.tree_ino = backing_id(env.tree_fd).ino;
    env.db = MetaDb::open(env.paths.db);
    env.cache = &no_cache;
    txns = std::make_unique<TxnManager>(env);
    txns->start();
  }
  ~Core() {
    txns.reset();  // stops its threads first
    if (env.tree_fd >= 0) ::close(env.tree_fd);
    if (env.backups_fd >= 0) ::close(env.backups_fd);
  }
  bool ok() const { return xfs.ok(); }
  std::string p(const std::string &rel) const { return env.paths.tree + "/" + rel; }

  InodePtr inode(const std::string &rel) {
    int fd = ::open(rel.empty() ? env.paths.tree.c_str() : p(rel).c_str(),
                    O_PATH | O_NOFOLLOW | O_CLOEXEC);
    REQUIRE(fd >= 0);
    struct stat st;
    REQUIRE(::fstat(fd, &st) == 0);
    InodePtr i = make_inode(fd, env.nodeid_of(st.st_ino), st);
    ::close(fd);  // the core pins fds through env.fds, by handle
    return i;
  }
  // Begins a transaction bound to the calling thread; returns it.
  TxnPtr begin() {
    uint64_t id = 0;
    REQUIRE(txns->begin(::getuid(), ::gettid(), 0, 0, &id) == 0);
    TxnPtr t = txns->bound(::gettid());
    REQUIRE(t);
    REQUIRE(t->id() == id);
    return t;
  }
  // A request of `t`: records an overwrite of `rel` at `off` through the recorder, then
  // makes it, as the write handler does.
  void write(Txn &t, const std::string &rel, off_t off, const std::string &data) {
    REQUIRE(txns->enter(t) == 0);
    REQUIRE(save_range(env, t, *inode(rel), uint64_t(off), data.size()) == 0);
    UniqueFd fd(::open(p(rel).c_str(), O_WRONLY | O_CLOEXEC));
    REQUIRE(::pwrite(fd.get(), data.data(), data.size(), off) == ssize_t(data.size()));
    txns->leave(t);
  }
  std::string read(const std::string &rel) {
    UniqueFd fd(::open(p(rel).c_str(), O_RDONLY | O_CLOEXEC));
    std::string s(1 << 16, '\0');
    ssize_t n = ::pread(fd.get(), s.data(), s.size(), 0);
    s.resize(size_t(std::max<ssize_t>(n, 0)));
    return s;
  }
  // What a plain reader is served for `rel` while transactions are open.
  std::string read_committed(const std::string &rel) {
    UniqueFd fd(::open(p(rel).c_str(), O_RDONLY | O_CLOEXEC));
    std::string s(1 << 16, '\0');
    size_t n = 0;
    REQUIRE(env.view.read(inode(rel)->nodeid, fd.get(), s.data(), s.size(), 0, &n) == 0);
    s.resize(n);
    return s;
  }
  void put(const std::string &rel, const std::string &data) {
    UniqueFd fd(::open(p(rel).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    REQUIRE(::write(fd.get(), data.data(), data.size()) == ssize_t(data.size()));
  }
  std::set<std::string> names(const std::vector<ListedEntry> &l) {
    std::set<std::string> s;
    for (auto &e : l) s.insert(e.name);
    return s;
  }
  size_t logs_left() {
    size_t n = 0;
    DIR *d = ::opendir(env.paths.backups.c_str());
    while (dirent *e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
    return n;
  }
};

#define NEED_CORE(c)                \
  Core c;                           \
  if (!c.ok()) {                    \
    WARN("skipped: " << c.xfs.why); \
    return;                         \
  }

}  // namespace

TEST_CASE("begin binds the calling thread only, once") {
  NEED_CORE(c);
  CHECK(!c.txns->any_open());
  TxnPtr t = c.begin();
  CHECK(c.txns->any_open());
  uint64_t again = 0;
  CHECK(c.txns->begin(::getuid(), ::gettid(), 0, 0, &again) == EBUSY);
  pid_t other = 0;
  TxnPtr seen;
  std::thread([&] {
    other = ::gettid();
    seen = c.txns->bound(other);
  }).join();
  CHECK(other != ::gettid());
  CHECK(!seen);  // another thread's requests are plain
  CHECK(c.txns->status_json().find("\"id\":" + std::to_string(t->id())) != std::string::npos);
  CHECK(c.txns->abort(::getuid(), t->id()) == 0);
  CHECK(!c.txns->bound(::gettid()));
  CHECK(!c.txns->any_open());
  CHECK(c.txns->abort(::getuid(), t->id()) == ENOENT);
}

TEST_CASE(
    "abort undoes recorded writes through the undo executor; the view shows the "
    "committed bytes meanwhile") {
  NEED_CORE(c);
  c.put("f", "committed bytes");
  TxnPtr t = c.begin();
  c.write(*t, "f", 0, "UNCOMMITTED");
  c.write(*t, "f", 15, " and more");
  CHECK(c.read("f") == "UNCOMMITTEDytes and more");
  CHECK(c.read_committed("f") == "committed bytes");
  struct stat st {};
  int fd = ::open(c.p("f").c_str(), O_PATH | O_CLOEXEC);
  REQUIRE(fd >= 0);
  CHECK(!c.env.view.attrs(c.inode("f")->nodeid, fd, st));  // changed: do not cache
  CHECK(st.st_size == 15);                                 // the committed size
  ::close(fd);

  CHECK(c.txns->abort(::getuid(), t->id()) == 0);
  CHECK(c.read("f") == "committed bytes");
  CHECK(!c.env.view.object(c.inode("f")->nodeid));
  CHECK(c.logs_left() == 0);
  CHECK(c.env.view.empty());
}

TEST_CASE("commit keeps recorded writes; the cleaner removes the log") {
  NEED_CORE(c);
  c.put("f", "old");
  TxnPtr t = c.begin();
  c.write(*t, "f", 0, "new");
  CHECK(c.txns->commit(::getuid(), t->id()) == 0);
  CHECK(c.read("f") == "new");
  CHECK(c.txns->commits() == 1);
  CHECK(!c.env.view.object(c.inode("f")->nodeid));
  for (int k = 0; k < 500 && c.logs_left() != 0; ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(c.logs_left() == 0);
}

TEST_CASE(
    "the committed listing hides what an open transaction made and shows what it "
    "removed, until it ends") {
  NEED_CORE(c);
  c.put("old", "x");
  c.put("kept", "y");
  TxnPtr t = c.begin();
  REQUIRE(c.txns->enter(*t) == 0);
  InodePtr root = c.inode("");
  auto mk = [](int dirfd, const char *tmp) {
    int fd = ::openat(dirfd, tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    return fd < 0 ? errno : (::close(fd), 0);
  };
  REQUIRE(txn_make(c.env, *t, *root, "new", S_IFREG | 0644, mk) == 0);
  REQUIRE(txn_remove(c.env, *t, *root, "old", false) == 0);
  c.txns->leave(*t);

  DIR *dp = ::opendir(c.env.paths.tree.c_str());
  REQUIRE(dp);
  CommittedListing during = c.env.view.listing(root->nodeid, dp);
  CHECK(during.changed);  // its offsets cannot be the tree's cookies
  CHECK(c.names(during.entries) == std::set<std::string>{".", "..", "kept", "old"});
  CHECK(c.env.view.before(root->nodeid, "new").has_value());
  CHECK(!c.env.view.before(root->nodeid, "new")->existed);
  CHECK(c.txns->abort(::getuid(), t->id()) == 0);
  CommittedListing after = c.env.view.listing(root->nodeid, dp);
  CHECK(!after.changed);  // the tree's own listing, with its cookies
  CHECK(c.names(after.entries) == std::set<std::string>{".", "..", "kept", "old"});
  for (auto &e : after.entries) CHECK(e.cookie != 0);
  CHECK(!c.env.view.before(root->nodeid, "new"));
  ::closedir(dp);
  struct stat st;
  CHECK(::stat(c.p("new").c_str(), &st) != 0);
  CHECK(c.read("old") == "x");
}

TEST_CASE("a transaction whose owner thread exits is aborted by the reaper") {
  NEED_CORE(c);
  c.put("f", "before");
  uint64_t id = 0;
  std::thread([&] {
    TxnPtr t = c.begin();
    id = t->id();
    c.write(*t, "f", 0, "during");
  }).join();
  for (int k = 0; k < 500 && c.txns->any_open(); ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(!c.txns->any_open());
  CHECK(c.read("f") == "before");
  struct txnfs_info info;
  CHECK(c.txns->info(0, id, &info) == ENOENT);
}

TEST_CASE("the inode table keeps one Inode per nodeid until the kernel forgets every lookup") {
  InodeTable table;
  auto make = [](uint64_t nodeid) {
    auto i = std::make_shared<Inode>();
    i->nodeid = nodeid;
    return i;
  };
  InodePtr a = make(7);
  CHECK(table.add_lookup(a) == a);
  CHECK(table.add_lookup(make(7)) == a);  // a second lookup finds the first object
  table.add_lookup_existing(a);
  CHECK(a->nlookup == 3);
  CHECK(table.size() == 1);
  table.forget(7, 2);
  CHECK(table.get(7) == a);
  table.forget(7, 1);
  CHECK(table.get(7) == nullptr);
  CHECK(table.size() == 0);
  table.forget(7, 1);  // a forget for a nodeid no longer known is ignored
  CHECK(table.size() == 0);
}

TEST_CASE("the inode table agrees with a map through many inserts and forgets") {
  InodeTable table;
  std::map<uint64_t, uint64_t> want;  // nodeid -> lookups
  std::mt19937_64 rng(42);
  for (int step = 0; step < 200000; step++) {
    // Clustered nodeids, as inode numbers are: long probe runs and wrap-arounds.
    uint64_t nodeid = 2 + rng() % 5000;
    if (rng() % 3) {
      auto i = std::make_shared<Inode>();
      i->nodeid = nodeid;
      REQUIRE(table.add_lookup(i)->nodeid == nodeid);
      want[nodeid]++;
    } else {
      uint64_t n = 1 + rng() % 3;
      table.forget(nodeid, n);
      if (auto it = want.find(nodeid);
          it != want.end() && (it->second -= std::min(n, it->second)) == 0)
        want.erase(it);
    }
  }
  CHECK(table.size() == want.size());
  for (uint64_t nodeid = 2; nodeid < 5002; nodeid++) {
    InodePtr i = table.get(nodeid);
    auto it = want.find(nodeid);
    REQUIRE(bool(i) == (it != want.end()));
    if (i) CHECK(i->nlookup == it->second);
  }
}

TEST_CASE("a lookup of a reused inode number replaces the earlier object and takes its lookups") {
  InodeTable table;
  auto make = [](uint64_t nodeid, uint64_t generation) {
    auto i = std::make_shared<Inode>();
    i->nodeid = nodeid;
    i->generation = generation;
    return i;
  };
  InodePtr old = make(9, 1);
  table.add_lookup(old);
  table.add_lookup(old);
  InodePtr reused = make(9, 2);
  CHECK(table.add_lookup(reused) == reused);
  CHECK(table.get(9) == reused);
  CHECK(reused->nlookup == 3);
  table.forget(9, 2);  // the kernel forgets the stale inode's two lookups
  CHECK(table.get(9) == reused);
  table.forget(9, 1);
  CHECK(table.get(9) == nullptr);
}

TEST_CASE("the fd cache keeps at most its capacity idle and never closes a pinned fd") {
  NEED_CORE(c);
  c.env.fds.set_capacity(2);
  for (const char *n : {"a", "b", "c"}) c.put(n, n);
  InodePtr a = c.inode("a"), b = c.inode("b"), f = c.inode("c");
  InodeFd pa = c.env.pin(*a);
  REQUIRE(pa);
  int held = pa.get();
  REQUIRE(c.env.pin(*b));
  REQUIRE(c.env.pin(*f));  // evicts a's entry, which pa still pins
  CHECK(c.env.fds.size() == 2);
  struct stat st;
  REQUIRE(::fstatat(held, "", &st, AT_EMPTY_PATH) == 0);
  CHECK(st.st_ino == a->ino);
  InodeFd again = c.env.pin(*a);  // a miss: opened again by handle
  REQUIRE(again);
  REQUIRE(::fstatat(again.get(), "", &st, AT_EMPTY_PATH) == 0);
  CHECK(st.st_ino == a->ino);
  pa = InodeFd();
  again = InodeFd();
  // An object that is gone answers ESTALE (its inode is freed; the generation differs).
  REQUIRE(::unlink(c.p("b").c_str()) == 0);
  c.env.fds.set_capacity(1);  // drops b's idle fd, which held it alive
  c.env.fds.set_capacity(2);
  REQUIRE(c.env.pin(*a));
  InodeFd gone = c.env.pin(*b);
  CHECK(!gone);
  CHECK(gone.err() == ESTALE);
}

TEST_CASE("the fd cache lets go of an object with no name left, and of no other") {
  NEED_CORE(c);
  for (const char *n : {"a", "b", "p"}) c.put(n, n);
  REQUIRE(::link(c.p("b").c_str(), c.p("b2").c_str()) == 0);
  InodePtr a = c.inode("a"), b = c.inode("b"), p = c.inode("p");
  for (auto &i : {a, b, p}) REQUIRE(c.env.pin(*i));
  CHECK(c.env.fds.size() == 3);
  c.env.fds.drop_unlinked(a->ino);  // still named: kept
  CHECK(c.env.fds.size() == 3);
  REQUIRE(::unlink(c.p("a").c_str()) == 0);
  REQUIRE(::unlink(c.p("b").c_str()) == 0);
  c.env.fds.drop_unlinked(a->ino);
  c.env.fds.drop_unlinked(b->ino);  // b2 still names it
  CHECK(c.env.fds.size() == 2);
  CHECK(c.env.pin(*b));
  InodeFd gone = c.env.pin(*a);  // nothing held it: freed
  CHECK(!gone);
  CHECK(gone.err() == ESTALE);
  // A pinned fd outlives the drop; the cache no longer counts it.
  InodeFd held = c.env.pin(*p);
  REQUIRE(::unlink(c.p("p").c_str()) == 0);
  c.env.fds.drop_unlinked(p->ino);
  CHECK(c.env.fds.size() == 1);
  struct stat st;
  REQUIRE(::fstatat(held.get(), "", &st, AT_EMPTY_PATH) == 0);
  CHECK(st.st_nlink == 0);
}

TEST_CASE("a finished transaction leaves no fd to what it removed or, aborted, made") {
  NEED_CORE(c);
  c.put("old", "old");
  InodePtr root = c.inode(""), old = c.inode("old");
  REQUIRE(c.env.pin(*old));
  TxnPtr t = c.begin();
  REQUIRE(c.txns->enter(*t) == 0);
  REQUIRE(txn_remove(c.env, *t, *root, "old", false) == 0);
  c.txns->leave(*t);
  CHECK(c.env.fds.size() == 2);  // the root, and the removed file, stashed in the log
  REQUIRE(c.txns->commit(::getuid(), t->id()) == 0);
  CHECK(c.env.fds.size() == 1);

  t = c.begin();
  REQUIRE(c.txns->enter(*t) == 0);
  UniqueFd made;
  REQUIRE(txn_make(
              c.env, *t, *root, "new", S_IFREG | 0644,
              [](int dirfd, const char *n) {
                UniqueFd fd(::openat(dirfd, n, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
                return fd ? 0 : fd.err();
              },
              &made) == 0);
  struct stat st;
  REQUIRE(::fstat(made.get(), &st) == 0);
  InodePtr fresh = make_inode(made.get(), c.env.nodeid_of(st.st_ino), st);
  c.env.fds.adopt(*fresh, std::move(made));  // as the daemon's lookup_fd does
  c.txns->leave(*t);
  CHECK(c.env.fds.size() == 2);
  REQUIRE(c.txns->abort(::getuid(), t->id()) == 0);
  CHECK(c.env.fds.size() == 1);
  CHECK(!c.env.pin(*fresh));
}

TEST_CASE("a committed read that meets a finished transaction's vanished log reads again") {
  NEED_CORE(c);
  c.put("f", "0123456789");
  TxnPtr t = c.begin();
  REQUIRE(c.txns->enter(*t) == 0);
  REQUIRE(save_truncate(c.env, *t, *c.inode("f"), 0) == 0);
  REQUIRE(::truncate(c.p("f").c_str(), 0) == 0);
  c.txns->leave(*t);
  CHECK(c.read_committed("f") == "0123456789");
  // The cleaner removes a committed log right after the commit, just before the view
  // forgets the transaction: a reader in between found the saved range gone and
  // returned the zeros it had filled in for the committed size.
  namespace fs = std::filesystem;
  for (auto &e : fs::directory_iterator(c.env.paths.backups + "/" + std::to_string(t->id())))
    if (e.path().extension() == ".d" && e.is_regular_file()) fs::remove(e.path());
  std::thread committer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK(c.txns->commit(::getuid(), t->id()) == 0);
  });
  CHECK(c.read_committed("f") == "");  // the committed state, once the view moved on
  committer.join();
}
