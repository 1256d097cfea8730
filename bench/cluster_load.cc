// txnfs-clusterload — the two loops of bench/cluster that a process per iteration would
// distort; one JSON line out. bench/cluster (the driver) runs it; by hand:
//
//   txnfs-clusterload txn --target 127.X.Y.1:/a/t1 [--target 127.X.Y.2:/b/t1 ...]
//                         [--clients 4] [--seconds 10] [--size 1024] [--new-files]
//       CLIENTS threads, each with its own Client (session) to target i % targets, each in
//       its own directory DIR/c<i> (created untimed first): for SECONDS, one transaction
//       after the other, a COMPOUND tagged "txn" that writes SIZE bytes to the client's own
//       file DIR/c<i>/f (open, truncate, write, close; the file is made untimed first) --
//       with --new-files to a new file each time -- NFS4ERR_DELAY retried. Out: {"txns","retries","seconds",
//       "txn_per_s","per_client":[...],"lat_ms":{"median","p90","p99"}} (transactions
//       completed within the window; a transaction's latency includes its retries).
//
//   txnfs-clusterload etcd-cas --endpoint http://127.X.Y.11:2379 --key-prefix /txnfs/C/x/
//                              [--reps 200]
//       etcd's compare-and-swap as txnfs-nfs writes a decision (src/cluster/etcd.cc,
//       Etcd::put_if_absent): POST /v3/kv/txn, compare create_revision(key) == 0, put
//       key = "commit" if so, else range key; the same JSON body and libcurl options. Each
//       rep a new key. Two ways, alternating per rep (the order reversed every other rep):
//         fresh   a new CURL handle per call (a new TCP connection), as txnfs-nfs does;
//         reuse   one handle kept (its connection reused): the gateway's round trip alone.
//       Out: {"fresh":[ms...],"reuse":[ms...]}. The keys are deleted afterwards.
//
// (bench/ may include only bench/lib and the txnfs-nfs client, not src/cluster: the
// etcd request is rebuilt here with libcurl and nlohmann::json, byte for byte.)
#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/lib/clock.h"
#include "bench/lib/interrupt.h"
#include "compound_bridge/client/nfs_client.h"

