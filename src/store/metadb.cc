#include "store/metadb.h"

#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uuid/uuid.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "store/error.h"
#include "store/fault_point.h"
#include "store/handle_journal.h"
#include "store/schema_sql.h"

namespace txnfs {

namespace {

// Random (version 4) UUIDs for handle rows. libuuid's uuid_generate makes six system
// calls per UUID (getrandom, and the pid, uid and thread id it mixes into its fallback
// generator), and every create needs one; so the random bytes come from a buffer per
// thread that one getrandom(2) fills for 256 UUIDs. A forked child refills before its
// first UUID (the fork epoch), so parent and child never hand out the same bytes.
std::atomic<uint64_t> fork_epoch{1};

std::string new_uuid() {
  static const int registered = pthread_atfork(nullptr, nullptr, [] { fork_epoch.fetch_add(1); });
  (void)registered;
  struct Pool {
    unsigned char bytes[256 * 16];
    size_t used = sizeof bytes;
    uint64_t epoch = 0;
  };
  thread_local Pool pool;
  uint64_t epoch = fork_epoch.load(std::memory_order_relaxed);
  if (pool.used == sizeof pool.bytes || pool.epoch != epoch) {
    size_t got = 0;
    while (got < sizeof pool.bytes) {
      ssize_t n = ::getrandom(pool.bytes + got, sizeof pool.bytes - got, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += size_t(n);
    }
    if (got < sizeof pool.bytes) {  // (no getrandom: libuuid finds its own randomness)
      uuid_t u;
      uuid_generate(u);
      char s[37];
      uuid_unparse_lower(u, s);
      return s;
    }
    pool.used = 0;
    pool.epoch = epoch;
  }
  unsigned char *u = pool.bytes + pool.used;
  pool.used += 16;
  u[6] = (u[6] & 0x0f) | 0x40;  // version 4
  u[8] = (u[8] & 0x3f) | 0x80;  // RFC 4122 variant
  char s[37];
  uuid_unparse_lower(u, s);
  return s;
}

}  // namespace

// Binds on construction order, resets the statement when it goes out of scope.
class MetaDb::Stmt {
 public:
  Stmt(MetaDb &db, sqlite3_stmt *s) : db_(db), s_(s) {}
  ~Stmt() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  Stmt &bind(int i, int64_t v) { return check(sqlite3_bind_int64(s_, i, v)); }
  Stmt &bind(int i, const std::string &v) {
    return check(sqlite3_bind_text(s_, i, v.data(), int(v.size()), SQLITE_TRANSIENT));
  }
  Stmt &bind_blob(int i, const std::string &v) {
    return check(sqlite3_bind_blob(s_, i, v.data(), int(v.size()), SQLITE_TRANSIENT));
  }
  Stmt &bind_null(int i) { return check(sqlite3_bind_null(s_, i)); }
  // True while a row is available.
  bool step() {
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw Error(fmt::format("metadata database {}: {}", db_.path_, sqlite3_errmsg(db_.db_)));
  }
  int64_t i64(int col) { return sqlite3_column_int64(s_, col); }
  bool null(int col) { return sqlite3_column_type(s_, col) == SQLITE_NULL; }
  std::string text(int col) {
    auto p = static_cast<const char *>(sqlite3_column_blob(s_, col));
    return p ? std::string(p, sqlite3_column_bytes(s_, col)) : std::string();
  }

