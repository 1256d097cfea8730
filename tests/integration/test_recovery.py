"""Crash recovery from the command line (docs/crash-model.md, "Recovery", "Bad input"):
`txnfs recover`, `txnfs fsck` on recovery state and `fsck --repair`, and bad input -- a
database of a newer schema, a truncated or corrupt database, a missing internal area, a
backup deleted behind txnfs's back. Each gets a clear error or a documented repair; none
loses committed data silently. (The crash-test harness itself: test_crash.py,
tests/crash/.)"""

from __future__ import annotations

import os
import re
import shutil
import threading
from pathlib import Path

import pytest

from txnfs_testing import snapshot as S
from txnfs_testing import txnfs_lib as tl


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

class OpenTxn:
    """A transaction begun on a thread of its own, which runs `body(mnt)` in it and then
    stays alive (so the transaction stays open) until .end(commit=...) or .release()."""

    def __init__(self, mnt, body):
        self.mnt = mnt
        self.result = {}
        self._ready = threading.Event()
        self._go = threading.Event()
        self._action = None
        self._t = threading.Thread(target=self._run, args=(body,), daemon=True)
        self._t.start()
        assert self._ready.wait(60), "the transaction's body did not finish"
        if "error" in self.result:
            raise self.result["error"]
        self.id = self.result["id"]

    def _run(self, body):
        try:
            self.result["id"] = tl.txn_begin(self.mnt)
            body(Path(self.mnt))
        except BaseException as e:  # noqa: BLE001
            self.result["error"] = e
        self._ready.set()
        self._go.wait()
        if self._action == "commit":
            self.result["rc"] = tl.txn_commit(self.mnt, self.id)
        elif self._action == "abort":
            self.result["rc"] = tl.txn_abort(self.mnt, self.id)

    def end(self, action) -> int:
        self._action = action
        self._go.set()
        self._t.join(60)
        return self.result.get("rc")

    def release(self):
        """Let the thread go without ending the transaction (after the daemon died)."""
        self.end(None)


def populate(root: Path):
    (root / "dir").mkdir()
    (root / "dir" / "data.bin").write_bytes(os.urandom(100_000))
    (root / "keep.txt").write_bytes(b"committed before the crash\n" * 100)
    (root / "victim").write_bytes(b"removed by the transaction\n")
    os.setxattr(root / "keep.txt", "user.tag", b"v1")


def changes(m: Path):
    """A transaction's worth of mixed changes to what populate() made."""
    with open(m / "dir" / "data.bin", "r+b") as f:
        f.seek(5000)
        f.write(b"X" * 20000)
    with open(m / "new.txt", "wb") as f:
        f.write(b"created in the transaction")
    os.rename(m / "keep.txt", m / "dir" / "moved.txt")
    os.unlink(m / "victim")
    os.mkdir(m / "newdir")
    os.setxattr(m / "dir" / "moved.txt", "user.tag", b"v2")
    os.chmod(m / "dir", 0o700)


def crash_with_open_txn(mnt, body=changes) -> int:
    """Runs `body` in a transaction, kill -9s the daemon while it is open; returns its id."""
    t = OpenTxn(mnt.path, body)
    mnt.kill9()
    t.release()
    return t.id


def recover(store, *extra):
    return tl.txnfs("recover", store.path, *extra, timeout=300)


def fsck(store, *extra):
    return tl.txnfs("fsck", store.path, *extra, timeout=300)


def assert_error(p, *patterns, code=None, what=""):
    out = tl.output_of(p)
    assert p.returncode != 0, f"{what}: expected failure, got exit 0\n{out}"
    if code is not None:
        assert p.returncode == code, f"{what}: exit {p.returncode}, expected {code}\n{out}"
    assert "txnfs: error:" in p.stderr, f"{what}: no 'txnfs: error:' on stderr:\n{out}"
    for pat in patterns:
        assert re.search(pat, p.stderr, re.I), f"{what}: stderr lacks /{pat}/:\n{p.stderr}"


