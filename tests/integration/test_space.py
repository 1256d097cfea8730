"""Space of removed objects: txnfs frees it as XFS does.

On XFS the blocks of a file whose last name is removed are freed as soon as nothing
holds the file any more (an open file, an O_PATH fd, a working directory). The txnfs
daemon keeps O_PATH fds of the objects the kernel knows (its fd cache), and a
transaction keeps what it removed in its undo log until it ends; neither may keep an
object's blocks once the object is unlinked and the kernel has forgotten it, or once the
transaction that removed (or, aborted, made) it has ended. Else a small store fills up
with files nobody can reach, and stays full until unmount.

  * fill-remove-fill cycles on a small store (a 300 MiB image, about 230 MiB free): each
    cycle writes 40 % of the free space and removes it again -- plainly, in committed
    transactions (made in one, removed or replaced by a rename in another), in aborted
    ones (made, then rolled back), and once filling the store to ENOSPC inside a
    transaction that then aborts. No write may fail while what was removed would make
    room, and the free space must come back;
  * the daemon holds no fd (its /proc/PID/fd) to an unlinked object inside the store, nor
    to anything in the undo logs' directory, once the kernel forgot the object or the
    transaction ended; while a process still holds a removed file, it stays usable as on
    XFS (compared with a raw XFS directory, as the user nobody).
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path

import pytest

from txnfs_testing import txnfs_lib as tl

MiB = 1 << 20
SLACK = 16 * MiB  # free space the store's own files (SQLite's WAL, logs) may take
CYCLES = 3        # 3 x 40 % of the free space: the third fill fails if removals leak

pytestmark = [pytest.mark.xfs_size(300 * MiB), pytest.mark.txnfs_timeout(600)]


def free_bytes(path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path, size: int) -> None:
    """Writes `size` bytes (not zeros: every block allocated) to a new file at `path`.
    ENOSPC propagates."""
    chunk = b"\xa5" * MiB
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        left = size
        while left > 0:
            left -= os.write(fd, chunk[:min(left, MiB)])
    finally:
        os.close(fd)


def forget_everything() -> None:
    """The kernel forgets every dentry and inode it can drop (echo 2 > drop_caches).

    The daemon may keep an fd to a removed object for as long as the kernel knows the
    object: a process may still hold it (an O_PATH fd, a working directory), and XFS keeps
    such an object too. When the kernel lets go it sends FORGET, and the fd must go then.
    An unlinked inode no one holds is dropped by the kernel at once; dropping the caches
    makes sure the kernel has let go of everything it could, so what the daemon still
    holds afterwards is the daemon's own doing."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("2\n")


def held_removed(mnt) -> list[str]:
    """What the daemon holds open of removed objects in the store, or inside the undo
    logs' directory (STORE/.txnfs/backups/...): readlinks of /proc/PID/fd."""
    store = str(mnt.store.path)
    backups = str(mnt.store.internal / "backups") + "/"
    found = []
    fd_dir = f"/proc/{mnt.pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except FileNotFoundError:
            continue  # closed meanwhile
        if target.startswith(backups) or (target.startswith(store) and target.endswith(" (deleted)")):
            found.append(target)
    return found


def assert_holds_nothing_removed(mnt, what: str) -> None:
    forget_everything()
    # (FORGET and the removal of a finished transaction's log are asynchronous.)
    left = tl.wait_until(lambda: not held_removed(mnt), 10)
    assert left, f"{what}: the daemon still holds {held_removed(mnt)}"


def wait_for_space(path, want: int) -> bool:
    """XFS frees an unlinked file's blocks in the background (inode inactivation)."""
    return bool(tl.wait_until(lambda: free_bytes(path) >= want, 10, 0.1))


def in_txn(mnt, fn, commit=True):
    """Runs fn() in a transaction bound to this thread; commits or aborts it."""
    tid = tl.txn_begin(mnt.path)
    try:
        fn()
    except BaseException:
        tl.txn_abort(mnt.path, tid)
        raise
    rc = tl.txn_commit(mnt.path, tid) if commit else tl.txn_abort(mnt.path, tid)
    assert rc == 0, f"{'commit' if commit else 'abort'}: {os.strerror(-rc)}"


