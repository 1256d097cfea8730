"""The mount helper: `mount -t fuse.txnfs STORE MNT -o OPTS`, fstab lines (`mount -T
FSTAB MNT`), `umount MNT`, `mount -o remount,...`, txnfs options passed through and
unknown options refused -- with util-linux's real mount(8) and umount(8).

mount(8) runs /sbin/mount.fuse.txnfs (libmount looks only in /sbin). For this module the
helper of <repo>/build (contrib/mount.fuse.txnfs.in, configured) is put there; it runs
the txnfs of $TXNFS_BIN, which the tests set to the binary under test. A helper that was
there before is put back afterwards."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

import txnfs_lib as tl

SBIN_HELPER = Path("/sbin/mount.fuse.txnfs")
BUILT_HELPER = tl.REPO / "build" / "contrib" / "mount.fuse.txnfs"
STATE_DIR = Path("/run/txnfs/mount.fuse.txnfs")


@pytest.fixture(scope="module", autouse=True)
def helper_in_sbin():
    assert BUILT_HELPER.is_file(), f"{BUILT_HELPER} missing: build first"
    backup = SBIN_HELPER.with_name(SBIN_HELPER.name + ".before-txnfs-tests")
    had = SBIN_HELPER.exists()
    if had:
        os.replace(SBIN_HELPER, backup)
    shutil.copy2(BUILT_HELPER, SBIN_HELPER)
    os.chmod(SBIN_HELPER, 0o755)
    old_bin = os.environ.get("TXNFS_BIN")
    os.environ["TXNFS_BIN"] = tl.txnfs_bin()   # mount(8) passes the environment on
    try:
        yield
    finally:
        if old_bin is None:
            del os.environ["TXNFS_BIN"]
        else:
            os.environ["TXNFS_BIN"] = old_bin
        SBIN_HELPER.unlink()
        if had:
            os.replace(backup, SBIN_HELPER)
        # the helper's records of the mounts these tests made (stores in temporary
        # directories; all unmounted now)
        if STATE_DIR.is_dir():
            tmp = tempfile.gettempdir()
            for f in STATE_DIR.iterdir():
                if f.read_text().startswith(f"txnfs:{tmp}/txnfs-it-"):
                    f.unlink()


class HelperMount:
    """A mount made by mount(8); teardown unmounts it, waits for the daemon, checks fsck."""

    def __init__(self, store: tl.Store, path: Path, pid_file: Path):
        self.store, self.path, self.pid_file = store, path, pid_file
        path.mkdir(exist_ok=True)

    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def umount(self):
        pid = self.pid()
        p = tl.run(["umount", self.path])
        assert p.returncode == 0, tl.output_of(p)
        assert not tl.is_mounted(self.path)
        if pid is not None:
            assert tl.wait_dead(pid, 15), f"daemon {pid} still running 15 s after umount"

    def close(self):
        pid = self.pid()
        if tl.is_mounted(self.path):
            tl.run(["umount", self.path])
            tl.lazy_umount(self.path)
        if pid is not None and not tl.wait_dead(pid, 15):
            tl.kill_and_wait(pid)
            raise AssertionError(f"daemon {pid} still running after umount; killed")
        p = self.store.fsck()
        assert p.returncode == 0, tl.output_of(p)


@pytest.fixture
def hm(store, xfs):
    m = HelperMount(store, xfs.tmp / "mnt", xfs.tmp / "txnfs.pid")
    try:
        yield m
    finally:
        m.close()


def mount_t(hm: HelperMount, opts: str, *extra) -> "tl.subprocess.CompletedProcess":
    return tl.run(["mount", *extra, "-t", "fuse.txnfs", "-o", opts, hm.store.path, hm.path])


def conflict_wait(mnt: Path) -> tuple[int | None, float]:
    """Hold a write lock on mnt/x in one transaction; write x in another: (errno, seconds)."""
    tl.write_file(mnt / "x", b"base")
    holding, release = threading.Event(), threading.Event()

    def holder():
        tid = tl.txn_begin(mnt)
        try:
            tl.write_file(mnt / "x", b"holder")
            holding.set()
            release.wait(30)
        finally:
            tl.txn_commit(mnt, tid)

    th = threading.Thread(target=holder)
    th.start()
    try:
        assert holding.wait(30)
        tid = tl.txn_begin(mnt)
        t0 = time.monotonic()
        err = tl.errno_of(tl.write_file, mnt / "x", b"loser")
        took = time.monotonic() - t0
        tl.txn_abort(mnt, tid)
    finally:
        release.set()
        th.join(30)
    return err, took


def test_mount_t_fuse_txnfs_passes_txnfs_options_and_umount_ends_daemon(hm):
    p = mount_t(hm, f"lock_timeout_ms=300,max_txn_ops=5,pid_file={hm.pid_file},noatime")
    assert p.returncode == 0, tl.output_of(p)
    ent = tl.mount_entry(hm.path)
    assert ent["fstype"] == "fuse.txnfs", ent
    assert ent["source"] == f"txnfs:{hm.store.path}", ent
    assert "noatime" in ent["options"].split(","), ent
    assert hm.pid() and tl.pid_alive(hm.pid())
    # lock_timeout_ms=300: a conflicting write gives up after about 0.3 s
    err, took = conflict_wait(hm.path)
    assert err == errno.ETIMEDOUT and 0.25 <= took < 5, (err, took)
    # max_txn_ops=5: the sixth operation of a transaction fails with EDQUOT
    (hm.path / "sub").mkdir()
    tid = tl.txn_begin(hm.path)
    errs = [tl.errno_of(os.mkdir, hm.path / "sub" / f"d{i}") for i in range(8)]
    assert tl.txn_abort(hm.path, tid) == 0
    assert errno.EDQUOT in errs and errs[0] is None, errs
    hm.umount()


def test_fstab_line_mounts_with_mount_T(hm, xfs):
    fstab = xfs.tmp / "fstab"
    fstab.write_text(f"# txnfs\n{hm.store.path} {hm.path} fuse.txnfs "
                     f"defaults,_netdev,nofail,lock_timeout_ms=300,pid_file={hm.pid_file} 0 0\n")
    p = tl.run(["mount", "-T", fstab, hm.path])
    assert p.returncode == 0, tl.output_of(p)
    ent = tl.mount_entry(hm.path)
    assert ent and ent["fstype"] == "fuse.txnfs", ent
    (hm.path / "via-fstab").write_text("ok")
    err, took = conflict_wait(hm.path)
    assert err == errno.ETIMEDOUT and took < 5, (err, took)
    # a txnfs option cannot change on the mounted store: refused, the mount stays
    p = tl.run(["mount", "-T", fstab, "-o", "remount,lock_timeout_ms=1", hm.path])
    assert p.returncode != 0 and "cannot change" in tl.output_of(p), tl.output_of(p)
    assert tl.is_mounted(hm.path)
    # libmount repeats the line's txnfs options on remount: the same values are fine
    p = tl.run(["mount", "-T", fstab, "-o", "remount,ro", hm.path])
    assert p.returncode == 0, tl.output_of(p)
    assert "ro" in tl.mount_entry(hm.path)["options"].split(",")
    p = tl.run(["mount", "-T", fstab, "-o", "remount,rw", hm.path])
    assert p.returncode == 0, tl.output_of(p)
    hm.umount()
    assert (hm.store.tree / "via-fstab").read_text() == "ok"


def test_remount_changes_mount_flags_and_refuses_txnfs_options(hm):
    p = mount_t(hm, f"pid_file={hm.pid_file}")
    assert p.returncode == 0, tl.output_of(p)
    pid = hm.pid()
    (hm.path / "f").write_text("1")
    p = tl.run(["mount", "-o", "remount,ro", hm.path])
    assert p.returncode == 0, tl.output_of(p)
    assert "ro" in tl.mount_entry(hm.path)["options"].split(",")
    assert tl.errno_of(tl.write_file, hm.path / "g", b"x") == errno.EROFS
    assert (hm.path / "f").read_text() == "1"   # still served, by the same daemon
    p = tl.run(["mount", "-o", "remount,rw", hm.path])
    assert p.returncode == 0, tl.output_of(p)
    (hm.path / "g").write_text("2")
    p = tl.run(["mount", "-o", "remount,lock_timeout_ms=5", hm.path])
    assert p.returncode != 0
    assert "txnfs options cannot change on a mounted store: lock_timeout_ms=5" in tl.output_of(p)
    assert tl.mount_entry(hm.path) and hm.pid() == pid and tl.pid_alive(pid)
    hm.umount()


def test_unknown_option_is_refused_clearly(hm):
    p = mount_t(hm, f"bogus=1,pid_file={hm.pid_file}")
    assert p.returncode != 0
    assert "mount.fuse.txnfs: error: unknown option 'bogus=1'" in tl.output_of(p)
    assert not tl.is_mounted(hm.path) and hm.pid() is None
    # sloppy (-s): dropped with a warning, the mount goes ahead
    p = mount_t(hm, f"bogus=1,pid_file={hm.pid_file}", "-s")
    assert p.returncode == 0, tl.output_of(p)
    assert "ignoring unknown option 'bogus=1'" in tl.output_of(p)
    hm.umount()


def test_bad_values_and_missing_store_fail_with_txnfs_errors(hm, xfs):
    p = mount_t(hm, "lock_timeout_ms=soon")
    assert p.returncode != 0 and "--lock-timeout-ms" in tl.output_of(p), tl.output_of(p)
    assert not tl.is_mounted(hm.path)
    p = tl.run(["mount", "-t", "fuse.txnfs", xfs.dir / "no-store", hm.path])
    assert p.returncode != 0 and "txnfs: error:" in tl.output_of(p), tl.output_of(p)
    assert not tl.is_mounted(hm.path)


def test_helper_usage():
    p = tl.run([SBIN_HELPER, "--help"])
    assert p.returncode == 0 and "mount -t fuse.txnfs" in tl.output_of(p)
    assert "lock_timeout_ms=MS" in tl.output_of(p) and "_netdev" in tl.output_of(p)
    p = tl.run([SBIN_HELPER])
    assert p.returncode == 1 and "usage:" in tl.output_of(p)


def test_umount_then_mount_at_once_waits_for_the_exiting_daemon(hm):
    """What test harnesses do: unmount, mount again at once -- twenty times. umount(8)
    returns before the daemon has let go of the store; the helper waits for it."""
    for i in range(20):
        p = mount_t(hm, f"pid_file={hm.pid_file}")
        assert p.returncode == 0, f"cycle {i}: {tl.output_of(p)}"
        (hm.path / f"cycle{i}").write_text(str(i))
        p = tl.run(["umount", hm.path])
        assert p.returncode == 0, tl.output_of(p)
    assert sorted(x.name for x in hm.store.tree.iterdir()) == sorted(f"cycle{i}" for i in range(20))