def store_files(store) -> dict:
    """Everything of the store, to show a refused command changed nothing: every file,
    and the database by content (SQLite may fold its WAL into the main file whenever a
    connection closes, which changes the files but not what they hold)."""
    files = {k: v for k, v in S.snapshot(store.path, handles=False).items()   # (O_NOATIME)
             if not k.startswith(".txnfs/meta.db") and k not in (".", ".txnfs")}
    for k, v in files.items():     # reading the internal area moves its atimes: noise
        if k.startswith(".txnfs/"):
            v.pop("atime_ns", None)
    for k in (".", ".txnfs"):      # whose entries list the database's files
        files[k] = {f: v for f, v in S.snapshot(store.path, handles=False)[k].items()
                    if f not in ("entries", "mtime_ns", "atime_ns", "nlink")}
    try:
        rows = {t: store.query(f"SELECT * FROM {t} ORDER BY 1") for t in ("handles", "txns", "meta")}
    except Exception as e:  # noqa: BLE001 - a damaged database: compare its bytes
        rows = {"unreadable": repr(type(e)),
                "bytes": tl.hash_tree(store.internal).get("meta.db")}
    return {"files": files, "db": rows}


def assert_unchanged(store, state, what):
    now = store_files(store)
    d = S.diff(state["files"], now["files"])
    assert not d, f"{what} changed the store's files:\n  " + "\n  ".join(d)
    assert now["db"] == state["db"], f"{what} changed the database"


# --------------------------------------------------------------------------
# txnfs recover
# --------------------------------------------------------------------------

def test_recover_fresh_store_has_nothing_to_do(store):
    for _ in range(2):
        p = recover(store)
        assert p.returncode == 0, tl.output_of(p)
        assert "nothing to recover" in p.stdout, p.stdout


def test_recover_rolls_back_a_killed_transaction_and_is_idempotent(mnt):
    populate(mnt.path)
    mnt.umount()
    before = S.snapshot(mnt.store.tree, handles=False)
    mnt.mount()
    txid = crash_with_open_txn(mnt)

    # fsck sees the unfinished transaction and says what recovery will do
    p = fsck(mnt.store)
    assert p.returncode == 1, tl.output_of(p)
    assert re.search(rf"backups/{txid}\b.*unfinished transaction {txid}.*rolls it back", p.stdout), p.stdout

    p = recover(mnt.store)
    assert p.returncode == 0, tl.output_of(p)
    assert re.search(r"rolled back 1 transaction \((\d+) operations undone", p.stdout), p.stdout
    m = re.search(r"(\d+) bytes restored", p.stdout)
    assert m and int(m.group(1)) >= 20000, p.stdout
    S.assert_same(before, S.snapshot(mnt.store.tree, handles=False), "after txnfs recover")
    assert not S.backups_left(mnt.store)

    p = recover(mnt.store)            # again: nothing left to do
    assert p.returncode == 0 and "nothing to recover" in p.stdout, tl.output_of(p)
    p = fsck(mnt.store)
    assert p.returncode == 0, tl.output_of(p)
    mnt.mount()
    assert (mnt.path / "keep.txt").read_bytes() == b"committed before the crash\n" * 100
    assert not (mnt.path / "new.txt").exists()


def test_mount_recovers_by_itself(mnt):
    populate(mnt.path)
    mnt.umount()
    before = S.snapshot(mnt.store.tree, handles=False)
    mnt.mount()
    crash_with_open_txn(mnt)
    mnt.mount()                          # runs recovery before serving
    mnt.umount()
    S.assert_same(before, S.snapshot(mnt.store.tree, handles=False), "after mount")
    mnt.mount()


def test_handle_table_follows_an_abort_that_died_after_removing_its_log(mnt):
    """An abort removes its undo log before the handle table follows the rollback; begin
    writes no transaction record, so the abort writes one first: without it, recovery
    found neither log nor record and left rows of the created file and of the rename."""
    populate(mnt.path)
    mnt.umount()
    before = S.snapshot(mnt.store.tree, handles=False)
    with tl.crash_at("abort.after_undo:1"):
        mnt.mount()
    tid = tl.txn_begin(mnt.path)
    changes(mnt.path)
    tl.txn_abort(mnt.path, tid)
    assert tl.wait_dead(mnt.pid, 10), "the crash point did not fire"
    mnt.pid = None
    tl.lazy_umount(mnt.path)
    assert_reconciled_without_log(mnt, before, "after the abort")


