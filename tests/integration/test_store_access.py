"""The store directory is root's: other users reach the tree only through the mount
(STORE/tree directly would bypass locks, undo and the handle table), and fsck warns
about a store that others can enter."""

from __future__ import annotations

import errno
import os
import stat

from txnfs_testing import txnfs_lib as tl


def test_init_makes_store_root_only_and_mount_is_the_way_in(mnt):
    st = os.stat(mnt.store.path)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == 0
    (mnt.path / "shared").write_text("hello")
    os.chmod(mnt.path / "shared", 0o666)
    # another user: the file through the mount yes, the same file in STORE/tree no
    assert tl.as_user(lambda: open(mnt.path / "shared").read()) == "hello"
    assert tl.errno_of(tl.as_user, lambda: open(mnt.store.tree / "shared").read()) == errno.EACCES
    assert tl.errno_of(tl.as_user, os.listdir, mnt.store.path) == errno.EACCES


def test_init_of_an_existing_empty_directory_makes_it_root_only(xfs):
    d = xfs.dir / "existing"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    tl.Store(d).init()
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700


def test_fsck_warns_about_a_store_others_can_enter(store):
    p = store.fsck()
    assert p.returncode == 0 and "warning" not in tl.output_of(p), tl.output_of(p)
    os.chmod(store.path, 0o755)
    p = store.fsck()
    assert p.returncode == 0, tl.output_of(p)   # a warning, not a consistency problem
    assert (f"txnfs: warning: {store.path} is mode 0755: users other than its owner can "
            f"enter it") in p.stderr, tl.output_of(p)
    assert f"chmod 0700 {store.path}" in p.stderr
    os.chmod(store.path, 0o700)
