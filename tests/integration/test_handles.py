"""File handles through the txnfs mount: name_to_handle_at / open_by_handle_at across
remounts and daemon crashes, stale handles, and the `handles` table that backs them."""

from __future__ import annotations

import errno
import os
import re
import time
import stat

import pytest

from txnfs_testing import txnfs_lib as tl

S_IFREG, S_IFDIR, S_IFLNK = stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK


write_file = tl.write_file


def drop_caches():
    """Make the kernel forget cached dentries/inodes, so handle opens reach the daemon."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")


def open_handle(mnt, fh, flags=os.O_RDONLY):
    mfd = os.open(mnt.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return tl.open_by_handle_at(mfd, fh, flags)
    finally:
        os.close(mfd)


def handle_errno(mnt, fh):
    try:
        fd = open_handle(mnt, fh)
    except OSError as e:
        return e.errno
    st = os.fstat(fd)
    os.close(fd)
    return ("opened", st.st_ino)


def populate(m):
    """A file, a directory, and a nested file; returns {relpath: expectation}."""
    write_file(m / "file", b"top-level file\n")
    os.makedirs(m / "dir" / "sub")
    write_file(m / "dir" / "sub" / "nested", b"nested file " * 1000)
    write_file(m / "dir" / "sibling", b"s")
    return {
        "file": ("file", b"top-level file\n"),
        "dir": ("dir", ["sibling", "sub"]),
        "dir/sub": ("dir", ["nested"]),
        "dir/sub/nested": ("file", b"nested file " * 1000),
    }


def take_handles(mnt, objects):
    out = {}
    for rel in objects:
        p = mnt.path / rel
        fh = tl.name_to_handle_at(p)
        assert fh.handle_type in (tl.FILEID_INO64_GEN, tl.FILEID_INO64_GEN_PARENT), hex(fh.handle_type)
        out[rel] = (fh, os.stat(p).st_ino)
    return out


def check_handles(mnt, objects, handles):
    for rel, (kind, expect) in objects.items():
        fh, ino = handles[rel]
        fd = open_handle(mnt, fh)
        try:
            st = os.fstat(fd)
            assert st.st_ino == ino, f"{rel}: st_ino {st.st_ino} != {ino}"
            if kind == "file":
                assert stat.S_ISREG(st.st_mode)
                assert os.pread(fd, len(expect) + 10, 0) == expect, rel
            else:
                assert stat.S_ISDIR(st.st_mode)
                assert sorted(os.listdir(fd)) == expect, rel
        finally:
            os.close(fd)
        # the same name still yields the same handle bytes
        again = tl.name_to_handle_at(mnt.path / rel)
        assert (again.handle_type, again.data) == (fh.handle_type, fh.data), rel


def test_handles_work_in_same_mount_after_cache_drop(mnt):
    objects = populate(mnt.path)
    handles = take_handles(mnt, objects)
    check_handles(mnt, objects, handles)
    drop_caches()
    check_handles(mnt, objects, handles)
    # a file opened by handle is writable and the write lands on the named file
    fd = open_handle(mnt, handles["file"][0], os.O_WRONLY)
    os.pwrite(fd, b"T", 0)
    os.close(fd)
    assert (mnt.path / "file").read_bytes()[:1] == b"T"
    assert (mnt.store.tree / "file").read_bytes()[:1] == b"T"


def test_handles_survive_umount_mount(mnt):
    objects = populate(mnt.path)
    handles = take_handles(mnt, objects)
    mnt.umount()
    mnt.mount()
    check_handles(mnt, objects, handles)


def test_handles_survive_kill9(mnt):
    objects = populate(mnt.path)
    handles = take_handles(mnt, objects)
    os.sync()
    mnt.kill9()
    mnt.mount()
    check_handles(mnt, objects, handles)


def test_handles_of_files_made_just_before_kill9_survive(mnt):
    """Rows of new objects reach SQLite in batches; until then they are journaled
    (.txnfs/handles.journal). A daemon killed before the batch is written loses none:
    the next mount writes them back. Killed right after 200 creates, the journal holds
    rows the table lacks (else the batch came first -- or the kill fell between writing
    a batch and emptying the journal: tried again)."""
    journal = mnt.store.internal / "handles.journal"
    for attempt in range(5):
        d = mnt.path / f"batch{attempt}"
        d.mkdir()
        objects = {}
        for k in range(200):
            write_file(d / f"f{k}", f"file {k}\n".encode())
            objects[f"batch{attempt}/f{k}"] = ("file", f"file {k}\n".encode())
        handles = take_handles(mnt, objects)
        mnt.kill9()
        missing = [rel for rel, (fh, ino) in handles.items()
                   if not mnt.store.query("SELECT 1 FROM handles WHERE nodeid = ?", (ino,))]
        if journal.stat().st_size > 0 and missing:
            break
        mnt.mount()
    else:
        pytest.fail("every batch reached SQLite before the kill")
    # fsck counts journaled rows as rows, and says that recovery must write them
    p = tl.txnfs("fsck", mnt.store.path)
    assert p.returncode == 1, tl.output_of(p)
    assert re.search(r"handle-table changes? (is|are) only in .*handles\.journal.*recovery writes them",
                     p.stdout), p.stdout
    assert "has no handle row" not in p.stdout, p.stdout
    mnt.mount()  # recovery writes them back
    assert journal.stat().st_size == 0
    drop_caches()
    check_handles(mnt, objects, handles)
    for rel in missing:
        assert mnt.store.query("SELECT 1 FROM handles WHERE nodeid = ?", (handles[rel][1],)), rel


def test_rows_of_files_removed_just_before_kill9_go(mnt):
    """Removals of handle rows are journaled and written in batches like new rows: a
    daemon killed right after 200 unlinks leaves their rows in the table, and the next
    mount removes them (fsck clean, and the handles stale)."""
    journal = mnt.store.internal / "handles.journal"
    for attempt in range(5):
        d = mnt.path / f"gone{attempt}"
        d.mkdir()
        for k in range(200):
            write_file(d / f"f{k}", b"x")
        handles = take_handles(mnt, [f"gone{attempt}/f{k}" for k in range(200)])
        mnt.umount()            # every row written
        mnt.mount()
        for k in range(200):
            os.unlink(d / f"f{k}")
        mnt.kill9()
        left = [ino for fh, ino in handles.values()
                if mnt.store.query("SELECT 1 FROM handles WHERE nodeid = ?", (ino,))]
        # (a kill between writing a batch and emptying the journal leaves no row: again)
        if any(line.startswith("- ") for line in journal.read_text().splitlines()) and left:
            break
        mnt.mount()
    else:
        pytest.fail("every batch of removals reached SQLite before the kill")
    mnt.mount()
    assert journal.stat().st_size == 0
    for ino in left:
        assert not mnt.store.query("SELECT 1 FROM handles WHERE nodeid = ?", (ino,)), ino
    drop_caches()
    for rel, (fh, ino) in handles.items():
        assert handle_errno(mnt, fh) == errno.ESTALE, rel
    p = tl.txnfs("fsck", mnt.store.path)
    assert p.returncode == 0, tl.output_of(p)


def test_removed_file_handle_is_stale(mnt):
    m = mnt.path
    objects = populate(m)
    handles = take_handles(mnt, objects)
    old_backing_ino = os.stat(mnt.store.tree / "file").st_ino
    os.unlink(m / "file")
    os.unlink(m / "dir" / "sub" / "nested")
    os.rmdir(m / "dir" / "sub")
    for rel in ("file", "dir/sub/nested", "dir/sub"):
        assert handle_errno(mnt, handles[rel][0]) == errno.ESTALE, rel
    # new objects (XFS may hand the freed inode numbers out again): the old handles
    # must stay stale and never open one of the new files
    new = []
    for i in range(64):
        write_file(m / f"new{i}", b"new %d" % i)
        new.append(os.stat(mnt.store.tree / f"new{i}").st_ino)
    write_file(m / "file", b"a different file under the old name")
    drop_caches()
    for rel in ("file", "dir/sub/nested", "dir/sub"):
        assert handle_errno(mnt, handles[rel][0]) == errno.ESTALE, rel
    reused = old_backing_ino in new or os.stat(mnt.store.tree / "file").st_ino == old_backing_ino
    new_fh = tl.name_to_handle_at(m / "file")
    assert new_fh.data != handles["file"][0].data, f"recreated file got the old handle (inode reused: {reused})"
    # surviving objects still open
    check_handles(mnt, {"dir": ("dir", ["sibling"])}, handles)

    mnt.remount()
    for rel in ("file", "dir/sub/nested", "dir/sub"):
        assert handle_errno(mnt, handles[rel][0]) == errno.ESTALE, f"{rel} after remount"
    fd = open_handle(mnt, new_fh)
    assert os.read(fd, 100) == b"a different file under the old name"
    os.close(fd)


def test_removed_file_handle_is_stale_after_kill9(mnt):
    m = mnt.path
    write_file(m / "gone", b"x")
    fh = tl.name_to_handle_at(m / "gone")
    os.unlink(m / "gone")
    os.sync()
    mnt.kill9()
    mnt.mount()
    assert handle_errno(mnt, fh) == errno.ESTALE


def test_handle_matches_handle_table(mnt):
    """The kernel handle encodes (nodeid, generation) of the file's row."""
    m = mnt.path
    write_file(m / "f", b"x")
    os.mkdir(m / "d")
    fh_f = tl.name_to_handle_at(m / "f")
    fh_d = tl.name_to_handle_at(m / "d")
    ino_f = os.stat(m / "f").st_ino
    ino_d = os.stat(m / "d").st_ino
    mnt.umount()
    for fh, ino, rel in ((fh_f, ino_f, "f"), (fh_d, ino_d, "d")):
        row = mnt.store.handle_row(ino)
        assert row is not None, f"no handles row with nodeid == st_ino {ino} of {rel}"
        assert fh.fuse_fields() == (row["nodeid"], row["generation"]), rel
        assert row["ino"] == os.stat(mnt.store.tree / rel).st_ino
        assert row["generation"] == tl.inode_generation(mnt.store.tree / rel)


