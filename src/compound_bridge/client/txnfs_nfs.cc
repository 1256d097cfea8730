// txnfs-nfs: sends file operations to an NFSv4.1 server in ONE COMPOUND.
//
//   txnfs-nfs [--server H] [--port P] [--export PATH] [--txn | --tag TAG | --lazy
//             [--journal DIR]] [--batch FILE|-] [--json] [--stable] [--retry N]
//             [--read-max N] OP ARGS [';' OP ARGS]...
//   txnfs-nfs [--server H] [--port P] [--export PATH] --journal DIR [--json] sync
//
// The operations are in cli_ops.h; the journal in journal.h. Exit status: 0 every
// operation succeeded; 1 the COMPOUND failed with an NFS error, or an operation did not
// do all of it (report.h: incomplete); 2 usage, connection, protocol or journal error;
// 3 the operations do not fit the session (nothing was sent).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>

#include "compound_bridge/client/cli_ops.h"
#include "compound_bridge/client/content.h"
#include "compound_bridge/client/journal.h"
#include "compound_bridge/client/journal_report.h"
#include "compound_bridge/client/nfs_client.h"
#include "compound_bridge/client/report.h"

namespace txnfs::nfs::cli {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitNfsError = 1;
constexpr int kExitUsage = 2;  // also connection and protocol errors
constexpr int kExitTooBig = 3;

struct Options {
  ClientOptions client;
  bool txn = false;
  std::string tag;
  std::string batch;
  bool json = false;
  bool lazy = false;
  std::string journal;
  size_t journal_max = 1000;
  bool stable = false;
  int retry = 3;
  uint32_t read_max = 64 * 1024;
  std::vector<std::string> ops;
};

// The data of each write, loaded before connecting; element i belongs to ops[i].
std::vector<std::string> load_data(const std::vector<OpSpec> &ops) {
  std::vector<std::string> data(ops.size());
  for (size_t i = 0; i < ops.size(); i++) {
    const DataSource &d = ops[i].data;
    switch (d.kind) {
      case DataSource::Kind::kFile:
        data[i] = read_local_file(d.text);
        break;
      case DataSource::Kind::kLiteral:
        data[i] = d.text;
        break;
      case DataSource::Kind::kPattern:
        data[i] = pattern(ops[i].path, d.size);
        break;
      case DataSource::Kind::kNone:
        break;
    }
  }
  return data;
}

// The operations as the library takes them, each write's data loaded.
std::vector<Operation> operations(const std::vector<OpSpec> &specs, const Options &o) {
  std::vector<std::string> data = load_data(specs);
  std::vector<Operation> ops;
  for (size_t i = 0; i < specs.size(); i++) {
    const OpSpec &spec = specs[i];
    ops.push_back({.kind = spec.kind,
                   .path = spec.path,
                   .path2 = spec.path2,
                   .data = std::move(data[i]),
                   .mode = spec.mode,
                   .stable = o.stable,
                   .count = spec.count.value_or(o.read_max),
                   .attrs = spec.attrs});
  }
  return ops;
}

// Sends C, and again after NFS4ERR_DELAY while that is safe: when nothing before the
// delay changed the file system, or the COMPOUND is a transaction (the server rolled all
// of it back). Backs off 50 ms, doubling, at most 2 s.
CompoundResult execute(Compound &c, const std::string &tag, int retry, RunInfo &info) {
  std::chrono::milliseconds backoff(50);
  for (;;) {
    auto start = std::chrono::steady_clock::now();
    CompoundResult r = c.execute(tag);
    info.elapsed_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (r.status != kNfs4ErrDelay || info.retries >= retry) return r;
    if (!r.delay_retry_safe()) {
      std::cerr << "txnfs-nfs: not retrying NFS4ERR_DELAY: operations before it changed "
                   "files and the COMPOUND is not a transaction\n";
      return r;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
    info.retries++;
  }
}

// Writes each read's data where its --out says; false if one could not be written.
bool write_outputs(const std::vector<OpSpec> &ops, const CompoundResult &r) {
  bool ok = true;
  for (size_t i = 0; i < ops.size(); i++) {
    if (ops[i].out.empty() || r.ops[i].state != OpResult::State::kOk) continue;
    const std::string &data = r.ops[i].data;
    if (ops[i].out == "-") {
      std::cout.write(data.data(), static_cast<std::streamsize>(data.size()));
      continue;
    }
    std::ofstream f(ops[i].out, std::ios::binary | std::ios::trunc);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!f.flush()) {
      std::cerr << "txnfs-nfs: error: cannot write " << ops[i].out << "\n";
      ok = false;
    }
  }
  return ok;
}

std::vector<OpSpec> parse_ops(const Options &o) {
  std::vector<OpSpec> ops;
  if (!o.batch.empty()) {
    if (!o.ops.empty()) throw Error("give operations either on the command line or in --batch");
    if (o.batch == "-") {
      ops = parse_batch(std::cin, "stdin");
    } else {
      std::ifstream in(o.batch);
      if (!in) throw Error("cannot open " + o.batch);
      ops = parse_batch(in, o.batch);
    }
  } else {
    ops = parse_command_line(o.ops);
  }
  if (ops.empty()) throw Error("no operation given (see --help)");
  return ops;
}

void print_sync(std::ostream &out, const Journal::Synced &s, bool json) {
  if (json) {
    out << sync_json(s).dump() << "\n";
  } else {
    out << sync_line(s) << "\n";
  }
}

// `--journal DIR sync`: every journaled COMPOUND durable, the lost ones sent again.
int run_sync(const Options &o) {
  if (o.journal.empty()) throw Error("sync needs --journal DIR");
  Journal journal(o.journal);
  Client client(o.client);
  RunInfo info;
  Journal::Synced s = journal.sync(client, [&](Compound &c, std::string_view tag) {
    return execute(c, std::string(tag), o.retry, info);
  });
  client.close();
  print_sync(std::cout, s, o.json);
  return kExitOk;
}

int run(const Options &o) {
  if (o.ops == std::vector<std::string>{"sync"} && o.batch.empty()) return run_sync(o);
  if (!o.journal.empty() && !o.lazy) {
    throw Error("--journal keeps lazy COMPOUNDs: add --lazy (or give the operation sync)");
  }
  const std::vector<OpSpec> specs = parse_ops(o);
  const std::vector<Operation> ops = operations(specs, o);
  const std::string tag = o.lazy ? std::string(kLazyTag) : o.txn ? "txn" : o.tag;

  std::unique_ptr<Journal> journal;
  if (!o.journal.empty()) journal = std::make_unique<Journal>(o.journal);
  Client client(o.client);
  Compound compound(client);
  for (const Operation &op : ops) compound.add(op);

  Fit fit = journal ? journal->fit(client, ops, tag) : compound.fit(tag);
  if (!fit.fits) {
    if (o.json) std::cout << fit_json(fit, ops.size()).dump() << "\n";
    std::cerr << "txnfs-nfs: " << fit_message(fit, ops.size()) << "\n";
    return kExitTooBig;
  }

  RunInfo info;
  CompoundResult r;
  Journal::Sent sent;
  std::optional<Journal::Synced> synced;
  try {
    if (journal) {
      sent = journal->send(client, ops, tag, [&](Compound &c, std::string_view t) {
        return execute(c, std::string(t), o.retry, info);
      });
      r = sent.result;
      if (r.ok() && journal->kept().size() > o.journal_max) {
        synced = journal->sync(client, [&](Compound &c, std::string_view t) {
          RunInfo ignored;
          return execute(c, std::string(t), o.retry, ignored);
        });
      }
    } else {
      r = execute(compound, tag, o.retry, info);
    }
  } catch (const CallRefused &e) {
    std::string hint = e.garbage_args() ? garbage_args_hint(fit.nfs_ops) : "";
    throw Error(hint.empty() ? e.what() : std::string(e.what()) + "; " + hint);
  }
  client.close();

  bool to_stdout = false;
  for (const OpSpec &op : specs) to_stdout = to_stdout || op.out == "-";
  std::ostream &report = to_stdout ? std::cerr : std::cout;  // stdout then carries data
  if (o.json) {
    nlohmann::ordered_json j = to_json(r, info);
    if (journal) {
      j["journal"] = journal_json(*journal, sent);
      if (synced) j["sync"] = sync_json(*synced);
    }
    report << j.dump() << "\n";
  } else {
    print_text(report, r, info);
    if (journal) report << journal_line(*journal, sent) << "\n";
    if (synced) print_sync(report, *synced, false);
  }
  if (std::string hint = refusal_hint(r); !hint.empty()) std::cerr << "txnfs-nfs: " << hint << "\n";
  bool outputs_ok = write_outputs(specs, r);
  bool complete = true;
  for (size_t i = 0; i < specs.size(); i++) {
    std::string why = incomplete(r.ops[i], !specs[i].count);
    if (!why.empty()) std::cerr << "txnfs-nfs: " << why << "\n";
    complete = complete && why.empty();
  }
  if (!outputs_ok) return kExitUsage;
  return r.ok() && complete ? kExitOk : kExitNfsError;
}

}  // namespace
}  // namespace txnfs::nfs::cli

