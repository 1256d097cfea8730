// The options of `txnfs mount -o` (src/txnfuse/fuse/mount_options.h): mount(8)'s flags
// from mount(8)'s defaults, fsname=, and what goes to libfuse.
#include <sys/mount.h>

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "txnfuse/fuse/mount_options.h"

using namespace txnfs;

namespace {

std::string fuse_opts(const std::vector<std::string> &lists, bool root = true) {
  return libfuse_options(parse_mount_options(lists, root), "base", "/srv/store");
}

}  // namespace

TEST_CASE("root starts from mount(8)'s defaults; others from fusermount3's") {
  CHECK(parse_mount_options({}, true).ms == 0);
  CHECK(fuse_opts({}) == "base,fsname=/srv/store,rw,suid,dev,exec,async");
  CHECK(parse_mount_options({}, false).ms == (MS_NOSUID | MS_NODEV));
  CHECK(fuse_opts({}, false) == "base,fsname=/srv/store,rw,nosuid,nodev,exec,async");
  CHECK(fuse_opts({"nosuid,nodev,noexec,ro,sync,dirsync"}) ==
        "base,fsname=/srv/store,ro,nosuid,nodev,noexec,sync,dirsync");
  CHECK(fuse_opts({"nosuid", "suid"}) == fuse_opts({}));  // the last one given wins
}

TEST_CASE("the atime modes exclude each other; libfuse gets only what it knows") {
  auto atime = [](const std::vector<std::string> &o) {
    return parse_mount_options(o, true).ms & (MS_NOATIME | MS_RELATIME | MS_STRICTATIME);
  };
  CHECK(atime({"noatime"}) == MS_NOATIME);
  CHECK(atime({"noatime,relatime"}) == MS_RELATIME);
  CHECK(atime({"relatime,strictatime"}) == MS_STRICTATIME);
  CHECK(atime({"strictatime,noatime"}) == MS_NOATIME);
  CHECK(atime({"noatime,atime"}) == 0);
  CHECK(atime({"strictatime,nostrictatime"}) == 0);
  CHECK(fuse_opts({"relatime,nodiratime"}) == fuse_opts({"nodiratime"}));
  CHECK(fuse_opts({"noatime,nosymfollow"}).ends_with(",noatime,nosymfollow"));
  for (const char *o : {"atime", "diratime", "relatime", "norelatime", "strictatime",
                        "nostrictatime", "lazytime", "nolazytime", "symfollow"})
    CHECK(fuse_opts({o}).find(o) == std::string::npos);
}

TEST_CASE("strictatime and lazytime take a remount with all of the mount's flags") {
  CHECK(flags_libfuse_lacks(parse_mount_options({"noatime,nodiratime,ro"}, true)) == 0);
  CHECK(flags_libfuse_lacks(parse_mount_options({"relatime,nolazytime"}, true)) == 0);
  auto f = parse_mount_options({"ro,strictatime,nodev"}, true);
  CHECK(flags_libfuse_lacks(f) == MS_STRICTATIME);
  CHECK(remount_flags(f) == (MS_REMOUNT | MS_RDONLY | MS_STRICTATIME | MS_NODEV));
  f = parse_mount_options({"lazytime,sync"}, true);
  CHECK(flags_libfuse_lacks(f) == MS_LAZYTIME);
  CHECK(remount_flags(f) == (MS_REMOUNT | MS_LAZYTIME | MS_SYNCHRONOUS));
}

TEST_CASE("fsname names the source; io_uring and other options are kept apart") {
  auto f = parse_mount_options({"fsname=my\\,store,io_uring", "max_read=65536"}, true);
  CHECK(f.fsname == "my,store");
  CHECK(f.io_uring);
  CHECK(f.other == std::vector<std::string>{"max_read=65536"});
  CHECK(libfuse_options(f, "base", "/srv/store") ==
        "base,fsname=my\\,store,rw,suid,dev,exec,async,max_read=65536");
  // a store path with a comma or a backslash reaches libfuse escaped
  CHECK(libfuse_options(parse_mount_options({}, true), "b", "/a,b\\c") ==
        "b,fsname=/a\\,b\\\\c,rw,suid,dev,exec,async");
}
