"""Isolation of txnfs transactions: serializable, and plain readers see only committed
state (docs/isolation.md).

  * a writer creates (or removes) three files -- or three directories -- per transaction
    while plain readers list the directory: every listing shows all three of a batch
    or none, never one or two;
  * several writers put their own fixed contents into three files per transaction while
    readers read all three inside one transaction (thread-bound via libtxnfs, and
    `txnfs run ... cat`): every reader sees exactly one writer's set (or the initial
    one); plain readers of a single file never see a torn or half-written file;
  * plain readers never see a transaction's O_TRUNC (the empty file between the open
    and the writes), nor uncommitted sizes, modes, owners or names;
  * deadlock: two thread-bound transactions write two files in opposite order; one of
    them gets EDEADLK, nothing hangs, the victim can only abort and is rolled back.

A transaction that gets EDEADLK (errno 35) aborts and retries: that is allowed and
counted.  Workers are separate processes (this file run as a program, see the end);
every wait has a timeout, so a hang fails the test instead of hanging the suite.
"""

from __future__ import annotations

import errno
import json
import os
import random
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from txnfs_testing import snapshot as S
from txnfs_testing import txnfs_lib as tl

PY = sys.executable or "/usr/bin/python3"
WORKER_TIMEOUT = 45      # seconds any worker may run before the test fails as hung
WORK_DEADLINE = 25       # seconds after which a worker stops early and says so
LOCK_TIMEOUT_MS = 2000   # the mounts here use this lock-wait timeout (default 10 s): a
                         # request that waits that long fails with ETIMEDOUT
MAX_ERRORS = 5           # a worker gives up after this many errors (ETIMEDOUT, ...)
FILES = ("f1", "f2", "f3")
SIZE = 6000