def assert_reconciled_without_log(mnt, before, what):
    """A rollback died after removing its log: recovery must still reconcile the handle
    table, and the tree must be as `before`."""
    assert not S.backups_left(mnt.store), "the log was still there: not the case under test"
    p = recover(mnt.store)
    assert p.returncode == 0, tl.output_of(p)
    assert "fixed 0 handle rows" not in p.stdout, p.stdout
    p = fsck(mnt.store)
    assert p.returncode == 0, tl.output_of(p)
    S.assert_same(before, S.snapshot(mnt.store.tree, handles=False), what)
    mnt.mount()


def test_recovery_that_dies_after_removing_logs_reconciles_next_time(mnt):
    """The same for recovery: it rolls back (removing the logs) before it reconciles the
    handle table; a crash in between must leave a record that makes the next recovery
    reconcile."""
    populate(mnt.path)
    mnt.umount()
    before = S.snapshot(mnt.store.tree, handles=False)
    mnt.mount()
    crash_with_open_txn(mnt)
    tl.lazy_umount(mnt.path)
    with tl.crash_at("recover.before_forget:1"):
        p = recover(mnt.store)
    assert p.returncode != 0, tl.output_of(p)
    assert_reconciled_without_log(mnt, before, "after recovery")


def test_recover_refuses_a_mounted_store(mnt):
    before = store_files(mnt.store)
    p = recover(mnt.store)
    assert_error(p, r"already mounted", code=1, what="recover of a mounted store")
    p = fsck(mnt.store, "--repair")
    assert_error(p, r"already mounted", code=2, what="fsck --repair of a mounted store")
    (mnt.path / "still-works").write_bytes(b"yes")


def test_recover_finishes_a_committed_log(mnt):
    """A log whose commit record is durable is discarded, never undone."""
    populate(mnt.path)
    t = OpenTxn(mnt.path, changes)
    assert t.end("commit") == 0
    mnt.umount()
    after_commit = S.snapshot(mnt.store.tree, handles=False)
    # make it look like a crash right after the commit record: the log is back...
    log = mnt.store.internal / "backups" / "424242"
    log.mkdir()
    os.symlink("1 A 1 garbage-that-recovery-must-not-undo", log / ("0" * 15 + "1"))
    mnt.store.execute("INSERT INTO txns(id, state, uid, pid, flags) VALUES (424242, 'committed', 0, 1, 0)")
    p = recover(mnt.store)
    assert p.returncode == 0, tl.output_of(p)
    assert "finished 1 committed one" in p.stdout, p.stdout
    S.assert_same(after_commit, S.snapshot(mnt.store.tree, handles=False), "after recover")
    assert fsck(mnt.store).returncode == 0
    mnt.mount()


# --------------------------------------------------------------------------
# fsck: recovery state, --repair
# --------------------------------------------------------------------------

def test_fsck_reports_logs_without_records_and_records_without_logs(mnt):
    populate(mnt.path)
    txid = crash_with_open_txn(mnt)
    store = mnt.store
    store.execute("DELETE FROM txns")                    # a log without its record
    store.execute("INSERT INTO txns(id, state, uid, pid, flags) VALUES (777, 'active', 0, 1, 0)")
    # a committed record whose log is gone: what cleanup leaves for a moment (fsck waits
    # to see whether it goes), and for good if the daemon died in between
    store.execute("INSERT INTO txns(id, state, uid, pid, flags) VALUES (778, 'committed', 0, 1, 0)")
    p = fsck(store)
    out = tl.output_of(p)
    assert p.returncode == 1, out
    assert re.search(rf"backups/{txid} .*unfinished transaction {txid} \(no commit record\)", out), out
    assert re.search(r"transaction record 777 \(active\) has no undo log", out), out
    assert re.search(r"transaction record 778 \(committed\) has no undo log", out), out
    p = fsck(store, "--repair")
    assert p.returncode == 0, tl.output_of(p)
    assert "repaired: recovery rolled back 1 transaction" in p.stdout, p.stdout
    assert p.stdout.rstrip().endswith("clean"), p.stdout
    mnt.mount()
    assert not (mnt.path / "new.txt").exists()
    assert (mnt.path / "victim").exists()