def test_handle_table_follows_namespace(mnt):
    m = mnt.path
    tree = mnt.store.tree
    write_file(m / "renamed_file", b"1")
    write_file(m / "unlinked_file", b"2")
    write_file(m / "victim", b"3")            # replaced by a rename
    write_file(m / "replacer", b"4")
    write_file(m / "linked", b"5")            # hard link; recorded name removed
    os.makedirs(m / "dir_a" / "child_dir")
    write_file(m / "dir_a" / "child", b"6")
    os.mkdir(m / "dest")
    os.mkdir(m / "removed_dir")
    os.symlink("renamed_file", m / "sym")
    write_file(m / "x1", b"x1")
    write_file(m / "x2", b"x2")

    ino = {rel: os.lstat(m / rel).st_ino for rel in (
        "renamed_file", "unlinked_file", "victim", "replacer", "linked", "dir_a",
        "dir_a/child", "dir_a/child_dir", "dest", "removed_dir", "sym", "x1", "x2")}

    os.rename(m / "renamed_file", m / "dest" / "new_name")
    os.unlink(m / "unlinked_file")
    os.rename(m / "replacer", m / "victim")
    os.link(m / "linked", m / "dest" / "link2")
    os.unlink(m / "linked")
    os.rename(m / "dir_a", m / "dest" / "dir_b")
    os.rmdir(m / "removed_dir")
    tl.renameat2(m / "x1", m / "x2", tl.RENAME_EXCHANGE)
    for rel, i in (("dest/new_name", ino["renamed_file"]), ("dest/dir_b", ino["dir_a"]),
                   ("dest/dir_b/child", ino["dir_a/child"]), ("victim", ino["replacer"])):
        assert os.lstat(m / rel).st_ino == i, rel
    mnt.umount()

    rows = {r["nodeid"]: r for r in mnt.store.query("SELECT * FROM handles")}
    root = [r for r in rows.values() if r["parent"] is None and r["type"] == S_IFDIR]
    assert any(r["nodeid"] == 1 for r in root), "no row for the tree root (nodeid 1)"

    def row(key):
        r = rows.get(ino[key])
        assert r is not None, f"no handles row for {key} (nodeid {ino[key]})"
        return r

    assert (row("renamed_file")["parent"], row("renamed_file")["name"]) == (ino["dest"], "new_name")
    assert row("renamed_file")["type"] == S_IFREG
    assert ino["unlinked_file"] not in rows, "row of an unlinked file is still there"
    assert ino["victim"] not in rows, "row of a file replaced by rename is still there"
    assert (row("replacer")["parent"], row("replacer")["name"]) == (1, "victim")
    assert (row("linked")["parent"], row("linked")["name"]) in ((ino["dest"], "link2"), (None, None))
    assert (row("dir_a")["parent"], row("dir_a")["name"]) == (ino["dest"], "dir_b")
    assert row("dir_a")["type"] == S_IFDIR
    assert (row("dir_a/child")["parent"], row("dir_a/child")["name"]) == (ino["dir_a"], "child")
    assert (row("dir_a/child_dir")["parent"], row("dir_a/child_dir")["name"]) == (ino["dir_a"], "child_dir")
    assert ino["removed_dir"] not in rows, "row of a removed directory is still there"
    assert row("sym")["type"] == S_IFLNK and (row("sym")["parent"], row("sym")["name"]) == (1, "sym")
    assert (row("x1")["parent"], row("x1")["name"]) == (1, "x2")
    assert (row("x2")["parent"], row("x2")["name"]) == (1, "x1")
    for key in ("renamed_file", "replacer", "dir_a", "dir_a/child", "sym"):
        assert row(key)["ino"] == ino[key]

    # one row per object of the tree, no more
    on_disk = set()
    for dirpath, dirnames, filenames in os.walk(tree):
        for n in dirnames + filenames:
            on_disk.add(os.lstat(os.path.join(dirpath, n)).st_ino)
    non_root = {r["ino"] for r in rows.values() if r["nodeid"] != 1}
    assert non_root == on_disk


