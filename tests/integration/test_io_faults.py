"""Injected I/O errors: every fault-injection point of `txnfs fault-points`, with EIO and
with ENOSPC (docs/crash-model.md, "Fault-injection points").

For each point a transaction (or two) reaches it on a mount started with
TXNFS_FAIL_AT=POINT:COUNT:ERRNO. The test asserts what the caller sees (the errno of the
request, or EIO from a commit), that the tree is what was committed -- byte-identical to
before the transaction, or to the committed result where the fault came after the commit
was durable -- and that it stays so after an unmount, a mount (recovery) and `txnfs fsck`.
The cases are parametrized over the binary's table: a point without a scenario here fails.

Regenerate the table of docs/crash-model.md with
    PYTHONPATH=tests python3 tests/integration/test_io_faults.py --markdown
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from txnfs_testing import snapshot as S
from txnfs_testing import txnfs_lib as tl

OLD = {"a": b"A" * 10000, "b": b"B" * 5000}
NEW = {"a": b"a" * 20000, "b": b"b" * 7000}


def fault_points() -> list[tuple[str, str, str]]:
    """(name, where, what the caller sees) of every fault-injection point, from the binary."""
    out = tl.txnfs("fault-points", check=True).stdout
    return [tuple(line.split("\t", 2)) for line in out.splitlines() if line.strip()]


def points_markdown() -> str:
    rows = ["| point | where | what the caller sees, what must hold |", "| --- | --- | --- |"]
    for name, where, caller in fault_points():
        rows.append(f"| `{name}` | {where} | {caller} |")
    return "\n".join(rows)


@contextlib.contextmanager
def fail_at(value: str):
    """Commands run inside the block (a mount: its daemon keeps it) get TXNFS_FAIL_AT."""
    os.environ["TXNFS_FAIL_AT"] = value
    try:
        yield
    finally:
        del os.environ["TXNFS_FAIL_AT"]


def contents(mnt) -> dict:
    """The files' bytes, read as the snapshots read (O_NOATIME: the read changes nothing)."""
    out = {}
    for n in OLD:
        fd = os.open(Path(mnt.path) / n, os.O_RDONLY | os.O_NOATIME)
        try:
            out[n] = os.read(fd, 1 << 20)
        finally:
            os.close(fd)
    return out


def write_in_txn(mnt, name):
    """Overwrites `name` with NEW[name] in the calling thread's transaction."""
    fd = os.open(Path(mnt.path) / name, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, NEW[name])
    finally:
        os.close(fd)


def expect_errno(err, fn, *args):
    got = tl.errno_of(fn, *args)
    assert got == err, f"expected {errno.errorcode[err]}, got {got and errno.errorcode[got]}"


def one_txn(mnt, act, lazy=False) -> int:
    tid = tl.txn_begin(mnt.path)
    act()
    return (tl.txn_commit_lazy if lazy else tl.txn_commit)(mnt.path, tid)


# Each scenario runs on the armed mount and returns the contents the committed tree must
# have (the tree must also be byte-identical to `before` when that is OLD).

def doomed_write(mnt, err):
    """A failed undo record or backup before a write: the write fails with the errno and
    changes nothing, the transaction is doomed (commit says why), abort restores all."""
    tid = tl.txn_begin(mnt.path)
    expect_errno(err, write_in_txn, mnt, "a")
    assert tl.txn_commit(mnt.path, tid) == -err
    assert tl.txn_abort(mnt.path, tid) == 0
    return OLD


def stash(mnt, err):
    """The removed object cannot go into the log: the unlink fails with the errno and the
    transaction goes on, its other changes commit."""
    tid = tl.txn_begin(mnt.path)
    expect_errno(err, os.unlink, Path(mnt.path) / "b")
    write_in_txn(mnt, "a")
    assert tl.txn_commit(mnt.path, tid) == 0
    return {"a": NEW["a"], "b": OLD["b"]}


def failed_commit(lazy=False):
    def scenario(mnt, err):
        """The commit fails with EIO and the transaction is rolled back."""
        assert one_txn(mnt, lambda: write_in_txn(mnt, "a"), lazy=lazy) == -errno.EIO
        return OLD
    return scenario


