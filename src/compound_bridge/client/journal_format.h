// The files of a txnfs-nfs journal (journal.h), encoded and decoded (pure; unit-tested).
//
// A journal directory holds:
//   journal      JournalState: "txnfs-nfs journal 1\n" then one JSON object
//   N            the COMPOUND with sequence number N (decimal), sent and answered NFS4_OK:
//                "txnfs-nfs entry 1\n", one JSON line (seq, tag, verifier, ops with the
//                byte count of each write's data), then every write's data in op order
//   N.pending    the same, saved before the COMPOUND is sent: its reply was not seen
//   lock         flock()ed by the process using the journal
// Each file is written as a temporary file, fsync'ed, renamed into place, and the
// directory fsync'ed: a file is either whole or absent.
//
// The marker (on the server): the file MARKER_DIR/ID below the export, holding "N\n": the
// sequence number of the last journaled COMPOUND that took effect there. Every journaled
// COMPOUND writes it inside its own transaction.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compound_bridge/client/nfs_client.h"

namespace txnfs::nfs {

// The tag of a lazy COMPOUND: the bridge's default lazy_tag_prefix.
inline constexpr std::string_view kLazyTag = "txn-lazy";
// The directory of the markers, in the export's root.
inline constexpr std::string_view kMarkerDir = ".txnfs-nfs";

struct JournalState {
  std::string id;        // 32 lower-case hex digits, random: the marker's name
  uint64_t next = 1;     // the sequence number the next new COMPOUND gets
  uint64_t durable = 0;  // every COMPOUND up to this number is durable (no longer kept)
  bool marker = false;   // the marker exists on the server (holding at least `durable`)

  bool operator==(const JournalState &) const = default;
};

std::string encode_state(const JournalState &s);
// Throws Error saying what is wrong.
JournalState decode_state(std::string_view text);
// A new random id.
std::string new_journal_id();

struct JournalEntry {
  uint64_t seq = 0;
  std::string tag;             // sent with this tag (again, when it is sent again)
  std::string verifier;        // 8 bytes: the write verifier its marker WRITE got; empty if unknown
  std::vector<Operation> ops;  // without the marker write

  bool operator==(const JournalEntry &) const = default;
};

// Throws Error for a path that is not UTF-8 (the JSON line holds paths as text).
std::string encode_entry(const JournalEntry &e);
// Throws Error saying what is wrong (truncated, garbled, trailing bytes).
JournalEntry decode_entry(std::string_view bytes);

// The name of an entry's file: "N", or "N.pending".
std::string entry_name(uint64_t seq, bool pending);
struct EntryName {
  uint64_t seq = 0;
  bool pending = false;
};
// std::nullopt for any other name.
std::optional<EntryName> parse_entry_name(std::string_view name);

// The marker's content for sequence number SEQ, and back (std::nullopt: not a marker).
std::string marker_text(uint64_t seq);
std::optional<uint64_t> parse_marker(std::string_view text);

// The verifier as 16 hex digits ("" for none), and back (throws Error).
std::string verifier_hex(std::string_view verifier);
std::string verifier_from_hex(std::string_view hex);

}  // namespace txnfs::nfs
