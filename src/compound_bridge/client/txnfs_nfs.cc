// txnfs-nfs: sends file operations to an NFSv4.1 server in ONE COMPOUND.
//
//   txnfs-nfs [--server H] [--port P] [--export PATH] [--txn | --tag TAG | --lazy
//             [--journal DIR]] [--batch FILE|-] [--json] [--stable] [--retry N]
//             [--read-max N] OP ARGS [';' OP ARGS]...
//   txnfs-nfs [--server H] [--port P] [--export PATH] --journal DIR [--json] sync
//   txnfs-nfs --cluster FILE [--txn] [--port P] [--json] ... OP ARGS [';' OP ARGS]...
//
// The operations are in cli_ops.h; the journal in journal.h; where each operation goes
// (referrals, the cluster map) in route.h; --cluster in cluster_run.h. Exit status: 0
// every operation succeeded (--cluster --txn over several nodes: committed); 1 the
// COMPOUND failed with an NFS error, or an operation did not do all of it (report.h:
// incomplete), or the cross-node transaction aborted; 2 usage, connection, protocol,
// journal or etcd error; 3 the operations do not fit the session (nothing was sent).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "compound_bridge/client/cli_ops.h"
#include "compound_bridge/client/cluster_run.h"
#include "compound_bridge/client/content.h"
#include "compound_bridge/client/journal.h"
#include "compound_bridge/client/journal_report.h"
#include "compound_bridge/client/nfs_client.h"
#include "compound_bridge/client/report.h"
#include "compound_bridge/client/route.h"

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
  std::string cluster;        // --cluster FILE
  bool no_referrals = false;  // --no-referrals
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

// Prints the report -- J with --json, else TEXT -- and the hints, writes the reads'
// --out files, and returns the exit status: 0 when R succeeded and every operation did
// all of it, 1 otherwise (2 when an --out file could not be written).
int finish(const Options &o, const std::vector<OpSpec> &specs, const CompoundResult &r,
           const nlohmann::ordered_json &j, const std::string &text) {
  bool to_stdout = false;
  for (const OpSpec &op : specs) to_stdout = to_stdout || op.out == "-";
  std::ostream &report = to_stdout ? std::cerr : std::cout;  // stdout then carries data
  if (o.json) {
    report << j.dump() << "\n";
  } else {
    report << text;
  }
  report.flush();
  if (std::string hint = refusal_hint(r); !hint.empty()) std::cerr << "txnfs-nfs: " << hint << "\n";
  bool outputs_ok = write_outputs(specs, r);
  bool complete = true;
  for (size_t i = 0; i < specs.size() && i < r.ops.size(); i++) {
    std::string why = incomplete(r.ops[i], !specs[i].count);
    if (!why.empty()) std::cerr << "txnfs-nfs: " << why << "\n";
    complete = complete && why.empty();
  }
  if (!outputs_ok) return kExitUsage;
  return r.ok() && complete ? kExitOk : kExitNfsError;
}

int too_big(const Options &o, const Fit &fit, size_t ops, const std::string &where = "") {
  if (o.json) std::cout << fit_json(fit, ops).dump() << "\n";
  std::cerr << "txnfs-nfs: " << where << fit_message(fit, ops) << "\n";
  return kExitTooBig;
}

CompoundResult send(Compound &c, const std::string &tag, const Options &o, const Fit &fit,
                    RunInfo &info) {
  try {
    return execute(c, tag, o.retry, info);
  } catch (const CallRefused &e) {
    std::string hint = e.garbage_args() ? garbage_args_hint(fit.nfs_ops) : "";
    throw Error(hint.empty() ? e.what() : std::string(e.what()) + "; " + hint);
  }
}

