#include "compound_bridge/bridge/config.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace txnfs::bridge {
namespace {

std::string_view trim(std::string_view s) {
  const char *ws = " \t\r";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

std::optional<bool> parse_bool(std::string_view v) {
  if (v == "yes" || v == "true" || v == "on" || v == "1") return true;
  if (v == "no" || v == "false" || v == "off" || v == "0") return false;
  return std::nullopt;
}

}  // namespace

std::optional<Config> parse_config(std::string_view text, std::string *error) {
  Config c;
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
    std::string_view key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    if (!seen.insert(std::string(key)).second)
      return fail("`" + std::string(key) + "` given twice");
    if (key == "mount") {
      if (value.empty() || value[0] != '/') return fail("mount must be an absolute path");
      c.mount = value;
    } else if (key == "tag_prefix") {
      if (value.empty()) return fail("tag_prefix must not be empty (use all_compounds = yes)");
      c.tag_prefix = value;
    } else if (key == "lazy_tag_prefix") {
      if (value.empty()) return fail("lazy_tag_prefix must not be empty (use none)");
      c.lazy_tag_prefix = value == "none" ? std::string() : std::string(value);
    } else if (key == "all_compounds" || key == "verbose") {
      std::optional<bool> b = parse_bool(value);
      if (!b)
        return fail(std::string(key) + " must be yes or no, not `" + std::string(value) + "`");
      (key == "verbose" ? c.verbose : c.all_compounds) = *b;
    } else if (key == "lock_timeout_ms" || key == "lock_set_timeout_ms") {
      uint32_t ms = 0;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), ms);
      if (ec != std::errc() || p != value.data() + value.size() || ms > 60000)
        return fail(std::string(key) + " must be a number of milliseconds from 0 to 60000, not `" +
                    std::string(value) + "`");
      (key == "lock_timeout_ms" ? c.lock_timeout_ms : c.lock_set_timeout_ms) = ms;
    } else if (key == "cluster") {
      if (value.empty() || value[0] != '/') return fail("cluster must be an absolute path");
      c.cluster = value;
    } else if (key == "log") {
      if (value.empty() || value[0] != '/') return fail("log must be an absolute path");
      c.log = value;
    } else {
      return fail("unknown key `" + std::string(key) + "`");
    }
  }
  if (c.mount.empty()) {
    *error = "`mount = /path` is required";
    return std::nullopt;
  }
  return c;
}

std::optional<Config> load_config(const std::string &path, std::string *error) {
  std::ifstream in(path);
  if (!in) {
    *error = path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  std::optional<Config> c = parse_config(text.str(), error);
  if (!c) *error = path + ": " + *error;
  return c;
}

}  // namespace txnfs::bridge
