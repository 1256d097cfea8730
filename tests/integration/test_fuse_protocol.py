"""What FUSE 7.45 (libfuse 3.18, scripts/build-libfuse) gives the mount, each compared
with raw XFS on the same loop-mounted image:

- the daemon negotiates the kernel's protocol (7.45 here; Debian's libfuse 3.14: 7.31);
- HANDLE_KILLPRIV_V2: a write costs no GETXATTR security.capability round trip (counted
  with the kernel's fuse_request_send tracepoint), and set-ID bits are cleared by
  unprivileged truncation, O_TRUNC opens and fallocate exactly as XFS clears them;
- POSIX_ACL: a default ACL is inherited instead of the umask being applied, the mode
  after setfacl is visible at once, and a transaction's ACL change is undone on abort.
"""

from __future__ import annotations

import os
import re
import stat
import struct
import subprocess
from pathlib import Path

import pytest

from txnfs_testing import txnfs_lib as tl

TRACING = Path("/sys/kernel/tracing")
FUSE_GETXATTR, FUSE_WRITE = 22, 16


def _sh(*cmd):
    p = subprocess.run(list(cmd), capture_output=True, text=True)
    assert p.returncode == 0, f"{cmd}: {p.stderr}"
    return p.stdout


class FuseTrace:
    """A private ftrace instance recording fuse_request_send of one connection. Mounts
    tracefs on /sys/kernel/tracing when nothing is mounted there (a fresh machine need
    not have it), and unmounts it again."""

    def __init__(self, mount: Path):
        self.dev = os.stat(mount).st_dev
        self.inst = TRACING / "instances" / f"txnfs-test-{os.getpid()}"
        self.mounted = False

    def __enter__(self):
        if not (TRACING / "instances").is_dir():
            _sh("mount", "-t", "tracefs", "nodev", str(TRACING))
            self.mounted = True
        try:
            self.inst.mkdir()
        except BaseException:
            self._unmount()
            raise
        ev = self.inst / "events/fuse/fuse_request_send"
        (ev / "filter").write_text(f"connection == {os.minor(self.dev)}\n")
        (ev / "enable").write_text("1\n")
        return self

    def opcodes(self) -> list[int]:
        text = (self.inst / "trace").read_text()
        return [int(m) for m in re.findall(r"opcode (\d+) ", text)]

    def __exit__(self, *exc):
        try:
            (self.inst / "events/fuse/fuse_request_send/enable").write_text("0\n")
            self.inst.rmdir()
        finally:
            self._unmount()

    def _unmount(self):
        if self.mounted:
            _sh("umount", str(TRACING))
            self.mounted = False


def test_daemon_speaks_the_kernels_fuse_protocol(store, xfs):
    m = tl.Mount(store, xfs.tmp / "mnt", xfs.tmp / "txnfs.pid")
    log = xfs.tmp / "daemon.log"
    try:
        m.mount("--log-file", str(log))
        os.stat(m.path)
    finally:
        m.close()
    found = re.search(r"FUSE protocol (\d+)\.(\d+)", log.read_text())
    assert found, "the daemon logs the negotiated FUSE protocol"
    assert (int(found[1]), int(found[2])) >= (7, 45), f"negotiated {found[1]}.{found[2]}"


def test_writes_cost_no_capability_getxattr(mnt):
    p = mnt.path / "w.bin"
    tl.write_file(p, b"")
    os.chmod(p, 0o666)

    def writes(path):
        fd = os.open(path, os.O_WRONLY)
        try:
            for k in range(20):
                os.pwrite(fd, b"x" * 100, k * 100)
        finally:
            os.close(fd)

    with FuseTrace(mnt.path) as t:
        tl.as_user(writes, str(p))
        ops = t.opcodes()
    assert ops.count(FUSE_WRITE) == 20, ops
    # (the GETXATTRs before the OPEN are the ACL reads of the kernel's permission check)
    writing = ops[ops.index(FUSE_WRITE):len(ops) - ops[::-1].index(FUSE_WRITE)]
    assert FUSE_GETXATTR not in writing, f"GETXATTR among the writes: {ops}"


MODES = [0o4777, 0o2777, 0o6777, 0o2767, 0o2757, 0o6767]


def _truncate(path):
    os.truncate(path, 3)


def _open_trunc(path):
    os.close(os.open(path, os.O_WRONLY | os.O_TRUNC))


def _fallocate(path):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.posix_fallocate(fd, 0, 8192)
    finally:
        os.close(fd)


@pytest.mark.parametrize("change", [_truncate, _open_trunc, _fallocate],
                         ids=["truncate", "open-O_TRUNC", "fallocate"])
