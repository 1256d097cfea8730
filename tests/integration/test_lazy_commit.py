"""Lazy commits (TXNFS_COMMIT_LAZY, `txnfs commit --lazy`, `txnfs run --lazy`): final and
visible at once, durable at the next group commit or when anything asks for durability;
after a crash the lost lazy transactions are a suffix of the commit order, each rolled
back whole, latest first (docs/crash-model.md, "Lazy commit")."""
import errno
import json
import os
import queue
import threading
import time

from txnfs_testing import txnfs_lib as tl

NEVER = "60000"  # --lazy-flush-ms long enough that only the test makes commits durable


class TxnThread:
    """One OS thread that runs the calls given to it: a thread-bound transaction's
    requests must all come from the thread that began it."""

    def __init__(self):
        self.jobs = queue.Queue()
        self.t = threading.Thread(target=self._loop, daemon=True)
        self.t.start()

    def _loop(self):
        while True:
            fn, box = self.jobs.get()
            if fn is None:
                return
            try:
                box.put((True, fn()))
            except BaseException as e:  # handed back to the caller
                box.put((False, e))

    def __call__(self, fn):
        box = queue.Queue()
        self.jobs.put((fn, box))
        ok, v = box.get(timeout=60)
        if not ok:
            raise v
        return v

    def close(self):
        self.jobs.put((None, None))
        self.t.join(10)


def lazy_status(m):
    return tl.txn_status(m.path)["lazy"]


def view(m):
    return m.store.query("SELECT not_durable, oldest_ms FROM lazy_commits")[0]


def lazily(m, th, fn):
    """Runs fn inside a thread-bound transaction on `th` and commits it lazily."""
    def body():
        tid = tl.txn_begin(m.path)
        fn()
        assert tl.txn_commit_lazy(m.path, tid) == 0
        return tid
    return th(body)


def test_lazy_commit_is_visible_at_once_and_durable_after_sync(mnt):
    mnt.remount("--lazy-flush-ms", NEVER)
    f = mnt.path / "f"
    th = TxnThread()
    try:
        tid = lazily(mnt, th, lambda: tl.write_file(f, b"lazy"))
    finally:
        th.close()
    assert f.read_bytes() == b"lazy"
    st = lazy_status(mnt)
    assert st["not_durable"] == 1 and st["flush_ms"] == 60000
    # The lazy commit writes no row itself; the mirror does within its interval.
    assert tl.wait_until(lambda: view(mnt)["not_durable"] == 1), view(mnt)
    rows = mnt.store.query("SELECT id, state FROM txns WHERE id = ?", (tid,))
    assert rows == [{"id": tid, "state": "active"}]  # not a commit record yet
    assert tl.run([tl.txnfs_bin(), "status", str(mnt.path)]).stdout.count(
        "lazy commits not yet durable: 1, oldest") == 1
    assert tl.txnfs("sync", mnt.path).returncode == 0
    assert lazy_status(mnt)["not_durable"] == 0
    assert view(mnt)["not_durable"] == 0
    assert tl.txn_status(mnt.path)["counters"]["lazy_commits"] == 1


def test_flusher_makes_lazy_commits_durable_by_itself(mnt):
    mnt.remount("--lazy-flush-ms", "20")
    th = TxnThread()
    try:
        lazily(mnt, th, lambda: tl.write_file(mnt.path / "f", b"x"))
    finally:
        th.close()
    assert tl.wait_until(lambda: lazy_status(mnt)["not_durable"] == 0, timeout=10)
    assert tl.txn_status(mnt.path)["counters"]["lazy_flushes"] >= 1


def test_kill_rolls_back_lazy_commits_latest_first(mnt):
    """B commits before A although A began first (smaller id): undoing by id, in
    either direction, would leave one of the two writes behind."""
    f = mnt.path / "f"
    tl.write_file(f, b"orig")
    mnt.remount("--lazy-flush-ms", NEVER)
    ta, tb = TxnThread(), TxnThread()
    try:
        a = ta(lambda: tl.txn_begin(mnt.path))
        b = tb(lambda: tl.txn_begin(mnt.path))
        assert a < b

        def b_body():
            tl.write_file(f, b"one!")
            (mnt.path / "made-by-b").mkdir()
            assert tl.txn_commit_lazy(mnt.path, b) == 0
        tb(b_body)

        def a_body():
            tl.write_file(f, b"two!!")
            (mnt.path / "made-by-b" / "inside-by-a").write_bytes(b"a")
            assert tl.txn_commit_lazy(mnt.path, a) == 0
        ta(a_body)
    finally:
        ta.close()
        tb.close()
    assert f.read_bytes() == b"two!!"
    assert lazy_status(mnt)["not_durable"] == 2
    mnt.kill9()
    mnt.mount()
    assert f.read_bytes() == b"orig"
    assert not (mnt.path / "made-by-b").exists()


