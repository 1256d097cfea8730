"""The differential op-space fuzzer: seeded random operation sequences over everything the
txnfs daemon implements, checked by oracles.

    abort   snapshot; run the sequence in a transaction; abort: the tree is the snapshot
            again (handles and inode numbers included, atime aside), fsck clean, no backups
    commit  the same single-process sequence on a plain XFS directory and in a committed
            transaction: the same result for every operation (value or errno, bytes read)
            and the same tree (times, inode numbers and handles aside); fsck clean
    plain   as commit, but outside any transaction (the daemon's plain path vs. XFS); on
            even seeds while another process holds an idle transaction open
    crash   kill -9 of the daemon, a power cut (xfs_io shutdown) or an injected crash
            point at a moment of the transaction; after recovery the tree is the snapshot
            before (or, once commit was asked for, the transaction's result); fsck clean

Every oracle ends with `txnfs fsck` (after unmounting), a check that every object of
STORE/tree has a row in the handle table, and that STORE/.txnfs/backups is empty.

Operations are JSON-able dicts ({"o": name, ...}); a sequence is a list of them per
process. Everything that makes a run -- the populated tree, the operations, the crash --
derives from the seed, so `tests/fuzz/run --seed S` repeats a run, and a failure is
shrunk (delta debugging) to a minimal op list that still fails the same way and printed
as a runnable case (`tests/fuzz/run --replay FILE`).

Known differences between txnfs and XFS are in ONE table, DIVERGENCES, each with its
reason; an operation whose txnfs result matches an entry is counted and reported, and the
XFS side does not run it (so the trees stay comparable) -- nothing is skipped silently.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import mmap
import os
import random
import re
import select
import shutil
import signal
import stat
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
from txnfs_testing import crashlib
from txnfs_testing import snapshot as snap
from txnfs_testing import txnfs_lib as tl

NOBODY = tl.NOBODY_UID
OP_DEADLINE = float(os.environ.get("TXNFS_FUZZ_DEADLINE", "30"))   # a stalled op fails

# --------------------------------------------------------------------------
# flags
# --------------------------------------------------------------------------

RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT = 1, 2, 4
RENAME_FLAGS = {"0": 0, "NOREPLACE": RENAME_NOREPLACE, "EXCHANGE": RENAME_EXCHANGE,
                "WHITEOUT": RENAME_WHITEOUT, "NOREPLACE|WHITEOUT": RENAME_NOREPLACE | RENAME_WHITEOUT}

FALLOC_FLAGS = {"0": 0, "KEEP_SIZE": 0x01, "PUNCH_HOLE|KEEP_SIZE": 0x03, "ZERO_RANGE": 0x10,
                "ZERO_RANGE|KEEP_SIZE": 0x11, "COLLAPSE_RANGE": 0x08, "INSERT_RANGE": 0x20}

OPEN_ACCESS = {"O_RDONLY": os.O_RDONLY, "O_WRONLY": os.O_WRONLY, "O_RDWR": os.O_RDWR}
OPEN_EXTRA = {"O_TRUNC": os.O_TRUNC, "O_APPEND": os.O_APPEND, "O_DIRECT": os.O_DIRECT,
              "O_NOATIME": os.O_NOATIME, "O_CREAT": os.O_CREAT}
# every open flag the generator must produce (the coverage test checks it)
OPEN_FLAGS = list(OPEN_ACCESS) + list(OPEN_EXTRA)

UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
AT_SYMLINK_NOFOLLOW = 0x100
FS_IOC_GETFLAGS = 0x80086601
XATTR_FLAGS = {"0": 0, "CREATE": os.XATTR_CREATE, "REPLACE": os.XATTR_REPLACE}


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


tl.libc.utimensat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_Timespec), ctypes.c_int]
tl.libc.utimensat.restype = ctypes.c_int
tl.libc.mknod.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_ulong]
tl.libc.mknod.restype = ctypes.c_int


def utimensat(path, atime, mtime, flags):
    ts = (_Timespec * 2)()
    for i, t in enumerate((atime, mtime)):
        if t == "NOW":
            ts[i].tv_sec, ts[i].tv_nsec = 0, UTIME_NOW
        elif t == "OMIT":
            ts[i].tv_sec, ts[i].tv_nsec = 0, UTIME_OMIT
        else:
            ts[i].tv_sec, ts[i].tv_nsec = divmod(int(t), 10**9)
    if tl.libc.utimensat(tl.AT_FDCWD, os.fsencode(path), ts, flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)


def posix_acl(entries) -> bytes:
    """The xattr value of a POSIX ACL: version 2, then (tag u16, perm u16, id u32)."""
    tags = {"u::": 0x01, "u:": 0x02, "g::": 0x04, "g:": 0x08, "m::": 0x10, "o::": 0x20}
    out = struct.pack("<I", 2)
    for tag, perm, ident in entries:
        out += struct.pack("<HHI", tags[tag], perm, ident if ident is not None else 0xFFFFFFFF)
    return out


ACLS = {
    "min": posix_acl([("u::", 6, None), ("g::", 4, None), ("o::", 4, None)]),
    "nobody": posix_acl([("u::", 7, None), ("u:", 7, NOBODY), ("g::", 5, None),
                         ("m::", 7, None), ("o::", 0, None)]),
    "bad": b"\x02\x00\x00\x00\x07",
}


def data(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


# --------------------------------------------------------------------------
# the tree every run of a seed starts from
# --------------------------------------------------------------------------

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


# --------------------------------------------------------------------------
# the generator
# --------------------------------------------------------------------------

# op name -> relative weight
GEN_WEIGHTS = {
    "create": 5, "open": 6, "mknod": 2, "mkdir": 3, "symlink": 2, "link": 4, "unlink": 6,
    "rmdir": 2, "rename": 10, "write": 10, "dwrite": 3, "dread": 2, "read": 4,
    "mmap_read": 2, "mmap_write": 2, "truncate": 3, "ftruncate": 2, "fallocate": 6,
    "copy_range": 3, "chmod": 3, "chown": 2, "utimens": 2, "setxattr": 4, "getxattr": 2,
    "listxattr": 1, "removexattr": 2, "fsync": 2, "fsyncdir": 1, "lseek": 2, "statfs": 1,
    "readdir": 2, "readlink": 1, "stat": 3, "ioctl": 1, "drop_caches": 1, "handle": 8,
}
GEN_OPS = sorted(GEN_WEIGHTS)
AS_NOBODY = {"create", "open", "write", "truncate", "ftruncate", "mkdir", "chmod", "setxattr",
             "unlink", "rename", "utimens", "fallocate", "link", "dwrite", "copy_range", "chown"}

# Ops that create an object run under one of these umasks now and then (else 0): with
# POSIX_ACL the daemon applies the umask itself, unless the parent has a default ACL.
UMASK_OPS = {"create", "open", "mknod", "mkdir"}
UMASKS = (0o022, 0o077, 0o027)

# FUSE handler (ops.NAME = op_NAME in src/txnfuse/fuse) -> generator ops that reach it
HANDLER_COVERAGE = {
    "init": ["statfs"],            # every run mounts; statfs is the first request after INIT
    "lookup": ["stat", "open", "unlink", "rename", "handle"],   # "handle": "." and ".."
    "forget": ["unlink", "drop_caches"],
    "forget_multi": ["drop_caches"],
    "getattr": ["stat", "open"],
    "setattr": ["chmod", "chown", "utimens", "truncate", "ftruncate"],
    "readlink": ["readlink"],
    "mknod": ["mknod"],
    "mkdir": ["mkdir"],
    "symlink": ["symlink"],
    "create": ["create", "open"],
    "link": ["link"],
    "unlink": ["unlink"],
    "rmdir": ["rmdir"],
    "rename": ["rename"],
    "open": ["open", "write", "read", "dwrite", "dread", "mmap_read", "mmap_write"],
    "release": ["open"],
    "flush": ["open"],
    "fsync": ["fsync"],
    "read": ["read", "dread", "mmap_read"],
    "write_buf": ["write", "dwrite", "mmap_write"],
    "fallocate": ["fallocate"],
    "lseek": ["lseek"],
    "copy_file_range": ["copy_range"],
    "statfs": ["statfs"],
    "getxattr": ["getxattr"],
    "listxattr": ["listxattr"],
    "setxattr": ["setxattr"],
    "removexattr": ["removexattr"],
    "opendir": ["readdir"],
    "readdir": ["readdir"],
    "readdirplus": ["readdir"],
    "releasedir": ["readdir"],
    "fsyncdir": ["fsyncdir"],
    "ioctl": ["ioctl"],
}


def handlers_in_source(src=REPO / "src" / "txnfuse" / "fuse") -> set[str]:
    """Every `ops.NAME = op_NAME;` of the daemon's FUSE operation table."""
    out = set()
    for f in sorted(Path(src).glob("*.cc")):
        out |= set(re.findall(r"\bops\.(\w+)\s*=\s*op_\w+\s*;", f.read_text()))
    return out