def content(who: str, k: int) -> bytes:
    """The fixed content writer `who` (or "init") puts into FILES[k]."""
    unit = f"<{who}:{FILES[k]}>".encode()
    return (unit * (SIZE // len(unit) + 1))[:SIZE]


def identify(data: bytes, k: int, writers) -> str | None:
    for who in ("init", *writers):
        if data == content(who, k):
            return who
    return None


# --------------------------------------------------------------------------
# worker processes (this file run as a program)
# --------------------------------------------------------------------------

class Deadlock(Exception):
    pass


class GiveUp(Exception):
    pass


def _errname(e: OSError) -> str:
    return errno.errorcode.get(e.errno, str(e.errno))


def _record_error(stats, e: OSError, where: str):
    errs = stats.setdefault("errors", {})
    errs[_errname(e)] = errs.get(_errname(e), 0) + 1
    first = stats.setdefault("first_errors", [])
    if len(first) < 5:
        first.append(f"{where}: {e}")
    if sum(errs.values()) >= MAX_ERRORS:
        raise GiveUp()


def _txn(mount, body):
    """Run body() in a transaction bound to this thread; commit.  EDEADLK anywhere (in an
    operation or from the commit) -> abort and raise Deadlock.  Any other error: abort
    and re-raise."""
    tid = tl.txn_begin(mount)
    try:
        result = body()
    except OSError as e:
        rc = tl.txn_abort(mount, tid)
        if e.errno == errno.EDEADLK:
            if rc != 0:
                raise RuntimeError(f"abort after EDEADLK failed: {rc}") from e
            raise Deadlock() from e
        raise
    except BaseException:
        tl.txn_abort(mount, tid)
        raise
    rc = tl.txn_commit(mount, tid)
    if rc == -errno.EDEADLK:
        rc2 = tl.txn_abort(mount, tid)     # the refused commit may have ended it already
        if rc2 not in (0, -errno.ENOENT):
            raise RuntimeError(f"abort after a commit refused with EDEADLK failed: {rc2}")
        raise Deadlock()
    if rc != 0:
        raise OSError(-rc, f"txnfs_commit: {os.strerror(-rc)}")
    return result


def _retrying(mount, body, stats):
    """Run body() in a transaction until it commits.  EDEADLK: counted, allowed.  Any
    other OSError (e.g. ETIMEDOUT after a lock wait of LOCK_TIMEOUT_MS) is recorded as an
    error, then retried too (so that the test reports every problem, not the first);
    after MAX_ERRORS the worker gives up."""
    attempt = 0
    while True:
        try:
            return _txn(mount, body)
        except Deadlock:
            stats["deadlocks"] += 1
            backoff = min(0.05, 0.001 * 2 ** min(attempt, 6))
            time.sleep(random.uniform(0, backoff))     # randomized exponential backoff
        except OSError as e:
            _record_error(stats, e, "transaction")
        attempt += 1


def _worker_main(fn, *args):
    stats = {}
    t0 = time.monotonic()
    try:
        fn(stats, *args)
    except GiveUp:
        stats["gave_up"] = True
    stats["seconds"] = round(time.monotonic() - t0, 1)
    return stats


def _stopped(stop_file, deadline):
    return os.path.exists(stop_file) or time.monotonic() > deadline


def worker_dirwriter(stats, mount, d, iters):
    d = Path(d)
    stats.update(commits=0, deadlocks=0)
    deadline = time.monotonic() + WORK_DEADLINE
    for i in range(int(iters)):
        if time.monotonic() > deadline:
            stats["stopped_early"] = True
            break
        kind = "f" if i % 2 == 0 else "d"
        names = [d / f"b{i:04d}{kind}_{x}" for x in "abc"]

        def create():
            for n in names:
                if kind == "f":
                    fd = os.open(n, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                    os.write(fd, b"batch member\n")
                    os.close(fd)
                else:
                    os.mkdir(n)
                time.sleep(0.0005)     # widen the window a reader could see 1 or 2 in

        def remove():
            for n in names:
                (os.unlink if kind == "f" else os.rmdir)(n)
                time.sleep(0.0005)
        _retrying(mount, create, stats)
        stats["commits"] += 1
        _retrying(mount, remove, stats)
        stats["commits"] += 1


def worker_dirreader(stats, d, stop_file):
    deadline = time.monotonic() + WORK_DEADLINE
    stats.update(listings=0, saw_full_batch=0, violations=[])
    while not _stopped(stop_file, deadline):
        try:
            names = os.listdir(d)
        except OSError as e:
            _record_error(stats, e, "listdir")
            continue
        stats["listings"] += 1
        batches = {}
        for n in names:
            if n.startswith("b"):
                batches.setdefault(n.split("_")[0], []).append(n)
        for b, members in batches.items():
            if len(members) == 3:
                stats["saw_full_batch"] += 1
            else:
                stats["violation_count"] = stats.get("violation_count", 0) + 1
                if len(stats["violations"]) < 10:
                    stats["violations"].append(sorted(members))


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def worker_filewriter(stats, mount, d, who, iters, order):
    d = Path(d)
    idx = [int(c) for c in order]
    stats.update(commits=0, deadlocks=0)
    deadline = time.monotonic() + WORK_DEADLINE

    def body():
        for k in idx:
            fd = os.open(d / FILES[k], os.O_WRONLY | os.O_TRUNC)
            try:
                data = content(who, k)
                _write_all(fd, data[:SIZE // 2])
                time.sleep(0.0005)       # a half-written file would be visible now
                _write_all(fd, data[SIZE // 2:])
            finally:
                os.close(fd)
    for _ in range(int(iters)):
        if time.monotonic() > deadline:
            stats["stopped_early"] = True
            break
        _retrying(mount, body, stats)
        stats["commits"] += 1


def worker_truncwriter(stats, mount, d, seconds, end):
    """For `seconds`: transactions that open FILES[0] with O_TRUNC and write writer "tw"'s
    content in two halves, then commit or abort (`end`)."""
    path = Path(d) / FILES[0]
    stats.update(txns=0)
    data = content("tw", 0)
    t0 = time.monotonic()
    while time.monotonic() - t0 < float(seconds):
        tid = tl.txn_begin(mount)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
            _write_all(fd, data[:SIZE // 2])
            time.sleep(0.0005)
            _write_all(fd, data[SIZE // 2:])
            os.close(fd)
        finally:
            rc = tl.txn_commit(mount, tid) if end == "commit" else tl.txn_abort(mount, tid)
        if rc != 0:
            raise OSError(-rc, f"txnfs_{end}: {os.strerror(-rc)}")
        stats["txns"] += 1


def _read(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        out = bytearray()
        while True:
            b = os.read(fd, 65536)
            if not b:
                return bytes(out)
            out += b
    finally:
        os.close(fd)


def worker_txnreader(stats, mount, d, stop_file, writers):
    d = Path(d)
    writers = writers.split(",")
    deadline = time.monotonic() + WORK_DEADLINE
    stats.update(reads=0, deadlocks=0, seen={}, violations=[])
    while not _stopped(stop_file, deadline):
        datas = _retrying(mount, lambda: [_read(d / f) for f in FILES], stats)
        stats["reads"] += 1
        who = [identify(x, k, writers) for k, x in enumerate(datas)]
        if None in who or len(set(who)) != 1:
            stats["violation_count"] = stats.get("violation_count", 0) + 1
            if len(stats["violations"]) < 10:
                stats["violations"].append([w or f"<unknown {len(x)} bytes: {x[:40]!r}>"
                                            for w, x in zip(who, datas)])
        else:
            stats["seen"][who[0]] = stats["seen"].get(who[0], 0) + 1


def worker_plainreader(stats, d, stop_file, writers):
    d = Path(d)
    writers = writers.split(",")
    deadline = time.monotonic() + WORK_DEADLINE
    stats.update(reads=0, violations=[])
    while not _stopped(stop_file, deadline):
        for k, f in enumerate(FILES):
            try:
                x = _read(d / f)
            except OSError as e:
                _record_error(stats, e, f"read {f}")
                continue
            stats["reads"] += 1
            if identify(x, k, writers) is None:
                stats["violation_count"] = stats.get("violation_count", 0) + 1
                if len(stats["violations"]) < 10:
                    stats["violations"].append(f"{f}: {len(x)} bytes: {x[:40]!r}...{x[-40:]!r}")


WORKERS = {n[len("worker_"):]: f for n, f in list(globals().items()) if n.startswith("worker_")}


# --------------------------------------------------------------------------
# test-side helpers
# --------------------------------------------------------------------------

class Workers:
    """Worker processes; results are the JSON each prints as its last line."""

    def __init__(self):
        self.procs = []

    def start(self, role, *args):
        p = subprocess.Popen([PY, __file__, role, *map(str, args)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                             env=tl.python_env())
        self.procs.append((role, p))
        return p

    def wait(self, procs=None, timeout=WORKER_TIMEOUT):
        """Wait for `procs` (default: all); a worker still running at the deadline, or one
        that failed, fails the test (every worker is killed first)."""
        deadline = time.monotonic() + timeout
        results = []
        for role, p in [rp for rp in self.procs if procs is None or rp[1] in procs]:
            try:
                out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill_all()
                out, err = p.communicate()
                raise AssertionError(f"worker {role} (pid {p.pid}) hung: still running after "
                                     f"{timeout} s\n--- stderr ---\n{err}")
            if p.returncode != 0:
                self.kill_all()
                raise AssertionError(f"worker {role} failed (exit {p.returncode}):\n"
                                     f"--- stdout ---\n{out}--- stderr ---\n{err}")
            results.append((role, json.loads(out.strip().splitlines()[-1])))
        return results

    def kill_all(self):
        for _, p in self.procs:
            if p.poll() is None:
                tl.kill_and_wait(p.pid, 5)
                p.wait()


def _problems(role, r):
    """Errors, give-ups and early stops a worker reported (none are allowed)."""
    out = []
    if r.get("errors"):
        out.append(f"{role}: errors {r['errors']}, first: {r.get('first_errors')}")
    if r.get("gave_up"):
        out.append(f"{role}: gave up after {MAX_ERRORS} errors")
    if r.get("stopped_early"):
        out.append(f"{role}: did not finish its iterations within {WORK_DEADLINE} s")
    return out


def test_directory_batches_all_or_nothing(mnt):
    mnt.remount("--lock-timeout-ms", str(LOCK_TIMEOUT_MS))
    d = mnt.path / "dir"
    d.mkdir()
    stop = mnt.path.parent / "stop-dirreaders"   # outside the mount
    w = Workers()
    try:
        readers = [w.start("dirreader", d, stop) for _ in range(3)]
        time.sleep(0.2)
        writer = w.start("dirwriter", mnt.path, d, 150)
        [(_, ws)] = w.wait([writer])
        stop.touch()
        rs = w.wait(readers)
    finally:
        w.kill_all()
        stop.unlink(missing_ok=True)
    print(f"\nwriter {ws}\nreaders {[r for _, r in rs]}")
    for _, r in rs:
        assert not r["violations"], (
            f"a plain reader saw part of a transaction's batch in {r['violation_count']} of "
            f"{r['listings']} listings, e.g.: {r['violations']}")
    problems = _problems("writer", ws) + sum((_problems("plain reader", r) for _, r in rs), [])
    assert not problems, ("readers and writers must never error or hang:\n  "
                          + "\n  ".join(problems) + f"\nwriter {ws}\nreaders {[r for _, r in rs]}")
    assert ws["commits"] == 300
    assert all(r["listings"] > 0 for _, r in rs)
    assert sum(r["saw_full_batch"] for _, r in rs) > 0, \
        "no reader ever saw a batch: the test did not test anything"
    assert os.listdir(d) == []
    S.assert_no_backups(mnt.store)


def test_three_files_one_writers_set(mnt):
    mnt.remount("--lock-timeout-ms", str(LOCK_TIMEOUT_MS))
    d = mnt.path / "files"
    d.mkdir()
    for k, f in enumerate(FILES):
        (d / f).write_bytes(b"")
    _init_in_transaction(mnt, d)
    writers = ["w0", "w1", "w2"]
    # every writer locks f1, f2, f3 in the readers' order: conflicts then serialize (an
    # EDEADLK is still allowed and retried).  Opposite orders are the deadlock test's
    # business; here they would only measure how the victim choice starves writers.
    orders = ["012", "012", "012"]
    iters = 100
    stop = mnt.path.parent / "stop-filereaders"
    w = Workers()
    runs = {"runs": 0, "deadlocks": 0, "seen": {}, "violations": [], "errors": []}
    try:
        readers = [w.start("txnreader", mnt.path, d, stop, ",".join(writers)) for _ in range(2)]
        plain = [w.start("plainreader", d, stop, ",".join(writers))]
        ws = [w.start("filewriter", mnt.path, d, who, iters, order)
              for who, order in zip(writers, orders)]
        # meanwhile: readers through `txnfs run` (a process-bound transaction)
        deadline = time.monotonic() + WORK_DEADLINE
        while (any(p.poll() is None for p in ws) and time.monotonic() < deadline
               and len(runs["errors"]) < MAX_ERRORS):
            p = tl.run([tl.txnfs_bin(), "run", mnt.path, "--", "cat",
                        *[d / f for f in FILES]], timeout=WORKER_TIMEOUT)
            runs["runs"] += 1
            if p.returncode != 0:
                if "deadlock" in p.stderr.lower() and "aborted" in p.stderr:
                    runs["deadlocks"] += 1
                else:
                    runs["errors"].append(f"exit {p.returncode}: {p.stderr.strip()}")
                continue
            out = p.stdout.encode()
            parts = [out[i * SIZE:(i + 1) * SIZE] for i in range(3)]
            who = [identify(x, k, writers) for k, x in enumerate(parts)]
            if len(out) != 3 * SIZE or None in who or len(set(who)) != 1:
                runs["violations"].append(who)
            else:
                runs["seen"][who[0]] = runs["seen"].get(who[0], 0) + 1
        wres = w.wait(ws)
        stop.touch()
        rres = w.wait(readers + plain)
    finally:
        w.kill_all()
        stop.unlink(missing_ok=True)
    print(f"\nwriters {wres}\nreaders {rres}\ntxnfs-run readers {runs}")
    for role, r in rres:
        assert not r["violations"], (
            f"{role} saw a mix of writers' sets / a torn file {r['violation_count']} times "
            f"in {r['reads']} reads, e.g.: {r['violations']}")
    assert not runs["violations"], f"`txnfs run cat` saw a mix of writers' sets: {runs['violations']}"
    problems = sum((_problems(role, r) for role, r in wres + rres), [])
    if runs["errors"]:
        problems.append(f"`txnfs run cat`: {runs['errors'][:3]}")
    assert not problems, ("readers and writers must never error or hang (EDEADLK excepted):\n  "
                          + "\n  ".join(problems)
                          + f"\nwriters {wres}\nreaders {rres}\ntxnfs run {runs}")
    for role, r in wres:
        assert r["commits"] == iters
    seen = {}
    for role, r in rres:
        for who, n in r.get("seen", {}).items():
            seen[who] = seen.get(who, 0) + n
    assert set(seen) - {"init"}, f"the transactional readers never saw a writer's set: {seen}"
    final = [identify((d / f).read_bytes(), k, writers) for k, f in enumerate(FILES)]
    assert len(set(final)) == 1 and final[0] in writers, f"final contents: {final}"
    S.assert_no_backups(mnt.store)


def _init_in_transaction(mnt, d):
    """Writes the initial contents inside a committed transaction. docs/isolation.md:
    a plain reader's guarantee covers files a transaction has written (their plain
    opens bypass the page cache); a page-cache descriptor opened before any
    transaction first wrote the file can be clipped by the kernel's shared file size."""
    script = "; ".join(f"printf %s {content('init', k).decode()!r} > {str(d / f)!r}"
                       for k, f in enumerate(FILES))
    p = tl.txnfs("run", mnt.path, "--", "sh", "-c", script)
    assert p.returncode == 0, tl.output_of(p)
    for k, f in enumerate(FILES):
        assert (d / f).read_bytes() == content("init", k)


def test_plain_reader_never_sees_uncommitted_o_trunc(mnt):
    """One transaction after another opens a file with O_TRUNC and rewrites it (then
    commits, or aborts); a plain reader reading the file in a loop must always get one
    whole committed content -- never the empty file between the O_TRUNC and the writes,
    nor a part of it."""
    d = mnt.path / "files"
    d.mkdir()
    for k, f in enumerate(FILES):
        (d / f).write_bytes(b"")
    _init_in_transaction(mnt, d)
    failures = []
    for end in ("commit", "abort"):
        stop = mnt.path.parent / f"stop-trunc-{end}"
        w = Workers()
        try:
            reader = w.start("plainreader", d, stop, "tw")
            writer = w.start("truncwriter", mnt.path, d, 1.5, end)
            [(_, ws)] = w.wait([writer])
            stop.touch()
            [(_, rs)] = w.wait([reader])
        finally:
            w.kill_all()
            stop.unlink(missing_ok=True)
        print(f"\n{end}: writer {ws}, plain reader {rs}")
        assert ws["txns"] > 10 and rs["reads"] > 10, (ws, rs)
        if rs["violations"] or rs.get("errors"):
            failures.append(f"with {end}: {rs.get('violation_count', 0)} of {rs['reads']} plain "
                            f"reads saw no committed content (e.g. {rs['violations'][:3]}); "
                            f"errors {rs.get('errors')}")
    assert not failures, ("a plain reader saw a transaction's uncommitted O_TRUNC:\n  "
                          + "\n  ".join(failures))
    S.assert_no_backups(mnt.store)


OBSERVER = r"""
import hashlib, json, os, sys
out = {}
for name in sys.argv[1:]:
    try:
        st = os.stat(name)
        with open(name, "rb") as f:
            data = f.read()
        out[os.path.basename(name)] = [st.st_size, oct(st.st_mode), st.st_uid, len(data),
                                       hashlib.sha256(data).hexdigest()[:16]]
    except OSError as e:
        out[os.path.basename(name)] = "error " + (os.strerror(e.errno) if e.errno else str(e))
print(json.dumps(out))
"""


def test_plain_observer_sees_no_uncommitted_state(mnt):
    """While a transaction has truncated (O_TRUNC), extended, chmod/chown'ed and created
    files, a plain process that stats and reads them must see the committed state (it
    may wait for the transaction; here the transaction then aborts) -- not state the
    kernel cached from the transaction's own requests."""
    d = mnt.path / "obs"
    d.mkdir()
    names = ["trunc", "extend", "attrs", "grow"]
    for n in names:
        (d / n).write_bytes(content("init", 0))
    paths = [str(d / n) for n in names + ["created"]]
    expect = json.loads(tl.run([PY, "-c", OBSERVER, *paths], check=True).stdout)  # warms caches too
    tid = tl.txn_begin(mnt.path)            # bound to this thread
    try:
        os.close(os.open(d / "trunc", os.O_WRONLY | os.O_TRUNC))
        fd = os.open(d / "extend", os.O_WRONLY)
        os.pwrite(fd, b"uncommitted tail", 100_000)
        os.close(fd)
        os.chmod(d / "attrs", 0o600)
        os.chown(d / "attrs", tl.NOBODY_UID, tl.NOBODY_GID)
        os.truncate(d / "grow", 50_000)
        (d / "created").write_bytes(b"uncommitted file")
        obs = subprocess.Popen([PY, "-c", OBSERVER, *paths], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)       # let it run (or block on the transaction's locks)
    finally:
        rc = tl.txn_abort(mnt.path, tid)
    assert rc == 0
    try:
        out, err = obs.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        obs.kill()
        obs.communicate()
        raise AssertionError("the plain observer hung 30 s after the transaction aborted")
    assert obs.returncode == 0, err
    seen = json.loads(out)
    bad = {n: (expect[n], seen[n]) for n in expect if expect[n] != seen[n]}
    assert not bad, ("a plain process saw the transaction's uncommitted state "
                     "(name: (committed, seen)): " + json.dumps(bad))


def test_deadlock_opposite_order(mnt):
    """T1 writes f1 then f2, T2 writes f2 then f1 (a barrier makes both hold their
    first lock): one of them gets EDEADLK on its second write, nothing hangs, the other
    completes once the victim aborted; the victim's commit returns -EDEADLK and its
    first write is rolled back."""
    f1, f2 = mnt.path / "f1", mnt.path / "f2"
    orig = {f1: b"1" * 4096, f2: b"2" * 4096}
    for p, data in orig.items():
        p.write_bytes(data)
    before = S.stable_snapshot(mnt.path)
    barrier = threading.Barrier(2, timeout=20)
    res = {}

    def write(path, data, off):
        fd = os.open(path, os.O_WRONLY)
        try:
            assert os.pwrite(fd, data, off) == len(data)
        finally:
            os.close(fd)

    def txn(name, first, second, data, off):
        r = res[name] = {"second": None}
        tid = tl.txn_begin(mnt.path)      # bound to this thread
        try:
            write(first, data, off)
            barrier.wait()
            try:
                write(second, data, off)
                r["second"] = 0
            except OSError as e:
                r["second"] = e.errno
            r["second_returned"] = time.monotonic()
            r["commit"] = tl.txn_commit(mnt.path, tid)
            if r["second"] == errno.EDEADLK:
                r["abort"] = tl.txn_abort(mnt.path, tid)
        except BaseException as e:  # noqa: BLE001
            r["exception"] = repr(e)
            tl.txn_abort(mnt.path, tid)

    t1 = threading.Thread(target=txn, args=("T1", f1, f2, b"A" * 100, 10))
    t2 = threading.Thread(target=txn, args=("T2", f2, f1, b"B" * 100, 2000))
    t1.start()
    t2.start()
    t1.join(30)
    t2.join(30)
    if t1.is_alive() or t2.is_alive():
        mnt.kill9()          # releases the blocked threads (ENOTCONN)
        mnt.expect_dirty = True
        t1.join(10)
        t2.join(10)
        raise AssertionError(f"deadlock not detected: a transaction hung for 30 s: {res}")
    print(res)
    for r in res.values():
        assert "exception" not in r, res
    victims = [n for n, r in res.items() if r["second"] == errno.EDEADLK]
    assert len(victims) == 1, f"expected exactly one EDEADLK (errno 35) victim: {res}"
    victim = victims[0]
    winner = "T2" if victim == "T1" else "T1"
    assert res[winner]["second"] == 0, res
    assert res[winner]["second_returned"] > res[victim]["second_returned"], (
        f"the winner's second write completed before the victim even got EDEADLK: {res}")
    assert res[victim]["commit"] == -errno.EDEADLK, (
        f"the victim's commit must fail with -EDEADLK: {res}")
    # the refused commit may already have rolled it back and ended it (then abort: ENOENT)
    assert res[victim]["abort"] in (0, -errno.ENOENT), res
    assert res[winner]["commit"] == 0, res
    # only the winner's writes are there
    wdata, woff = (b"A" * 100, 10) if winner == "T1" else (b"B" * 100, 2000)
    for p, data in orig.items():
        exp = bytearray(data)
        exp[woff:woff + 100] = wdata
        fd = os.open(p, os.O_RDONLY | os.O_NOATIME)
        got = os.pread(fd, 10_000, 0)
        os.close(fd)
        assert got == bytes(exp), f"{p.name}: the victim's write was not rolled back"
    st = tl.txn_status(mnt.path)
    assert st["counters"]["deadlocks"] >= 1, st
    assert st["transactions"] == [], st
    cli = tl.txnfs("status", mnt.path, "--json", check=True)
    assert json.loads(cli.stdout)["counters"]["deadlocks"] >= 1, cli.stdout
    after = S.snapshot(mnt.path)
    for p in (".", "f1", "f2"):
        before[p].pop("mtime_ns"), after[p].pop("mtime_ns")
        before[p].pop("sha256", None), after[p].pop("sha256", None)
    S.assert_same(before, after, "after the deadlock (besides the winner's writes)")
    S.assert_no_backups(mnt.store)


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    print(json.dumps(_worker_main(WORKERS[role], *args)), flush=True)


XATTR_READER = r"""
import os, sys
path, n = sys.argv[1], int(sys.argv[2])
seen = set()
for _ in range(n):
    seen.add(os.getxattr(path, "user.tag"))
for _ in range(n):
    seen.add(tuple(sorted(os.listxattr(path))))
print(sorted(map(repr, seen)))
"""


def test_plain_xattr_reads_of_changed_object_keep_no_fds(mnt):
    """Plain getxattr/listxattr of an object an open transaction changed read the
    committed xattrs from the transaction's snapshot, and each call leaves the daemon
    with as many open fds as before (a regression: every call leaked one)."""
    f = mnt.path / "xattr-leak"
    f.write_bytes(b"data")
    os.setxattr(f, "user.tag", b"committed")
    fd_dir = Path(f"/proc/{mnt.pid}/fd")
    n = 1000
    tid = tl.txn_begin(mnt.path)            # bound to this thread
    try:
        os.setxattr(f, "user.tag", b"uncommitted")
        os.setxattr(f, "user.added", b"uncommitted")
        before = len(os.listdir(fd_dir))
        # a separate process: its requests are plain ones
        out = tl.run([PY, "-c", XATTR_READER, str(f), str(n)], check=True).stdout
        after = len(os.listdir(fd_dir))
    finally:
        rc = tl.txn_abort(mnt.path, tid)
    assert rc == 0
    assert out.strip() == repr(sorted(map(repr, {b"committed", ("user.tag",)}))), out
    assert after - before < 20, (
        f"the daemon holds {after - before} more fds after {2 * n} plain xattr reads "
        f"of an object an open transaction changed ({before} -> {after})")


PLAIN_STAT = r"""
import os, stat, sys
try:
    st = os.stat(sys.argv[1])
    print(st.st_size, oct(stat.S_IMODE(st.st_mode)))
except OSError as e:
    print("error", e.errno)
"""


def plain_stat(p) -> str:
    """stat(2) of `p` by a process no transaction binds: "SIZE MODE" or "error ERRNO"."""
    return subprocess.run([sys.executable, "-c", PLAIN_STAT, str(p)], capture_output=True,
                          text=True, timeout=60).stdout.strip()


def test_attributes_of_a_made_object_stay_with_its_transaction(mnt):
    """The kernel may cache the attributes of an object a transaction made for the mount's
    usual lifetime (only the transaction can reach it). Inside the transaction stat
    follows its own writes, truncations and chmods; a plain process meanwhile finds no
    such file; when the transaction ends the cached attributes go with it: after an abort
    an fd the transaction kept answers ESTALE, after a commit a plain process sees the
    committed attributes."""
    d = mnt.path / "made"
    d.mkdir()

    for end in ("abort", "commit"):
        f = d / f"f-{end}"
        tid = tl.txn_begin(mnt.path)
        fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
        try:
            os.write(fd, b"x" * 5000)
            assert os.fstat(fd).st_size == 5000
            os.fchmod(fd, 0o600)
            assert oct(os.stat(f).st_mode & 0o7777) == "0o600"
            os.ftruncate(fd, 100)
            assert os.stat(f).st_size == 100 and os.fstat(fd).st_size == 100
            assert plain_stat(f) == f"error {errno.ENOENT}"
            if end == "abort":
                assert tl.txn_abort(mnt.path, tid) == 0
                try:
                    os.fstat(fd)
                    raise AssertionError("fstat of a file an aborted transaction made succeeded")
                except OSError as e:
                    assert e.errno == errno.ESTALE, e
                assert plain_stat(f) == f"error {errno.ENOENT}"
            else:
                assert tl.txn_commit(mnt.path, tid) == 0
                assert plain_stat(f) == "100 0o600"
                assert os.fstat(fd).st_size == 100
        finally:
            os.close(fd)
    S.assert_no_backups(mnt.store)


def test_names_inside_a_made_directory_are_cached_with_it_and_dropped_with_it(mnt):
    """Names inside a directory a transaction made get the mount's usual cache lifetime
    (only the made directory's own name, in a directory that existed before, is cached
    for no time: the one way in for everyone else). Walks that start inside the made
    directory -- a descriptor of it, as a process's working directory would be -- then
    reach its names from the kernel's cache. A plain process finds none of them; after an
    abort none of them is served any more, not even through that descriptor, and a new
    directory of the same name shows none of the old names; after a commit a plain
    process sees them all."""
    base = mnt.path / "tree"
    base.mkdir()

    for end in ("abort", "commit"):
        top = base / f"top-{end}"
        tid = tl.txn_begin(mnt.path)
        topfd = -1
        try:
            top.mkdir()
            topfd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
            os.makedirs(top / "a" / "b")
            (top / "a" / "b" / "f").write_bytes(b"y" * 321)
            assert plain_stat(top / "a" / "b" / "f") == f"error {errno.ENOENT}"
            assert plain_stat(top) == f"error {errno.ENOENT}"
            # (The plain lookups above made the kernel drop the transaction's dentry of
            # `top` with everything below it; these walks cache them again.)
            for _ in range(3):  # walked again and again: from the cache after the first
                assert os.stat(top / "a" / "b" / "f").st_size == 321
                for rel in ("a", "a/b", "a/b/f"):
                    os.stat(rel, dir_fd=topfd)
            if end == "abort":
                assert tl.txn_abort(mnt.path, tid) == 0
                for rel in ("a", "a/b", "a/b/f"):
                    err = tl.errno_of(os.stat, rel, dir_fd=topfd)
                    assert err in (errno.ENOENT, errno.ESTALE), \
                        f"{rel} inside the rolled-back directory: {err or 'still served'}"
                assert plain_stat(top / "a" / "b" / "f") == f"error {errno.ENOENT}"
                top.mkdir()   # plain: a new directory of the same name
                assert sorted(os.listdir(top)) == []
                assert tl.errno_of(os.stat, top / "a" / "b" / "f") == errno.ENOENT
            else:
                assert tl.txn_commit(mnt.path, tid) == 0
                assert plain_stat(top / "a" / "b" / "f") == "321 0o644"
                assert os.stat("a/b/f", dir_fd=topfd).st_size == 321
        finally:
            if topfd >= 0:
                os.close(topfd)
    S.assert_no_backups(mnt.store)


def test_transactions_that_walk_a_directory_all_make_names_in_it(mnt):
    """Four transactions at once (`txnfs run`), each stats the mount's root, makes its own
    directory there and 200 files inside: none waits for another, all commit. A
    directory's attributes are read under IS, not S (docs/isolation.md) -- the kernel
    reads them at every permission check of a walk through it -- so they do not keep the
    others from making names in it. Under S, the others' mkdirs waited holding the root's
    inode lock, which the walkers' next lookups needed: two of four timed out after the
    lock timeout and were rolled back."""
    m = mnt.path
    script = ("import os, sys\n"
              "m, d = sys.argv[1], sys.argv[2]\n"
              "os.stat(m)\n"
              "os.mkdir(os.path.join(m, d))\n"
              "for i in range(200):\n"
              "    with open(os.path.join(m, d, f'f{i}'), 'wb') as f: f.write(b'x' * 100)\n")
    procs = [subprocess.Popen([tl.txnfs_bin(), "run", str(m), "--", PY, "-c", script, str(m),
                               f"d{k}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for k in range(4)]
    outs = [p.communicate(timeout=WORKER_TIMEOUT)[0].decode(errors="replace") for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, "\n".join(outs)
    assert sorted(os.listdir(m)) == [f"d{k}" for k in range(4)]
    assert all(len(os.listdir(m / f"d{k}")) == 200 for k in range(4))
    counters = tl.txn_status(m)["counters"]
    assert counters["timeouts"] == 0 and counters["deadlocks"] == 0, counters


def test_a_directory_another_transaction_changes_reads_as_committed(mnt):
    """Transaction W makes a subdirectory in d; transaction R reads d's attributes
    meanwhile without waiting (IS) and sees them as committed -- the link count before
    W's mkdir -- while W sees its own. After W commits, R sees the new count: a
    directory's attributes are read committed, not repeatable (its names are locked one by
    one as always)."""
    from concurrent.futures import ThreadPoolExecutor

    m = mnt.path
    (m / "d").mkdir()
    w, r = ThreadPoolExecutor(1), ThreadPoolExecutor(1)
    try:
        wid = w.submit(tl.txn_begin, m).result()
        rid = r.submit(tl.txn_begin, m).result()
        w.submit(os.mkdir, m / "d" / "sub").result()
        assert w.submit(lambda: os.stat(m / "d").st_nlink).result() == 3
        assert r.submit(lambda: os.stat(m / "d").st_nlink).result(timeout=5) == 2
        assert os.stat(m / "d").st_nlink == 2          # a plain reader, as always
        assert w.submit(tl.txn_commit, m, wid).result() == 0
        assert r.submit(lambda: os.stat(m / "d").st_nlink).result(timeout=5) == 3
        assert r.submit(tl.txn_commit, m, rid).result() == 0
    finally:
        w.shutdown()
        r.shutdown()


def test_a_lookup_by_a_transaction_caches_no_uncommitted_attributes(mnt):
    """Transaction W truncates f; transaction R then looks up a second name of f (its
    first lookup of that name: LOOKUP locks the name, not the object) without reading
    f's attributes. R's LOOKUP reply must carry f's committed attributes, and never with
    a cache lifetime: the kernel keeps one copy of an inode's attributes for every
    process, so a plain stat right after would be answered from it -- the size W only
    ever rolls back."""
    from concurrent.futures import ThreadPoolExecutor

    m = mnt.path
    tl.write_file(m / "f", b"0123456789")
    os.link(m / "f", m / "g")
    # Forget g's dentry (and unused inodes): R's walk to g must send a LOOKUP.
    Path("/proc/sys/vm/drop_caches").write_text("2\n")
    w, r = ThreadPoolExecutor(1), ThreadPoolExecutor(1)
    try:
        wid = w.submit(tl.txn_begin, m).result()
        w.submit(os.truncate, m / "f", 3).result()
        assert w.submit(lambda: os.stat(m / "f").st_size).result() == 3

        def lookup_g():
            tid = tl.txn_begin(m)
            os.close(os.open(m / "g", os.O_PATH))   # a LOOKUP, no GETATTR
            return tl.txn_commit(m, tid)

        assert r.submit(lookup_g).result(timeout=10) == 0
        assert os.stat(m / "f").st_size == 10, "a plain stat saw W's uncommitted size"
        assert os.stat(m / "g").st_size == 10
        assert w.submit(tl.txn_abort, m, wid).result() == 0
        assert os.stat(m / "f").st_size == 10
        assert (m / "g").read_bytes() == b"0123456789"
    finally:
        w.shutdown()
        r.shutdown()


def test_plain_xattr_readers_see_only_committed_values(mnt):
    """A transaction sets f's user.v (and adds user.r), then rolls back, over and over,
    while a plain thread reads user.v and lists f's xattrs as fast as it can: it sees
    the committed value and names only -- never a rolled-back value, never a name that
    was only ever rolled back."""
    m = mnt.path
    f = m / "f"
    tl.write_file(f, b"x")
    os.setxattr(f, "user.v", b"committed")
    stop = threading.Event()
    seen: set = set()
    reads = [0]

    def reader():
        while not stop.is_set():
            seen.add(os.getxattr(f, "user.v"))
            seen.add(tuple(sorted(os.listxattr(f))))
            reads[0] += 1

    th = threading.Thread(target=reader)
    th.start()
    try:
        for k in range(1000):
            tid = tl.txn_begin(m)
            try:
                os.setxattr(f, "user.v", b"rolled back %d" % k)
                os.setxattr(f, "user.r", b"rolled back")
            finally:
                assert tl.txn_abort(m, tid) == 0
    finally:
        stop.set()
        th.join(30)
    assert not th.is_alive(), "the reader hung"
    assert reads[0] > 0
    assert seen == {b"committed", ("user.v",)}, f"a plain reader saw {seen}"


def test_a_file_handle_resolved_while_a_transaction_changed_the_file_shows_committed_attributes(mnt):
    """Transaction W truncates f; the kernel then forgets f's inode, and a plain process
    opens f by its file handle -- the kernel asks the daemon LOOKUP(nodeid, "."), as an
    NFS server does for every handle it has not seen lately. That process, and a plain
    stat after it, must see the committed size: the LOOKUP's answer must neither be W's
    attributes nor stay in the kernel's cache while W is open."""
    from concurrent.futures import ThreadPoolExecutor

    m = mnt.path
    tl.write_file(m / "f", b"0123456789")
    fh = tl.name_to_handle_at(m / "f")
    w = ThreadPoolExecutor(1)
    mfd = os.open(m, os.O_RDONLY | os.O_DIRECTORY)
    try:
        wid = w.submit(tl.txn_begin, m).result()
        w.submit(os.truncate, m / "f", 3).result()
        Path("/proc/sys/vm/drop_caches").write_text("2\n")  # f's dentry and inode go
        fd = tl.open_by_handle_at(mfd, fh, os.O_PATH)
        try:
            assert os.fstat(fd).st_size == 10, "a handle showed W's uncommitted size"
        finally:
            os.close(fd)
        assert os.stat(m / "f").st_size == 10
        assert w.submit(tl.txn_abort, m, wid).result() == 0
        assert os.stat(m / "f").st_size == 10
    finally:
        os.close(mfd)
        w.shutdown()


def test_plain_lookups_leave_no_entry_the_transaction_would_see(mnt):
    """A plain reader looks up names an open transaction W removed and made: it is shown
    the committed state (the removed name, and no made name). The kernel keeps one
    dentry per name for everyone, so that answer must not be cached: W must still see
    its own removal and its own creation."""
    from concurrent.futures import ThreadPoolExecutor

    m = mnt.path
    tl.write_file(m / "gone", b"x")
    w = ThreadPoolExecutor(1)
    try:
        wid = w.submit(tl.txn_begin, m).result()
        w.submit(os.unlink, m / "gone").result()
        w.submit(tl.write_file, m / "made", b"new").result()
        assert os.path.lexists(m / "gone")              # plain readers: committed
        assert not os.path.lexists(m / "made")
        assert w.submit(os.path.lexists, m / "made").result(), "W lost the name it made"
        assert not w.submit(os.path.lexists, m / "gone").result(), "W sees the name it removed"
        assert w.submit(tl.txn_commit, m, wid).result() == 0
        assert not os.path.lexists(m / "gone")
        assert (m / "made").read_bytes() == b"new"
    finally:
        w.shutdown()


def test_a_link_made_by_a_transaction_leaves_the_committed_link_count(mnt):
    """Transaction W links f to a second name: plain readers keep seeing one link -- from
    the daemon and from the kernel, which W's LINK reply would otherwise fill with two --
    until W commits; W sees two at once."""
    from concurrent.futures import ThreadPoolExecutor

    m = mnt.path
    tl.write_file(m / "f", b"x")
    w = ThreadPoolExecutor(1)
    try:
        wid = w.submit(tl.txn_begin, m).result()
        w.submit(os.link, m / "f", m / "f2").result()
        assert w.submit(lambda: os.stat(m / "f").st_nlink).result() == 2
        assert os.stat(m / "f").st_nlink == 1, "a plain stat saw the uncommitted link count"
        assert not os.path.lexists(m / "f2")
        assert w.submit(tl.txn_commit, m, wid).result() == 0
        assert os.stat(m / "f").st_nlink == 2
    finally:
        w.shutdown()


def test_a_chmod_by_a_transaction_leaves_the_committed_acl(mnt):
    """f has an access ACL with a mask; transaction W chmods it, and XFS rewrites the
    ACL's mask with the group bits. Plain readers keep reading the committed ACL from the
    daemon (XFS's own xattr, which no kernel cache holds) until W ends; the abort restores
    it byte for byte."""
    from concurrent.futures import ThreadPoolExecutor

    m = mnt.path
    f = m / "f"
    tl.write_file(f, b"x")
    acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, ident) for tag, perm, ident in (
        (0x01, 7, 0xFFFFFFFF), (0x02, 7, tl.NOBODY_UID), (0x04, 5, 0xFFFFFFFF),
        (0x10, 7, 0xFFFFFFFF), (0x20, 0, 0xFFFFFFFF)))
    os.setxattr(f, "system.posix_acl_access", acl)
    xfs_acl = "trusted.SGI_ACL_FILE"      # XFS's on-disk ACL, read through the daemon
    committed = os.getxattr(f, xfs_acl)
    w = ThreadPoolExecutor(1)
    try:
        wid = w.submit(tl.txn_begin, m).result()
        w.submit(os.chmod, f, 0o600).result()
        assert w.submit(os.getxattr, f, xfs_acl).result() != committed  # the mask moved
        assert os.getxattr(f, xfs_acl) == committed, "a plain reader saw the uncommitted ACL"
        assert w.submit(tl.txn_abort, m, wid).result() == 0
        assert os.getxattr(f, xfs_acl) == committed
    finally:
        w.shutdown()


def test_a_renamed_name_the_kernel_had_cached_is_not_shown_at_its_new_place(mnt):
    """A rename moves the kernel's dentry to the new name with the lifetime it had: a name
    a plain process looked up before the transaction (cached for the mount's usual time),
    or one the transaction made inside a directory it made, would answer at its new place
    from the cache -- uncommitted, to everyone. Renamed by a transaction (also exchanged,
    and moved out of a made directory), a plain process meanwhile finds every name where it
    was committed, and none where the transaction put it; after an abort the same; after
    a commit the new places."""
    d = mnt.path / "ren"
    d.mkdir()
    for end in ("abort", "commit"):
        for name in ("a", "x", "y"):
            (d / name).write_bytes(name.encode() * 3)
        # Looked up plainly first: cached with the mount's entry lifetime.
        for name in ("a", "x", "y"):
            assert plain_stat(d / name) == "3 0o644"
            os.stat(d / name)
        tid = tl.txn_begin(mnt.path)
        try:
            os.rename(d / "a", d / "b")
            tl.renameat2(d / "x", d / "y", tl.RENAME_EXCHANGE)
            (d / "m").mkdir()
            (d / "m" / "inner").write_bytes(b"ii")
            os.stat(d / "m" / "inner")  # cached: only the transaction can reach it
            os.rename(d / "m" / "inner", d / "out")
            assert plain_stat(d / "b") == f"error {errno.ENOENT}", "renamed-to name shown"
            assert plain_stat(d / "a") == "3 0o644", "renamed-from name hidden"
            assert plain_stat(d / "out") == f"error {errno.ENOENT}", "moved-out name shown"
            assert (d / "x").read_bytes() == b"yyy"  # the transaction sees its exchange
            assert subprocess.run([sys.executable, "-c", "import sys; print(open(sys.argv[1]).read())",
                                   str(d / "x")], capture_output=True, text=True,
                                  timeout=60).stdout.strip() == "xxx", "exchange shown"
        except BaseException:
            tl.txn_abort(mnt.path, tid)
            raise
        if end == "abort":
            assert tl.txn_abort(mnt.path, tid) == 0
            assert sorted(os.listdir(d)) == ["a", "x", "y"]
            assert plain_stat(d / "b") == f"error {errno.ENOENT}"
        else:
            assert tl.txn_commit(mnt.path, tid) == 0
            assert sorted(os.listdir(d)) == ["b", "m", "out", "x", "y"]
            assert plain_stat(d / "b") == "3 0o644" and plain_stat(d / "out") == "2 0o644"
            for name in os.listdir(d):
                (d / name).rmdir() if (d / name).is_dir() else (d / name).unlink()
    S.assert_no_backups(mnt.store)
