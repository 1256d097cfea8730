"""Shared mappings inside a transaction (FUSE_DIRECT_IO_ALLOW_MMAP; src/txnfuse/txn/
txn_writers.cc). A program inside a transaction may mmap a file MAP_SHARED, read and
write through the mapping; what it wrote is part of the transaction: a commit keeps
it, an abort undoes it byte for byte -- whether the program synced and unmapped first,
only unmapped, or still has the mapping when the transaction ends -- and no one outside
sees it before the commit. Pages dirtied after the transaction ended are plain writes.
SQLite in WAL mode (which maps its -shm file) works under `txnfs run`.
"""

from __future__ import annotations

import mmap
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from txnfs_testing import snapshot as S
from txnfs_testing import txnfs_lib as tl

OLD = bytes(range(256)) * 48  # 12 KiB: three pages


def _read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _prepare(path, data: bytes) -> None:
    """A file with `data`, atime after mtime: reads do not move it (relatime), so an
    abort's tree is comparable byte for byte, times included."""
    tl.write_file(path, data)
    now = time.time_ns()
    os.utime(path, ns=(now, now - 60 * 10**9))


def _read_elsewhere(path) -> bytes:
    """The file's bytes as another process (outside every transaction) reads them."""
    p = subprocess.run([sys.executable, "-c",
                        "import sys; sys.stdout.buffer.write(open(sys.argv[1], 'rb').read())",
                        str(path)], capture_output=True, timeout=60, check=True)
    return p.stdout


@pytest.mark.parametrize("end", ["commit", "abort"])
@pytest.mark.parametrize("how", ["msync, munmap", "munmap", "still mapped"])
def test_mapped_writes_are_part_of_the_transaction(mnt, end, how):
    _prepare(mnt.path / "old.bin", OLD)
    before = S.stable_snapshot(mnt.path)
    tid = tl.txn_begin(mnt.path)
    maps = []
    try:
        # a file that existed before, and one the transaction creates
        with open(mnt.path / "new.bin", "wb") as f:
            f.write(b"\0" * 8192)
        for name, size in (("old.bin", len(OLD)), ("new.bin", 8192)):
            fd = os.open(mnt.path / name, os.O_RDWR)
            m = mmap.mmap(fd, size)
            assert m[:16] == (OLD[:16] if name == "old.bin" else b"\0" * 16)
            m[100:110] = b"X" * 10        # first page
            m[size - 5:size] = b"Y" * 5   # last page
            maps.append((name, fd, m))
        if how != "still mapped":
            for _name, fd, m in maps:
                if how == "msync, munmap":
                    m.flush()
                m.close()
                os.close(fd)
            maps = []
        # its own read(2) sees what it wrote through the mapping, as on XFS
        want = bytearray(OLD)
        want[100:110] = b"X" * 10
        want[-5:] = b"Y" * 5
        assert _read(mnt.path / "old.bin") == bytes(want)
        # isolation: another process reads the committed bytes, without waiting
        assert _read_elsewhere(mnt.path / "old.bin") == OLD
        rc = tl.txn_commit(mnt.path, tid) if end == "commit" else tl.txn_abort(mnt.path, tid)
        tid = None
        assert rc == 0
        if end == "commit":
            assert _read(mnt.path / "old.bin") == bytes(want)
            assert _read_elsewhere(mnt.path / "old.bin") == bytes(want)
            new = _read(mnt.path / "new.bin")
            assert new[100:110] == b"X" * 10 and new[-5:] == b"Y" * 5
        else:
            # byte-identical, handles included (checked first: a read after the
            # rollback moves atime, which is older than the restored ctime)
            S.assert_restored(mnt, before, f"abort after mapped writes ({how})")
            for name, _fd, m in maps:
                if name == "old.bin":
                    assert m[:] == OLD, "a mapping kept across the abort shows rolled-back data"
        # pages dirtied after the end are plain writes
        for name, fd, m in maps:
            if name == "old.bin":
                m[0:3] = b"ZZZ"
                m.flush()
        if maps:
            assert _read_elsewhere(mnt.path / "old.bin")[:3] == b"ZZZ"
    finally:
        for _name, fd, m in maps:
            m.close()
            os.close(fd)
        if tid is not None:
            tl.txn_abort(mnt.path, tid)