// --lazy --journal: the journal decides what is sent (no referrals are followed).
int run_journal(const Options &o, const std::vector<OpSpec> &specs,
                const std::vector<Operation> &ops, const std::string &tag) {
  Journal journal(o.journal);
  Client client(o.client);
  Fit fit = journal.fit(client, ops, tag);
  if (!fit.fits) return too_big(o, fit, ops.size());
  RunInfo info;
  std::optional<Journal::Synced> synced;
  Journal::Sent sent;
  try {
    sent = journal.send(client, ops, tag, [&](Compound &c, std::string_view t) {
      return execute(c, std::string(t), o.retry, info);
    });
    if (sent.result.ok() && journal.kept().size() > o.journal_max) {
      synced = journal.sync(client, [&](Compound &c, std::string_view t) {
        RunInfo ignored;
        return execute(c, std::string(t), o.retry, ignored);
      });
    }
  } catch (const CallRefused &e) {
    std::string hint = e.garbage_args() ? garbage_args_hint(fit.nfs_ops) : "";
    throw Error(hint.empty() ? e.what() : std::string(e.what()) + "; " + hint);
  }
  client.close();
  const CompoundResult &r = sent.result;
  nlohmann::ordered_json j;
  std::ostringstream text;
  if (o.json) {
    j = to_json(r, info);
    j["journal"] = journal_json(journal, sent);
    if (synced) j["sync"] = sync_json(*synced);
  } else {
    print_text(text, r, info);
    text << journal_line(journal, sent) << "\n";
    if (synced) print_sync(text, *synced, false);
  }
  return finish(o, specs, r, j, text.str());
}

// How many times the COMPOUND is sent again after its referral checks stopped it: on a
// referral, and on a directory that does not exist (yet).
constexpr int kMaxReferralRounds = 16;
constexpr int kMaxSkipRounds = 8;

std::string referral_text(const Referrals::Hop &h) {
  return "referral " + h.dir + " on " + h.server + " -> " + h.to_server + ":" + h.to_path;
}

