// The cluster library (src/cluster): its configuration file and gids, and the etcd client,
// decisions and map against a REAL etcd -- three members on loopback addresses of this
// test run (127.<200 + cluster>.<pid bits>.<pid bits, member>, ports 2379/2380), data in a
// temporary directory. EtcdCluster stops its members by pid (SIGTERM, then SIGKILL) and
// removes the directory also when a test fails; the members die with this process
// (PR_SET_PDEATHSIG) if it crashes.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <latch>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "cluster/cluster_conf.h"
#include "cluster/cluster_map.h"
#include "cluster/decisions.h"
#include "cluster/etcd.h"
#include "tests/unit/tmpdir.h"

using namespace txnfs::cluster;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// REQUIRE(call == 0), showing `why` (in scope where it is used) when it fails.
#define OK(call)                \
  do {                          \
    int err_ = (call);          \
    INFO(#call << ": " << why); \
    REQUIRE(err_ == 0);         \
  } while (0)

namespace {

// A loopback address unique to this run (pid), cluster number and member (1..3).
std::string member_addr(int cluster, int member) {
  unsigned pid = unsigned(::getpid());
  return "127." + std::to_string(200 + cluster) + "." + std::to_string(pid & 0xff) + "." +
         std::to_string(((pid >> 8) & 0x3f) * 4 + member);
}

long ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

class EtcdCluster {
 public:
  EtcdCluster() : index_(next_index_++) {
    try {
      start();
    } catch (...) {
      stop_all();
      throw;
    }
  }
  ~EtcdCluster() { stop_all(); }
  EtcdCluster(const EtcdCluster &) = delete;
  EtcdCluster &operator=(const EtcdCluster &) = delete;

  std::string endpoint(int i) const { return "http://" + member_addr(index_, i + 1) + ":2379"; }
  std::vector<std::string> endpoints() const { return {endpoint(0), endpoint(1), endpoint(2)}; }
  void signal(int i, int sig) { REQUIRE(::kill(pids_[i], sig) == 0); }
  void kill_member(int i) {
    signal(i, SIGKILL);
    ::waitpid(pids_[i], nullptr, 0);
    pids_[i] = -1;
  }

 private:
  void start() {
    std::string initial,
        token = "txnfs-unit-" + std::to_string(::getpid()) + "-" + std::to_string(index_);
    for (int m = 1; m <= 3; ++m)
      initial += (m > 1 ? "," : "") + ("m" + std::to_string(m)) + "=http://" +
                 member_addr(index_, m) + ":2380";
    for (int m = 1; m <= 3; ++m) {
      std::string a = member_addr(index_, m), name = "m" + std::to_string(m);
      std::string client = "http://" + a + ":2379", peer = "http://" + a + ":2380";
      spawn({"etcd", "--name", name, "--data-dir", dir_.path + "/" + name, "--listen-client-urls",
             client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
             "--initial-advertise-peer-urls", peer, "--initial-cluster", initial,
             "--initial-cluster-token", token, "--initial-cluster-state", "new"},
            dir_.path + "/" + name + ".log");
    }
    // Healthy: a write goes through (a leader is elected and has a quorum).
    Etcd etcd(endpoints(), 1000ms);
    std::string why;
    for (auto t0 = Clock::now(); etcd.put("/unit/ready", "1", &why) != 0;) {
      for (pid_t &pid : pids_)
        if (::waitpid(pid, nullptr, WNOHANG) == pid && (pid = -1))
          throw std::runtime_error("etcd exited at start: " + log("m1") + log("m2") + log("m3"));
      if (ms_since(t0) > 30000)
        throw std::runtime_error("etcd not healthy in 30 s: " + why + "\n" + log("m1"));
    }
  }

  void spawn(const std::vector<std::string> &args, const std::string &log_path) {
    std::vector<char *> argv;
    for (const std::string &a : args) argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    pids_.push_back(pid);
  }

  std::string log(const std::string &name) const {
    std::ifstream in(dir_.path + "/" + name + ".log");
    std::stringstream s;
    s << in.rdbuf();
    std::string text = s.str();
    return "\n--- " + name + ".log\n" +
           (text.size() > 2000 ? text.substr(text.size() - 2000) : text);
  }

  // SIGTERM (and SIGCONT, for a stopped one) to each member; SIGKILL after 2 s.
  void stop_all() {
    for (pid_t pid : pids_)
      if (pid > 0) ::kill(pid, SIGTERM), ::kill(pid, SIGCONT);
    auto t0 = Clock::now();
    for (pid_t &pid : pids_) {
      while (pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == 0 && ms_since(t0) < 2000)
        std::this_thread::sleep_for(20ms);
      if (pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
      pid = -1;
    }
  }

  TmpDir dir_;  // first member: removed after the processes are gone
  int index_;
  std::vector<pid_t> pids_;
  static inline int next_index_ = 0;
};

// The cluster the tests that stop no member share; started by the first that needs it.
EtcdCluster &shared_cluster() {
  static EtcdCluster cluster;
  return cluster;
}

// A key prefix no other test uses.
std::string unique_prefix(const std::string &what) {
  static std::atomic<int> n{0};
  return "/unit/" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + "/";
}

std::string write_file(const TmpDir &dir, const std::string &text) {
  std::string path = dir.path + "/cluster.conf";
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("cluster.conf: a good file", "[cluster]") {
  TmpDir dir;
  std::string error;
  const char *text =
      "# a node\n"
      "cluster = demo            # keys under /txnfs/demo/\n"
      "node = n1\n"
      "\n"
      "etcd = http://127.31.7.11:2379, http://127.31.7.12:2379/ ,http://127.31.7.13:2379\n"
      "etcd_timeout_ms = 1500\n"
      "prepared_timeout_ms = 30000\n"
      "metrics = /var/lib/node_exporter/txnfs-n1.prom\n";
  std::optional<ClusterConf> c = load_cluster_conf(write_file(dir, text), &error);
  REQUIRE(c);
  CHECK(c->cluster == "demo");
  CHECK(c->node == "n1");
  CHECK(c->etcd == std::vector<std::string>{"http://127.31.7.11:2379", "http://127.31.7.12:2379",
                                            "http://127.31.7.13:2379"});
  CHECK(c->etcd_timeout == 1500ms);
  CHECK(c->prepared_timeout == 30000ms);
  CHECK(c->metrics == "/var/lib/node_exporter/txnfs-n1.prom");

  c = load_cluster_conf(write_file(dir, "cluster=c\netcd=http://h:1\n"), &error);  // a client
  REQUIRE(c);
  CHECK(c->node.empty());
  CHECK(c->etcd_timeout == 2000ms);
  CHECK(c->prepared_timeout == 10000ms);
  CHECK(c->metrics.empty());
}

TEST_CASE("cluster.conf: errors name the file and the line", "[cluster]") {
  TmpDir dir;
  std::string error;
  auto fails = [&](const std::string &text) {
    std::string path = write_file(dir, text);
    bool failed = !load_cluster_conf(path, &error);
    CHECK(error.find('\n') == std::string::npos);
    CHECK(error.rfind(path + ": ", 0) == 0);
    return failed;
  };
  CHECK(fails("cluster = c\netcd = http://h:1\ncolour = blue\n"));
  CHECK(error.find("line 3: unknown key `colour`") != std::string::npos);
  CHECK(fails("cluster = c\n\netcd = http://h:1\ncluster = d\n"));
  CHECK(error.find("line 4: `cluster` given twice") != std::string::npos);
  CHECK(fails("cluster = c\nnode = n1\n"));
  CHECK(error.find("`etcd = http://host:port,...` is required") != std::string::npos);
  CHECK(fails("etcd = http://h:1\n"));
  CHECK(error.find("`cluster = NAME` is required") != std::string::npos);
  CHECK(fails("cluster = c\netcd = h:2379\n"));
  CHECK(error.find("line 2: etcd: `h:2379`") != std::string::npos);
  CHECK(fails("cluster = a/b\netcd = http://h:1\n"));
  CHECK(error.find("line 1: cluster must be") != std::string::npos);
  CHECK(fails("cluster = c\netcd = http://h:1\netcd_timeout_ms = 0\n"));
  CHECK(error.find("line 3: etcd_timeout_ms must be") != std::string::npos);
  CHECK(fails("cluster = c\netcd = http://h:1\nmetrics = relative.prom\n"));
  CHECK(fails("cluster = c\njust words\n"));
  CHECK(error.find("line 2: expected `key = value`") != std::string::npos);
  CHECK(!load_cluster_conf(dir.path + "/absent.conf", &error));
  CHECK(error.find("absent.conf: No such file or directory") != std::string::npos);
}

TEST_CASE("gids: valid_gid and new_gid", "[cluster]") {
  CHECK(valid_gid("a"));
  CHECK(valid_gid("host-1700000000000-0123456789abcdef"));
  CHECK(valid_gid("A.b_c-9"));
  CHECK(valid_gid(std::string(64, 'x')));
  CHECK_FALSE(valid_gid(""));
  CHECK_FALSE(valid_gid(std::string(65, 'x')));
  CHECK_FALSE(valid_gid("a/b"));
  CHECK_FALSE(valid_gid("a b"));
  CHECK_FALSE(valid_gid("a:b"));
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    std::string g = new_gid();
    REQUIRE(valid_gid(g));
    seen.insert(g);
  }
  CHECK(seen.size() == 1000);
  std::string g = new_gid();  // <host>-<13-digit ms>-<16 hex>
  REQUIRE(g.size() > 31);
  CHECK(g[g.size() - 17] == '-');
  CHECK(g.find_first_not_of("0123456789abcdef", g.size() - 16) == std::string::npos);
  CHECK(g[g.size() - 31] == '-');
  CHECK(g.substr(g.size() - 30, 13).find_first_not_of("0123456789") == std::string::npos);
}

TEST_CASE("base64 as etcd's gateway writes it", "[cluster]") {
  CHECK(base64_encode("") == "");
  CHECK(base64_encode("f") == "Zg==");
  CHECK(base64_encode("fo") == "Zm8=");
  CHECK(base64_encode("foo") == "Zm9v");
  CHECK(base64_encode(std::string("\0\xff\xfe", 3)) == "AP/+");
  std::string out;
  for (std::string s : {std::string(), std::string("foob"), std::string("\0\x80\xff x", 5)}) {
    REQUIRE(base64_decode(base64_encode(s), &out));
    CHECK(out == s);
  }
  CHECK_FALSE(base64_decode("Zg=", &out));
  CHECK_FALSE(base64_decode("Z===", &out));
  CHECK_FALSE(base64_decode("Zg==Zg==", &out));
  CHECK_FALSE(base64_decode("Z!8=", &out));
}

TEST_CASE("etcd: get, put, list, remove", "[cluster][etcd]") {
  Etcd etcd(shared_cluster().endpoints(), 5000ms);
  std::string p = unique_prefix("kv"), why;
  std::optional<std::string> v;
  OK(etcd.get(p + "a", &v, &why));
  CHECK_FALSE(v);
  std::string binary("\0\xff\n=", 4);
  OK(etcd.put(p + "a", "1", &why));
  OK(etcd.put(p + "b", binary, &why));
  OK(etcd.put(p + "c", "", &why));
  OK(etcd.put(p.substr(0, p.size() - 1) + "0", "not under the prefix", &why));
  OK(etcd.get(p + "a", &v, &why));
  CHECK(v == "1");
  OK(etcd.put(p + "a", "2", &why));
  OK(etcd.get(p + "a", &v, &why));
  CHECK(v == "2");
  OK(etcd.get(p + "c", &v, &why));
  CHECK(v == "");
  std::vector<std::pair<std::string, std::string>> kvs;
  OK(etcd.list(p, &kvs, &why));
  CHECK(kvs == std::vector<std::pair<std::string, std::string>>{
                   {p + "a", "2"}, {p + "b", binary}, {p + "c", ""}});
  OK(etcd.remove(p + "b", &why));
  OK(etcd.remove(p + "b", &why));  // already gone: still 0
  OK(etcd.get(p + "b", &v, &why));
  CHECK_FALSE(v);
  OK(etcd.list(p, &kvs, &why));
  CHECK(kvs.size() == 2);
  CHECK(etcd.put("", "x", &why) == EINVAL);
}

TEST_CASE("etcd: put_if_absent from two racing threads creates once", "[cluster][etcd]") {
  Etcd etcd(shared_cluster().endpoints(), 5000ms);
  std::string p = unique_prefix("cas");
  for (int round = 0; round < 20; ++round) {
    std::string key = p + std::to_string(round);
    struct Result {
      int err = -1;
      std::string stored, why;
      bool created = false;
    } r[2];
    std::latch go(2);
    auto racer = [&](int i) {
      go.arrive_and_wait();
      r[i].err =
          etcd.put_if_absent(key, i ? "second" : "first", &r[i].stored, &r[i].created, &r[i].why);
    };
    std::thread a(racer, 0), b(racer, 1);
    a.join();
    b.join();
    INFO(r[0].why << r[1].why);
    REQUIRE(r[0].err == 0);
    REQUIRE(r[1].err == 0);
    CHECK(r[0].created != r[1].created);  // exactly one created it
    CHECK(r[0].stored == r[1].stored);
    CHECK(r[0].stored == (r[0].created ? "first" : "second"));
    std::optional<std::string> v;
    REQUIRE(etcd.get(key, &v, nullptr) == 0);
    CHECK(v == r[0].stored);
  }
}

TEST_CASE("decisions: commit and abort race, one wins for everyone", "[cluster][etcd]") {
  Etcd etcd(shared_cluster().endpoints(), 5000ms);
  std::string cluster = "unit-dec-" + std::to_string(::getpid()), why;
  Decisions decisions(etcd, cluster);
  int commits = 0;
  for (int round = 0; round < 20; ++round) {
    std::string gid = new_gid();
    Decision before = Decision::kCommit, final[2] = {Decision::kNone, Decision::kNone};
    OK(decisions.read(gid, &before, &why));
    CHECK(before == Decision::kNone);
    int err[2] = {-1, -1};
    std::latch go(2);
    auto racer = [&](int i) {
      go.arrive_and_wait();
      err[i] = decisions.decide(gid, i ? Decision::kAbort : Decision::kCommit, &final[i], nullptr);
    };
    std::thread a(racer, 0), b(racer, 1);
    a.join();
    b.join();
    REQUIRE(err[0] == 0);
    REQUIRE(err[1] == 0);
    CHECK(final[0] == final[1]);
    CHECK(final[0] != Decision::kNone);
    Decision now = Decision::kNone;
    OK(decisions.read(gid, &now, &why));
    CHECK(now == final[0]);
    Decision again = Decision::kNone;  // the decision never changes
    Decision other = now == Decision::kCommit ? Decision::kAbort : Decision::kCommit;
    OK(decisions.decide(gid, other, &again, &why));
    CHECK(again == now);
    std::optional<std::string> raw;
    OK(etcd.get("/txnfs/" + cluster + "/decisions/" + gid, &raw, &why));
    CHECK(raw == name(now));
    commits += now == Decision::kCommit;
  }
  CAPTURE(commits);
  Decision d;
  CHECK(decisions.decide("bad/gid", Decision::kCommit, &d, &why) == EINVAL);
  CHECK(decisions.read("", &d, &why) == EINVAL);
  CHECK(decisions.decide(new_gid(), Decision::kNone, &d, &why) == EINVAL);
  std::string gid = new_gid();
  OK(etcd.put(decisions.key(gid), "maybe", &why));
  CHECK(decisions.read(gid, &d, &why) == EIO);
  CHECK(why.find("maybe") != std::string::npos);
  CHECK(std::string(name(Decision::kNone)) == "none");
}

TEST_CASE("cluster map: load nodes and tops", "[cluster][etcd]") {
  Etcd etcd(shared_cluster().endpoints(), 5000ms);
  std::string c = "unit-map-" + std::to_string(::getpid()), why;
  ClusterMap map(etcd, c);
  OK(map.load(&why));
  CHECK(map.nodes.empty());
  CHECK(map.tops.empty());
  std::vector<std::pair<std::string, std::string>> kvs = {{"nodes/n1", "127.31.7.1"},
                                                          {"nodes/n2", "127.31.7.2"},
                                                          {"map/a", "n1"},
                                                          {"map/b", "n2"},
                                                          {"map/c", "n1"},
                                                          {"map/lost", "n9"}};
  for (auto &[k, v] : kvs) OK(etcd.put("/txnfs/" + c + "/" + k, v, &why));
  OK(etcd.put("/txnfs/" + c + "-other/map/z", "n1", &why));  // another cluster
  OK(map.load(&why));
  CHECK(map.nodes ==
        std::map<std::string, std::string>{{"n1", "127.31.7.1"}, {"n2", "127.31.7.2"}});
  CHECK(map.tops ==
        std::map<std::string, std::string>{{"a", "n1"}, {"b", "n2"}, {"c", "n1"}, {"lost", "n9"}});
  CHECK(map.host_of_top("a") == "127.31.7.1");
  CHECK(map.host_of_top("b") == "127.31.7.2");
  CHECK_FALSE(map.host_of_top("lost"));  // names a node without a host
  CHECK_FALSE(map.host_of_top("z"));
  Etcd nowhere({"http://" + member_addr(49, 1) + ":2379"}, 200ms);
  ClusterMap dead(nowhere, c);
  dead.nodes = map.nodes;
  CHECK(dead.load(&why) == EHOSTUNREACH);
  CHECK(dead.nodes == map.nodes);  // a failed load keeps the last map
}

TEST_CASE("etcd: status of a healthy cluster", "[cluster][etcd]") {
  Etcd etcd(shared_cluster().endpoints(), 5000ms);
  EtcdStatus st;
  std::string why;
  OK(etcd.status(&st, &why));
  CHECK(st.version.rfind("3.", 0) == 0);
  CHECK(st.leader != 0);
  CHECK(st.member != 0);
  CHECK(st.members == 3);
  CHECK(st.members_ok == 3);
  CHECK(st.endpoint == shared_cluster().endpoint(0));
}

TEST_CASE("etcd failover: an endpoint never started is skipped", "[cluster][etcd]") {
  std::vector<std::string> eps = shared_cluster().endpoints();
  eps.insert(eps.begin(), "http://" + member_addr(49, 1) + ":2379");
  Etcd etcd(eps, 3000ms);
  std::string p = unique_prefix("skip"), why;
  auto t0 = Clock::now();
  OK(etcd.put(p + "k", "v", &why));
  std::optional<std::string> v;
  OK(etcd.get(p + "k", &v, &why));
  CHECK(v == "v");
  CHECK(ms_since(t0) < 1000);  // a refused connection costs nothing
}

TEST_CASE("etcd: no endpoint reachable fails within the timeout", "[cluster][etcd]") {
  Etcd etcd({"http://" + member_addr(49, 1) + ":2379", "http://" + member_addr(49, 2) + ":2379"},
            800ms);
  std::string why;
  std::optional<std::string> v;
  auto t0 = Clock::now();
  int err = etcd.get("/k", &v, &why);
  long ms = ms_since(t0);
  CHECK(err == EHOSTUNREACH);
  CHECK(ms >= 750);
  CHECK(ms < 800 + 1000);
  CHECK(why.find(member_addr(49, 2)) != std::string::npos);
  std::string stored;
  bool created = false;
  CHECK(etcd.put_if_absent("/k", "v", &stored, &created, &why) == EHOSTUNREACH);
  CHECK_FALSE(created);
}

TEST_CASE("etcd failover: a hung, then a killed first member", "[cluster][etcd]") {
  EtcdCluster cluster;
  std::string why;
  std::optional<std::string> v;
  OK(Etcd(cluster.endpoints(), 5000ms).put("/f/k", "1", &why));

  cluster.signal(0, SIGSTOP);  // accepts connections, never answers; perhaps the leader
  Etcd hung(cluster.endpoints(), 8000ms);
  auto t0 = Clock::now();
  OK(hung.put("/f/k", "2", &why));
  CHECK(ms_since(t0) < 8000 + 1000);
  OK(hung.get("/f/k", &v, &why));
  CHECK(v == "2");

  cluster.kill_member(0);
  Etcd killed(cluster.endpoints(), 5000ms);  // starts with endpoint 0 again
  t0 = Clock::now();
  OK(killed.put("/f/k", "3", &why));
  OK(killed.get("/f/k", &v, &why));
  CHECK(v == "3");
  CHECK(ms_since(t0) < 5000);
}

TEST_CASE("etcd: a lost quorum fails writes and reads with a timeout", "[cluster][etcd]") {
  EtcdCluster cluster;
  std::string why, stored;
  std::optional<std::string> v;
  OK(Etcd(cluster.endpoints(), 5000ms).put("/q/k", "before", &why));

  cluster.signal(1, SIGSTOP);
  cluster.signal(2, SIGSTOP);
  Etcd etcd(cluster.endpoints(), 1500ms);
  auto t0 = Clock::now();
  CHECK(etcd.put("/q/k", "during", &why) == ETIMEDOUT);
  CHECK(ms_since(t0) < 1500 + 1000);
  CHECK(etcd.get("/q/k", &v, &why) == ETIMEDOUT);  // linearizable: no leader, no answer
  Decisions decisions(etcd, "q");
  Decision d = Decision::kNone;
  CHECK(decisions.decide("g1", Decision::kCommit, &d, &why) == ETIMEDOUT);
  CHECK(d == Decision::kNone);
  EtcdStatus st;
  OK(etcd.status(&st, &why));  // member 0 still answers: without a leader
  CHECK(st.members == 3);
  CHECK(st.members_ok == 0);
  CHECK(st.leader == 0);
  cluster.signal(0, SIGSTOP);  // none answers at all
  CHECK(etcd.get("/q/k", &v, &why) == ETIMEDOUT);

  cluster.signal(0, SIGCONT);
  cluster.signal(1, SIGCONT);
  cluster.signal(2, SIGCONT);
  Etcd again(cluster.endpoints(), 15000ms);  // long enough to elect a leader
  OK(again.put("/q/k2", "after", &why));
  OK(again.get("/q/k2", &v, &why));
  CHECK(v.value_or("(none)") == "after");
  // A write that timed out has an unknown outcome: the stopped members still had the
  // requests in their sockets and may apply them now.
  OK(again.get("/q/k", &v, &why));
  CHECK((v == "before" || v == "during"));
  OK(Decisions(again, "q").decide("g1", Decision::kAbort, &d, &why));
  CHECK(d != Decision::kNone);  // commit if the timed-out write was applied after all
}
