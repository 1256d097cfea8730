"""Full snapshots of a directory tree, for byte-for-byte before/after comparisons.

    snap = snapshot(root)                 # {relative path: {field: value}}
    assert_same(before, after, "after abort")

For every object under `root` (the root itself is ".") a snapshot records:

    type, mode, uid, gid, nlink, ino      from os.lstat
    size                                  (not for directories, see below)
    atime_ns, mtime_ns                    (ctime is deliberately not recorded: an undo
                                           must move it forward so that caches notice)
    sha256                                content of a regular file
    target                                a symlink's target (readlink)
    rdev                                  character / block devices
    xattrs                                {name: value}, every name listxattr reports,
                                          read without following symlinks
    handle                                name_to_handle_at bytes (type + handle), only
                                          with handles=True (meaningful on the mount)

A directory's st_size is not recorded: it is the backing file system's private format
(XFS short-form vs. block directories), which adding and removing an entry may change
for good; the directory's *content* is recorded, as the set of its entries' paths.

Taking a snapshot changes nothing it records: files and directories are opened with
O_NOATIME (the tests run as root, so that is allowed for every object), every object is
lstat()ed before it is read, and nothing is written.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
from pathlib import Path

from txnfs_testing import txnfs_lib as tl

# fields that only make sense on one side when comparing the mount with STORE/tree
MOUNT_ONLY_FIELDS = ("handle", "ino")


def _open_noatime(path, flags):
    try:
        return os.open(path, flags | os.O_NOATIME | os.O_CLOEXEC | os.O_NOCTTY)
    except PermissionError:
        # O_NOATIME needs ownership or CAP_FOWNER; without them read normally
        return os.open(path, flags | os.O_CLOEXEC | os.O_NOCTTY)


def _sha256_fd(fd) -> str:
    h = hashlib.sha256()
    off = 0
    while True:
        b = os.pread(fd, 1 << 20, off)
        if not b:
            return h.hexdigest()
        h.update(b)
        off += len(b)


def _xattrs(path) -> dict:
    out = {}
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return out
        raise
    for name in sorted(names):
        try:
            out[name] = os.getxattr(path, name, follow_symlinks=False)
        except OSError as e:
            out[name] = f"<getxattr error {errno.errorcode.get(e.errno, e.errno)}>"
    return out


def _entry(path: str, st: os.stat_result, handles: bool) -> dict:
    e = {
        "type": stat.S_IFMT(st.st_mode),
        "mode": st.st_mode,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "nlink": st.st_nlink,
        "ino": st.st_ino,
        "atime_ns": st.st_atime_ns,
        "mtime_ns": st.st_mtime_ns,
        "xattrs": _xattrs(path),
    }
    if not stat.S_ISDIR(st.st_mode):
        e["size"] = st.st_size
    if stat.S_ISREG(st.st_mode):
        fd = _open_noatime(path, os.O_RDONLY)
        try:
            e["sha256"] = _sha256_fd(fd)
        finally:
            os.close(fd)
    elif stat.S_ISLNK(st.st_mode):
        e["target"] = os.readlink(path)
    elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        e["rdev"] = st.st_rdev
    if handles:
        fh = tl.name_to_handle_at(path)  # flags 0: a symlink's own handle
        e["handle"] = (fh.handle_type, fh.data.hex())
    return e


def snapshot(root, *, handles: bool = True, skip=None) -> dict:
    """{relative path: entry} for root and everything below it (see the module doc);
    a relative path for which skip(rel) is true is not visited at all."""
    root = str(root)
    out = {}

    def visit(path: str, rel: str):
        if skip and skip(rel):
            return
        st = os.lstat(path)              # before reading: reading must not change it
        out[rel] = _entry(path, st, handles)
        if stat.S_ISDIR(st.st_mode):
            fd = _open_noatime(path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                names = sorted(os.listdir(fd))
            finally:
                os.close(fd)
            out[rel]["entries"] = names
            for n in names:
                visit(os.path.join(path, n), n if rel == "." else f"{rel}/{n}")

    visit(root, ".")
    return out


def strip(snap: dict, fields=MOUNT_ONLY_FIELDS) -> dict:
    """A copy of snap without `fields` in any entry."""
    return {p: {k: v for k, v in e.items() if k not in fields} for p, e in snap.items()}


def shape(snap: dict) -> dict:
    """What an operation's *result* is, independent of when and where it ran: no times,
    inode numbers or handles (for comparing a mount with a plain reference directory)."""
    return strip(snap, ("handle", "ino", "atime_ns", "mtime_ns"))


def _fmt(v):
    if isinstance(v, int) and v > 0o170000 and v < 0o1000000:
        return oct(v)
    s = repr(v)
    return s if len(s) < 200 else s[:200] + "..."


def diff(a: dict, b: dict, limit: int = 40) -> list[str]:
    """Human-readable differences between two snapshots (a = expected, b = actual)."""
    out = []
    for p in sorted(set(a) | set(b)):
        if p not in b:
            out.append(f"{p}: missing (expected {a[p].get('type') and stat.filemode(a[p]['mode'])})")
        elif p not in a:
            out.append(f"{p}: unexpected new object ({stat.filemode(b[p]['mode'])})")
        else:
            ea, eb = a[p], b[p]
            for k in sorted(set(ea) | set(eb)):
                if ea.get(k, "<absent>") != eb.get(k, "<absent>"):
                    out.append(f"{p}: {k}: expected {_fmt(ea.get(k, '<absent>'))}, "
                               f"got {_fmt(eb.get(k, '<absent>'))}")
        if len(out) >= limit:
            out.append("...")
            break
    return out


def assert_same(expected: dict, actual: dict, what: str):
    d = diff(expected, actual)
    assert not d, f"{what}: the tree differs from the expected snapshot:\n  " + "\n  ".join(d)


def stable_snapshot(root, *, handles: bool = True, tries: int = 4) -> dict:
    """A snapshot taken until two in a row agree (a first read of a file or directory
    may still move its atime under relatime if the file system ignores O_NOATIME)."""
    prev = snapshot(root, handles=handles)
    for _ in range(tries):
        cur = snapshot(root, handles=handles)
        if cur == prev:
            return cur
        prev = cur
    raise AssertionError("the tree keeps changing while nothing writes to it:\n  "
                         + "\n  ".join(diff(prev, snapshot(root, handles=handles))))


def backups_left(store) -> list[str]:
    """Everything under STORE/.txnfs/backups (relative paths). The daemon's cleaner removes
    logs while this lists them: a log that goes between its listing and its scan is looked
    for again (found by CI: FileNotFoundError from inside rglob)."""
    d = Path(store.internal) / "backups"
    for _ in range(100):
        if not d.exists():
            return []
        try:
            return sorted(str(p.relative_to(d)) for p in d.rglob("*"))
        except FileNotFoundError:
            continue
    return ["(logs kept vanishing while they were listed)"]


def assert_no_backups(store, timeout: float = 5.0):
    """STORE/.txnfs/backups must become empty within `timeout` s (cleanup is asynchronous)."""
    if tl.wait_until(lambda: not backups_left(store), timeout):
        return
    left = backups_left(store)
    assert not left, (f"{timeout:.0f} s after the transaction ended, STORE/.txnfs/backups "
                      f"still holds: {left[:20]}")


def assert_restored(mnt, before: dict, what: str, *, store_before: dict | None = None):
    """The mount's tree is `before` again (handles included), STORE/tree agrees with it,
    and no backup is left.  The store is read first: it is read without side effects."""
    store_now = snapshot(mnt.store.tree, handles=False)
    now = snapshot(mnt.path)
    assert_same(before, now, f"{what} (mount)")
    # the backing tree shows exactly what the mount shows (the mount's inode numbers
    # are FUSE node ids, so they are compared only with the mount's own)
    assert_same(strip(before), strip(store_now), f"{what} (STORE/tree vs. the mount)")
    if store_before is not None:
        assert_same(strip(store_before, ()), strip(store_now, ()), f"{what} (STORE/tree)")
    assert_no_backups(mnt.store)


def wait_restored(mnt, before: dict, timeout: float, what: str):
    """Poll until the mount shows `before` again (for asynchronous aborts), then assert."""
    tl.wait_until(lambda: snapshot(mnt.path) == before, timeout, 0.1)
    assert_restored(mnt, before, what)
