"""Every file-system operation through a txnfs mount, checked against POSIX/Linux
expectations and against the backing tree (STORE/tree), which must show each change."""

from __future__ import annotations

import errno
import hashlib
import os
import stat

import pytest

from txnfs_testing import txnfs_lib as tl

KiB = 1024
MiB = 1024 * KiB


write_file = tl.write_file


def read_file(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def pread_all(fd, size, off=0) -> bytes:
    out = bytearray()
    while len(out) < size:
        b = os.pread(fd, size - len(out), off + len(out))
        if not b:
            break
        out += b
    return bytes(out)


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

def test_create_read_write_overwrite_append(mnt):
    p = mnt.path / "f"
    b = mnt.store.tree / "f"
    write_file(p, b"hello world")
    assert read_file(p) == b"hello world"
    assert os.stat(p).st_size == 11
    assert read_file(b) == b"hello world"

    # overwrite in the middle
    fd = os.open(p, os.O_WRONLY)
    assert os.pwrite(fd, b"WORLD", 6) == 5
    os.close(fd)
    assert read_file(p) == b"hello WORLD"

    # write past EOF leaves a zero-filled gap
    fd = os.open(p, os.O_RDWR)
    os.pwrite(fd, b"!", 20)
    assert pread_all(fd, 100) == b"hello WORLD" + b"\0" * 9 + b"!"
    os.close(fd)

    # append
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"tail")
    os.close(fd)
    expect = b"hello WORLD" + b"\0" * 9 + b"!tail"
    assert read_file(p) == expect
    assert os.stat(p).st_size == len(expect)
    assert read_file(b) == expect

    # O_TRUNC rewrite
    write_file(p, b"short")
    assert read_file(p) == b"short"
    assert read_file(b) == b"short"


def test_read_write_same_fd_and_two_fds(mnt):
    p = mnt.path / "rw"
    fd1 = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
    fd2 = os.open(p, os.O_RDWR)
    try:
        os.write(fd1, b"abcdef")
        assert os.pread(fd2, 6, 0) == b"abcdef"
        os.pwrite(fd2, b"XY", 2)
        assert os.pread(fd1, 6, 0) == b"abXYef"
    finally:
        os.close(fd1)
        os.close(fd2)
    assert read_file(mnt.store.tree / "rw") == b"abXYef"


def test_truncate_grow_and_shrink(mnt):
    p = mnt.path / "t"
    b = mnt.store.tree / "t"
    write_file(p, b"0123456789")
    os.truncate(p, 4)
    assert os.stat(p).st_size == 4
    assert read_file(p) == b"0123"
    os.truncate(p, 1 * MiB)
    assert os.stat(p).st_size == 1 * MiB
    data = read_file(p)
    assert data[:4] == b"0123" and data[4:] == b"\0" * (MiB - 4)
    fd = os.open(p, os.O_RDWR)
    os.ftruncate(fd, 2)
    os.close(fd)
    assert read_file(p) == b"01"
    assert os.stat(b).st_size == 2 and read_file(b) == b"01"
    os.truncate(p, 0)
    assert os.stat(p).st_size == 0 and os.stat(b).st_size == 0


