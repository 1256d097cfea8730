// txnfs::nfs::Journal -- keeps lazy COMPOUNDs until they are durable, and sends the ones a
// server restart lost again, whole, in order, each exactly once.
//
// A COMPOUND tagged "txn-lazy" commits lazily on txnfs's NFS server: its reply comes
// before it is durable, and a crash of the server may lose it -- whole, and only together
// with every later lazy one (the lost ones are a suffix of the commit order; durable ones
// are never lost). The write verifier changes when the server restarts, but that alone
// does not say WHICH COMPOUNDs were lost. The journal makes that exact:
//
//  - send() appends to the COMPOUND a write of its marker, the file MARKER_DIR/ID in the
//    export's root, holding the COMPOUND's sequence number in the journal. The marker is
//    written in the same transaction, so it survives exactly when the COMPOUND does: a
//    marker holding S says that COMPOUNDs <= S took effect and later ones did not.
//  - After NFS4_OK the COMPOUND (operations and data, tag, write verifier) is kept as
//    entry N of the directory (saved and fsync'ed before it is sent, as pending).
//  - Before a new COMPOUND, send() reads the marker (when anything is kept) and sends the
//    kept entries above it again, in order, each with its own sequence number.
//  - sync() commits a durable transaction that reads the marker -- its commit makes every
//    earlier lazy commit durable -- then drops the entries <= S (durable), sends the rest
//    again, and repeats until nothing is kept.
//
// A COMPOUND whose reply was never seen (the connection broke; the client stopped) stays
// pending; the next use of the journal asks the marker whether it took effect: kept if it
// did, dropped if not (it is then reported, never sent again).
//
//   txnfs::nfs::Client client({.port = 2049});
//   txnfs::nfs::Journal journal("/var/lib/app/nfs-journal");
//   auto sent = journal.send(client, {{.kind = OpKind::kMkdir, .path = "/d", .mode = 0755}});
//   if (!sent.result.ok()) ...
//   journal.sync(client);   // everything durable, nothing kept
//
// The marker directory is visible in the export; it and the marker must be left alone.
// One process uses a journal at a time (the constructor waits for its lock). Other clients
// may change the export meanwhile, but a COMPOUND sent again meets their changes: it may
// then fail (an Error; the journal keeps it).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "compound_bridge/client/journal_format.h"
#include "compound_bridge/client/nfs_client.h"

namespace txnfs::nfs {

class JournalDir;

class Journal {
 public:
  // Sends a Compound with a tag: Compound::execute, or a caller's retrying wrapper.
  using Executor = std::function<CompoundResult(Compound &, std::string_view tag)>;

  // Opens (or creates) the journal in DIR, which must be a journal or empty or missing
  // (its parent must exist). Throws Error.
  explicit Journal(const std::string &dir);
  ~Journal();
  Journal(const Journal &) = delete;
  Journal &operator=(const Journal &) = delete;

  const std::string &dir() const;
  const std::string &id() const;
  // "/.txnfs-nfs/ID": the marker's path below the export.
  std::string marker_path() const;
  // Sequence numbers of the kept entries, ascending.
  std::vector<uint64_t> kept() const;
  JournalEntry entry(uint64_t seq) const;

  struct Sent {
    CompoundResult result;  // ops: OPS' results, then the marker write's
    uint64_t seq = 0;       // the COMPOUND's sequence number (kept when result.ok())
    size_t resent = 0;      // lost COMPOUNDs sent again before it
    size_t dropped = 0;     // pending COMPOUNDs found not to have taken effect
  };
  // Whether OPS with the marker write fit the session.
  Fit fit(Client &client, const std::vector<Operation> &ops, std::string_view tag = kLazyTag) const;
  // Sends OPS (plus the marker write) as one COMPOUND with TAG (which must start with
  // "txn": only a transaction is all-or-nothing), after sending lost ones again; keeps it
  // when it succeeds. OPS' data is copied. Throws Error when the server cannot be asked,
  // the marker is missing or garbled, or a COMPOUND sent again fails.
  Sent send(Client &client, const std::vector<Operation> &ops, std::string_view tag = kLazyTag,
            const Executor &execute = {});

  struct Synced {
    size_t durable = 0;   // entries found durable as first sent (no longer kept)
    size_t resent = 0;    // entries found lost and sent again (durable now, no longer kept)
    size_t dropped = 0;   // pending COMPOUNDs found not to have taken effect
    uint64_t marker = 0;  // the marker's last value
    int rounds = 0;       // durable marker reads
  };
  // Makes everything durable and keeps nothing. Throws as send() does.
  Synced sync(Client &client, const Executor &execute = {});

 private:
  struct Settled;
  struct Built;
  void ensure_marker(Client &client, const Executor &execute);
  uint64_t read_marker(Client &client, std::string_view tag, const Executor &execute);
  Settled settle(uint64_t marker);
  std::vector<uint64_t> resend_after(Client &client, uint64_t marker, const Executor &execute);

  std::unique_ptr<JournalDir> dir_;
};

}  // namespace txnfs::nfs
