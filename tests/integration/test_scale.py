"""A tree larger than the daemon's open-file limit.

The daemon holds no fd per object the kernel knows: it opens O_PATH fds from the
backing file handles on demand and keeps at most the fd cache's capacity of them
(src/txnfuse/txn/fd_cache.h). These tests start the daemon with RLIMIT_NOFILE at 1,024
(so the default cache is 512 fds) and check that

  - 200,000 files can be created, stat'ed and read back, while the daemon's open fds
    (/proc/PID/fd) stay within the cache's capacity plus a small constant;
  - a transaction over more files than the cache holds aborts byte-identically, and
    one commits completely;
  - a cache size the limit cannot hold is refused with a clear error.
"""

from __future__ import annotations

import errno
import os
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

import pytest

from txnfs_testing import txnfs_lib as tl

LIMIT = 1024
CACHE = LIMIT // 2  # FdCache::default_capacity(): half the hard limit
# fds into the store besides the cache's: its directories and lock, SQLite's database
# and WAL files, the files the test holds open, fds pinned by requests in flight.
SLACK = 64


@pytest.fixture
def big_xfs():
    img = tl.XfsImage(size=8 << 30)  # sparse; 200,000 files of one block each need ~1 GiB
    try:
        yield img
    finally:
        img.close()


def limited_bin(xfs) -> str:
    """A txnfs that runs under RLIMIT_NOFILE = LIMIT (soft and hard), as a mount started
    by a user with that limit would: the daemon inherits it from `txnfs mount`."""
    w = xfs.tmp / "txnfs-limited"
    w.write_text(f'#!/bin/sh\nexec prlimit --nofile={LIMIT}:{LIMIT} -- "{tl.txnfs_bin()}" "$@"\n')
    w.chmod(0o755)
    return str(w)


def mount_limited(store, xfs, *extra) -> tl.Mount:
    m = tl.Mount(store, xfs.tmp / "mnt", xfs.tmp / "txnfs.pid")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TXNFS_BIN", limited_bin(xfs))
        m.mount(*extra)
    return m


@pytest.fixture
def limited(big_xfs):
    store = tl.Store(big_xfs.dir / "store").init()
    m = mount_limited(store, big_xfs)
    try:
        soft, hard = (int(x) for x in open(f"/proc/{m.pid}/limits").read()
                      .split("Max open files")[1].split()[:2])
        assert hard == LIMIT, "the daemon did not start with the lowered limit"
        yield m
    finally:
        m.close()


def open_fds(m) -> int:
    """The daemon's fds into the store (O_PATH fds, open files, the database). Not
    counted: libfuse's per-worker-thread /dev/fuse clone and splice pipe (3 fds a
    thread, as many as requests run at once), and stdio."""
    n = 0
    for f in os.listdir(f"/proc/{m.pid}/fd"):
        try:
            if os.readlink(f"/proc/{m.pid}/fd/{f}").startswith(str(m.store.path)):
                n += 1
        except FileNotFoundError:  # closed meanwhile
            pass
    return n


def content(i: int) -> bytes:
    return b"file %d\n" % i


