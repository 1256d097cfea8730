// The bridge's configuration: the file named by $TXNFS_BRIDGE_CONF, `key = value` lines,
// `#` starts a comment, blank lines are ignored. Keys:
//
//   mount = /path        the txnfs mount that Ganesha exports (required, absolute)
//   tag_prefix = txn     a COMPOUND whose tag starts with this runs as one transaction
//   all_compounds = no   yes: every COMPOUND runs as one transaction, whatever its tag
//   lazy_tag_prefix = txn-lazy  a COMPOUND whose tag starts with this runs as one
//                        transaction that commits lazily (TXNFS_COMMIT_LAZY): the reply
//                        comes before the transaction is durable. A client opts in by its
//                        tag; every other transactional COMPOUND commits durably. `none`
//                        turns lazy COMPOUNDs off (such tags then commit durably, if
//                        tag_prefix matches them).
//   log = /path          append the bridge's log lines here (default: stderr)
//   verbose = no         yes: also log every transactional COMPOUND's outcome
//   lock_timeout_ms = 250  how long one lock wait of a transactional COMPOUND may last
//                        before it is rolled back and answered NFS4ERR_DELAY (0..60000).
//                        Short on purpose: a wait can pass through locks txnfs cannot
//                        see (Ganesha's object locks, the kernel's inode locks), and
//                        only a timeout ends such a cycle; the client retries.
//   lock_set_timeout_ms = 20000  how long a transactional COMPOUND may wait, before its
//                        first operation, for the locks it predeclares (lock_plan.h):
//                        holding no lock of Ganesha or the kernel, and none of txnfs,
//                        so a long wait deadlocks nothing; then NFS4ERR_DELAY with no
//                        operation run (0..60000; 0: predeclare nothing).
//   cluster = /path      the node's cluster configuration (docs/cluster.md): turns on the
//                        two-phase-commit tags PREFIX-prepare:GID, PREFIX-commit:GID and
//                        PREFIX-abort:GID (bridge.cc); without it they are refused.
//
// Unknown keys, repeated keys and malformed values are errors: a typo must not silently
// turn transactions off.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace txnfs::bridge {

struct Config {
  std::string mount;
  std::string tag_prefix = "txn";
  bool all_compounds = false;
  std::string lazy_tag_prefix = "txn-lazy";  // empty: none
  std::string log;                           // empty: stderr
  bool verbose = false;
  uint32_t lock_timeout_ms = 250;
  uint32_t lock_set_timeout_ms = 20000;
  std::string cluster;  // empty: no two-phase commit

  // Whether a COMPOUND with this tag runs as a transaction.
  bool transactional(std::string_view tag) const {
    return all_compounds || tag.starts_with(tag_prefix) || lazy(tag);
  }
  // Whether such a COMPOUND commits lazily.
  bool lazy(std::string_view tag) const {
    return !lazy_tag_prefix.empty() && tag.starts_with(lazy_tag_prefix);
  }
};

// Parses the text of a configuration file. On error returns nullopt and sets *error to
// "line N: what is wrong".
std::optional<Config> parse_config(std::string_view text, std::string *error);

// Reads and parses the file at PATH; errors name the file.
std::optional<Config> load_config(const std::string &path, std::string *error);

}  // namespace txnfs::bridge
