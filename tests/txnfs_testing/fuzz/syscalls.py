"""The fuzzer's flag tables and the syscalls Python lacks (ctypes): what the generator
picks from and the executor passes to the kernel.

    RENAME_FLAGS, FALLOC_FLAGS, OPEN_ACCESS/OPEN_EXTRA (OPEN_FLAGS), XATTR_FLAGS
    utimensat()          with UTIME_NOW / UTIME_OMIT and AT_SYMLINK_NOFOLLOW
    posix_acl(), ACLS    POSIX ACL xattr values (a minimal one, one naming nobody, a bad one)
    data(n, seed)        n seeded bytes
"""

from __future__ import annotations

import ctypes
import os
import random
import struct

from txnfs_testing import txnfs_lib as tl


NOBODY = tl.NOBODY_UID

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