def create_dir(m, d: int, per_dir: int):
    dpath = m.path / f"d{d:03}"
    os.mkdir(dpath)
    for f in range(per_dir):
        fd = os.open(dpath / f"f{f:04}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            os.write(fd, content(d * per_dir + f))
        finally:
            os.close(fd)


def check_dir(m, d: int, per_dir: int):
    dpath = m.path / f"d{d:03}"
    assert len(os.listdir(dpath)) == per_dir
    for f in range(per_dir):
        want = content(d * per_dir + f)
        p = dpath / f"f{f:04}"
        assert os.stat(p).st_size == len(want), p
        with open(p, "rb") as fh:
            assert fh.read() == want, p


def each_dir(m, dirs: int, fn) -> int:
    """Runs fn(d) for every directory on a few threads (the daemon serves requests in
    parallel); returns the most fds the daemon had open, sampled after each directory."""
    peak = 0
    with ThreadPoolExecutor(max_workers=4) as pool:
        for fut in as_completed([pool.submit(fn, d) for d in range(dirs)]):
            fut.result()
            peak = max(peak, open_fds(m))
    return peak


@pytest.mark.txnfs_timeout(1800)  # ~10 min on 2 busy cores: 200,000 files, twice
def test_200k_files_with_fd_limit_1024(limited):
    m = limited
    dirs, per_dir = 200, 1000
    peak = each_dir(m, dirs, lambda d: create_dir(m, d, per_dir))
    assert peak <= CACHE + SLACK, f"daemon had {peak} fds open while creating"
    # Every file once more through the daemon: stat and read back, while the kernel
    # still knows all 200,000 inodes (and the cache holds at most 512 of their fds).
    peak = each_dir(m, dirs, lambda d: check_dir(m, d, per_dir))
    assert peak <= CACHE + SLACK, f"daemon had {peak} fds open while reading back"
    # The handle table holds a row per object (fsck at teardown checks it agrees).
    assert m.store.query("SELECT COUNT(*) AS n FROM handles")[0]["n"] == dirs * per_dir + dirs + 1


def make_files(m, n) -> dict:
    os.mkdir(m.path / "t")
    want = {}
    for i in range(n):
        p = m.path / "t" / f"f{i:05}"
        tl.write_file(p, content(i) * 3)
        want[p.name] = content(i) * 3
    return want


def change_all(m, n):
    """Inside a transaction bound to this thread: rewrite, chmod and rename every file,
    and create as many new ones -- more objects than the fd cache holds."""
    for i in range(n):
        p = m.path / "t" / f"f{i:05}"
        with open(p, "r+b") as fh:
            fh.write(b"CHANGED")
        os.chmod(p, 0o600)
        os.rename(p, m.path / "t" / f"g{i:05}")
        tl.write_file(m.path / "t" / f"new{i:05}", b"new")


@pytest.mark.parametrize("outcome", ["abort", "commit"])
def test_transaction_over_more_files_than_the_cache(limited, outcome):
    m = limited
    n = 3 * CACHE
    want = make_files(m, n)
    before = tl.hash_tree(m.store.tree)
    tid = tl.txn_begin(m.path)
    change_all(m, n)
    assert open_fds(m) <= CACHE + SLACK
    if outcome == "abort":
        assert tl.txn_abort(m.path, tid) == 0
        assert tl.hash_tree(m.store.tree) == before
        for name, data in want.items():
            p = m.path / "t" / name
            assert p.read_bytes() == data
            assert os.stat(p).st_mode & 0o777 == 0o644
        assert sorted(os.listdir(m.path / "t")) == sorted(want)
    else:
        assert tl.txn_commit(m.path, tid) == 0
        names = sorted(os.listdir(m.path / "t"))
        assert names == sorted([f"g{i:05}" for i in range(n)] + [f"new{i:05}" for i in range(n)])
        for i in range(n):
            p = m.path / "t" / f"g{i:05}"
            assert p.read_bytes() == b"CHANGED" + (content(i) * 3)[7:]
            assert os.stat(p).st_mode & 0o777 == 0o600
            assert (m.path / "t" / f"new{i:05}").read_bytes() == b"new"
    assert open_fds(m) <= CACHE + SLACK


def test_fd_cache_larger_than_the_limit_is_refused(xfs):
    store = tl.Store(xfs.dir / "store").init()
    m = tl.Mount(store, xfs.tmp / "mnt", xfs.tmp / "txnfs.pid")
    p = tl.run([limited_bin(xfs), "mount", store.path, m.path, "--pid-file", m.pid_file,
                "--fd-cache", str(LIMIT)])
    try:
        assert p.returncode != 0
        out = tl.output_of(p)
        assert "fd cache of 1024 fds does not fit the open-file limit of 1024" in out, out
        assert not m.mounted
    finally:
        if m.mounted:
            m.close()
    # A size that fits is served, and the daemon keeps to it.
    m = mount_limited(store, xfs, "--fd-cache", "100")
    try:
        os.mkdir(m.path / "d")
        for i in range(1000):
            tl.write_file(m.path / "d" / f"f{i}", b"x")
        for i in range(1000):
            assert (m.path / "d" / f"f{i}").read_bytes() == b"x"
        assert open_fds(m) <= 100 + SLACK
    finally:
        m.close()


def test_reused_inode_number_is_a_new_object(mnt):
    """Holding no fd, the daemon does not keep a removed file's inode alive, so XFS may
    give its number -- the nodeid -- to a new file while the kernel still knows the old
    one (here: an O_PATH fd on the mount holds it). The new file must be served as
    itself (the entry carries a new generation) and the old handle must be stale."""
    mnt.umount()
    mnt.mount("--fd-cache", "1")  # the daemon's fd of the removed file goes at once
    d = mnt.path / "d"
    os.mkdir(d)
    tl.write_file(d / "old", b"old")
    old_ino = os.stat(d / "old").st_ino
    held = os.open(d / "old", os.O_PATH)
    try:
        os.unlink(d / "old")
        reused = None
        for i in range(2000):  # XFS hands out the lowest free inode of the chunk again
            p = d / f"new{i}"
            tl.write_file(p, b"new %d" % i)
            if os.stat(p).st_ino == old_ino:
                reused = (p, i)
                break
        if reused is None:
            pytest.fail(f"XFS did not reuse inode {old_ino} in 2000 creations")
        p, i = reused
        assert p.read_bytes() == b"new %d" % i
        os.chmod(p, 0o600)
        assert os.stat(p).st_mode & 0o777 == 0o600
        with pytest.raises(OSError) as e:
            os.stat(f"/proc/self/fd/{held}")  # the removed file, through its old inode
        # The kernel marked its old inode bad on seeing the new generation (EIO).
        assert e.value.errno in (errno.EIO, errno.ESTALE, errno.ENOENT), e.value
    finally:
        os.close(held)  # the kernel forgets the old inode's lookups under the nodeid
    time.sleep(0.5)  # FORGET is asynchronous
    # The new file keeps its own lookups in the daemon: opening it (by nodeid) works.
    assert p.read_bytes() == b"new %d" % i
    assert sorted(os.listdir(d)) == sorted(f"new{k}" for k in range(i + 1))
