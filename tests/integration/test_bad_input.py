"""Bad input to `txnfs init` and `txnfs mount`: a clear error, a non-zero exit, and
nothing modified."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from txnfs_testing import txnfs_lib as tl


def assert_error(p, *patterns, what=""):
    out = tl.output_of(p)
    assert p.returncode != 0, f"{what}: expected failure, got exit 0\n{out}"
    assert "txnfs: error:" in p.stderr, f"{what}: no 'txnfs: error:' message on stderr:\n{out}"
    for pat in patterns:
        assert re.search(pat, p.stderr, re.I), f"{what}: stderr does not match /{pat}/:\n{p.stderr}"


# --------------------------------------------------------------------------
# init
# --------------------------------------------------------------------------

def test_init_missing_parent(xfs):
    target = xfs.dir / "no_such_parent" / "deeper" / "store"
    p = tl.txnfs("init", target)
    assert_error(p, r"no_such_parent", what="init with a missing parent")
    assert not (xfs.dir / "no_such_parent").exists(), "init created the missing parents"


def test_init_refuses_existing_store(store):
    before = tl.hash_tree(store.path)
    p = tl.txnfs("init", store.path)
    assert_error(p, re.escape(str(store.path)), what="init of an existing store")
    assert p.returncode == 1
    assert tl.hash_tree(store.path) == before


def test_init_refuses_nonempty_dir(xfs):
    d = xfs.dir / "busy"
    d.mkdir()
    (d / "precious").write_bytes(b"keep me")
    p = tl.txnfs("init", d)
    assert_error(p, re.escape(str(d)), what="init of a non-empty directory")
    assert sorted(os.listdir(d)) == ["precious"]
    assert (d / "precious").read_bytes() == b"keep me"


class OtherFs:
    """A small non-reflink file system: tmpfs, ext4 on a loop image, or XFS with reflink=0."""

    def __init__(self, kind):
        self.kind = kind
        self.tmp = Path(tempfile.mkdtemp(prefix="txnfs-it-other-"))
        os.chmod(self.tmp, 0o755)
        self.dir = self.tmp / "fs"
        self.dir.mkdir()
        self.image = self.tmp / "image"
        if kind == "tmpfs":
            tl.run(["mount", "-t", "tmpfs", "-o", "size=128m", "tmpfs", self.dir], check=True)
        else:
            with open(self.image, "wb") as f:
                f.truncate(512 << 20)
            mkfs = {"ext4": ["mkfs.ext4", "-q", "-F"],
                    "xfs-noreflink": ["mkfs.xfs", "-q", "-m", "reflink=0"]}[kind]
            tl.run([*mkfs, self.image], check=True)
            tl.run(["mount", "-o", "loop", self.image, self.dir], check=True)

    def close(self):
        if tl.is_mounted(self.dir):
            if tl.run(["umount", self.dir]).returncode != 0:
                tl.run(["umount", "-l", self.dir])
        if self.image.exists():
            for line in tl.run(["losetup", "-j", self.image]).stdout.splitlines():
                tl.run(["losetup", "-d", line.split(":", 1)[0]])
        if not tl.is_mounted(self.dir):
            shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.fixture(params=["tmpfs", "ext4", "xfs-noreflink"])
def other_fs(request):
    if request.param == "tmpfs":
        assert "tmpfs" in open("/proc/filesystems").read()
    fs = OtherFs(request.param)
    try:
        yield fs
    finally:
        fs.close()


def test_init_refuses_fs_without_reflink(other_fs):
    target = other_fs.dir / "store"
    p = tl.txnfs("init", target)
    assert_error(p, r"reflink", what=f"init on {other_fs.kind}")
    assert p.returncode == 1
    assert not target.exists() or os.listdir(target) == [], "refused init left files behind"

    # with --allow-copy-backups it works, and the store is usable
    p = tl.txnfs("init", target, "--allow-copy-backups")
    assert p.returncode == 0, tl.output_of(p)
    store = tl.Store(target)
    assert store.tree.is_dir() and store.db.is_file()
    meta = {r["key"]: r["value"] for r in store.query("SELECT key, value FROM meta")}
    assert meta.get("backups") == "copy", meta
    m = tl.Mount(store, other_fs.tmp / "mnt", other_fs.tmp / "pid")
    try:
        m.mount()
        (m.path / "hello").write_bytes(b"copy-backed store works")
        os.mkdir(m.path / "sub")
        os.rename(m.path / "hello", m.path / "sub" / "hello")
        assert (store.tree / "sub" / "hello").read_bytes() == b"copy-backed store works"
        m.umount()
        m.mount()
        assert (m.path / "sub" / "hello").read_bytes() == b"copy-backed store works"
    finally:
        m.close()      # unmounts, asserts a clean fsck


# --------------------------------------------------------------------------
# mount
# --------------------------------------------------------------------------

def try_mount(store_path, mountpoint, pid_file):
    """Run a mount that must fail; clean up if it did not; return the process."""
    p = tl.txnfs("mount", store_path, mountpoint, "--pid-file", pid_file)
    if tl.is_mounted(mountpoint):
        tl.run(["fusermount3", "-u", mountpoint])
        tl.lazy_umount(mountpoint)
    try:
        pid = int(Path(pid_file).read_text().strip())
    except (OSError, ValueError):
        pid = None
    if pid is not None and tl.pid_alive(pid) and not tl.wait_dead(pid, 5):
        tl.kill_and_wait(pid)
        raise AssertionError(f"a refused mount left daemon {pid} running")
    return p


def refused_mount(store_path, xfs, *patterns, what):
    mp = xfs.tmp / "refused_mnt"
    mp.mkdir(exist_ok=True)
    pid_file = xfs.tmp / "refused.pid"
    before = tl.hash_tree(store_path)
    p = try_mount(store_path, mp, pid_file)
    assert_error(p, *patterns, what=what)
    assert not tl.is_mounted(mp), f"{what}: something was mounted"
    assert tl.hash_tree(store_path) == before, f"{what}: the store was modified"
    return p


def test_mount_missing_store(xfs):
    missing = xfs.dir / "no_store_here"
    refused_mount(missing, xfs, re.escape(str(missing)), what="mount of a missing store")
    assert not missing.exists(), "mount created the missing store"


def test_mount_non_store_dir(xfs):
    plain = xfs.dir / "plain"
    (plain / "tree").mkdir(parents=True)
    (plain / "file").write_bytes(b"not a store")
    refused_mount(plain, xfs, re.escape(str(plain)), r"store", what="mount of a non-store dir")
    assert not (plain / ".txnfs").exists()


def test_mount_missing_db(store, xfs):
    store.db.unlink()
    refused_mount(store.path, xfs, r"meta\.db|database", what="mount with meta.db missing")
    assert not store.db.exists(), "mount recreated meta.db"


def test_mount_garbage_db(store, xfs):
    original = store.db.read_bytes()
    store.db.write_bytes(os.urandom(len(original) or 65536))
    refused_mount(store.path, xfs, r"meta\.db|database", what="mount with a garbage meta.db")
    # restoring the original bytes gives a working store again
    store.db.write_bytes(original)
    m = tl.Mount(store, xfs.tmp / "mnt_after", xfs.tmp / "after.pid")
    try:
        m.mount()
    finally:
        m.close()


def test_mount_unknown_schema_version(store, xfs):
    current = store.query("PRAGMA user_version")[0]["user_version"]
    assert current != 99
    store.execute("PRAGMA user_version = 99")
    assert store.query("PRAGMA user_version")[0]["user_version"] == 99
    refused_mount(store.path, xfs, r"version", r"\b99\b", what="mount with user_version 99")
    assert store.query("PRAGMA user_version")[0]["user_version"] == 99
    store.execute(f"PRAGMA user_version = {current}")
    m = tl.Mount(store, xfs.tmp / "mnt_after", xfs.tmp / "after.pid")
    try:
        m.mount()
    finally:
        m.close()


def test_db_out_of_wal_mode_is_put_back(store, xfs):
    """A commit is durable by the sync of SQLite's WAL alone, so a database another
    program switched to a rollback journal is switched back to WAL when it is opened for
    writing, and what was committed through it stays."""
    store.execute("PRAGMA journal_mode = DELETE")
    assert store.query("PRAGMA journal_mode")[0]["journal_mode"] == "delete"
    m = tl.Mount(store, xfs.tmp / "mnt", xfs.tmp / "txnfs.pid")
    try:
        m.mount()
        assert store.query("PRAGMA journal_mode")[0]["journal_mode"] == "wal"
        tl.write_file(m.path / "kept", b"committed")
        m.umount()
        store.execute("PRAGMA journal_mode = DELETE")
        p = store.fsck()
        assert p.returncode == 0, tl.output_of(p)
        assert store.query("PRAGMA journal_mode")[0]["journal_mode"] == "wal"
        m.mount()
        assert (m.path / "kept").read_bytes() == b"committed"
    finally:
        m.close()


def test_second_mount_refused(mnt, xfs, other_mountpoint):
    (mnt.path / "f").write_bytes(b"first mount")
    # The first daemon's own writes settle first: a sync returns with its handle rows
    # in SQLite (else its journal flush, within 100 ms, could land between the hashes).
    assert tl.txn_sync(mnt.path) == 0
    os.sync()
    before = tl.hash_tree(mnt.store.path)
    p = try_mount(mnt.store.path, other_mountpoint, xfs.tmp / "second.pid")
    assert_error(p, r"mounted|in use|lock|busy", what="second mount of a mounted store")
    assert not tl.is_mounted(other_mountpoint)
    assert tl.hash_tree(mnt.store.path) == before, "the refused second mount modified the store"
    # the first mount is unaffected
    assert (mnt.path / "f").read_bytes() == b"first mount"
    (mnt.path / "g").write_bytes(b"still writable")
    assert (mnt.store.tree / "g").read_bytes() == b"still writable"


def test_mount_missing_mountpoint(store, xfs):
    mp = xfs.tmp / "no_mountpoint"
    before = tl.hash_tree(store.path)
    p = tl.txnfs("mount", store.path, mp, "--pid-file", xfs.tmp / "x.pid")
    if tl.is_mounted(mp):
        tl.run(["fusermount3", "-u", mp])
    assert_error(p, re.escape(str(mp)), what="mount on a missing mount point")
    assert tl.hash_tree(store.path) == before
    # the refused mount released the store: a real mount works
    m = tl.Mount(store, xfs.tmp / "mnt_ok", xfs.tmp / "ok.pid")
    try:
        m.mount()
    finally:
        m.close()


V2_VIEW = """CREATE VIEW open_transactions AS
  SELECT id, uid, pid, CASE flags & 1 WHEN 1 THEN 'process' ELSE 'thread' END AS bound_to,
         started, state
  FROM txns WHERE state = 'active'"""


def test_schema_2_store_is_upgraded_in_place(store, xfs):
    """A store made by the release with schema version 2 (no undo_records) mounts: its
    database is upgraded in one SQLite transaction, its data and handles kept."""
    m = tl.Mount(store, xfs.tmp / "mnt", xfs.tmp / "txnfs.pid")
    try:
        m.mount()
        tl.write_file(m.path / "kept", b"committed data")
        ino = os.stat(m.path / "kept").st_ino
        m.umount()
        con = store.connect(readonly=False)
        with con:
            con.executescript("DROP VIEW undo_steps; DROP VIEW open_transactions; "
                              "DROP TABLE undo_records; DROP TABLE damage; "
                              f"{V2_VIEW}; PRAGMA user_version = 2;")
        con.close()
        m.mount()
        assert store.query("PRAGMA user_version")[0]["user_version"] == 6
        assert store.query("SELECT value FROM meta WHERE key = 'schema_version'")[0]["value"] == "6"
        assert store.query("SELECT * FROM undo_steps") == []
        assert store.query("SELECT * FROM damage") == []
        assert store.query("SELECT not_durable FROM lazy_commits") == [{"not_durable": 0}]
        assert store.query("SELECT * FROM prepared_transactions") == []
        con = store.connect()
        cols = [d[0] for d in con.execute("SELECT * FROM open_transactions").description]
        con.close()
        assert cols[-2:] == ["undo_steps", "backup_bytes"], cols
        assert (m.path / "kept").read_bytes() == b"committed data"
        assert os.stat(m.path / "kept").st_ino == ino
        m.umount()
        assert store.fsck().returncode == 0
    finally:
        m.close()


def test_schema_3_store_is_upgraded_in_place(store, xfs):
    """A store of schema version 3 (before the damage table) mounts and gets the table;
    fsck, which opens it for writing too, upgrades it the same way."""
    for opener in ("mount", "fsck"):
        con = store.connect(readonly=False)
        with con:
            con.executescript("DROP TABLE IF EXISTS damage; PRAGMA user_version = 3;")
        con.close()
        if opener == "mount":
            m = tl.Mount(store, xfs.tmp / "mnt", xfs.tmp / "txnfs.pid")
            try:
                m.mount()
                m.umount()
            finally:
                m.close()
        else:
            p = store.fsck()
            assert p.returncode == 0, tl.output_of(p)
        assert store.query("PRAGMA user_version")[0]["user_version"] == 6
        assert store.query("SELECT * FROM damage") == []


def test_schema_1_is_refused(store, xfs):
    store.execute("PRAGMA user_version = 1")
    refused_mount(store.path, xfs, r"version 1\b", what="mount with user_version 1")
    assert store.query("PRAGMA user_version")[0]["user_version"] == 1
