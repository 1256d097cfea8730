"""pytest fixtures for the txnfs integration tests (run as root).

    xfs    a fresh sparse 1 GiB XFS image (reflink=1), loop-mounted; .dir is its root
           (`@pytest.mark.xfs_size(BYTES)` asks for another size; XFS needs 300 MiB at least)
    store  `txnfs init <xfs.dir>/store`; .path, .tree, .db
    mnt    a txnfs mount of `store` (daemon mode, --pid-file) at a fresh mount point;
           .path, .store, .pid, .umount(), .mount(), .kill9(), .remount().
           Teardown unmounts, makes sure no daemon is left, and asserts that
           `txnfs fsck STORE` exits 0 -- unless the test set `mnt.expect_dirty = True`.

The binary is $TXNFS_BIN or <repo>/build/src/txnfuse/txnfs.  Every test gets its own
image, store and mount, so tests are independent and can run in any order.
A watchdog kills the txnfs daemons of a test that runs longer than
$TXNFS_TEST_TIMEOUT seconds (default 180; a test marked `@pytest.mark.txnfs_timeout(S)`
gets S if that is longer), so a hung FUSE request fails the test instead of hanging the
suite.

Every daemon the tests start gets TXNFS_STALL_DUMP (a directory of this session) and
TXNFS_LOCK_ORDER_ABORT=1: a FUSE request unanswered for 30 s makes the daemon save every
thread's stack there, and a lock-order violation aborts it after writing its report
there. Any test after which that directory holds a file fails, printing the file.

TXNFS_TEST_IO_URING=1 runs every mount over FUSE's io_uring (enable_uring is set to Y
for the session and restored after).
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from txnfs_testing import txnfs_lib as tl

TEST_TIMEOUT = float(os.environ.get("TXNFS_TEST_TIMEOUT", "180"))

_active_mounts: list[tl.Mount] = []


def pytest_configure(config):
    config.addinivalue_line("markers", "txnfs_timeout(seconds): a longer watchdog limit "
                                       "for a test that is slow by design")
    config.addinivalue_line("markers", "xfs_size(bytes): the size of the test's XFS image "
                                       "(default 1 GiB, at least 300 MiB)")


@pytest.fixture(scope="session", autouse=True)
def _preconditions():
    assert os.geteuid() == 0, "the txnfs integration tests must run as root"
    b = tl.txnfs_bin()
    assert os.path.isfile(b) and os.access(b, os.X_OK), (
        f"txnfs binary not found at {b}: build it (ninja -C build) or set TXNFS_BIN")
    assert os.path.exists("/dev/fuse"), "/dev/fuse is missing"


# Set before any daemon starts; every `txnfs mount` passes its environment on.
STALL_DUMP_DIR = Path(tempfile.mkdtemp(prefix="txnfs-stall-dumps-"))
os.chmod(STALL_DUMP_DIR, 0o755)
os.environ["TXNFS_STALL_DUMP"] = str(STALL_DUMP_DIR)
os.environ["TXNFS_LOCK_ORDER_ABORT"] = "1"


@pytest.fixture(scope="session", autouse=True)
def _io_uring():
    """TXNFS_TEST_IO_URING=1: mounts use FUSE over io_uring (txnfs_lib.Mount), which the
    kernel offers only while enable_uring is Y; switched on here, restored after."""
    if not tl.io_uring_wanted():
        yield
        return
    old = tl.enable_uring()
    try:
        yield
    finally:
        tl.restore_uring(old)


@pytest.fixture(autouse=True)
def _no_stalls():
    """Fails the test if a daemon reported a stalled request or a lock-order violation
    while it ran (set up first, so torn down last: after the mounts are gone)."""
    yield
    dumps = sorted(STALL_DUMP_DIR.iterdir())
    if not dumps:
        return
    text = []
    for d in dumps:
        text.append(f"===== {d.name} =====\n{d.read_text(errors='replace')}")
        d.unlink()  # reported once, not blamed on the next test
    pytest.fail("the txnfs daemon stalled or broke the lock order during this test:\n"
                + "\n".join(text), pytrace=False)


def pytest_sessionfinish(session, exitstatus):
    try:
        for d in STALL_DUMP_DIR.iterdir():
            d.unlink()
        STALL_DUMP_DIR.rmdir()
    except OSError:
        pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    fired = []

    def watchdog():
        fired.append(True)
        sys.stderr.write(f"\n*** {item.nodeid}: exceeded {limit:.0f} s; "
                         f"killing its txnfs daemons ***\n")
        for m in list(_active_mounts):
            if m.pid is not None:
                tl.kill_and_wait(m.pid, 5)

    mark = item.get_closest_marker("txnfs_timeout")
    limit = max(TEST_TIMEOUT, float(mark.args[0])) if mark else TEST_TIMEOUT
    t = threading.Timer(limit, watchdog)
    t.daemon = True
    t.start()
    try:
        yield
    finally:
        t.cancel()


@pytest.fixture
def xfs(request):
    size = request.node.get_closest_marker("xfs_size")
    img = tl.XfsImage(size=size.args[0]) if size else tl.XfsImage()
    try:
        yield img
    finally:
        img.close()


@pytest.fixture
def store(xfs):
    return tl.Store(xfs.dir / "store").init()


@pytest.fixture
def mnt(store, xfs):
    m = tl.Mount(store, xfs.tmp / "mnt", xfs.tmp / "txnfs.pid")
    _active_mounts.append(m)
    try:
        m.mount()
        yield m
    finally:
        try:
            m.close()
        finally:
            _active_mounts.remove(m)


@pytest.fixture
def other_mountpoint(xfs):
    """A second, empty directory usable as a mount point (cleaned up if mounted)."""
    p = xfs.tmp / "mnt2"
    p.mkdir()
    yield p
    if tl.is_mounted(p):
        tl.run(["fusermount3", "-u", str(p)])
        tl.lazy_umount(p)