 private:
  Stmt &check(int rc) {
    if (rc != SQLITE_OK)
      throw Error(fmt::format("metadata database {}: {}", db_.path_, sqlite3_errmsg(db_.db_)));
    return *this;
  }
  MetaDb &db_;
  sqlite3_stmt *s_;
};

MetaDb::MetaDb(sqlite3 *db, std::string path) : db_(db), path_(std::move(path)) {}

MetaDb::~MetaDb() {
  try {
    flush_handles(true);
  } catch (const std::exception &) {
    // Still in the journal: the next mount's recovery writes them.
  }
  for (auto s :
       {get_meta_,   set_meta_,    get_handle_,    put_handle_,  del_handle_,  set_name_,
        clear_name_, all_handles_, count_handles_, open_txn_,    commit_txn_,  lazy_txn_,
        del_txn_,    committed_,   all_txns_,      del_undo_,    insert_undo_, orphan_undo_,
        add_damage_, open_damage_, accept_damage_, rollback_txn_})
    sqlite3_finalize(s);
  sqlite3_close(db_);
}

// Additive upgrade (see schema.sql): drop the views, run schema.sql again, all in one
// SQLite transaction, then make it durable. A crash leaves the old version intact.
void MetaDb::upgrade_from(int version) {
  RecursiveMutexLock g(mu_);
  exec("BEGIN IMMEDIATE");
  try {
    std::vector<std::string> views;
    sqlite3_stmt *s = nullptr;
    if (sqlite3_prepare_v2(db_, "SELECT name FROM sqlite_master WHERE type = 'view'", -1, &s,
                           nullptr) != SQLITE_OK)
      throw Error(fmt::format("metadata database {}: {}", path_, sqlite3_errmsg(db_)));
    while (sqlite3_step(s) == SQLITE_ROW)
      views.emplace_back(reinterpret_cast<const char *>(sqlite3_column_text(s, 0)));
    sqlite3_finalize(s);
    for (const std::string &v : views) exec(fmt::format("DROP VIEW \"{}\"", v).c_str());
    exec(kSchemaSql);
    exec(fmt::format("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '{}')",
                     kSchemaVersion)
             .c_str());
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  sync();
  upgraded_from_ = version;
}

void MetaDb::exec(const char *sql) {
  char *msg = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &msg) != SQLITE_OK) {
    std::string m = msg ? msg : sqlite3_errmsg(db_);
    sqlite3_free(msg);
    throw Error(fmt::format("metadata database {}: {}", path_, m));
  }
}

sqlite3_stmt *MetaDb::prep(const char *sql) {
  sqlite3_stmt *s = nullptr;
  if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr) != SQLITE_OK)
    throw Error(fmt::format("metadata database {}: {}", path_, sqlite3_errmsg(db_)));
  return s;
}

