// MetaDb — the only module that talks to SQLite. Everything txnfs keeps durably
// besides the tree itself goes through here, with prepared statements; the schema
// comes from schema.sql (embedded at build time) and nowhere else.
//
// Thread safety: one connection guarded by a mutex; every public call is atomic. The
// mutex is recursive (transaction(fn) lets fn call the public functions) and ranks 30 in
// the lock hierarchy (src/sync/lock_order.h): a thread holding it — every fn passed to
// transaction() — may take only leaf mutexes, never Txn::mu or TxnBinding::mu_.
// Durability: WAL mode, synchronous=NORMAL — a committed change survives a killed
// process; sync() makes everything committed so far survive a power cut.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "sync/mutex.h"

struct sqlite3;
struct sqlite3_stmt;

namespace txnfs {

class HandleJournal;
struct HandleChange;

inline constexpr int kSchemaVersion = 6;
// Databases from this version on are upgraded in place (see schema.sql).
inline constexpr int kOldestUpgradable = 2;

struct HandleRow {
  uint64_t nodeid = 0;
  uint64_t generation = 0;
  std::string uuid;  // filled in by insert() when empty
  uint64_t ino = 0;
  std::string fh;
  uint32_t type = 0;  // S_IFMT bits
  std::optional<uint64_t> parent;
  std::string name;  // meaningful only when parent is set
};

// One row of undo_records (schema.sql): a copy of one undo step, for inspection.
struct UndoRecordRow {
  uint64_t txid = 0, seq = 0;
  std::string kind;  // "attrs", "data", ...
  uint64_t ino = 0, generation = 0;
  std::optional<uint64_t> dir, dir2, off, len;
  std::string name, name2;  // empty: NULL
};

// One row of the damage table (schema.sql): something a rollback could not restore.
struct DamageRow {
  uint64_t id = 0;
  std::string found, source;
  std::optional<uint64_t> txid;
  std::string problem;
  std::string kept;  // where the undo log was kept ("" if nowhere)
};

class MetaDb {
 public:
  // Creates a new database at `path` from schema.sql. Throws Error if it exists.
  static std::unique_ptr<MetaDb> create(const std::string &path);
  // Opens an existing database; throws Error (with a hint) when it is missing, not a
  // database, corrupt, or of another schema version. Never modifies a database it
  // refuses.
  static std::unique_ptr<MetaDb> open(const std::string &path, bool readonly = false);
  ~MetaDb();

  std::optional<std::string> get_meta(const std::string &key);
  void set_meta(const std::string &key, const std::string &value);

  std::optional<HandleRow> handle(uint64_t nodeid);
  // Inserts `row` (generating its uuid if empty), replacing any row with the same
  // nodeid or ino — a stale row of an object whose inode number was reused.
  void put_handle(HandleRow &row);
  // put_handle for a row a lookup found missing (an object from before txnfs knew the
  // tree, or a row lost to a crash) -- unless the row of that nodeid was removed lately:
  // the lookup may have found the object just before its last name went (plain requests
  // take no locks while no transaction is open, and a handle's LOOKUP "." none), and
  // writing the row now would bring back the row of a dead object. Returns whether it
  // wrote.
  bool repair_handle(HandleRow &row);
  void remove_handle(uint64_t nodeid);
  // Records (parent, name) as the object's name; nullopt parent clears it.
  void set_handle_name(uint64_t nodeid, std::optional<uint64_t> parent, const std::string &name);
  // Clears the name of every row recorded at (parent, name).
  void clear_handle_name(uint64_t parent, const std::string &name);
  void for_each_handle(const std::function<void(const HandleRow &)> &fn);
  uint64_t handle_count();
  // Write-behind of handle rows (store/handle_journal.h): from now on put_handle and
  // remove_handle append the change to `journal` and keep it in memory; flush_handles()
  // writes what is kept in one SQLite transaction; the journal keeps it until it is
  // durable there (flush_handles(true), or a sync() that finds nothing kept). Every
  // other operation on the handle table and sync() flush first -- sync(false) syncs the
  // journal instead (recovery replays it); handle() sees kept changes. The daemon
  // flushes every StepMirror::kInterval; at most kMaxKeptHandles are kept.
  void defer_handles(std::unique_ptr<HandleJournal> journal);
  // `settle`: then also makes them durable and empties the journal (the periodic flush).
  void flush_handles(bool settle = false);
  static constexpr size_t kMaxKeptHandles = 1024;

  // Transaction records (see the txns table in schema.sql). Recovery reads only the
  // commit records ('committed' rows); the other rows are for inspection and are written
  // off the request path (TxnManager::mirror_rows), so begin and a lazy commit write
  // nothing here.
  //
  // A new transaction id, never handed out before on this store (also across crashes):
  // ids are reserved in blocks of kTxnIdBlock, each reservation durable before its first
  // id is used.
  uint64_t new_txn_id();
  static constexpr uint64_t kTxnIdBlock = 4096;
  struct TxnRow {
    uint64_t id;
    uint32_t uid;
    int32_t pid;
    uint32_t flags;
    std::string started;  // UTC, like strftime('%Y-%m-%dT%H:%M:%fZ')
  };
  // An open transaction's row ('active'); nothing if the row exists.
  void record_open_txn(const TxnRow &t);
  // A lazily committed transaction that is not durable yet: 'active' with `ended` (the
  // lazy_commits view). Not a commit record. Never touches a 'committed' row.
  void record_lazy_txn(const TxnRow &t, const std::string &ended);
  // The commit record: the row, inserted or updated to 'committed'.
  void record_committed_txn(const TxnRow &t);
  // A transaction about to be rolled back: its row, inserted or set back to 'active'
  // (a commit whose record was written but could not be made durable is rolled back; a
  // crash during that rollback must not find the record saying committed).
  void record_rolling_back(const TxnRow &t);
  // Recovery is about to roll `id` back: an 'active' row (nothing if it has a row).
  void note_rollback(uint64_t id);
  // Deletes a transaction's record and its undo_records rows.
  void delete_txn(uint64_t id);
  // Forgets every transaction record and undo record (after recovery has dealt with
  // all of them).
  void clear_txns();
  // Ids whose commit record is present.
  std::vector<uint64_t> committed_txns();