def test_fsck_repair_fixes_the_handle_table(mnt):
    populate(mnt.path)
    (mnt.path / "a").write_bytes(b"a")
    (mnt.path / "b").write_bytes(b"b")
    ino_a = os.stat(mnt.path / "a").st_ino
    ino_b = os.stat(mnt.path / "b").st_ino
    mnt.umount()
    store = mnt.store
    store.execute("DELETE FROM handles WHERE nodeid = ?", (ino_a,))             # missing row
    os.unlink(store.tree / "victim")                                            # vanished object
    store.execute("UPDATE handles SET name = 'wrong' WHERE nodeid = ?", (ino_b,))  # wrong name
    p = fsck(store)
    assert p.returncode == 1, tl.output_of(p)
    assert len(p.stdout.strip().splitlines()) >= 4, p.stdout
    p = fsck(store, "--repair")
    assert p.returncode == 0, tl.output_of(p)
    out = p.stdout
    assert re.search(r"added a row for /a\b", out), out
    assert re.search(r"deleted row .*victim", out), out
    assert re.search(r"name wrong .*recorded name set to /b", out), out
    assert store.handle_row(ino_b)["name"] == "b"
    assert store.handle_row(ino_a)["name"] == "a"
    mnt.mount()
    assert (mnt.path / "a").read_bytes() == b"a"


# --------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------

