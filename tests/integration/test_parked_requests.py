"""Parked requests: a FUSE request that waits for a lock occupies no daemon thread
(docs/isolation.md, "Waiting without a thread").

  * with a pool of 2 threads reading /dev/fuse (--threads 2), 7 requests -- transactional
    reads and plain writes -- wait for locks another transaction holds, while requests on
    other objects are still served at once; `txnfs status` counts them as parked; the
    commit that releases the locks answers them all;
  * waiters are granted in arrival order: three transactions that want X on one file get
    it one after the other as each predecessor ends (abort, then commits);
  * a parked request's failures are unchanged: ETIMEDOUT after the transaction's lock
    timeout, EDEADLK at once when waiting would close a cycle, and either makes the
    transaction abort-only (its commit fails, abort ends it);
  * the daemon ends cleanly with requests parked (they fail, nothing stalls);
  * FUSE over io_uring (--io-uring with /sys/module/fuse/parameters/enable_uring=Y): the
    status reports the ring in use, and parked requests behave the same.

Every file of tests/integration runs over io_uring when TXNFS_TEST_IO_URING=1 (conftest).
"""

from __future__ import annotations

import errno
import os
import signal
import threading
import time

import pytest

from txnfs_testing import txnfs_lib as tl

POOL = 2
WAITERS = POOL + 5


class Txn(threading.Thread):
    """A thread that runs `body(mount)` inside a transaction bound to itself, then ends it
    as `body` returned ("commit"/"abort"), recording the outcome or the OSError."""

    def __init__(self, mount, body, timeout_ms=None):
        super().__init__(daemon=True)
        self.mount, self.body, self.timeout_ms = mount, body, timeout_ms
        self.error = None
        self.end_rc = None
        self.done = threading.Event()

    def run(self):
        tid = tl.txn_begin(self.mount, tl.TXNFS_BIND_THREAD)
        if self.timeout_ms is not None:
            assert tl.txn_set_lock_timeout(self.mount, tid, self.timeout_ms) == 0
        end = "abort"
        try:
            end = self.body(self.mount) or "commit"
        except OSError as e:
            self.error = e.errno
        self.end_rc = (tl.txn_commit(self.mount, tid) if end == "commit" and self.error is None
                       else tl.txn_abort(self.mount, tid))
        self.done.set()


def parked(mount) -> int:
    return tl.txn_status(mount)["parked"]["now"]


def wait_parked(mount, n, timeout=10.0):
    assert tl.wait_until(lambda: parked(mount) >= n, timeout), (
        f"expected {n} parked requests, status says {tl.txn_status(mount)['parked']}")


class Holder:
    """A transaction (on its own thread) that writes `files` and holds their X locks until
    release() (commit or abort)."""

    def __init__(self, mount, files, data=b"held"):
        self.go = threading.Event()
        self.outcome = "commit"

        def body(_):
            for f in files:
                with open(f, "r+b") as fh:
                    fh.write(data)
            self.ready.set()
            self.go.wait(60)
            return self.outcome

        self.ready = threading.Event()
        self.t = Txn(mount, body)
        self.t.start()
        assert self.ready.wait(10), "the holder could not write its files"

    def release(self, outcome="commit"):
        self.outcome = outcome
        self.go.set()
        self.t.join(20)
        assert not self.t.is_alive()
        assert self.t.error is None and self.t.end_rc == 0, (self.t.error, self.t.end_rc)


def remount(mnt, *extra):
    mnt.umount()
    mnt.mount(*extra)


def test_waiting_requests_occupy_no_thread(mnt):
    remount(mnt, "--threads", str(POOL))
    files = [mnt.path / f"f{k}" for k in range(WAITERS)]
    for f in files:
        f.write_bytes(b"committed")
    (mnt.path / "other").write_bytes(b"other")
    holder = Holder(mnt.path, files)

    results = {}

    def txn_reader(k):  # S on fk: waits for the holder's X
        def body(_):
            results[k] = files[k].read_bytes()
        return Txn(mnt.path, body)

    def plain_writer(k):  # X on fk as a plain request: waits too
        def run():
            fd = os.open(files[k], os.O_WRONLY)
            try:
                os.pwrite(fd, b"PLAIN", 0)
                results[k] = "written"
            except OSError as e:
                results[k] = e.errno
            finally:
                os.close(fd)
        return threading.Thread(target=run, daemon=True)

    waiters = [txn_reader(k) if k % 2 == 0 else plain_writer(k) for k in range(WAITERS)]
    for w in waiters:
        w.start()
    wait_parked(mnt.path, WAITERS)
    st = tl.txn_status(mnt.path)
    assert st["transport"] == ("io_uring" if tl.io_uring_wanted() else "dev_fuse"), st
    assert st["parked"]["now"] >= WAITERS

    # More waiters than threads, and still: other objects are served at once, plainly and
    # in a transaction (which does not conflict: it creates and writes new names).
    t0 = time.monotonic()
    assert (mnt.path / "other").read_bytes() == b"other"
    (mnt.path / "plain-new").write_bytes(b"p")
    served = Txn(mnt.path, lambda m: (m / "txn-new").write_bytes(b"t") and None)
    served.start()
    served.join(10)
    assert not served.is_alive() and served.error is None and served.end_rc == 0
    assert time.monotonic() - t0 < 5, "requests on other objects waited for the parked ones"
    assert not any(k in results for k in range(WAITERS)), results

    holder.release("commit")
    for w in waiters:
        w.join(20)
        assert not w.is_alive()
    for k in range(WAITERS):
        if k % 2 == 0:
            assert waiters[k].error is None and waiters[k].end_rc == 0
            assert results[k] == b"helditted", results[k]  # the holder's committed write
        else:
            assert results[k] == "written", results[k]
            assert files[k].read_bytes() == b"PLAINtted"
    st = tl.txn_status(mnt.path)
    assert st["parked"]["now"] == 0 and st["parked"]["total"] >= WAITERS, st
    out = tl.output_of(tl.txnfs("status", mnt.path))
    assert f"requests: over {st['transport']}; parked for locks: 0 now, " \
           f"{st['parked']['total']} in total" in out, out


