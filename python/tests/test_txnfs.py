"""The txnfs Python package against a real txnfs mount."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading

import pytest

import txnfs
from txnfs_testing import txnfs_lib as tl


def read(p) -> str:
    with open(p) as f:
        return f.read()


def write(p, text: str) -> None:
    with open(p, "w") as f:
        f.write(text)


def test_package_is_typed_and_documented():
    pkg = os.path.dirname(txnfs.__file__)
    assert os.path.isfile(os.path.join(pkg, "py.typed"))
    for name in txnfs.__all__:
        obj = getattr(txnfs, name)
        if callable(obj):
            assert obj.__doc__, f"txnfs.{name} has no docstring"
    assert txnfs.begin.__annotations__["return"] in (int, "int")


def test_with_block_commits_on_normal_exit(mnt):
    m = mnt.path
    write(m / "keep", "old")
    before = txnfs.status(m)["counters"]["commits"]
    with txnfs.transaction(m) as t:
        write(m / "new", "created")
        write(m / "keep", "changed")
        os.rename(m / "keep", m / "kept")
        assert t.info().state == "active" and t.info().ops > 0
    assert t.committed and not t.aborted
    assert read(m / "new") == "created" and read(m / "kept") == "changed"
    assert not (m / "keep").exists()
    assert txnfs.status(m)["counters"]["commits"] == before + 1
    with pytest.raises(txnfs.NoSuchTransaction):
        txnfs.info(m, t.id)


def test_with_block_aborts_on_exception_and_reraises_it(mnt):
    m = mnt.path
    write(m / "keep", "old")
    (m / "dir").mkdir()
    before = txnfs.status(m)["counters"]["aborts"]
    with pytest.raises(ValueError, match="boom"):
        with txnfs.transaction(m) as t:
            write(m / "new", "created")
            write(m / "keep", "changed")
            os.rmdir(m / "dir")
            raise ValueError("boom")
    assert t.aborted and not t.committed
    assert not (m / "new").exists()
    assert read(m / "keep") == "old"
    assert (m / "dir").is_dir()
    assert txnfs.status(m)["counters"]["aborts"] == before + 1


def test_begin_info_commit_abort_functions(mnt):
    m = mnt.path
    tid = txnfs.begin(m)
    try:
        write(m / "a", "x")
        i = txnfs.info(m, tid)
        assert (i.id, i.state, i.bind, i.owner_uid) == (tid, "active", "thread", 0)
        assert i.ops >= 1 and i.error == 0
        assert [t["id"] for t in txnfs.status(m)["transactions"]] == [tid]
    finally:
        txnfs.abort(m, tid)
    assert not (m / "a").exists()
    with pytest.raises(txnfs.NoSuchTransaction) as e:
        txnfs.abort(m, tid)
    assert e.value.errno == errno.ENOENT and isinstance(e.value, OSError)

    tid = txnfs.begin(m)
    write(m / "b", "y")
    txnfs.set_lock_timeout(m, tid, 50)
    txnfs.commit(m, tid)
    assert read(m / "b") == "y"


def test_errors_map_from_errno(mnt, tmp_path):
    with pytest.raises(txnfs.NotTxnfs) as e:
        txnfs.begin(tmp_path)   # not a txnfs mount
    assert e.value.errno == errno.ENOTTY
    with pytest.raises(txnfs.TxnfsError) as e:
        txnfs.begin(mnt.path / "missing")
    assert e.value.errno == errno.ENOENT and not isinstance(e.value, txnfs.NoSuchTransaction)
    with txnfs.transaction(mnt.path):
        with pytest.raises(txnfs.AlreadyInTransaction) as e:
            txnfs.begin(mnt.path)
        assert e.value.errno == errno.EBUSY
    with pytest.raises(ValueError):
        txnfs.begin(mnt.path, bind="everything")


def test_not_owner(mnt):
    m = mnt.path
    tid = txnfs.begin(m, bind="process")
    try:
        def end_it():
            txnfs.abort(m, tid)
        with pytest.raises(txnfs.NotOwner) as e:
            tl.as_user(end_it)
        assert e.value.errno == errno.EPERM
    finally:
        txnfs.abort(m, tid)


def test_lock_conflict_raises_TxnConflict_and_retry_succeeds(mnt):
    m = mnt.path
    write(m / "x", "base")
    holding, release, done = threading.Event(), threading.Event(), []

    def holder():
        with txnfs.transaction(m):
            write(m / "x", "holder")
            holding.set()
            release.wait(30)
        done.append(True)

    th = threading.Thread(target=holder)
    th.start()
    try:
        assert holding.wait(30)
        with pytest.raises(txnfs.TxnConflict) as e:
            with txnfs.transaction(m, lock_timeout_ms=100):
                write(m / "mine", "side effect")
                write(m / "x", "loser")
        assert e.value.errno == errno.ETIMEDOUT
        assert isinstance(e.value.__cause__, OSError)
        assert not (m / "mine").exists()   # the loser was rolled back
    finally:
        release.set()
        th.join(30)
    assert done and read(m / "x") == "holder"

    attempts = []

    def body(t):
        attempts.append(t.id)
        if len(attempts) == 1:
            raise OSError(errno.EDEADLK, "deadlock")   # as a lost deadlock would
        write(m / "x", "retried")
        return "ok"

    assert txnfs.retry(m, body, attempts=3) == "ok"
    assert len(attempts) == 2 and read(m / "x") == "retried"


def test_abort_only_transaction_is_rolled_back_at_exit(mnt):
    mnt.remount("--max-txn-ops", "3")
    m = mnt.path
    with pytest.raises(txnfs.LimitExceeded) as e:
        with txnfs.transaction(m) as t:
            for i in range(10):
                try:
                    write(m / f"f{i}", "x")
                except OSError as err:
                    assert err.errno == errno.EDQUOT
                    break
            assert t.info().state == "abort_only"
    assert e.value.errno == errno.EDQUOT
    assert t.aborted
    assert not any(m.iterdir())
    assert txnfs.status(m)["transactions"] == []


def test_process_binding_covers_children(mnt):
    m = mnt.path
    with pytest.raises(RuntimeError):
        with txnfs.transaction(m, bind="process") as t:
            subprocess.run(["sh", "-c", f"echo child > '{m}/c'; mkdir '{m}/d'"], check=True)
            assert (m / "c").exists() and t.info().bind == "process"
            raise RuntimeError("undo the child's work")
    assert not (m / "c").exists() and not (m / "d").exists()
    with txnfs.transaction(m, bind="process"):
        subprocess.run(["sh", "-c", f"echo child > '{m}/c'"], check=True)
    assert read(m / "c") == "child\n"


def test_the_view_is_the_transactions_for_every_thread_and_child_and_no_one_elses(mnt):
    m = mnt.path
    write(m / "f", "committed")
    with txnfs.transaction(m) as t:
        assert t.root == f"{m}/.txnfs/{t.id}" == txnfs.view_path(m / "f", t.id)
        seen = []
        th = threading.Thread(target=lambda: (write(t.path("f"), "the view's"),
                                              seen.append(read(m / "f"))))
        th.start()
        th.join()
        # another thread of the program writes through the view: it is the transaction's,
        # and that thread, outside the transaction, still reads the committed file
        assert seen == ["committed"]
        subprocess.run(["sh", "-c", f"echo child > '{t.path('c')}'"], check=True)
        assert read(t.path("c")) == "child\n"
        assert subprocess.run(["test", "-e", str(m / "c")]).returncode == 1  # not for others
        # a child that enters the view sees it at the mount point itself
        out = subprocess.run([sys.executable, "-c", "import sys; print(open(sys.argv[1]).read())",
                              str(m / "f")], check=True, capture_output=True, text=True,
                             preexec_fn=lambda: txnfs.enter_view(m, t.id)).stdout
        assert out.strip() == "the view's"
    assert read(m / "f") == "the view's" and read(m / "c") == "child\n"
    with pytest.raises(txnfs.NoSuchTransaction):
        txnfs.enter_view(m, t.id)  # ended: its view is gone
    assert not os.path.exists(t.root)


def test_commit_inside_block_and_status(mnt):
    m = mnt.path
    with txnfs.transaction(m) as t:
        write(m / "early", "1")
        t.commit()
    assert t.committed and read(m / "early") == "1"
    s = txnfs.status(m)
    assert set(s) >= {"transactions", "counters"}
    assert set(s["counters"]) >= {"commits", "aborts", "deadlocks", "timeouts", "recoveries"}


def test_abort_only_transaction_that_changed_the_mount_root_is_rolled_back(mnt):
    """Once abort-only, the daemon refuses the bound thread's control calls on a root
    the transaction changed; the package then aborts from another thread."""
    mnt.remount("--max-txn-ops", "3")
    m = mnt.path
    with pytest.raises(txnfs.LimitExceeded):
        with txnfs.transaction(m) as t:
            errs = [tl.errno_of(os.mkdir, m / f"d{i}") for i in range(6)]
            assert errs[0] is None and errno.EDQUOT in errs, errs
    assert t.aborted
    assert list(m.iterdir()) == []
    assert txnfs.status(m)["transactions"] == []


def test_lazy_commit_then_sync(mnt):
    m = mnt.path
    with txnfs.transaction(m) as t:
        write(m / "lazy", "l")
        t.commit(lazy=True)
    assert t.committed and read(m / "lazy") == "l"
    s = txnfs.status(m)
    assert s["counters"]["lazy_commits"] == 1
    txnfs.sync(m)
    assert txnfs.status(m)["lazy"]["not_durable"] == 0
    tid = txnfs.begin(m)
    write(m / "lazy2", "2")
    txnfs.commit(m, tid, lazy=True)
    txnfs.sync(m)
    assert read(m / "lazy2") == "2" and txnfs.status(m)["counters"]["lazy_commits"] == 2
