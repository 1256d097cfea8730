"""renameat2 flags inside transactions: every one undone exactly, by abort and by crash
recovery, also when later operations of the same transaction remove, rename or link
either name again; and the handle table in step with the tree afterwards (the fixture's
teardown runs `txnfs fsck` and demands exit 0).

`X a c` below is renameat2(a, c, RENAME_EXCHANGE); `W a c` is renameat2(a, c,
RENAME_WHITEOUT), which leaves a whiteout (a 0:0 character device) at `a`.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from txnfs_testing import snapshot as S
from txnfs_testing import txnfs_lib as tl

RENAME_WHITEOUT = 4
X, W = tl.RENAME_EXCHANGE, RENAME_WHITEOUT


def touch(p, data=b""):
    tl.write_file(p, data)


def rename2(root, a, c, flags):
    tl.renameat2(str(root / a), str(root / c), flags)


# Scripts of operations, run inside a transaction on a tree that already holds the
# objects named in `pre`. Each is a list of (op, args...).
SCRIPTS = {
    # the foreign workload's cases
    "exchange, rm target": ([], [("touch", "a"), ("touch", "c"), ("x", "a", "c"), ("rm", "c")]),
    "exchange, rm source": ([], [("touch", "a"), ("touch", "c"), ("x", "a", "c"), ("rm", "a")]),
    "whiteout": (["f0"], [("w", "f0", "f1")]),
    # their relatives
    "exchange old, rm both": (["a", "c"], [("x", "a", "c"), ("rm", "a"), ("rm", "c")]),
    "exchange new with old, rm": (["c"], [("touch", "a"), ("x", "a", "c"), ("rm", "c")]),
    "exchange, rename away": ([], [("touch", "a"), ("touch", "c"), ("x", "a", "c"),
                                   ("mv", "c", "d"), ("mv", "a", "e")]),
    "exchange, link, rm": ([], [("touch", "a"), ("touch", "c"), ("x", "a", "c"),
                                ("ln", "c", "l"), ("rm", "c"), ("rm", "a")]),
    "exchange twice": (["a"], [("touch", "c"), ("x", "a", "c"), ("x", "c", "a"), ("rm", "c")]),
    "whiteout over target": (["f0", "f1"], [("w", "f0", "f1")]),
    "whiteout, rm whiteout": (["f0"], [("w", "f0", "f1"), ("rm", "f0"), ("touch", "f0")]),
    "whiteout, move back": (["f0"], [("w", "f0", "f1"), ("rm", "f0"), ("mv", "f1", "f0")]),
    "whiteout, exchange back": (["f0"], [("w", "f0", "f1"), ("x", "f1", "f0")]),
    "new file whiteout": ([], [("touch", "n"), ("w", "n", "m"), ("rm", "m")]),
    "noreplace, rm": ([], [("touch", "a"), ("mv0", "a", "b"), ("rm", "b")]),
    "created, displaced": ([], [("touch", "a"), ("touch", "b"), ("mv", "a", "b"), ("rm", "b")]),
    "link then remove": ([], [("touch", "a"), ("ln", "a", "b"), ("rm", "a")]),
    # one object losing two names: the log holds two stashes of it, and a commit must
    # still drop its handle row (found by the fuzzer, seed 9127)
    "two names of one object removed": (["a"], [("ln", "a", "b"), ("rm", "a"), ("rm", "b")]),
    "replaced twice": (["a", "c", "n"], [("ln", "a", "h"), ("w", "n", "a"), ("mv", "h", "n"),
                                         ("mv", "c", "n")]),
}


def apply(root, ops):
    for op, *args in ops:
        p = [root / a for a in args]
        if op == "touch":
            touch(p[0], b"made in the transaction\n")
        elif op == "rm":
            os.unlink(p[0])
        elif op == "mv":
            os.rename(p[0], p[1])
        elif op == "mv0":
            tl.renameat2(str(p[0]), str(p[1]), tl.RENAME_NOREPLACE)
        elif op == "x":
            tl.renameat2(str(p[0]), str(p[1]), X)
        elif op == "w":
            tl.renameat2(str(p[0]), str(p[1]), W)
        elif op == "ln":
            os.link(p[0], p[1])
        else:
            raise ValueError(op)


FUTURE_ATIME = 2_000_000_000 * 1_000_000_000  # 2033: relatime leaves such atimes alone


def prepare(mnt, pre):
    """d/ with the committed files `pre`; atimes in the future, so that the listings the
    snapshots make do not move them (relatime)."""
    d = mnt.path / "d"
    d.mkdir()
    for name in pre:
        touch(d / name, f"committed {name}\n".encode())
    for p in [mnt.path, d, *(d / n for n in pre)]:
        st = os.lstat(p)
        os.utime(p, ns=(FUTURE_ATIME, st.st_mtime_ns))
    return d


@pytest.mark.parametrize("case", sorted(SCRIPTS))
def test_abort_restores_exactly(mnt, case):
    pre, ops = SCRIPTS[case]
    d = prepare(mnt, pre)
    before = S.snapshot(mnt.path)
    tid = tl.txn_begin(mnt.path)
    apply(d, ops)
    assert tl.txn_abort(mnt.path, tid) == 0, "the abort must succeed"
    S.assert_same(before, S.snapshot(mnt.path), f"after aborting {case!r}")
    mnt.remount()
    S.assert_same(before, S.snapshot(mnt.path), f"after aborting {case!r} and remounting")


@pytest.mark.parametrize("case", sorted(SCRIPTS))
def test_commit_matches_xfs(mnt, xfs, case):
    pre, ops = SCRIPTS[case]
    d = prepare(mnt, pre)
    ref = xfs.dir / "ref"
    ref.mkdir()
    rd = ref / "d"
    rd.mkdir()
    for name in pre:
        touch(rd / name, f"committed {name}\n".encode())
    apply(rd, ops)
    tid = tl.txn_begin(mnt.path)
    apply(d, ops)
    assert tl.txn_commit(mnt.path, tid) == 0
    mnt.remount()
    want = S.shape(S.snapshot(rd, handles=False))
    got = S.shape(S.snapshot(d, handles=False))
    S.assert_same(want, got, f"{case!r} committed vs. the same on XFS")
    mnt.umount()
    p = mnt.store.fsck()
    assert p.returncode == 0, tl.output_of(p)
    mnt.mount()


@pytest.mark.parametrize("case", ["exchange, rm target", "exchange, rm source", "whiteout",
                                  "whiteout over target", "exchange, link, rm"])
def test_kill9_recovers_exactly(mnt, case):
    pre, ops = SCRIPTS[case]
    d = prepare(mnt, pre)
    before = S.snapshot(mnt.path)
    tl.txn_begin(mnt.path)
    apply(d, ops)
    mnt.kill9()
    mnt.mount()
    S.assert_same(before, S.snapshot(mnt.path), f"after kill -9 during {case!r}")
    mnt.umount()
    p = mnt.store.fsck()
    assert p.returncode == 0, f"fsck after recovery:\n{tl.output_of(p)}"
    mnt.mount()


def test_txnfs_run_abort_exchange(mnt):
    """The reproducer as a user typed it: `txnfs run --abort` of a script."""
    os.utime(mnt.path, ns=(FUTURE_ATIME, os.lstat(mnt.path).st_mtime_ns))
    before = S.snapshot(mnt.path)
    script = ("import ctypes, os; os.chdir(%r); open('a','w').close(); open('c','w').close(); "
              "libc = ctypes.CDLL(None, use_errno=True); "
              "assert libc.renameat2(-100, b'a', -100, b'c', 2) == 0; os.unlink('c')"
              % str(mnt.path))
    p = tl.txnfs("run", mnt.path, "--abort", "--", sys.executable, "-c", script)
    assert p.returncode == 0, tl.output_of(p)
    S.assert_same(before, S.snapshot(mnt.path), "after txnfs run --abort")


def test_whiteout_outside_transactions_has_a_row(mnt):
    """A whiteout made by a plain rename is an object like any other: it has its handle
    row at once (fsck at teardown checks every object has one), and a lookup finds it."""
    sub = mnt.path / "sub"
    sub.mkdir()
    touch(sub / "f0", b"x")
    tl.renameat2(str(sub / "f0"), str(sub / "f1"), W)
    mnt.umount()
    p = mnt.store.fsck()
    assert p.returncode == 0, tl.output_of(p)
    mnt.mount()
    st = os.lstat(sub / "f0")
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _whiteout_as_nobody(d: str, mount: str | None):
    """In a child as nobody: W f0 f1 (inside its own transaction when `mount`), then the
    whiteout's owner and mode."""
    tid = tl.txn_begin(mount) if mount else None
    tl.renameat2(os.path.join(d, "f0"), os.path.join(d, "f1"), W)
    st = os.lstat(os.path.join(d, "f0"))
    if mount:
        assert tl.txn_commit(mount, tid) == 0
    return st.st_uid, st.st_gid, st.st_mode