def test_newer_schema_is_refused_everywhere(store, xfs):
    store.execute("PRAGMA user_version = 99")
    before = store_files(store)
    for args, code in ((("recover",), 1), (("fsck",), 2), (("fsck", "--repair"), 2)):
        p = tl.txnfs(*args, store.path)
        assert_error(p, r"schema version 99", r"newer txnfs", code=code, what=" ".join(args))
    assert_unchanged(store, before, "a refused command")


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_damaged_database_is_refused_everywhere(store, xfs, damage):
    db = store.db
    data = db.read_bytes()
    assert len(data) >= 8192
    if damage == "truncated":
        db.write_bytes(data[: len(data) // 2 + 100])
    else:
        # keep the header (a valid SQLite file), garble the pages after it
        db.write_bytes(data[:4096] + os.urandom(len(data) - 4096))
    before = store_files(store)
    mp = xfs.tmp / "m"
    mp.mkdir()
    for args, code in ((("recover", store.path), 1), (("fsck", store.path), 2),
                       (("fsck", store.path, "--repair"), 2),
                       (("mount", store.path, mp), 1)):
        p = tl.txnfs(*args)
        if tl.is_mounted(mp):
            tl.run(["fusermount3", "-u", mp])
            pytest.fail(f"txnfs mount of a {damage} database succeeded")
        assert_error(p, r"meta\.db", r"corrupt|unreadable|malformed|not a database",
                     code=code, what=f"{args[0]} with a {damage} database")
    assert_unchanged(store, before, "a refused command")


def test_missing_internal_area_is_refused_everywhere(store):
    shutil.rmtree(store.internal)
    for args, code in ((("recover",), 1), (("fsck",), 2), (("fsck", "--repair"), 2)):
        p = tl.txnfs(*args, store.path)
        assert_error(p, r"not a txnfs store", r"\.txnfs", code=code, what=" ".join(args))
    assert not store.internal.exists()


def test_missing_backup_area_is_repaired(mnt, xfs):
    populate(mnt.path)
    mnt.umount()
    store = mnt.store
    (store.internal / "backups").rmdir()
    (xfs.tmp / "m2").mkdir()
    p = tl.txnfs("mount", store.path, xfs.tmp / "m2")
    assert not tl.is_mounted(xfs.tmp / "m2")
    assert_error(p, r"backups is missing", r"fsck STORE --repair", what="mount without backups/")
    assert_error(recover(store), r"backups is missing", what="recover without backups/")
    p = fsck(store, "--repair")
    assert p.returncode == 0, tl.output_of(p)
    assert "recreated the missing backup area" in p.stdout, p.stdout
    mnt.mount()
    assert (mnt.path / "keep.txt").exists()


RECORD_XATTR = "trusted.txnfs."   # + the seq in 16 hex digits (src/recovery/undo/undo_record.h)


def _records(log) -> dict[str, str]:
    """seq (16 hex digits) -> text of every undo record in the log directory: its xattrs,
    and the symlinks that logs of earlier daemons (or past 2,000 records) hold."""
    out = {}
    for name in os.listxattr(log):
        if name.startswith(RECORD_XATTR) and len(name) == len(RECORD_XATTR) + 16:
            out[name[len(RECORD_XATTR):]] = os.getxattr(log, name).decode(errors="surrogateescape")
    for rec in log.iterdir():
        if rec.is_symlink() and len(rec.name) == 16:
            out[rec.name] = os.readlink(rec)
    return out


def _data_objects(store, txid):
    log = store.internal / "backups" / str(txid)
    return [log / (seq + ".d") for seq, text in sorted(_records(log).items())
            if text.split()[1] == "D"]


def test_deleted_backup_after_a_crash_is_refused_then_forced(mnt):
    populate(mnt.path)
    mnt.umount()
    before = S.snapshot(mnt.store.tree, handles=False)
    mnt.mount()
    txid = crash_with_open_txn(mnt)
    store = mnt.store
    objs = _data_objects(store, txid)
    assert objs, "the transaction backed no data up"
    objs[0].unlink()                                  # behind txnfs's back
    state = store_files(store)

    # mount and recover refuse, naming the damage, and change nothing
    mp = mnt.path
    p = tl.txnfs("mount", store.path, mp)
    assert not tl.is_mounted(mp)
    assert_error(p, r"undo logs are damaged", re.escape(objs[0].name) + r" is missing",
                 r"recover --force", code=1, what="mount with a deleted backup")
    assert_error(recover(store), r"undo logs are damaged", code=1, what="recover")
    assert_unchanged(store, state, "a refused recovery")
    p = fsck(store)
    assert p.returncode == 1 and re.search(r"is damaged: .*is missing", p.stdout), tl.output_of(p)

    # --force rolls back everything else and says what it could not restore
    p = recover(store, "--force")
    assert p.returncode == 1, tl.output_of(p)
    assert re.search(r"NOT RESTORED: transaction \d+: .*is missing", p.stdout), p.stdout
    assert re.search(rf"DAMAGED: transaction {txid} \(recovery, .*is missing", p.stdout), p.stdout
    after = S.snapshot(store.tree, handles=False)
    diff = S.diff(before, after)
    # only data.bin (whose backed-up range is lost) and its directory's times may differ
    assert all(d.startswith(("dir/data.bin:", "dir:")) for d in diff), diff
    assert (store.tree / "keep.txt").exists() and not (store.tree / "new.txt").exists()
    # ... and the store stays marked damaged until someone accepts it
    assert_marked_damaged(mnt, txid, re.escape(objs[0].name) + r" is missing")
    mnt.mount()


def assert_marked_damaged(mnt, txid, problem, source="recovery"):
    """The store is marked damaged with `problem` of transaction `txid`: fsck, recover and
    mount say so; mount --force serves it; fsck --repair keeps the mark; fsck --repair
    --accept-damage clears it (deleting the kept log) and fsck is clean again. Leaves the
    store unmounted."""
    store = mnt.store
    line = rf"store marked damaged: transaction {txid} \({source}[^)]*\): .*{problem}"
    p = fsck(store)
    assert p.returncode == 1 and re.search(line, p.stdout), tl.output_of(p)
    assert re.search(r"\d+ problems?$", p.stdout.strip()), p.stdout
    kept = store.internal / "damaged" / str(txid)
    assert re.search(rf"undo log is kept in {re.escape(str(kept))}\b", p.stdout), p.stdout
    assert kept.is_dir()

    p = recover(store)                        # recover says so too, every time
    assert p.returncode == 1, tl.output_of(p)
    assert re.search(rf"DAMAGED: transaction {txid} .*{problem}", p.stdout), p.stdout
    assert re.search(r"marked damaged", p.stderr), p.stderr

    p = tl.txnfs("mount", store.path, mnt.path)
    assert not tl.is_mounted(mnt.path), "a store marked damaged was mounted without --force"
    assert_error(p, r"marked damaged", rf"transaction {txid} .*{problem}",
                 r"fsck --repair --accept-damage", r"mount --force", code=1,
                 what="mount of a damaged store")

    mnt.mount("--force")                      # the documented way to serve it anyway
    assert os.listdir(mnt.path), "the forced mount serves nothing"
    mnt.umount()

    p = fsck(store, "--repair")               # a repair cannot know what the files should hold
    assert p.returncode == 1, tl.output_of(p)
    assert "stays marked damaged" in p.stdout and re.search(line, p.stdout), p.stdout
    assert kept.is_dir()

    p = fsck(store, "--repair", "--accept-damage")
    assert p.returncode == 0, tl.output_of(p)
    assert re.search(rf"accepted: transaction {txid} .*{problem}", p.stdout), p.stdout
    assert "deleted the kept undo log" in p.stdout, p.stdout
    assert p.stdout.rstrip().endswith("clean"), p.stdout
    assert not kept.exists()
    assert fsck(store).returncode == 0
    assert recover(store).returncode == 0
    # accepted rows stay, as history
    rows = store.query("SELECT * FROM damage WHERE txid = ?", (txid,))
    assert rows and all(r["accepted"] for r in rows), rows


def test_accept_damage_needs_repair(store):
    p = tl.txnfs("fsck", store.path, "--accept-damage")
    assert p.returncode != 0 and "--repair" in tl.output_of(p), tl.output_of(p)


def test_occupied_name_at_recovery_marks_the_store_damaged_and_keeps_the_object(mnt):
    """Recovery that cannot put a removed file back (its name was taken behind txnfs's
    back) marks the store damaged, durably, and keeps the removed file in the kept log."""
    populate(mnt.path)
    original = (mnt.path / "victim").read_bytes()

    def body(m):
        os.unlink(m / "victim")
        (m / "other").write_bytes(b"made in the transaction")

    txid = crash_with_open_txn(mnt, body)
    (mnt.store.tree / "victim").write_bytes(b"occupier")      # behind txnfs's back
    p = tl.txnfs("mount", mnt.store.path, mnt.path)            # recovery runs, then refuses
    assert not tl.is_mounted(mnt.path)
    assert_error(p, r"marked damaged", rf"transaction {txid} .*Removed.*victim.*File exists",
                 r"accept-damage", code=1, what="mount after a recovery that failed a step")
    assert not S.backups_left(mnt.store), "the log of the failed rollback stayed in backups/"
    assert not (mnt.store.tree / "other").exists()             # the rest was rolled back
    assert (mnt.store.tree / "victim").read_bytes() == b"occupier"
    kept = mnt.store.internal / "damaged" / str(txid)
    stashed = [f for f in kept.iterdir() if f.name.endswith(".d") and f.is_file()]
    assert [f.read_bytes() for f in stashed] == [original], "the removed file was not kept"
    assert f"what that step saved: {stashed[0]}" in p.stderr, p.stderr
    rows = mnt.store.query("SELECT * FROM damage")
    assert len(rows) == 1 and rows[0]["txid"] == txid and rows[0]["source"] == "recovery", rows
    assert_marked_damaged(mnt, txid, r"Removed.*victim.*File exists")
    mnt.mount()
    assert (mnt.path / "victim").read_bytes() == b"occupier"


def test_deleted_backup_of_an_open_transaction_fails_its_abort(mnt):
    populate(mnt.path)
    t = OpenTxn(mnt.path, changes)
    objs = _data_objects(mnt.store, t.id)
    assert objs
    objs[0].unlink()
    rc = t.end("abort")
    assert rc == -5, f"abort with a deleted backup returned {rc}, not -EIO"   # never silent
    # everything else was rolled back; the store goes on working
    assert (mnt.path / "keep.txt").exists() and not (mnt.path / "new.txt").exists()
    (mnt.path / "after").write_bytes(b"works")
    assert (mnt.path / "after").read_bytes() == b"works"
    # ... but it is marked damaged, durably: even a kill -9 right away keeps the mark
    mnt.kill9()
    assert_marked_damaged(mnt, t.id, re.escape(objs[0].name) + r" is missing", source="abort")
    mnt.mount()
    assert (mnt.path / "after").read_bytes() == b"works"
