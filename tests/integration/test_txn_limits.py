"""Transaction limits and a full disk: the operation that crosses a limit fails with a
clear error, the transaction can then only abort, and the abort leaves no trace."""
import errno
import os

import pytest

from txnfs_testing import snapshot as S
from txnfs_testing import txnfs_lib as tl


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


def test_begin3_begins_and_predeclares_its_lock_set_in_one_call(mnt):
    """txnfs_begin3 is txnfs_begin2 and txnfs_lock_set in one request (two or more for a
    set over 4 KiB): the transaction begins whatever becomes of its set, and the set's
    outcome comes back apart -- -ETIMEDOUT when a lock of it is held elsewhere past the
    set's timeout (the transaction then holds none of it), 0 when it holds them all
    (another transaction's request then waits for it). Bad records begin nothing."""
    import ctypes
    from concurrent.futures import ThreadPoolExecutor

    _populate(mnt.path)
    before = S.stable_snapshot(mnt.path)
    txns_before = tl.txn_status(mnt.path)["transactions"]

    def file_set(name: bytes, mode=tl.TXNFS_LOCK_X):
        return tl.lock_records(tl.lock_node(1), tl.lock_child(0, b"keep"),
                               tl.lock_child(1, name), tl.lock_object(2, mode))

    holder = ThreadPoolExecutor(1)
    hid = holder.submit(tl.txn_begin, mnt.path).result()
    holder.submit(tl.write_file, mnt.path / "keep" / "f0", b"held").result()
    try:
        # f0 is X-locked by the holder: begun, its set not granted within 150 ms
        rc, tid, set_rc = tl.txn_begin3_rc(mnt.path, tl.TXNFS_BIND_THREAD, 0, 150,
                                           file_set(b"f0"), 150)
        assert (rc, set_rc) == (0, -errno.ETIMEDOUT) and tid > 0
        assert tl.txn_abort(mnt.path, tid) == 0

        # f1 is free: granted; another transaction's write of f1 waits for it
        rc, tid, set_rc = tl.txn_begin3_rc(mnt.path, tl.TXNFS_BIND_THREAD, 0, 150,
                                           file_set(b"f1"), 150)
        assert (rc, set_rc) == (0, 0) and tid > 0
        other = ThreadPoolExecutor(1)
        try:
            rc2, tid2 = other.submit(tl.txn_begin2_rc, mnt.path, tl.TXNFS_BIND_THREAD, 0,
                                     150).result()
            assert rc2 == 0
            with pytest.raises(OSError) as e:
                other.submit(tl.write_file, mnt.path / "keep" / "f1", b"other").result()
            assert e.value.errno == errno.ETIMEDOUT
            assert other.submit(tl.txn_abort, mnt.path, tid2).result() == 0
        finally:
            other.shutdown()
        tl.write_file(mnt.path / "keep" / "f1", b"mine")   # its own write, under its set
        assert tl.txn_abort(mnt.path, tid) == 0

        # a set over 4 KiB (300 entry locks) takes more than one request, same outcome
        big = tl.lock_records(tl.lock_node(1), *(tl.lock_entry(0, b"n%03d" % k, tl.TXNFS_LOCK_X)
                                                 for k in range(300)))
        assert len(big) > 4096
        rc, tid, set_rc = tl.txn_begin3_rc(mnt.path, tl.TXNFS_BIND_THREAD, 0, 150, big, 150)
        assert (rc, set_rc) == (0, 0)
        assert tl.txn_abort(mnt.path, tid) == 0

        # the _fd twin; then bad arguments, refused before anything begins
        lib = tl.libtxnfs()
        lib.txnfs_begin3_fd.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_int,
                                        ctypes.c_uint32, ctypes.c_char_p, ctypes.c_size_t,
                                        ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint64),
                                        ctypes.POINTER(ctypes.c_int)]
        root = os.open(mnt.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            recs = file_set(b"f2", tl.TXNFS_LOCK_S)
            t, s = ctypes.c_uint64(0), ctypes.c_int(7)
            assert lib.txnfs_begin3_fd(root, tl.TXNFS_BIND_THREAD, 0, 150, recs, len(recs), 150,
                                       ctypes.byref(t), ctypes.byref(s)) == 0 and s.value == 0
            assert tl.txn_abort(mnt.path, t.value) == 0
            for fd, pid, n in ((root, 0, len(recs) - 3),   # a record cut short
                               (root, 5, len(recs)),       # a pid with BIND_THREAD
                               (-1, 0, len(recs))):        # no fd
                assert lib.txnfs_begin3_fd(fd, tl.TXNFS_BIND_THREAD, pid, 150, recs, n, 150,
                                           ctypes.byref(t), ctypes.byref(s)) < 0
        finally:
            os.close(root)
        assert [t["id"] for t in tl.txn_status(mnt.path)["transactions"]] == [hid]
    finally:
        assert holder.submit(tl.txn_abort, mnt.path, hid).result() == 0
        holder.shutdown()
    assert tl.txn_status(mnt.path)["transactions"] == txns_before
    S.assert_restored(mnt, before, "after begin3's transactions")


def test_attrs_lock_mode_is_is_on_a_directory_and_s_on_a_file(mnt):
    """TXNFS_LOCK_ATTRS in a lock set asks what reading attributes takes: IS on a directory
    (granted while another transaction makes a name in it, IX), S on a file (not granted
    while another transaction writes it, X). On an entry it is malformed."""
    from concurrent.futures import ThreadPoolExecutor

    _populate(mnt.path)
    attrs = 4  # TXNFS_LOCK_ATTRS
    keep = tl.lock_records(tl.lock_node(1), tl.lock_child(0, b"keep"))
    holder = ThreadPoolExecutor(1)
    hid = holder.submit(tl.txn_begin, mnt.path).result()
    try:
        holder.submit(tl.write_file, mnt.path / "keep" / "new", b"n").result()  # IX on keep
        holder.submit(tl.write_file, mnt.path / "keep" / "f0", b"w").result()   # X on f0
        rc, tid, set_rc = tl.txn_begin3_rc(mnt.path, tl.TXNFS_BIND_THREAD, 0, 150,
                                           keep + tl.lock_object(1, attrs), 150)
        assert (rc, set_rc) == (0, 0)
        assert tl.txn_abort(mnt.path, tid) == 0
        rc, tid, set_rc = tl.txn_begin3_rc(
            mnt.path, tl.TXNFS_BIND_THREAD, 0, 150,
            keep + tl.lock_child(1, b"f0") + tl.lock_object(2, attrs), 150)
        assert (rc, set_rc) == (0, -errno.ETIMEDOUT)
        assert tl.txn_abort(mnt.path, tid) == 0
        rc, tid, set_rc = tl.txn_begin3_rc(mnt.path, tl.TXNFS_BIND_THREAD, 0, 150,
                                           keep + tl.lock_entry(1, b"x", attrs), 150)
        assert (rc, set_rc) == (0, -errno.EBADMSG)
        assert tl.txn_abort(mnt.path, tid) == 0
    finally:
        assert holder.submit(tl.txn_abort, mnt.path, hid).result() == 0
        holder.shutdown()