def durable_mark(mnt, err):
    """A lazy commit, then a durable one whose round cannot write the durable mark: with
    EIO the durable one fails and is rolled back, the lazy one stays committed; with ENOSPC
    the round gives the lazy commit a commit record in SQLite instead, and both commit."""
    assert one_txn(mnt, lambda: write_in_txn(mnt, "a"), lazy=True) == 0
    rc = one_txn(mnt, lambda: write_in_txn(mnt, "b"))
    if err == errno.ENOSPC:
        assert rc == 0
        return NEW
    assert rc == -errno.EIO
    return {"a": NEW["a"], "b": OLD["b"]}


def discard(mnt, err):
    """The committed log cannot be removed: the commit has succeeded all the same; the log
    stays until the next mount's recovery discards it."""
    tid = tl.txn_begin(mnt.path)
    write_in_txn(mnt, "a")
    assert tl.txn_commit(mnt.path, tid) == 0
    log = mnt.store.internal / "backups" / str(tid)
    return {"a": NEW["a"], "b": OLD["b"], "log": log}


def txn_rename(mnt, err):
    """The handle row cannot follow a transaction's rename: the rename fails with the
    errno and dooms the transaction (commit says why); abort puts the name back."""
    tid = tl.txn_begin(mnt.path)
    expect_errno(err, os.rename, Path(mnt.path) / "a", Path(mnt.path) / "d" / "x")
    assert tl.txn_commit(mnt.path, tid) == -err
    assert tl.txn_abort(mnt.path, tid) == 0
    return OLD


# Its rollback restores the directories' mtimes but moves their ctimes, so the first
# listing after it moves their atimes (relatime): those are not compared.
txn_rename.moves_dir_atimes = True


# point -> (COUNT, scenario). db.sync: the first sync is the first begin's (a block of
# transaction ids), the second the commit's.
SCENARIOS = {
    "undo.record": (1, doomed_write),
    "undo.backup": (1, doomed_write),
    "undo.stash": (1, stash),
    "commit.lazy_marker": (1, failed_commit(lazy=True)),
    "commit.syncfs": (1, failed_commit()),
    "commit.durable_mark": (1, durable_mark),
    "db.commit_record": (1, failed_commit()),
    "db.sync": (2, failed_commit()),
    "log.discard": (1, discard),
    "db.handle_name": (1, txn_rename),
}

ERRNOS = {"EIO": errno.EIO, "ENOSPC": errno.ENOSPC}


def prepare(mnt):
    for n, data in OLD.items():
        tl.write_file(Path(mnt.path) / n, data)
    os.mkdir(Path(mnt.path) / "d")
    mnt.umount()


def settled_snapshot(mnt) -> dict:
    """A snapshot after every object was read once: the daemon's first read of a new
    object moves its atime (relatime), later ones do not."""
    S.snapshot(mnt.path)
    return S.snapshot(mnt.path)


def remount_and_check(mnt, expected_snapshot, what):
    """Unmount, mount again (recovery runs), compare, unmount, fsck clean."""
    mnt.umount()
    mnt.mount()
    S.assert_same(expected_snapshot, S.snapshot(mnt.path), f"after a remount ({what})")
    mnt.umount()
    p = mnt.store.fsck()
    assert p.returncode == 0, f"txnfs fsck after {what}: exit {p.returncode}\n{tl.output_of(p)}"


@pytest.mark.parametrize("err_name", sorted(ERRNOS))
@pytest.mark.parametrize("point", [p[0] for p in fault_points()])
def test_fault_point(mnt, point, err_name):
    if point not in SCENARIOS:
        pytest.fail(f"fault point {point} has no scenario in test_io_faults.SCENARIOS")
    count, scenario = SCENARIOS[point]
    err = ERRNOS[err_name]
    prepare(mnt)
    mnt.mount()
    before = settled_snapshot(mnt)
    mnt.umount()
    with fail_at(f"{point}:{count}:{err_name}"):
        mnt.mount("--lazy-flush-ms", "60000")
    expected = dict(scenario(mnt, err))
    log = expected.pop("log", None)
    assert contents(mnt) == expected, f"{point} {err_name}: the tree is not what was committed"
    after = settled_snapshot(mnt)
    if expected == OLD:
        was, now = before, after
        if getattr(scenario, "moves_dir_atimes", False):
            was, now = S.strip(before, ("atime_ns",)), S.strip(after, ("atime_ns",))
        S.assert_same(was, now, f"{point} {err_name}: a rolled-back transaction")
    if log is not None:
        mnt.umount()
        assert log.is_dir(), f"{point} {err_name}: the fault did not keep the committed log"
        mnt.mount()
    remount_and_check(mnt, after, f"{point} {err_name}")


