"""Helpers for the txnfs integration tests.

Everything here runs as root on Linux: loop-mounted XFS images, FUSE mounts of
txnfs stores, running code as another uid, and ctypes wrappers for the syscalls
Python does not expose (name_to_handle_at, open_by_handle_at, renameat2,
fallocate with flags, raw readdir with d_type).

Nothing in this module knows about pytest; conftest.py turns it into fixtures.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import hashlib
import os
import pickle
import shutil
import signal
import sqlite3
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The folder holding this package (tests/), which a Python child that imports the helpers
# needs on PYTHONPATH: python_env().
HELPERS_PARENT = Path(__file__).resolve().parents[1]

# Upper bound for any single CLI call; a hang is a failure, not a stuck suite.
CMD_TIMEOUT = 60
NOBODY_UID = 65534
NOBODY_GID = 65534


# --------------------------------------------------------------------------
# the binary and running commands
# --------------------------------------------------------------------------

def python_env(env: dict | None = None) -> dict:
    """`env` (default: os.environ) with tests/ first on PYTHONPATH: the environment of a
    Python child that imports txnfs_testing (a test file run again as a script, or a
    `python3 -c` program)."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HELPERS_PARENT), env.get("PYTHONPATH")]))
    return env


def txnfs_bin() -> str:
    """Path of the txnfs CLI: $TXNFS_BIN, else <repo>/build/src/txnfuse/txnfs."""
    env = os.environ.get("TXNFS_BIN")
    return env if env else str(REPO / "build" / "src" / "txnfuse" / "txnfs")


def run(cmd, *, check=False, timeout=CMD_TIMEOUT, input=None) -> subprocess.CompletedProcess:
    """Run a command, capture text output; raise with the output on check failure."""
    cmd = [str(c) for c in cmd]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       input=input, stdin=None if input is not None else subprocess.DEVNULL)
    if check and p.returncode != 0:
        raise AssertionError(
            f"command failed (exit {p.returncode}): {' '.join(cmd)}\n"
            f"--- stdout ---\n{p.stdout}\n--- stderr ---\n{p.stderr}")
    return p


def txnfs(*args, check=False, timeout=CMD_TIMEOUT) -> subprocess.CompletedProcess:
    return run([txnfs_bin(), *args], check=check, timeout=timeout)


def output_of(p: subprocess.CompletedProcess) -> str:
    return (p.stdout or "") + (p.stderr or "")


# --------------------------------------------------------------------------
# mount table and processes
# --------------------------------------------------------------------------

def _unescape_mountinfo(s: str) -> str:
    return (s.replace("\\040", " ").replace("\\011", "\t")
             .replace("\\012", "\n").replace("\\134", "\\"))


def mount_entry(path) -> dict | None:
    """The (last) /proc/self/mountinfo entry whose mount point is `path`, or None.

    Works for dead FUSE mounts too, unlike os.path.ismount (which lstat()s and gets
    ENOTCONN)."""
    path = os.path.realpath(str(path)) if os.path.exists(str(path)) else os.path.abspath(str(path))
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.rstrip("\n").partition(" - ")
            fields = left.split()
            rfields = right.split()
            if _unescape_mountinfo(fields[4]) == path:
                found = {"mount_id": int(fields[0]), "dev": fields[2],
                         "fstype": rfields[0], "source": _unescape_mountinfo(rfields[1]),
                         "options": fields[5], "super_options": rfields[2] if len(rfields) > 2 else ""}
    return found


def is_mounted(path) -> bool:
    return mount_entry(path) is not None