def test_mmap_shared_write_and_read(mnt):
    import mmap
    p = mnt.path / "mm"
    write_file(p, b"\0" * (2 * MiB))
    fd = os.open(p, os.O_RDWR)
    try:
        with mmap.mmap(fd, 2 * MiB, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as mm:
            mm[0:5] = b"mmap!"
            mm[MiB:MiB + 4] = b"page"
            mm.flush()
        with mmap.mmap(fd, 2 * MiB, mmap.MAP_SHARED, mmap.PROT_READ) as mm:
            assert mm[0:5] == b"mmap!"
    finally:
        os.close(fd)
    data = read_file(mnt.store.tree / "mm")
    assert data[0:5] == b"mmap!" and data[MiB:MiB + 4] == b"page"
    assert len(data) == 2 * MiB


def test_large_file_checksum(mnt):
    p = mnt.path / "big"
    h = hashlib.sha256()
    chunk = os.urandom(MiB)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for i in range(64):
            c = bytes([i]) + chunk[1:]
            h.update(c)
            view = memoryview(c)
            while view:
                view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    assert os.stat(p).st_size == 64 * MiB
    assert tl.sha256_file(p) == h.hexdigest()
    assert tl.sha256_file(mnt.store.tree / "big") == h.hexdigest()
    # and after a remount (no page cache involved)
    mnt.remount()
    assert tl.sha256_file(p) == h.hexdigest()


# --------------------------------------------------------------------------
# attributes
# --------------------------------------------------------------------------

def test_chmod_chown_utime_ns(mnt):
    p = mnt.path / "a"
    b = mnt.store.tree / "a"
    write_file(p, b"x")
    os.chmod(p, 0o4751)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o4751
    assert stat.S_IMODE(os.stat(b).st_mode) == 0o4751
    os.chmod(p, 0o640)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o640

    os.chown(p, 1234, 5678)
    st = os.stat(p)
    assert (st.st_uid, st.st_gid) == (1234, 5678)
    st = os.stat(b)
    assert (st.st_uid, st.st_gid) == (1234, 5678)
    os.chown(p, -1, 42)
    assert (os.stat(p).st_uid, os.stat(p).st_gid) == (1234, 42)

    atime = 1_600_000_000_123_456_789
    mtime = 1_500_000_000_987_654_321
    os.utime(p, ns=(atime, mtime))
    st = os.stat(p)
    assert (st.st_atime_ns, st.st_mtime_ns) == (atime, mtime)
    st = os.stat(b)
    assert (st.st_atime_ns, st.st_mtime_ns) == (atime, mtime)

    # utime on a symlink itself (lutimes) and fd-based futimens
    os.symlink("a", mnt.path / "l")
    os.utime(mnt.path / "l", ns=(atime, mtime), follow_symlinks=False)
    st = os.lstat(mnt.path / "l")
    assert st.st_mtime_ns == mtime
    fd = os.open(p, os.O_RDONLY)
    os.utime(fd, ns=(atime + 1, mtime + 1))
    os.close(fd)
    assert os.stat(p).st_mtime_ns == mtime + 1

    # utime(None) sets both times to "now"
    import time as _time
    now = _time.time_ns()
    os.utime(p)
    st = os.stat(p)
    assert abs(st.st_mtime_ns - now) < 5 * 10**9 and abs(st.st_atime_ns - now) < 5 * 10**9
    os.utime(p, ns=(atime, mtime))

    # a write updates mtime and ctime to "now"
    before = os.stat(p)
    fd = os.open(p, os.O_WRONLY)
    os.write(fd, b"y")
    os.close(fd)
    after = os.stat(p)
    assert after.st_mtime_ns > before.st_mtime_ns
    assert after.st_ctime_ns >= before.st_ctime_ns


def test_chmod_dir_and_ctime(mnt):
    d = mnt.path / "d"
    os.mkdir(d, 0o755)
    c0 = os.stat(d).st_ctime_ns
    os.chmod(d, 0o700)
    st = os.stat(d)
    assert stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_ctime_ns >= c0
    assert stat.S_IMODE(os.stat(mnt.store.tree / "d").st_mode) == 0o700


# --------------------------------------------------------------------------
# node types
# --------------------------------------------------------------------------

def test_mknod_fifo_and_chardev(mnt):
    f = mnt.path / "fifo"
    os.mkfifo(f, 0o640)
    st = os.lstat(f)
    assert stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o640
    assert stat.S_ISFIFO(os.lstat(mnt.store.tree / "fifo").st_mode)

    c = mnt.path / "null2"
    os.mknod(c, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    st = os.lstat(c)
    assert stat.S_ISCHR(st.st_mode)
    assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3)
    st = os.lstat(mnt.store.tree / "null2")
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)

    # a regular file through mknod
    r = mnt.path / "reg"
    os.mknod(r, stat.S_IFREG | 0o600)
    assert stat.S_ISREG(os.lstat(r).st_mode) and os.lstat(r).st_size == 0


def test_mkdir_rmdir(mnt):
    d = mnt.path / "d"
    os.mkdir(d, 0o750)
    st = os.stat(d)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o750
    assert st.st_nlink == 2
    os.mkdir(d / "sub")
    os.mkdir(d / "sub2")
    assert os.stat(d).st_nlink == 4
    assert (mnt.store.tree / "d" / "sub").is_dir()
    os.rmdir(d / "sub")
    assert os.stat(d).st_nlink == 3
    assert not (mnt.store.tree / "d" / "sub").exists()
    os.rmdir(d / "sub2")
    os.rmdir(d)
    assert not os.path.exists(d)
    assert not (mnt.store.tree / "d").exists()


def test_unlink(mnt):
    p = mnt.path / "u"
    write_file(p, b"data")
    os.unlink(p)
    assert not os.path.lexists(p)
    assert not os.path.lexists(mnt.store.tree / "u")
    # an open file stays readable after unlink
    write_file(p, b"still here")
    fd = os.open(p, os.O_RDONLY)
    os.unlink(p)
    assert os.pread(fd, 100, 0) == b"still here"
    os.close(fd)
    assert not os.path.lexists(mnt.store.tree / "u")