class Cycles:
    """Fill-remove cycles on the store's file system, which starts with `base` bytes free."""

    def __init__(self, mnt, xfs):
        self.mnt, self.fs = mnt, xfs.dir
        os.sync()
        self.base = free_bytes(self.fs)
        self.size = int(self.base * 0.4) // MiB * MiB

    def run(self, name: str, cycle, keep: int = 0) -> None:
        """Runs cycle(k) CYCLES times; each leaves `keep` bytes in use."""
        for k in range(CYCLES):
            try:
                cycle(k)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                pytest.fail(f"{name}, cycle {k + 1}: ENOSPC writing {self.size >> 20} MiB with "
                            f"{free_bytes(self.fs) >> 20} MiB free of {self.base >> 20} MiB; the "
                            f"daemon holds {held_removed(self.mnt)}")
            os.sync()
            wait_for_space(self.fs, self.base - keep - SLACK)  # (the next fill tells)

    def assert_space_back(self, name: str) -> None:
        os.sync()
        assert wait_for_space(self.fs, self.base - SLACK), (
            f"{name}: {free_bytes(self.fs) >> 20} MiB free after removing everything, "
            f"{self.base >> 20} MiB before; the daemon holds {held_removed(self.mnt)}")


def test_plain_fill_remove_cycles(mnt, xfs):
    c = Cycles(mnt, xfs)
    f = mnt.path / "f"

    def cycle(k):
        fill(f, c.size)
        os.unlink(f)

    c.run("rm", cycle)
    c.assert_space_back("rm")


def test_committed_fill_remove_cycles(mnt, xfs):
    """Made in one committed transaction, removed in the next."""
    c = Cycles(mnt, xfs)
    f = mnt.path / "f"

    def cycle(k):
        in_txn(mnt, lambda: fill(f, c.size))
        in_txn(mnt, lambda: os.unlink(f))

    c.run("committed rm", cycle)
    c.assert_space_back("committed rm")


def test_committed_replace_by_rename_cycles(mnt, xfs):
    """Each transaction writes a new file and renames it over the previous one: the
    replaced file waits in the undo log until the commit, and must go then."""
    c = Cycles(mnt, xfs)
    f, new = mnt.path / "f", mnt.path / "f.new"

    def replace():
        fill(new, c.size)
        os.rename(new, f)

    c.run("replaced by rename", lambda k: in_txn(mnt, replace), keep=c.size)
    in_txn(mnt, lambda: os.unlink(f))
    c.assert_space_back("replaced by rename")


def test_aborted_fill_cycles(mnt, xfs):
    """What an aborted transaction made keeps no space, not even a fill to ENOSPC."""
    c = Cycles(mnt, xfs)
    f = mnt.path / "f"
    c.run("aborted creation", lambda k: in_txn(mnt, lambda: fill(f, c.size), commit=False))
    assert not f.exists()
    c.assert_space_back("aborted creation")

    def fill_up():
        with pytest.raises(OSError) as e:
            fill(f, 2 * c.base)
        assert e.value.errno == errno.ENOSPC, e.value

    in_txn(mnt, fill_up, commit=False)
    assert not f.exists()
    c.assert_space_back("after an aborted fill to ENOSPC")

    def cycle(k):  # the store is usable again, plainly and in transactions
        fill(f, c.size)
        os.unlink(f)
        in_txn(mnt, lambda: fill(f, c.size))
        in_txn(mnt, lambda: os.unlink(f))

    c.run("after an aborted fill", cycle)
    c.assert_space_back("after an aborted fill")


