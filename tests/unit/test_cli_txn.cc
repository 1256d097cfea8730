// The testable parts of the transaction subcommands (src/txnfuse/cli/): argument handling
// (cli_txn), exit-status mapping (spawn), error messages (messages) and the status table
// (status_table).
#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <initializer_list>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "txnfuse/cli/cli_txn.h"
#include "txnfuse/cli/exit_status.h"
#include "txnfuse/cli/messages.h"
#include "txnfuse/cli/spawn.h"
#include "txnfuse/cli/status_table.h"

using namespace txnfs::cli;

namespace {

// Parses "txnfs ARGS..." with the transaction subcommands (plus a dummy one, like main.cc's).
struct Parsed {
  CLI::App app{"txnfs"};
  TxnCommands txn{app};
  int parse_error = -1;  // CLI11 exit code if parsing failed, else -1

  explicit Parsed(std::initializer_list<const char *> args) {
    app.require_subcommand(1);
    app.add_subcommand("init", "dummy");
    std::vector<const char *> argv{"txnfs"};
    argv.insert(argv.end(), args);
    try {
      std::vector<const char *> args =
          txn.split_run_command(static_cast<int>(argv.size()), argv.data());
      app.parse(static_cast<int>(args.size()), args.data());
    } catch (const CLI::ParseError &e) {
      parse_error = e.get_exit_code();
    }
  }
  bool ok() const { return parse_error == -1; }
  const TxnOptions &o() const { return txn.options(); }
};

int exited(int code) { return (code & 0xff) << 8; }  // a wait status, as W* macros read it
int signaled(int sig) { return sig & 0x7f; }

using V = std::vector<std::string>;

}  // namespace

TEST_CASE("run: the command is everything after MOUNT and an optional --") {
  {
    Parsed p{"run", "/mnt", "--", "sh", "-c", "exit 3"};
    REQUIRE(p.ok());
    CHECK(p.txn.selected());
    CHECK(p.o().mount == "/mnt");
    CHECK_FALSE(p.o().abort);
    CHECK(p.o().command == V{"sh", "-c", "exit 3"});
  }
  {
    Parsed p{"run", "/mnt", "ls", "-l", "--abort"};  // options after the command are its own
    REQUIRE(p.ok());
    CHECK_FALSE(p.o().abort);
    CHECK(p.o().command == V{"ls", "-l", "--abort"});
  }
  {
    Parsed p{"run", "--abort", "/mnt", "--", "cp", "a", "b"};
    REQUIRE(p.ok());
    CHECK(p.o().abort);
    CHECK(p.o().command == V{"cp", "a", "b"});
  }
  {
    Parsed p{"run", "/mnt", "--abort", "--", "true"};
    REQUIRE(p.ok());
    CHECK(p.o().abort);
    CHECK(p.o().command == V{"true"});
  }
  {
    Parsed p{"run", "/mnt", "--", "status", "--", "x"};  // a subcommand name, a later --
    REQUIRE(p.ok());
    CHECK(p.o().command == V{"status", "--", "x"});
  }
  {
    Parsed p{"run", "/mnt", "status", "--abort"};
    REQUIRE(p.ok());
    CHECK_FALSE(p.o().abort);
    CHECK(p.o().command == V{"status", "--abort"});
  }
  {
    Parsed p{"run", "--", "/mnt", "-weird", "--", "arg"};  // MOUNT right after --
    REQUIRE(p.ok());
    CHECK(p.o().mount == "/mnt");
    CHECK(p.o().command == V{"-weird", "--", "arg"});
  }
  {
    Parsed p{"run", "/mnt", "grep", "--help"};  // the command's --help, not ours
    REQUIRE(p.ok());
    CHECK(p.o().command == V{"grep", "--help"});
  }
  {
    Parsed p{"status", "/mnt", "--", "x"};  // only run is split
    CHECK_FALSE(p.ok());
    CHECK(p.o().command.empty());
  }
}

TEST_CASE("run: usage errors exit 125, the other subcommands' exit 2") {
  {
    Parsed p{"run"};  // no MOUNT
    CHECK_FALSE(p.ok());
    CHECK(p.txn.usage_exit_status() == kRunTxnFailed);
  }
  {
    Parsed p{"run", "--bogus", "/mnt", "true"};  // an unknown option of run
    CHECK_FALSE(p.ok());
    CHECK(p.txn.usage_exit_status() == kRunTxnFailed);
  }
  {
    Parsed p{"run", "/mnt"};  // parses; cmd_run then refuses the empty command
    REQUIRE(p.ok());
    CHECK(p.o().command.empty());
  }
  {
    Parsed p{"commit", "/mnt"};  // no ID
    CHECK_FALSE(p.ok());
    CHECK(p.txn.usage_exit_status() == kUsage);
  }
}