def test_symlink_readlink(mnt):
    write_file(mnt.path / "target", b"T")
    os.symlink("target", mnt.path / "ln")
    assert os.readlink(mnt.path / "ln") == "target"
    assert stat.S_ISLNK(os.lstat(mnt.path / "ln").st_mode)
    assert read_file(mnt.path / "ln") == b"T"
    assert os.readlink(mnt.store.tree / "ln") == "target"
    # dangling and absolute targets are stored verbatim
    os.symlink("/nonexistent/x/y", mnt.path / "dangling")
    assert os.readlink(mnt.path / "dangling") == "/nonexistent/x/y"
    long_target = "a/" * 500 + "end"
    os.symlink(long_target, mnt.path / "long")
    assert os.readlink(mnt.path / "long") == long_target
    assert os.lstat(mnt.path / "long").st_size == len(long_target)


def test_hard_link_counts(mnt):
    a = mnt.path / "a"
    write_file(a, b"shared")
    os.mkdir(mnt.path / "d")
    os.link(a, mnt.path / "b")
    os.link(a, mnt.path / "d" / "c")
    sa, sb, sc = (os.stat(x) for x in (a, mnt.path / "b", mnt.path / "d" / "c"))
    assert sa.st_nlink == sb.st_nlink == sc.st_nlink == 3
    assert sa.st_ino == sb.st_ino == sc.st_ino
    assert os.stat(mnt.store.tree / "a").st_nlink == 3
    assert os.stat(mnt.store.tree / "d" / "c").st_ino == os.stat(mnt.store.tree / "a").st_ino
    # writes through one name are seen through the others
    with open(mnt.path / "b", "r+b") as f:
        f.write(b"SHARED")
    assert read_file(mnt.path / "d" / "c") == b"SHARED"
    os.unlink(a)
    assert os.stat(mnt.path / "b").st_nlink == 2
    os.unlink(mnt.path / "b")
    assert os.stat(mnt.path / "d" / "c").st_nlink == 1
    assert read_file(mnt.path / "d" / "c") == b"SHARED"


# --------------------------------------------------------------------------
# rename
# --------------------------------------------------------------------------

def test_rename_file_and_dir(mnt):
    write_file(mnt.path / "f", b"F")
    ino = os.stat(mnt.path / "f").st_ino
    os.rename(mnt.path / "f", mnt.path / "g")
    assert not os.path.lexists(mnt.path / "f")
    assert read_file(mnt.path / "g") == b"F"
    assert os.stat(mnt.path / "g").st_ino == ino
    assert read_file(mnt.store.tree / "g") == b"F"
    assert not (mnt.store.tree / "f").exists()

    os.makedirs(mnt.path / "d1" / "inner")
    write_file(mnt.path / "d1" / "inner" / "x", b"X")
    os.mkdir(mnt.path / "d2")
    os.rename(mnt.path / "d1", mnt.path / "d2" / "moved")
    assert read_file(mnt.path / "d2" / "moved" / "inner" / "x") == b"X"
    assert not os.path.exists(mnt.path / "d1")
    assert read_file(mnt.store.tree / "d2" / "moved" / "inner" / "x") == b"X"
    assert os.stat(mnt.path / "d2").st_nlink == 3
    # rename to itself is a no-op
    os.rename(mnt.path / "g", mnt.path / "g")
    assert read_file(mnt.path / "g") == b"F"


def test_rename_over_existing(mnt):
    write_file(mnt.path / "src", b"new")
    write_file(mnt.path / "dst", b"old contents")
    src_ino = os.stat(mnt.path / "src").st_ino
    os.rename(mnt.path / "src", mnt.path / "dst")
    assert read_file(mnt.path / "dst") == b"new"
    assert os.stat(mnt.path / "dst").st_ino == src_ino
    assert not os.path.exists(mnt.path / "src")
    assert read_file(mnt.store.tree / "dst") == b"new"
    # a directory over an empty directory
    os.mkdir(mnt.path / "da")
    write_file(mnt.path / "da" / "in", b"1")
    os.mkdir(mnt.path / "db")
    os.rename(mnt.path / "da", mnt.path / "db")
    assert os.listdir(mnt.path / "db") == ["in"]
    assert not os.path.exists(mnt.path / "da")
    assert sorted(os.listdir(mnt.store.tree)) == ["db", "dst"]


