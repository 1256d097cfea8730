#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <system_error>

#include <catch2/catch.hpp>

#include "store/backing.h"
#include "store/error.h"
#include "store/metadb.h"
#include "store/store.h"
#include "tests/unit/tmpdir.h"
#include "store/unique_fd.h"

using namespace txnfs;

// /tmp is not XFS here, so these tests run the copy-backup path; the XFS path is
// covered by the integration tests on a loop-mounted image.
TEST_CASE("init makes the layout and a root row, and refuses a second init") {
  TmpDir t;
  std::string s = t.path + "/store";
  if (!supports_reflink(t.path))
    CHECK_THROWS_WITH(init_store(s, false), Catch::Contains("reflink"));
  init_store(s, true);
  StorePaths p = StorePaths::of(s);
  check_store_layout(p);
  auto db = MetaDb::open(p.db);
  auto root = db->handle(1);
  REQUIRE(root);
  struct stat st;
  REQUIRE(::stat(p.tree.c_str(), &st) == 0);
  CHECK(root->ino == st.st_ino);
  CHECK(root->type == S_IFDIR);
  CHECK_THROWS_WITH(init_store(s, true), Catch::Contains("already a txnfs store"));
}

TEST_CASE("init refuses a non-empty directory and leaves it alone") {
  TmpDir t;
  std::ofstream(t.path + "/keep") << "x";
  CHECK_THROWS_WITH(init_store(t.path, true), Catch::Contains("not empty"));
  struct stat st;
  CHECK(::stat((t.path + "/.txnfs").c_str(), &st) != 0);
}

TEST_CASE("the store lock admits one holder") {
  TmpDir t;
  std::string s = t.path + "/store";
  init_store(s, true);
  StorePaths p = StorePaths::of(s);
  StoreLock first(p);
  CHECK_THROWS_WITH(StoreLock(p), Catch::Contains("already mounted"));
}

TEST_CASE("backing handles reopen the same object and go stale when it is removed") {
  TmpDir t;
  std::string f = t.path + "/f";
  std::ofstream(f) << "data";
  int fd = ::open(f.c_str(), O_PATH);
  REQUIRE(fd >= 0);
  BackingId id = backing_id(fd);
  ::close(fd);
  int mnt = ::open(t.path.c_str(), O_RDONLY | O_DIRECTORY);
  {
    UniqueFd again = open_by_fh(mnt, id.fh, O_RDONLY);
    REQUIRE(again);
    struct stat st;
    ::fstat(again.get(), &st);
    CHECK(st.st_ino == id.ino);
  }
  ::unlink(f.c_str());
  UniqueFd gone = open_by_fh(mnt, id.fh, O_RDONLY);
  CHECK((!gone && gone.err() == ESTALE));
  UniqueFd bad = open_by_fh(mnt, "xx", O_RDONLY);
  CHECK((!bad && bad.err() == ESTALE));
  ::close(mnt);
}

TEST_CASE("Error keeps the errno of a failed call; its message is as before") {
  try {
    throw_errno("write x", ENOSPC);
  } catch (const Error &e) {
    CHECK(std::string(e.what()) == std::string("write x: ") + std::strerror(ENOSPC));
    CHECK(e.code() == std::errc::no_space_on_device);
    CHECK(errno_in(e) == ENOSPC);
  }
  Error plain("no errno here", "a hint");
  CHECK(std::string(plain.what()) == "no errno here");
  CHECK(plain.hint() == "a hint");
  CHECK(errno_in(plain) == 0);
  CHECK(errno_in(std::runtime_error("No space left on device")) == 0);
  CHECK(errno_in(std::system_error(EIO, std::system_category())) == EIO);
}

TEST_CASE("UniqueFd closes what it holds and keeps the errno of a failed open") {
  TmpDir t;
  int raw;
  {
    UniqueFd fd(::open(t.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    REQUIRE(fd);
    raw = fd.get();
    UniqueFd moved = std::move(fd);
    CHECK(!fd);
    CHECK(moved.get() == raw);
    CHECK(::fcntl(raw, F_GETFD) >= 0);
  }
  CHECK(::fcntl(raw, F_GETFD) < 0);  // closed when `moved` died
  UniqueFd missing(::open((t.path + "/missing").c_str(), O_RDONLY | O_CLOEXEC));
  CHECK(!missing);
  CHECK(missing.err() == ENOENT);
  UniqueFd kept(::open(t.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  int k = kept.release();
  CHECK(!kept);
  CHECK(::close(k) == 0);
}
