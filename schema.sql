-- txnfs metadata schema. This file is the only place the schema is written: the
-- build embeds it into the binary, `txnfs init` executes it, and `txnfs mount`
-- refuses a database whose user_version is newer than the one set below.
--
-- Upgrades: an older database (from version 2 on) is upgraded when a read-write open
-- (mount, fsck, recover) finds it: in one SQLite transaction its views are dropped and
-- this whole file runs again. So every statement here must be idempotent (IF NOT
-- EXISTS) and every change additive: new tables, indexes and views, never a changed
-- table. Version 3 added undo_records and the undo_steps view; version 4 the damage
-- table (an older txnfs refuses a version-4 database, so it cannot mount a store that
-- is marked damaged without seeing the mark); version 5 the lazy_commits view; version 6
-- the prepared table and the prepared_transactions view (an older txnfs, which would roll
-- a prepared transaction back without asking its cluster, refuses a version-6 store).
--
-- Invariant: every object (file, directory, symlink, device, fifo, socket) of the
-- visible tree has exactly one row in `handles`, and every row names an object that
-- exists. `txnfs fsck` checks both directions.

PRAGMA user_version = 6;

-- Store-wide facts: schema_version, store_uuid, created, backups ('reflink'|'copy').
CREATE TABLE IF NOT EXISTS meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;