class Gen:
    def __init__(self, seed: int, area: str, shared: str | None, rng: random.Random):
        self.rng = rng
        self.seed = seed
        self.own = [f"{area}/{n}" for n in EXISTING + FREE]
        self.pool = self.own + ([f"{shared}/{n}" for n in EXISTING + FREE] if shared else [])
        self.dirs = [f"{area}/{d}" for d in DIRS] + ([f"{shared}/{d}" for d in DIRS] if shared else [])
        self.recent: list[str] = []
        self.n = 0

    def path(self, own_only=False) -> str:
        r = self.rng
        if self.recent and r.random() < 0.4:
            return r.choice(self.recent[-4:])
        return r.choice(self.own if own_only else self.pool)

    def touch(self, *paths):
        self.recent += paths
        del self.recent[:-8]

    def op(self) -> dict:
        r = self.rng
        name = r.choices(GEN_OPS, weights=[GEN_WEIGHTS[o] for o in GEN_OPS])[0]
        self.n += 1
        ds = r.randrange(1 << 30)
        p = self.path(own_only=name in ("mmap_read", "mmap_write"))
        size = lambda: r.choice((0, 1, 100, 4096, 5000, 65536, 70000, r.randrange(0, 140000)))
        if name == "create":
            o = {"p": p, "m": r.choice((0o644, 0o600, 0o4755, 0o2755, 0o777, 0o6777))}
            self.touch(p)
        elif name == "open":
            acc = r.choice(list(OPEN_ACCESS))
            ex = [f for f in OPEN_EXTRA if r.random() < 0.2]
            o = {"p": p, "fl": "|".join([acc] + ex)}
        elif name == "mknod":
            o = {"p": p, "k": r.choice(("fifo", "chr00")), "m": r.choice((0o644, 0o600))}
            self.touch(p)
        elif name == "mkdir":
            o = {"p": r.choice((p, r.choice(self.dirs))), "m": r.choice((0o755, 0o777, 0o2775))}
        elif name == "symlink":
            o = {"p": p, "t": r.choice(("f0", "../f1", "missing", "D0", "x" * 200))}
        elif name in ("link", "copy_range"):
            q = self.path()
            o = {"p": p, "q": q}
            if name == "copy_range":
                o.update(so=size(), do=size(), n=r.choice((1, 4096, 10000, 65536, 200000)))
            self.touch(p, q)
        elif name in ("unlink", "rmdir", "readlink", "stat", "listxattr", "statfs", "readdir",
                      "fsyncdir", "ioctl"):
            if name in ("rmdir", "readdir", "fsyncdir") and r.random() < 0.5:
                p = r.choice(self.dirs)
            o = {"p": p}
            if name == "readdir" and r.random() < 0.5:
                o["k"] = r.randint(1, 8)  # read k entries, then go on on a new handle
        elif name == "rename":
            q = self.path()
            if r.random() < 0.2:
                p, q = r.choice(self.dirs), r.choice((q, r.choice(self.dirs)))
            o = {"p": p, "q": q, "fl": r.choice(list(RENAME_FLAGS))}
            self.touch(p, q)
        elif name in ("write", "read"):
            if name == "write":
                acc = r.choice(("O_WRONLY", "O_RDWR"))
                ex = [f for f in ("O_APPEND", "O_TRUNC", "O_CREAT") if r.random() < 0.2]
                o = {"p": p, "fl": "|".join([acc] + ex), "off": size(),
                     "n": r.choice((1, 100, 4096, 5000, 65536)), "ds": ds}
            else:
                o = {"p": p, "off": size(), "n": r.choice((1, 4096, 100000))}
        elif name in ("dwrite", "dread"):
            off, n = r.choice(((65536, 8192), (r.randrange(0, 40) * 4096, r.randrange(1, 5) * 4096)))
            o = {"p": p, "off": off, "n": n}
            if name == "dwrite":
                o.update(ds=ds, fl=r.choice(("O_WRONLY", "O_RDWR")))
        elif name == "mmap_read":
            o = {"p": p, "off": r.randrange(0, 9000), "n": r.choice((1, 4096, 10000))}
        elif name == "mmap_write":
            # without msync the pages go back when munmap runs (fuse_vma_close)
            o = {"p": p, "off": r.randrange(0, 9000), "n": r.choice((1, 4096, 10000)), "ds": ds,
                 "sync": r.random() < 0.5}
        elif name in ("truncate", "ftruncate"):
            o = {"p": p, "size": size()}
        elif name == "fallocate":
            mode = r.choice(list(FALLOC_FLAGS))
            if mode in ("COLLAPSE_RANGE", "INSERT_RANGE") and r.random() < 0.85:
                off, n = r.randrange(0, 20) * 4096, r.randrange(1, 6) * 4096
            else:
                off, n = r.randrange(0, 100000), r.choice((1, 4096, 5000, 65536))
            o = {"p": p, "mode": mode, "off": off, "n": n}
        elif name == "chmod":
            o = {"p": p, "m": r.choice((0o644, 0o600, 0o4777, 0o2777, 0o6777, 0o1777, 0o755, 0o2755))}
        elif name == "chown":
            o = {"p": p, "uid": r.choice((0, NOBODY, -1, 1000)), "gid": r.choice((0, NOBODY, -1, 100))}
        elif name == "utimens":
            t = lambda: r.choice(("NOW", "OMIT", T0 + r.randrange(10**12)))
            o = {"p": p, "a": t(), "m": t(), "nofollow": r.random() < 0.3}
        elif name in ("setxattr", "getxattr", "removexattr"):
            xn = r.choice(("user.a", "user.b", "trusted.t", "system.posix_acl_access",
                           "system.posix_acl_default"))
            o = {"p": p, "x": xn}
            if name == "setxattr":
                if xn.startswith("system."):
                    o["v"] = "acl:" + r.choice(list(ACLS))
                else:
                    o["v"] = r.choice(("", "v1", "x" * 300))
                o["fl"] = r.choice(list(XATTR_FLAGS))
        elif name == "fsync":
            o = {"p": p, "data": r.random() < 0.5}
        elif name == "lseek":
            o = {"p": p, "off": size(), "w": r.choice(("DATA", "HOLE"))}
        elif name == "drop_caches":
            o = {}
        elif name == "handle":   # open the file handle a slot holds, then keep p's there
            o = {"p": p, "slot": r.randrange(2), "up": r.random() < 0.4}
        else:
            raise AssertionError(name)
        o = {"o": name, **o}
        if name in AS_NOBODY and r.random() < 0.2:
            o["u"] = NOBODY
        if name in UMASK_OPS and r.random() < 0.3:
            o["um"] = r.choice(UMASKS)   # the umask applies unless the parent has a default ACL
        return o