def test_hard_linked_file_handle_survives_loss_of_recorded_name(mnt):
    m = mnt.path
    write_file(m / "orig", b"linked data")
    os.mkdir(m / "d")
    os.link(m / "orig", m / "d" / "other")
    fh = tl.name_to_handle_at(m / "orig")
    ino = os.stat(m / "orig").st_ino
    os.unlink(m / "orig")
    mnt.remount()
    fd = open_handle(mnt, fh)
    try:
        assert os.fstat(fd).st_ino == ino
        assert os.read(fd, 100) == b"linked data"
    finally:
        os.close(fd)
    os.unlink(m / "d" / "other")
    drop_caches()
    assert handle_errno(mnt, fh) == errno.ESTALE


def test_handle_stale_immediately_after_unlink(mnt):
    """No window after unlink/rmdir in which an old handle still opens the object once
    the kernel has let go of it. (The kernel itself may keep an unlinked inode for a
    moment — a file's RELEASE is sent asynchronously after close() and holds it — and
    open_by_handle_at then finds it in the kernel's inode cache without asking the
    daemon; that window is bounded here to one second.)"""
    m = mnt.path

    def stale_soon(fh):
        deadline = time.monotonic() + 1.0
        while True:
            r = handle_errno(mnt, fh)
            if r == errno.ESTALE or time.monotonic() > deadline:
                return r
            time.sleep(0.01)

    opened = []
    for i in range(500):
        p = m / f"f{i}"
        write_file(p, b"x")
        fh = tl.name_to_handle_at(p)
        os.unlink(p)
        r = stale_soon(fh)
        if r != errno.ESTALE:
            opened.append((f"f{i}", r))
        d = m / f"d{i}"
        os.mkdir(d)
        fh = tl.name_to_handle_at(d)
        os.rmdir(d)
        r = stale_soon(fh)
        if r != errno.ESTALE:
            opened.append((f"d{i}", r))
    assert not opened, f"{len(opened)} of 1000 removed objects still opened by handle right after removal: {opened[:5]}"


