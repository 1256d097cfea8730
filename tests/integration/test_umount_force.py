"""`txnfs umount --force`: a mount whose daemon is dead or does not answer is taken down
without touching the mount (which would hang), the requests waiting on it fail instead of
hanging, the daemon ends, and the next mount serves the committed tree."""

from __future__ import annotations

import subprocess

from txnfs_testing import txnfs_lib as tl


def test_force_frees_requests_waiting_on_a_daemon_that_does_not_answer(mnt):
    (mnt.path / "keep").write_bytes(b"committed")
    pid = mnt.pid
    with tl.hung_mount(mnt, "blocked") as blocked:
        p = tl.txnfs("umount", "--force", mnt.path, timeout=30)
        assert p.returncode == 0, tl.output_of(p)
        assert "aborted" in p.stdout, p.stdout
        assert not mnt.mounted, "txnfs umount --force left the mount point mounted"
        tl.release_stopped_daemon(pid, blocked)
    mnt.pid = None
    mnt.mount()
    assert (mnt.path / "keep").read_bytes() == b"committed"
    assert not (mnt.path / "blocked").exists()


def test_force_clears_the_mount_of_a_killed_daemon(mnt):
    (mnt.path / "keep").write_bytes(b"committed")
    assert tl.kill_and_wait(mnt.pid, 15)
    mnt.pid = None
    assert mnt.mounted  # dead: "Transport endpoint is not connected"
    p = tl.txnfs("status", mnt.path)  # says what to do
    assert p.returncode != 0 and "txnfs umount --force" in p.stderr, tl.output_of(p)
    p = tl.txnfs("umount", "--force", mnt.path, timeout=30)
    assert p.returncode == 0, tl.output_of(p)
    assert not mnt.mounted
    mnt.mount()
    assert (mnt.path / "keep").read_bytes() == b"committed"


def test_force_finds_the_mount_through_a_symbolic_link_and_a_relative_path(mnt, xfs):
    link = xfs.tmp / "link"
    link.symlink_to(mnt.path.parent)
    assert tl.kill_and_wait(mnt.pid, 15)
    mnt.pid = None
    p = subprocess.run([tl.txnfs_bin(), "umount", "--force", f"link/{mnt.path.name}/"],
                       cwd=xfs.tmp, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, tl.output_of(p)
    assert not mnt.mounted
    mnt.mount()  # (recovery replays what the killed daemon left; the teardown fscks)


def test_force_refuses_what_is_not_a_txnfs_mount(xfs):
    plain = xfs.tmp / "plain"
    plain.mkdir()
    p = tl.txnfs("umount", "--force", plain)
    assert p.returncode == 1, tl.output_of(p)
    assert "txnfs: error:" in p.stderr and "is not a mount point" in p.stderr, p.stderr
    p = tl.txnfs("umount", "--force", xfs.dir)  # the XFS image's own mount
    assert p.returncode == 1, tl.output_of(p)
    assert "is not a txnfs mount" in p.stderr and "xfs" in p.stderr, p.stderr
    assert tl.is_mounted(xfs.dir), "a refused --force unmounted something"
