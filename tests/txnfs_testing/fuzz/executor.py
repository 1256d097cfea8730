"""Executing one op, in a worker process: exec_op(root, op) runs it under `root` (as
nobody, under a umask, where the op says so) and returns its comparable result --
{"v": value} or {"e": "ENOENT"} -- the same way on the txnfs mount and on plain XFS.
File handles an op keeps for later ops of its process live here too (_HANDLES).
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import mmap
import os
import stat
import struct

from txnfs_testing import txnfs_lib as tl
from txnfs_testing.fuzz.syscalls import (
    ACLS, AT_SYMLINK_NOFOLLOW, FALLOC_FLAGS, FS_IOC_GETFLAGS, OPEN_ACCESS, OPEN_EXTRA,
    RENAME_FLAGS, XATTR_FLAGS, data, utimensat)


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
