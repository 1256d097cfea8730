// Journal: the protocol with the server. The local files are JournalDir's.
//
// Invariant: an entry is kept only after the server answered NFS4_OK for it, and a kept
// entry > marker is one the server lost -- the marker is written in every journaled
// COMPOUND's transaction, and lost lazy commits are a suffix of the commit order.
#include "compound_bridge/client/journal.h"

#include <set>

#include <fmt/format.h>

#include "compound_bridge/client/journal_dir.h"

namespace txnfs::nfs {
namespace {

constexpr uint32_t kNfs4ErrExist = 17;
constexpr uint32_t kNfs4ErrNoent = 2;
constexpr int kMaxSyncRounds = 8;  // each round after the first means the server lost some

CompoundResult plain_execute(Compound &c, std::string_view tag) { return c.execute(tag); }

std::string failure(const CompoundResult &r) {
  return status_name(r.status) + (r.failed_at.empty() ? "" : " at " + r.failed_at);
}

}  // namespace

struct Journal::Settled {
  size_t dropped = 0;
};

// The COMPOUND of an entry: its operations, then the marker write. E must outlive it
// (the Compound refers to the write data); the marker's text is held here.
struct Journal::Built {
  Built(Client &client, const JournalEntry &e, const std::string &marker_path)
      : text(marker_text(e.seq)), compound(client) {
    for (const Operation &op : e.ops) compound.add(op);
    compound.write(marker_path, text);
  }
  std::string text;
  Compound compound;
};

Journal::Journal(const std::string &dir) : dir_(std::make_unique<JournalDir>(dir)) {}
Journal::~Journal() = default;

const std::string &Journal::dir() const { return dir_->path(); }
const std::string &Journal::id() const { return dir_->state().id; }
std::string Journal::marker_path() const { return fmt::format("/{}/{}", kMarkerDir, id()); }

std::vector<uint64_t> Journal::kept() const { return {dir_->kept().begin(), dir_->kept().end()}; }

JournalEntry Journal::entry(uint64_t seq) const { return dir_->load(seq, false); }

// First use: the marker directory (EXIST is fine), then the marker -- durably, holding
// `durable` -- in a transaction of its own.
void Journal::ensure_marker(Client &client, const Executor &execute) {
  if (dir_->state().marker) return;
  Compound mk(client);
  mk.mkdir(fmt::format("/{}", kMarkerDir), 01777);  // every user's markers, as in /tmp
  CompoundResult r = execute(mk, "");
  if (!r.ok() && r.status != kNfs4ErrExist) {
    throw Error(
        fmt::format("journal: cannot create the marker directory /{}: {}", kMarkerDir, failure(r)));
  }
  Compound w(client);
  std::string text = marker_text(dir_->state().durable);
  w.write(marker_path(), text);
  r = execute(w, "txn");
  if (!r.ok())
    throw Error(fmt::format("journal: cannot create the marker {}: {}", marker_path(), failure(r)));
  JournalState s = dir_->state();
  s.marker = true;
  dir_->save_state(s);
}

uint64_t Journal::read_marker(Client &client, std::string_view tag, const Executor &execute) {
  Compound c(client);
  c.read(marker_path(), 64);
  CompoundResult r = execute(c, tag);
  if (r.status == kNfs4ErrNoent) {
    throw Error(fmt::format(
        "journal {}: the marker {} is missing on the server, so the journal cannot tell "
        "which COMPOUNDs took effect (another server or export? was it removed?)",
        dir(), marker_path()));
  }
  if (!r.ok())
    throw Error(fmt::format("journal: cannot read the marker {}: {}", marker_path(), failure(r)));
  const std::string &text = r.ops[0].data;
  std::optional<uint64_t> s = parse_marker(text);
  if (!s) {
    throw Error(
        fmt::format("journal {}: the marker {} is garbled (it holds '{}', not a "
                    "sequence number)",
                    dir(), marker_path(), text.substr(0, 40)));
  }
  uint64_t last = dir_->next() - 1;
  if (*s > last) {
    throw Error(
        fmt::format("journal {}: the marker {} says {}, but the journal's last "
                    "COMPOUND is {} (a copy of this journal in use elsewhere?)",
                    dir(), marker_path(), *s, last));
  }
  if (*s < dir_->state().durable) {
    throw Error(
        fmt::format("journal {}: the marker {} says {}, but COMPOUNDs up to {} were "
                    "durable (the marker was changed, or the server lost durable data)",
                    dir(), marker_path(), *s, dir_->state().durable));
  }
  return *s;
}

// A pending COMPOUND (its reply never seen) took effect iff MARKER reached it.
Journal::Settled Journal::settle(uint64_t marker) {
  Settled st;
  std::optional<uint64_t> p = dir_->pending();
  if (!p) return st;
  if (marker >= *p) {
    dir_->keep_pending();
    return st;
  }
  JournalState s = dir_->state();
  s.next = *p + 1;  // never reuse its number: a late reply must not be confused with another
  dir_->save_state(s);
  dir_->remove(*p, true);
  st.dropped = 1;
  return st;
}

// Sends the kept entries above MARKER again, in order. Returns their sequence numbers.
std::vector<uint64_t> Journal::resend_after(Client &client, uint64_t marker,
                                            const Executor &execute) {
  std::vector<uint64_t> sent;
  for (uint64_t seq : kept()) {
    if (seq <= marker) continue;
    JournalEntry e = dir_->load(seq, false);
    Built b(client, e, marker_path());
    CompoundResult r = execute(b.compound, e.tag);
    if (!r.ok()) {
      throw Error(
          fmt::format("journal {}: COMPOUND {} was lost by the server and failed when "
                      "sent again: {}; the journal keeps it and the ones after it",
                      dir(), seq, failure(r)));
    }
    e.verifier = r.ops.back().verifier;
    dir_->save(e, false);
    sent.push_back(seq);
  }
  return sent;
}

Fit Journal::fit(Client &client, const std::vector<Operation> &ops, std::string_view tag) const {
  JournalEntry e{.seq = dir_->next(), .tag = std::string(tag), .verifier = {}, .ops = ops};
  return Built(client, e, marker_path()).compound.fit(tag);
}

Journal::Sent Journal::send(Client &client, const std::vector<Operation> &ops, std::string_view tag,
                            const Executor &executor) {
  const Executor &execute = executor ? executor : plain_execute;
  if (!tag.starts_with("txn")) {
    throw Error("journal: a journaled COMPOUND must be a transaction (tag txn...), not '" +
                std::string(tag) + "'");
  }
  Sent sent;
  ensure_marker(client, execute);
  if (!dir_->kept().empty() || dir_->pending()) {
    uint64_t marker = read_marker(client, "", execute);
    sent.dropped = settle(marker).dropped;
    sent.resent = resend_after(client, marker, execute).size();
  }
  JournalEntry e{.seq = dir_->next(), .tag = std::string(tag), .verifier = {}, .ops = ops};
  sent.seq = e.seq;
  Built b(client, e, marker_path());  // a malformed operation throws before anything is saved
  dir_->save(e, true);
  try {
    sent.result = execute(b.compound, e.tag);
  } catch (const CallRefused &) {  // refused as a whole: nothing ran
    dir_->remove(e.seq, true);
    throw;
  } catch (const Error &ex) {
    throw Error(
        fmt::format("{}; COMPOUND {} stays pending in the journal: its next use asks "
                    "the server whether it took effect",
                    ex.what(), e.seq));
  }
  if (!sent.result.ok()) {  // a transaction: rolled back, marker included
    dir_->remove(e.seq, true);
    return sent;
  }
  e.verifier = sent.result.ops.back().verifier;
  dir_->save(e, false);
  return sent;
}

Journal::Synced Journal::sync(Client &client, const Executor &executor) {
  const Executor &execute = executor ? executor : plain_execute;
  Synced out;
  if (!dir_->state().marker) return out;  // nothing was ever sent
  std::set<uint64_t> resent;
  for (;;) {
    if (++out.rounds > kMaxSyncRounds) {
      throw Error(fmt::format("journal {}: the server lost COMPOUNDs {} times in a row", dir(),
                              kMaxSyncRounds));
    }
    // Its durable commit makes every earlier lazy commit durable: what it read is durable.
    uint64_t marker = read_marker(client, "txn", execute);
    out.marker = marker;
    out.dropped += settle(marker).dropped;
    std::vector<uint64_t> durable;
    for (uint64_t seq : kept()) {
      if (seq <= marker) durable.push_back(seq);
    }
    JournalState s = dir_->state();
    s.next = dir_->next();
    s.durable = marker;
    dir_->save_state(s);  // first: entries <= durable left behind are removed when opened
    for (uint64_t seq : durable) dir_->remove(seq, false);
    for (uint64_t seq : durable) out.durable += resent.contains(seq) ? 0 : 1;
    if (dir_->kept().empty()) {
      out.resent = resent.size();
      return out;
    }
    for (uint64_t seq : resend_after(client, marker, execute)) resent.insert(seq);
  }
}

}  // namespace txnfs::nfs
