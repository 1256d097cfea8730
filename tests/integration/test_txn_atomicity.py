"""Atomicity of txnfs transactions: all of a transaction or none of it (README.md,
"Transactions"; how an abort undoes each operation: docs/crash-model.md, "Abort").

Every mutating operation type, each in its own transaction and all mixed in one:
  * aborted (explicit txnfs_abort of a thread-bound transaction, or a failing
    `txnfs run`): the whole tree -- names, content, sizes, modes, owners, atime/mtime,
    xattrs, link counts, inode numbers and name_to_handle_at handles -- is exactly the
    snapshot taken before, STORE/tree shows the same, and no backup is left;
  * committed: the tree is what the same operations give on a plain XFS directory,
    stays so after unmount + mount (handles included), and no backup is left.
Then the TC-NFS atomicity scenarios, each a `txnfs run` of a script that fails half-way.

This file is also a small program, used as the command of `txnfs run`:
    python3 test_txn_atomicity.py apply ROOT OP... [--fail]
applies the named operations to the tree at ROOT (then exits 1 with --fail).
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

from txnfs_testing import snapshot as S
from txnfs_testing import txnfs_lib as tl

HERE = Path(__file__).resolve().parent
PY = sys.executable or "/usr/bin/python3"

KiB = 1024
OLD = 1_000_000_000 * 1_000_000_000  # 2001-09-09 in ns: populate()'s mtimes are older
FUTURE_ATIME = 2_000_000_000 * 1_000_000_000  # 2033-05-18 in ns: populate()'s atimes
DAY_NS = 86_400 * 1_000_000_000


# --------------------------------------------------------------------------
# the populated tree
# --------------------------------------------------------------------------

def _rand(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


_write = tl.write_file


def populate(root):
    """A deterministic tree with one group of objects for each operation type, so that
    every operation below can run alone or after any of the others."""
    r = Path(root)
    for d in ("data", "dir1", "dir1/sub", "dir1/tree", "dir1/tree/deeper", "dir2", "dir3",
              "dir3/nested", "emptydir", "links", "xattrs", "xdir", "xdir/inner"):
        os.mkdir(r / d)
    files = {
        "data/big.bin": _rand(1, 300_000), "data/ext.txt": b"extend me\n" * 7,
        "data/empty": b"", "data/empty2": b"", "data/app.txt": b"append\n",
        "data/hl_a": b"hard linked\n", "data/hl2_a": b"hard linked too\n",
        "data/shrink.bin": _rand(2, 100_000), "data/grow.txt": b"grow\n" * 3,
        "data/otrunc1": _rand(3, 50_000), "data/otrunc2": b"owned by nobody\n",
        "data/otrunc3": b"third\n", "data/small.txt": b"small file\n" * 3,
        "data/own.txt": b"own\n", "data/owned": b"nobody's\n", "data/ro": b"read only\n",
        "data/times.txt": b"times\n", "data/victim.bin": _rand(4, 20_000),
        "data/ren1": b"rename me\n", "data/ren2": b"move me\n",
        "data/over_src": b"source of an overwrite\n", "data/over_src2": b"src2\n",
        "data/xa": b"exchange a\n", "data/xb": b"exchange b, longer\n",
        "data/xfile": b"I swap with a directory\n", "data/nr": b"no replace\n",
        "data/nr2": b"no replace 2\n", "data/nr3": b"already here\n",
        "data/xs.txt": b"xattrs set\n", "data/falloc": b"f" * 5000,
        "data/falloc2": b"g" * 3000, "data/punch": _rand(5, 200_000),
        "data/cfr_src": _rand(6, 150_000), "data/cfr_dst": _rand(7, 40_000),
        "dir1/tree/x1": b"x1\n", "dir1/tree/x2": _rand(8, 9000),
        "dir1/tree/deeper/y1": b"y1\n", "dir1/sub/s1": b"s1\n",
        "dir2/t_unlink": b"unlink me\n", "dir2/over_dst": b"overwritten\n" * 10,
        "dir3/a": b"a\n", "dir3/b": _rand(9, 7777), "dir3/nested/c": b"c\n",
        "xattrs/f": b"xattr holder\n", "xdir/inner/z": b"z\n",
        "data/mv_in": b"moved into a new tree\n",
    }
    for p, data in files.items():
        _write(r / p, data)
    # sparse files: data at both ends of a hole
    for p, tail in (("data/sparse", 900_000), ("data/sparse2", 700_000)):
        fd = os.open(r / p, os.O_WRONLY | os.O_CREAT, 0o644)
        os.pwrite(fd, _rand(10, 5000), 0)
        os.pwrite(fd, _rand(11, 5000), tail)
        os.close(fd)
    os.link(r / "data/hl_a", r / "data/hl_b")
    os.link(r / "data/hl_a", r / "dir1/hl_c")
    os.link(r / "data/hl2_a", r / "data/hl2_b")
    os.symlink("../data/small.txt", r / "links/sym")
    os.symlink("nowhere", r / "links/dangling")
    os.symlink("../data/victim.bin", r / "links/victim_sym")
    os.mkfifo(r / "fifo0", 0o640)
    os.setxattr(r / "data/big.bin", "user.tag", b"big")
    os.setxattr(r / "data/victim.bin", "user.v", b"\x00\x01binary\xff")
    os.setxattr(r / "data/xs.txt", "user.tag", b"old")
    os.setxattr(r / "dir2/over_dst", "user.o", b"over")
    os.setxattr(r / "xattrs/f", "user.a", b"A" * 100)
    os.setxattr(r / "xattrs/f", "user.b", bytes(range(256)))
    os.setxattr(r / "xattrs/f", "trusted.t", b"root only")
    os.setxattr(r / "xattrs", "user.dir", b"on a directory")
    os.chmod(r / "data/ro", 0o444)
    os.chmod(r / "data/otrunc3", 0o600)
    os.chown(r / "data/owned", tl.NOBODY_UID, tl.NOBODY_GID)
    os.chown(r / "data/otrunc2", tl.NOBODY_UID, tl.NOBODY_GID)
    os.chown(r / "dir3", 1000, 1000)
    set_times(r, mtime_base=OLD)


def set_times(root, mtime_base=None):
    """Fixed, distinct times on everything under root, deepest first (children change
    their parents' times): mtimes from `mtime_base` (or left alone), atimes in the
    future.  With atime > mtime, ctime and now, relatime never moves an atime on a read,
    so reading inside a transaction (a non-mutating operation, which an abort does not
    undo) cannot change an atime that the tests compare."""
    root = Path(root)
    paths = sorted(root.rglob("*"), key=lambda p: (-len(p.parts), str(p))) + [root]
    for i, p in enumerate(paths):
        mtime = os.lstat(p).st_mtime_ns if mtime_base is None else mtime_base - i * 999_999_937
        os.utime(p, ns=(FUTURE_ATIME + i * 1_000_000_007, mtime), follow_symlinks=False)


# --------------------------------------------------------------------------
# the operations (each touches only its own objects of populate()'s tree)
# --------------------------------------------------------------------------

def _pwrite_at(path, data, off, flags=os.O_WRONLY):
    fd = os.open(path, flags)
    try:
        assert os.pwrite(fd, data, off) == len(data)
    finally:
        os.close(fd)


def op_write_random(r):
    rng = random.Random(20)
    fd = os.open(r / "data/big.bin", os.O_RDWR)
    try:
        for _ in range(25):
            off = rng.randrange(0, 300_000)
            n = rng.randrange(1, 9000)
            os.pwrite(fd, rng.randbytes(n), off)   # may also cross EOF
    finally:
        os.close(fd)
    _pwrite_at(r / "data/sparse", b"into the hole" * 77, 401_233)


def op_write_extend(r):
    _pwrite_at(r / "data/ext.txt", b"far beyond EOF", 100_003)   # leaves a hole
    _pwrite_at(r / "data/empty", _rand(21, 5000), 0)
    size = os.stat(r / "data/big.bin").st_size
    _pwrite_at(r / "data/big.bin", _rand(22, 5000), size - 123)  # across EOF


def op_append(r):
    for p in ("data/app.txt", "data/hl_a"):
        fd = os.open(r / p, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"appended line\n")
            os.write(fd, _rand(23, 3333))
        finally:
            os.close(fd)


def op_truncate_shrink(r):
    os.truncate(r / "data/shrink.bin", 12_345)
    os.truncate(r / "data/sparse2", 500_001)      # cuts off the data after the hole
    fd = os.open(r / "data/hl2_a", os.O_WRONLY)
    os.ftruncate(fd, 3)
    os.close(fd)


def op_truncate_grow(r):
    os.truncate(r / "data/grow.txt", 70_001)
    os.truncate(r / "data/empty2", 4097)


def op_o_trunc(r):
    fd = os.open(r / "data/otrunc1", os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"new content")
    os.close(fd)
    os.close(os.open(r / "data/otrunc2", os.O_WRONLY | os.O_TRUNC))
    with open(r / "data/otrunc3", "wb") as f:   # O_CREAT|O_TRUNC of an existing file
        f.write(b"rewritten\n")


def op_chmod(r):
    os.chmod(r / "data/small.txt", 0o600)
    os.chmod(r / "dir1", 0o700)
    os.chmod(r / "data/ro", 0o4755)


def op_chown(r):
    os.chown(r / "data/own.txt", tl.NOBODY_UID, tl.NOBODY_GID)
    os.chown(r / "data/owned", 0, 0)
    os.chown(r / "dir1/sub", 1000, 1001)
    os.chown(r / "links/sym", tl.NOBODY_UID, 0, follow_symlinks=False)


def op_utime(r):
    # atimes in the future, as populate()'s (so no later read moves them, see set_times)
    os.utime(r / "data/times.txt", ns=(2_123_456_789_012_345_678, 234_567_890_123_456_789))
    os.utime(r / "dir2", ns=(2_145_678_901_234_567_891, 456_789_012_345_678_912))
    os.utime(r / "links/dangling", ns=(2_167_890_123_456_789_123, 678_901_234_567_891_234),
             follow_symlinks=False)


def op_create(r):
    fd = os.open(r / "data/new1", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
    os.write(fd, b"a new file\n" * 100)
    os.close(fd)
    os.close(os.open(r / "data/new2", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def op_mknod_fifo(r):
    os.mkfifo(r / "dir1/newfifo", 0o600)
    os.mknod(r / "data/newfifo2", 0o644 | stat.S_IFIFO)


def op_mkdir(r):
    os.mkdir(r / "newdir", 0o750)
    os.mkdir(r / "newdir/nested")
    _write(r / "newdir/nested/file", b"in a new directory\n")


def op_tree_in_new_dir(r):
    # A tree made inside a directory the transaction made (in place: no undo step per
    # object, docs/crash-model.md), with a hard link, a rename and a removal inside it,
    # new objects under the names those freed, and a committed file moved in.
    t = r / "newtree"
    os.mkdir(t, 0o755)
    os.makedirs(t / "a/b")
    _write(t / "a/f", b"first f\n")
    _write(t / "a/b/x", b"x\n" * 50)
    os.link(t / "a/f", t / "a/f_link")
    os.rename(t / "a/f", t / "a/g")
    _write(t / "a/f", b"second f\n")
    os.unlink(t / "a/b/x")
    os.mkdir(t / "a/b/x")
    os.symlink("../f", t / "a/b/x/up")
    os.rename(r / "data/mv_in", t / "a/b/moved_in")


def op_symlink(r):
    os.symlink("../data/big.bin", r / "links/new")
    os.symlink("x" * 1000, r / "links/new_long")


def op_hardlink(r):
    os.link(r / "data/small.txt", r / "dir2/small_link")
    os.link(r / "data/hl_a", r / "data/hl_d")


def op_unlink(r):
    for p in ("data/victim.bin", "data/hl_b", "links/victim_sym", "fifo0", "dir2/t_unlink"):
        os.unlink(r / p)


def op_rmdir(r):
    os.rmdir(r / "emptydir")
    shutil.rmtree(r / "dir1/tree")


def op_rename_file(r):
    os.rename(r / "data/ren1", r / "data/ren1_new")
    os.rename(r / "data/ren2", r / "dir2/ren2_moved")


def op_rename_dir(r):
    os.rename(r / "dir3", r / "dir2/dir3_moved")


def op_rename_over(r):
    os.rename(r / "data/over_src", r / "dir2/over_dst")
    os.rename(r / "data/over_src2", r / "data/hl2_b")   # over one name of a hard link


def op_rename_exchange(r):
    tl.renameat2(r / "data/xa", r / "data/xb", tl.RENAME_EXCHANGE)
    tl.renameat2(r / "data/xfile", r / "xdir", tl.RENAME_EXCHANGE)   # file <-> directory


def op_rename_noreplace(r):
    tl.renameat2(r / "data/nr", r / "data/nr_new", tl.RENAME_NOREPLACE)
    e = tl.errno_of(tl.renameat2, r / "data/nr2", r / "data/nr3", tl.RENAME_NOREPLACE)
    assert e == errno.EEXIST, f"RENAME_NOREPLACE onto an existing name: errno {e}"


def op_setxattr(r):
    os.setxattr(r / "data/xs.txt", "user.new", b"new value")
    os.setxattr(r / "data/xs.txt", "user.tag", b"replaced, and longer than before",
                os.XATTR_REPLACE)
    os.setxattr(r / "xattrs", "user.dir", b"changed")
    os.setxattr(r / "xattrs", "trusted.new", b"\x00" * 300)


def op_removexattr(r):
    os.removexattr(r / "xattrs/f", "user.a")
    os.removexattr(r / "xattrs/f", "trusted.t")


def op_fallocate(r):
    def fa(p, mode, off, n):
        fd = os.open(r / p, os.O_RDWR)
        try:
            tl.fallocate(fd, mode, off, n)
        finally:
            os.close(fd)
    fa("data/falloc", 0, 3000, 1 << 20)                          # grows the file
    fa("data/falloc2", tl.FALLOC_FL_KEEP_SIZE, 0, 256 * KiB)     # blocks beyond EOF
    fa("data/punch", tl.FALLOC_FL_PUNCH_HOLE | tl.FALLOC_FL_KEEP_SIZE, 1001, 70_003)
    fa("data/punch", tl.FALLOC_FL_PUNCH_HOLE | tl.FALLOC_FL_KEEP_SIZE, 131_072, 65_536)


def op_copy_file_range(r):
    src = os.open(r / "data/cfr_src", os.O_RDONLY)
    dst = os.open(r / "data/cfr_dst", os.O_WRONLY)
    try:
        for off_in, off_out, n in ((0, 0, 65_536), (1_001, 30_007, 50_000), (4096, 8192, 4096)):
            done = 0
            while done < n:
                k = os.copy_file_range(src, dst, n - done, off_in + done, off_out + done)
                assert k > 0, "copy_file_range copied nothing"
                done += k
    finally:
        os.close(src)
        os.close(dst)


OPS = {name[3:]: fn for name, fn in list(globals().items())
       if name.startswith("op_") and callable(fn)}
# an order in which all of them run in one transaction (each only touches its own objects)
MIXED = list(OPS)


def apply(root, names):
    for n in names:
        for one in (MIXED if n == "mixed" else [n]):
            OPS[one](Path(root))


# --------------------------------------------------------------------------
# helpers for the tests
# --------------------------------------------------------------------------

def comparable(snap: dict) -> dict:
    """shape() plus the times that populate() or an operation set explicitly (all of
    them more than a day away from now): what a committed transaction must have in
    common with a plain XFS directory to which the same operations were applied."""
    out = S.shape(snap)
    now = time.time_ns()
    for p, e in snap.items():
        for k in ("atime_ns", "mtime_ns"):
            if abs(e[k] - now) > DAY_NS:
                out[p][k] = e[k]
    return out


def baseline(mnt):
    return S.stable_snapshot(mnt.path)


def assert_uncreated_handles_stale(mnt, before, inside):
    """Handles of objects that only the aborted transaction created must be stale
    (ESTALE), never open another object."""
    known = {e["handle"] for e in before.values()}
    new = {p: e["handle"] for p, e in inside.items() if e["handle"] not in known}
    mfd = os.open(mnt.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for p, (htype, hexdata) in new.items():
            fh = tl.FileHandle(htype, bytes.fromhex(hexdata))
            e = tl.errno_of(lambda: os.close(tl.open_by_handle_at(mfd, fh, os.O_PATH)))
            assert e == errno.ESTALE, (
                f"the handle of {p}, created by the aborted transaction: "
                f"open_by_handle_at gave {errno.errorcode.get(e, e) if e else 'an open file'}, "
                f"expected ESTALE")
    finally:
        os.close(mfd)


def run_as_txn(mnt, fn, *, commit: bool):
    """Begin a transaction bound to this thread, run fn(), snapshot the tree from inside,
    then commit or abort.  Returns the snapshot seen inside.  The transaction never
    outlives this call (an exception aborts it)."""
    tid = tl.txn_begin(mnt.path)
    ended = False
    try:
        fn()
        inside = S.snapshot(mnt.path)
        rc = tl.txn_commit(mnt.path, tid) if commit else tl.txn_abort(mnt.path, tid)
        ended = True
        assert rc == 0, f"txnfs_{'commit' if commit else 'abort'}: {rc} ({os.strerror(-rc)})"
        return inside
    finally:
        if not ended:
            tl.txn_abort(mnt.path, tid)


def txnfs_run(mnt, *cmd, user=None, expect_rc=None, abort=False, timeout=60):
    """`txnfs run MOUNT -- CMD`, optionally as another uid (setpriv); returns the process."""
    argv = [tl.txnfs_bin(), "run", *(["--abort"] if abort else []), str(mnt.path), "--",
            *map(str, cmd)]
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, cwd="/", env=tl.python_env())
    if expect_rc is not None:
        assert p.returncode == expect_rc, (
            f"{' '.join(argv)}: exit {p.returncode}, expected {expect_rc}\n"
            f"--- stdout ---\n{p.stdout}--- stderr ---\n{p.stderr}")
    return p


# --------------------------------------------------------------------------
# per operation type: abort and commit
# --------------------------------------------------------------------------

OP_PARAMS = sorted(OPS) + ["mixed"]


def _test_abort(mnt, name):
    populate(mnt.path)
    before = baseline(mnt)
    store_before = S.snapshot(mnt.store.tree, handles=False)
    inside = run_as_txn(mnt, lambda: apply(mnt.path, [name]), commit=False)
    assert S.diff(before, inside), f"{name}: the operations changed nothing inside the transaction"
    S.assert_restored(mnt, before, f"after aborting '{name}'", store_before=store_before)
    assert_uncreated_handles_stale(mnt, before, inside)
    # and the kernel's view after a fresh mount agrees (no stale cache hid anything)
    after = S.snapshot(mnt.path)
    mnt.remount()
    S.assert_same(S.strip(after, ("atime_ns",)), S.strip(S.snapshot(mnt.path), ("atime_ns",)),
                  f"after aborting '{name}' and remounting")


def _test_commit(mnt, xfs, name):
    ref = xfs.dir / "ref"
    ref.mkdir()
    populate(ref)
    populate(mnt.path)
    baseline(mnt)
    inside = run_as_txn(mnt, lambda: apply(mnt.path, [name]), commit=True)
    apply(ref, [name])
    after = S.snapshot(mnt.path)
    ref_snap = comparable(S.snapshot(ref, handles=False))
    # the committed tree is what the same operations do on plain XFS
    S.assert_same(ref_snap, comparable(after),
                  f"'{name}' committed vs. the same operations on plain XFS")
    # the transaction saw its own effects as plain XFS shows them
    S.assert_same(ref_snap, comparable(inside),
                  f"'{name}' seen from inside its transaction vs. plain XFS")
    # and what it saw of itself is what everyone sees now, times, inode numbers and
    # handles included (reads inside it may have moved directory atimes: left out)
    S.assert_same(S.strip(inside, ("atime_ns",)), S.strip(after, ("atime_ns",)),
                  f"'{name}' after commit vs. inside the transaction")
    S.assert_no_backups(mnt.store)
    settled = S.stable_snapshot(mnt.path)
    S.assert_same(S.strip(settled), S.strip(S.snapshot(mnt.store.tree, handles=False)),
                  f"'{name}' committed: STORE/tree vs. the mount")
    mnt.remount()
    S.assert_same(settled, S.snapshot(mnt.path), f"'{name}' committed, after unmount + mount")
    shutil.rmtree(ref)


def test_each_op_aborted(mnt, op_name):
    _test_abort(mnt, op_name)


def test_each_op_committed(mnt, xfs, op_name):
    _test_commit(mnt, xfs, op_name)


def pytest_generate_tests(metafunc):  # noqa: D103 (pytest hook, module-level)
    if "op_name" in metafunc.fixturenames:
        metafunc.parametrize("op_name", OP_PARAMS)


def test_mixed_aborted_by_failing_txnfs_run(mnt):
    """All operation types in one `txnfs run` whose command then fails."""
    populate(mnt.path)
    before = baseline(mnt)
    p = txnfs_run(mnt, PY, __file__, "apply", mnt.path, "mixed", "--fail", expect_rc=1)
    assert "APPLIED mixed" in p.stdout, f"the command did not get through its operations:\n{p.stdout}{p.stderr}"
    assert "aborted" in p.stderr, p.stderr
    S.assert_restored(mnt, before, "after a failing `txnfs run` of all operations")


def test_mixed_committed_by_txnfs_run(mnt, xfs):
    ref = xfs.dir / "ref"
    ref.mkdir()
    populate(ref)
    populate(mnt.path)
    baseline(mnt)
    p = txnfs_run(mnt, PY, __file__, "apply", mnt.path, "mixed", expect_rc=0)
    assert "committed" in p.stderr, p.stderr
    apply(ref, ["mixed"])
    S.assert_same(comparable(S.snapshot(ref, handles=False)), comparable(S.snapshot(mnt.path)),
                  "all operations committed by `txnfs run` vs. plain XFS")
    S.assert_no_backups(mnt.store)
    after = S.stable_snapshot(mnt.path)
    S.assert_same(S.strip(after), S.strip(S.snapshot(mnt.store.tree, handles=False)),
                  "committed `txnfs run`: STORE/tree vs. the mount")
    mnt.remount()
    S.assert_same(after, S.snapshot(mnt.path), "committed `txnfs run`, after unmount + mount")


def test_abort_then_commit_same_objects(mnt):
    """An aborted transaction followed by a committed one on the same objects: the undo
    of the first must not leak into the second (and vice versa)."""
    populate(mnt.path)
    before = baseline(mnt)
    run_as_txn(mnt, lambda: apply(mnt.path, ["mixed"]), commit=False)
    S.assert_restored(mnt, before, "after the first (aborted) transaction")
    inside = run_as_txn(mnt, lambda: apply(mnt.path, ["write_random", "unlink", "rename_dir"]),
                        commit=True)
    S.assert_same(S.strip(inside, ("atime_ns",)), S.strip(S.snapshot(mnt.path), ("atime_ns",)),
                  "the second transaction: after its commit vs. inside it")
    S.assert_no_backups(mnt.store)


def test_an_abort_leaves_alone_the_object_that_took_the_inode_number_it_freed(mnt):
    """An abort removes what its transaction made, and only later marks those objects
    gone and drops their handle rows. XFS may give the inode number (the nodeid) to an
    object made meanwhile by someone else: that object must stay usable, not answer
    ESTALE (a crash soak met it as a create failing with ESTALE). The window is held
    open with TXNFS_PAUSE_AT at the point right after the rollback, and the fd cache kept
    small, which otherwise holds the removed objects until then."""
    import threading
    mnt.umount()
    os.environ["TXNFS_PAUSE_AT"] = "abort.after_undo:1500"
    try:
        mnt.mount("--fd-cache", "1")  # (a cached fd would keep a removed inode alive)
    finally:
        del os.environ["TXNFS_PAUSE_AT"]
    m = Path(mnt.path)
    os.mkdir(m / "d")
    made = {}

    def txn():
        tid = tl.txn_begin(m)
        for k in range(8):
            tl.write_file(m / "d" / f"made{k}", b"made by the aborted transaction")
        made["inos"] = {os.stat(m / "d" / f"made{k}").st_ino for k in range(8)}
        made["abort"] = tl.txn_abort(m, tid)   # rolls back, then pauses 1.5 s

    t = threading.Thread(target=txn)
    t.start()
    while "inos" not in made:
        time.sleep(0.01)
    time.sleep(0.3)   # the abort is inside its pause now: the files are gone
    reused = []
    for k in range(64):
        p = m / "d" / f"plain{k}"
        tl.write_file(p, b"made outside any transaction")
        if os.stat(p).st_ino in made["inos"]:
            reused.append(p)
    t.join(30)
    assert made["abort"] == 0
    assert reused, "XFS gave none of the freed inode numbers away (nothing was tested)"
    for p in reused:
        assert p.read_bytes() == b"made outside any transaction", p
        tl.write_file(p, b"still usable")
    mnt.umount()
    p = mnt.store.fsck()
    assert p.returncode == 0, tl.output_of(p)


def test_a_directory_removed_in_a_transaction_shows_link_count_0_as_on_xfs(mnt, xfs):
    """rmdir (or a rename over an empty directory) inside a transaction: an fd still
    open on the directory shows link count 0, as on XFS -- although the undo log keeps
    the directory, with its links, until the transaction ends."""
    def run(root: Path, in_txn: bool):
        os.mkdir(root / "gone")
        os.mkdir(root / "victim")
        os.mkdir(root / "mover")
        fds = [os.open(root / n, os.O_RDONLY | os.O_DIRECTORY) for n in ("gone", "victim")]
        tid = tl.txn_begin(root) if in_txn else None
        try:
            os.rmdir(root / "gone")
            os.rename(root / "mover", root / "victim")
            return [os.fstat(fd).st_nlink for fd in fds]
        finally:
            if tid is not None:
                assert tl.txn_commit(root, tid) == 0
            for fd in fds:
                os.close(fd)
    want = run(xfs.dir, False)
    assert want == [0, 0], want
    assert run(Path(mnt.path), True) == want


def test_link_count_right_after_commit(mnt):
    """A transaction unlinks (or renames over) one name of a hard-linked file and commits:
    as soon as commit returns, the other name shows the new link count -- on the mount
    and in STORE/tree -- and keeps showing it once the backups are cleaned up (the
    unlinked name waits in the backup area until then, but must not be counted)."""
    r = mnt.path
    bad = []
    n_files = 100
    for i in range(n_files):
        a, b = r / f"a{i}", r / f"b{i}"
        a.write_bytes(b"x")
        os.link(a, b)
        (r / f"src{i}").write_bytes(b"y")
        tid = tl.txn_begin(r)
        if i % 2:
            os.unlink(b)
        else:
            os.rename(r / f"src{i}", b)       # over the second name
        rc = tl.txn_commit(r, tid)
        assert rc == 0, rc
        n = os.lstat(a).st_nlink
        if n != 1:
            bad.append((a.name, "unlink" if i % 2 else "rename over", n))
    S.assert_no_backups(mnt.store)
    later = {a: os.lstat(r / a).st_nlink for a, _, _ in bad}
    store = {a: os.lstat(mnt.store.tree / a).st_nlink for a, _, _ in bad}
    assert not bad, (f"right after commit, st_nlink was not 1 for {len(bad)} of {n_files} files "
                     f"(name, operation, nlink): {bad}; once the backups were gone the "
                     f"mount showed {later}, STORE/tree {store}")


# --------------------------------------------------------------------------
# TC-NFS atomicity scenarios: `txnfs run` of a script that fails half-way
# --------------------------------------------------------------------------

LONG = "n" * 300   # longer than NAME_MAX (255): ENAMETOOLONG


def _scenario(mnt, setup, script, *, expect_rc, progress, user=None, shell="sh"):
    """setup(root) prepares the tree; SCRIPT runs in ROOT (as `sh -c` or `python3 -c`) in
    one `txnfs run` and must fail with `expect_rc` after printing every line of
    `progress` (proof that it got half-way); then the tree must be as before."""
    root = mnt.path / "t"
    root.mkdir()
    setup(root)
    if user is not None:
        os.chown(root, user, user)
    set_times(root)
    before = baseline(mnt)
    store_before = S.snapshot(mnt.store.tree, handles=False)
    cmd = ["sh", "-c", f"cd '{root}' && {script}"] if shell == "sh" else \
          [PY, "-c", f"import os\nos.chdir({str(root)!r})\n{script}"]
    p = txnfs_run(mnt, *cmd, user=user, expect_rc=expect_rc)
    for line in progress:
        assert line in p.stdout, (f"the script did not get as far as {line!r}:\n"
                                  f"--- stdout ---\n{p.stdout}--- stderr ---\n{p.stderr}")
    assert "aborted" in p.stderr, p.stderr
    S.assert_restored(mnt, before, "after the failed script", store_before=store_before)
    return p


def test_tcnfs_mkdir_chain_eexist(mnt):
    def setup(r):
        os.mkdir(r / "exists")
        _write(r / "exists/keep", b"keep me\n")
    _scenario(mnt, setup,
              "set -e; mkdir a; mkdir a/b; mkdir a/b/c; echo made-abc; mkdir d1 d2; "
              "echo made-d; mkdir exists; echo NOT-REACHED; mkdir a/b/c/d",
              expect_rc=1, progress=["made-abc", "made-d"])


def test_tcnfs_mkdir_p_chain_into_existing_middle(mnt):
    """A chain whose middle component already exists: mkdir -p goes through it, then a
    plain mkdir of the existing middle fails."""
    def setup(r):
        os.makedirs(r / "a/b")
        _write(r / "a/b/f", b"pre-existing\n")
    _scenario(mnt, setup,
              "set -e; mkdir -p a/b/c/d; echo made-chain; ls a/b/c/d >/dev/null; "
              "mkdir a/b; echo NOT-REACHED",
              expect_rc=1, progress=["made-chain"])


def test_tcnfs_create_with_invalid_name(mnt):
    _scenario(mnt, lambda r: None,
              f"set -e; echo one > f1; echo two > f2; mkdir sub; echo three > sub/f3; "
              f"echo created; echo bad > {LONG}; echo NOT-REACHED; echo four > f4",
              expect_rc=2, progress=["created"])


def test_tcnfs_create_in_mode_0000_dir_unprivileged(mnt):
    """The whole `txnfs run` runs as nobody; the tree is nobody's, one directory in it
    is mode 0000."""
    def setup(r):
        os.mkdir(r / "locked")
        _write(r / "pre", b"pre-existing\n")
        for p in (r / "locked", r / "pre"):
            os.chown(p, tl.NOBODY_UID, tl.NOBODY_GID)
        os.chmod(r / "locked", 0o000)
    p = _scenario(mnt, setup,
                  "set -e; echo one > f1; echo two >> pre; mkdir d; echo three > d/f3; "
                  "echo created; echo bad > locked/f4; echo NOT-REACHED",
                  expect_rc=2, progress=["created"], user=tl.NOBODY_UID)
    assert "Permission denied" in p.stderr, p.stderr


def test_tcnfs_o_trunc_with_bad_name(mnt):
    names = ["f1", "f2", "f3", "f4"]

    def setup(r):
        for i, n in enumerate(names):
            _write(r / n, _rand(100 + i, 10_000 + 999 * i))
    _scenario(mnt, setup,
              "for n in ['f1', 'f2', 'f3', " + repr(LONG) + ", 'f4']:\n"
              "    fd = os.open(n, os.O_WRONLY | os.O_TRUNC)\n"
              "    os.write(fd, b'truncated ' + n.encode())\n"
              "    os.close(fd)\n"
              "    print('truncated', n, flush=True)\n",
              expect_rc=1, progress=["truncated f1", "truncated f3"], shell="python")


def test_tcnfs_creations_mixed_with_existing(mnt):
    def setup(r):
        for n in ("pre1", "pre2"):
            _write(r / n, b"existing " + n.encode() + b"\n")
        os.setxattr(r / "pre1", "user.x", b"keep")
    # touch creates the new ones and only changes times of the existing ones;
    # >> appends to all of them
    _scenario(mnt, setup,
              "set -e; touch n1 pre1 n2 pre2 n3; for f in n1 pre1 n2 pre2 n3; do "
              "echo more >> $f; done; ls; echo done-touch; exit 7",
              expect_rc=7, progress=["done-touch", "n3", "pre2"])


def test_tcnfs_exclusive_creations_stop_at_existing(mnt):
    def setup(r):
        _write(r / "pre1", b"existing\n")
    _scenario(mnt, setup,
              "for n in ['n1', 'n2', 'pre1', 'n3']:\n"
              "    os.close(os.open(n, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))\n"
              "    print('created', n, flush=True)\n",
              expect_rc=1, progress=["created n1", "created n2"], shell="python")


def test_tcnfs_remove_with_one_missing(mnt):
    def setup(r):
        for n in ("f1", "f2", "f3"):
            _write(r / n, n.encode() * 1000)
        os.link(r / "f1", r / "f1_link")
        os.mkdir(r / "d1")
    # rm goes on past the missing name and exits 1; the separate rmdir stops after it
    _scenario(mnt, setup,
              "rm f1 f2 gone f3; echo rm-status=$?; ls; rmdir d1 && echo rmdir-ok; "
              "rm gone2 && echo NOT-REACHED; exit 1",
              expect_rc=1, progress=["rm-status=1", "f1_link", "rmdir-ok"])


def test_tcnfs_links_onto_existing_names(mnt):
    def setup(r):
        _write(r / "target", b"link target\n")
        _write(r / "existing", b"I was here first\n")
        os.symlink("target", r / "existing_sym")
    _scenario(mnt, setup,
              "set -e; ln target h1; ln -s target s1; echo linked; "
              "ln target existing || echo hard-EEXIST; ln -s target existing_sym || "
              "echo sym-EEXIST; ln -s target existing; echo NOT-REACHED",
              expect_rc=1, progress=["linked", "hard-EEXIST", "sym-EEXIST"])


def test_tcnfs_writes_at_random_offsets(mnt):
    def setup(r):
        for i in range(3):
            _write(r / f"f{i}", _rand(200 + i, 64 * KiB + 13 * i))
    _scenario(mnt, setup,
              "import random\n"
              "rng = random.Random(7)\n"
              "for i in range(3):\n"
              "    fd = os.open(f'f{i}', os.O_WRONLY)\n"
              "    for _ in range(40):\n"
              "        os.pwrite(fd, rng.randbytes(rng.randrange(1, 5000)), rng.randrange(0, 70000))\n"
              "    os.close(fd)\n"
              "print('wrote', flush=True)\n"
              "os.open('missing', os.O_RDONLY)\n",
              expect_rc=1, progress=["wrote"], shell="python")


def test_tcnfs_writes_that_extend(mnt):
    def setup(r):
        _write(r / "small", b"short\n")
        _write(r / "empty", b"")
        _write(r / "block", _rand(300, 4096))
    _scenario(mnt, setup,
              "set -e; head -c 100000 /dev/urandom >> small; "
              "dd if=/dev/urandom of=empty bs=1000 count=3 seek=5 status=none; "
              "dd if=/dev/zero of=block bs=1 count=1 seek=1048576 conv=notrunc status=none; "
              "wc -c small empty block; echo extended; false",
              expect_rc=1, progress=["extended", "1048577 block"])


# --------------------------------------------------------------------------
# the program run by `txnfs run` above
# --------------------------------------------------------------------------

if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "apply":
        fail = "--fail" in args
        names = [a for a in args[2:] if a != "--fail"]
        apply(args[1], names)
        print("APPLIED", " ".join(names), flush=True)
        sys.exit(1 if fail else 0)
    sys.exit(f"usage: {sys.argv[0]} apply ROOT OP... [--fail]")