def lazy_each(m, *fns):
    """Runs each of `fns` as a lazily committed transaction of its own, on one thread."""
    th = TxnThread()
    try:
        return [lazily(m, th, fn) for fn in fns]
    finally:
        th.close()


def test_only_the_suffix_after_a_sync_is_lost(mnt):
    f = mnt.path / "f"
    tl.write_file(f, b"orig")
    mnt.remount("--lazy-flush-ms", NEVER)
    lazy_each(mnt, lambda: tl.write_file(f, b"first"))
    assert tl.txn_sync(mnt.path) == 0
    lazy_each(mnt, lambda: tl.write_file(f, b"second"),
              lambda: (mnt.path / "g").write_bytes(b"third"))
    mnt.kill9()
    mnt.mount()
    assert f.read_bytes() == b"first"
    assert not (mnt.path / "g").exists()


def durable_mark(m) -> int:
    """The durable mark of lazy commits (set_lazy_durable): trusted.txnfs.lazy_durable of
    the store's backups directory, 0 without one."""
    try:
        return int(os.getxattr(m.store.path / ".txnfs" / "backups", "trusted.txnfs.lazy_durable"))
    except OSError as e:
        if e.errno != errno.ENODATA:
            raise
        return 0


def test_lazy_commits_after_a_restart_number_on_from_the_durable_mark(mnt):
    """The mark says "lazy commits up to N are durable": a daemon that counted from 1
    again would have its first lazy commits kept by the next recovery although they never
    became durable (here: "three" would survive the crash)."""
    f = mnt.path / "f"
    tl.write_file(f, b"orig")
    mnt.remount("--lazy-flush-ms", NEVER)
    lazy_each(mnt, lambda: tl.write_file(f, b"one"), lambda: tl.write_file(f, b"two"))
    assert durable_mark(mnt) == 0
    assert tl.txn_sync(mnt.path) == 0
    assert durable_mark(mnt) == 2
    mnt.kill9()
    mnt.mount("--lazy-flush-ms", NEVER)
    assert f.read_bytes() == b"two"
    lazy_each(mnt, lambda: tl.write_file(f, b"three"))
    assert lazy_status(mnt)["not_durable"] == 1
    mnt.kill9()
    mnt.mount()
    assert f.read_bytes() == b"two"
    assert durable_mark(mnt) == 2


def test_where_the_mark_is_refused_lazy_commits_get_records_and_the_suffix_holds(mnt, monkeypatch):
    """The fallback (trusted xattrs refused: an unprivileged daemon, another file system):
    the same contract, kept by SQLite commit records. The daemon dies in the round that
    made two lazy commits durable, before their logs go: only their records keep them."""
    f = mnt.path / "f"
    tl.write_file(f, b"orig")
    mnt.umount()
    monkeypatch.setenv("TXNFS_TEST_LAZY_RECORDS", "1")
    with tl.crash_at("commit.after_rows:1"):
        mnt.mount("--lazy-flush-ms", NEVER)
    lazy_each(mnt, lambda: tl.write_file(f, b"first"),
              lambda: (mnt.path / "g").write_bytes(b"g"))
    tl.txn_sync(mnt.path)  # (the daemon dies inside)
    assert tl.wait_dead(mnt.pid, 10), "the crash point did not fire"
    mnt.pid = None
    tl.lazy_umount(mnt.path)
    assert durable_mark(mnt) == 0
    mnt.mount("--lazy-flush-ms", NEVER)
    assert f.read_bytes() == b"first"
    assert (mnt.path / "g").read_bytes() == b"g"
    lazy_each(mnt, lambda: tl.write_file(f, b"second"))
    mnt.kill9()
    monkeypatch.delenv("TXNFS_TEST_LAZY_RECORDS")
    mnt.mount()
    assert f.read_bytes() == b"first"
    assert durable_mark(mnt) == 0


def test_a_log_the_durable_mark_covers_is_committed(mnt):
    """The daemon dies right after a round's mark covers a lazy commit, its log still
    whole: fsck calls the log a committed transaction's, and recovery keeps the commit
    (it discards the log instead of undoing it)."""
    f = mnt.path / "f"
    tl.write_file(f, b"orig")
    mnt.umount()
    with tl.crash_at("commit.after_lazy_mark:1"):
        mnt.mount("--lazy-flush-ms", "20")
    lazy_each(mnt, lambda: tl.write_file(f, b"lazy"))
    assert tl.wait_dead(mnt.pid, 10), "the crash point did not fire"
    mnt.pid = None
    tl.lazy_umount(mnt.path)
    assert durable_mark(mnt) == 1
    p = mnt.store.fsck()
    assert "(a lazy commit, durable by the mark) is still there" in p.stdout + p.stderr, \
        tl.output_of(p)
    mnt.mount()
    assert f.read_bytes() == b"lazy"
    p = mnt.store.fsck()
    assert p.returncode == 0, tl.output_of(p)