def pid_alive(pid: int) -> bool:
    """True while any thread of the process exists and is not a zombie (PID 1 may not
    reap). Every thread counts: a killed daemon's main thread shows Z while another of
    its threads is still leaving the kernel, and its files (the store lock) stay open
    until the last thread is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if stat.rpartition(")")[2].split()[0] not in ("Z", "X"):
            return True
    return False


def wait_dead(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.02)
    return not pid_alive(pid)


def kill_and_wait(pid: int, timeout: float = 10.0) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    return wait_dead(pid, timeout)


def lazy_umount(path) -> None:
    if is_mounted(path):
        run(["umount", "-l", str(path)])


# --------------------------------------------------------------------------
# XFS image
# --------------------------------------------------------------------------

class XfsImage:
    """A fresh sparse 1 GiB XFS (reflink=1) image in a mktemp dir, loop-mounted at .dir."""

    def __init__(self, size=1 << 30, mkfs=("mkfs.xfs", "-q", "-m", "reflink=1"), fstype="xfs"):
        self.tmp = Path(tempfile.mkdtemp(prefix="txnfs-it-"))
        os.chmod(self.tmp, 0o755)   # other uids (as_user tests) must reach the mount point
        self.image = self.tmp / "image"
        self.dir = self.tmp / "fs"
        self.fstype = fstype
        self.loopdev = None
        self.dir.mkdir()
        with open(self.image, "wb") as f:
            f.truncate(size)
        try:
            run([*mkfs, str(self.image)], check=True)
            run(["mount", "-o", "loop", str(self.image), str(self.dir)], check=True)
            ent = mount_entry(self.dir)
            assert ent is not None and ent["fstype"] == fstype, ent
            self.loopdev = ent["source"]
        except BaseException:
            self.close()
            raise

    def _loops_of_image(self) -> list[str]:
        p = run(["losetup", "-j", str(self.image)])
        return [line.split(":", 1)[0] for line in p.stdout.splitlines() if line.strip()]

    def close(self) -> None:
        """Unmount, make sure the loop device is gone, delete the temp dir.  Never raises
        before everything was tried; raises at the end if something stayed behind."""
        problems = []
        if is_mounted(self.dir):
            p = run(["umount", str(self.dir)])
            if p.returncode != 0:
                problems.append(f"umount {self.dir}: {p.stderr.strip()} (falling back to umount -l)")
                run(["umount", "-l", str(self.dir)])
        # loop devices are auto-cleared on umount (mount -o loop sets LO_FLAGS_AUTOCLEAR);
        # detach explicitly if one is still attached.
        for _ in range(50):
            loops = self._loops_of_image() if self.image.exists() else []
            if not loops:
                break
            for dev in loops:
                run(["losetup", "-d", dev])
            time.sleep(0.05)
        else:
            problems.append(f"loop device(s) still attached to {self.image}: {loops}")
        if not is_mounted(self.dir):
            shutil.rmtree(self.tmp, ignore_errors=True)
        if problems:
            raise AssertionError("; ".join(problems))


# --------------------------------------------------------------------------
# store and mount
# --------------------------------------------------------------------------

class Store:
    def __init__(self, path):
        self.path = Path(path)
        self.tree = self.path / "tree"
        self.internal = self.path / ".txnfs"
        self.db = self.internal / "meta.db"

    def init(self, *extra):
        txnfs("init", self.path, *extra, check=True)
        return self

    def fsck(self) -> subprocess.CompletedProcess:
        return txnfs("fsck", self.path)

    # -- direct database access (tests only; read-only unless asked) --------
    def connect(self, readonly=True) -> sqlite3.Connection:
        if readonly:
            con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)
        else:
            con = sqlite3.connect(str(self.db), timeout=10)
        con.row_factory = sqlite3.Row
        return con

    def query(self, sql, params=()):
        # a read-write connection: closing it removes the -wal/-shm files again (a
        # read-only one would leave an empty -wal behind and change the store's files)
        con = self.connect(readonly=False)
        try:
            return [dict(r) for r in con.execute(sql, params).fetchall()]
        finally:
            con.close()

    def execute(self, sql, params=()):
        con = self.connect(readonly=False)
        try:
            with con:
                con.execute(sql, params)
        finally:
            con.close()

    def handle_row(self, nodeid):
        rows = self.query("SELECT * FROM handles WHERE nodeid = ?", (nodeid,))
        return rows[0] if rows else None


# FUSE over io_uring: the kernel offers it while this is Y (root may write it).
URING_PARAM = Path("/sys/module/fuse/parameters/enable_uring")


URING_HOLDER = REPO / "scripts" / "io-uring-param"
_uring_holds = 0   # this process's holds: the script keeps one per process


def enable_uring() -> str | None:
    """Switches the kernel's FUSE-over-io_uring on for as long as this process holds it
    (scripts/io-uring-param: the value from before comes back when the last run on the
    machine lets go, also when runs overlap); returns what to give to restore_uring(),
    or None when this process may not switch it on (not root, no such kernel)."""
    global _uring_holds
    if _uring_holds == 0 and subprocess.run([URING_HOLDER, "hold", str(os.getpid())]).returncode:
        return None
    _uring_holds += 1
    return "held"


def restore_uring(token: str | None) -> None:
    global _uring_holds
    if token is None or _uring_holds == 0:
        return
    _uring_holds -= 1
    if _uring_holds == 0:
        subprocess.run([URING_HOLDER, "release", str(os.getpid())], check=True)


def io_uring_wanted() -> bool:
    """TXNFS_TEST_IO_URING=1: every Mount mounts with --io-uring (conftest switches
    enable_uring on for the session and restores it)."""
    return os.environ.get("TXNFS_TEST_IO_URING") == "1"


@contextlib.contextmanager
def hung_mount(mnt, name: str):
    """The daemon of `mnt` stopped (one that no longer answers), with a creation of
    mnt/name waiting on it: yields the waiting process. Afterwards the daemon runs again
    if it still exists, and the request is ended if it still waits."""
    pid = mnt.pid
    os.kill(pid, signal.SIGSTOP)
    waiting = None
    try:
        waiting = subprocess.Popen(["touch", str(mnt.path / name)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        assert waiting.poll() is None, "the request did not wait for the stopped daemon"
        yield waiting
    finally:
        if pid_alive(pid):
            os.kill(pid, signal.SIGCONT)
        if waiting and waiting.poll() is None:
            waiting.kill()
            waiting.wait()


def release_stopped_daemon(pid: int, waiting: subprocess.Popen) -> None:
    """After the abort of a stopped daemon's connection: the request waiting on it fails.
    Over /dev/fuse the abort ends it at once; over io_uring a request the daemon had
    already taken ends when the daemon's process ends (or it runs again), so there the
    daemon is killed, as the daemon of a dead or hung mount is in practice."""
    if io_uring_wanted():
        os.kill(pid, signal.SIGKILL)
    assert waiting.wait(10) != 0, "a request waiting on the aborted mount succeeded"
    if not io_uring_wanted():
        os.kill(pid, signal.SIGCONT)
    assert wait_dead(pid, 15), "the daemon did not end after its connection was aborted"


class Mount:
    """A txnfs mount (daemon mode, --pid-file) of `store` at a fresh mount point
    (with --io-uring under TXNFS_TEST_IO_URING=1)."""

    def __init__(self, store: Store, path, pid_file):
        self.store = store
        self.path = Path(path)
        self.pid_file = Path(pid_file)
        self.pid = None
        self.expect_dirty = False   # set by a test that leaves the store damaged on purpose
        self.path.mkdir(parents=True, exist_ok=True)

    @property
    def mounted(self) -> bool:
        return is_mounted(self.path)

    def mount(self, *extra):
        assert not self.mounted, f"{self.path} is already mounted"
        if self.pid_file.exists():
            self.pid_file.unlink()
        if io_uring_wanted() and "--io-uring" not in extra:
            extra = (*extra, "--io-uring")
        log = os.environ.get("TXNFS_TEST_LOG_DIR")  # keep daemon logs for debugging
        if log:
            extra = (*extra, "--log-file", os.path.join(log, f"txnfs-{os.getpid()}-{time.monotonic_ns()}.log"))
        p = txnfs("mount", self.store.path, self.path, "--pid-file", self.pid_file, *extra)
        if p.returncode != 0:
            # a failed mount must not leave anything behind; clean up if it did
            self._cleanup_after_failed_mount()
            raise AssertionError(f"txnfs mount failed (exit {p.returncode}):\n{output_of(p)}")
        # the contract: the daemon's PID is in --pid-file and the mount is ready when
        # `txnfs mount` returns (no polling: a late pid file is a race for every caller)
        text = self.pid_file.read_text() if self.pid_file.exists() else None
        assert text is not None, "txnfs mount returned 0 but the --pid-file does not exist yet"
        assert text.strip().isdigit(), (
            f"txnfs mount returned 0 but the --pid-file holds {text!r}, not a PID (written late?)")
        self.pid = int(text.strip())
        assert pid_alive(self.pid), f"daemon pid {self.pid} from --pid-file is not running"
        ent = mount_entry(self.path)
        assert ent is not None, "txnfs mount returned 0 but nothing is mounted (daemon mode must return when ready)"
        assert ent["fstype"].startswith("fuse"), ent
        return self

    def _cleanup_after_failed_mount(self):
        pid = None
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            pass
        if self.mounted:
            run(["fusermount3", "-u", str(self.path)])
        if pid and pid_alive(pid) and not wait_dead(pid, 5):
            kill_and_wait(pid)
        lazy_umount(self.path)

    def umount(self):
        assert self.mounted, f"{self.path} is not mounted"
        p = txnfs("umount", self.path)
        assert p.returncode == 0, f"txnfs umount failed (exit {p.returncode}):\n{output_of(p)}"
        assert not self.mounted, "txnfs umount returned 0 but the mount is still there"
        if self.pid is not None:
            assert wait_dead(self.pid, 15), f"daemon {self.pid} still running 15 s after umount"
        self.pid = None

    def remount(self, *extra):
        self.umount()
        return self.mount(*extra)

    def kill9(self):
        """kill -9 the daemon, wait until it is gone, clean the dead mount point."""
        assert self.pid is not None
        assert kill_and_wait(self.pid, 15), f"daemon {self.pid} survived SIGKILL"
        self.pid = None
        p = run(["umount", "-l", str(self.path)])
        assert p.returncode == 0, f"umount -l {self.path}: {p.stderr}"
        assert not self.mounted

    def close(self):
        """Fixture teardown: never leave a mount or a daemon behind, then demand a clean fsck."""
        problems = []
        if self.pid is None and self.mounted:
            # mount() failed its checks after the daemon started: find the daemon anyway
            try:
                self.pid = int(self.pid_file.read_text().strip())
            except (OSError, ValueError):
                pass
        if self.mounted:
            try:
                p = txnfs("umount", self.path)
                failure = output_of(p).strip() if p.returncode != 0 else None
            except (OSError, subprocess.SubprocessError) as e:   # e.g. the binary is being relinked
                failure = repr(e)
            if failure is not None:
                problems.append(f"txnfs umount failed at teardown: {failure}")
                run(["fusermount3", "-u", str(self.path)])
        if self.pid is not None and pid_alive(self.pid):
            if not wait_dead(self.pid, 15):
                problems.append(f"daemon {self.pid} still running after umount; killed")
                kill_and_wait(self.pid)
        self.pid = None
        if self.mounted:
            problems.append("mount point still mounted at teardown; lazily unmounted")
            lazy_umount(self.path)
        if problems:
            raise AssertionError("; ".join(problems))
        if not self.expect_dirty:
            p = self.store.fsck()
            assert p.returncode == 0, (
                f"txnfs fsck {self.store.path} after the test: exit {p.returncode}\n{output_of(p)}")


# --------------------------------------------------------------------------
# hashing a directory tree (byte-identical checks)
# --------------------------------------------------------------------------

def hash_tree(root, skip_suffixes=("-shm",)) -> dict:
    """{relative path: description} for every entry under root (content hash for files).

    SQLite's -shm file is a volatile shared-memory index that any reader rewrites; it
    is not store content and is skipped."""
    root = Path(root)
    out = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if any(rel.endswith(s) for s in skip_suffixes):
                continue
            st = p.lstat()
            if p.is_symlink():
                out[rel] = ("symlink", os.readlink(p))
            elif p.is_file():
                out[rel] = ("file", st.st_mode, st.st_size, hashlib.sha256(p.read_bytes()).hexdigest())
            else:
                out[rel] = ("other", st.st_mode)
    return out


def write_file(path, data: bytes, mode=0o644):
    """Create or truncate `path` and write all of `data` (short writes retried)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def sha256_file(path, bufsize=1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(bufsize)
            if not b:
                return h.hexdigest()
            h.update(b)


# --------------------------------------------------------------------------
# run a callable as another user
# --------------------------------------------------------------------------

def as_user(fn, *args, uid=NOBODY_UID, gid=NOBODY_GID, groups=(), **kwargs):
    """Run fn(*args, **kwargs) in a forked child with the given uid/gid (no
    supplementary groups) and return its result; an exception raised in the child
    (e.g. OSError(EACCES)) is re-raised in the parent.  Result and exception must
    be picklable."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(r)
            try:
                os.setgroups(list(groups))
                os.setgid(gid)
                os.setuid(uid)
                res = ("ok", fn(*args, **kwargs))
            except BaseException as e:  # noqa: BLE001 - transported to the parent
                res = ("exc", e)
            try:
                data = pickle.dumps(res)
            except Exception as e:  # noqa: BLE001
                data = pickle.dumps(("exc", RuntimeError(f"unpicklable result {res!r}: {e}")))
            view = memoryview(data)
            while view:
                n = os.write(w, view)
                view = view[n:]
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    with os.fdopen(r, "rb") as f:
        while True:
            b = f.read(65536)
            if not b:
                break
            chunks.append(b)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        raise RuntimeError(f"as_user child died without a result (status {status:#x})")
    kind, val = pickle.loads(b"".join(chunks))
    if kind == "exc":
        raise val
    return val


# --------------------------------------------------------------------------
# ctypes: syscalls Python lacks
# --------------------------------------------------------------------------

libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

AT_FDCWD = -100
AT_SYMLINK_FOLLOW = 0x400
AT_EMPTY_PATH = 0x1000
MAX_HANDLE_SZ = 128

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02

# FUSE's export handle types (fs/fuse/inode.c: fuse_encode_fh)
FILEID_INO64_GEN = 0x81
FILEID_INO64_GEN_PARENT = 0x82

FS_IOC_GETVERSION = 0x80087601  # _IOR('v', 1, long)


def _oserror(what, path=None):
    e = ctypes.get_errno()
    return OSError(e, f"{what}: {os.strerror(e)}", str(path) if path is not None else None)


libc.name_to_handle_at.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p,
                                   ctypes.POINTER(ctypes.c_int), ctypes.c_int]
libc.name_to_handle_at.restype = ctypes.c_int
libc.open_by_handle_at.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.open_by_handle_at.restype = ctypes.c_int
libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
libc.renameat2.restype = ctypes.c_int
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
libc.fallocate.restype = ctypes.c_int


@dataclass(frozen=True)
class FileHandle:
    """struct file_handle { u32 handle_bytes; int handle_type; u8 f_handle[]; } + mount_id."""
    handle_type: int
    data: bytes
    mount_id: int = -1

    def pack(self) -> bytes:
        return struct.pack("Ii", len(self.data), self.handle_type) + self.data

    def fuse_fields(self):
        """(nodeid, generation) of a FUSE handle (fuse_encode_fh layout)."""
        assert self.handle_type in (FILEID_INO64_GEN, FILEID_INO64_GEN_PARENT), hex(self.handle_type)
        hi, lo, gen = struct.unpack_from("III", self.data)
        return (hi << 32) | lo, gen

    @classmethod
    def fuse(cls, nodeid: int, generation: int) -> "FileHandle":
        """Craft the handle the FUSE kernel module would give for (nodeid, generation)."""
        return cls(FILEID_INO64_GEN,
                   struct.pack("III", nodeid >> 32, nodeid & 0xFFFFFFFF, generation & 0xFFFFFFFF))


def name_to_handle_at(path, dirfd=AT_FDCWD, flags=0) -> FileHandle:
    buf = ctypes.create_string_buffer(8 + MAX_HANDLE_SZ)
    struct.pack_into("Ii", buf, 0, MAX_HANDLE_SZ, 0)
    mount_id = ctypes.c_int(-1)
    rc = libc.name_to_handle_at(dirfd, os.fsencode(str(path)), buf, ctypes.byref(mount_id), flags)
    if rc != 0:
        raise _oserror("name_to_handle_at", path)
    nbytes, htype = struct.unpack_from("Ii", buf, 0)
    return FileHandle(htype, buf.raw[8:8 + nbytes], mount_id.value)


def open_by_handle_at(mount_fd: int, fh: FileHandle, flags=os.O_RDONLY) -> int:
    raw = fh.pack()
    buf = ctypes.create_string_buffer(raw, len(raw))
    fd = libc.open_by_handle_at(mount_fd, buf, flags)
    if fd < 0:
        raise _oserror("open_by_handle_at")
    return fd


def renameat2(old, new, flags, olddirfd=AT_FDCWD, newdirfd=AT_FDCWD) -> None:
    rc = libc.renameat2(olddirfd, os.fsencode(str(old)), newdirfd, os.fsencode(str(new)), flags)
    if rc != 0:
        raise _oserror("renameat2", old)


def fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    rc = libc.fallocate(fd, mode, offset, length)
    if rc != 0:
        raise _oserror("fallocate")


def inode_generation(path) -> int:
    """i_generation of a file on a file system that supports FS_IOC_GETVERSION (XFS)."""
    fd = os.open(str(path), os.O_RDONLY)
    try:
        buf = bytearray(8)
        fcntl.ioctl(fd, FS_IOC_GETVERSION, buf)
        return struct.unpack("i", buf[:4])[0] & 0xFFFFFFFF
    finally:
        os.close(fd)


# raw readdir (names + d_type as the file system reports them, no lstat fallback)

class _Dirent64(ctypes.Structure):
    _fields_ = [("d_ino", ctypes.c_uint64), ("d_off", ctypes.c_int64),
                ("d_reclen", ctypes.c_ushort), ("d_type", ctypes.c_ubyte),
                ("d_name", ctypes.c_char * 256)]


libc.opendir.argtypes = [ctypes.c_char_p]
libc.opendir.restype = ctypes.c_void_p
libc.readdir64.argtypes = [ctypes.c_void_p]
libc.readdir64.restype = ctypes.POINTER(_Dirent64)
libc.closedir.argtypes = [ctypes.c_void_p]
libc.closedir.restype = ctypes.c_int

DT_UNKNOWN, DT_FIFO, DT_CHR, DT_DIR, DT_BLK, DT_REG, DT_LNK, DT_SOCK = 0, 1, 2, 4, 6, 8, 10, 12


def readdir_types(path) -> dict:
    """{name: (d_type, d_ino)} for every entry readdir returns, including . and .."""
    d = libc.opendir(os.fsencode(str(path)))
    if not d:
        raise _oserror("opendir", path)
    out = {}
    try:
        while True:
            ctypes.set_errno(0)
            ent = libc.readdir64(d)
            if not ent:
                e = ctypes.get_errno()
                if e:
                    raise OSError(e, os.strerror(e), str(path))
                break
            out[os.fsdecode(ent.contents.d_name)] = (ent.contents.d_type, ent.contents.d_ino)
    finally:
        libc.closedir(d)
    return out


# listings in parts, by offset (telldir/seekdir), as NFS-Ganesha continues a READDIR

libc.telldir.argtypes = [ctypes.c_void_p]
libc.telldir.restype = ctypes.c_long
libc.seekdir.argtypes = [ctypes.c_void_p, ctypes.c_long]
libc.seekdir.restype = None


def _read_entries(dp, count=None) -> list[tuple[str, int]]:
    out = []
    while count is None or len(out) < count:
        ctypes.set_errno(0)
        ent = libc.readdir64(dp)
        if not ent:
            e = ctypes.get_errno()
            if e:
                raise OSError(e, os.strerror(e), "readdir")
            break
        out.append((os.fsdecode(ent.contents.d_name), ent.contents.d_off))
    return out


def _opendir(path):
    dp = libc.opendir(os.fsencode(str(path)))
    if not dp:
        raise _oserror("opendir", path)
    return dp


def listing_with_offsets(path) -> list[tuple[str, int]]:
    """[(name, d_off)] of every entry readdir returns, including . and .."""
    dp = _opendir(path)
    try:
        return _read_entries(dp)
    finally:
        libc.closedir(dp)


def first_part(path, count) -> tuple[list[str], int]:
    """Open, read `count` entries, telldir, close: (names, offset)."""
    dp = _opendir(path)
    try:
        names = [n for n, _ in _read_entries(dp, count)]
        return names, libc.telldir(dp)
    finally:
        libc.closedir(dp)


def continuation(path, offset) -> list[str]:
    """Open anew, seekdir to `offset`, read to the end (names)."""
    dp = _opendir(path)
    try:
        libc.seekdir(dp, offset)
        return [n for n, _ in _read_entries(dp)]
    finally:
        libc.closedir(dp)


def continued_listing(path, count, between=lambda: None) -> list[str]:
    """first_part(path, count), between(), then the continuation on a new handle."""
    names, off = first_part(path, count)
    between()
    return names + continuation(path, off)


def errno_of(fn, *args, **kwargs):
    """Call fn; return the errno of the OSError it raises, or None if it succeeds."""
    try:
        fn(*args, **kwargs)
    except OSError as e:
        return e.errno
    return None


# --------------------------------------------------------------------------
# libtxnfs (include/txnfs/txnfs.h) through ctypes
# --------------------------------------------------------------------------

EDEADLK = errno.EDEADLK          # 35: lost a deadlock / lock wait; the transaction can only abort
TXNFS_BIND_THREAD = 0
TXNFS_BIND_PROCESS = 1
TXNFS_STATE_NAMES = {1: "active", 2: "abort_only", 3: "committing", 4: "committed", 5: "aborted"}


def libtxnfs_path() -> str:
    """$TXNFS_LIB, else <repo>/build/src/libtxnfs/libtxnfs.so."""
    env = os.environ.get("TXNFS_LIB")
    return env if env else str(REPO / "build" / "src" / "libtxnfs" / "libtxnfs.so")


class TxnInfo(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("state", ctypes.c_uint32),
                ("owner_uid", ctypes.c_uint32), ("pid", ctypes.c_int32),
                ("flags", ctypes.c_uint32), ("ops", ctypes.c_uint64),
                ("backup_bytes", ctypes.c_uint64), ("age_ms", ctypes.c_uint64),
                ("error", ctypes.c_int32), ("reserved", ctypes.c_uint32)]


_libtxnfs = None


def libtxnfs():
    """The loaded libtxnfs (ctypes.CDLL), with argtypes set; loaded once per process."""
    global _libtxnfs
    if _libtxnfs is None:
        lib = ctypes.CDLL(libtxnfs_path())
        lib.txnfs_begin.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_int,
                                    ctypes.POINTER(ctypes.c_uint64)]
        lib.txnfs_commit.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
        lib.txnfs_abort.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
        lib.txnfs_info.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.POINTER(TxnInfo)]
        lib.txnfs_status_json.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.txnfs_set_lock_timeout.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint32]
        lib.txnfs_commit2.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint]
        lib.txnfs_sync.argtypes = [ctypes.c_char_p]
        lib.txnfs_prepare.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_char_p]
        lib.txnfs_resolve.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
        for f in (lib.txnfs_begin, lib.txnfs_commit, lib.txnfs_abort, lib.txnfs_info,
                  lib.txnfs_status_json, lib.txnfs_set_lock_timeout, lib.txnfs_commit2,
                  lib.txnfs_sync, lib.txnfs_prepare, lib.txnfs_resolve):
            f.restype = ctypes.c_int
        _libtxnfs = lib
    return _libtxnfs


def txn_begin_rc(mount, flags=TXNFS_BIND_THREAD, pid=0):
    """(rc, id): rc is 0 or -errno, as txnfs_begin returns it.  With TXNFS_BIND_THREAD the
    transaction binds the OS thread that calls this: do its file operations on that thread."""
    tid = ctypes.c_uint64(0)
    rc = libtxnfs().txnfs_begin(os.fsencode(str(mount)), flags, pid, ctypes.byref(tid))
    return rc, tid.value


TXNFS_LOCK_IS, TXNFS_LOCK_IX, TXNFS_LOCK_S, TXNFS_LOCK_X = 0, 1, 2, 3


def _lock_rec(kind, mode=0, ref=0, node=0, name=b"") -> bytes:
    """One struct txnfs_lock_rec and its name, padded to 8 bytes (include/txnfs/txnfs.h)."""
    rec = struct.pack("<BBHIQ", kind, mode, len(name), ref, node) + name
    return rec + b"\0" * (-len(rec) % 8)


def lock_node(nodeid) -> bytes:
    return _lock_rec(1, node=nodeid)


def lock_child(ref, name: bytes) -> bytes:
    return _lock_rec(2, ref=ref, name=name)


def lock_object(ref, mode) -> bytes:
    return _lock_rec(3, mode=mode, ref=ref)


def lock_entry(ref, name: bytes, mode) -> bytes:
    return _lock_rec(4, mode=mode, ref=ref, name=name)


def lock_records(*recs: bytes) -> bytes:
    return b"".join(recs)


def txn_begin3_rc(mount, flags, pid, lock_timeout_ms, records: bytes, set_timeout_ms):
    """(rc, id, set_rc) of txnfs_begin3: txnfs_begin2 and txnfs_lock_set(records)."""
    lib = libtxnfs()
    lib.txnfs_begin3.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_int, ctypes.c_uint32,
                                 ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32,
                                 ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_int)]
    lib.txnfs_begin3.restype = ctypes.c_int
    tid = ctypes.c_uint64(0)
    set_rc = ctypes.c_int(0)
    rc = lib.txnfs_begin3(os.fsencode(str(mount)), flags, pid, lock_timeout_ms, records,
                          len(records), set_timeout_ms, ctypes.byref(tid), ctypes.byref(set_rc))
    return rc, tid.value, set_rc.value


def txn_begin2_rc(mount, flags, pid, lock_timeout_ms):
    """(rc, id) of txnfs_begin2: txnfs_begin with a lock timeout, in one request."""
    lib = libtxnfs()
    lib.txnfs_begin2.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_int, ctypes.c_uint32,
                                 ctypes.POINTER(ctypes.c_uint64)]
    lib.txnfs_begin2.restype = ctypes.c_int
    tid = ctypes.c_uint64(0)
    rc = lib.txnfs_begin2(os.fsencode(str(mount)), flags, pid, lock_timeout_ms, ctypes.byref(tid))
    return rc, tid.value


def view_path(mount, tid) -> str:
    """MOUNTPOINT/.txnfs/ID as libtxnfs's txnfs_view_path says (the transaction's view)."""
    lib = libtxnfs()
    lib.txnfs_view_path.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_char_p,
                                    ctypes.c_size_t]
    lib.txnfs_view_path.restype = ctypes.c_int
    buf = ctypes.create_string_buffer(4200)
    rc = lib.txnfs_view_path(os.fsencode(str(mount)), tid, buf, len(buf))
    if rc != 0:
        raise OSError(-rc, f"txnfs_view_path: {os.strerror(-rc)}", str(mount))
    return os.fsdecode(buf.value)


def txn_begin(mount, flags=TXNFS_BIND_THREAD, pid=0) -> int:
    rc, tid = txn_begin_rc(mount, flags, pid)
    if rc != 0:
        raise OSError(-rc, f"txnfs_begin: {os.strerror(-rc)}", str(mount))
    return tid


def straddled_read(data: bytes, versions, page: int = 4096) -> bool:
    """Whether DATA is what a plain read that straddles commits can return
    (docs/isolation.md, Limits, "A plain read that straddles a commit"): the kernel fills
    it page by page, some pages before a commit and some after, and cuts it at the size
    it learnt before. So every page is that page of a committed version in VERSIONS --
    except that the read may end, from the page that holds a shorter version's end on,
    with that version's tail, then zeros up to the end (pages filled after a commit that
    made the file shorter, from a READ that came back short). The length is a committed
    size or a page boundary (a READ that came back short and moved the kernel's size).

    The zeros after such a tail may also be whole pages of other committed versions (a
    version with a hole there), so the shorter version's page need not be the first page
    that is no version's: any page up to that one will do (seed 3 of test_nfs_views.py's
    random test read a 42,000-byte file whose commit truncated it to 0 as 42,000 zeros,
    and its first two zero pages were pages of another name's sparse version)."""
    vs = [v for v in versions if v is not None]
    n = len(data)
    if n % page and n not in {len(v) for v in vs}:
        return False

    def a_versions_page(p):
        chunk = data[p:p + page]
        return any(len(v) >= p + len(chunk) and v[p:p + len(chunk)] == chunk for v in vs)

    first = next((p for p in range(0, n, page) if not a_versions_page(p)), None)
    if first is None:
        return True
    # every page before `first` is a version's page; the tail starts at or before it
    return any(len(v) // page * page <= first
               and data[len(v) // page * page:] == v[len(v) // page * page:] + bytes(n - len(v))
               for v in vs)


@contextlib.contextmanager
def txn_in_view(mount):
    """A transaction bound to a process of its own, so that the caller's own requests are
    plain: yields its id and its view's root (MOUNT/.txnfs/ID), through which the caller
    works in it. Commit or abort it by id; its owner goes at the end (which aborts it if
    it is still open)."""
    owner = subprocess.Popen(["sleep", "600"])
    try:
        tid = txn_begin(mount, TXNFS_BIND_PROCESS, owner.pid)
        yield tid, Path(mount) / ".txnfs" / str(tid)
    finally:
        owner.kill()
        owner.wait()


def txn_commit(mount, tid) -> int:
    """0 or -errno (e.g. -EDEADLK: the transaction can only abort)."""
    return libtxnfs().txnfs_commit(os.fsencode(str(mount)), tid)


TXNFS_COMMIT_LAZY = 1


def txn_commit_lazy(mount, tid) -> int:
    """0 or -errno: commits lazily (durable at the next group commit)."""
    return libtxnfs().txnfs_commit2(os.fsencode(str(mount)), tid, TXNFS_COMMIT_LAZY)


def txn_sync(mount) -> int:
    """0 or -errno: every commit so far durable, lazy ones included."""
    return libtxnfs().txnfs_sync(os.fsencode(str(mount)))


def txn_abort(mount, tid) -> int:
    return libtxnfs().txnfs_abort(os.fsencode(str(mount)), tid)


def txn_prepare(mount, tid, gid: str) -> int:
    """0 or -errno: the first phase of a two-phase commit (docs/cluster.md)."""
    return libtxnfs().txnfs_prepare(os.fsencode(str(mount)), tid, gid.encode())


def txn_resolve(mount, gid: str, commit: bool) -> int:
    """0 or -errno: commits or rolls back the prepared transaction `gid` (root only)."""
    return libtxnfs().txnfs_resolve(os.fsencode(str(mount)), gid.encode(), int(commit))


def txn_commit_2pc(mount, tid) -> int:
    """Commits through both phases: prepared, then resolved as committed. What
    txn_commit answers, for a transaction that cannot prepare."""
    gid = f"t{os.getpid()}-{tid}"
    rc = txn_prepare(mount, tid, gid)
    return rc if rc else txn_resolve(mount, gid, True)


def txn_abort_2pc(mount, tid) -> int:
    """Rolls back after the first phase: prepared, then resolved as aborted (a
    transaction that cannot prepare is aborted as txn_abort does)."""
    gid = f"t{os.getpid()}-{tid}"
    rc = txn_prepare(mount, tid, gid)
    return txn_abort(mount, tid) if rc else txn_resolve(mount, gid, False)


def txn_set_lock_timeout(mount, tid, ms) -> int:
    """0 or -errno."""
    return libtxnfs().txnfs_set_lock_timeout(os.fsencode(str(mount)), tid, ms)


def txn_info(mount, tid):
    """(rc, TxnInfo)."""
    info = TxnInfo()
    rc = libtxnfs().txnfs_info(os.fsencode(str(mount)), tid, ctypes.byref(info))
    return rc, info


def txn_status(mount) -> dict:
    """The mount's status (open transactions and counters) as parsed JSON, via libtxnfs."""
    import json
    buf = ctypes.create_string_buffer(8192)
    rc = libtxnfs().txnfs_status_json(os.fsencode(str(mount)), buf, len(buf))
    if rc < 0:
        raise OSError(-rc, f"txnfs_status_json: {os.strerror(-rc)}", str(mount))
    return json.loads(buf.value.decode())


@contextlib.contextmanager
def crash_at(point: str):
    """Commands run inside the block (e.g. a mount, whose daemon keeps it) get
    TXNFS_CRASH_AT=point: the process dies at that crash-injection point."""
    os.environ["TXNFS_CRASH_AT"] = point
    try:
        yield
    finally:
        del os.environ["TXNFS_CRASH_AT"]


def wait_until(pred, timeout=5.0, interval=0.05):
    """Poll pred() until it returns a truthy value or `timeout` s pass; return the last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


__all__ = [n for n in dir() if not n.startswith("_")] + ["errno"]


def setid_trees(roots, modes):
    """Makes each directory of ROOTS (mode 0777, so that another user may write in it)
    with one file per mode of MODES, f<octal mode>, holding b"original\n": the same
    set-ID cases on the mount and on raw XFS for a side-by-side comparison."""
    for root in roots:
        root.mkdir()
        os.chmod(root, 0o777)
        for mode in modes:
            write_file(root / f"f{mode:o}", b"original\n")
            os.chmod(root / f"f{mode:o}", mode)
