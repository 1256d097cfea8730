// The bridge's configuration parser (config.h): defaults, every key, and the errors that
// keep a typo from silently turning transactions off.
#include <string>

#include <catch2/catch.hpp>

#include "compound_bridge/bridge/config.h"

using txnfs::bridge::Config;
using txnfs::bridge::parse_config;

namespace {

std::string error_of(const char *text) {
  std::string error;
  REQUIRE_FALSE(parse_config(text, &error));
  return error;
}

}  // namespace

TEST_CASE("bridge config: defaults and every key", "[bridge]") {
  std::string error;
  auto c = parse_config("# txnfs\n\nmount = /srv/txn\n", &error);
  REQUIRE(c);
  CHECK(c->mount == "/srv/txn");
  CHECK(c->tag_prefix == "txn");
  CHECK_FALSE(c->all_compounds);
  CHECK(c->log.empty());
  CHECK(c->cluster.empty());
  CHECK_FALSE(c->verbose);
  CHECK(c->lock_timeout_ms == 250);

  c = parse_config(
      " mount=/m  # the export\ntag_prefix = tx:\r\nall_compounds = yes\n"
      "log = /var/log/b.log\nverbose = true\nlock_timeout_ms = 0\ncluster = /etc/txnfs/n1.conf",
      &error);
  REQUIRE(c);
  CHECK(c->mount == "/m");
  CHECK(c->tag_prefix == "tx:");
  CHECK(c->all_compounds);
  CHECK(c->log == "/var/log/b.log");
  CHECK(c->verbose);
  CHECK(c->lock_timeout_ms == 0);
  CHECK(c->cluster == "/etc/txnfs/n1.conf");
}

TEST_CASE("bridge config: which tags are transactional", "[bridge]") {
  Config c;
  c.mount = "/m";
  CHECK(c.transactional("txn"));
  CHECK(c.transactional("txn:copy 12"));
  CHECK_FALSE(c.transactional(""));
  CHECK_FALSE(c.transactional("tx"));
  CHECK_FALSE(c.transactional("linux"));
  c.all_compounds = true;
  CHECK(c.transactional(""));
  CHECK(c.transactional("linux"));
}

TEST_CASE("bridge config: lazy COMPOUNDs are opted into by their tag", "[bridge]") {
  Config c;
  c.mount = "/m";
  CHECK(c.transactional("txn-lazy"));
  CHECK(c.lazy("txn-lazy:copy 3"));
  CHECK_FALSE(c.lazy("txn"));
  CHECK_FALSE(c.lazy("txn:copy"));
  CHECK_FALSE(c.lazy(""));
  std::string err;
  auto p = parse_config("mount = /m\ntag_prefix = t:\nlazy_tag_prefix = fast:\n", &err);
  REQUIRE(p);
  CHECK(p->transactional("fast:x"));
  CHECK(p->lazy("fast:x"));
  CHECK_FALSE(p->lazy("t:x"));
  p = parse_config("mount = /m\nlazy_tag_prefix = none\n", &err);
  REQUIRE(p);
  CHECK_FALSE(p->lazy("txn-lazy"));
  CHECK(p->transactional("txn-lazy"));  // still a transaction by tag_prefix, durable
  CHECK(error_of("mount = /m\nlazy_tag_prefix =\n") ==
        "line 2: lazy_tag_prefix must not be empty (use none)");
}

TEST_CASE("bridge config: errors name the line", "[bridge]") {
  CHECK(error_of("") == "`mount = /path` is required");
  CHECK(error_of("tag_prefix = t\n") == "`mount = /path` is required");
  CHECK(error_of("mount = relative\n") == "line 1: mount must be an absolute path");
  CHECK(error_of("mount = /m\nmount = /n\n") == "line 2: `mount` given twice");
  CHECK(error_of("mount = /m\n\nmonut = /n\n") == "line 3: unknown key `monut`");
  CHECK(error_of("mount /m\n") == "line 1: expected `key = value`");
  CHECK(error_of("mount = /m\nall_compounds = sometimes\n") ==
        "line 2: all_compounds must be yes or no, not `sometimes`");
  CHECK(error_of("mount = /m\ntag_prefix =\n") ==
        "line 2: tag_prefix must not be empty (use all_compounds = yes)");
  CHECK(error_of("mount = /m\nlog = b.log\n") == "line 2: log must be an absolute path");
  CHECK(error_of("mount = /m\ncluster = n1.conf\n") == "line 2: cluster must be an absolute path");
  CHECK(error_of("mount = /m\nlock_timeout_ms = 1s\n") ==
        "line 2: lock_timeout_ms must be a number of milliseconds from 0 to 60000, not `1s`");
  CHECK(error_of("mount = /m\nlock_timeout_ms = 60001\n") ==
        "line 2: lock_timeout_ms must be a number of milliseconds from 0 to 60000, not `60001`");
}