def test_abort_drops_dirty_pages_it_never_saw(mnt):
    """Pages dirtied and never written back before the abort (no msync, no munmap, no
    read(2) that would flush them) are dropped, not written as plain data afterwards."""
    _prepare(mnt.path / "f.bin", OLD)
    before = S.stable_snapshot(mnt.path)
    tid = tl.txn_begin(mnt.path)
    fd = os.open(mnt.path / "f.bin", os.O_RDWR)
    m = mmap.mmap(fd, len(OLD))
    try:
        m[:4096] = b"D" * 4096
        assert tl.txn_abort(mnt.path, tid) == 0
        S.assert_restored(mnt, before, "abort with dirty mapped pages")
        assert m[:4096] == OLD[:4096]
    finally:
        m.close()
        os.close(fd)
    assert _read_elsewhere(mnt.path / "f.bin") == OLD


def test_a_commit_takes_the_pages_still_dirty_in_a_mapping(mnt):
    """Committed with the mapping still dirty (no msync, no munmap, no read(2)): the
    commit wrote them back first, as part of the transaction, so they survive a crash of
    the daemon right after the commit returned."""
    _prepare(mnt.path / "f.bin", OLD)
    tid = tl.txn_begin(mnt.path)
    fd = os.open(mnt.path / "f.bin", os.O_RDWR)
    m = mmap.mmap(fd, len(OLD))
    try:
        m[4096:8192] = b"C" * 4096
        assert tl.txn_commit(mnt.path, tid) == 0
        mnt.kill9()
    finally:
        try:
            m.close()   # the connection is gone: the writeback fails, nothing hangs
        except OSError:
            pass
        os.close(fd)
    mnt.mount()
    want = OLD[:4096] + b"C" * 4096 + OLD[8192:]
    assert _read(mnt.path / "f.bin") == want


def test_a_mapping_from_before_the_transaction_is_not_part_of_it(mnt):
    """Documented (docs/isolation.md, limits): a mapping made from a descriptor opened
    before the transaction began writes plain data, which an abort leaves in place."""
    _prepare(mnt.path / "f.bin", OLD)
    fd = os.open(mnt.path / "f.bin", os.O_RDWR)
    m = mmap.mmap(fd, len(OLD))
    try:
        tid = tl.txn_begin(mnt.path)
        m[0:4] = b"PPPP"
        m.flush()
        assert tl.txn_abort(mnt.path, tid) == 0
    finally:
        m.close()
        os.close(fd)
    assert _read_elsewhere(mnt.path / "f.bin")[:8] == b"PPPP" + OLD[4:8]


SQL_SCRIPT = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
assert db.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
db.execute("CREATE TABLE IF NOT EXISTS t(k INTEGER PRIMARY KEY, v TEXT)")
with db:
    db.executemany("INSERT INTO t(v) VALUES (?)", [(f"row {i}",) for i in range(500)])
print(db.execute("SELECT count(*) FROM t").fetchone()[0])
db.close()
"""


def test_sqlite_in_wal_mode_under_txnfs_run(mnt):
    """SQLite's WAL mode maps its -shm file: under `txnfs run` it works; --abort leaves
    no trace, a commit keeps every row."""
    db = mnt.path / "app.db"
    before = S.stable_snapshot(mnt.path)
    p = tl.txnfs("run", "--abort", mnt.path, "--", sys.executable, "-c", SQL_SCRIPT, db)
    assert p.returncode == 0, tl.output_of(p)
    assert p.stdout.strip() == "500", tl.output_of(p)
    S.assert_restored(mnt, before, "after `txnfs run --abort` of SQLite in WAL mode")
    p = tl.txnfs("run", mnt.path, "--", sys.executable, "-c", SQL_SCRIPT, db)
    assert p.returncode == 0, tl.output_of(p)
    assert p.stdout.strip() == "500", tl.output_of(p)
    c = sqlite3.connect(db)
    try:
        assert c.execute("SELECT count(*), max(v) FROM t").fetchone() == (500, "row 99")
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        c.close()