void MetaDb::prepare_all() {
  get_meta_ = prep("SELECT value FROM meta WHERE key = ?1");
  set_meta_ = prep("INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)");
  get_handle_ = prep(
      "SELECT nodeid, generation, uuid, ino, fh, type, parent, name FROM handles "
      "WHERE nodeid = ?1");
  put_handle_ = prep(
      "INSERT OR REPLACE INTO handles(nodeid, generation, uuid, ino, fh, type, parent, name) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  del_handle_ = prep("DELETE FROM handles WHERE nodeid = ?1");
  set_name_ = prep("UPDATE handles SET parent = ?2, name = ?3 WHERE nodeid = ?1");
  clear_name_ =
      prep("UPDATE handles SET parent = NULL, name = NULL WHERE parent = ?1 AND name = ?2");
  all_handles_ = prep(
      "SELECT nodeid, generation, uuid, ino, fh, type, parent, name FROM handles "
      "ORDER BY nodeid");
  count_handles_ = prep("SELECT count(*) FROM handles");
  open_txn_ = prep(
      "INSERT OR IGNORE INTO txns(id, state, uid, pid, flags, started) "
      "VALUES (?1, 'active', ?2, ?3, ?4, ?5)");
  commit_txn_ = prep(
      "INSERT INTO txns(id, state, uid, pid, flags, started, ended) "
      "VALUES (?1, 'committed', ?2, ?3, ?4, ?5, strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) "
      "ON CONFLICT(id) DO UPDATE SET state = 'committed', ended = excluded.ended");
  rollback_txn_ = prep(
      "INSERT INTO txns(id, state, uid, pid, flags, started) "
      "VALUES (?1, 'active', ?2, ?3, ?4, ?5) "
      "ON CONFLICT(id) DO UPDATE SET state = 'active', ended = NULL");
  lazy_txn_ = prep(
      "INSERT INTO txns(id, state, uid, pid, flags, started, ended) "
      "VALUES (?1, 'active', ?2, ?3, ?4, ?5, ?6) "
      "ON CONFLICT(id) DO UPDATE SET ended = excluded.ended WHERE txns.state = 'active'");
  del_txn_ = prep("DELETE FROM txns WHERE id = ?1");
  committed_ = prep("SELECT id FROM txns WHERE state = 'committed' ORDER BY id");
  all_txns_ = prep("SELECT id, state FROM txns ORDER BY id");
  del_undo_ = prep("DELETE FROM undo_records WHERE txid = ?1");
  insert_undo_ = prep(
      "INSERT OR REPLACE INTO undo_records(txid, seq, kind, ino, generation, dir, name, dir2, "
      "name2, off, len) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11 "
      "WHERE EXISTS (SELECT 1 FROM txns WHERE id = ?1)");
  orphan_undo_ = prep(
      "SELECT DISTINCT txid FROM undo_records WHERE txid NOT IN (SELECT id FROM txns) "
      "ORDER BY txid");
  add_damage_ = prep(
      "INSERT INTO damage(source, txid, problem, kept) SELECT ?1, ?2, ?3, ?4 "
      "WHERE NOT EXISTS (SELECT 1 FROM damage WHERE accepted IS NULL AND txid IS ?2 "
      "AND problem = ?3)");
  open_damage_ = prep(
      "SELECT id, found, source, txid, problem, kept FROM damage WHERE accepted IS NULL "
      "ORDER BY id");
  accept_damage_ = prep(
      "UPDATE damage SET accepted = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') "
      "WHERE accepted IS NULL AND id <= ?1");
}

std::unique_ptr<MetaDb> MetaDb::create(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) throw Error(fmt::format("{} already exists", path));
  sqlite3 *db = nullptr;
  int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  std::unique_ptr<MetaDb> m(new MetaDb(db, path));
  if (rc != SQLITE_OK)
    throw Error(fmt::format("cannot create metadata database {}: {}", path, sqlite3_errstr(rc)));
  m->exec("PRAGMA journal_mode = WAL");
  m->exec("BEGIN");
  m->exec(kSchemaSql);
  m->exec("COMMIT");
  m->exec("PRAGMA synchronous = FULL");
  m->prepare_all();
  m->set_meta("schema_version", std::to_string(kSchemaVersion));
  m->set_meta("store_uuid", new_uuid());
  m->sync();
  m->exec("PRAGMA synchronous = NORMAL");
  return m;
}

