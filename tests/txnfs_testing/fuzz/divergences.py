"""The documented divergences: DIVERGENCES is the ONE table of where txnfs may answer
differently from XFS, each entry with its reason. An op whose txnfs result matches an
entry is counted and reported, and the XFS side runs a harmless stat in its place (or,
with same_op, the same op, whose result alone goes uncompared) -- nothing is skipped
silently.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Divergence:
    id: str
    reason: str
    match: object          # (op, mount_result, ctx) -> bool
    # True: XFS runs the op itself (it changes no file, only what later ops of its process
    # use) and only its result goes uncompared; False: XFS runs a harmless stat instead
    same_op: bool = False


DIVERGENCES = [
    Divergence(
        "lseek-data-hole",
        "lseek SEEK_DATA/SEEK_HOLE: on a directory the FUSE kernel module answers with its "
        "generic llseek (no request reaches the daemon) where XFS says ENXIO; on a file, where "
        "holes are reported depends on allocation, and txnfs writes the backing file through "
        "its page cache also for O_DIRECT opens (docs/isolation.md), so XFS allocates and "
        "zeroes differently; POSIX leaves hole granularity to the file system",
        lambda o, r, ctx: o["o"] == "lseek" and o.get("w") in ("DATA", "HOLE") and "v" in r),
    Divergence(
        "ioctl-control-only",
        "the daemon answers only its own control ioctls (txnfs_begin/commit/...); "
        "FS_IOC_GETFLAGS gets ENOTTY, XFS answers it",
        lambda o, r, ctx: o["o"] == "ioctl" and r.get("e") == "ENOTTY"),
    Divergence(
        "fallocate-collapse-insert",
        "the FUSE kernel module refuses FALLOC_FL_COLLAPSE_RANGE and FALLOC_FL_INSERT_RANGE "
        "with EOPNOTSUPP before the daemon sees them (fs/fuse/file.c fuse_file_fallocate); "
        "XFS does them (or EINVAL for unaligned ranges)",
        lambda o, r, ctx: (o["o"] == "fallocate" and o["mode"] in ("COLLAPSE_RANGE", "INSERT_RANGE")
                           and r.get("e") in ("ENOTSUP", "EOPNOTSUPP"))),
    Divergence(
        "handle-of-unlinked-inode",
        "open_by_handle_at of an object with no name left: the FUSE kernel module resolves a "
        "handle from its inode cache without asking the daemon (fs/fuse/inode.c, "
        "fuse_get_dentry), so an inode still cached -- by an open descriptor, or by a plain "
        "process that still sees the committed object a transaction removed -- opens with "
        "link count 0, where XFS refuses unlinked inodes with ESTALE; through a view, the "
        "daemon serves such an object while the kernel holds it under another nodeid, so "
        "that the view answers as the plain side does",
        lambda o, r, ctx: (o["o"] == "handle" and isinstance(r.get("v"), dict)
                           and isinstance(r["v"].get("old"), dict)
                           and r["v"]["old"].get("nlink") == 0),
        same_op=True),
]

DIVERGENCE_BY_ID = {d.id: d for d in DIVERGENCES}


def divergence_of(o, r, ctx):
    for d in DIVERGENCES:
        if d.match(o, r, ctx):
            return d.id
    return None