TEST_CASE("begin, commit, abort, status: arguments") {
  {
    Parsed p{"begin", "/mnt"};
    REQUIRE(p.ok());
    CHECK(p.o().mount == "/mnt");
    CHECK(p.o().pid == 0);  // the parent of txnfs
  }
  {
    Parsed p{"begin", "/mnt", "--pid", "4242"};
    REQUIRE(p.ok());
    CHECK(p.o().pid == 4242);
  }
  CHECK_FALSE(Parsed{"begin", "/mnt", "--pid", "0"}.ok());
  CHECK_FALSE(Parsed{"begin", "/mnt", "--pid", "-3"}.ok());
  CHECK_FALSE(Parsed{"begin", "/mnt", "--pid", "abc"}.ok());
  CHECK_FALSE(Parsed{"begin"}.ok());
  {
    Parsed p{"commit", "/mnt", "42"};
    REQUIRE(p.ok());
    CHECK(p.o().id == "42");
  }
  {
    Parsed p{"abort", "/mnt/sub/dir", "7"};
    REQUIRE(p.ok());
    CHECK(p.o().mount == "/mnt/sub/dir");
    CHECK(p.o().id == "7");
  }
  CHECK_FALSE(Parsed{"abort", "/mnt", "7", "8"}.ok());
  {
    Parsed p{"status", "/mnt", "--json"};
    REQUIRE(p.ok());
    CHECK(p.o().json);
  }
  {
    Parsed p{"init"};  // another subcommand: not ours
    REQUIRE(p.ok());
    CHECK_FALSE(p.txn.selected());
  }
}

TEST_CASE("parse errors carry the txnfs: error: prefix") {
  CLI::App app{"txnfs"};
  CLI::RequiredError e("MOUNT");
  std::string msg = failure_message(&app, e);
  CHECK(msg.rfind("txnfs: error: MOUNT is required\n", 0) == 0);
}

TEST_CASE("transaction ids") {
  CHECK(parse_txn_id("1") == 1u);
  CHECK(parse_txn_id("42") == 42u);
  CHECK(parse_txn_id("18446744073709551615") == 18446744073709551615ull);
  CHECK_FALSE(parse_txn_id("18446744073709551616"));  // overflow
  CHECK_FALSE(parse_txn_id("0"));
  CHECK_FALSE(parse_txn_id(""));
  CHECK_FALSE(parse_txn_id("-1"));
  CHECK_FALSE(parse_txn_id("+1"));
  CHECK_FALSE(parse_txn_id("12abc"));
  CHECK_FALSE(parse_txn_id(" 12"));
  CHECK_FALSE(parse_txn_id("0x10"));
}

TEST_CASE("exit status of run from the command's wait status") {
  CHECK(exit_status_of(exited(0)) == 0);
  CHECK(exit_status_of(exited(3)) == 3);
  CHECK(exit_status_of(exited(255)) == 255);
  CHECK(exit_status_of(signaled(SIGKILL)) == 137);
  CHECK(exit_status_of(signaled(SIGINT)) == 130);
  CHECK(exit_status_of(signaled(SIGTERM)) == 143);
  CHECK(describe_wait_status(exited(3)) == "exited with status 3");
  CHECK(describe_wait_status(signaled(SIGKILL)) == "killed by SIGKILL");
  CHECK(describe_wait_status(signaled(SIGSEGV) | 0x80) == "killed by SIGSEGV, core dumped");
}

TEST_CASE("the outcome line of run") {
  CHECK(run_summary_committed(42, 17) == "transaction 42 committed (17 operations)");
  CHECK(run_summary_committed(42, 1) == "transaction 42 committed (1 operation)");
  CHECK(run_summary_committed(42, std::nullopt) == "transaction 42 committed");
  CHECK(run_summary_aborted(42, "command " + describe_wait_status(exited(3))) ==
        "transaction 42 aborted (command exited with status 3)");
  CHECK(run_summary_aborted(7, "--abort") == "transaction 7 aborted (--abort)");
}

TEST_CASE("error messages") {
  const std::string m = "/mnt";
  CHECK(txn_error_message(Action::Commit, ENOTTY, m, 1) ==
        "/mnt is not on a txnfs mount (or its daemon does not support transactions)");
  CHECK(txn_error_message(Action::Commit, ENOENT, m, 9) == "no open transaction 9 on /mnt");
  CHECK(txn_error_message(Action::Abort, ENOENT, m, 9) == "no open transaction 9 on /mnt");
  CHECK(txn_error_message(Action::Abort, EPERM, m, 9) ==
        "transaction 9 is not yours (only its owner or root may abort it)");
  CHECK(txn_error_message(Action::Commit, EDEADLK, m, 9) ==
        "transaction 9 can only abort (it lost a deadlock or a lock wait): commit refused");
  CHECK(txn_error_message(Action::Commit, ETIMEDOUT, m, 9) ==
        "transaction 9 can only abort (a lock wait timed out): commit refused");
  CHECK(txn_error_message(Action::Commit, ENOSPC, m, 9) ==
        "cannot commit transaction 9 on /mnt: No space left on device");
  CHECK(txn_error_message(Action::Commit, EIO, m, 9) ==
        "commit of transaction 9 failed; the transaction was rolled back");
  CHECK(txn_error_message(Action::Begin, EBUSY, m, 0, 0) ==
        "this process is already in a transaction on /mnt (transactions do not nest)");
  CHECK(txn_error_message(Action::Begin, EBUSY, m, 0, 77) ==
        "process 77 is already in a transaction on /mnt (transactions do not nest)");
  CHECK(txn_error_message(Action::Begin, ESRCH, m, 0, 77) == "no process 77");
  CHECK(txn_error_message(Action::Begin, EACCES, m) ==
        "cannot begin a transaction on /mnt: Permission denied");
  CHECK(txn_error_message(Action::Abort, EIO, m, 5) ==
        "cannot abort transaction 5 on /mnt: Input/output error");
  CHECK(txn_error_message(Action::Status, ENOMEM, m) ==
        "cannot get the status of /mnt: Cannot allocate memory");
  CHECK(txn_error_message(Action::Status, ENOTCONN, m) ==
        "/mnt: Transport endpoint is not connected (its txnfs daemon is gone)");
  CHECK(txn_error_message(Action::Commit, ECONNABORTED, m, 5) ==
        "/mnt: Software caused connection abort (its txnfs daemon is gone)");
}