def test_removed_objects_hold_no_fd(mnt, xfs):
    root = mnt.path
    data = b"removed " * 4096
    # A plain removal of a file the daemon has served (its fd is cached).
    tl.write_file(root / "plain", data)
    assert (root / "plain").read_bytes() == data
    os.unlink(root / "plain")
    assert_holds_nothing_removed(mnt, "plain unlink")
    # A removal of one of two hard links keeps the object (and may keep its fd).
    tl.write_file(root / "a", data)
    os.link(root / "a", root / "b")
    os.unlink(root / "a")
    assert (root / "b").read_bytes() == data
    os.unlink(root / "b")
    assert_holds_nothing_removed(mnt, "unlink of the last of two links")
    # A directory.
    os.mkdir(root / "d")
    os.listdir(root / "d")
    os.rmdir(root / "d")
    assert_holds_nothing_removed(mnt, "rmdir")
    # A plain rename over a file.
    tl.write_file(root / "old", data)
    tl.write_file(root / "new", b"new")
    os.rename(root / "new", root / "old")
    assert_holds_nothing_removed(mnt, "rename over a file")

    # Committed transactions: the removed objects wait in the undo log until the end.
    tl.write_file(root / "t1", data)
    tl.write_file(root / "t2", data)
    os.mkdir(root / "td")
    in_txn(mnt, lambda: (os.unlink(root / "t1"), os.rmdir(root / "td")))
    assert_holds_nothing_removed(mnt, "unlink and rmdir in a committed transaction")
    in_txn(mnt, lambda: (tl.write_file(root / "t3", b"new"), os.rename(root / "t3", root / "t2")))
    assert (root / "t2").read_bytes() == b"new"
    assert_holds_nothing_removed(mnt, "rename over a file in a committed transaction")
    # One lazily committed: its log stays until a group commit makes it durable.
    tid = tl.txn_begin(mnt.path)
    os.unlink(root / "t2")
    assert tl.txn_commit_lazy(mnt.path, tid) == 0
    assert tl.txn_sync(mnt.path) == 0
    assert_holds_nothing_removed(mnt, "unlink in a lazily committed transaction")

    # Aborted transactions: what they made goes; what they removed comes back whole.
    tl.write_file(root / "keep", data)
    os.mkdir(root / "keepdir")

    def changes():
        tl.write_file(root / "made", data)
        os.mkdir(root / "madedir")
        tl.write_file(root / "madedir" / "inner", data)
        os.unlink(root / "keep")
        os.rmdir(root / "keepdir")
        tl.write_file(root / "made2", data)
        os.rename(root / "made2", root / "made")

    in_txn(mnt, changes, commit=False)
    assert (root / "keep").read_bytes() == data and (root / "keepdir").is_dir()
    assert not (root / "made").exists() and not (root / "madedir").exists()
    assert_holds_nothing_removed(mnt, "an aborted transaction")
    # The restored file is served from its (possibly cached) fd as before.
    assert (root / "keep").read_bytes() == data
    os.unlink(root / "keep")
    os.rmdir(root / "keepdir")
    assert_holds_nothing_removed(mnt, "removing what an abort restored")
    mnt.umount()
    mnt.mount("--fd-cache", "64")
    tl.write_file(root / "small", data)
    os.unlink(root / "small")
    assert_holds_nothing_removed(mnt, "plain unlink with --fd-cache 64")


def _use_removed(path, in_txn_of=None):
    """As the calling user: opens `path` (O_RDONLY and O_PATH), removes it (in a
    transaction on mount `in_txn_of`, committed), then reads and fstats it through the
    fds. Returns what that showed."""
    fd = os.open(path, os.O_RDONLY)
    pfd = os.open(path, os.O_PATH)
    try:
        if in_txn_of:
            tid = tl.txn_begin(in_txn_of)
            os.unlink(path)
            assert tl.txn_commit(in_txn_of, tid) == 0
        else:
            os.unlink(path)
        st, pst = os.fstat(fd), os.fstat(pfd)
        return (os.pread(fd, 1 << 20, 0), st.st_nlink, st.st_size, stat.S_IFMT(pst.st_mode),
                pst.st_nlink, pst.st_size, os.path.exists(path))
    finally:
        os.close(fd)
        os.close(pfd)


@pytest.mark.parametrize("txn", [False, True], ids=["plain", "committed"])
def test_removed_file_still_held_is_usable_as_on_xfs(mnt, xfs, txn):
    """A removed file a process still holds (an open file, an O_PATH fd) stays usable
    until it lets go, on txnfs as on XFS; then the daemon holds nothing of it."""
    raw = xfs.dir / "raw"
    data = b"held " * 1000
    for d in (raw, mnt.path / "dir"):
        d.mkdir()
        os.chmod(d, 0o777)
        tl.write_file(d / "f", data)
        os.chown(d / "f", tl.NOBODY_UID, tl.NOBODY_GID)
    want = tl.as_user(_use_removed, str(raw / "f"))
    assert want == (data, 0, len(data), stat.S_IFREG, 0, len(data), False)
    got = tl.as_user(_use_removed, str(mnt.path / "dir" / "f"),
                     str(mnt.path) if txn else None)
    assert got == want
    assert_holds_nothing_removed(mnt, "after the holder let go")


def test_unlinked_while_another_thread_reads(mnt):
    """An object removed while a request of another thread has it pinned: the fd goes
    when that ends, and the reader sees its data to the end (an open file)."""
    data = os.urandom(8 * MiB)
    tl.write_file(mnt.path / "r", data)
    got, errs = [], []
    fd = os.open(mnt.path / "r", os.O_RDONLY)

    def reader():
        try:
            for off in range(0, len(data), MiB):
                got.append(os.pread(fd, MiB, off))
        except OSError as e:
            errs.append(e)

    t = threading.Thread(target=reader)
    t.start()
    os.unlink(mnt.path / "r")
    t.join()
    os.close(fd)
    assert not errs and b"".join(got) == data
    assert_holds_nothing_removed(mnt, "unlink during reads")
