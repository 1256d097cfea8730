"""Transaction limits and a full disk: the operation that crosses a limit fails with a
clear error, the transaction can then only abort, and the abort leaves no trace."""
import errno
import os

import pytest

import snapshot as S
import txnfs_lib as tl


def _populate(root):
    (root / "keep").mkdir()
    for k in range(4):
        (root / "keep" / f"f{k}").write_bytes(os.urandom(256 * 1024))


def test_max_ops_makes_the_transaction_abort_only(mnt):
    mnt.remount("--max-txn-ops", "20")
    _populate(mnt.path)
    before = S.stable_snapshot(mnt.path)
    tid = tl.txn_begin(mnt.path)
    failed_at = None
    for k in range(50):
        try:
            (mnt.path / "keep" / f"new{k}").write_bytes(b"x")
        except OSError as e:
            assert e.errno == errno.EDQUOT, e
            failed_at = k
            break
    assert failed_at is not None, "50 creations with --max-txn-ops 20 never failed"
    rc, info = tl.txn_info(mnt.path, tid)
    assert rc == 0 and info.error == errno.EDQUOT, (rc, info.error)
    # abort-only: every later request fails the same way, and commit is refused
    try:
        (mnt.path / "keep" / "later").write_bytes(b"y")
        raise AssertionError("a request after the limit succeeded")
    except OSError as e:
        assert e.errno == errno.EDQUOT, e
    assert tl.txn_commit(mnt.path, tid) == -errno.EDQUOT
    assert tl.txn_abort(mnt.path, tid) == 0
    S.assert_restored(mnt, before, "after aborting a transaction that hit --max-txn-ops")
    S.assert_no_backups(mnt.store)


def test_max_backup_bytes_makes_the_transaction_abort_only(mnt):
    mnt.remount("--max-txn-backup-bytes", str(512 * 1024))
    _populate(mnt.path)
    before = S.stable_snapshot(mnt.path)
    tid = tl.txn_begin(mnt.path)
    err = None
    for k in range(4):  # each overwrite backs up 256 KiB
        try:
            with open(mnt.path / "keep" / f"f{k}", "r+b") as f:
                f.write(os.urandom(256 * 1024))
        except OSError as e:
            err = e.errno
            break
    assert err == errno.EDQUOT, f"overwriting 1 MiB with a 512 KiB backup limit gave {err}"
    assert tl.txn_commit(mnt.path, tid) == -errno.EDQUOT
    assert tl.txn_abort(mnt.path, tid) == 0
    S.assert_restored(mnt, before, "after aborting a transaction that hit --max-txn-backup-bytes")
    S.assert_no_backups(mnt.store)