def test_waiters_granted_in_arrival_order(mnt):
    """T1 reads (S), then a plain write (X), then T2 reads (S) queue behind the holder's X.
    When the holder aborts, T1 gets S; T2's S would be compatible with it but arrived after
    the write's X, so it waits for the write, which waits for T1 to end."""
    f = mnt.path / "f"
    f.write_bytes(b"committed")
    holder = Holder(mnt.path, [f])
    order, seen = [], {}
    t1_end = threading.Event()

    def reader(name, hold):
        def body(_):
            seen[name] = f.read_bytes()
            order.append(name)
            if hold:
                assert t1_end.wait(20)
        return Txn(mnt.path, body)

    def plain_write():
        fd = os.open(f, os.O_WRONLY)
        try:
            os.pwrite(fd, b"PLAIN", 0)
            # Recorded when the write is done, before the close: T2 may read (and
            # record) as soon as the write's X is released, while this thread is
            # still closing.
            order.append("write")
        finally:
            os.close(fd)

    t1 = reader("t1", True)
    w = threading.Thread(target=plain_write, daemon=True)
    t2 = reader("t2", False)
    for n, t in enumerate((t1, w, t2), 1):
        t.start()
        wait_parked(mnt.path, n)  # queued behind the ones before it
    holder.release("abort")  # its write is rolled back
    assert tl.wait_until(lambda: order == ["t1"], 10), order
    time.sleep(0.3)
    assert order == ["t1"], "a waiter overtook one queued before it"
    assert parked(mnt.path) == 2
    t1_end.set()
    for t in (t1, w, t2):
        t.join(20)
        assert not t.is_alive()
    assert order == ["t1", "write", "t2"], order
    assert t1.error is None and t1.end_rc == 0 and t2.error is None and t2.end_rc == 0
    assert seen == {"t1": b"committed", "t2": b"PLAINtted"}, seen
    assert parked(mnt.path) == 0


def test_parked_request_times_out_as_before(mnt):
    f = mnt.path / "f"
    f.write_bytes(b"committed")
    holder = Holder(mnt.path, [f])

    def body(m):
        with open(f, "r+b") as fh:
            fh.write(b"late")
    t0 = time.monotonic()
    t = Txn(mnt.path, body, timeout_ms=300)
    t.start()
    t.join(10)
    took = time.monotonic() - t0
    assert t.error == errno.ETIMEDOUT, t.error
    assert t.end_rc == 0  # aborted
    assert 0.25 < took < 5, took

    # The transaction became abort-only: its commit is refused, abort ends it.
    got = {}

    def doomed():
        tid = tl.txn_begin(mnt.path, tl.TXNFS_BIND_THREAD)
        tl.txn_set_lock_timeout(mnt.path, tid, 200)
        try:
            with open(f, "r+b") as fh:
                fh.write(b"late")
        except OSError as e:
            got["err"] = e.errno
        got["commit"] = tl.txn_commit(mnt.path, tid)
        got["abort"] = tl.txn_abort(mnt.path, tid)
    th = threading.Thread(target=doomed)
    th.start()
    th.join(10)
    assert got["err"] == errno.ETIMEDOUT
    assert got["commit"] < 0, got
    assert got["abort"] == 0, got
    holder.release("commit")
    assert f.read_bytes() == b"helditted"
    st = tl.txn_status(mnt.path)
    assert st["parked"]["now"] == 0 and st["counters"]["timeouts"] >= 2, st


