"""Set-user-ID and set-group-ID bits on every path that must clear them, compared with
raw XFS on the same loop-mounted image.

The daemon negotiates HANDLE_KILLPRIV_V2 and POSIX_ACL, so the kernel leaves clearing
the bits to it: after a write (buffered or O_DIRECT), a truncation (truncate, ftruncate,
an O_TRUNC open or creat of an existing file), fallocate, a copy_file_range into the
file, a chown, a chmod and an access ACL set by a caller outside the file's group. Each
case is run as uid 65534 ("nobody") on files of another owner and on its own files (in
its group and outside it), in three contexts:

- plain: no transaction open;
- transaction: inside the caller's own transaction, which commits;
- other open: outside every transaction while another (idle) transaction is open.

The mode must match XFS as the caller sees it right after the change, as a plain
process sees it through the mount (while the other transaction is still open, and
after it ended), and after the kernel dropped its cached inodes (drop_caches). The
kernel decides what exec does from the mode it caches: a stale set-ID bit there is a
privilege problem even where the store's file is right.

Also: chown(f, -1, -1) updates the ctime as on XFS, and an aborted one leaves the mode
as it was.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from txnfs_testing import txnfs_lib as tl

NOBODY, NOGROUP = tl.NOBODY_UID, tl.NOBODY_GID
BLOCK = 4096
CONTEXTS = ["plain", "transaction", "other open"]

# Files of another owner (root:root), writable by everyone.
OTHERS = [(m, 0, 0) for m in (0o4777, 0o2777, 0o6777, 0o2767, 0o6767, 0o2757, 0o6666,
                              0o2666, 0o4666)]
# Files of the caller, in its group and in a group it is not in.
OWN = [(m, NOBODY, g) for g in (NOGROUP, 0)
       for m in (0o6664, 0o6774, 0o2664, 0o4664, 0o6775, 0o2775, 0o4755, 0o2755)]


# ----------------------------------------------------------------------------
# the changes, run as nobody (in a forked child: tl.as_user)
# ----------------------------------------------------------------------------

def _aligned(data: bytes) -> mmap.mmap:
    m = mmap.mmap(-1, max(BLOCK, len(data)))
    m[:len(data)] = data
    return m


def _write(p):
    fd = os.open(p, os.O_WRONLY)
    try:
        os.pwrite(fd, b"written\n", 2)
    finally:
        os.close(fd)


def _write_direct(p):
    fd = os.open(p, os.O_WRONLY | os.O_DIRECT)
    try:
        os.pwrite(fd, _aligned(b"d" * BLOCK), 0)
    finally:
        os.close(fd)


def _truncate(p):
    os.truncate(p, 3)


def _truncate_zero(p):
    os.truncate(p, 0)


def _ftruncate(p, size=20000):
    fd = os.open(p, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


def _ftruncate_zero(p):
    _ftruncate(p, 0)


def _open_trunc(p):
    os.close(os.open(p, os.O_WRONLY | os.O_TRUNC))


def _creat_trunc(p):
    os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))


def _fallocate(p):
    fd = os.open(p, os.O_WRONLY)
    try:
        os.posix_fallocate(fd, 0, 2 * BLOCK)
    finally:
        os.close(fd)


def _copy_into(p):
    src = os.open(Path(p).parent / "source", os.O_RDONLY)
    dst = os.open(p, os.O_WRONLY)
    try:
        os.copy_file_range(src, dst, 100, 0, 1)
    finally:
        os.close(src)
        os.close(dst)


def _chown_nothing(p):
    os.chown(p, -1, -1)


def _chown_group(p):
    os.chown(p, -1, NOGROUP)  # (its own group: a chown that changes no id, or a real one)


def _chmod_same(p):
    os.chmod(p, os.stat(p).st_mode & 0o7777)


ACL_USER_OBJ, ACL_USER, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER = 1, 2, 4, 0x10, 0x20
ANY = 0xFFFFFFFF


def _acl(*entries) -> bytes:
    out = struct.pack("<I", 2)
    for tag, perm, uid in sorted(entries, key=lambda e: (e[0], e[2])):
        out += struct.pack("<HHI", tag, perm, uid)
    return out


def _acl_as_mode(p):
    """setfacl -m u::rwx,g::rwx,o::rwx: an ACL the mode can hold (no xattr stays)."""
    os.setxattr(p, "system.posix_acl_access",
                _acl((ACL_USER_OBJ, 7, ANY), (ACL_GROUP_OBJ, 7, ANY), (ACL_OTHER, 7, ANY)))


def _acl_extended(p):
    """setfacl -m u:0:r: an ACL with a named user (the xattr stays, with a mask)."""
    os.setxattr(p, "system.posix_acl_access",
                _acl((ACL_USER_OBJ, 7, ANY), (ACL_USER, 4, 0), (ACL_GROUP_OBJ, 5, ANY),
                     (ACL_MASK, 5, ANY), (ACL_OTHER, 5, ANY)))


# (change, the files it is tried on)
CHANGES = {
    "write": (_write, OTHERS + OWN),
    "O_DIRECT write": (_write_direct, OTHERS + OWN),
    "truncate": (_truncate, OTHERS + OWN),
    "ftruncate": (_ftruncate, OTHERS + OWN),
    # XFS changes nothing, set-ID bits included, when truncate(2) (no times) takes an
    # empty file without extents to size 0 (xfs_setattr_size's short cut).
    "truncate of an empty file to 0": (_truncate_zero, OTHERS + OWN, b""),
    # (ftruncate sets the times, so XFS takes no short cut: the bits go.)
    "ftruncate of an empty file to 0": (_ftruncate_zero, OTHERS + OWN, b""),
    "O_TRUNC open": (_open_trunc, OTHERS + OWN),
    "creat of an existing file": (_creat_trunc, OTHERS + OWN),
    "fallocate": (_fallocate, OTHERS + OWN),
    "copy_file_range into": (_copy_into, OTHERS + OWN),
    # (By others: XFS refuses the mode change it implies, EPERM, unless it clears nothing.)
    "chown(-1, -1)": (_chown_nothing, OTHERS + OWN),
    "chown to its group": (_chown_group, OWN),
    "chmod": (_chmod_same, OWN),
    "ACL the mode holds": (_acl_as_mode, OWN),
    "ACL with a named user": (_acl_extended, OWN),
}


def _as_nobody(change, path: str, mount: str | None):
    """In the child: the change (inside its own transaction when `mount` is given), then
    the mode as the caller sees it, or the errno of a failed change."""
    tid = tl.txn_begin(mount) if mount else None
    try:
        change(path)
        result = ("mode", statx_mode(path))
    except OSError as e:
        result = ("errno", e.errno)
    if mount:
        rc = tl.txn_commit(mount, tid)
        assert rc == 0, f"commit: {rc}"
    return result


# ----------------------------------------------------------------------------
# contexts
# ----------------------------------------------------------------------------

_OTHER_TXN = """
import sys
from txnfs_testing import txnfs_lib as tl
tid = tl.txn_begin(sys.argv[1])
print("open", flush=True)
sys.stdin.readline()
sys.exit(0 if tl.txn_commit(sys.argv[1], tid) == 0 else 1)
"""


@contextlib.contextmanager
def other_transaction(mount: Path):
    """An idle transaction of another process, open for the block."""
    p = subprocess.Popen([sys.executable, "-c", _OTHER_TXN, str(mount)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=tl.python_env())
    try:
        assert p.stdout.readline().strip() == "open"
        yield
    finally:
        p.stdin.write("\n")
        p.stdin.close()
        assert p.wait(30) == 0, "the other transaction did not commit"


def drop_caches():
    Path("/proc/sys/vm/drop_caches").write_text("2\n")


STATX_MODE = 0x2
_libc = ctypes.CDLL(None, use_errno=True)


def statx_mode(path) -> int:
    """The mode as statx(STATX_MODE) gives it -- what `stat -c %a` asks for. The kernel
    answers such a call from its cached attributes unless it invalidated the mode itself:
    a full stat would refresh them after a write for the size's sake."""
    buf = ctypes.create_string_buffer(256)
    if _libc.statx(-100, os.fsencode(str(path)), 0, STATX_MODE, buf) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), str(path))
    return struct.unpack_from("<H", buf, 28)[0] & 0o7777