std::unique_ptr<MetaDb> MetaDb::open(const std::string &path, bool readonly) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw Error(fmt::format("no metadata database at {}", path),
                "the store was not initialised (txnfs init) or its internal area was removed");
  sqlite3 *db = nullptr;
  int flags = (readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) | SQLITE_OPEN_NOMUTEX;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  std::unique_ptr<MetaDb> m(new MetaDb(db, path));
  if (rc != SQLITE_OK)
    throw Error(fmt::format("cannot open metadata database {}: {}", path, sqlite3_errstr(rc)));
  sqlite3_busy_timeout(db, 10000);

  // Read the version before anything else: a file that is not a database (or is
  // damaged at its header) fails here, before any write could touch it.
  int version = -1;
  {
    sqlite3_stmt *s = nullptr;
    rc = sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &s, nullptr);
    if (rc == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) version = sqlite3_column_int(s, 0);
    std::string err = sqlite3_errmsg(db);
    sqlite3_finalize(s);
    if (version < 0)
      throw Error(fmt::format("metadata database {} is unreadable: {}", path, err),
                  "the file is corrupt; restore it from a backup (txnfs never overwrites it)");
  }
  bool upgrade = version >= kOldestUpgradable && version < kSchemaVersion;
  if (version != kSchemaVersion && !upgrade)
    throw Error(fmt::format("metadata database {} has schema version {}, this txnfs knows {}", path,
                            version, kSchemaVersion),
                version > kSchemaVersion ? "use the newer txnfs that created it"
                                         : "the database is not a txnfs database or is damaged");
  if (upgrade && readonly)
    throw Error(fmt::format("metadata database {} has schema version {}; this txnfs upgrades "
                            "it to {} when it opens it for writing",
                            path, version, kSchemaVersion),
                "mount the store (or run txnfs fsck on it) once with this txnfs");
  {
    sqlite3_stmt *s = nullptr;
    rc = sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &s, nullptr);
    std::string result;
    while (rc == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
      auto t = reinterpret_cast<const char *>(sqlite3_column_text(s, 0));
      if (t && std::string_view(t) != "ok") result += std::string(t) + "; ";
    }
    std::string err = sqlite3_errmsg(db);
    int final = sqlite3_finalize(s);
    if (rc != SQLITE_OK || final != SQLITE_OK) result += err;
    if (!result.empty())
      throw Error(fmt::format("metadata database {} is corrupt: {}", path, result),
                  "restore it from a backup (txnfs never overwrites it)");
  }
  if (!readonly) {
    // Durability rests on the WAL (sync_files): a database someone switched to another
    // journal mode is switched back, or refused.
    sqlite3_stmt *s = nullptr;
    std::string mode;
    rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &s, nullptr);
    if (rc == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
      mode = reinterpret_cast<const char *>(sqlite3_column_text(s, 0));
    std::string err = sqlite3_errmsg(db);
    sqlite3_finalize(s);
    if (mode != "wal")
      throw Error(fmt::format("metadata database {} cannot use its write-ahead log: {}", path,
                              mode.empty() ? err : "journal mode " + mode),
                  "another program may hold it open; stop it and mount again");
    m->exec("PRAGMA synchronous = NORMAL");
  }
  if (upgrade) m->upgrade_from(version);
  try {
    m->prepare_all();
  } catch (const Error &e) {
    throw Error(fmt::format("metadata database {} lacks txnfs tables: {}", path, e.what()));
  }
  return m;
}

std::optional<std::string> MetaDb::get_meta(const std::string &key) {
  RecursiveMutexLock g(mu_);
  Stmt s(*this, get_meta_);
  s.bind(1, key);
  if (!s.step()) return std::nullopt;
  return s.text(0);
}

void MetaDb::set_meta(const std::string &key, const std::string &value) {
  RecursiveMutexLock g(mu_);
  Stmt s(*this, set_meta_);
  s.bind(1, key).bind(2, value);
  s.step();
}

static HandleRow read_handle(auto &s) {
  HandleRow r;
  r.nodeid = s.i64(0);
  r.generation = s.i64(1);
  r.uuid = s.text(2);
  r.ino = s.i64(3);
  r.fh = s.text(4);
  r.type = uint32_t(s.i64(5));
  if (!s.null(6)) {
    r.parent = s.i64(6);
    r.name = s.text(7);
  }
  return r;
}

std::optional<HandleRow> MetaDb::handle(uint64_t nodeid) {
  RecursiveMutexLock g(mu_);
  if (auto it = kept_at_.find(nodeid); it != kept_at_.end()) {
    const HandleChange &c = kept_[it->second];
    if (c.removal) return std::nullopt;
    return c.row;
  }
  Stmt s(*this, get_handle_);
  s.bind(1, int64_t(nodeid));
  if (!s.step()) return std::nullopt;
  return read_handle(s);
}

void MetaDb::put_handle(HandleRow &row) {
  RecursiveMutexLock g(mu_);
  removed_.erase(row.nodeid);  // a new object may reuse a removed one's inode number
  if (row.uuid.empty()) row.uuid = new_uuid();
  if (!journal_) return write_handle(row);
  keep(HandleChange{false, row});
}

