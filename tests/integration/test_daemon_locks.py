"""The daemon's internal locking: no request may stall (docs/isolation.md, "Internal locks").

  * several processes of one process-bound transaction rename and remove files
    concurrently (renames record handle-row names for abort; removals of files the
    transaction made drop handle rows while they hold the transaction's mutex): this
    once deadlocked op_rename (MetaDb's mutex, then Txn::mu) against txn_remove (Txn::mu,
    then MetaDb's). The workload must finish within a timeout, then commit or abort
    correctly;
  * the stall watchdog: a request kept unanswered longer than TXNFS_STALL_SECONDS is
    logged as a stalled request and every thread's stack is saved to TXNFS_STALL_DUMP
    (a LOOKUP held by the debug hook TXNFS_DEBUG_BLOCK_LOOKUP).

Workers are separate processes (this file run as a program, see the end).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from txnfs_testing import txnfs_lib as tl

PY = sys.executable or "/usr/bin/python3"
WORKERS = 4
ITERATIONS = int(os.environ.get("TXNFS_TEST_LOCKS_ITERATIONS", "60"))
GROUP_TIMEOUT = 90  # seconds; the workload takes a few


def _worker(mnt: Path, k: int, iterations: int) -> None:
    d = mnt / "work"
    for i in range(iterations):
        new, moved = d / f"new-{k}-{i}", d / f"moved-{k}-{i}"
        tl.write_file(new, b"x" * 100)
        os.rename(new, moved)                          # row name of a created file
        os.rename(d / f"pre-{k}-{i}", d / f"pre-moved-{k}-{i}")  # of a committed one
        tl.renameat2(d / f"a-{k}", d / f"b-{k}", tl.RENAME_EXCHANGE)  # both rows
        os.unlink(moved)                               # drops the row under Txn::mu
        os.unlink(d / f"pre-moved-{k}-{i}")            # stashed in the log


def _group(mnt: str, outcome: str, workers: int, iterations: int) -> int:
    """One process-bound transaction over this process and `workers` children."""
    mnt_p = Path(mnt)
    tid = tl.txn_begin(mnt_p, tl.TXNFS_BIND_PROCESS, 0)
    pids = []
    for k in range(workers):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _worker(mnt_p, k, iterations)
            except BaseException as e:  # noqa: BLE001 - reported through the exit status
                sys.stderr.write(f"worker {k}: {e!r}\n")
                code = 1
            os._exit(code)
        pids.append(pid)
    failed = 0
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        failed += status != 0
    if failed or outcome == "abort":
        rc = tl.txn_abort(mnt_p, tid)
        return 1 if failed else (0 if rc == 0 else 2)
    return 0 if tl.txn_commit(mnt_p, tid) == 0 else 3


@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_concurrent_renames_and_removals_in_one_transaction(mnt, outcome):
    work = mnt.path / "work"
    work.mkdir()
    for k in range(WORKERS):
        tl.write_file(work / f"a-{k}", b"a")
        tl.write_file(work / f"b-{k}", b"b")
        for i in range(ITERATIONS):
            tl.write_file(work / f"pre-{k}-{i}", f"{k} {i}".encode())
    before = tl.hash_tree(work)

    p = subprocess.Popen([PY, __file__, "group", str(mnt.path), outcome, str(WORKERS),
                          str(ITERATIONS)], stderr=subprocess.PIPE, text=True,
                         start_new_session=True, env=tl.python_env())
    try:
        _, err = p.communicate(timeout=GROUP_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        mnt.expect_dirty = True
        mnt.kill9()  # the daemon is deadlocked: its requests never end otherwise
        p.communicate()
        pytest.fail(f"{WORKERS} processes of one transaction renaming and removing files "
                    f"did not finish within {GROUP_TIMEOUT} s: the daemon hangs")
    assert p.returncode == 0, f"group exited {p.returncode}:\n{err}"

    after = tl.hash_tree(work)
    if outcome == "abort":
        assert after == before
    else:
        expected = {f"a-{k}": before[f"b-{k}" if ITERATIONS % 2 else f"a-{k}"]
                    for k in range(WORKERS)}
        expected.update({f"b-{k}": before[f"a-{k}" if ITERATIONS % 2 else f"b-{k}"]
                         for k in range(WORKERS)})
        assert after == expected
    # mnt's teardown runs txnfs fsck: handle rows and their names agree with the tree.


def test_stall_watchdog_logs_and_dumps_stacks(store, xfs, monkeypatch):
    """A LOOKUP held for 5 s (debug hook) with a 2 s threshold: the daemon logs it as a
    stalled request and saves every thread's stack, the held request among them."""
    dumps = xfs.tmp / "stall-dumps"
    dumps.mkdir()
    log = xfs.tmp / "txnfs.log"
    monkeypatch.setenv("TXNFS_STALL_SECONDS", "2")
    monkeypatch.setenv("TXNFS_STALL_DUMP", str(dumps))   # not the session's: expected here
    monkeypatch.setenv("TXNFS_DEBUG_BLOCK_LOOKUP", "stall-me:5")
    m = tl.Mount(store, xfs.tmp / "mnt", xfs.tmp / "txnfs.pid")
    m.mount("--log-file", log)
    try:
        (m.path / "fine").write_text("x")              # requests that end are no stall
        t0 = time.monotonic()
        assert not (m.path / "stall-me").exists()      # held 5 s, then answered
        assert time.monotonic() - t0 >= 4.5
        saved = "stalled request: every thread's stack saved to "
        assert tl.wait_until(lambda: saved in log.read_text(), timeout=60, interval=0.5), (
            f"no stack dump in {dumps}: {list(dumps.iterdir())}\n{log.read_text()}")
        dump = list(dumps.iterdir())
        assert len(dump) == 1 and dump[0].name.endswith(".txt"), dump
        text = dump[0].read_text(errors="replace")
        assert text.startswith("stalled request: LOOKUP nodeid 1 on thread "), text[:300]
        assert "Thread " in text and "lookup_hook" in text, text
        logged = log.read_text()
        assert "stalled request: LOOKUP nodeid 1 on thread" in logged, logged
        assert saved + str(dump[0]) in logged
        assert "WRITE" not in logged and "CREATE" not in logged  # only the held one
    finally:
        m.close()


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    assert role == "group"
    sys.exit(_group(args[0], args[1], int(args[2]), int(args[3])))