@pytest.mark.parametrize("err_name", sorted(ERRNOS))
def test_plain_rename_stands_when_its_handle_row_fails_and_the_store_is_marked(mnt, err_name):
    """A plain rename is done when SQLite refuses the row that follows it: it succeeds,
    .txnfs/handles-stale says why, fsck reports the mark, and the next mount's recovery
    makes the row follow the tree and removes the mark."""
    prepare(mnt)
    with fail_at(f"db.handle_name:1:{err_name}"):
        mnt.mount()
    os.rename(Path(mnt.path) / "a", Path(mnt.path) / "d" / "x")
    moved = Path(mnt.path) / "d" / "x"
    assert moved.read_bytes() == OLD["a"]
    ino = os.stat(moved).st_ino
    mnt.umount()
    mark = mnt.store.internal / "handles-stale"
    assert mark.exists(), "the failed handle-row write did not mark the store"
    assert "rename a in 1 to x in" in mark.read_text(), mark.read_text()
    p = mnt.store.fsck()
    assert p.returncode == 1 and "marked for reconciling" in tl.output_of(p), tl.output_of(p)
    mnt.mount()
    assert moved.read_bytes() == OLD["a"]
    mnt.umount()
    assert not mark.exists(), "recovery did not remove the mark"
    assert mnt.store.handle_row(ino)["name"] == "x"
    p = mnt.store.fsck()
    assert p.returncode == 0, tl.output_of(p)


def test_a_full_disk_stays_full(mnt):
    """COUNT+: every write of every transaction from the first fails with ENOSPC, and each
    transaction can still abort; a plain write (no undo) goes on working."""
    prepare(mnt)
    with fail_at("undo.backup:1+:ENOSPC"):
        mnt.mount()
    before = settled_snapshot(mnt)
    for _ in range(3):
        tid = tl.txn_begin(mnt.path)
        expect_errno(errno.ENOSPC, write_in_txn, mnt, "a")
        assert tl.txn_info(mnt.path, tid)[1].error == errno.ENOSPC
        assert tl.txn_abort(mnt.path, tid) == 0
    S.assert_same(before, S.snapshot(mnt.path), "after 3 aborts")
    tl.write_file(Path(mnt.path) / "d" / "c", b"plain")
    remount_and_check(mnt, settled_snapshot(mnt), "a full disk")


@pytest.mark.parametrize("err_name", sorted(ERRNOS))
def test_plain_request_gets_the_errno(mnt, err_name):
    """A plain fsync after a lazy commit makes that commit durable first: a failed syncfs
    fails the fsync with the errno; the lazy commit stays committed (the unmount makes it
    durable)."""
    prepare(mnt)
    with fail_at(f"commit.syncfs:1:{err_name}"):
        mnt.mount("--lazy-flush-ms", "60000")
    fd = os.open(Path(mnt.path) / "b", os.O_WRONLY)  # (before: no lazy commit to sync)
    try:
        assert one_txn(mnt, lambda: write_in_txn(mnt, "a"), lazy=True) == 0
        expect_errno(ERRNOS[err_name], os.fsync, fd)
        os.fsync(fd)  # the next round succeeds
    finally:
        os.close(fd)
    assert contents(mnt) == {"a": NEW["a"], "b": OLD["b"]}
    remount_and_check(mnt, settled_snapshot(mnt), f"a plain fsync, {err_name}")