@pytest.mark.parametrize("in_txn", [False, True], ids=["plain", "transaction"])
@pytest.mark.parametrize("setgid", [False, True], ids=["dir", "setgid dir"])
def test_whiteout_belongs_to_its_caller_as_on_xfs(mnt, xfs, in_txn, setgid):
    """XFS makes the whiteout with the caller's ids (the directory's group in a set-group-ID
    directory), as any new object; the daemon renames as root."""
    got = {}
    for root in (xfs.dir / "ref", mnt.path / "sub"):
        root.mkdir()
        os.chmod(root, 0o2777 if setgid else 0o777)
        touch(root / "f0", b"x")
        mount = str(mnt.path) if in_txn and root.parent == mnt.path else None
        got[root] = tl.as_user(_whiteout_as_nobody, str(root), mount)
    want = got[xfs.dir / "ref"]
    assert want[0] == tl.NOBODY_UID
    assert got[mnt.path / "sub"] == want
    st = os.lstat(mnt.path / "sub" / "f0")  # committed, through a fresh lookup
    assert (st.st_uid, st.st_gid, st.st_mode) == want


@pytest.mark.parametrize("case", ["whiteout, exchange back", "exchange, rm source",
                                  "whiteout over target"])
def test_crash_while_an_abort_removes_its_log(mnt, case):
    """The abort has restored the tree and is deleting its log when the daemon dies: the
    recovery at the next mount must not undo again what is already undone. An object
    that went back to its old name (a whiteout rename, then an exchange back) once
    looked to the rerun like one still to be moved, and recovery failed."""
    pre, ops = SCRIPTS[case]
    d = prepare(mnt, pre)
    before = S.snapshot(mnt.path)
    mnt.umount()
    with tl.crash_at("log.mid_remove:1"):
        mnt.mount()
    tid = tl.txn_begin(mnt.path)
    apply(d, ops + [("touch", "last")])  # the log goes highest record first: keep the
    tl.txn_abort(mnt.path, tid)          # case's own records (the daemon dies after one)
    assert tl.wait_dead(mnt.pid, 10), "the crash point did not fire"
    mnt.pid = None
    tl.lazy_umount(mnt.path)
    mnt.mount()  # recovery runs first
    S.assert_same(before, S.snapshot(mnt.path), f"after a crash in the abort of {case!r}")