int main(int argc, char **argv) {
  using namespace txnfs::nfs;
  using namespace txnfs::nfs::cli;
  Options o;
  CLI::App app{
      "Sends file operations to an NFSv4.1 server in ONE COMPOUND.\n\n"
      "Operations (separate them with a ';' argument, or give one per line with --batch):\n"
      "  write PATH (@LOCALFILE | =TEXT | --size N) [--mode MODE]\n"
      "  read PATH [--count N] [--out FILE|-]\n"
      "  mkdir PATH [MODE]   remove PATH   rename FROM TO   link EXISTING NEW\n"
      "  symlink TARGET PATH   getattr PATH   readdir PATH [--count N]   getfh PATH\n"
      "  setattr PATH KEY=VALUE...  (mode=0644 size=N uid=N gid=N atime=now|SEC[.NSEC] mtime=)\n"
      "PATH is below the export, or fh:HEX (a handle from getfh), or fh:HEX/NAME.\n"
      "--size N writes N bytes of the records \"PATH@OFFSET\\n\". N may end in K, M or G.\n"
      "txnfs-nfs --journal DIR sync: makes every COMPOUND kept in DIR durable (sending the "
      "lost ones again) and empties it.\n\n"
      "Exit status: 0 all succeeded; 1 the COMPOUND failed with an NFS error, or a write "
      "came back short, or a read without --count stopped before the end; 2 usage, "
      "connection, protocol or journal error; 3 the operations do not fit the session.",
      "txnfs-nfs"};
  app.prefix_command();  // everything from the first operation on is left to cli_ops
  app.add_option("--server", o.client.server, "NFS server address")->capture_default_str();
  app.add_option("--port", o.client.port, "NFS server port")->capture_default_str();
  app.add_option("--export", o.client.export_path,
                 "the export's path in the server's pseudo file system")
      ->capture_default_str();
  auto *txn = app.add_flag("--txn", o.txn, "tag the COMPOUND \"txn\": run it as a transaction");
  auto *tag =
      app.add_option("--tag", o.tag, "the COMPOUND's tag (\"txn...\" runs it as a transaction)")
          ->excludes(txn);
  app.add_flag("--lazy", o.lazy,
               "tag the COMPOUND \"txn-lazy\": a transaction that commits lazily (durable "
               "within the server's --lazy-flush-ms; a server crash may lose it whole). "
               "Without --journal nothing sends a lost one again")
      ->excludes(txn)
      ->excludes(tag);
  app.add_option("--journal", o.journal,
                 "with --lazy: keep the COMPOUND in the journal DIR until it is durable, "
                 "and send the ones a server restart lost again, whole and in order, "
                 "before the next one (the operation `sync` makes all durable)");
  app.add_option("--journal-max", o.journal_max,
                 "with --journal: sync when more COMPOUNDs than this are kept")
      ->capture_default_str();
  app.add_option("--batch", o.batch, "read the operations from FILE (- for stdin), one a line");
  app.add_flag("--json", o.json, "print one JSON object");
  app.add_flag("--stable", o.stable, "write FILE_SYNC4 instead of UNSTABLE4");
  app.add_option("--retry", o.retry, "resend after NFS4ERR_DELAY up to N times, when safe")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--read-max", o.read_max, "bytes a read or readdir asks for unless --count")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-request", o.client.max_request, "request size to ask the session for")
      ->capture_default_str();
  app.add_option("--max-ops", o.client.max_operations,
                 "operations per COMPOUND to ask the session for")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "txnfs-nfs: error: " << e.what() << "\n";
    return kExitUsage;
  }
  o.ops = app.remaining();
  try {
    return run(o);
  } catch (const Error &e) {
    if (o.json)
      std::cout << nlohmann::ordered_json{{"status", "error"}, {"error", e.what()}}.dump() << "\n";
    std::cerr << "txnfs-nfs: error: " << e.what() << "\n";
    return kExitUsage;
  }
}
