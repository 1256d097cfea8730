// What txnfs-nfs prints about its journal: after a journaled COMPOUND, and for `sync`
// (pure; unit-tested).
//
//   journal: 2 lost COMPOUNDs sent again first; COMPOUND 7 kept (3 kept)
//   sync: 3 durable, 2 lost and sent again (marker 7)
#pragma once
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "compound_bridge/client/journal.h"

namespace txnfs::nfs::cli {

std::string journal_line(const Journal &journal, const Journal::Sent &sent);
nlohmann::ordered_json journal_json(const Journal &journal, const Journal::Sent &sent);

std::string sync_line(const Journal::Synced &s);
nlohmann::ordered_json sync_json(const Journal::Synced &s);

}  // namespace txnfs::nfs::cli