def gen_case(seed: int, oracle: str, procs: int, nops: int) -> dict:
    """The case of `seed`: per-process op lists, and for the crash oracle the crash."""
    rng = random.Random(f"{seed}/{oracle}/{procs}")
    shared = not (oracle in ("commit", "plain") and procs > 1)
    lists = []
    for k in range(procs):
        g = Gen(seed, f"P{k}", "S" if shared else None, random.Random(f"{seed}/{oracle}/{procs}/{k}"))
        lists.append([g.op() for _ in range(nops)])
    case = {"seed": seed, "oracle": oracle, "procs": procs, "shared": shared, "lists": lists,
            "end": "commit" if oracle in ("commit", "plain") else "abort"}
    if oracle == "plain":       # every other seed with another process's transaction open
        case["bystander"] = seed % 2 == 0
    if oracle == "commit":      # every other seed commits lazily: the same results, at once
        case["lazy"] = seed % 2 == 1
    if oracle in ("abort", "commit"):  # every way of beginning, by seed (BEGINS): same results
        case["begin"] = BEGINS[seed // 2 % len(BEGINS)]
        # half the seeds (lazy and durable commits alike) with a plain Observer
        case["observer"] = seed // 2 % 2 == 0
    if oracle == "crash":
        kind = rng.choice(("kill", "power", "inject"))
        case["crash"] = {"kind": kind, "after": rng.randrange(0, max(1, nops * procs)),
                         "delay_ms": rng.choice((0, 0, 1, 5, 20))}
        if kind == "inject":
            case["crash"]["point"] = f"{rng.choice(crash_point_names())}:{rng.choice((1, 1, 2, 3))}"
        case["end"] = rng.choice(("abort", "commit"))
        case["txns"] = gen_txns(rng, nops)
    return case


# The ways a transaction begins: txnfs_begin; txnfs_begin2 with a lock timeout; txnfs_begin3
# with a lock timeout and a predeclared lock set (IS on the mount's root, which every
# case's transaction then takes per request anyway).
BEGINS = ("begin", "begin2", "begin3")
# their lock timeout: the mount's default (--lock-timeout-ms)
BEGIN2_LOCK_TIMEOUT_MS = 10000


def begin_of(case) -> str:
    """How CASE's transaction begins (reproducers written before BEGINS say "begin2")."""
    return case.get("begin") or ("begin2" if case.get("begin2") else "begin")


def gen_txns(rng, nops: int) -> dict:
    """The crash oracle's transactions: the op lists are cut at the same indexes in every
    process into consecutive transactions, each committed lazily or durably (the last
    one ends with case["end"]); the daemon flushes lazy commits after `flush_ms`."""
    n = rng.choice((1, 2, 3, 3, 4))
    cuts = sorted(rng.randrange(0, nops + 1) for _ in range(n - 1))
    return {"cuts": cuts, "lazy": [rng.random() < 0.6 for _ in range(n)],
            "flush_ms": rng.choice((5, 50, 60000, 60000))}


def txn_segments(case) -> tuple[list[list[list]], list[bool], int | None]:
    """(segments, lazy, flush_ms): segments[j][k] is process k's ops in transaction j."""
    t = case.get("txns") or {"cuts": [], "lazy": [False], "flush_ms": None}
    bounds = [0, *t["cuts"], None]
    segs = [[lst[bounds[j]:bounds[j + 1]] for lst in case["lists"]] for j in range(len(bounds) - 1)]
    return segs, t["lazy"], t["flush_ms"]


_points = None


def crash_point_names() -> list[str]:
    global _points
    if _points is None:
        _points = [p[0] for p in crashlib.crash_points()]
    return _points


# --------------------------------------------------------------------------
# executing one op (in a worker process)
# --------------------------------------------------------------------------

def _flags(spec: str) -> int:
    f = 0
    for part in spec.split("|"):
        f |= OPEN_ACCESS.get(part, 0) | OPEN_EXTRA.get(part, 0)
    return f


def _h(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()[:16]


STATX_MODE = 0x2
tl.libc.statx.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint,
                          ctypes.c_void_p]
tl.libc.statx.restype = ctypes.c_int


def _cached_mode(path=None, fd=None) -> int:
    """The mode as statx(STATX_MODE) answers it (`stat -c %a` asks so): from the kernel's
    cached attributes, unless the kernel invalidated the mode. A full stat refetches
    them after every write for the size's sake, and would hide a stale set-ID bit."""
    buf = ctypes.create_string_buffer(256)
    if fd is not None:
        rc = tl.libc.statx(fd, b"", tl.AT_EMPTY_PATH, STATX_MODE, buf)
    else:
        rc = tl.libc.statx(tl.AT_FDCWD, os.fsencode(path), AT_SYMLINK_NOFOLLOW, STATX_MODE, buf)
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)
    return struct.unpack_from("<H", buf, 28)[0]


def _fst(fd) -> dict:
    mode = _cached_mode(fd=fd)   # (first: the full stat below refreshes the cache)
    st = os.fstat(fd)
    return {"mode": oct(mode), "size": st.st_size, "nlink": st.st_nlink,
            "uid": st.st_uid, "gid": st.st_gid}


class _Aligned:
    def __init__(self, n):
        self.m = mmap.mmap(-1, max(4096, n))

    def __enter__(self):
        return self.m

    def __exit__(self, *a):
        self.m.close()


def _body(root: str, o: dict):
    """Runs one op; returns its comparable result value (raises OSError for an errno)."""
    if "um" not in o:
        return _body_umask(root, o)
    old = os.umask(o["um"])
    try:
        return _body_umask(root, o)
    finally:
        os.umask(old)