def test_rename_noreplace(mnt):
    write_file(mnt.path / "a", b"A")
    write_file(mnt.path / "b", b"B")
    with pytest.raises(OSError) as ei:
        tl.renameat2(mnt.path / "a", mnt.path / "b", tl.RENAME_NOREPLACE)
    assert ei.value.errno == errno.EEXIST
    assert read_file(mnt.path / "a") == b"A" and read_file(mnt.path / "b") == b"B"
    tl.renameat2(mnt.path / "a", mnt.path / "c", tl.RENAME_NOREPLACE)
    assert read_file(mnt.path / "c") == b"A" and not os.path.exists(mnt.path / "a")
    assert read_file(mnt.store.tree / "c") == b"A"


def test_rename_exchange(mnt):
    write_file(mnt.path / "a", b"A")
    os.mkdir(mnt.path / "d")
    write_file(mnt.path / "d" / "inside", b"I")
    ia, id_ = os.stat(mnt.path / "a").st_ino, os.stat(mnt.path / "d").st_ino
    tl.renameat2(mnt.path / "a", mnt.path / "d", tl.RENAME_EXCHANGE)
    assert read_file(mnt.path / "d") == b"A"
    assert read_file(mnt.path / "a" / "inside") == b"I"
    assert os.stat(mnt.path / "d").st_ino == ia and os.stat(mnt.path / "a").st_ino == id_
    assert read_file(mnt.store.tree / "d") == b"A"
    assert read_file(mnt.store.tree / "a" / "inside") == b"I"
    with pytest.raises(OSError) as ei:
        tl.renameat2(mnt.path / "a", mnt.path / "missing", tl.RENAME_EXCHANGE)
    assert ei.value.errno == errno.ENOENT


# --------------------------------------------------------------------------
# open / readdir / sync / statfs / access
# --------------------------------------------------------------------------

def test_open_excl(mnt):
    p = mnt.path / "x"
    fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    with pytest.raises(OSError) as ei:
        os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    assert ei.value.errno == errno.EEXIST
    os.symlink("x", mnt.path / "lx")
    with pytest.raises(OSError) as ei:
        os.open(mnt.path / "lx", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    assert ei.value.errno == errno.EEXIST


def test_create_mode_honours_umask(mnt):
    old = os.umask(0o027)
    try:
        fd = os.open(mnt.path / "m", os.O_CREAT | os.O_WRONLY, 0o777)
        os.close(fd)
        os.mkdir(mnt.path / "md", 0o777)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(mnt.path / "m").st_mode) == 0o750
    assert stat.S_IMODE(os.stat(mnt.path / "md").st_mode) == 0o750