void MetaDb::keep(HandleChange change) {
  journal_->append(change);  // (throws: nothing kept, as a failed statement)
  kept_at_[change.row.nodeid] = kept_.size();
  kept_.push_back(std::move(change));
  if (kept_.size() < kMaxKeptHandles) return;
  try {
    flush_handles();
  } catch (const Error &) {
    // The change is kept and journaled: this caller's part succeeded. The next flush
    // tries again (and its caller hears of the error).
  }
}

void MetaDb::defer_handles(std::unique_ptr<HandleJournal> journal) {
  RecursiveMutexLock g(mu_);
  flush_handles();
  journal_ = std::move(journal);
}

void MetaDb::flush_handles(bool settle) {
  RecursiveMutexLock g(mu_);
  if (!kept_.empty()) {
    // In the order of the calls: the table ends as if each had been written at once. On
    // an error everything stays kept (and journaled) for the next flush.
    transaction([&] {
      mu_.assert_held();  // (transaction() runs it under mu_)
      for (const HandleChange &c : kept_) {
        if (!c.removal) {
          write_handle(c.row);
          continue;
        }
        Stmt s(*this, del_handle_);
        s.bind(1, int64_t(c.row.nodeid));
        s.step();
      }
    });
    kept_.clear();
    kept_at_.clear();
    journal_written_ = true;
  }
  // The journal goes only once what it holds is durable in SQLite: truncated first, a
  // syncfs in between could make the truncation durable and not the WAL's pages.
  if (settle && journal_written_) {
    sync_files();
    journal_->clear();
    journal_written_ = false;
  }
}

void MetaDb::write_handle(const HandleRow &row) {
  Stmt s(*this, put_handle_);
  s.bind(1, int64_t(row.nodeid)).bind(2, int64_t(row.generation)).bind(3, row.uuid);
  s.bind(4, int64_t(row.ino)).bind_blob(5, row.fh).bind(6, int64_t(row.type));
  if (row.parent) s.bind(7, int64_t(*row.parent)).bind(8, row.name);
  else s.bind_null(7).bind_null(8);
  s.step();
}

bool MetaDb::repair_handle(HandleRow &row) {
  RecursiveMutexLock g(mu_);
  if (removed_.count(row.nodeid)) return false;
  put_handle(row);
  return true;
}

void MetaDb::remove_handle(uint64_t nodeid) {
  RecursiveMutexLock g(mu_);
  if (journal_) {
    HandleChange c;
    c.removal = true;
    c.row.nodeid = nodeid;
    keep(std::move(c));
  } else {
    Stmt s(*this, del_handle_);
    s.bind(1, int64_t(nodeid));
    s.step();
  }
  if (removed_.insert(nodeid).second) {
    removed_order_.push_back(nodeid);
    if (removed_order_.size() > kRecentlyRemoved) {
      removed_.erase(removed_order_.front());
      removed_order_.pop_front();
    }
  }
}

void MetaDb::set_handle_name(uint64_t nodeid, std::optional<uint64_t> parent,
                             const std::string &name) {
  RecursiveMutexLock g(mu_);
  if (int e = TXNFS_FAULT("db.handle_name"))
    throw Error(e, fmt::format("metadata database {}: name of handle row {}", path_, nodeid));
  flush_handles();
  Stmt s(*this, set_name_);
  s.bind(1, int64_t(nodeid));
  if (parent) s.bind(2, int64_t(*parent)).bind(3, name);
  else s.bind_null(2).bind_null(3);
  s.step();
}

void MetaDb::clear_handle_name(uint64_t parent, const std::string &name) {
  RecursiveMutexLock g(mu_);
  if (int e = TXNFS_FAULT("db.handle_name"))
    throw Error(
        e, fmt::format("metadata database {}: name {} in {} of a handle row", path_, name, parent));
  flush_handles();
  Stmt s(*this, clear_name_);
  s.bind(1, int64_t(parent)).bind(2, name);
  s.step();
}