-- The handle table: one row per object of the visible tree.
--   nodeid      FUSE nodeid the object is served under (1 for the tree root;
--               otherwise the backing XFS inode number, stable for the object's life)
--   generation  FUSE generation (the backing inode's generation); (nodeid, generation)
--               never names two different objects, so a handle outliving its object
--               is stale, never another file
--   uuid        permanent identity (libuuid, text form)
--   ino         backing inode number
--   fh          backing file handle from name_to_handle_at (type || bytes)
--   type        S_IFMT bits of the object's mode
--   parent      nodeid of the directory holding `name` (NULL for the root, and for a
--               hard-linked file whose recorded name was removed while others remain)
--   name        one name of the object in `parent`
CREATE TABLE IF NOT EXISTS handles (
  nodeid     INTEGER PRIMARY KEY,
  generation INTEGER NOT NULL,
  uuid       TEXT    NOT NULL UNIQUE,
  ino        INTEGER NOT NULL UNIQUE,
  fh         BLOB    NOT NULL,
  type       INTEGER NOT NULL,
  parent     INTEGER,
  name       TEXT,
  CHECK ((parent IS NULL) = (name IS NULL))
);
CREATE INDEX IF NOT EXISTS handles_by_name ON handles(parent, name);

-- Documented view: the handle table with readable object kinds.
CREATE VIEW IF NOT EXISTS handle_table AS
  SELECT nodeid, generation, uuid, ino,
         CASE type WHEN 16384 THEN 'dir' WHEN 32768 THEN 'file' WHEN 40960 THEN 'symlink'
                   WHEN 8192 THEN 'chardev' WHEN 24576 THEN 'blockdev' WHEN 4096 THEN 'fifo'
                   WHEN 49152 THEN 'socket' ELSE 'unknown' END AS kind,
         parent, name
  FROM handles;

-- Transactions. A 'committed' row is written (and the database synced) only after
-- every effect of the transaction is durable: a durable 'committed' row is the commit
-- record, and the only rows recovery reads. Begin writes no row; an open transaction
-- (state 'active') gets one within ~100 ms for the views (src/txnfuse/txn/txn_rows.cc).
-- Ids come from blocks reserved in meta.txn_ids_reserved, never reused. Its undo log
-- lives in STORE/.txnfs/backups/<id>/; a log without a committed row belongs to a
-- transaction that recovery rolls back.
-- Rows of finished transactions are deleted once their logs are gone for good.
-- A lazily committed transaction that is not durable yet keeps state 'active' with
-- `ended` set (its commit time): not a commit record, recovery rolls it back.
CREATE TABLE IF NOT EXISTS txns (
  id       INTEGER PRIMARY KEY AUTOINCREMENT,
  state    TEXT    NOT NULL CHECK (state IN ('active', 'committed', 'aborted')),
  uid      INTEGER NOT NULL,   -- owner
  pid      INTEGER NOT NULL,   -- bound thread id or process id
  flags    INTEGER NOT NULL,   -- 1: bound to a process and its descendants
  started  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  ended    TEXT
);

-- Undo records: a mirror of each open transaction's undo log, one row per step, for
-- people and tools to inspect (docs/sql.md). The authoritative log is the directory
-- STORE/.txnfs/backups/<txid>/ (see src/recovery/undo/undo_step.h); the daemon copies each
-- step here in batches shortly after writing it (at most ~100 ms behind), and deletes
-- the rows together with the transaction's record. Recovery never reads this table.
--   kind        attrs | data | made | created | linked | removed | renamed | xattrs
--               (made: a new object, recorded before it exists, so ino/generation are
--               its directory's; created: the same, as daemons before made wrote it)
--   ino, generation   the backing object the step concerns (its handle-table row has
--               the same ino, unless the object is not in the tree, e.g. created by
--               the transaction and stashed again)
--   dir, name   where the object was linked / removed / created / renamed from
--               (backing inode number of the directory and the entry name)
--   dir2, name2 renamed: the destination
--   off, len    data: the byte range saved (block-aligned); len is the bytes kept
CREATE TABLE IF NOT EXISTS undo_records (
  txid       INTEGER NOT NULL,
  seq        INTEGER NOT NULL,
  kind       TEXT    NOT NULL,
  ino        INTEGER NOT NULL,
  generation INTEGER NOT NULL,
  dir        INTEGER,
  name       TEXT,
  dir2       INTEGER,
  name2      TEXT,
  off        INTEGER,
  len        INTEGER,
  recorded   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  PRIMARY KEY (txid, seq)
) WITHOUT ROWID;

-- Documented view: transactions that have not finished, with the size of their logs
-- (as far as mirrored into undo_records).
CREATE VIEW IF NOT EXISTS open_transactions AS
  SELECT t.id, t.uid, t.pid, CASE t.flags & 1 WHEN 1 THEN 'process' ELSE 'thread' END AS bound_to,
         t.started, t.state,
         (SELECT count(*) FROM undo_records u WHERE u.txid = t.id) AS undo_steps,
         (SELECT coalesce(sum(u.len), 0) FROM undo_records u
           WHERE u.txid = t.id AND u.kind = 'data') AS backup_bytes
  FROM txns t WHERE t.state = 'active' AND t.ended IS NULL;

-- Documented view: lazily committed transactions that are not durable yet (one row:
-- how many, when the oldest committed and how old it is in ms). A crash loses at most
-- these, the latest first (docs/crash-model.md).
CREATE VIEW IF NOT EXISTS lazy_commits AS
  SELECT count(*) AS not_durable, min(ended) AS oldest_committed,
         CAST(coalesce((julianday('now') - julianday(min(ended))) * 86400000.0, 0) AS INTEGER)
           AS oldest_ms
  FROM txns WHERE state = 'active' AND ended IS NOT NULL;

-- Documented view: the undo steps of every transaction that has a record, in the order
-- an abort would undo them (newest first), with the current path of each object
-- concerned where the handle table knows it.
CREATE VIEW IF NOT EXISTS undo_steps AS
  SELECT u.txid, u.seq, u.kind, t.state AS txn_state,
         u.ino, u.generation, h.nodeid, h.parent AS object_parent, h.name AS object_name,
         u.dir, u.name, u.dir2, u.name2, u.off, u.len, u.recorded
  FROM undo_records u
  JOIN txns t ON t.id = u.txid
  LEFT JOIN handles h ON h.ino = u.ino AND h.generation = u.generation
  ORDER BY u.txid, u.seq DESC;

-- Damage: what a rollback could not restore. When the undo of a transaction -- by
-- recovery (at mount or `txnfs recover`) or by an abort in the daemon -- reports steps
-- it could not apply, one row per problem is written and the database synced before
-- the transaction's undo log is moved out of the way (to STORE/.txnfs/damaged/<txid>,
-- never deleted). While a row has no `accepted` time the store is marked damaged:
-- `txnfs fsck` lists each row and exits 1, `txnfs mount` refuses (unless --force), and
-- only `txnfs fsck --repair --accept-damage` sets `accepted` (rows are kept as history).
-- A table, not a marker file: it is written and synced in the same database as the
-- transaction records, and the schema version keeps an older txnfs, which would not
-- know the mark, from mounting the store.
--   source      'recovery' (txnfs recover, fsck --repair, mount) or 'abort' (daemon)
--   txid        the transaction whose undo failed
--   problem     the step and why it could not be undone (one line)
--   kept        where the undo log was kept (relative to the store), or NULL
CREATE TABLE IF NOT EXISTS damage (
  id       INTEGER PRIMARY KEY AUTOINCREMENT,
  found    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  source   TEXT    NOT NULL,
  txid     INTEGER,
  problem  TEXT    NOT NULL,
  kept     TEXT,
  accepted TEXT
);

-- Prepared transactions (the first phase of a two-phase commit, docs/cluster.md): a
-- transaction whose effects and undo log were made durable and that waits for its
-- cluster's decision. The row is written, in the same group-commit round, after the
-- syncfs that made them durable, and deleted in the SQLite transaction that writes its
-- commit record or with its record after a rollback. Recovery never rolls back a
-- transaction with a row here on its own: it asks the cluster for the decision (etcd)
-- and commits or rolls back as it says; without one the mount refuses.
--   txid      the local transaction (its undo log: STORE/.txnfs/backups/<txid>/)
--   gid       the global id the coordinator gave it
--   prepared  when it became prepared
CREATE TABLE IF NOT EXISTS prepared (
  txid     INTEGER PRIMARY KEY,
  gid      TEXT    NOT NULL UNIQUE,
  prepared TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- Documented view: prepared transactions with their age (seconds).
CREATE VIEW IF NOT EXISTS prepared_transactions AS
  SELECT p.txid AS id, p.gid, p.prepared,
         round((julianday('now') - julianday(p.prepared)) * 86400.0, 3) AS age_s
  FROM prepared p ORDER BY p.prepared;