TEST_CASE("ages and sizes") {
  CHECK(format_age(0) == "0ms");
  CHECK(format_age(999) == "999ms");
  CHECK(format_age(1000) == "1.0s");
  CHECK(format_age(1549) == "1.5s");
  CHECK(format_age(59'999) == "59.9s");
  CHECK(format_age(60'000) == "1m00s");
  CHECK(format_age(184'000) == "3m04s");
  CHECK(format_age(7'500'000) == "2h05m");
  CHECK(format_age(3 * 86'400'000ull + 4 * 3'600'000ull) == "3d04h");
  CHECK(format_bytes(0) == "0");
  CHECK(format_bytes(512) == "512B");
  CHECK(format_bytes(1023) == "1023B");
  CHECK(format_bytes(4096) == "4.0K");
  CHECK(format_bytes(1536 * 1024) == "1.5M");
  CHECK(format_bytes(2ull << 30) == "2.0G");
  CHECK(format_bytes(~0ull) == "16.0E");
  CHECK(state_name(TXNFS_ACTIVE) == "active");
  CHECK(state_name(TXNFS_ABORT_ONLY) == "abort-only");
  CHECK(state_name(99) == "state-99");
}

TEST_CASE("status table from the daemon's JSON") {
  const char *json = R"({"transactions":[
      {"id":1,"state":"active","uid":0,"pid":123,"flags":1,"age_ms":5,"ops":3,
       "backup_bytes":4096,"locks_held":2,"locks_waiting":0,"error":0},
      {"id":1234,"state":"abort-only","uid":1000,"pid":98765,"flags":0,"age_ms":184000,
       "ops":17,"backup_bytes":0,"locks_held":11,"locks_waiting":1,"error":35}],
    "counters":{"commits":5,"aborts":2,"deadlocks":1,"timeouts":0,"recoveries":0}})";
  std::string want =  // numbers (and AGE, BACKUP) right-aligned
      "  ID  STATE        UID    PID  BOUND      AGE  OPS  BACKUP  LOCKS  WAITING  ERROR\n"
      "   1  active         0    123  process    5ms    3    4.0K      2        0  -\n"
      "1234  abort-only  1000  98765  thread   3m04s   17       0     11        1  EDEADLK\n"
      "counters: commits 5, aborts 2, deadlocks 1, timeouts 0, recoveries 0\n";
  CHECK(format_status(json) == want);
}

TEST_CASE("status table: no transactions, missing and extra fields, numeric state") {
  CHECK(format_status(R"({"transactions":[],"counters":{"commits":0,"aborts":0,"deadlocks":0,
                          "timeouts":0,"recoveries":0}})") ==
        "no open transactions\n"
        "counters: commits 0, aborts 0, deadlocks 0, timeouts 0, recoveries 0\n");
  CHECK(format_status(R"({"counters":{"recoveries":1,"commits":2,"zebras":7}})") ==
        "no open transactions\ncounters: commits 2, recoveries 1, zebras 7\n");
  CHECK(format_status(R"({"transactions":[{"id":3,"state":2,"extra":"x"}]})") ==
        "ID  STATE       UID  PID  BOUND  AGE  OPS  BACKUP  LOCKS  WAITING  ERROR\n"
        " 3  abort-only    -    -  -        -    -       -      -        -  -\n");
}

TEST_CASE("status table: bad JSON is an error, not a crash") {
  CHECK_THROWS_WITH(format_status(""), Catch::Contains("not valid JSON"));
  CHECK_THROWS_WITH(format_status(R"({"transactions":[{"id":1})"),
                    Catch::Contains("not valid JSON"));
  CHECK_THROWS_WITH(format_status("[1,2]"), Catch::Contains("not a JSON object"));
  CHECK_THROWS_WITH(format_status(R"({"transactions":{}})"), Catch::Contains("not an array"));
  CHECK_THROWS_WITH(format_status(R"({"transactions":[5]})"), Catch::Contains("not a JSON object"));
  CHECK_THROWS_WITH(format_status(R"({"counters":[]})"), Catch::Contains("not an object"));
}
