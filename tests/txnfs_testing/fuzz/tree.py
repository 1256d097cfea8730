"""The tree every run of a seed starts from: populate() builds it byte for byte the same,
outside any transaction, in areas P0..P3 (one per process) and S (shared), with every
kind of object the ops meet (files with data and holes, links, symlinks, a FIFO, a
device, set-ID files, xattrs and ACLs) and fixed times. EXISTING and FREE are the names
the generator picks from.
"""

from __future__ import annotations

import os
import random
import stat
from pathlib import Path

from txnfs_testing import txnfs_lib as tl
from txnfs_testing.fuzz.syscalls import ACLS, NOBODY


EXISTING = ["f0", "f1", "f2", "f3", "h0", "s0", "s1", "q0", "c0", "u4", "u2", "u6", "n0",
            "D0", "D0/g0", "D0/E", "D1"]
FREE = ["a", "b", "c", "D0/a", "D1/b", "D0/E/c", "D1/d"]
DIRS = ["D0", "D0/E", "D1"]
T0 = 1_700_000_000 * 10**9


def areas(procs: int, shared: bool) -> list[str]:
    return [f"P{k}" for k in range(procs)] + (["S"] if shared else [])


def populate(root: Path, seed: int, area_names: list[str]):
    """The same tree, byte for byte, for every run of `seed` (outside any transaction)."""
    rng = random.Random(f"populate/{seed}")
    old = os.umask(0)
    try:
        os.chmod(root, 0o755)
        for a in area_names:
            r = root / a
            os.mkdir(r, 0o777)
            os.mkdir(r / "D0", 0o755)
            os.mkdir(r / "D0/E", 0o777)
            os.mkdir(r / "D1", 0o777)
            tl.write_file(r / "f0", rng.randbytes(rng.randrange(1000, 20000)), 0o644)
            fd = os.open(r / "f1", os.O_WRONLY | os.O_CREAT, 0o664)
            os.pwrite(fd, rng.randbytes(4096), 0)
            os.pwrite(fd, rng.randbytes(rng.randrange(1, 9000)), 65536)   # a hole between
            os.close(fd)
            tl.write_file(r / "f2", b"", 0o600)
            tl.write_file(r / "f3", rng.randbytes(32 * 4096), 0o666)
            tl.write_file(r / "D0/g0", rng.randbytes(rng.randrange(1, 300)), 0o644)
            os.link(r / "f0", r / "h0")
            os.symlink("f0", r / "s0")
            os.symlink("missing", r / "s1")
            os.mkfifo(r / "q0", 0o666)
            os.mknod(r / "c0", stat.S_IFCHR | 0o600, os.makedev(0, 0))
            for name, mode in (("u4", 0o4777), ("u2", 0o2777), ("u6", 0o6777)):
                tl.write_file(r / name, rng.randbytes(8192), 0o777)
                os.chmod(r / name, mode)
            # nobody's own set-ID file, of a group it is not in: what nobody's writes,
            # chowns and ACLs clear of it depends on that (the daemon clears it)
            tl.write_file(r / "n0", rng.randbytes(100), 0o644)
            os.chown(r / "n0", NOBODY, 0)
            os.chmod(r / "n0", 0o6644)
            os.setxattr(r / "f0", "user.a", rng.randbytes(20))
            os.setxattr(r / "f0", "trusted.t", b"t")
            os.setxattr(r / "f1", "system.posix_acl_access", ACLS["nobody"])
            os.setxattr(r / "D0", "system.posix_acl_default", ACLS["min"])
            os.setxattr(r / "D1", "user.d", b"dir")
        # fixed times; atime after mtime so that reads do not move atime (relatime)
        for dirpath, dirnames, filenames in os.walk(root, topdown=False):
            for n in filenames + dirnames:
                os.utime(os.path.join(dirpath, n), ns=(T0 + 86400 * 10**9, T0), follow_symlinks=False)
    finally:
        os.umask(old)