def modes(root: Path, names) -> dict:
    """{name: mode} through statx(STATX_MODE), checked against a full stat."""
    out = {}
    for n in names:
        out[n] = statx_mode(root / n)
        full = os.stat(root / n).st_mode & 0o7777
        if full != out[n]:
            out[n] = f"{out[n]:o} (a full stat: {full:o})"
    return out


def make_files(root: Path, files, data: bytes = b"original contents\n" * 4) -> list[str]:
    root.mkdir()
    os.chmod(root, 0o777)
    tl.write_file(root / "source", b"copied from the source file\n" * 8)
    names = []
    for mode, uid, gid in files:
        name = f"f{mode:o}-{uid}-{gid}"
        tl.write_file(root / name, data)
        os.chown(root / name, uid, gid)
        os.chmod(root / name, mode)
        names.append(name)
    return names


# ----------------------------------------------------------------------------
# the tests
# ----------------------------------------------------------------------------

@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("what", list(CHANGES))
def test_setid_bits_cleared_as_on_xfs(mnt, xfs, what, context):
    change, files, *data = CHANGES[what]
    ref, d = xfs.dir / "ref", mnt.path / "d"
    names = make_files(ref, files, *data)
    make_files(d, files, *data)
    for n in names:  # every mode cached by the kernel beforehand
        os.stat(d / n)
    want = {n: tl.as_user(_as_nobody, change, str(ref / n), None) for n in names}
    assert any(w[0] == "mode" for w in want.values())
    own = str(mnt.path) if context == "transaction" else None
    problems = []

    def check(seen: dict, when: str):
        for n in names:
            w = want[n][1] if want[n][0] == "mode" else None
            if w is not None and seen[n] != w:
                s = seen[n] if isinstance(seen[n], str) else f"{seen[n]:o}"
                problems.append(f"{n} {when}: {s}, XFS gives {w:o}")

    with other_transaction(mnt.path) if context == "other open" else contextlib.nullcontext():
        got = {n: tl.as_user(_as_nobody, change, str(d / n), own) for n in names}
        for n in names:
            if got[n] != want[n]:
                w, g = want[n], got[n]
                problems.append(f"{n} as the caller sees it: {g[0]} {g[1]:o}, "
                                f"XFS gives {w[0]} {w[1]:o}")
        check(modes(d, names), "through the mount")
    if context == "other open":
        check(modes(d, names), "after the other transaction ended")
    drop_caches()
    check(modes(d, names), "after drop_caches")
    check({n: os.stat(mnt.store.tree / "d" / n).st_mode & 0o7777 for n in names}, "in the store")
    assert not problems, f"{what} ({context}):\n  " + "\n  ".join(problems)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


