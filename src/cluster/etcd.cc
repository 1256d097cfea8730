#include "cluster/etcd.h"

#include <curl/curl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

namespace txnfs::cluster {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// What one POST to one endpoint came to.
enum class Try {
  kAnswer,       // 200 and a JSON object without "error": `reply`
  kNoQuorum,     // the endpoint answered that it cannot serve now (no leader, timed out)
  kTimeout,      // no answer within the time given
  kUnreachable,  // no connection (refused, unreachable), or the connection broke
  kError,        // any other answer: `what`
};
struct Attempt {
  Try kind;
  std::string what;
  json reply;
};

size_t append_body(char *data, size_t size, size_t n, void *out) {
  static_cast<std::string *>(out)->append(data, size * n);
  return size * n;
}

// Whether an etcd error says "not now" rather than "never": the member has no quorum.
bool no_quorum(long http, long code, const std::string &msg) {
  for (const char *sign : {"no leader", "timed out", "deadline exceeded", "leader changed",
                           "proposal dropped", "not capable", "too many requests"})
    if (msg.find(sign) != std::string::npos) return true;
  return http == 503 || code == 4 || code == 14;
}

Attempt post(const std::string &url, const std::string &body, long ms) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  std::unique_ptr<CURL, void (*)(CURL *)> h(curl_easy_init(), curl_easy_cleanup);
  curl_slist *list = curl_slist_append(nullptr, "Content-Type: application/json");
  list = curl_slist_append(list, "Expect:");
  std::unique_ptr<curl_slist, void (*)(curl_slist *)> headers(list, curl_slist_free_all);
  if (!h || !list) return {Try::kError, "out of memory", {}};
  std::string out;
  char err[CURL_ERROR_SIZE] = "";
  CURL *c = h.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, long(body.size()));
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(c, CURLOPT_PROXY, "");  // never through $http_proxy
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
  CURLcode rc = curl_easy_perform(c);
  if (rc == CURLE_OPERATION_TIMEDOUT)
    return {Try::kTimeout, "no answer within " + std::to_string(ms) + " ms", {}};
  if (rc != CURLE_OK) return {Try::kUnreachable, *err ? err : curl_easy_strerror(rc), {}};
  long http = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &http);
  json j = json::parse(out, nullptr, false);
  if (http == 200 && j.is_object() && !j.contains("error")) return {Try::kAnswer, {}, std::move(j)};
  std::string msg = out.substr(0, 200);
  long code = -1;
  if (j.is_object()) {
    if (auto e = j.find("error"); e != j.end() && e->is_string()) msg = *e;
    if (auto e = j.find("code"); e != j.end() && e->is_number_integer()) code = *e;
  }
  Try kind = no_quorum(http, code, msg) ? Try::kNoQuorum : Try::kError;
  return {kind, "HTTP " + std::to_string(http) + ": " + msg, {}};
}

// An int64 field: etcd's gateway writes them as strings; absent means 0.
uint64_t u64(const json &obj, const char *name) {
  auto it = obj.find(name);
  if (it == obj.end()) return 0;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  return std::stoull(it->get<std::string>());
}

// A base64 field (absent: empty, as proto3 leaves out empty values).
std::string bytes(const json &obj, const char *name) {
  std::string out;
  auto it = obj.find(name);
  if (it != obj.end() && !base64_decode(it->get<std::string>(), &out))
    throw std::invalid_argument(std::string("bad base64 in ") + name);
  return out;
}

// The keys k with prefix <= k < prefix_end(prefix), as etcd's clientv3.GetPrefixRangeEnd.
std::string prefix_end(std::string s) {
  while (!s.empty() && static_cast<unsigned char>(s.back()) == 0xff) s.pop_back();
  if (s.empty()) return std::string(1, '\0');  // every key
  s.back() = static_cast<char>(static_cast<unsigned char>(s.back()) + 1);
  return s;
}

int set_why(std::string *why, std::string what, int err) {
  if (why) *why = std::move(what);
  return err;
}

int bad_answer(const std::string &endpoint, const char *what, std::string *why) {
  return set_why(why, "etcd " + endpoint + ": unexpected answer: " + what, EIO);
}

}  // namespace

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
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

bool base64_decode(std::string_view in, std::string *out) {
  out->clear();
  if (in.size() % 4) return false;
  for (size_t i = 0; i < in.size(); i += 4) {
    uint32_t v = 0;
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      char c = in[i + k];
      const char *p = c ? std::strchr(kB64, c) : nullptr;
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        ++pad;
      } else if (!p || pad) {
        return false;  // not base64, or data after '='
      }
      v = v << 6 | (p ? uint32_t(p - kB64) : 0);
    }
    out->push_back(char(v >> 16));
    if (pad < 2) out->push_back(char(v >> 8));
    if (pad < 1) out->push_back(char(v));
  }
  return true;
}

Etcd::Etcd(std::vector<std::string> endpoints, std::chrono::milliseconds timeout)
    : endpoints_(std::move(endpoints)), timeout_(timeout) {}

