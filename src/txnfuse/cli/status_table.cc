// format_status() and its parts: reading the fields of the daemon's status JSON, which
// may lack any of them, and laying them out in columns.
#include "txnfuse/cli/status_table.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "txnfs/txnfs.h"

namespace txnfs::cli {

namespace {

using nlohmann::json;  // an object's keys iterate in sorted order (std::map)

// The field KEY of OBJ if it is an integer that fits the result type; nullopt if it is
// missing or is not.
std::optional<uint64_t> u64_field(const json &obj, const char *key) {
  auto it = obj.find(key);
  if (it == obj.end()) return std::nullopt;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer() && it->get<int64_t>() >= 0)
    return static_cast<uint64_t>(it->get<int64_t>());
  return std::nullopt;
}

// The same, signed.
std::optional<int64_t> i64_field(const json &obj, const char *key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return std::nullopt;
  if (it->is_number_unsigned())
    return it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
               ? std::nullopt
               : std::optional<int64_t>(static_cast<int64_t>(it->get<uint64_t>()));
  return it->get<int64_t>();
}

// The cell of a field: "-" if it is missing.
template <class T>
std::string or_dash(const std::optional<T> &v) {
  return v ? fmt::format("{}", *v) : std::string("-");
}

// The STATE, ERROR and BOUND cells of transaction T.
std::string state_of(const json &t) {
  auto it = t.find("state");
  if (it == t.end()) return "-";
  std::string s = it->is_string()            ? it->get<std::string>()
                  : it->is_number_unsigned() ? state_name(it->get<unsigned>())
                                             : "?";
  // A prepared transaction shows its global id (docs/cluster.md).
  if (auto g = t.find("gid"); g != t.end() && g->is_string()) s += " " + g->get<std::string>();
  return s;
}

std::string error_of(const json &t) {
  auto it = t.find("error");
  if (it == t.end()) return "-";
  if (it->is_string()) return it->get<std::string>().empty() ? "-" : it->get<std::string>();
  std::optional<int64_t> e = i64_field(t, "error");
  if (!e || *e == 0) return "-";
  const char *name = *e > 0 && *e < 4096 ? ::strerrorname_np(static_cast<int>(*e)) : nullptr;
  return name ? std::string(name) : fmt::format("{}", *e);
}

std::string bound_of(const json &t) {
  std::optional<uint64_t> f = u64_field(t, "flags");
  if (!f) return "-";
  return (*f & TXNFS_BIND_PROCESS) ? "process" : "thread";
}

// Columns, each left- or right-aligned, two spaces apart; no trailing blanks.
// HEADER, RIGHT and every row have the same number of cells.
std::string render_table(const std::vector<std::string> &header, const std::vector<bool> &right,
                         const std::vector<std::vector<std::string>> &rows) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); c++) width[c] = header[c].size();
  for (auto &row : rows)
    for (size_t c = 0; c < row.size(); c++) width[c] = std::max(width[c], row[c].size());
  std::string out;
  auto line = [&](const std::vector<std::string> &cells) {
    std::string l;
    for (size_t c = 0; c < cells.size(); c++) {
      if (c) l += "  ";
      size_t pad = width[c] - cells[c].size();
      if (right[c]) l.append(pad, ' ');
      l += cells[c];
      if (!right[c]) l.append(pad, ' ');
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line(header);
  for (auto &row : rows) line(row);
  return out;
}

}  // namespace