def test_full_disk_mid_transaction_leaves_it_abortable(mnt):
    _populate(mnt.path)
    st = os.statvfs(mnt.path)
    # Leave about 4 MiB free (filler on the backing XFS, outside the store's tree).
    filler = mnt.store.path.parent / "filler"
    free = st.f_bavail * st.f_frsize
    fd = os.open(filler, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        os.posix_fallocate(fd, 0, max(free - 4 * 1024 * 1024, 1))
    finally:
        os.close(fd)
    try:
        before = S.stable_snapshot(mnt.path)
        tid = tl.txn_begin(mnt.path)
        err = None
        try:
            for k in range(4):  # overwrites need new blocks (the old ones are kept)
                with open(mnt.path / "keep" / f"f{k}", "r+b") as f:
                    f.write(os.urandom(256 * 1024))
            with open(mnt.path / "big", "wb") as f:
                for _ in range(64):
                    f.write(os.urandom(1024 * 1024))
        except OSError as e:
            err = e.errno
        assert err == errno.ENOSPC, f"filling the disk inside a transaction gave {err}"
        assert tl.txn_abort(mnt.path, tid) == 0
        S.assert_restored(mnt, before, "after aborting a transaction that filled the disk")
        S.assert_no_backups(mnt.store)
    finally:
        filler.unlink()
    # and the store still works
    (mnt.path / "after").write_bytes(b"ok")
    assert (mnt.path / "after").read_bytes() == b"ok"


def test_per_transaction_lock_timeout(mnt):
    """txnfs_set_lock_timeout bounds one transaction's lock waits (the mount's default is
    10 s); the loser becomes abort-only with ETIMEDOUT. A finished transaction has none
    to set (ENOENT)."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    _populate(mnt.path)
    before = S.stable_snapshot(mnt.path)
    holder = ThreadPoolExecutor(1)  # a transaction bound to another thread holds keep/f0
    hid = holder.submit(tl.txn_begin, mnt.path).result()
    holder.submit(tl.write_file, mnt.path / "keep" / "f0", b"held").result()
    tid = tl.txn_begin(mnt.path)
    try:
        assert tl.txn_set_lock_timeout(mnt.path, tid, 200) == 0
        t0 = time.monotonic()
        try:
            tl.write_file(mnt.path / "keep" / "f0", b"mine")
            raise AssertionError("a write to a locked file succeeded")
        except OSError as e:
            assert e.errno == errno.ETIMEDOUT, e
        assert 0.2 <= time.monotonic() - t0 < 5
        rc, info = tl.txn_info(mnt.path, tid)
        assert rc == 0 and info.error == errno.ETIMEDOUT
    finally:
        assert tl.txn_abort(mnt.path, tid) == 0
    assert tl.txn_set_lock_timeout(mnt.path, tid, 200) == -errno.ENOENT
    assert holder.submit(tl.txn_abort, mnt.path, hid).result() == 0
    holder.shutdown()
    S.assert_restored(mnt, before, "after a lock timeout")


def test_abort_only_transaction_that_changed_the_root_ends_from_its_own_thread(mnt):
    """Once abort-only, a transaction still reaches the control channel from its own
    thread: opening the mount root needs its attributes, which the transaction's change
    of the root made uncacheable, and that getattr must not be refused."""
    mnt.remount("--max-txn-ops", "5")
    before = S.stable_snapshot(mnt.path)
    tid = tl.txn_begin(mnt.path)
    err = None
    for k in range(20):
        try:
            (mnt.path / f"top{k}").write_bytes(b"x")
        except OSError as e:
            err = e.errno
            break
    assert err == errno.EDQUOT, err
    rc, info = tl.txn_info(mnt.path, tid)
    assert rc == 0 and info.error == errno.EDQUOT, (rc, info.error)
    assert tl.txn_abort(mnt.path, tid) == 0
    S.assert_restored(mnt, before, "after aborting from its own thread")


def test_begin2_sets_the_lock_timeout_in_the_same_request(mnt):
    """txnfs_begin2 (and its _fd twin) begins with a lock timeout, as txnfs_begin followed
    by txnfs_set_lock_timeout does: the wait for a held lock ends with ETIMEDOUT instead of
    the mount's 10 s default. Bad arguments are refused before anything begins."""
    import ctypes
    from concurrent.futures import ThreadPoolExecutor

    lib = tl.libtxnfs()
    u64 = ctypes.c_uint64
    lib.txnfs_begin2.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_int, ctypes.c_uint32,
                                 ctypes.POINTER(u64)]
    lib.txnfs_begin2_fd.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_int, ctypes.c_uint32,
                                    ctypes.POINTER(u64)]
    _populate(mnt.path)
    before = S.stable_snapshot(mnt.path)
    holder = ThreadPoolExecutor(1)
    hid = holder.submit(tl.txn_begin, mnt.path).result()
    holder.submit(tl.write_file, mnt.path / "keep" / "f0", b"held").result()
    root = os.open(mnt.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for begin in (lambda t: lib.txnfs_begin2(os.fsencode(str(mnt.path)), tl.TXNFS_BIND_THREAD,
                                                 0, 150, ctypes.byref(t)),
                      lambda t: lib.txnfs_begin2_fd(root, tl.TXNFS_BIND_THREAD, 0, 150,
                                                    ctypes.byref(t))):
            tid = u64(0)
            assert begin(tid) == 0 and tid.value > 0
            try:
                with pytest.raises(OSError) as e:
                    tl.write_file(mnt.path / "keep" / "f0", b"mine")
                assert e.value.errno == errno.ETIMEDOUT
                rc, info = tl.txn_info(mnt.path, tid.value)
                assert rc == 0 and info.error == errno.ETIMEDOUT
            finally:
                assert tl.txn_abort(mnt.path, tid.value) == 0
        tid = u64(0)
        assert lib.txnfs_begin2_fd(root, tl.TXNFS_BIND_THREAD, 5, 150,
                                   ctypes.byref(tid)) == -errno.EINVAL
        assert lib.txnfs_begin2_fd(-1, tl.TXNFS_BIND_THREAD, 0, 150,
                                   ctypes.byref(tid)) == -errno.EBADF
    finally:
        os.close(root)
    assert holder.submit(tl.txn_abort, mnt.path, hid).result() == 0
    holder.shutdown()
    S.assert_restored(mnt, before, "after begin2's lock timeouts")