namespace {

namespace nfs = txnfs::nfs;
using nlohmann::json;

[[noreturn]] void fail(const std::string &msg) {
  fmt::print(stderr, "txnfs-clusterload: {}\n", msg);
  std::exit(1);
}

// The value at quantile Q of V (linear between the two nearest ranks); 0 for none.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double pos = q * double(v.size() - 1);
  size_t lo = size_t(pos);
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

// -- txn ------------------------------------------------------------------------------

struct Target {
  std::string host, dir;
};

struct TxnOptions {
  std::vector<std::string> targets;
  uint16_t port = 2049;
  uint32_t clients = 4;
  double seconds = 10;
  uint64_t size = 1024;
  uint32_t max_retries = 1000;
  bool new_files = false;
};

struct ClientTally {
  uint64_t txns = 0, retries = 0;
  std::vector<double> lat_ms;
  std::string error;
};

Target parse_target(const std::string &t) {
  size_t colon = t.find(':');
  if (colon == std::string::npos || colon == 0 || t.size() <= colon + 1 || t[colon + 1] != '/')
    fail("--target " + t + ": give HOST:/DIR");
  return {t.substr(0, colon), t.substr(colon + 1)};
}

void mkdir_if_missing(nfs::Client &cl, const std::string &dir) {
  nfs::Compound c(cl);
  c.mkdir(dir, 0755);
  nfs::CompoundResult r = c.execute("setup");
  if (!r.ok() && r.status != 17 /* NFS4ERR_EXIST */)
    throw nfs::Error(fmt::format("mkdir {}: {}", dir, nfs::status_name(r.status)));
}

int run_txn(const TxnOptions &o) {
  std::vector<Target> targets;
  for (const std::string &t : o.targets) targets.push_back(parse_target(t));
  if (targets.empty()) fail("txn: give at least one --target");

  // Start gate: every client connected and its directory made before the clock starts.
  std::mutex m;
  std::condition_variable cv;
  uint32_t ready = 0;
  bool go = false;
  double start = 0, deadline = 0;
  std::vector<ClientTally> tallies(o.clients);
  const std::string data(o.size, 'x');

  auto client = [&](uint32_t i) {
    ClientTally &t = tallies[i];
    std::unique_ptr<nfs::Client> cl;
    std::string dir;
    try {
      const Target &tg = targets[i % targets.size()];
      nfs::ClientOptions co;
      co.server = tg.host;
      co.port = o.port;
      cl = std::make_unique<nfs::Client>(co);
      mkdir_if_missing(*cl, tg.dir);
      dir = fmt::format("{}/c{:02}", tg.dir, i);
      mkdir_if_missing(*cl, dir);
      if (!o.new_files) {
        nfs::Compound c(*cl);
        c.write(dir + "/f", data);
        nfs::CompoundResult r = c.execute("setup");
        if (!r.ok())
          throw nfs::Error(fmt::format("write {}/f: {}", dir, nfs::status_name(r.status)));
      }
    } catch (const std::exception &e) {
      t.error = e.what();
    }
    {
      std::unique_lock lk(m);
      ready++;
      cv.notify_all();
      cv.wait(lk, [&] { return go; });
    }
    if (!t.error.empty()) return;
    try {
      for (uint64_t k = 0; !bench::g_interrupted.load(std::memory_order_relaxed); k++) {
        double t0 = bench::now_mono();
        if (t0 >= deadline) break;
        nfs::Compound c(*cl);
        const std::string path = o.new_files ? fmt::format("{}/f{:07}", dir, k) : dir + "/f";
        c.write(path, data);
        for (uint32_t attempt = 0;; attempt++) {
          nfs::CompoundResult r = c.execute("txn");
          if (r.ok()) break;
          if (!r.delay_retry_safe() || attempt >= o.max_retries)
            throw nfs::Error(
                fmt::format("txn {}: {} at {}", path, nfs::status_name(r.status), r.failed_at));
          t.retries++;
          std::this_thread::sleep_for(
              std::chrono::milliseconds(std::min(50u, 1u << std::min(attempt, 5u))));
        }
        double t1 = bench::now_mono();
        if (t1 <= deadline) {
          t.txns++;
          t.lat_ms.push_back((t1 - t0) * 1e3);
        }
      }
      cl->close();
    } catch (const std::exception &e) {
      t.error = e.what();
    }
  };

  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < o.clients; i++) threads.emplace_back(client, i);
  {
    std::unique_lock lk(m);
    cv.wait(lk, [&] { return ready == o.clients; });
    start = bench::now_mono();
    deadline = start + o.seconds;
    go = true;
    cv.notify_all();
  }
  for (std::thread &th : threads) th.join();
  double end = std::min(bench::now_mono(), deadline);
  if (bench::g_interrupted) return 130;

  json per = json::array();
  std::vector<double> lat;
  uint64_t txns = 0, retries = 0;
  for (uint32_t i = 0; i < o.clients; i++) {
    const ClientTally &t = tallies[i];
    if (!t.error.empty()) fail(fmt::format("client {}: {}", i, t.error));
    per.push_back(
        {{"target", o.targets[i % o.targets.size()]}, {"txns", t.txns}, {"retries", t.retries}});
    txns += t.txns;
    retries += t.retries;
    lat.insert(lat.end(), t.lat_ms.begin(), t.lat_ms.end());
  }
  double secs = end - start;
  json out = {{"clients", o.clients},
              {"targets", o.targets},
              {"new_files", o.new_files},
              {"size", o.size},
              {"txns", txns},
              {"retries", retries},
              {"seconds", secs},
              {"txn_per_s", secs > 0 ? double(txns) / secs : 0.0},
              {"per_client", per},
              {"lat_ms",
               {{"median", quantile(lat, 0.5)},
                {"p90", quantile(lat, 0.9)},
                {"p99", quantile(lat, 0.99)}}}};
  fmt::print("{}\n", out.dump());
  return 0;
}

// -- etcd-cas -------------------------------------------------------------------------

const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64(const std::string &in) {
  std::string out;
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (i + 1 < in.size()) v |= uint32_t(uint8_t(in[i + 1])) << 8;
    if (i + 2 < in.size()) v |= uint8_t(in[i + 2]);
    out += kB64[v >> 18];
    out += kB64[(v >> 12) & 63];
    out += i + 1 < in.size() ? kB64[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? kB64[v & 63] : '=';
  }
  return out;
}

size_t append_body(char *data, size_t size, size_t n, void *out) {
  static_cast<std::string *>(out)->append(data, size * n);
  return size * n;
}

struct Curl {
  CURL *h = curl_easy_init();
  curl_slist *headers = nullptr;
  std::string out;
  Curl() {
    if (!h) fail("curl_easy_init failed");
    headers = curl_slist_append(nullptr, "Content-Type: application/json");
    headers = curl_slist_append(headers, "Expect:");
  }
  ~Curl() {
    curl_slist_free_all(headers);
    curl_easy_cleanup(h);
  }
  Curl(const Curl &) = delete;
  Curl &operator=(const Curl &) = delete;