// Without --cluster: every operation in one COMPOUND to the server that holds its
// paths, following referrals. Nothing runs before every path has been placed: the
// COMPOUND first checks the directories its operations walk through
// (Compound::check_referrals); a referral stops it there, its fs_locations are read, and
// the operations are sent again with their paths rewritten. All on one server: sent
// there. Spread over servers: an error (a COMPOUND cannot span servers; --cluster can).
int run_routed(const Options &o, const std::vector<OpSpec> &specs,
               const std::vector<Operation> &ops, const std::string &tag) {
  Referrals refs;
  std::map<std::string, std::unique_ptr<Client>> clients;
  std::map<std::string, std::set<std::string>> skip;  // per server: walks stop above these
  auto client_for = [&](const std::string &server) -> Client & {
    auto &c = clients[server];
    if (!c) {
      ClientOptions co = o.client;
      co.server = server;
      c = std::make_unique<Client>(co);
    }
    return *c;
  };
  auto learn = [&](const std::string &server, const std::string &dir) {
    std::vector<FsLocation> locations = client_for(server).fs_locations(dir);
    if (locations.empty() || locations[0].servers.empty()) {
      throw Error(dir + " on " + server + " answered NFS4ERR_MOVED (a referral) but has no " +
                  "fs_locations");
    }
    refs.add({server, dir, locations[0].servers[0],
              below_export(locations[0].rootpath, o.client.export_path)});
  };

  RunInfo info;
  CompoundResult r;
  std::string server = o.client.server;
  bool checks = !o.no_referrals;
  int skips = 0;
  for (int round = 0;; round++) {
    if (round > kMaxReferralRounds + kMaxSkipRounds) {
      throw Error("gave up following referrals after " + std::to_string(round) + " rounds");
    }
    // Where each operation goes, through the referrals learnt so far.
    std::vector<Operation> routed;
    std::vector<std::pair<std::string, size_t>> servers;  // distinct: server, first op
    for (size_t i = 0; i < ops.size(); i++) {
      std::vector<std::string> paths = server_paths(ops[i]);
      std::string at;
      for (std::string &path : paths) {
        Referrals::Place place = refs.resolve(o.client.server, path);
        if (!at.empty() && place.server != at) {
          throw Error(fmt::format(
              "{} {} {}: its two paths are on different servers ({} and {}, through a "
              "referral): a rename or link cannot span servers (EXDEV); nothing was sent",
              op_name(ops[i].kind), ops[i].path, ops[i].path2, at, place.server));
        }
        at = place.server;
        path = place.path;
      }
      routed.push_back(with_paths(ops[i], paths));
      if (std::none_of(servers.begin(), servers.end(), [&](auto &s) { return s.first == at; })) {
        servers.emplace_back(at, i);
      }
    }
    if (servers.size() > 1 && checks) {
      // Before giving up: a referral not learnt yet may bring them together again (a
      // chain). Each server checks the directories of its part, running nothing else.
      bool learnt = false;
      for (const auto &[at, first] : servers) {
        std::vector<Operation> part;
        for (size_t i = 0; i < ops.size(); i++) {
          if (refs.resolve(o.client.server, server_paths(ops[i])[0]).server == at) {
            part.push_back(routed[i]);
          }
        }
        Compound probe(client_for(at));
        for (const std::string &dir : referral_checks(part, skip[at])) probe.check_referrals(dir);
        if (probe.nfs_ops() <= 1) continue;
        RunInfo ignored;
        CompoundResult p = execute(probe, "", o.retry, ignored);
        if (p.check_dir.empty()) continue;
        if (p.status == kNfs4ErrMoved) {
          learn(at, p.check_dir);
        } else if (++skips < kMaxSkipRounds) {
          skip[at].insert(p.check_dir);
        } else {
          checks = false;
        }
        learnt = true;
        break;
      }
      if (learnt) continue;
    }
    if (servers.size() > 1) {
      auto op_text = [&](size_t i) {
        return std::string(op_name(ops[i].kind)) + " " + ops[i].path;
      };
      std::string referrals;
      for (const Referrals::Hop &h : refs.hops()) referrals += "; " + referral_text(h);
      throw Error(fmt::format(
          "the batch spans servers {} ({}) and {} ({}){}: one COMPOUND cannot span servers, "
          "nothing was sent; for one transaction across the nodes of a txnfs cluster use "
          "--cluster FILE --txn",
          servers[0].first, op_text(servers[0].second), servers[1].first,
          op_text(servers[1].second), referrals));
    }
    if (!servers.empty()) server = servers[0].first;

    Client &client = client_for(server);
    Compound compound(client);
    if (checks) {
      for (const std::string &dir : referral_checks(routed, skip[server])) {
        compound.check_referrals(dir);
      }
    }
    for (const Operation &op : routed) compound.add(op);
    Fit fit = compound.fit(tag);
    if (!fit.fits) return too_big(o, fit, ops.size());
    info = RunInfo{};
    r = send(compound, tag, o, fit, info);

    if (!r.check_dir.empty()) {  // stopped before any operation ran
      if (r.status == kNfs4ErrMoved) {
        learn(server, r.check_dir);
      } else if (++skips < kMaxSkipRounds) {
        skip[server].insert(r.check_dir);  // not there (yet): nothing to check below it
      } else {
        checks = false;
      }
      continue;
    }
    if (r.status == kNfs4ErrMoved && checks) {
      // An operation's own GETATTR or GETFH met a referral: the object it names (no
      // walk checks it). Sent again where it lives, if that cannot apply anything twice.
      auto failed = std::find_if(r.ops.begin(), r.ops.end(), [](const OpResult &op) {
        return op.state == OpResult::State::kFailed;
      });
      if (failed != r.ops.end() &&
          (failed->kind == OpKind::kGetattr || failed->kind == OpKind::kGetfh) &&
          (!r.changed_before_failure || tag.starts_with("txn"))) {
        learn(server, routed[static_cast<size_t>(failed - r.ops.begin())].path);
        continue;
      }
    }
    break;
  }
  for (auto &[name, c] : clients) c->close();

  for (size_t i = 0; i < r.ops.size() && i < ops.size(); i++) {  // the paths as given
    r.ops[i].path = ops[i].path;
    r.ops[i].path2 = ops[i].path2;
  }
  const bool moved = !refs.hops().empty();
  nlohmann::ordered_json j;
  std::ostringstream text;
  if (o.json) {
    j = to_json(r, info);
    if (moved) {
      j["server"] = server;
      nlohmann::ordered_json hops = nlohmann::ordered_json::array();
      for (const Referrals::Hop &h : refs.hops()) {
        hops.push_back({{"server", h.server}, {"dir", h.dir}, {"to_server", h.to_server},
                        {"to_path", h.to_path}});
      }
      j["referrals"] = std::move(hops);
    }
  } else {
    print_ops(text, r);
    for (const Referrals::Hop &h : refs.hops()) text << referral_text(h) << "\n";
    text << compound_line(r, info, moved ? "server=" + server : "") << "\n";
  }
  return finish(o, specs, r, j, text.str());
}