def _body_umask(root: str, o: dict):
    P = lambda k="p": os.path.join(root, o[k])
    name = o["o"]
    NB = os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY   # never block on a FIFO
    if name == "create":
        fd = os.open(P(), os.O_WRONLY | os.O_CREAT | os.O_EXCL | NB, o["m"])
        try:
            return _fst(fd)
        finally:
            os.close(fd)
    if name == "open":
        fd = os.open(P(), _flags(o["fl"]) | NB, 0o640)
        try:
            return _fst(fd)
        finally:
            os.close(fd)
    if name == "mknod":
        kind = stat.S_IFIFO if o["k"] == "fifo" else stat.S_IFCHR
        os.mknod(P(), kind | o["m"], os.makedev(0, 0))
        return None
    if name == "mkdir":
        os.mkdir(P(), o["m"])
        return None
    if name == "symlink":
        os.symlink(o["t"], P())
        return None
    if name == "link":
        os.link(P(), P("q"), follow_symlinks=False)
        return None
    if name == "unlink":
        os.unlink(P())
        return None
    if name == "rmdir":
        os.rmdir(P())
        return None
    if name == "rename":
        tl.renameat2(P(), P("q"), RENAME_FLAGS[o["fl"]])
        return None
    if name == "write":
        fd = os.open(P(), _flags(o["fl"]) | NB, 0o644)
        try:
            buf = data(o["n"], o["ds"])
            n = os.write(fd, buf) if "O_APPEND" in o["fl"] else os.pwrite(fd, buf, o["off"])
            return {"n": n, **_fst(fd)}
        finally:
            os.close(fd)
    if name == "read":
        fd = os.open(P(), os.O_RDONLY | NB)
        try:
            b = os.pread(fd, o["n"], o["off"])
            return {"len": len(b), "sha": _h(b)}
        finally:
            os.close(fd)
    if name in ("dwrite", "dread"):
        fl = (_flags(o.get("fl", "O_RDONLY"))) | os.O_DIRECT | NB
        fd = os.open(P(), fl)
        try:
            with _Aligned(o["n"]) as buf:
                if name == "dwrite":
                    buf[:o["n"]] = data(o["n"], o["ds"])
                    n = os.pwritev(fd, [memoryview(buf)[:o["n"]]], o["off"])
                    return {"n": n, **_fst(fd)}
                n = os.preadv(fd, [memoryview(buf)[:o["n"]]], o["off"])
                return {"n": n, "sha": _h(buf[:n])}
        finally:
            os.close(fd)
    if name in ("mmap_read", "mmap_write"):
        wr = name == "mmap_write"
        fd = os.open(P(), (os.O_RDWR if wr else os.O_RDONLY) | NB)
        try:
            st = os.fstat(fd)
            _CTX["ino"] = st.st_ino
            if not stat.S_ISREG(st.st_mode) or st.st_size <= o["off"]:
                return "beyond-eof"
            n = min(o["n"], st.st_size - o["off"])
            m = mmap.mmap(fd, st.st_size, mmap.MAP_SHARED,
                          mmap.PROT_READ | (mmap.PROT_WRITE if wr else 0))
            try:
                if wr:
                    m[o["off"]:o["off"] + n] = data(n, o["ds"])
                    if o.get("sync", True):
                        m.flush()
                    return {"n": n}
                return {"n": n, "sha": _h(m[o["off"]:o["off"] + n])}
            finally:
                m.close()
        finally:
            os.close(fd)
    if name == "truncate":
        os.truncate(P(), o["size"])
        return None
    if name == "ftruncate":
        fd = os.open(P(), os.O_WRONLY | NB)
        try:
            os.ftruncate(fd, o["size"])
            return _fst(fd)
        finally:
            os.close(fd)
    if name == "fallocate":
        fd = os.open(P(), os.O_RDWR | NB)
        try:
            tl.fallocate(fd, FALLOC_FLAGS[o["mode"]], o["off"], o["n"])
            return _fst(fd)
        finally:
            os.close(fd)
    if name == "copy_range":
        src = os.open(P(), os.O_RDONLY | NB)
        try:
            dst = os.open(P("q"), os.O_WRONLY | NB)
            try:
                # As programs do: copy_file_range may copy less than asked, and how much
                # one call copies differed between the two trees (seed 9708: 8,092 of
                # 10,000 on txnfs; seed 14120: 8,192 on XFS, which clones the
                # block-aligned part of a range and returns that), so go on until done or
                # the source ends.
                n = 0
                while n < o["n"]:
                    k = os.copy_file_range(src, dst, o["n"] - n, o["so"] + n, o["do"] + n)
                    if k == 0:
                        break
                    n += k
                return {"n": n, **_fst(dst)}
            finally:
                os.close(dst)
        finally:
            os.close(src)
    if name == "chmod":
        os.chmod(P(), o["m"])
        return None
    if name == "chown":
        os.chown(P(), o["uid"], o["gid"], follow_symlinks=False)
        return None
    if name == "utimens":
        utimensat(P(), o["a"], o["m"], AT_SYMLINK_NOFOLLOW if o["nofollow"] else 0)
        return None
    if name == "setxattr":
        v = o["v"]
        v = ACLS[v[4:]] if v.startswith("acl:") else v.encode()
        os.setxattr(P(), o["x"], v, XATTR_FLAGS[o["fl"]], follow_symlinks=False)
        return None
    if name == "getxattr":
        return _h(os.getxattr(P(), o["x"], follow_symlinks=False))
    if name == "listxattr":
        return sorted(os.listxattr(P(), follow_symlinks=False))
    if name == "removexattr":
        os.removexattr(P(), o["x"], follow_symlinks=False)
        return None
    if name == "fsync":
        fd = os.open(P(), os.O_RDONLY | NB)
        try:
            (os.fdatasync if o["data"] else os.fsync)(fd)
            return None
        finally:
            os.close(fd)
    if name == "fsyncdir":
        fd = os.open(P(), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
            return None
        finally:
            os.close(fd)
    if name == "lseek":
        fd = os.open(P(), os.O_RDONLY | NB)
        try:
            return os.lseek(fd, o["off"], os.SEEK_DATA if o["w"] == "DATA" else os.SEEK_HOLE)
        finally:
            os.close(fd)
    if name == "statfs":
        s = os.statvfs(P())
        return {"bsize": s.f_bsize, "namemax": s.f_namemax}
    if name == "readdir" and "k" in o:
        # seekdir to the first part's telldir on a new handle, as NFS-Ganesha continues
        # a READDIR: each name once (a repeated one stays in the sorted list)
        return sorted(tl.continued_listing(P(), o["k"]))
    if name == "readdir":
        return sorted([n, t] for n, (t, _) in tl.readdir_types(P()).items())
    if name == "readlink":
        return os.readlink(P())
    if name == "stat":
        mode = _cached_mode(P())
        st = os.lstat(P())
        r = {"mode": oct(mode), "nlink": st.st_nlink, "uid": st.st_uid, "gid": st.st_gid}
        if not stat.S_ISDIR(st.st_mode):
            r["size"] = st.st_size
        return r
    if name == "ioctl":
        import fcntl
        fd = os.open(P(), os.O_RDONLY | NB)
        try:
            buf = bytearray(8)
            fcntl.ioctl(fd, FS_IOC_GETFLAGS, buf)
            return None
        finally:
            os.close(fd)
    if name == "drop_caches":
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2")
        return None
    if name == "handle":
        return _handle_op(root, o, P())
    raise AssertionError(f"unknown op {name}")


_HANDLES: dict = {}   # this process's kept file handles, by slot


def _handle_op(root: str, o: dict, path: str):
    """open_by_handle_at (O_PATH) of the handle a slot holds, kept by an earlier op of this
    process (the object may have been removed, renamed or rolled back since): its type and
    link count, with "up" for a directory the names in its ".." (what the kernel asks the
    file system for when it reconnects a handle); then name_to_handle_at of `path` into
    the slot."""
    r = {}
    try:
        r["old"] = _open_kept(root, o)
    except OSError as e:
        r["old"] = errno.errorcode.get(e.errno, str(e.errno))
    try:
        _HANDLES[o["slot"]] = tl.name_to_handle_at(path)
    except OSError as e:
        r["keep"] = errno.errorcode.get(e.errno, str(e.errno))
    return r


def _open_kept(root: str, o: dict):
    fh = _HANDLES.get(o["slot"])
    if fh is None:
        return "no-handle"
    mfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = tl.open_by_handle_at(mfd, fh, os.O_PATH | os.O_CLOEXEC)
    finally:
        os.close(mfd)
    try:
        st = os.fstat(fd)
        r = {"mode": oct(st.st_mode), "nlink": st.st_nlink}
        if o["up"] and stat.S_ISDIR(st.st_mode):
            if st.st_ino == os.stat(root).st_ino:
                r["up"] = "the root"   # its ".." is outside the tree the run compares
            else:
                up = os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
                try:
                    r["up"] = sorted(os.listdir(up))
                finally:
                    os.close(up)
        return r
    finally:
        os.close(fd)


_CTX: dict = {}


def exec_op(root: str, o: dict) -> dict:
    """{"v": value} or {"e": "ENOENT"}; "ino" (not compared) for mmap ops."""
    _CTX.clear()

    def call():
        try:
            return {"v": _body(root, o)}
        except OSError as e:
            return {"e": errno.errorcode.get(e.errno, str(e.errno))}
        except (ValueError, OverflowError) as e:
            return {"e": f"py:{type(e).__name__}"}

    if o.get("u"):
        try:
            res = tl.as_user(call, uid=o["u"], gid=o["u"])
        except Exception as e:  # noqa: BLE001
            res = {"e": f"as_user:{e!r}"}
    else:
        res = call()
    if "ino" in _CTX:
        res["ino"] = _CTX["ino"]
    if res.get("e"):      # what the names were (for DIVERGENCES; not compared)
        for k, key in (("p", "ft"), ("q", "ftq")):
            try:   # what the name leads to (an open follows symlinks)
                res[key] = stat.S_IFMT(os.stat(os.path.join(root, o[k])).st_mode)
            except (OSError, KeyError):
                try:
                    res[key] = stat.S_IFMT(os.lstat(os.path.join(root, o[k])).st_mode)
                except (OSError, KeyError):
                    pass
    return res


# --------------------------------------------------------------------------
# worker processes (one process group per run)
# --------------------------------------------------------------------------

class Stall(Exception):
    pass


def _worker_main(root: str, cmd_r: int, res_w: int):
    os.umask(0)
    os.chdir("/")
    out = os.fdopen(res_w, "w", buffering=1)
    out.write(json.dumps({"pid": os.getpid()}) + "\n")
    inp = os.fdopen(cmd_r, "r")
    for line in inp:
        o = json.loads(line)
        out.write(json.dumps(exec_op(root, o)) + "\n")
    os._exit(0)


class Group:
    """A leader process and `procs` worker processes (its children), each running one op
    list in lockstep with the controller (one op at a time, every op with a deadline).
    A transaction bound to the leader's pid covers the workers (its descendants)."""

    def __init__(self, root, nprocs: int):
        self.root = str(root)
        self.n = nprocs
        self.pipes = [(os.pipe(), os.pipe()) for _ in range(nprocs)]
        ctl_r, self.ctl_w = os.pipe()
        self.leader = os.fork()
        if self.leader == 0:
            try:
                os.close(self.ctl_w)
                kids = []
                for k, ((cr, cw), (rr, rw)) in enumerate(self.pipes):
                    pid = os.fork()
                    if pid == 0:
                        for j, ((a, b), (c, d)) in enumerate(self.pipes):
                            for fd in ((b, c) if j == k else (a, b, c, d)):
                                os.close(fd)
                        os.close(ctl_r)
                        _worker_main(self.root, cr, rw)
                    kids.append(pid)
                for (cr, cw), (rr, rw) in self.pipes:
                    for fd in (cr, cw, rr, rw):
                        os.close(fd)
                for pid in kids:
                    os.waitpid(pid, 0)
                os.read(ctl_r, 1)       # stay alive (the transaction's owner) until told
            finally:
                os._exit(0)
        os.close(ctl_r)
        self.cmd = []
        self.res = []
        for (cr, cw), (rr, rw) in self.pipes:
            os.close(cr)
            os.close(rw)
            self.cmd.append(cw)
            self.res.append(rr)
        self.buf = [b""] * nprocs
        self.pids = [json.loads(self._line(k, 10))["pid"] for k in range(nprocs)]

    def _line(self, k, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf[k]:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.res[k]], [], [], left)[0]:
                raise Stall(f"worker {k} gave no answer in {timeout} s")
            b = os.read(self.res[k], 65536)
            if not b:
                raise EOFError(f"worker {k} died")
            self.buf[k] += b
        line, _, self.buf[k] = self.buf[k].partition(b"\n")
        return line

    def run(self, lists, deadline=OP_DEADLINE, stop_after=None, on_step=None):
        """Runs lists[k] on worker k concurrently. Returns results[k][i] (None if not run).
        Stops sending after `stop_after` completed ops in total. Raises Stall (with
        .where) when an op takes longer than `deadline`."""
        results = [[None] * len(lst) for lst in lists]
        nxt = [0] * self.n
        started = {}
        done = 0

        def send(k):
            if nxt[k] < len(lists[k]) and (stop_after is None or done < stop_after):
                os.write(self.cmd[k], (json.dumps(lists[k][nxt[k]]) + "\n").encode())
                started[k] = time.monotonic()

        for k in range(self.n):
            send(k)
        while started:
            now = time.monotonic()
            oldest = min(started.values())
            wait = deadline - (now - oldest)
            if wait <= 0:
                k = min(started, key=started.get)
                e = Stall(f"op {nxt[k]} of process {k} ({json.dumps(lists[k][nxt[k]])}) "
                          f"did not return in {deadline:.0f} s")
                e.where = (k, nxt[k])
                raise e
            ready = select.select([self.res[k] for k in started], [], [], wait)[0]
            for fd in ready:
                k = self.res.index(fd)
                try:
                    line = self._line(k, deadline)
                except EOFError:
                    results[k][nxt[k]] = {"e": "worker died"}
                    del started[k]
                    continue
                results[k][nxt[k]] = json.loads(line)
                nxt[k] += 1
                done += 1
                del started[k]
                if on_step:
                    on_step(done)
                send(k)
        return results

    def end_workers(self, timeout=OP_DEADLINE):
        for fd in self.cmd:
            try:
                os.close(fd)
            except OSError:
                pass
        self.cmd = []

    def close(self, timeout=10.0):
        """Ends workers and leader; SIGKILLs (by pid) whatever does not exit in time."""
        self.end_workers()
        try:
            os.close(self.ctl_w)
        except OSError:
            pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, _ = os.waitpid(self.leader, os.WNOHANG)
            if pid:
                break
            time.sleep(0.01)
        else:
            for p in self.pids + [self.leader]:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            os.waitpid(self.leader, 0)
        for fd in self.res:
            os.close(fd)
        self.res = []

    def workers_done(self, timeout):
        """True when every worker process has exited (they exit once end_workers ran)."""
        return tl.wait_until(lambda: not any(tl.pid_alive(p) for p in self.pids), timeout, 0.01)