def test_open_file_and_handle_of_an_aborted_creation_are_stale(mnt):
    """A file a transaction created and that its abort removed never existed: an open
    file of it, kept past the abort, answers ESTALE to every use -- a write would land
    in the unlinked backing inode and be lost -- and so does its handle. A file the
    transaction only changed stays usable through the same kind of open file. (Unlike
    a plain unlink, after which POSIX keeps an open file usable: the control.)"""
    m = mnt.path
    write_file(m / "old", b"old")
    write_file(m / "unlinked", b"u")
    plain = os.open(m / "unlinked", os.O_RDWR)
    os.unlink(m / "unlinked")
    tid = tl.txn_begin(m)
    try:
        new = os.open(m / "new", os.O_RDWR | os.O_CREAT, 0o644)
        old = os.open(m / "old", os.O_RDWR)
        os.pwrite(new, b"created", 0)
        os.pwrite(old, b"OLD", 0)
        fh = tl.name_to_handle_at(m / "new")
    finally:
        assert tl.txn_abort(m, tid) == 0
    try:
        uses = {"write": lambda: os.pwrite(new, b"lost", 0), "read": lambda: os.pread(new, 10, 0),
                "fsync": lambda: os.fsync(new), "truncate": lambda: os.ftruncate(new, 0),
                "fstat": lambda: os.fstat(new)}
        for what, use in uses.items():
            assert tl.errno_of(use) == errno.ESTALE, what
        assert handle_errno(mnt, fh) == errno.ESTALE
        assert os.pread(old, 10, 0) == b"old"
        assert os.pwrite(old, b"new", 0) == 3
        assert os.pwrite(plain, b"still usable", 0) == 12
        assert os.pread(plain, 20, 0) == b"still usable"
    finally:
        for fd in (new, old, plain):
            os.close(fd)
    assert sorted(os.listdir(m)) == ["old"]
    assert (m / "old").read_bytes() == b"new"
    assert not (mnt.store.tree / "new").exists()