  // One POST with etcd.cc's options; the parsed reply (throws on anything but HTTP 200).
  json post(const std::string &url, const std::string &body) {
    out.clear();
    char err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, long(body.size()));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 2000L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, append_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &out);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
    CURLcode rc = curl_easy_perform(h);
    if (rc != CURLE_OK) fail(url + ": " + (*err ? err : curl_easy_strerror(rc)));
    long http = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &http);
    json j = json::parse(out, nullptr, false);
    if (http != 200 || !j.is_object() || j.contains("error"))
      fail(fmt::format("{}: HTTP {}: {}", url, http, out.substr(0, 200)));
    return j;
  }
};

// Etcd::put_if_absent's request body for KEY = VALUE.
std::string cas_body(const std::string &key, const std::string &value) {
  const std::string k = base64(key);
  json req = {{"compare",
               {{{"key", k}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}}}},
              {"success", {{{"request_put", {{"key", k}, {"value", base64(value)}}}}}},
              {"failure", {{{"request_range", {{"key", k}}}}}}};
  return req.dump();
}

int run_cas(const std::string &endpoint, const std::string &prefix, uint32_t reps) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const std::string url = endpoint + "/v3/kv/txn";
  std::vector<double> fresh, reuse;
  Curl kept;
  for (uint32_t i = 0; i < reps; i++) {
    for (int side : (i % 2 == 0 ? std::vector<int>{0, 1} : std::vector<int>{1, 0})) {
      bench::check_interrupt();
      const std::string key = fmt::format("{}{}-{:06}", prefix, side == 0 ? "fresh" : "reuse", i);
      const std::string body = cas_body(key, "commit");
      double t0 = bench::now_mono();
      json r;
      if (side == 0) {
        Curl c;
        r = c.post(url, body);
      } else {
        r = kept.post(url, body);
      }
      double ms = (bench::now_mono() - t0) * 1e3;
      if (!r.value("succeeded", false)) fail("etcd-cas: the key " + key + " existed already");
      (side == 0 ? fresh : reuse).push_back(ms);
    }
  }
  // Remove the keys (one deleterange over the prefix).
  std::string end = prefix;
  end.back() = char(end.back() + 1);
  kept.post(endpoint + "/v3/kv/deleterange",
            json({{"key", base64(prefix)}, {"range_end", base64(end)}}).dump());
  fmt::print("{}\n", json({{"endpoint", endpoint}, {"fresh", fresh}, {"reuse", reuse}}).dump());
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  CLI::App app{"txnfs-clusterload: the in-process loops of bench/cluster (one JSON line)"};
  app.require_subcommand(1);
  TxnOptions t;
  CLI::App *txn = app.add_subcommand("txn", "independent one-file transactions for --seconds");
  txn->add_option("--target", t.targets, "HOST:/DIR, repeatable: client i uses target i % N")
      ->required();
  txn->add_option("--port", t.port, "NFS port (default 2049)");
  txn->add_option("--clients", t.clients, "client threads, a session each (default 4)")
      ->check(CLI::Range(1, 256));
  txn->add_option("--seconds", t.seconds, "the timed window (default 10)")
      ->check(CLI::PositiveNumber);
  txn->add_option("--size", t.size, "bytes per file (default 1024)");
  txn->add_flag("--new-files", t.new_files,
                "a new file per transaction (default: each client overwrites its own)");
  std::string endpoint, prefix;
  uint32_t reps = 200;
  CLI::App *cas = app.add_subcommand("etcd-cas", "etcd compare-and-swap round trips");
  cas->add_option("--endpoint", endpoint, "an etcd client URL, http://HOST:2379")->required();
  cas->add_option("--key-prefix", prefix, "keys PREFIX<n> are created, then deleted")->required();
  cas->add_option("--reps", reps, "round trips per way (default 200)")
      ->check(CLI::Range(1, 1000000));
  CLI11_PARSE(app, argc, argv);
  bench::install_interrupt_handlers();
  try {
    if (txn->parsed()) return run_txn(t);
    if (prefix.empty()) fail("etcd-cas: --key-prefix must not be empty");
    return run_cas(endpoint, prefix, reps);
  } catch (const bench::Interrupted &) {
    return 130;
  } catch (const std::exception &e) {
    fail(e.what());
  }
}