# --------------------------------------------------------------------------
# documented divergences (the ONE table)
# --------------------------------------------------------------------------

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
        "link count 0, where XFS refuses unlinked inodes with ESTALE",
        lambda o, r, ctx: (o["o"] == "handle" and isinstance(r.get("v"), dict)
                           and isinstance(r["v"].get("old"), dict)
                           and r["v"]["old"].get("nlink") == 0),
        same_op=True),
]

_DIVERGENCE_BY_ID = {d.id: d for d in DIVERGENCES}


def divergence_of(o, r, ctx):
    for d in DIVERGENCES:
        if d.match(o, r, ctx):
            return d.id
    return None


# --------------------------------------------------------------------------
# the oracles
# --------------------------------------------------------------------------

def committed_view(env, tids) -> dict:
    """STORE/tree as it will be once transactions `tids` have committed (and are
    durable): what they removed is stashed in their log directories, whose links to those
    objects go once the commit is durable."""
    if isinstance(tids, int):
        tids = [tids]
    for _ in range(20):   # a group commit may drop links meanwhile: look again
        view = strip_atime(snap.snapshot(env.store.tree, handles=False))
        held = _held_links(env, tids)
        if strip_atime(snap.snapshot(env.store.tree, handles=False)) == view:
            break
    for v in view.values():
        if v.get("type") != stat.S_IFDIR and v.get("ino") in held:
            v["nlink"] -= held[v["ino"]]
    return view


def _held_links(env, tids) -> dict[int, int]:
    """inode -> links the logs of `tids` hold on objects their transactions removed."""
    held: dict[int, int] = {}
    for tid in tids:
        logdir = Path(env.store.path) / ".txnfs" / "backups" / str(tid)
        if not logdir.is_dir():
            continue
        try:
            ents = [(e.name, e.stat(follow_symlinks=False)) for e in os.scandir(logdir)]
        except FileNotFoundError:
            continue   # the cleaner is discarding the log of a durable commit
        for name, st in ents:
            if name.endswith(".d") and not stat.S_ISDIR(st.st_mode):
                held[st.st_ino] = held.get(st.st_ino, 0) + 1
    return held


@dataclass
class Failure(Exception):
    oracle: str
    kind: str            # the failure signature kept while shrinking
    detail: str
    case: dict = None
    report: str = ""

    def __str__(self):
        return f"{self.oracle}: {self.kind}: {self.detail}"


@dataclass
class Stats:
    runs: dict = field(default_factory=dict)         # oracle/procs -> count
    ops: dict = field(default_factory=dict)          # op name -> executed count
    flags: dict = field(default_factory=dict)        # "rename:EXCHANGE" -> count
    divergences: dict = field(default_factory=dict)  # id -> count
    crash: dict = field(default_factory=dict)        # kind/point -> count
    observed: dict = field(default_factory=dict)     # Observer: "runs"/"snapshots" -> count
    failures: list = field(default_factory=list)

    def count_ops(self, lists):
        for lst in lists:
            for o in lst:
                self.ops[o["o"]] = self.ops.get(o["o"], 0) + 1
                for f in op_flags(o):
                    self.flags[f] = self.flags.get(f, 0) + 1


def op_flags(o) -> list[str]:
    out = []
    if o["o"] == "rename":
        out.append(f"rename:{o['fl']}")
    if o["o"] == "fallocate":
        out.append(f"fallocate:{o['mode']}")
    if o["o"] in ("open", "write", "dwrite"):
        out += [f"open:{f}" for f in o.get("fl", "").split("|") if f]
        if o["o"] == "dwrite":
            out.append("open:O_DIRECT")
    if o["o"] == "dread":
        out += ["open:O_RDONLY", "open:O_DIRECT"]
    if o.get("u"):
        out.append(f"uid:{o['o']}")
    if "um" in o:
        out.append(f"umask:{o['o']}")
    return out


def strip_atime(s):
    return snap.strip(s, ("atime_ns",))