def test_durable_commit_makes_earlier_lazy_commits_durable(mnt):
    mnt.remount("--lazy-flush-ms", NEVER)
    th = TxnThread()
    try:
        lazily(mnt, th, lambda: tl.write_file(mnt.path / "lazy", b"l"))

        def durable():
            tid = tl.txn_begin(mnt.path)
            tl.write_file(mnt.path / "durable", b"d")
            assert tl.txn_commit(mnt.path, tid) == 0
        th(durable)
    finally:
        th.close()
    assert lazy_status(mnt)["not_durable"] == 0
    mnt.kill9()
    mnt.mount()
    assert (mnt.path / "lazy").read_bytes() == b"l"
    assert (mnt.path / "durable").read_bytes() == b"d"


def test_only_the_flusher_or_a_request_makes_a_lazy_commit_durable(mnt):
    """A durable commit leaves records for the cleaner to forget, in a round of its own
    (100 ms later). That round must leave a lazy commit made meanwhile queued: with
    --lazy-flush-ms 60000 it is still not durable a second later, and a kill loses it."""
    mnt.remount("--lazy-flush-ms", NEVER)
    th = TxnThread()
    try:
        def durable():
            tid = tl.txn_begin(mnt.path)
            tl.write_file(mnt.path / "durable", b"d")
            assert tl.txn_commit(mnt.path, tid) == 0
        th(durable)
        lazily(mnt, th, lambda: tl.write_file(mnt.path / "lazy", b"l"))
    finally:
        th.close()
    time.sleep(1.0)   # well past the cleaner's round
    assert lazy_status(mnt)["not_durable"] == 1
    mnt.kill9()
    mnt.mount()
    assert (mnt.path / "durable").read_bytes() == b"d"
    assert not (mnt.path / "lazy").exists()


def test_plain_change_after_a_lazy_commit_makes_it_durable_first(mnt):
    """A rollback of the lazy transaction would undo the plain write on top of it."""
    f = mnt.path / "f"
    tl.write_file(f, b"orig")
    mnt.remount("--lazy-flush-ms", NEVER)
    th = TxnThread()
    try:
        lazily(mnt, th, lambda: tl.write_file(f, b"lazy-data"))
    finally:
        th.close()
    assert lazy_status(mnt)["not_durable"] == 1
    with open(f, "r+b") as fh:  # plain, no fsync: the write itself asks for durability
        fh.seek(0)
        fh.write(b"PLAIN")
        fh.flush()
        assert lazy_status(mnt)["not_durable"] == 0
    mnt.kill9()
    mnt.mount()
    assert f.read_bytes() == b"PLAINdata"


def test_fsync_inside_a_lazy_transaction_makes_its_commit_durable(mnt):
    mnt.remount("--lazy-flush-ms", NEVER)
    th = TxnThread()

    def body():
        with open(mnt.path / "f", "wb") as fh:
            fh.write(b"synced")
            fh.flush()
            os.fsync(fh.fileno())
    try:
        lazily(mnt, th, body)
    finally:
        th.close()
    assert lazy_status(mnt)["not_durable"] == 0
    mnt.kill9()
    mnt.mount()
    assert (mnt.path / "f").read_bytes() == b"synced"


def test_cli_run_and_commit_lazy(mnt):
    mnt.remount("--lazy-flush-ms", NEVER)
    p = tl.txnfs("run", "--lazy", mnt.path, "--", "sh", "-c", f"echo hi > {mnt.path}/r")
    assert p.returncode == 0, tl.output_of(p)
    assert "committed" in p.stderr and "lazily" in p.stderr
    assert lazy_status(mnt)["not_durable"] == 1
    # begin/commit --lazy from one shell: the transaction is bound to the shell
    sh = (f"id=$({tl.txnfs_bin()} begin {mnt.path}) && echo c > {mnt.path}/c && "
          f"{tl.txnfs_bin()} commit --lazy {mnt.path} $id")
    p = tl.run(["sh", "-c", sh])
    assert p.returncode == 0, tl.output_of(p)
    assert lazy_status(mnt)["not_durable"] == 2
    st = json.loads(tl.txnfs("status", "--json", mnt.path).stdout)
    assert st["lazy"]["not_durable"] == 2 and st["lazy"]["oldest_ms"] >= 0
    # unmounting makes them durable
    mnt.umount()
    mnt.mount()
    assert (mnt.path / "r").read_text() == "hi\n"
    assert (mnt.path / "c").read_text() == "c\n"
    assert tl.txnfs("commit", "--lazy", mnt.path, "999").returncode == 1


