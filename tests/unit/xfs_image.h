// Scratch file systems for tests of the undo log.
//
// XfsImage: an XFS file system with reflink, for tests that need real range clones:
// a sparse 512 MiB image in a mkdtemp directory, mkfs.xfs -m reflink=1, attached to a
// loop device and mounted (noatime, so that reading files in a test does not move
// the atimes it compares). The destructor unmounts, detaches and removes everything,
// also when the test failed. Needs root; without it `ok()` is false and `why` says
// so (tests then skip with a warning).
//
// NoatimeDir: a mkdtemp directory under /tmp bind-mounted onto itself with noatime:
// the file system /tmp lives on (ext4 on the CI machines: no reflink), for the copy
// fallbacks. Same interface, same cleanup, also root only.
#pragma once
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

class XfsImage {
 public:
  std::string dir, image, mnt, dev, why;

  XfsImage() {
    if (::geteuid() != 0) {
      why = "not root: cannot make a loop-mounted XFS image";
      return;
    }
    char tmpl[] = "/tmp/txnfs-xfs-XXXXXX";
    if (!::mkdtemp(tmpl)) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
    dir = tmpl;
    image = dir + "/xfs.img";
    mnt = dir + "/mnt";
    try {
      std::filesystem::create_directory(mnt);
      std::filesystem::resize_file(touch(image), 512ull << 20);  // sparse
      run({"mkfs.xfs", "-q", "-m", "reflink=1", image});
      dev = run({"losetup", "--find", "--show", image});
      while (!dev.empty() && (dev.back() == '\n' || dev.back() == ' ')) dev.pop_back();
      if (dev.empty()) throw std::runtime_error("losetup printed no device");
      if (::mount(dev.c_str(), mnt.c_str(), "xfs", MS_NOATIME, nullptr) != 0)
        throw std::runtime_error("mount " + dev + ": " + std::strerror(errno));
      mounted_ = true;
    } catch (...) {
      cleanup();
      throw;
    }
  }
  ~XfsImage() { cleanup(); }
  XfsImage(const XfsImage &) = delete;
  XfsImage &operator=(const XfsImage &) = delete;

  bool ok() const { return mounted_; }

 private:
  bool mounted_ = false;

  static const std::string &touch(const std::string &path) {
    FILE *f = std::fopen(path.c_str(), "w");
    if (!f) throw std::runtime_error("create " + path + ": " + std::strerror(errno));
    std::fclose(f);
    return path;
  }

  // Runs argv (no shell); returns its stdout; throws unless it exits 0.
  static std::string run(const std::vector<std::string> &argv) {
    int pipefd[2];
    if (::pipe2(pipefd, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork");
    if (pid == 0) {
      ::dup2(pipefd[1], 1);
      std::vector<char *> args;
      for (const auto &a : argv) args.push_back(const_cast<char *>(a.c_str()));
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
    ::close(pipefd[1]);
    std::string out;
    char buf[256];
    for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      out.append(buf, size_t(n));
    }
    ::close(pipefd[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      throw std::runtime_error(argv[0] + " failed (status " + std::to_string(status) + ")");
    return out;
  }

  void cleanup() noexcept {
    if (mounted_ && ::umount2(mnt.c_str(), 0) != 0) ::umount2(mnt.c_str(), MNT_DETACH);
    mounted_ = false;
    if (!dev.empty()) {
      try {
        run({"losetup", "-d", dev});
      } catch (...) {
      }
      dev.clear();
    }
    if (!dir.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  }
};

class NoatimeDir {
 public:
  std::string dir, mnt, why;

  NoatimeDir() {
    if (::geteuid() != 0) {
      why = "not root: cannot bind-mount a scratch directory";
      return;
    }
    char tmpl[] = "/tmp/txnfs-plain-XXXXXX";
    if (!::mkdtemp(tmpl)) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
    dir = tmpl;
    mnt = dir + "/mnt";
    if (::mkdir(mnt.c_str(), 0755) != 0 ||
        ::mount(mnt.c_str(), mnt.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      std::string err = std::strerror(errno);
      cleanup();
      throw std::runtime_error("bind mount " + mnt + ": " + err);
    }
    mounted_ = true;
    if (::mount(nullptr, mnt.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_NOATIME, nullptr) != 0) {
      std::string err = std::strerror(errno);
      cleanup();
      throw std::runtime_error("remount noatime " + mnt + ": " + err);
    }
  }
  ~NoatimeDir() { cleanup(); }
  NoatimeDir(const NoatimeDir &) = delete;
  NoatimeDir &operator=(const NoatimeDir &) = delete;

  bool ok() const { return mounted_; }

 private:
  bool mounted_ = false;

  void cleanup() noexcept {
    if (mounted_ && ::umount2(mnt.c_str(), 0) != 0) ::umount2(mnt.c_str(), MNT_DETACH);
    mounted_ = false;
    if (!dir.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      dir.clear();
    }
  }
};