class Fuzzer:
    """One XFS image (crashlib.Env) for many runs; each run gets a fresh store and raw dir."""

    def __init__(self, workdir: Path | None = None, log=print, deadline=OP_DEADLINE):
        self.own = workdir is None
        self.work = Path(tempfile.mkdtemp(prefix="txnfs-fuzz-")) if workdir is None else workdir
        # (mkdtemp makes it 0700: the ops run as nobody must reach the trees below it)
        os.chmod(self.work, 0o755)
        self.env = crashlib.Env(self.work, size=1 << 30)
        self.n = 0
        self.log = log
        self.deadline = deadline
        self.stats = Stats()

    def close(self):
        problems = self.env.close()
        if self.own and not problems:
            shutil.rmtree(self.work, ignore_errors=True)
        return problems

    # -- helpers -----------------------------------------------------------
    def _fresh(self):
        self.n += 1
        env = self.env
        env.store = tl.Store(env.xfs / f"store{self.n}").init()
        raw = env.xfs / f"raw{self.n}"
        raw.mkdir()
        return raw

    def _mount(self, name, crash_at=None, extra=()):
        rc, _ = self.env.mount(f"{self.n}-{name}", crash_at, extra=extra)
        if rc is not None:
            err = (self.env.logs / f"{self.n}-{name}.stderr").read_text()[-2000:]
            raise Failure("", "mount-failed", f"txnfs mount ({name}) exited {rc}: {err}")

    def _drop_store(self, raw):
        """Free the space of a passing run (the image is small)."""
        shutil.rmtree(self.env.store.path, ignore_errors=True)
        if raw:
            shutil.rmtree(raw, ignore_errors=True)
        for f in self.env.logs.glob(f"{self.n}-*"):
            f.unlink()

    def _gdb(self) -> str:
        pid = self.env.pid
        if not pid:
            return "(no daemon)"
        p = tl.run(["gdb", "-batch", "-p", str(pid), "-ex", "thread apply all bt"], timeout=120)
        return p.stdout[-20000:] + p.stderr[-2000:]

    def _umount_fsck(self, oracle):
        env = self.env
        env.umount()
        p = env.store.fsck()
        if p.returncode != 0:
            raise Failure(oracle, "fsck", f"txnfs fsck exit {p.returncode}:\n{tl.output_of(p)}")
        rows = {r["ino"] for r in env.store.query("SELECT ino FROM handles")}
        objs = {e["ino"]: path for path, e in snap.snapshot(env.store.tree, handles=False).items()}
        norow = sorted(p for ino, p in objs.items() if ino not in rows)
        if norow:
            raise Failure(oracle, "handle-rows", f"objects of STORE/tree without a handle row: {norow}")
        left = snap.backups_left(env.store)
        if left:
            raise Failure(oracle, "backups-left", f"STORE/.txnfs/backups after the run: {left[:10]}")

    def _run_group(self, root, lists, oracle, txn_bind=None, end=None, stop_after=None,
                   crash_cb=None, begin="begin", before_end=None):
        """Runs the lists in a Group; with txn_bind (the mount) inside a transaction bound
        to the leader, ended by `end` ("commit" / "abort" / None: left open; `before_end()`
        is called right before). Returns (results, end_rc, tid)."""
        g = Group(root, len(lists))
        tid = None
        try:
            if txn_bind:
                set_rc = 0
                if begin == "begin2":
                    rc, tid = tl.txn_begin2_rc(txn_bind, tl.TXNFS_BIND_PROCESS, g.leader,
                                               BEGIN2_LOCK_TIMEOUT_MS)
                elif begin == "begin3":
                    rc, tid, set_rc = tl.txn_begin3_rc(
                        txn_bind, tl.TXNFS_BIND_PROCESS, g.leader, BEGIN2_LOCK_TIMEOUT_MS,
                        tl.lock_records(tl.lock_node(1), tl.lock_object(0, tl.TXNFS_LOCK_IS)),
                        BEGIN2_LOCK_TIMEOUT_MS)
                else:
                    rc, tid = tl.txn_begin_rc(txn_bind, tl.TXNFS_BIND_PROCESS, g.leader)
                if rc != 0 or set_rc != 0:
                    raise Failure(oracle, "begin", f"txnfs_{begin}: "
                                                   f"{os.strerror(-(rc or set_rc))}")
            try:
                res = g.run(lists, self.deadline, stop_after=stop_after,
                            on_step=crash_cb)
            except Stall as e:
                bt = self._gdb()
                raise Failure(oracle, "stall", str(e), report="gdb backtrace of the daemon:\n" + bt)
            g.end_workers()
            if not g.workers_done(self.deadline):
                bt = self._gdb()
                raise Failure(oracle, "stall", "workers did not exit (a close/release hangs)",
                              report="gdb backtrace of the daemon:\n" + bt)
            end_rc = None
            if before_end:
                before_end()
            if txn_bind and end:
                fn = {"commit": tl.txn_commit, "commit-lazy": tl.txn_commit_lazy}.get(end, tl.txn_abort)
                end_rc = _with_deadline(lambda: fn(txn_bind, tid), self.deadline)
                if end_rc == "stall":
                    bt = self._gdb()
                    raise Failure(oracle, "stall", f"txnfs_{end} did not return",
                                  report="gdb backtrace of the daemon:\n" + bt)
            return res, end_rc, tid
        finally:
            g.close()

    def _count_observer(self, obs):
        if obs:
            for k, v in (("runs", 1), ("snapshots", obs.snapshots)):
                self.stats.observed[k] = self.stats.observed.get(k, 0) + v

    # -- abort --------------------------------------------------------------
    def run_abort(self, case):
        oracle = "abort"
        env = self.env
        raw = None
        self._fresh()
        self._mount("a")
        populate(env.mnt, case["seed"], areas(case["procs"], case["shared"]))
        before = strip_atime(snap.stable_snapshot(env.mnt))
        obs = Observer(env.mnt, before, case["lists"]) if case.get("observer") else None
        try:
            res, rc, _ = self._run_group(env.mnt, case["lists"], oracle, env.mnt, "abort",
                                         begin=begin_of(case))
        finally:
            seen = obs.stop() if obs else None  # it watched the rollback too
        self._count_observer(obs)
        if seen:
            raise Failure(oracle, "isolation", seen)
        if rc != 0:
            raise Failure(oracle, "abort-rc", f"txnfs_abort returned {rc} ({os.strerror(-rc)})")
        after = strip_atime(snap.snapshot(env.mnt))
        d = snap.diff(before, after)
        if d:
            raise Failure(oracle, "tree", "after abort the tree differs from before:\n  " + "\n  ".join(d))
        self._umount_fsck(oracle)
        self._drop_store(raw)
        return res

    # -- commit / plain -------------------------------------------------------
    def run_commit(self, case, txn=True):
        oracle = "commit" if txn else "plain"
        env = self.env
        raw = self._fresh()
        self._mount("c")
        ars = areas(case["procs"], case["shared"])
        populate(env.mnt, case["seed"], ars)
        populate(raw, case["seed"], ars)
        before_inos = {e["ino"] for e in snap.snapshot(env.mnt, handles=False).values()}
        by = Bystander(env.mnt) if (not txn and case.get("bystander")) else None
        obs = (Observer(env.mnt, strip_atime(snap.stable_snapshot(env.mnt)), case["lists"])
               if txn and case.get("observer") else None)
        seen = []
        try:
            res_m, rc, _ = self._run_group(env.mnt, case["lists"], oracle, env.mnt if txn else None,
                                           "commit-lazy" if case.get("lazy") else "commit",
                                           begin=begin_of(case),
                                           before_end=obs and (lambda: seen.append(obs.stop())))
        finally:
            if by:
                by.close()
            if obs and not seen:
                seen.append(obs.stop())
        self._count_observer(obs)
        if seen and seen[0]:
            raise Failure(oracle, "isolation", seen[0])
        if txn and rc != 0:
            raise Failure(oracle, "commit-rc", f"txnfs_commit returned {rc} ({os.strerror(-rc)})")
        if case.get("lazy"):
            self.stats.crash["commit oracle: lazy commits"] = \
                self.stats.crash.get("commit oracle: lazy commits", 0) + 1
        ctx = {"txn": txn or by is not None, "before_inos": before_inos}
        skip_lists, divs = [], {}
        for k, lst in enumerate(case["lists"]):
            sl = []
            for i, o in enumerate(lst):
                d = divergence_of(o, res_m[k][i], ctx)
                if d:           # counted and reported; XFS runs a harmless stat instead
                    divs[(k, i)] = d
                    self.stats.divergences[d] = self.stats.divergences.get(d, 0) + 1
                    if not _DIVERGENCE_BY_ID[d].same_op:
                        o = {"o": "stat", "p": ".", "instead_of": o["o"]}
                sl.append(o)
            skip_lists.append(sl)
        res_r, _, _ = self._run_group(raw, skip_lists, oracle)
        for k, lst in enumerate(case["lists"]):
            for i, o in enumerate(lst):
                if (k, i) in divs:
                    continue
                a, b = dict(res_r[k][i] or {}), dict(res_m[k][i] or {})
                for x in (a, b):
                    x.pop("ino", None)
                    x.pop("ft", None)
                    x.pop("ftq", None)
                if a != b:
                    sig = lambda r: r.get("e", "ok")
                    raise Failure(oracle, f"result:{o['o']}:{sig(a)}->{sig(b)}",
                                  f"process {k} op {i} {json.dumps(o)}: XFS {json.dumps(a)}, "
                                  f"txnfs {json.dumps(b)}")
        sm = snap.shape(snap.snapshot(env.mnt, handles=False))
        sr = snap.shape(snap.snapshot(raw, handles=False))
        d = snap.diff(sr, sm)
        if d:
            raise Failure(oracle, "tree", "the tree differs from XFS (expected = XFS):\n  " + "\n  ".join(d))
        self._umount_fsck(oracle)
        self._drop_store(raw)
        return res_m

    # -- crash ----------------------------------------------------------------
    def run_crash(self, case):
        """The ops run as consecutive transactions (txn_segments), committed lazily or
        durably; a crash comes after a chosen number of ops, or at an injected point.
        After recovery STORE/tree must be the state after the first i transactions for
        some i: no transaction partly there (atomicity), and only a suffix of the
        committed ones lost (the lazy-commit contract) -- and i must include every
        transaction whose durable commit returned, or that a later durable commit or a
        sync covered (docs/crash-model.md)."""
        oracle = "crash"
        env = self.env
        c = case["crash"]
        segs, lazy, flush_ms = txn_segments(case)
        extra = ("--lazy-flush-ms", str(flush_ms)) if flush_ms else ()
        self._fresh()
        self._mount("p")
        populate(env.mnt, case["seed"], areas(case["procs"], case["shared"]))
        env.umount()
        point = c.get("point")
        recovery_point = point and point.startswith("recover.")
        self._mount("w", point if point and not recovery_point else None, extra)
        before = strip_atime(snap.stable_snapshot(env.mnt))
        # states[i]: STORE/tree after the first i transactions committed
        states = [strip_atime(snap.snapshot(env.store.tree, handles=False))]
        must = 0          # how many transactions must survive the crash
        acked = 0         # how many commits returned 0
        label = c["kind"] + (f" {point}" if point else "")
        crashed = {"done": False}

        def crash_now():
            if crashed["done"]:
                return
            crashed["done"] = True
            time.sleep(c.get("delay_ms", 0) / 1000)
            if c["kind"] == "power":
                env.power_cut()
            env.kill()

        stop = c["after"] if c["kind"] in ("kill", "power") or recovery_point else None
        g = Group(env.mnt, len(case["lists"]))
        tids = []
        try:
            for j, seg in enumerate(segs):
                last = j == len(segs) - 1
                if env.daemon_exited() is not None:
                    break
                rc, tid = tl.txn_begin_rc(env.mnt, tl.TXNFS_BIND_PROCESS, g.leader)
                if rc != 0:
                    # an injected point in begin (txn.after_begin): the daemon is exiting
                    if not (point and tl.wait_until(lambda: env.daemon_exited() is not None, 5)):
                        raise Failure(oracle, "begin", f"txnfs_begin: {os.strerror(-rc)}")
                    break
                tids.append(tid)
                n = sum(len(x) for x in seg)
                here = None if stop is None else max(0, stop)
                try:
                    g.run(seg, self.deadline, stop_after=here)
                except Stall as e:
                    if env.daemon_exited() is None:
                        bt = self._gdb()
                        raise Failure(oracle, "stall", str(e), report="gdb:\n" + bt)
                if stop is not None:
                    stop -= n
                    if stop < 0 or (stop == 0 and last):
                        break      # crash inside (or right at the end of) this transaction
                if env.daemon_exited() is not None:
                    break
                if last and case["end"] != "commit":
                    _with_deadline(lambda: tl.txn_abort(env.mnt, tid), self.deadline)
                    break
                states.append(committed_view(env, tids))
                commit = tl.txn_commit_lazy if lazy[j] else tl.txn_commit
                rc = _with_deadline(lambda: commit(env.mnt, tid), self.deadline)
                if rc != 0:
                    break          # the daemon died inside the commit (injected)
                acked = j + 1
                if not lazy[j]:
                    must = j + 1   # durable: this one and every earlier lazy one
            g.end_workers()
            g.workers_done(self.deadline)
            if stop is not None:
                crash_now()
        finally:
            g.close()
        fired = env.daemon_exited() == 137
        if point and not recovery_point:
            self.stats.crash[f"inject {point.split(':')[0]} {'fired' if fired else 'not reached'}"] = \
                self.stats.crash.get(f"inject {point.split(':')[0]} {'fired' if fired else 'not reached'}", 0) + 1
        else:
            self.stats.crash[c["kind"]] = self.stats.crash.get(c["kind"], 0) + 1
        if any(lazy[:len(tids)]):
            self.stats.crash["with lazy commits"] = self.stats.crash.get("with lazy commits", 0) + 1
        env.kill()
        if c["kind"] == "power":
            env.umount_xfs()
            env.mount_xfs()
        if recovery_point:
            rc, _ = env.mount(f"{self.n}-rc", point)
            key = f"inject {point.split(':')[0]} {'fired' if rc == 137 else 'not reached'}"
            self.stats.crash[key] = self.stats.crash.get(key, 0) + 1
            if rc is None:
                env.umount()
            elif rc != 137:
                raise Failure(oracle, "recovery-mount", f"mount with {point} armed exited {rc}")
        try:
            self._mount("r")
        except Failure as f:
            f.oracle = oracle
            f.report = (f.report + "\n" if f.report else "") + self._xfs_state()
            raise
        store_now = strip_atime(snap.snapshot(env.store.tree, handles=False))
        survived = [i for i, s in enumerate(states) if not snap.diff(s, store_now)]
        if not survived:
            near = min(range(len(states)), key=lambda i: len(snap.diff(states[i], store_now)))
            raise Failure(oracle, "tree", f"after {label} and recovery STORE/tree is not the state "
                          f"after any prefix of the {len(states) - 1} committed transaction(s) "
                          f"(lazy: {lazy[:len(states) - 1]}); nearest, after {near}:\n  "
                          + "\n  ".join(snap.diff(states[near], store_now)))
        if max(survived) < must:
            raise Failure(oracle, "lost-durable", f"after {label} and recovery only the first "
                          f"{max(survived)} transaction(s) survived, but {must} were durable "
                          f"(lazy: {lazy[:len(states) - 1]}); vs. the state after {must}:\n  "
                          + "\n  ".join(snap.diff(states[must], store_now)))
        if max(survived) < acked:
            k = "lost acknowledged lazy commits (a suffix)"
            self.stats.crash[k] = self.stats.crash.get(k, 0) + 1
        if max(survived) == 0:
            after = strip_atime(snap.snapshot(env.mnt))
            d = snap.diff(before, after)
            if d:
                raise Failure(oracle, "tree", f"after {label} and recovery the mount is not the "
                              "snapshot before:\n  " + "\n  ".join(d))
        self._umount_fsck(oracle)
        self._drop_store(None)

    # -- one case, any oracle ----------------------------------------------------
    def check(self, case) -> Failure | None:
        """Runs the case; returns its Failure (environment cleaned for the next run)."""
        oracle = case["oracle"]
        try:
            if oracle == "abort":
                self.run_abort(case)
            elif oracle == "commit":
                self.run_commit(case, txn=True)
            elif oracle == "plain":
                self.run_commit(case, txn=False)
            elif oracle == "crash":
                self.run_crash(case)
            else:
                raise ValueError(oracle)
            return None
        except Failure as f:
            f.oracle = f.oracle or oracle
            f.case = case
            self._reset()
            return f
        except Exception as e:  # noqa: BLE001 - an unexpected error is a failure too
            import traceback
            f = Failure(oracle, f"error:{type(e).__name__}", f"{e!r}\n{traceback.format_exc()[-3000:]}")
            f.case = case
            self._reset()
            return f

    def _xfs_state(self) -> str:
        """What the backing XFS looked like when a mount after a crash failed: rare power-cut
        runs found a store that `txnfs init` had synced missing after the remount."""
        env = self.env
        out = []
        for cmd in (["findmnt", "-n", str(env.xfs)], ["losetup", "-j", str(env.image)],
                    ["ls", "-la", str(env.xfs)], ["dmesg", "--ctime"]):
            p = tl.run(cmd)
            text = (p.stdout + p.stderr).splitlines()
            out.append(f"$ {' '.join(cmd)}\n" + "\n".join(text[-25:]))
        return "\n".join(out)

    def _reset(self):
        """After a failure: no daemon, no FUSE mount, the XFS image mounted."""
        env = self.env
        try:
            env.kill()
        except Exception:  # noqa: BLE001
            pass
        if not tl.is_mounted(env.xfs):
            env.mount_xfs()
        else:
            # a power cut leaves XFS shut down: remount it
            try:
                os.statvfs(env.xfs)
                os.listdir(env.xfs)
            except OSError:
                env.umount_xfs()
                env.mount_xfs()

    # -- shrinking ---------------------------------------------------------------
    def shrink(self, fail: Failure, budget_s=120.0, max_runs=80) -> tuple[dict, int]:
        """Delta debugging (ddmin) over the (process, op) list while the failure keeps its
        oracle and kind. Returns (minimal case, runs)."""
        case = fail.case
        items = [(k, i) for k, lst in enumerate(case["lists"]) for i in range(len(lst))]
        t0 = time.monotonic()
        runs = 0

        def build(sub):
            lists = [[] for _ in case["lists"]]
            for k, i in sub:
                lists[k].append(case["lists"][k][i])
            c = dict(case, lists=lists)
            if "crash" in case:
                c["crash"] = dict(case["crash"], after=min(case["crash"]["after"], max(0, len(sub) - 1)))
            return c

        def fails(sub):
            nonlocal runs
            if runs >= max_runs or time.monotonic() - t0 > budget_s:
                return False
            runs += 1
            # a stall is known to be one already: no need to wait the full deadline again
            # (lock waits are 250 ms on these mounts; 10 s is no ordinary slowness)
            saved = self.deadline
            if fail.kind == "stall":
                self.deadline = min(saved, 10.0)
            try:
                f = self.check(build(sub))
            finally:
                self.deadline = saved
            return f is not None and f.kind == fail.kind

        n = 2
        while len(items) >= 2:
            chunk = max(1, len(items) // n)
            subsets = [items[j:j + chunk] for j in range(0, len(items), chunk)]
            reduced = False
            for s in subsets:
                if fails(s):
                    items, n, reduced = s, 2, True
                    break
            if not reduced:
                for s in subsets:
                    comp = [x for x in items if x not in s]
                    if comp and fails(comp):
                        items, n, reduced = comp, max(n - 1, 2), True
                        break
            if not reduced:
                if n >= len(items):
                    break
                n = min(len(items), n * 2)
            if runs >= max_runs or time.monotonic() - t0 > budget_s:
                break
        return build(items), runs


class Observer:
    """A plain reader (a thread of this process, which no transaction binds) that takes
    snapshots of the mount over and over while a transaction runs -- and, for the abort
    oracle, while it is rolled back. The committed state stays `expected` all that time,
    so every entry of every snapshot must equal it (atime aside): anything else is the
    transaction's uncommitted or rolled-back state reaching a plain reader, through the
    daemon or a kernel cache. The transaction, for its part, must keep seeing its own
    changes whatever the reader made the kernel cache: the commit oracle checks that
    against XFS."""

    def __init__(self, mnt, expected: dict, lists):
        import threading
        self.mnt = mnt
        # Names a transaction's rename touched are exempt, with everything below them: the
        # kernel moves its cached dentry to the new name, which other processes may see
        # until the transaction ends (docs/isolation.md, "Renames by a transaction").
        self.exempt = sorted({o[k] for lst in lists for o in lst if o["o"] == "rename"
                              for k in ("p", "q")})
        # The kernel caches POSIX ACLs per inode and updates that copy itself when the
        # transaction sets an ACL or a mode (docs/isolation.md, "POSIX ACLs"): the ACL
        # xattrs of what it chmods or sets xattrs on are not judged.
        self.acl_exempt = {o["p"] for lst in lists for o in lst
                           if o["o"] in ("chmod", "setxattr", "removexattr")}
        self.expected = self._judged(expected)
        self.snapshots = 0
        self.failure: str | None = None
        self._rng = random.Random(len(self.expected))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        while not self._stop.is_set() and self.failure is None:
            try:
                # Exempt names are not visited at all: a plain lookup of the committed
                # place of a directory the transaction moved would make the kernel move
                # that directory's one dentry back there, under the transaction's feet.
                got = self._judged(strip_atime(snap.snapshot(self.mnt, skip=self._is_exempt)))
            except OSError as e:
                self.failure = f"a plain reader failed on a committed path: {e}"
                return
            if got != self.expected:
                self.failure = ("a plain reader saw state that was never committed "
                                "(expected = committed):\n  "
                                + "\n  ".join(snap.diff(self.expected, got)))
                return
            self.failure = self._continued_listings()
            self.snapshots += 1
            time.sleep(0.001)

    def _continued_listings(self) -> str | None:
        """Every directory listed in two parts on two handles, as NFS-Ganesha continues a
        READDIR (it opens the directory for each) and as seekdir after a reopen does: the
        first k entries, telldir, close; open, seekdir, the rest. Together they must be
        the committed names, each once, also while the transaction changes the directory
        or is rolled back in between (an offset means the same thing to every opener).
        Only listings begun while the transaction is open are judged: one begun before
        it goes on streaming the directory as it is (docs/isolation.md, "Limits")."""
        if not tl.txn_status(self.mnt)["transactions"]:
            return None
        for rel, e in self.expected.items():
            if "entries" not in e:
                continue
            k = self._rng.randint(1, len(e["entries"]) + 2)
            try:
                got = tl.continued_listing(os.path.join(self.mnt, rel), k)
            except OSError as ex:
                return f"a plain listing of {rel} continued after {k} entries failed: {ex}"
            got = [n for n in got if n not in (".", "..")]
            if sorted(got) != e["entries"]:
                return (f"a plain listing of {rel} continued after {k} entries on a new handle "
                        f"gave {got}; committed: {e['entries']}")
        return None

    def _is_exempt(self, rel: str) -> bool:
        return any(rel == x or rel.startswith(x + "/") for x in self.exempt)

    def _judged(self, snapshot: dict) -> dict:
        out = {}
        for rel, e in snapshot.items():
            if self._is_exempt(rel):
                continue
            if rel in self.acl_exempt:
                e = dict(e, xattrs={k: v for k, v in e["xattrs"].items()
                                    if not k.startswith("system.posix_acl_")})
            out[rel] = e
        return out

    def stop(self) -> str | None:
        """Stops it; the violation it saw, or None."""
        self._stop.set()
        self._thread.join(OP_DEADLINE)
        if self._thread.is_alive():
            return "the plain observer's snapshot did not return (stalled)"
        return self.failure


class Bystander:
    """An idle transaction of another process, open while plain requests run (the daemon
    takes its plain-isolated paths then)."""

    def __init__(self, mnt):
        self.mnt = mnt
        r, self.w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.w)
            os.read(r, 1)
            os._exit(0)
        os.close(r)
        rc, self.tid = tl.txn_begin_rc(mnt, tl.TXNFS_BIND_PROCESS, self.pid)
        if rc != 0:
            self.close()
            raise Failure("plain", "begin", f"bystander txnfs_begin: {os.strerror(-rc)}")

    def close(self):
        if self.tid:
            tl.txn_abort(self.mnt, self.tid)
            self.tid = None
        os.close(self.w)
        os.waitpid(self.pid, 0)