def test_rollback_of_a_commit_whose_record_was_not_synced_survives_a_crash(mnt):
    """The commit record is written, its WAL sync fails: the commit fails and is rolled
    back. A crash during that rollback must leave it rolled back at the next mount. The
    record said 'committed' until the rollback ended, and recovery discarded the half-undone
    log as a committed one's."""
    prepare(mnt)
    mnt.mount()
    before = settled_snapshot(mnt)
    mnt.umount()
    with fail_at("db.sync:2:EIO"), tl.crash_at("abort.mid_undo:1"):
        mnt.mount()
    tid = tl.txn_begin(mnt.path)
    write_in_txn(mnt, "a")
    assert tl.txn_commit(mnt.path, tid) != 0
    assert tl.wait_dead(mnt.pid, 10), "the crash point did not fire"
    mnt.pid = None
    tl.lazy_umount(mnt.path)
    mnt.mount()
    S.assert_same(before, S.snapshot(mnt.path), "after a crash in the rollback of a commit")


def test_failed_commit_whose_rollback_cannot_sync_is_left_whole_to_recovery(mnt):
    """The commit record is written and no sync succeeds from then on: the commit fails,
    and its rollback cannot make the record say 'active' durably. It must not undo
    anything then (cut short, its half-undone log would pass for a committed one's); the
    next mount's recovery finds the transaction whole, committed or not, never torn."""
    prepare(mnt)
    with fail_at("db.sync:2+:EIO"), tl.crash_at("abort.mid_undo:1"):
        mnt.mount()
    tid = tl.txn_begin(mnt.path)
    write_in_txn(mnt, "a")
    write_in_txn(mnt, "b")
    assert tl.txn_commit(mnt.path, tid) == -errno.EIO
    assert tl.pid_alive(mnt.pid), "the rollback ran (abort.mid_undo fired)"
    mnt.kill9()
    mnt.mount()
    got = contents(mnt)
    assert got in (OLD, NEW), f"a torn transaction after recovery: {got}"


@pytest.mark.parametrize("err_name", sorted(ERRNOS))
def test_abort_restores_when_the_database_cannot_sync(mnt, err_name):
    """The abort's record cannot be synced: the abort still restores the tree at once.
    It used to give up with EIO and leave the aborted changes visible to everyone until
    the next mount's recovery."""
    prepare(mnt)
    mnt.mount()
    before = settled_snapshot(mnt)
    mnt.umount()
    with fail_at(f"db.sync:2:{err_name}"):  # (1: the first begin's block of ids)
        mnt.mount()
    tid = tl.txn_begin(mnt.path)
    write_in_txn(mnt, "a")
    assert tl.txn_abort(mnt.path, tid) == 0
    S.assert_same(before, S.snapshot(mnt.path), f"after an abort, {err_name}")
    remount_and_check(mnt, before, f"an abort whose sync failed, {err_name}")


@pytest.mark.parametrize("bad,why", [
    ("no.such.point:1:EIO", "no fault point named 'no.such.point'"),
    ("undo.record:0:EIO", "the count must be a positive integer"),
    ("undo.record:x:EIO", "the count must be a positive integer"),
    ("undo.record:1:EPERM", "the errno must be EIO or ENOSPC"),
    ("undo.record:1", "expected NAME:COUNT:ERRNO"),
    ("undo.record", "expected NAME:COUNT:ERRNO"),
])
def test_bad_fail_at_is_refused(bad, why):
    """A malformed TXNFS_FAIL_AT makes every command refuse, saying what is wrong."""
    for cmd in (["fault-points"], ["fsck", "/nonexistent"]):
        p = subprocess.run([tl.txnfs_bin(), *cmd], capture_output=True, text=True,
                           env={**os.environ, "TXNFS_FAIL_AT": bad})
        assert p.returncode != 0 and f"TXNFS_FAIL_AT={bad}: {why}" in p.stderr, (bad, p.stderr)


def test_fault_points_are_documented():
    """docs/crash-model.md carries the generated table of `txnfs fault-points`."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "crash-model.md").read_text()
    begin = doc.index("<!-- fault-points:begin")
    begin = doc.index("\n", begin) + 1
    end = doc.index("<!-- fault-points:end -->")
    assert doc[begin:end].strip() == points_markdown().strip(), (
        "the fault-point table in docs/crash-model.md is out of date: regenerate it with "
        "PYTHONPATH=tests python3 tests/integration/test_io_faults.py --markdown")


if __name__ == "__main__":
    if sys.argv[1:] == ["--markdown"]:
        print(points_markdown())
    else:
        sys.exit("usage: test_io_faults.py --markdown   (run the tests with pytest)")
