"""The documented SQL views (docs/sql.md): open_transactions, undo_steps and
handle_table, read with the sqlite3 command-line tool while the store is mounted, as a
user would. Every example query in docs/sql.md runs here against a live transaction."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

from txnfs_testing import txnfs_lib as tl

DOC = Path(__file__).resolve().parents[2] / "docs" / "sql.md"


def sql(store, query: str) -> list[dict]:
    """Runs `query` with `sqlite3 -readonly -json`, the way docs/sql.md says to."""
    p = tl.run(["sqlite3", "-readonly", "-json", str(store.db), query], check=True)
    return json.loads(p.stdout) if p.stdout.strip() else []


def doc_queries() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", DOC.read_text(), re.S)


def undo_rows(store, txid) -> list[dict]:
    return sql(store, f"SELECT * FROM undo_steps WHERE txid = {txid}")


def test_views_show_open_transaction_and_its_undo_steps(mnt, store):
    m = Path(mnt.path)
    tl.write_file(m / "old", b"x" * 8192)
    (m / "gone").write_bytes(b"bye")
    tid = tl.txn_begin(mnt.path)
    try:
        with open(m / "old", "r+b") as f:
            f.write(b"y" * 100)
        (m / "new").write_bytes(b"n")
        os.rename(m / "new", m / "renamed")
        os.unlink(m / "gone")

        # Begin writes no row; the mirror writes it within its interval (~100 ms).
        assert tl.wait_until(lambda: sql(store, "SELECT * FROM open_transactions"))
        txns = sql(store, "SELECT * FROM open_transactions")
        assert [t["id"] for t in txns] == [tid]
        assert txns[0]["bound_to"] == "thread" and txns[0]["pid"] == threading.get_native_id()

        # The mirror writes in batches; wait for every kind this transaction recorded.
        want = {"attrs", "data", "made", "renamed", "removed"}
        assert tl.wait_until(lambda: want <= {r["kind"] for r in undo_rows(store, tid)}), \
            undo_rows(store, tid)
        rows = undo_rows(store, tid)
        seqs = [r["seq"] for r in rows]
        assert seqs == sorted(seqs, reverse=True), "undo order is newest first"
        data = [r for r in rows if r["kind"] == "data"]
        assert data[0]["object_name"] == "old" and data[0]["off"] == 0 and data[0]["len"] >= 100
        ren = [r for r in rows if r["kind"] == "renamed"][0]
        assert (ren["name"], ren["name2"]) == ("new", "renamed")
        rem = [r for r in rows if r["kind"] == "removed"][0]
        assert rem["name"] == "gone"

        summary = sql(store, "SELECT undo_steps, backup_bytes FROM open_transactions")[0]
        assert summary["undo_steps"] == len(rows)
        assert summary["backup_bytes"] == sum(r["len"] for r in data)
    finally:
        assert tl.txn_commit(mnt.path, tid) == 0

    # Finished: the record and its mirrored steps go once the log is discarded.
    assert tl.wait_until(lambda: not sql(store, "SELECT * FROM undo_records"), timeout=10)
    assert sql(store, "SELECT * FROM open_transactions") == []


def test_aborted_transaction_leaves_no_rows(mnt, store):
    m = Path(mnt.path)
    tid = tl.txn_begin(mnt.path)
    (m / "a").write_bytes(b"a")
    assert tl.wait_until(lambda: undo_rows(store, tid))
    assert tl.txn_abort(mnt.path, tid) == 0
    assert tl.wait_until(lambda: not sql(store, "SELECT * FROM undo_records"), timeout=10)
    assert sql(store, "SELECT * FROM txns") == []


def test_handle_table_view_and_path_query(mnt, store):
    m = Path(mnt.path)
    (m / "d").mkdir()
    (m / "d" / "f").write_bytes(b"f")
    os.symlink("f", m / "d" / "l")
    # Rows of new objects are written in batches, within ~100 ms (docs/sql.md).
    assert tl.wait_until(lambda: {"d", "f", "l"} <= {r["name"] for r in
                                                      sql(store, "SELECT * FROM handle_table")})
    rows = {r["name"]: r for r in sql(store, "SELECT * FROM handle_table")}
    assert rows["d"]["kind"] == "dir" and rows["f"]["kind"] == "file"
    assert rows["l"]["kind"] == "symlink"
    assert rows["f"]["nodeid"] == os.stat(m / "d" / "f").st_ino
    assert rows["f"]["parent"] == rows["d"]["nodeid"]

    path_query = next(q for q in doc_queries() if "WITH RECURSIVE" in q)
    paths = {r["path"] for r in sql(store, path_query)}
    assert {"/d", "/d/f", "/d/l"} <= paths


def test_every_documented_query_runs_on_a_live_store(mnt, store):
    queries = doc_queries()
    assert len(queries) >= 8, "docs/sql.md lost its examples"
    m = Path(mnt.path)
    tl.write_file(m / "f", b"0" * 4096)
    tid = tl.txn_begin(mnt.path)
    try:
        with open(m / "f", "r+b") as f:
            f.write(b"1")
        assert tl.wait_until(lambda: undo_rows(store, tid))
        results = [sql(store, q) for q in queries]
    finally:
        assert tl.txn_abort(mnt.path, tid) == 0
    by_text = dict(zip(queries, results))
    newest = next(r for q, r in by_text.items() if "max(id)" in q)
    assert {r["kind"] for r in newest} >= {"attrs", "data"}
    restored = next(r for q, r in by_text.items() if "kind = 'data'" in q)
    assert [r["object_name"] for r in restored] == ["f"]


def test_fsck_reports_and_recovery_removes_stale_undo_records(store, xfs):
    store.execute(
        "INSERT INTO undo_records(txid, seq, kind, ino, generation) VALUES (42, 1, 'attrs', 5, 0)")
    p = store.fsck()
    assert p.returncode != 0 and "undo_records rows of transaction 42" in tl.output_of(p)
    tl.txnfs("recover", store.path, check=True)
    assert store.query("SELECT * FROM undo_records") == []
    assert store.fsck().returncode == 0


def test_another_connection_closing_leaves_the_daemons_wal_alone(mnt, store):
    """A user's own connection to meta.db (sqlite3, read-write as a tool might open it)
    that closes while the store is mounted must not take the WAL from under the daemon:
    SQLite deletes the WAL when it thinks the closing connection is the last, which it
    would if the daemon's POSIX locks on the file were gone -- and closing any other fd of
    the file drops them (a sync through a descriptor of our own once did). Commits made
    after such a close are then lost at the next crash."""
    import sqlite3

    m = Path(mnt.path)
    tid = tl.txn_begin(mnt.path)
    tl.write_file(m / "before", b"1")
    assert tl.txn_commit(mnt.path, tid) == 0        # a group commit: MetaDb::sync
    wal = store.db.with_name(store.db.name + "-wal")
    assert wal.exists()
    c = sqlite3.connect(str(store.db))               # read-write, as a tool might
    assert c.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0
    c.close()
    assert wal.exists(), "another connection's close deleted the daemon's WAL"
    tid = tl.txn_begin(mnt.path)
    tl.write_file(m / "after", b"2")
    assert tl.txn_commit(mnt.path, tid) == 0
    mnt.kill9()
    mnt.mount()
    assert (m / "before").read_bytes() == b"1"
    assert (m / "after").read_bytes() == b"2", "a durable commit was lost after the close"
