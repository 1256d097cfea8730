#include "compound_bridge/client/journal_report.h"

#include <fmt/format.h>

namespace txnfs::nfs::cli {
namespace {

std::string compounds(size_t n) { return fmt::format("{} COMPOUND{}", n, n == 1 ? "" : "s"); }

}  // namespace

std::string journal_line(const Journal &journal, const Journal::Sent &sent) {
  std::string line = "journal:";
  if (sent.dropped) {
    line += fmt::format(" {} whose reply was never seen had not taken effect (dropped);",
                        compounds(sent.dropped));
  }
  if (sent.resent)
    line += fmt::format(" {} lost by the server sent again first;", compounds(sent.resent));
  if (sent.result.ok()) {
    line += fmt::format(" COMPOUND {} kept ({} kept in {})", sent.seq, journal.kept().size(),
                        journal.dir());
  } else {
    line += fmt::format(" COMPOUND {} failed: not kept", sent.seq);
  }
  return line;
}

nlohmann::ordered_json journal_json(const Journal &journal, const Journal::Sent &sent) {
  return {{"dir", journal.dir()},
          {"marker", journal.marker_path()},
          {"seq", sent.seq},
          {"kept", sent.result.ok()},
          {"entries", journal.kept().size()},
          {"resent", sent.resent},
          {"dropped", sent.dropped},
          {"verifier", sent.result.ok() ? verifier_hex(sent.result.ops.back().verifier) : ""}};
}

std::string sync_line(const Journal::Synced &s) {
  std::string line = fmt::format("sync: {} durable, {} lost and sent again", s.durable, s.resent);
  if (s.dropped)
    line += fmt::format(", {} never answered and not taken effect (dropped)", s.dropped);
  return line + fmt::format(" (marker {})", s.marker);
}

nlohmann::ordered_json sync_json(const Journal::Synced &s) {
  return {{"status", "ok"},       {"durable", s.durable}, {"resent", s.resent},
          {"dropped", s.dropped}, {"marker", s.marker},   {"rounds", s.rounds}};
}

}  // namespace txnfs::nfs::cli
