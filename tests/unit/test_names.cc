#include <cerrno>
#include <string>

#include <catch2/catch.hpp>

#include "store/names.h"

using txnfs::check_name;

TEST_CASE("ordinary names are accepted") {
  CHECK(check_name("a") == 0);
  CHECK(check_name("passwd") == 0);
  CHECK(check_name(".hidden") == 0);
  CHECK(check_name("...") == 0);
  CHECK(check_name(std::string(255, 'x')) == 0);
}

TEST_CASE("names that cannot be directory entries are rejected") {
  CHECK(check_name("") == EINVAL);
  CHECK(check_name(".") == EINVAL);
  CHECK(check_name("..") == EINVAL);
  CHECK(check_name("a/b") == EINVAL);
  CHECK(check_name(std::string("a\0b", 3)) == EINVAL);
  CHECK(check_name(std::string(256, 'x')) == ENAMETOOLONG);
}
