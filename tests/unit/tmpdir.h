// A scratch directory removed with everything in it when the test ends.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>

struct TmpDir {
  std::string path;
  TmpDir() {
    char tmpl[] = "/tmp/txnfs-unit-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TmpDir() { std::filesystem::remove_all(path); }
};