int Etcd::call(const char *path, const json &request, json *reply, std::string *answered,
               std::string *why) {
  const size_t n = endpoints_.size();
  if (n == 0) return set_why(why, "etcd: no endpoint configured", EHOSTUNREACH);
  const std::string body = request.dump();
  const Clock::time_point deadline = Clock::now() + timeout_;
  const size_t first = last_ok_.load(std::memory_order_relaxed) % n;
  std::vector<std::string> last(n);  // each endpoint's last failure
  bool all_unreachable = true;
  auto left_ms = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  };
  for (std::chrono::milliseconds pause(20);;
       pause = std::min(pause * 2, std::chrono::milliseconds(400))) {
    for (size_t i = 0; i < n && left_ms() > 0; ++i) {
      long left = left_ms();
      long slice = std::max<long>(left / long(n - i), std::min<long>(left, 50));
      size_t e = (first + i) % n;
      Attempt a = post(endpoints_[e] + path, body, slice);
      if (a.kind == Try::kAnswer) {
        last_ok_.store(e, std::memory_order_relaxed);
        *reply = std::move(a.reply);
        if (answered) *answered = endpoints_[e];
        return 0;
      }
      if (a.kind == Try::kError) return set_why(why, "etcd " + endpoints_[e] + ": " + a.what, EIO);
      if (a.kind != Try::kUnreachable) all_unreachable = false;
      last[e] = std::move(a.what);
    }
    long left = left_ms();
    if (left <= 0) break;
    std::this_thread::sleep_for(std::min(pause, std::chrono::milliseconds(left)));
  }
  std::string what =
      "etcd: no endpoint answered within " + std::to_string(timeout_.count()) + " ms";
  const char *sep = " (";
  for (size_t e = 0; e < n; ++e)
    if (!last[e].empty()) what += std::exchange(sep, "; ") + endpoints_[e] + ": " + last[e];
  if (*sep == ';') what += ")";
  return set_why(why, what, all_unreachable ? EHOSTUNREACH : ETIMEDOUT);
}

int Etcd::get(const std::string &key, std::optional<std::string> *value, std::string *why) {
  if (key.empty()) return set_why(why, "etcd: empty key", EINVAL);
  json r;
  std::string ep;
  if (int err = call("/v3/kv/range", {{"key", base64_encode(key)}}, &r, &ep, why)) return err;
  try {
    auto kvs = r.find("kvs");
    if (kvs == r.end() || kvs->empty()) {
      value->reset();
    } else {
      *value = bytes(kvs->at(0), "value");
    }
    return 0;
  } catch (const std::exception &e) {
    return bad_answer(ep, e.what(), why);
  }
}

int Etcd::list(const std::string &prefix, std::vector<std::pair<std::string, std::string>> *kvs,
               std::string *why) {
  json req = {{"key", base64_encode(prefix.empty() ? std::string(1, '\0') : prefix)},
              {"range_end", base64_encode(prefix_end(prefix))}};
  json r;
  std::string ep;
  if (int err = call("/v3/kv/range", req, &r, &ep, why)) return err;
  try {
    kvs->clear();
    if (auto it = r.find("kvs"); it != r.end())
      for (const json &kv : *it) kvs->emplace_back(bytes(kv, "key"), bytes(kv, "value"));
    return 0;
  } catch (const std::exception &e) {
    return bad_answer(ep, e.what(), why);
  }
}

int Etcd::put(const std::string &key, const std::string &value, std::string *why) {
  if (key.empty()) return set_why(why, "etcd: empty key", EINVAL);
  json r;
  return call("/v3/kv/put", {{"key", base64_encode(key)}, {"value", base64_encode(value)}}, &r,
              nullptr, why);
}

int Etcd::remove(const std::string &key, std::string *why) {
  if (key.empty()) return set_why(why, "etcd: empty key", EINVAL);
  json r;
  return call("/v3/kv/deleterange", {{"key", base64_encode(key)}}, &r, nullptr, why);
}

int Etcd::put_if_absent(const std::string &key, const std::string &value, std::string *stored,
                        bool *created, std::string *why) {
  if (key.empty()) return set_why(why, "etcd: empty key", EINVAL);
  const std::string k = base64_encode(key);
  json req = {{"compare",
               {{{"key", k}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}}}},
              {"success", {{{"request_put", {{"key", k}, {"value", base64_encode(value)}}}}}},
              {"failure", {{{"request_range", {{"key", k}}}}}}};
  json r;
  std::string ep;
  if (int err = call("/v3/kv/txn", req, &r, &ep, why)) return err;
  try {
    if (r.value("succeeded", false)) {  // proto3 leaves out `false`
      *created = true;
      *stored = value;
      return 0;
    }
    *created = false;
    const json &kvs = r.at("responses").at(0).at("response_range").at("kvs");
    *stored = bytes(kvs.at(0), "value");
    return 0;
  } catch (const std::exception &e) {
    return bad_answer(ep, e.what(), why);
  }
}

int Etcd::status(EtcdStatus *out, std::string *why) {
  const Clock::time_point deadline = Clock::now() + timeout_;
  json st, ml;
  std::string ep;
  if (int err = call("/v3/maintenance/status", json::object(), &st, &ep, why)) return err;
  if (int err = call("/v3/cluster/member/list", json::object(), &ml, nullptr, why)) return err;
  try {
    *out = EtcdStatus{};
    out->endpoint = ep;
    out->version = st.value("version", "");
    out->leader = u64(st, "leader");
    out->member = u64(st.value("header", json::object()), "member_id");
    const json members = ml.value("members", json::array());
    out->members = int(members.size());
    for (size_t i = 0; i < members.size(); ++i) {
      long left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      const json urls = members[i].value("clientURLs", json::array());
      if (left <= 0 || urls.empty()) continue;
      Attempt a = post(urls[0].get<std::string>() + "/v3/maintenance/status", "{}",
                       std::max<long>(left / long(members.size() - i), 1));
      if (a.kind == Try::kAnswer && u64(a.reply, "leader") != 0 && !a.reply.contains("errors"))
        ++out->members_ok;
    }
    return 0;
  } catch (const std::exception &e) {
    return bad_answer(ep, e.what(), why);
  }
}

}  // namespace txnfs::cluster