def test_parked_request_deadlock_as_before(mnt):
    a, b = mnt.path / "a", mnt.path / "b"
    a.write_bytes(b"a")
    b.write_bytes(b"b")
    first_done = threading.Event()
    second_go = threading.Event()
    res = {}

    def t1(_):  # X on a, then waits (parked) for b
        with open(a, "r+b") as fh:
            fh.write(b"1")
        first_done.set()
        second_go.wait(10)
        with open(b, "r+b") as fh:
            fh.write(b"1")

    def t2(_):  # X on b, then asks for a: would close the cycle
        with open(b, "r+b") as fh:
            fh.write(b"2")
        assert first_done.wait(10)
        second_go.set()
        wait_parked(mnt.path, 1)  # t1 parked for b
        t0 = time.monotonic()
        try:
            with open(a, "r+b") as fh:
                fh.write(b"2")
        finally:
            res["t2_took"] = time.monotonic() - t0

    x, y = Txn(mnt.path, t1), Txn(mnt.path, t2)
    x.start()
    y.start()
    y.join(20)
    x.join(20)
    assert y.error == errno.EDEADLK, y.error
    assert res["t2_took"] < 2, res  # at once, not after a timeout
    assert y.end_rc == 0  # aborted, which let the parked t1 go on
    assert x.error is None and x.end_rc == 0, (x.error, x.end_rc)
    assert a.read_bytes() == b"1" and b.read_bytes() == b"1"
    assert tl.txn_status(mnt.path)["counters"]["deadlocks"] >= 1


def test_daemon_ends_cleanly_with_parked_requests(mnt):
    files = [mnt.path / f"f{k}" for k in range(3)]
    for f in files:
        f.write_bytes(b"committed")
    holder = Holder(mnt.path, files)
    errs = []

    def plain_writer(f):
        try:
            fd = os.open(f, os.O_WRONLY)
            try:
                os.pwrite(fd, b"x", 0)
            finally:
                os.close(fd)
            errs.append(0)
        except OSError as e:
            errs.append(e.errno)

    ws = [threading.Thread(target=plain_writer, args=(f,), daemon=True) for f in files]
    for w in ws:
        w.start()
    wait_parked(mnt.path, 3)
    pid = mnt.pid
    os.kill(pid, signal.SIGTERM)  # the daemon stops serving and unmounts
    assert tl.wait_dead(pid, 15), "the daemon did not end with requests parked"
    for w in ws:
        w.join(10)
        assert not w.is_alive(), "a parked request was never answered"
    assert all(e in (errno.ENODEV, errno.ENOTCONN, errno.EIO) for e in errs), errs
    holder.go.set()
    holder.t.join(10)
    mnt.pid = None
    tl.lazy_umount(mnt.path)
    # The holder's transaction never ended: the next mount's recovery rolls it back.
    mnt.mount()
    assert all(f.read_bytes() == b"committed" for f in files)


def test_io_uring_transport(mnt):
    """With enable_uring=Y the ring carries the requests (and parked ones resume);
    with it off, the same option falls back to /dev/fuse."""
    param = tl.URING_PARAM
    old = param.read_text().strip()
    try:
        param.write_text("N")
        remount(mnt, "--io-uring")
        assert tl.txn_status(mnt.path)["transport"] == "dev_fuse"
        param.write_text("Y")
        remount(mnt, "-o", "io_uring")
        assert tl.txn_status(mnt.path)["transport"] == "io_uring"
        f = mnt.path / "f"
        f.write_bytes(b"committed")
        holder = Holder(mnt.path, [f])
        got = {}
        t = Txn(mnt.path, lambda m: got.setdefault("r", f.read_bytes()) and None)
        t.start()
        wait_parked(mnt.path, 1)
        holder.release("abort")
        t.join(10)
        assert t.error is None and t.end_rc == 0 and got["r"] == b"committed"
        mnt.umount()
    finally:
        param.write_text(old)
    mnt.mount()


def test_begin_waits_for_requests_that_started_without_locks(store, xfs, monkeypatch):
    """While no transaction is open, requests run without locks; a begin must not return
    before those in flight have finished (else the new transaction could change what one
    of them is half-way through). A LOOKUP held for 3 s by the debug hook is in flight
    when the transaction begins on the other CPU: the begin answers only after it (it
    waits on the control pool, not on a thread that reads requests)."""
    log = xfs.tmp / "txnfs.log"
    monkeypatch.setenv("TXNFS_DEBUG_BLOCK_LOOKUP", "held:3")
    m = tl.Mount(store, xfs.tmp / "mnt", xfs.tmp / "txnfs.pid")
    m.mount("--log-file", log)
    cpus = sorted(os.sched_getaffinity(0))
    try:
        def look():
            if len(cpus) > 1:
                os.sched_setaffinity(0, {cpus[0]})   # this thread only
            (m.path / "held").exists()
        t = threading.Thread(target=look)
        t.start()
        assert tl.wait_until(lambda: log.exists() and "holding LOOKUP held" in log.read_text(),
                             timeout=30, interval=0.02), "the LOOKUP was never held"
        seen = time.monotonic()
        if len(cpus) > 1:
            os.sched_setaffinity(0, {cpus[-1]})
        try:
            tid = tl.txn_begin(m.path)
            begun = time.monotonic()
        finally:
            os.sched_setaffinity(0, set(cpus))
        t.join(30)
        # the hold began before `seen` and lasts 3 s: a begin that did not wait for it
        # returns within milliseconds
        assert begun - seen >= 2.0, f"begin returned {begun - seen:.2f} s after the hold began"
        (m.path / "f").write_text("in the transaction")
        assert tl.txn_commit(m.path, tid) == 0
        assert (m.path / "f").read_text() == "in the transaction"
    finally:
        m.close()