void MetaDb::for_each_handle(const std::function<void(const HandleRow &)> &fn) {
  RecursiveMutexLock g(mu_);
  flush_handles();
  Stmt s(*this, all_handles_);
  while (s.step()) fn(read_handle(s));
}

uint64_t MetaDb::handle_count() {
  RecursiveMutexLock g(mu_);
  flush_handles();
  Stmt s(*this, count_handles_);
  s.step();
  return uint64_t(s.i64(0));
}

uint64_t MetaDb::new_txn_id() {
  // An id of the reserved block needs no SQLite and so not mu_, which the group commit
  // holds across its fdatasync: begins waited up to 2 ms behind it.
  {
    MutexLock i(ids_mu_);
    if (next_txn_id_ < txn_ids_end_) return next_txn_id_++;
  }
  RecursiveMutexLock g(mu_);
  MutexLock i(ids_mu_);
  if (next_txn_id_ >= txn_ids_end_) {  // (else another begin reserved a block meanwhile)
    i.unlock();
    // Past every id this store has used: rows still present, AUTOINCREMENT's high mark
    // (stores from before the reservations) and the last reservation.
    uint64_t base = 0;
    transaction([&] {
      auto max_of = [&](const char *sql) {
        sqlite3_stmt *st = prep(sql);
        uint64_t v = 0;
        {
          Stmt s(*this, st);
          if (s.step()) v = uint64_t(s.i64(0));
        }
        sqlite3_finalize(st);
        return v;
      };
      base = std::max({max_of("SELECT coalesce(max(id), 0) FROM txns"),
                       max_of("SELECT coalesce(max(seq), 0) FROM sqlite_sequence "
                              "WHERE name = 'txns'"),
                       get_meta("txn_ids_reserved")
                           ? uint64_t(std::stoull(*get_meta("txn_ids_reserved")))
                           : uint64_t(0)});
      set_meta("txn_ids_reserved", std::to_string(base + kTxnIdBlock));
    });
    sync();  // durable before any of them names a log
    i.lock();
    next_txn_id_ = base + 1;
    txn_ids_end_ = base + kTxnIdBlock + 1;
  }
  return next_txn_id_++;
}

namespace {
void bind_row(auto &s, const MetaDb::TxnRow &t) {
  s.bind(1, int64_t(t.id)).bind(2, int64_t(t.uid)).bind(3, int64_t(t.pid));
  s.bind(4, int64_t(t.flags)).bind(5, t.started);
}
}  // namespace

void MetaDb::record_open_txn(const TxnRow &t) {
  RecursiveMutexLock g(mu_);
  Stmt s(*this, open_txn_);
  bind_row(s, t);
  s.step();
}

void MetaDb::record_lazy_txn(const TxnRow &t, const std::string &ended) {
  RecursiveMutexLock g(mu_);
  Stmt s(*this, lazy_txn_);
  bind_row(s, t);
  s.bind(6, ended);
  s.step();
}

void MetaDb::note_rollback(uint64_t id) {
  std::time_t now = std::time(nullptr);
  record_open_txn(TxnRow{id, 0, 0, 0, fmt::format("{:%Y-%m-%dT%H:%M:%S}.000Z", fmt::gmtime(now))});
}

void MetaDb::record_committed_txn(const TxnRow &t) {
  RecursiveMutexLock g(mu_);
  if (int e = TXNFS_FAULT("db.commit_record"))
    throw Error(e, fmt::format("metadata database {}: commit record of {}", path_, t.id));
  Stmt s(*this, commit_txn_);
  bind_row(s, t);
  s.step();
}

namespace {
// Finalizes a statement prepared for one use (the rare calls below) on every way out.
struct Finalize {
  sqlite3_stmt *s;
  ~Finalize() { sqlite3_finalize(s); }
};
}  // namespace