def _with_deadline(fn, timeout):
    """fn() on a thread; 'stall' if it does not return in time."""
    import threading
    out = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(timeout)
    return out[0] if out else "stall"


def format_case(case: dict) -> str:
    """A runnable reproducer: JSON with one op per line (tests/fuzz/run --replay FILE)."""
    head = {k: v for k, v in case.items() if k != "lists"}
    lines = ["{", f'  "meta": {json.dumps(head)},', '  "lists": [']
    for k, lst in enumerate(case["lists"]):
        lines.append("    [")
        lines += [f"      {json.dumps(o)}{',' if i < len(lst) - 1 else ''}" for i, o in enumerate(lst)]
        lines.append("    ]" + ("," if k < len(case["lists"]) - 1 else ""))
    lines += ["  ]", "}"]
    return "\n".join(lines)


def parse_case(text: str) -> dict:
    j = json.loads(text)
    return dict(j["meta"], lists=j["lists"])


# --------------------------------------------------------------------------
# the soak driver (CLI and tests)
# --------------------------------------------------------------------------

def report(f: Failure, shrunk: dict | None, runs: int) -> str:
    c = f.case
    lines = [f"FAILURE seed {c['seed']} oracle {f.oracle} procs {c['procs']}: {f.kind}",
             f"  {f.detail}"]
    best = shrunk or c
    fdir = Path(tempfile.mkdtemp(prefix=f"txnfs-fuzz-fail-{c['seed']}-{f.oracle}-"))
    (fdir / "case.json").write_text(format_case(best) + "\n")
    if f.report:
        (fdir / "report.txt").write_text(f.report)
        # the daemon's own frames first (a stall: who waits for what)
        own = [ln for ln in f.report.splitlines() if "txnfs::" in ln or ln.startswith("Thread ")]
        lines.append("  " + "\n  ".join(own[:80]))
        lines.append(f"  full report: {fdir / 'report.txt'}")
    lines.append(f"  reproducer file: {fdir / 'case.json'}")
    n = sum(len(x) for x in best["lists"])
    lines.append(f"  reproducer ({n} ops{', minimised in ' + str(runs) + ' runs' if shrunk else ''}; "
                 f"save as FILE, run: tests/fuzz/run --replay FILE):")
    lines.append(format_case(best))
    return "\n".join(lines)