def test_the_parent_of_a_directory_a_transaction_removed_is_never_the_store(mnt):
    """A directory a transaction removes waits in its undo log until the transaction
    ends. Reached through a file handle, the kernel asks the daemon for its parent
    (LOOKUP ".."; an NFS server's LOOKUPP too), and that parent must never be the log
    directory, or the store's internal area above it: a plain reader meanwhile finds
    the directory where it was (the committed state), the transaction itself finds no
    parent (the directory is gone for it), and after the commit the handle is stale.
    The handle table gains no row for anything outside the tree (fsck at teardown)."""
    from concurrent.futures import ThreadPoolExecutor

    m = mnt.path
    (m / "a" / "d").mkdir(parents=True)
    write_file(m / "a" / "f", b"f")
    fh = tl.name_to_handle_at(m / "a" / "d")
    txn = ThreadPoolExecutor(1)   # the transaction's thread
    tid = txn.submit(tl.txn_begin, m).result()
    try:
        txn.submit(os.rmdir, m / "a" / "d").result()

        def parent_via_handle():
            drop_caches()   # the kernel must reconnect the handle through the daemon
            fd = open_handle(mnt, fh, os.O_RDONLY | os.O_DIRECTORY)
            try:
                up = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                try:
                    return sorted(os.listdir(up))
                finally:
                    os.close(up)
            finally:
                os.close(fd)

        with pytest.raises(OSError) as e:
            txn.submit(parent_via_handle).result()
        assert e.value.errno in (errno.ESTALE, errno.ENOENT), e.value
        assert parent_via_handle() == ["d", "f"]     # a plain reader: the committed a/
    finally:
        assert txn.submit(tl.txn_commit, m, tid).result() == 0
        txn.shutdown()
    assert sorted(os.listdir(m / "a")) == ["f"]
    drop_caches()
    assert handle_errno(mnt, fh) == errno.ESTALE