void MetaDb::record_prepared_txn(const TxnRow &t, const std::string &gid) {
  RecursiveMutexLock g(mu_);
  {
    Stmt s(*this, open_txn_);
    bind_row(s, t);
    s.step();
  }
  Finalize f{prep("INSERT INTO prepared(txid, gid) VALUES (?1, ?2)")};
  Stmt s(*this, f.s);
  s.bind(1, int64_t(t.id)).bind(2, gid);
  s.step();
}

void MetaDb::forget_prepared(uint64_t txid) {
  RecursiveMutexLock g(mu_);
  Finalize f{prep("DELETE FROM prepared WHERE txid = ?1")};
  Stmt s(*this, f.s);
  s.bind(1, int64_t(txid));
  s.step();
}

std::vector<MetaDb::PreparedRow> MetaDb::prepared_txns() {
  RecursiveMutexLock g(mu_);
  Finalize f{prep("SELECT txid, gid, prepared FROM prepared ORDER BY txid")};
  Stmt s(*this, f.s);
  std::vector<PreparedRow> out;
  while (s.step()) out.push_back({uint64_t(s.i64(0)), s.text(1), s.text(2)});
  return out;
}

void MetaDb::record_rolling_back(const TxnRow &t) {
  RecursiveMutexLock g(mu_);
  Stmt s(*this, rollback_txn_);
  bind_row(s, t);
  s.step();
}

void MetaDb::delete_txn(uint64_t id) {
  transaction([&] {
    Stmt s(*this, del_txn_);
    s.bind(1, int64_t(id));
    s.step();
    delete_undo_records(id);
  });
}

void MetaDb::clear_txns() {
  transaction([&] {
    exec("DELETE FROM txns");
    exec("DELETE FROM undo_records");
    exec("DELETE FROM prepared");
  });
}

void MetaDb::delete_undo_records(uint64_t txid) {
  RecursiveMutexLock g(mu_);
  Stmt s(*this, del_undo_);
  s.bind(1, int64_t(txid));
  s.step();
}

void MetaDb::insert_undo_records(const std::vector<UndoRecordRow> &rows) {
  auto opt = [](Stmt &s, int i, const std::optional<uint64_t> &v) {
    if (v) s.bind(i, int64_t(*v));
    else s.bind_null(i);
  };
  auto str = [](Stmt &s, int i, const std::string &v) {
    if (v.empty()) s.bind_null(i);
    else s.bind(i, v);
  };
  transaction([&] {
    for (const UndoRecordRow &r : rows) {
      Stmt s(*this, insert_undo_);
      s.bind(1, int64_t(r.txid)).bind(2, int64_t(r.seq)).bind(3, r.kind);
      s.bind(4, int64_t(r.ino)).bind(5, int64_t(r.generation));
      opt(s, 6, r.dir);
      str(s, 7, r.name);
      opt(s, 8, r.dir2);
      str(s, 9, r.name2);
      opt(s, 10, r.off);
      opt(s, 11, r.len);
      s.step();
    }
  });
}

std::vector<uint64_t> MetaDb::orphan_undo_records() {
  RecursiveMutexLock g(mu_);
  Stmt s(*this, orphan_undo_);
  std::vector<uint64_t> out;
  while (s.step()) out.push_back(uint64_t(s.i64(0)));
  return out;
}

void MetaDb::add_damage(const std::string &source, uint64_t txid,
                        const std::vector<std::string> &problems, const std::string &kept) {
  transaction([&] {
    for (const std::string &p : problems) {
      Stmt s(*this, add_damage_);
      s.bind(1, source).bind(2, int64_t(txid)).bind(3, p);
      if (kept.empty()) s.bind_null(4);
      else s.bind(4, kept);
      s.step();
    }
  });
  sync();
}