def test_readdir_names_and_types(mnt):
    m = mnt.path
    write_file(m / "file", b"")
    os.mkdir(m / "dir")
    os.symlink("file", m / "link")
    os.mkfifo(m / "fifo")
    os.mknod(m / "chr", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    ents = tl.readdir_types(m)
    assert set(ents) == {".", "..", "file", "dir", "link", "fifo", "chr"}
    types = {n: t for n, (t, _) in ents.items()}
    assert types["file"] == tl.DT_REG
    assert types["dir"] == tl.DT_DIR
    assert types["link"] == tl.DT_LNK
    assert types["fifo"] == tl.DT_FIFO
    assert types["chr"] == tl.DT_CHR
    assert types["."] == tl.DT_DIR
    # d_ino agrees with stat through the mount
    for n in ("file", "dir", "link"):
        assert ents[n][1] == os.lstat(m / n).st_ino, n
    # a large directory lists completely (several readdir batches)
    os.mkdir(m / "many")
    names = {f"entry-{i:04d}-" + "x" * 40 for i in range(600)}
    for n in names:
        write_file(m / "many" / n, b"")
    assert set(os.listdir(m / "many")) == names
    assert set(os.listdir(mnt.store.tree / "many")) == names


def test_fsync_fdatasync_fsyncdir(mnt):
    p = mnt.path / "s"
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"sync me")
    os.fsync(fd)
    os.write(fd, b" again")
    os.fdatasync(fd)
    os.close(fd)
    dfd = os.open(mnt.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    os.mkdir(mnt.path / "sub")
    dfd = os.open(mnt.path / "sub", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    os.sync()
    assert read_file(mnt.store.tree / "s") == b"sync me again"


def test_statfs(mnt):
    sv = os.statvfs(mnt.path)
    bk = os.statvfs(mnt.store.tree)
    assert sv.f_bsize > 0 and sv.f_frsize > 0
    assert sv.f_blocks > 0
    assert 0 < sv.f_bfree <= sv.f_blocks and sv.f_bavail <= sv.f_bfree
    assert sv.f_files > 0 and sv.f_ffree <= sv.f_files
    assert sv.f_namemax >= 255
    # it describes the backing file system (the 1 GiB image), within 10 %
    assert abs(sv.f_blocks * sv.f_frsize - bk.f_blocks * bk.f_frsize) <= 0.1 * bk.f_blocks * bk.f_frsize


def test_access(mnt):
    p = mnt.path / "acc"
    os.chmod(mnt.path, 0o755)
    write_file(p, b"", mode=0o640)
    os.chmod(p, 0o640)
    assert os.access(p, os.F_OK)
    assert os.access(p, os.R_OK | os.W_OK)
    assert not os.access(p, os.X_OK)          # root needs an x bit for X_OK
    assert not os.access(mnt.path / "missing", os.F_OK)
    os.chmod(p, 0o755)
    assert os.access(p, os.X_OK)
    os.chmod(p, 0o640)
    assert tl.as_user(os.access, str(p), os.R_OK) is False
    os.chmod(p, 0o644)
    assert tl.as_user(os.access, str(p), os.R_OK) is True
    assert tl.as_user(os.access, str(p), os.W_OK) is False


# --------------------------------------------------------------------------
# xattrs
# --------------------------------------------------------------------------

def test_xattrs(mnt):
    p = mnt.path / "xa"
    write_file(p, b"")
    os.setxattr(p, "user.color", b"blue")
    os.setxattr(p, "user.bin", bytes(range(256)))
    assert os.getxattr(p, "user.color") == b"blue"
    assert os.getxattr(p, "user.bin") == bytes(range(256))
    assert {"user.color", "user.bin"} <= set(os.listxattr(p))
    assert os.getxattr(mnt.store.tree / "xa", "user.color") == b"blue"

    os.setxattr(p, "user.color", b"red")
    assert os.getxattr(p, "user.color") == b"red"
    with pytest.raises(OSError) as ei:
        os.setxattr(p, "user.color", b"x", os.XATTR_CREATE)
    assert ei.value.errno == errno.EEXIST
    with pytest.raises(OSError) as ei:
        os.setxattr(p, "user.nope", b"x", os.XATTR_REPLACE)
    assert ei.value.errno == errno.ENODATA

    os.removexattr(p, "user.color")
    assert "user.color" not in os.listxattr(p)
    with pytest.raises(OSError) as ei:
        os.getxattr(p, "user.color")
    assert ei.value.errno == errno.ENODATA
    with pytest.raises(OSError) as ei:
        os.removexattr(p, "user.color")
    assert ei.value.errno == errno.ENODATA
    assert "user.color" not in os.listxattr(mnt.store.tree / "xa")

    # on a directory too, and an empty value
    os.mkdir(mnt.path / "xd")
    os.setxattr(mnt.path / "xd", "user.empty", b"")
    assert os.getxattr(mnt.path / "xd", "user.empty") == b""
    # a large value (64 KiB is the VFS limit)
    big = os.urandom(60 * KiB)
    os.setxattr(p, "user.big", big)
    assert os.getxattr(p, "user.big") == big


# --------------------------------------------------------------------------
# fallocate, holes, copy_file_range
# --------------------------------------------------------------------------

def test_fallocate_and_punch_hole(mnt):
    p = mnt.path / "fa"
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, 1 * MiB)
        assert os.fstat(fd).st_size == 1 * MiB
        assert os.pread(fd, 16, 4096) == b"\0" * 16
        # KEEP_SIZE: blocks allocated beyond EOF, size unchanged
        b0 = os.fstat(fd).st_blocks
        tl.fallocate(fd, tl.FALLOC_FL_KEEP_SIZE, 1 * MiB, 1 * MiB)
        st = os.fstat(fd)
        assert st.st_size == 1 * MiB
        assert st.st_blocks >= b0 + (MiB // 512)

        os.ftruncate(fd, 0)
        data = b"x" * (3 * MiB)
        os.pwrite(fd, data, 0)
        os.fsync(fd)
        blocks_before = os.fstat(fd).st_blocks
        tl.fallocate(fd, tl.FALLOC_FL_PUNCH_HOLE | tl.FALLOC_FL_KEEP_SIZE, 1 * MiB, 1 * MiB)
        st = os.fstat(fd)
        assert st.st_size == 3 * MiB
        got = pread_all(fd, 3 * MiB)
        assert got[:MiB] == b"x" * MiB
        assert got[MiB:2 * MiB] == b"\0" * MiB
        assert got[2 * MiB:] == b"x" * MiB
        assert st.st_blocks <= blocks_before - (MiB // 512)
        assert os.lseek(fd, 0, os.SEEK_HOLE) == 1 * MiB
    finally:
        os.close(fd)
    b = mnt.store.tree / "fa"
    assert os.stat(b).st_size == 3 * MiB
    assert read_file(b)[MiB:2 * MiB] == b"\0" * MiB
    bfd = os.open(b, os.O_RDONLY)
    try:
        assert os.lseek(bfd, 0, os.SEEK_HOLE) == 1 * MiB
    finally:
        os.close(bfd)


def test_seek_data_hole(mnt):
    p = mnt.path / "sparse"
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, b"a" * 4096, 0)
        os.pwrite(fd, b"b" * 4096, 16 * MiB)
        os.fsync(fd)
        size = 16 * MiB + 4096
        assert os.fstat(fd).st_size == size
        hole = os.lseek(fd, 0, os.SEEK_HOLE)
        assert 4096 <= hole < 16 * MiB
        assert os.lseek(fd, hole, os.SEEK_DATA) == 16 * MiB
        assert os.lseek(fd, 1 * MiB, os.SEEK_DATA) == 16 * MiB
        assert os.lseek(fd, 16 * MiB, os.SEEK_HOLE) == size
        assert os.lseek(fd, 0, os.SEEK_DATA) == 0
        with pytest.raises(OSError) as ei:
            os.lseek(fd, size, os.SEEK_DATA)
        assert ei.value.errno == errno.ENXIO
        assert os.pread(fd, 4, 8 * MiB) == b"\0" * 4
    finally:
        os.close(fd)


def test_copy_file_range(mnt):
    src = mnt.path / "src"
    dst = mnt.path / "dst"
    data = os.urandom(3 * MiB + 123)
    write_file(src, data)
    sfd = os.open(src, os.O_RDONLY)
    dfd = os.open(dst, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        copied = 0
        while copied < len(data):
            n = os.copy_file_range(sfd, dfd, len(data) - copied, copied, copied)
            assert n > 0
            copied += n
        # a partial range into the middle of the destination
        n = os.copy_file_range(sfd, dfd, 100, 10, 1000)
        assert n == 100
    finally:
        os.close(sfd)
        os.close(dfd)
    expect = bytearray(data)
    expect[1000:1100] = data[10:110]
    assert read_file(dst) == bytes(expect)
    assert read_file(mnt.store.tree / "dst") == bytes(expect)
    assert read_file(src) == data


# --------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------

def test_enoent(mnt):
    m = mnt.path
    assert tl.errno_of(os.stat, m / "nope") == errno.ENOENT
    assert tl.errno_of(os.open, m / "nope", os.O_RDONLY) == errno.ENOENT
    assert tl.errno_of(os.unlink, m / "nope") == errno.ENOENT
    assert tl.errno_of(os.rmdir, m / "nope") == errno.ENOENT
    assert tl.errno_of(os.rename, m / "nope", m / "other") == errno.ENOENT
    assert tl.errno_of(os.open, m / "nodir" / "f", os.O_CREAT | os.O_WRONLY) == errno.ENOENT
    assert tl.errno_of(os.readlink, m / "nope") == errno.ENOENT
    assert tl.errno_of(os.chmod, m / "nope", 0o600) == errno.ENOENT
    assert tl.errno_of(os.link, m / "nope", m / "l") == errno.ENOENT
    # a negative entry must not stick once the name exists
    write_file(m / "nope", b"now")
    assert read_file(m / "nope") == b"now"


def test_eexist(mnt):
    m = mnt.path
    write_file(m / "f", b"")
    os.mkdir(m / "d")
    assert tl.errno_of(os.mkdir, m / "d") == errno.EEXIST
    assert tl.errno_of(os.mkdir, m / "f") == errno.EEXIST
    assert tl.errno_of(os.symlink, "x", m / "f") == errno.EEXIST
    assert tl.errno_of(os.link, m / "f", m / "d") == errno.EEXIST
    assert tl.errno_of(os.mkfifo, m / "f") == errno.EEXIST
    assert tl.errno_of(os.mknod, m / "d", stat.S_IFREG | 0o600) == errno.EEXIST


def test_enotempty(mnt):
    m = mnt.path
    os.makedirs(m / "d" / "sub")
    os.mkdir(m / "e")
    write_file(m / "e" / "x", b"")
    assert tl.errno_of(os.rmdir, m / "d") == errno.ENOTEMPTY
    # POSIX allows EEXIST or ENOTEMPTY for a rename over a non-empty directory (XFS: EEXIST)
    assert tl.errno_of(os.rename, m / "d", m / "e") in (errno.ENOTEMPTY, errno.EEXIST)
    assert os.path.isdir(m / "d" / "sub") and os.path.isfile(m / "e" / "x")
    assert (mnt.store.tree / "d" / "sub").is_dir()


def test_enotdir(mnt):
    m = mnt.path
    write_file(m / "f", b"")
    os.mkdir(m / "d")
    assert tl.errno_of(os.open, m / "f" / "x", os.O_RDONLY) == errno.ENOTDIR
    assert tl.errno_of(os.mkdir, m / "f" / "x") == errno.ENOTDIR
    assert tl.errno_of(os.rmdir, m / "f") == errno.ENOTDIR
    assert tl.errno_of(os.listdir, m / "f") == errno.ENOTDIR
    assert tl.errno_of(os.open, m / "f", os.O_RDONLY | os.O_DIRECTORY) == errno.ENOTDIR
    assert tl.errno_of(os.rename, m / "d", m / "f") == errno.ENOTDIR


def test_eisdir(mnt):
    m = mnt.path
    os.mkdir(m / "d")
    write_file(m / "f", b"")
    assert tl.errno_of(os.open, m / "d", os.O_WRONLY) == errno.EISDIR
    assert tl.errno_of(os.open, m / "d", os.O_RDWR) == errno.EISDIR
    assert tl.errno_of(os.unlink, m / "d") == errno.EISDIR
    assert tl.errno_of(os.rename, m / "f", m / "d") == errno.EISDIR
    assert tl.errno_of(os.truncate, m / "d", 0) == errno.EISDIR
    fd = os.open(m / "d", os.O_RDONLY)
    try:
        assert tl.errno_of(os.read, fd, 10) == errno.EISDIR
    finally:
        os.close(fd)


def test_eloop(mnt):
    m = mnt.path
    write_file(m / "t", b"")
    os.symlink("t", m / "l")
    assert tl.errno_of(os.open, m / "l", os.O_RDONLY | os.O_NOFOLLOW) == errno.ELOOP
    os.symlink("b", m / "a")
    os.symlink("a", m / "b")
    assert tl.errno_of(os.open, m / "a", os.O_RDONLY) == errno.ELOOP
    assert tl.errno_of(os.stat, m / "a") == errno.ELOOP
    os.symlink("self", m / "self")
    assert tl.errno_of(os.stat, m / "self" ) == errno.ELOOP
    assert tl.errno_of(os.open, m / "self" / "x", os.O_RDONLY) == errno.ELOOP
    # lstat of a loop is fine
    assert stat.S_ISLNK(os.lstat(m / "a").st_mode)


# --------------------------------------------------------------------------
# permissions and ownership
# --------------------------------------------------------------------------

def test_eacces_as_nobody(mnt):
    m = mnt.path
    os.chmod(m, 0o755)  # other users must be able to traverse the mount root
    os.mkdir(m / "private", 0o700)
    os.chmod(m / "private", 0o700)
    write_file(m / "private" / "inner", b"secret")
    write_file(m / "secret", b"secret", mode=0o600)
    os.chmod(m / "secret", 0o600)

    def attempts():
        res = {}
        res["listdir"] = tl.errno_of(os.listdir, str(m / "private"))
        res["stat_child"] = tl.errno_of(os.stat, str(m / "private" / "inner"))
        res["create_in"] = tl.errno_of(os.open, str(m / "private" / "new"), os.O_CREAT | os.O_WRONLY, 0o644)
        res["mkdir_in"] = tl.errno_of(os.mkdir, str(m / "private" / "nd"))
        res["open_r"] = tl.errno_of(os.open, str(m / "secret"), os.O_RDONLY)
        res["open_w"] = tl.errno_of(os.open, str(m / "secret"), os.O_WRONLY)
        res["truncate"] = tl.errno_of(os.truncate, str(m / "secret"), 0)
        res["chmod"] = tl.errno_of(os.chmod, str(m / "secret"), 0o666)
        res["unlink_root_dir"] = tl.errno_of(os.unlink, str(m / "secret"))
        res["setxattr"] = tl.errno_of(os.setxattr, str(m / "secret"), "user.x", b"1")
        return res

    res = tl.as_user(attempts)
    assert res == {
        "listdir": errno.EACCES, "stat_child": errno.EACCES, "create_in": errno.EACCES,
        "mkdir_in": errno.EACCES, "open_r": errno.EACCES, "open_w": errno.EACCES,
        "truncate": errno.EACCES, "chmod": errno.EPERM, "unlink_root_dir": errno.EACCES,
        "setxattr": errno.EACCES,
    }
    # nothing changed
    assert read_file(m / "secret") == b"secret"
    assert stat.S_IMODE(os.stat(m / "secret").st_mode) == 0o600
    assert os.listdir(m / "private") == ["inner"]
    assert not (mnt.store.tree / "private" / "new").exists()


def test_ownership_of_objects_created_by_nobody(mnt):
    m = mnt.path
    os.chmod(m, 0o755)  # other users must be able to traverse the mount root
    os.mkdir(m / "pub", 0o777)
    os.chmod(m / "pub", 0o777)

    def create():
        fd = os.open(str(m / "pub" / "file"), os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, b"mine")
        os.close(fd)
        os.mkdir(str(m / "pub" / "dir"))
        os.symlink("file", str(m / "pub" / "link"))
        os.mkfifo(str(m / "pub" / "fifo"))
        os.mknod(str(m / "pub" / "node"), stat.S_IFREG | 0o600)
        # the creator can then use what it created
        os.chmod(str(m / "pub" / "file"), 0o600)
        with open(str(m / "pub" / "dir" / "nested"), "wb") as f:
            f.write(b"n")
        os.rename(str(m / "pub" / "node"), str(m / "pub" / "node2"))
        return open(str(m / "pub" / "file"), "rb").read()

    assert tl.as_user(create) == b"mine"
    for name in ("file", "dir", "link", "fifo", "node2", "dir/nested"):
        for root in (m / "pub", mnt.store.tree / "pub"):
            st = os.lstat(root / name)
            assert (st.st_uid, st.st_gid) == (tl.NOBODY_UID, tl.NOBODY_GID), (str(root / name), st.st_uid, st.st_gid)
    # and root's objects stay root's
    assert os.stat(m / "pub").st_uid == 0


def test_setgid_dir_inherits_group(mnt):
    m = mnt.path
    os.chmod(m, 0o755)  # other users must be able to traverse the mount root
    os.mkdir(m / "sg", 0o777)
    os.chown(m / "sg", 0, 4242)
    os.chmod(m / "sg", 0o2777)

    def create():
        with open(str(m / "sg" / "f"), "wb"):
            pass
        os.mkdir(str(m / "sg" / "d"))

    tl.as_user(create)
    st = os.stat(m / "sg" / "f")
    assert (st.st_uid, st.st_gid) == (tl.NOBODY_UID, 4242)
    st = os.stat(m / "sg" / "d")
    assert st.st_gid == 4242 and st.st_mode & stat.S_ISGID


# --------------------------------------------------------------------------
# the internal area stays hidden
# --------------------------------------------------------------------------

def test_internal_area_not_reachable(mnt):
    m = mnt.path
    names = set(os.listdir(m))
    assert ".txnfs" not in names and "meta.db" not in names and "tree" not in names
    # MOUNT/.txnfs is the directory of transactions' views (docs/isolation.md, "Views"),
    # not the store's internal area: nothing of that is in it
    assert os.listdir(m / ".txnfs") == []
    assert os.stat(m / ".txnfs").st_ino != os.stat(mnt.store.internal).st_ino
    assert tl.errno_of(os.stat, m / ".txnfs" / "meta.db") == errno.ENOENT
    assert tl.errno_of(os.stat, m / "meta.db") == errno.ENOENT
    # the mount root's parent is outside the mount, not the store
    assert os.path.realpath(m / "..") == str(mnt.path.parent)

    # crafted FUSE handles for the internal area's inodes must be stale, never the
    # internal files (the FUSE nodeid of an object is its backing inode number)
    mfd = os.open(m, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for target in (mnt.store.internal, mnt.store.db, mnt.store.path, mnt.store.tree):
            ino = os.stat(target).st_ino
            for gen in {tl.inode_generation(target), 0}:
                fh = tl.FileHandle.fuse(ino, gen)
                try:
                    fd = tl.open_by_handle_at(mfd, fh)
                except OSError as e:
                    assert e.errno in (errno.ESTALE, errno.ENOENT), (str(target), e)
                else:
                    st = os.fstat(fd)
                    os.close(fd)
                    if target == mnt.store.tree:
                        continue  # the tree root is the mount root: legitimately reachable
                    raise AssertionError(
                        f"crafted handle (nodeid {ino}, gen {gen}) of internal {target} "
                        f"opened an object through the mount (st_ino {st.st_ino})")
    finally:
        os.close(mfd)
    # in the root, .txnfs is taken (the views); below it, .txnfs is an ordinary name
    assert tl.errno_of(os.mkdir, m / ".txnfs") == errno.EEXIST
    os.makedirs(m / "sub" / ".txnfs")
    write_file(m / "sub" / ".txnfs" / "meta.db", b"just a file")
    assert read_file(mnt.store.tree / "sub" / ".txnfs" / "meta.db") == b"just a file"
    assert mnt.store.db.read_bytes()[:16] == b"SQLite format 3\0"