std::string format_age(uint64_t ms) {
  if (ms < 1000) return fmt::format("{}ms", ms);
  if (ms < 60'000) return fmt::format("{}.{}s", ms / 1000, ms % 1000 / 100);
  uint64_t s = ms / 1000;
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{:02}h", s / 86400, s % 86400 / 3600);
}

std::string format_bytes(uint64_t bytes) {
  if (bytes == 0) return "0";
  if (bytes < 1024) return fmt::format("{}B", bytes);
  static const char units[] = "KMGTPE";
  double v = static_cast<double>(bytes) / 1024;
  size_t u = 0;
  while (v >= 1024 && u + 1 < sizeof units - 1) {
    v /= 1024;
    u++;
  }
  return fmt::format("{:.1f}{}", v, units[u]);
}

std::string state_name(unsigned state) {
  switch (state) {
    case TXNFS_ACTIVE:
      return "active";
    case TXNFS_ABORT_ONLY:
      return "abort-only";
    case TXNFS_COMMITTING:
      return "committing";
    case TXNFS_COMMITTED:
      return "committed";
    case TXNFS_ABORTED:
      return "aborted";
    case TXNFS_PREPARED:
      return "prepared";
  }
  return fmt::format("state-{}", state);
}

std::string format_status(std::string_view text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception &e) {
    throw std::runtime_error(fmt::format("not valid JSON ({})", e.what()));
  }
  if (!j.is_object()) throw std::runtime_error("not a JSON object");
  std::string out;

  auto txs = j.find("transactions");
  if (txs != j.end() && !txs->is_array())
    throw std::runtime_error("\"transactions\" is not an array");
  std::vector<std::vector<std::string>> rows;
  if (txs != j.end())
    for (const json &t : *txs) {
      if (!t.is_object()) throw std::runtime_error("a transaction is not a JSON object");
      std::optional<uint64_t> age = u64_field(t, "age_ms"), bytes = u64_field(t, "backup_bytes");
      rows.push_back({or_dash(u64_field(t, "id")), state_of(t), or_dash(u64_field(t, "uid")),
                      or_dash(i64_field(t, "pid")), bound_of(t), age ? format_age(*age) : "-",
                      or_dash(u64_field(t, "ops")), bytes ? format_bytes(*bytes) : "-",
                      or_dash(u64_field(t, "locks_held")), or_dash(u64_field(t, "locks_waiting")),
                      error_of(t)});
    }
  if (rows.empty()) {
    out += "no open transactions\n";
  } else {
    out += render_table(
        {"ID", "STATE", "UID", "PID", "BOUND", "AGE", "OPS", "BACKUP", "LOCKS", "WAITING", "ERROR"},
        {true, false, true, true, false, true, true, true, true, true, false}, rows);
  }

  auto counters = j.find("counters");
  if (counters != j.end()) {
    if (!counters->is_object()) throw std::runtime_error("\"counters\" is not an object");
    static const char *const known[] = {"commits", "aborts", "deadlocks", "timeouts", "recoveries"};
    std::vector<std::string> parts;
    auto add = [&](const std::string &k) {
      parts.push_back(fmt::format("{} {}", k, or_dash(u64_field(*counters, k.c_str()))));
    };
    for (const char *k : known)
      if (counters->contains(k)) add(k);
    for (auto it = counters->begin(); it != counters->end(); ++it) {
      bool is_known = false;
      for (const char *k : known) is_known |= it.key() == k;
      if (!is_known) add(it.key());
    }
    std::string line = "counters:";
    for (size_t i = 0; i < parts.size(); i++) line += (i ? ", " : " ") + parts[i];
    out += line + "\n";
  }
  auto lazy = j.find("lazy");
  if (lazy != j.end()) {
    if (!lazy->is_object()) throw std::runtime_error("\"lazy\" is not an object");
    auto n = u64_field(*lazy, "not_durable");
    out += fmt::format("lazy commits not yet durable: {}", or_dash(n));
    if (n && *n > 0) out += fmt::format(", oldest {} ms", or_dash(u64_field(*lazy, "oldest_ms")));
    out += fmt::format(" (flushed within {} ms)\n", or_dash(u64_field(*lazy, "flush_ms")));
  }
  // How requests reach the daemon, and those waiting for locks (parked: on no thread).
  auto transport = j.find("transport");
  auto parked = j.find("parked");
  if (transport != j.end() && transport->is_string() && parked != j.end() && parked->is_object())
    out += fmt::format("requests: over {}; parked for locks: {} now, {} in total\n",
                       transport->get<std::string>(), or_dash(u64_field(*parked, "now")),
                       or_dash(u64_field(*parked, "total")));
  // Passthrough: files transactions made, read and written by the kernel itself.
  auto pt = j.find("passthrough");
  if (pt != j.end() && pt->is_object()) {
    auto on = pt->find("on");
    if (on != pt->end() && on->is_boolean() && !on->get<bool>())
      out += "passthrough: off\n";
    else
      out += fmt::format(
          "passthrough (transactions' new files): {} open now, {} opened, {} revoked at a "
          "transaction's end\n",
          or_dash(u64_field(*pt, "open")), or_dash(u64_field(*pt, "opened")),
          or_dash(u64_field(*pt, "revoked")));
  }
  // A cluster node (docs/cluster.md): its name, and etcd's health at the last check.
  auto cl = j.find("cluster");
  if (cl != j.end() && cl->is_object()) {
    auto str = [](const json &o, const char *k) {
      auto it = o.find(k);
      return it != o.end() && it->is_string() ? it->get<std::string>() : std::string("-");
    };
    out += fmt::format("cluster {}: node {} (participant; prepared transactions resolved after {} ms, "
                       "{} by this node)\n",
                       str(*cl, "cluster"), str(*cl, "node"),
                       or_dash(u64_field(*cl, "prepared_timeout_ms")),
                       or_dash(u64_field(*cl, "resolved_by_node")));
    auto e = cl->find("etcd");
    if (e != cl->end() && e->is_object()) {
      auto healthy = e->find("healthy");
      auto checked = e->find("checked");
      if (checked == e->end() || !checked->is_boolean() || !checked->get<bool>())
        out += "etcd: not checked yet\n";
      else if (healthy != e->end() && healthy->is_boolean() && healthy->get<bool>())
        out += fmt::format("etcd: healthy ({} of {} members answer; via {}; {} ms ago)\n",
                           or_dash(u64_field(*e, "members_ok")), or_dash(u64_field(*e, "members")),
                           str(*e, "endpoint"), or_dash(i64_field(*e, "checked_ms_ago")));
      else
        out += fmt::format("etcd: UNHEALTHY ({}; {} ms ago): prepared transactions wait\n",
                           str(*e, "error"), or_dash(i64_field(*e, "checked_ms_ago")));
    }
  }
  return out;
}

}  // namespace txnfs::cli