std::vector<DamageRow> MetaDb::open_damage() {
  std::lock_guard g(mu_);
  Stmt s(*this, open_damage_);
  std::vector<DamageRow> out;
  while (s.step()) {
    DamageRow r;
    r.id = uint64_t(s.i64(0));
    r.found = s.text(1);
    r.source = s.text(2);
    if (!s.null(3)) r.txid = uint64_t(s.i64(3));
    r.problem = s.text(4);
    r.kept = s.text(5);
    out.push_back(std::move(r));
  }
  return out;
}

uint64_t MetaDb::accept_damage(uint64_t upto) {
  uint64_t n = 0;
  {
    std::lock_guard g(mu_);
    Stmt s(*this, accept_damage_);
    s.bind(1, int64_t(upto));
    s.step();
    n = uint64_t(sqlite3_changes(db_));
  }
  sync();
  return n;
}

std::vector<uint64_t> MetaDb::committed_txns() {
  RecursiveMutexLock g(mu_);
  Stmt s(*this, committed_);
  std::vector<uint64_t> out;
  while (s.step()) out.push_back(uint64_t(s.i64(0)));
  return out;
}

std::vector<std::pair<uint64_t, std::string>> MetaDb::all_txns() {
  RecursiveMutexLock g(mu_);
  Stmt s(*this, all_txns_);
  std::vector<std::pair<uint64_t, std::string>> out;
  while (s.step()) out.emplace_back(uint64_t(s.i64(0)), s.text(1));
  return out;
}

void MetaDb::locked(const std::function<void()> &fn) {
  RecursiveMutexLock g(mu_);
  fn();
}

void MetaDb::transaction(const std::function<void()> &fn) {
  RecursiveMutexLock g(mu_);
  if (tx_depth_ > 0) {
    ++tx_depth_;
    try {
      fn();
    } catch (...) {
      --tx_depth_;
      throw;
    }
    --tx_depth_;
    return;
  }
  exec("BEGIN IMMEDIATE");
  ++tx_depth_;
  try {
    fn();
  } catch (...) {
    --tx_depth_;
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  --tx_depth_;
  exec("COMMIT");
}

// Syncs through SQLite's own file objects. Opening and closing another fd of the
// database or its WAL would drop this process's POSIX (fcntl) locks on it: the next
// other connection to close (sqlite3, txnfs fsck) would then think it was the last,
// checkpoint, and delete the WAL and shm files under this connection, whose later
// commits would go to a deleted file and be lost at the next crash or unmount.
void MetaDb::sync(bool write_kept) {
  RecursiveMutexLock g(mu_);
  if (int e = TXNFS_FAULT("db.sync")) throw Error(e, fmt::format("fsync of {}-wal", path_));
  // Without `write_kept`, kept handle changes stay kept: their journal, synced here,
  // makes them durable (the next mount's recovery replays it), and no SQLite transaction
  // is written for them; flush_handles() does, every StepMirror::kInterval.
  if (write_kept) flush_handles();
  if (!kept_.empty()) journal_->sync();
  sync_files();
  if (kept_.empty() && journal_written_) {  // all it holds is durable in SQLite now
    journal_->clear();
    journal_written_ = false;
  }
}

// Only the WAL: every committed SQLite transaction is in it until a checkpoint copies
// it into the database file, and with `synchronous = NORMAL` SQLite syncs the database
// file after each checkpoint, before the WAL is reused. A sync of the database file here
// would be one more device flush per durable commit with nothing to make durable.
void MetaDb::sync_files() {
  sqlite3_file *f = nullptr;
  if (sqlite3_file_control(db_, "main", SQLITE_FCNTL_JOURNAL_POINTER, &f) != SQLITE_OK || !f ||
      !f->pMethods)
    return;
  int rc = f->pMethods->xSync(f, SQLITE_SYNC_NORMAL);
  if (rc != SQLITE_OK) throw Error(fmt::format("fsync of {}-wal: {}", path_, sqlite3_errstr(rc)));
}

}  // namespace txnfs
