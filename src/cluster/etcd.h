// etcd v3 through its JSON gateway (POST <endpoint>/v3/kv/range, /v3/kv/put,
// /v3/kv/deleterange, /v3/kv/txn, /v3/maintenance/status, /v3/cluster/member/list) with
// libcurl; keys and values travel base64-encoded, int64 fields as JSON strings.
//
// Thread-safe: the endpoints and timeout never change; each call uses its own CURL
// handle; the endpoint that answered last is an atomic.
//
// Every call tries the endpoints in turn, starting with the one that answered last,
// round after round, until one answers or the timeout passes. Each try gets its share of
// the time left (time left / endpoints not yet tried in this round), so an endpoint that
// hangs (a stopped process) leaves time for the others. An endpoint "answers" when it
// replies with anything but a sign that it has no quorum: an etcd error of gRPC code
// Unavailable (14) or DeadlineExceeded (4), HTTP 503, or "no leader" / "timed out" /
// "deadline exceeded" / "leader changed" / "proposal dropped" (a follower during an
// election) — those make it try the next one.
//
// Returns 0 or a positive errno:
//   ETIMEDOUT     no endpoint answered in time (hung, or no quorum)
//   EHOSTUNREACH  no endpoint could be reached (connection refused, unreachable)
//   EIO           an unexpected answer (an etcd error, malformed JSON)
//   EINVAL        an empty key
// and *why (may be null) says what, naming the endpoint(s).
//
// A timed-out write may still be applied by etcd later: its outcome is unknown.
// Reads are linearizable (etcd's default), so a read never returns a stale value.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace txnfs::cluster {

struct EtcdStatus {
  std::string endpoint, version;    // the endpoint that answered, etcd's version
  uint64_t leader = 0, member = 0;  // leader's and answering member's ids (0: no leader)
  int members_ok = 0, members = 0;  // members with a leader that answer / all members
};

class Etcd {
 public:
  Etcd(std::vector<std::string> endpoints, std::chrono::milliseconds timeout);

  // *value: the key's value, nullopt when it does not exist.
  int get(const std::string &key, std::optional<std::string> *value, std::string *why);
  // Every key that starts with `prefix`, in key order, with its value.
  int list(const std::string &prefix, std::vector<std::pair<std::string, std::string>> *kvs,
           std::string *why);
  int put(const std::string &key, const std::string &value, std::string *why);
  // Deletes the key (0 also when it did not exist).
  int remove(const std::string &key, std::string *why);
  // key = value unless the key exists (one txn: compare create_revision == 0); *stored:
  // what the key holds afterwards; *created: whether this call created it. After a try
  // that timed out but was applied, a retry finds the key: *created false, *stored ==
  // value.
  int put_if_absent(const std::string &key, const std::string &value, std::string *stored,
                    bool *created, std::string *why);
  // The answering member's status, the member list, and which members answer with a
  // leader (each asked within the time left).
  int status(EtcdStatus *out, std::string *why);

  const std::vector<std::string> &endpoints() const { return endpoints_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  // POSTs `request` to `path` as described above; on 0, *reply is the parsed answer and
  // *answered (may be null) the endpoint that gave it.
  int call(const char *path, const nlohmann::json &request, nlohmann::json *reply,
           std::string *answered, std::string *why);

  const std::vector<std::string> endpoints_;
  const std::chrono::milliseconds timeout_;
  std::atomic<size_t> last_ok_{0};  // index of the endpoint that answered last
};

// Base64 (RFC 4648, with padding), as etcd's gateway encodes bytes.
std::string base64_encode(std::string_view bytes);
bool base64_decode(std::string_view text, std::string *bytes);

}  // namespace txnfs::cluster