CAP_FOWNER, CAP_FSETID = 3, 4


def _without_cap(cap, fn, *args):
    """In the child: drop capability `cap` from the effective set, then fn(*args)."""
    hdr, data = _CapHeader(0x20080522, 0), (_CapData * 2)()
    if _libc.capget(ctypes.byref(hdr), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    data[0].effective &= ~(1 << cap)
    if _libc.capset(ctypes.byref(hdr), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    return fn(*args)


# Files of a group root is not in (100), among them ones whose S_ISGID only a caller
# outside the group without CAP_FSETID clears.
FOREIGN_GROUP = [(m, u, 100) for u in (0, NOBODY)
                 for m in (0o6777, 0o6766, 0o2766, 0o4766, 0o2777)]
ROOT_CHANGES = ["write", "O_DIRECT write", "fallocate", "copy_file_range into", "truncate",
                "O_TRUNC open", "chown(-1, -1)", "ACL with a named user"]


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("caller", ["root", "root without CAP_FSETID", "root without CAP_FOWNER"])
def test_the_callers_capabilities_decide_as_on_xfs(mnt, xfs, caller, context):
    """What the daemon clears depends on whether the caller has CAP_FSETID, not on its
    uid: root keeps the bits a data change or an ACL would clear; root without
    CAP_FSETID loses them, also S_ISGID of a file whose group it is not in. Root without
    CAP_FOWNER may not clear them from nobody's files by chown(f, -1, -1)."""
    ref, d = xfs.dir / "ref", mnt.path / "d"
    names = make_files(ref, FOREIGN_GROUP)
    make_files(d, FOREIGN_GROUP)
    own = str(mnt.path) if context == "transaction" else None

    def as_caller(change, path, mount):
        if caller == "root":
            return tl.as_user(_as_nobody, change, path, mount, uid=0, gid=0)
        cap = CAP_FSETID if caller == "root without CAP_FSETID" else CAP_FOWNER
        return tl.as_user(_without_cap, cap, _as_nobody, change, path, mount, uid=0, gid=0)

    problems = []
    for what in ROOT_CHANGES:
        change = CHANGES[what][0]
        for n in names:
            tl.write_file(ref / n, b"original contents\n" * 4)
            tl.write_file(d / n, b"original contents\n" * 4)
            for root in (ref, d):
                os.chmod(root / n, int(n[1:].split("-")[0], 8))
                os.stat(root / n)  # cached by the kernel
        want = {n: as_caller(change, str(ref / n), None) for n in names}
        with other_transaction(mnt.path) if context == "other open" else contextlib.nullcontext():
            got = {n: as_caller(change, str(d / n), own) for n in names}
            seen = modes(d, names)
        drop_caches()
        after = modes(d, names)
        for n in names:
            w = want[n]
            if got[n] != w:
                g = got[n]
                problems.append(f"{what} {n} as the caller sees it: {g[0]} {g[1]:o}, "
                                f"XFS gives {w[0]} {w[1]:o}")
            for when, m in (("through the mount", seen[n]), ("after drop_caches", after[n])):
                if w[0] == "mode" and m != w[1]:
                    m = m if isinstance(m, str) else f"{m:o}"
                    problems.append(f"{what} {n} {when}: {m}, XFS gives {w[1]:o}")
    assert not problems, f"{caller} ({context}):\n  " + "\n  ".join(problems)


def _chown_nothing_later(p, mount):
    """Waits for the clock to move, then chown(p, -1, -1); returns the ctime before and
    after (inside the caller's transaction when `mount`)."""
    tid = tl.txn_begin(mount) if mount else None
    before = os.stat(p).st_ctime_ns
    time.sleep(0.05)
    os.chown(p, -1, -1)
    after = os.stat(p).st_ctime_ns
    if mount:
        assert tl.txn_commit(mount, tid) == 0
    return before, after


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("caller", ["root", "owner"])
def test_chown_changing_no_id_updates_the_ctime_as_on_xfs(mnt, xfs, caller, context):
    ref, d = xfs.dir / "ref", mnt.path / "d"
    for root in (ref, d):
        make_files(root, [(0o644, NOBODY, NOGROUP)])
    name = f"f644-{NOBODY}-{NOGROUP}"
    run = (lambda f, *a: f(*a)) if caller == "root" else tl.as_user
    b0, a0 = run(_chown_nothing_later, str(ref / name), None)
    assert a0 > b0, "XFS: chown(f, -1, -1) updates the ctime"
    own = str(mnt.path) if context == "transaction" else None
    with other_transaction(mnt.path) if context == "other open" else contextlib.nullcontext():
        before, after = run(_chown_nothing_later, str(d / name), own)
        assert after > before, f"the caller sees the ctime unchanged ({context})"
        seen = os.stat(d / name).st_ctime_ns
        assert seen == after, "a plain reader sees another ctime than the caller"
    drop_caches()
    assert os.stat(d / name).st_ctime_ns == after
    assert os.stat(mnt.store.tree / "d" / name).st_ctime_ns == after


def _chown_nothing_aborted(p, mount):
    tid = tl.txn_begin(mount)
    os.chown(p, -1, -1)
    inside = os.stat(p).st_mode & 0o7777
    assert tl.txn_abort(mount, tid) == 0
    return inside


@pytest.mark.parametrize("mode", [0o4755, 0o2755, 0o6755, 0o2745])
def test_aborted_chown_changing_no_id_restores_the_mode(mnt, xfs, mode):
    ref, d = xfs.dir / "ref", mnt.path / "d"
    for root in (ref, d):
        make_files(root, [(mode, NOBODY, 0)])
    name = f"f{mode:o}-{NOBODY}-0"
    tl.as_user(os.chown, str(ref / name), -1, -1)
    want = os.stat(ref / name).st_mode & 0o7777
    assert want != mode, "XFS clears a set-ID bit here"
    ctime = os.stat(d / name).st_ctime_ns
    inside = tl.as_user(_chown_nothing_aborted, str(d / name), str(mnt.path))
    assert inside == want, f"inside the transaction: {inside:o}, XFS gives {want:o}"
    assert os.stat(d / name).st_mode & 0o7777 == mode
    drop_caches()
    st = os.stat(d / name)
    assert st.st_mode & 0o7777 == mode
    assert st.st_ctime_ns >= ctime


# ----------------------------------------------------------------------------
# a transaction's new files (read and written by the kernel itself: FUSE passthrough)
# ----------------------------------------------------------------------------

def _kept_fd_write(fd, path):
    os.pwrite(fd, b"written\n", 2)


def _kept_fd_ftruncate(fd, path):
    os.ftruncate(fd, 20000)


def _reopened_write(fd, path):
    _write(path)


NEW_FILE_CHANGES = {
    "write through the creating open": _kept_fd_write,
    "ftruncate through the creating open": _kept_fd_ftruncate,
    "write through a new open": _reopened_write,
}
NEW_FILE_MODES = [0o6775, 0o4755, 0o2775, 0o2755, 0o6664, 0o2664, 0o4664]


def _new_file_then(change, root: str, mount: str | None, modes_: list[int]):
    """In the child: inside its own transaction's view when `mount` is given, make one
    file per mode, set the mode (set-ID bits added while the creating open is still
    open), then `change` it; return each mode as the caller sees it, then (with `mount`)
    commit."""
    tid = tl.txn_begin(mount) if mount else None
    base = Path(tl.view_path(mount, tid)) / Path(root).relative_to(mount) if mount else Path(root)
    seen = {}
    for mode in modes_:
        p = base / f"n{mode:o}"
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, b"original contents\n" * 4)
            os.fchmod(fd, mode)
            change(fd, str(p))
        finally:
            os.close(fd)
        seen[mode] = statx_mode(p)
    if mount:
        assert tl.txn_commit(mount, tid) == 0
    return seen


@pytest.mark.parametrize("what", list(NEW_FILE_CHANGES))
def test_a_transactions_new_files_clear_setid_bits_as_on_xfs(mnt, xfs, what):
    """A file a transaction makes is written by the kernel straight to the backing file
    (passthrough), with the daemon's credentials: the bits must still go as XFS drops
    them for the caller (the kernel asks the daemon to clear them before such a write)."""
    change = NEW_FILE_CHANGES[what]
    ref, d = xfs.dir / "ref", mnt.path / "d"
    for root in (ref, d):
        root.mkdir()
        os.chmod(root, 0o777)
    want = tl.as_user(_new_file_then, change, str(ref), None, NEW_FILE_MODES)
    assert any(want[m] != m for m in NEW_FILE_MODES), "XFS clears set-ID bits here"
    opened = tl.txn_status(mnt.path)["passthrough"]["opened"]
    got = tl.as_user(_new_file_then, change, str(d), str(mnt.path), NEW_FILE_MODES)
    assert tl.txn_status(mnt.path)["passthrough"]["opened"] >= opened + len(NEW_FILE_MODES), \
        "the new files' opens must have been passed through"
    problems = [f"{m:o}: {got[m]:o} inside, XFS gives {want[m]:o}" for m in NEW_FILE_MODES
                if got[m] != want[m]]
    drop_caches()
    for m in NEW_FILE_MODES:
        after = os.stat(d / f"n{m:o}").st_mode & 0o7777
        if after != want[m]:
            problems.append(f"{m:o}: {after:o} after the commit, XFS gives {want[m]:o}")
    assert not problems, f"{what}:\n  " + "\n  ".join(problems)