def test_unprivileged_change_clears_setid_bits_as_xfs(mnt, xfs, change):
    ref, d = xfs.dir / "ref", mnt.path / "d"
    tl.setid_trees((ref, d), MODES)
    for mode in MODES:
        tl.as_user(change, str(ref / f"f{mode:o}"))
        tl.as_user(change, str(d / f"f{mode:o}"))
        want = os.stat(ref / f"f{mode:o}").st_mode & 0o7777
        got = os.stat(d / f"f{mode:o}").st_mode & 0o7777
        assert got == want, f"{mode:o} after {change.__name__}: {got:o}, XFS gives {want:o}"


def _make(path, kind):
    if kind == "file":
        tl.write_file(path, b"x")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "chardev":
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    else:
        os.mkdir(path)


@pytest.mark.parametrize("kind", ["file", "fifo", "chardev", "dir"])
@pytest.mark.parametrize("as_nobody", [False, True], ids=["root", "owner"])
def test_chown_changing_no_id_clears_setid_bits_as_xfs(mnt, xfs, as_nobody, kind):
    """chown(f, -1, -1): with HANDLE_KILLPRIV_V2 the kernel leaves it to the daemon. The
    kernel clears the bits of every object but a directory (a FIFO's too: found by the
    fuzzer, seed 20041)."""
    ref, d = xfs.dir / "ref", mnt.path / "d"
    for root in (ref, d):
        root.mkdir()
        for mode in MODES + [0o2755, 0o6755]:
            _make(root / f"f{mode:o}", kind)
            os.chmod(root / f"f{mode:o}", mode)
            if as_nobody:
                os.chown(root / f"f{mode:o}", NOBODY, -1)
    for mode in MODES + [0o2755, 0o6755]:
        for root in (ref, d):
            p = str(root / f"f{mode:o}")
            if as_nobody:
                tl.as_user(os.chown, p, -1, -1)
            else:
                os.chown(p, -1, -1)
        want = os.stat(ref / f"f{mode:o}").st_mode & 0o7777
        got = os.stat(d / f"f{mode:o}").st_mode & 0o7777
        assert got == want, f"{mode:o} after chown(-1, -1): {got:o}, XFS gives {want:o}"


NOBODY = 65534
ACL_USER_OBJ, ACL_USER, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER = 1, 2, 4, 0x10, 0x20


def acl(*entries) -> bytes:
    """system.posix_acl_* xattr value: le32 version 2, then (le16 tag, le16 perm, le32 id)."""
    out = struct.pack("<I", 2)
    for tag, perm, uid in sorted(entries, key=lambda e: (e[0], e[2])):
        out += struct.pack("<HHI", tag, perm, uid)
    return out


DEFAULT_ACL = acl((ACL_USER_OBJ, 7, 0xFFFFFFFF), (ACL_USER, 5, NOBODY),
                  (ACL_GROUP_OBJ, 7, 0xFFFFFFFF), (ACL_MASK, 7, 0xFFFFFFFF),
                  (ACL_OTHER, 7, 0xFFFFFFFF))
NOBODY_RWX = acl((ACL_USER_OBJ, 6, 0xFFFFFFFF), (ACL_USER, 7, NOBODY),
                 (ACL_GROUP_OBJ, 4, 0xFFFFFFFF), (ACL_MASK, 7, 0xFFFFFFFF),
                 (ACL_OTHER, 0, 0xFFFFFFFF))


def _xattr(p: Path, name: str):
    try:
        return os.getxattr(p, name, follow_symlinks=False)
    except OSError:
        return None


def _make_tree(root: Path):
    """Under umask 022, in this process (so inside its transaction): a file, a directory
    and a fifo in a directory with a default ACL and in one without."""
    old = os.umask(0o022)
    try:
        for sub in ("acl", "plain"):
            (root / sub).mkdir()
        os.setxattr(root / "acl", "system.posix_acl_default", DEFAULT_ACL)
        for sub in ("acl", "plain"):
            fd = os.open(root / sub / "file", os.O_CREAT | os.O_WRONLY, 0o666)
            os.close(fd)
            os.mkdir(root / sub / "dir", 0o777)
            os.mkfifo(root / sub / "fifo", 0o666)
    finally:
        os.umask(old)
    return _acls(root)


def _acls(root: Path):
    """{relative path: (mode, access ACL, default ACL)} of what _make_tree made."""
    out = {}
    for sub in ("acl", "plain"):
        for name in ("file", "dir", "fifo"):
            p = root / sub / name
            out[f"{sub}/{name}"] = (oct(os.lstat(p).st_mode), _xattr(p, "system.posix_acl_access"),
                                    _xattr(p, "system.posix_acl_default"))
    return out