// --cluster FILE (cluster_run.h).
int run_cluster_batch(const Options &o, const std::vector<OpSpec> &specs,
                      const std::vector<Operation> &ops, const std::string &tag) {
  if (!o.journal.empty()) throw Error("--cluster takes no --journal");
  ClusterOptions co{.client = o.client,
                    .conf = o.cluster,
                    .txn = o.txn,
                    .tag = tag,
                    .execute = [&o](Compound &c, const std::string &t, RunInfo &info) {
                      return execute(c, t, o.retry, info);
                    }};
  ClusterResult r = run_cluster(co, ops);
  if (r.too_big) return too_big(o, *r.too_big, r.too_big_ops, "node " + r.too_big_node + ": ");
  nlohmann::ordered_json j;
  std::ostringstream text;
  if (o.json) {
    j = cluster_json(r);
  } else {
    print_cluster(text, r);
  }
  for (const std::string &note : r.notes) std::cerr << "txnfs-nfs: " << note << "\n";
  int code = finish(o, specs, r.merged, j, text.str());
  // finish() says 1 for an operation that did not do all of it (a short write); the
  // cluster's own status wins unless it is 0.
  return r.exit != kExitOk ? r.exit : code;
}

int run(const Options &o) {
  if (o.ops == std::vector<std::string>{"sync"} && o.batch.empty()) return run_sync(o);
  if (!o.journal.empty() && !o.lazy) {
    throw Error("--journal keeps lazy COMPOUNDs: add --lazy (or give the operation sync)");
  }
  const std::vector<OpSpec> specs = parse_ops(o);
  const std::vector<Operation> ops = operations(specs, o);
  const std::string tag = o.lazy ? std::string(kLazyTag) : o.txn ? "txn" : o.tag;
  if (!o.cluster.empty()) return run_cluster_batch(o, specs, ops, tag);
  if (!o.journal.empty()) return run_journal(o, specs, ops, tag);
  return run_routed(o, specs, ops, tag);
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
      "Paths below a referral (NFS4ERR_MOVED) are sent to the server its fs_locations name "
      "(same --port); a batch must then lie on one server (or use --cluster).\n\n"
      "Exit status: 0 all succeeded (--cluster --txn: committed); 1 the COMPOUND failed with "
      "an NFS error, or a write came back short, or a read without --count stopped before "
      "the end, or a cross-node transaction aborted; 2 usage, connection, protocol, journal "
      "or etcd error (--cluster: the report says whether the outcome is known); 3 the "
      "operations do not fit the session.",
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
  app.add_option("--cluster", o.cluster,
                 "a txnfs cluster's configuration FILE (cluster, etcd): each operation goes to "
                 "the node the cluster map in etcd gives its path's top-level directory; with "
                 "--txn, operations on several nodes are one transaction (two-phase commit, "
                 "the decision in etcd)");
  app.add_flag("--no-referrals", o.no_referrals,
               "do not check for referrals (NFS4ERR_MOVED) nor follow them");
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