def test_durable_commit_that_changed_nothing_makes_earlier_lazy_commits_durable(mnt):
    """Found by the crash oracle: an empty durable commit returned without syncing."""
    mnt.remount("--lazy-flush-ms", NEVER)
    th = TxnThread()
    try:
        lazily(mnt, th, lambda: tl.write_file(mnt.path / "lazy", b"l"))

        def empty_durable():
            tid = tl.txn_begin(mnt.path)
            assert tl.txn_commit(mnt.path, tid) == 0
        th(empty_durable)
    finally:
        th.close()
    assert lazy_status(mnt)["not_durable"] == 0
    mnt.kill9()
    mnt.mount()
    assert (mnt.path / "lazy").read_bytes() == b"l"


def here_count(m) -> int:
    return tl.txn_status(m.path)["counters"]["lazy_commits_here"]


def test_a_lazy_commit_that_only_made_objects_ends_on_the_request_thread(mnt):
    # The directory's attributes are the only thing the kernel must drop, and it never
    # cached a listing of it: the commit runs on the thread that read it
    # (TxnManager::commit_here; the counter says so), and everyone sees it once it
    # returns. (The kernel held none of the directory's attributes with a lifetime to
    # drop: plain readers are shown committed ones with none, finish_entry.)
    d = mnt.path / "d"
    d.mkdir()
    before = os.stat(d)
    base = here_count(mnt)
    th = TxnThread()
    try:
        tid = th(lambda: tl.txn_begin(mnt.path))
        th(lambda: ((d / "sub").mkdir(), tl.write_file(d / "f", b"made")))
        # Another process's view now: the committed one.
        assert os.stat(d).st_nlink == before.st_nlink
        assert sorted(os.listdir(d)) == []
        assert th(lambda: tl.txn_commit_lazy(mnt.path, tid)) == 0
    finally:
        th.close()
    assert here_count(mnt) == base + 1
    # At once: the commit's attributes, names and data.
    st = os.stat(d)
    assert st.st_nlink == before.st_nlink + 1
    assert st.st_mtime_ns == os.stat(mnt.store.tree / "d").st_mtime_ns
    assert sorted(os.listdir(d)) == ["f", "sub"]
    assert (d / "f").read_bytes() == b"made"


def test_a_lazy_commit_in_a_directory_whose_listing_may_be_cached_ends_on_the_pool(mnt):
    # A directory opened while no transaction was open may have its listing cached by the
    # kernel: a commit that made a name in it drops the directory's pages, which may wait
    # for the kernel's page locks, so it runs on the control pool (the counter does not
    # move; it would if op_opendir did not mark the directory). The listing is the
    # committed one afterwards, through the open handle and a new one alike. (Whether the
    # kernel kept a stale listing otherwise is not observable here: it also drops one on
    # its own when the directory's change count or mtime moved.)
    d = mnt.path / "d"
    d.mkdir()
    tl.write_file(d / "a", b"a")
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)  # its listing may be cached
    try:
        assert sorted(os.listdir(fd)) == ["a"]
        base = here_count(mnt)
        th = TxnThread()
        try:
            tid = th(lambda: tl.txn_begin(mnt.path))
            th(lambda: tl.write_file(d / "b", b"b"))
            os.lseek(fd, 0, os.SEEK_SET)
            assert sorted(os.listdir(fd)) == ["a"]  # the committed view
            assert th(lambda: tl.txn_commit_lazy(mnt.path, tid)) == 0
        finally:
            th.close()
        assert here_count(mnt) == base
        # Through the open directory first: a path walk would refresh its attributes,
        # and the kernel drops a listing cached under another mtime by itself.
        os.lseek(fd, 0, os.SEEK_SET)
        assert sorted(os.listdir(fd)) == ["a", "b"]
        assert sorted(os.listdir(d)) == ["a", "b"]
    finally:
        os.close(fd)


def test_a_lazy_commit_that_removed_a_name_ends_on_the_control_pool(mnt):
    # The kernel must drop the name, which takes the directory's lock: never on a thread
    # that serves requests. The name is gone for everyone once the commit returns.
    d = mnt.path / "d"
    d.mkdir()
    tl.write_file(d / "gone", b"x")
    assert (d / "gone").exists()  # the kernel caches the name
    base = here_count(mnt)
    lazy_each(mnt, lambda: os.unlink(d / "gone"))
    assert here_count(mnt) == base
    assert not (d / "gone").exists()
    assert os.listdir(d) == []