def soak(fuzzer: Fuzzer, seed0: int, nseeds: int, oracles, procs_list, nops, log=print,
         shrink=True, shrink_seconds=300.0, keep_going=True, crash_kind=None, point=None,
         shrink_runs=200) -> list[str]:
    """Runs every (oracle, procs) for seeds seed0..; returns the failure reports."""
    out = []
    st = fuzzer.stats
    for s in range(seed0, seed0 + nseeds):
        for oracle in oracles:
            for procs in procs_list:
                case = gen_case(s, oracle, procs, nops)
                if oracle == "crash" and (crash_kind or point):
                    c = case["crash"]
                    if point:
                        c["kind"] = "inject"
                        c["point"] = point if ":" in point else f"{point}:1"
                    else:
                        c["kind"] = crash_kind
                        if crash_kind != "inject":
                            c.pop("point", None)
                        elif "point" not in c:
                            c["point"] = f"{random.Random(s).choice(crash_point_names())}:1"
                key = f"{oracle}/{procs}"
                st.runs[key] = st.runs.get(key, 0) + 1
                st.count_ops(case["lists"])
                t0 = time.monotonic()
                f = fuzzer.check(case)
                log(f"seed {s} {oracle} procs {procs}"
                    f"{' ' + case['crash']['kind'] + ' ' + case['crash'].get('point', '') if oracle == 'crash' else ''}"
                    f": {'FAIL ' + f.kind if f else 'ok'} ({time.monotonic() - t0:.1f} s)")
                if f is None:
                    continue
                shrunk, runs = (None, 0)
                if shrink:
                    shrunk, runs = fuzzer.shrink(f, budget_s=shrink_seconds, max_runs=shrink_runs)
                    # confirm the minimal case once more (and get its detail)
                    f2 = fuzzer.check(shrunk)
                    if f2 is not None and f2.kind == f.kind:
                        f2.case = shrunk
                        f.detail = f.detail + "\n  minimised case fails with: " + f2.detail
                    else:
                        shrunk = None
                r = report(f, shrunk, runs)
                log(r)
                out.append(r)
                st.failures.append(r)
                if not keep_going:
                    return out
    return out


def summary(st: Stats) -> str:
    lines = ["runs: " + ", ".join(f"{k} {v}" for k, v in sorted(st.runs.items()))]
    lines.append(f"ops covered ({len(st.ops)} of {len(GEN_OPS)}): "
                 + ", ".join(f"{k} {v}" for k, v in sorted(st.ops.items())))
    missing = sorted(set(GEN_OPS) - set(st.ops))
    if missing:
        lines.append(f"ops not generated: {missing}")
    lines.append("flags covered: " + ", ".join(f"{k} {v}" for k, v in sorted(st.flags.items())))
    if st.crash:
        lines.append("crashes: " + ", ".join(f"{k} {v}" for k, v in sorted(st.crash.items())))
    if st.observed:
        lines.append("plain observer: " + ", ".join(f"{k} {v}" for k, v in sorted(st.observed.items())))
    lines.append("documented divergences met: " + (", ".join(
        f"{k} {v}" for k, v in sorted(st.divergences.items())) or "none"))
    lines.append(f"failures: {len(st.failures)}")
    return "\n".join(lines)
