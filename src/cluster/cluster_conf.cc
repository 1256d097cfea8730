#include "cluster/cluster_conf.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

namespace txnfs::cluster {
namespace {

std::string_view trim(std::string_view s) {
  const char *ws = " \t\r";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

bool name_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// An etcd client URL: http://host:port, no path. The trailing '/' is dropped.
std::optional<std::string> endpoint(std::string_view url) {
  if (!url.starts_with("http://")) return std::nullopt;
  while (url.ends_with('/')) url.remove_suffix(1);
  std::string_view rest = url.substr(7);
  if (rest.empty() || rest.find_first_of("/ \t?#") != std::string_view::npos) return std::nullopt;
  return std::string(url);
}

std::optional<std::chrono::milliseconds> millis(std::string_view v, long max) {
  long ms = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
  if (ec != std::errc() || p != v.data() + v.size() || ms < 1 || ms > max) return std::nullopt;
  return std::chrono::milliseconds(ms);
}

}  // namespace

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!name_char(c)) return false;
  return true;
}

bool valid_gid(std::string_view gid) { return valid_name(gid); }

std::optional<ClusterConf> parse_cluster_conf(std::string_view text, std::string *error) {
  ClusterConf c;
  std::set<std::string, std::less<>> seen;
  int lineno = 0;
  auto fail = [&](const std::string &what) {
    *error = "line " + std::to_string(lineno) + ": " + what;
    return std::nullopt;
  };
  while (!text.empty()) {
    ++lineno;
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) return fail("expected `key = value`");
    std::string key(trim(line.substr(0, eq)));
    std::string_view value = trim(line.substr(eq + 1));
    if (!seen.insert(key).second) return fail("`" + key + "` given twice");
    if (key == "cluster" || key == "node") {
      if (!valid_name(value))
        return fail(key + " must be 1..64 characters of [A-Za-z0-9._-], not `" +
                    std::string(value) + "`");
      (key == "cluster" ? c.cluster : c.node) = value;
    } else if (key == "etcd") {
      while (!value.empty()) {
        size_t comma = value.find(',');
        std::string_view one = trim(value.substr(0, comma));
        value = comma == std::string_view::npos ? std::string_view{} : value.substr(comma + 1);
        std::optional<std::string> url = endpoint(one);
        if (!url)
          return fail("etcd: `" + std::string(one) + "` is not a client URL http://host:port");
        c.etcd.push_back(*url);
      }
      if (c.etcd.empty()) return fail("etcd: no endpoint");
    } else if (key == "etcd_timeout_ms" || key == "prepared_timeout_ms") {
      bool etcd = key == "etcd_timeout_ms";
      std::optional<std::chrono::milliseconds> ms = millis(value, etcd ? 600000 : 86400000);
      if (!ms)
        return fail(key + " must be a number of milliseconds from 1 to " +
                    (etcd ? "600000" : "86400000") + ", not `" + std::string(value) + "`");
      (etcd ? c.etcd_timeout : c.prepared_timeout) = *ms;
    } else if (key == "metrics") {
      if (value.empty() || value[0] != '/') return fail("metrics must be an absolute path");
      c.metrics = value;
    } else {
      return fail("unknown key `" + key + "`");
    }
  }
  if (c.cluster.empty()) {
    *error = "`cluster = NAME` is required";
    return std::nullopt;
  }
  if (c.etcd.empty()) {
    *error = "`etcd = http://host:port,...` is required";
    return std::nullopt;
  }
  return c;
}

std::optional<ClusterConf> load_cluster_conf(const std::string &path, std::string *error) {
  std::ifstream in(path);
  if (!in) {
    *error = path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  std::optional<ClusterConf> c = parse_cluster_conf(text.str(), error);
  if (!c) *error = path + ": " + *error;
  return c;
}

std::string new_gid() {
  char host[256] = {};
  std::string prefix;
  if (::gethostname(host, sizeof host - 1) == 0)
    for (const char *p = host; *p && prefix.size() < 30; ++p) prefix += name_char(*p) ? *p : '-';
  if (prefix.empty()) prefix = "c";
  long long ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  thread_local std::mt19937_64 rng{(uint64_t(std::random_device{}()) << 32) ^
                                   std::random_device{}()};
  char tail[64];
  std::snprintf(tail, sizeof tail, "-%lld-%016llx", ms, (unsigned long long)rng());
  return prefix + tail;  // at most 30 + 1 + 13 + 1 + 16 = 61 characters
}

}  // namespace txnfs::cluster