@pytest.mark.parametrize("in_txn", [False, True], ids=["plain", "transaction"])
def test_default_acl_is_inherited_as_xfs(mnt, xfs, in_txn):
    (xfs.dir / "ref").mkdir()
    want = _make_tree(xfs.dir / "ref")
    assert want["acl/file"][0] == oct(0o100666), "XFS: the default ACL, not the umask"
    assert want["plain/file"][0] == oct(0o100644)
    tid = tl.txn_begin(mnt.path) if in_txn else None
    got_inside = _make_tree(mnt.path)
    if in_txn:
        assert tl.txn_commit(mnt.path, tid) == 0
    assert got_inside == want
    assert _acls(mnt.path) == want  # and as committed, through fresh lookups


def test_setfacl_changes_the_mode_the_mount_shows(mnt, xfs):
    for root in (xfs.dir, mnt.path):
        tl.write_file(root / "f", b"x")
        os.chmod(root / "f", 0o644)
        os.stat(root / "f")  # cached by the kernel
        _sh("setfacl", "-m", "u::r--,g::---,o::---,u:nobody:rw-", str(root / "f"))
    assert oct(os.stat(mnt.path / "f").st_mode) == oct(os.stat(xfs.dir / "f").st_mode)
    assert _sh("getfacl", "-cp", str(mnt.path / "f")) == _sh("getfacl", "-cp", str(xfs.dir / "f"))
    # the kernel checks the ACL: nobody may now write, but not read-only others
    tl.as_user(lambda p: os.close(os.open(p, os.O_WRONLY)), str(mnt.path / "f"))


def test_acl_and_mode_changes_are_undone_on_abort(mnt):
    d = mnt.path / "d"
    d.mkdir()
    tl.write_file(d / "f", b"x")
    os.chmod(d / "f", 0o640)
    before = _acls_of([d, d / "f"])
    tid = tl.txn_begin(mnt.path)
    try:
        os.setxattr(d / "f", "system.posix_acl_access", NOBODY_RWX)
        os.setxattr(d, "system.posix_acl_default", DEFAULT_ACL)
        inside = _acls_of([d, d / "f"])
        os.chmod(d / "f", 0o600)
    finally:
        assert tl.txn_abort(mnt.path, tid) == 0
    assert inside[1][0] == oct(0o100670) and inside[0][2] == DEFAULT_ACL, inside
    assert _acls_of([d, d / "f"]) == before
    tree = mnt.store.tree / "d"
    assert _acls_of([tree, tree / "f"]) == before


def _acls_of(paths):
    return [(oct(os.stat(p).st_mode), _xattr(p, "system.posix_acl_access"),
             _xattr(p, "system.posix_acl_default")) for p in paths]


def test_creations_follow_default_acl_changes_and_their_rollback(mnt, xfs):
    """The daemon reads a directory's default ACL once, not per creation: what it keeps
    must follow setting it, removing it, and a rollback of either (XFS side by side)."""
    def create(root, name):
        old = os.umask(0o022)
        try:
            os.close(os.open(root / "d" / name, os.O_CREAT | os.O_WRONLY, 0o666))
        finally:
            os.umask(old)
        return oct(os.lstat(root / "d" / name).st_mode)

    def step(name, change=None):
        modes = []
        for root in (xfs.dir, mnt.path):
            if change:
                change(root)
            modes.append(create(root, name))
        assert modes[0] == modes[1], (name, modes)
        return modes[1]

    for root in (xfs.dir, mnt.path):
        (root / "d").mkdir()
    assert step("a") == oct(0o100644)                     # no default ACL: the umask
    set_acl = lambda r: os.setxattr(r / "d", "system.posix_acl_default", DEFAULT_ACL)
    assert step("b", set_acl) == oct(0o100666)            # inherited, umask ignored
    assert step("c") == oct(0o100666)
    drop_acl = lambda r: os.removexattr(r / "d", "system.posix_acl_default")
    assert step("e", drop_acl) == oct(0o100644)
    def aborted(change, name, mode_inside):
        """A transaction changes the default ACL, creates, and aborts."""
        tid = tl.txn_begin(mnt.path)
        try:
            change(mnt.path)
            assert create(mnt.path, name) == oct(mode_inside)
        finally:
            assert tl.txn_abort(mnt.path, tid) == 0

    aborted(set_acl, "inside", 0o100666)  # the next creation must find it gone again
    assert _xattr(mnt.path / "d", "system.posix_acl_default") is None
    assert step("f") == oct(0o100644)
    assert step("g", set_acl) == oct(0o100666)
    aborted(drop_acl, "inside2", 0o100644)  # ... and back again
    assert step("h") == oct(0o100666)