  // Prepared transactions (the prepared table, schema.sql). record_prepared_txn writes
  // the transaction's 'active' row (if missing) and its prepared row; forget_prepared
  // deletes the prepared row (in the SQLite transaction of its commit record, or after
  // its rollback).
  struct PreparedRow {
    uint64_t txid;
    std::string gid, prepared;  // prepared: UTC, like started
  };
  void record_prepared_txn(const TxnRow &t, const std::string &gid);
  void forget_prepared(uint64_t txid);
  std::vector<PreparedRow> prepared_txns();
  // Every transaction record: (id, state), by id.
  std::vector<std::pair<uint64_t, std::string>> all_txns();

  // Mirrors undo steps into undo_records, in one SQLite transaction. Rows of a
  // transaction that has no record (any more) are dropped, so a late batch cannot
  // resurrect the rows of a finished transaction.
  void insert_undo_records(const std::vector<UndoRecordRow> &rows);
  // Transaction ids that have undo_records rows but no transaction record (stale).
  std::vector<uint64_t> orphan_undo_records();

  // Marks the store damaged: one row per problem (a problem already open for the same
  // transaction is not repeated), then syncs the database -- the mark is durable when
  // this returns.
  void add_damage(const std::string &source, uint64_t txid,
                  const std::vector<std::string> &problems, const std::string &kept);
  // Damage not yet accepted, oldest first. Non-empty: the store is marked damaged.
  std::vector<DamageRow> open_damage();
  // Accepts (clears the mark of) the open rows with id <= upto; returns how many; syncs.
  uint64_t accept_damage(uint64_t upto);

  // Runs `fn` inside one SQLite transaction (nested calls join the outer one).
  void transaction(const std::function<void()> &fn);
  // Runs `fn` holding the database mutex, with no SQLite transaction: what `fn` decides
  // is ordered with every transaction() of other threads.
  void locked(const std::function<void()> &fn);

  // Makes everything committed so far durable (a WAL checkpoint-free fsync), kept handle
  // changes included: written to SQLite first, or (`write_kept` false) durable in their
  // journal only, which recovery replays.
  void sync(bool write_kept = true);

  // The schema version open() upgraded this database from, or 0.
  int upgraded_from() const { return upgraded_from_; }

  MetaDb(const MetaDb &) = delete;
  MetaDb &operator=(const MetaDb &) = delete;

 private:
  class Stmt;
  MetaDb(sqlite3 *db, std::string path);
  void prepare_all();
  void exec(const char *sql);
  void upgrade_from(int version);
  void delete_undo_records(uint64_t txid);
  sqlite3_stmt *prep(const char *sql);

  sqlite3 *db_;  // used under mu_ (and before the MetaDb is shared)
  std::string path_;
  RecursiveMutex mu_{LockRank::kMetaDb};
  int tx_depth_ GUARDED_BY(mu_) = 0;
  void write_handle(const HandleRow &row) REQUIRES(mu_);
  void sync_files() REQUIRES(mu_);  // fsync of the WAL (all a commit needs: see there)
  std::unique_ptr<HandleJournal> journal_ GUARDED_BY(mu_);
  void keep(HandleChange change) REQUIRES(mu_);
  std::vector<HandleChange> kept_ GUARDED_BY(mu_);  // in the order of the calls
  bool journal_written_ GUARDED_BY(mu_) = false;    // it holds changes written to SQLite
  std::unordered_map<uint64_t, size_t> kept_at_ GUARDED_BY(mu_);  // nodeid -> its last in kept_
  // new_txn_id: the next id to hand out, and the end of the reserved block. Changed only
  // with mu_ held as well (a reservation), read and counted up without it.
  Mutex ids_mu_ ACQUIRED_AFTER(mu_){LockRank::kTxnIds};
  uint64_t next_txn_id_ GUARDED_BY(ids_mu_) = 0;
  uint64_t txn_ids_end_ GUARDED_BY(ids_mu_) = 0;
  // The nodeids of the last kRecentlyRemoved rows remove_handle dropped (repair_handle).
  static constexpr size_t kRecentlyRemoved = 1 << 16;
  std::unordered_set<uint64_t> removed_ GUARDED_BY(mu_);
  std::deque<uint64_t> removed_order_ GUARDED_BY(mu_);
  int upgraded_from_ = 0;
  sqlite3_stmt *get_meta_ = nullptr, *set_meta_ = nullptr, *get_handle_ = nullptr,
               *put_handle_ = nullptr, *del_handle_ = nullptr, *set_name_ = nullptr,
               *clear_name_ = nullptr, *all_handles_ = nullptr, *count_handles_ = nullptr,
               *open_txn_ = nullptr, *commit_txn_ = nullptr, *rollback_txn_ = nullptr,
               *lazy_txn_ = nullptr, *del_txn_ = nullptr, *committed_ = nullptr,
               *all_txns_ = nullptr, *del_undo_ = nullptr, *insert_undo_ = nullptr,
               *orphan_undo_ = nullptr, *add_damage_ = nullptr, *open_damage_ = nullptr,
               *accept_damage_ = nullptr;  // used under mu_
};

}  // namespace txnfs
