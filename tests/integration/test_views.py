"""Views: a transaction sees the file system through kernel inodes of its own
(docs/isolation.md, "Views"), so nothing of its uncommitted state reaches anyone else
through the kernel's shared caches -- the inode's size, its pages and mappings, its ACL
copy, its dentries, its attributes reached by handle.

Each of the first four tests met the kernel's shared inode before views (they fail when
the transaction's command runs bound by process id alone: `txnfs run --no-view`, which
`test_the_shared_inode_still_leaks_without_a_view` keeps honest):

  * a plain fd opened before a transaction truncates and extends a file reads the
    committed size and bytes throughout;
  * a plain shared mapping never shows bytes a transaction wrote through its mapping;
  * a plain reader of the ACL during a transaction that sets one reads the committed ACL;
  * a file handle of an object a transaction made resolves outside it to ESTALE.

And what a user of views relies on: who may enter one (its owner and root, not another
user: EACCES), a view's end (ESTALE afterwards; EIO for an open of a file the
transaction made, which the kernel reads and writes itself), `.txnfs` being reserved, `txnfs run`
keeping a working directory on the mount, hard links and inode numbers as on the plain
tree, and file handles taken inside a view resolving there.
"""

from __future__ import annotations

import errno
import mmap
import os
import subprocess
import sys
import threading

import pytest

from txnfs_testing import txnfs_lib as tl

PY = sys.executable or "/usr/bin/python3"
NOBODY = ["setpriv", f"--reuid={tl.NOBODY_UID}", f"--regid={tl.NOBODY_GID}", "--clear-groups"]
COMMITTED = bytes(range(256)) * 390 + b"0123456789" * 16  # 100,000 bytes


def run_in_txn(mnt, script: str, *args, view: bool = True, abort: bool = True, user=None):
    """`txnfs run [--abort] [--no-view] MNT -- python3 -c SCRIPT ARGS`, started: the script
    talks to the test over stdin/stdout (one line per step)."""
    argv = [tl.txnfs_bin(), "run", *(["--abort"] if abort else []),
            *([] if view else ["--no-view"]), str(mnt), "--", PY, "-u", "-c", script,
            *map(str, args)]
    if user:
        argv = [*user, *argv]
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def step(p, say: str | None = None, timeout: float = 30) -> str:
    """Sends `say` (if any) and returns the script's next line."""
    if say is not None:
        p.stdin.write(say + "\n")
        p.stdin.flush()
    line = p.stdout.readline()
    assert line, f"the transaction's command ended early: {p.stderr.read()}"
    return line.strip()


def finish(p) -> None:
    """Lets the script end; `txnfs run` must then end well."""
    p.stdin.close()
    p.stdout.read()
    err = p.stderr.read()
    assert p.wait(60) == 0, err


# -- what views isolate -------------------------------------------------------------------

RESIZER = r"""
import os, sys
path, rounds = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDWR)
print("ready")
sys.stdin.readline()
for r in range(rounds):
    os.ftruncate(fd, 10)
    for off in range(0, 150000, 4096):
        os.pwrite(fd, b"x" * min(4096, 150000 - off), off)
print("done")
"""


def plain_reader_errors(mnt, view: bool) -> list[str]:
    """A plain fd that opened and read the file reads it in a loop while a transaction
    truncates it to 10 bytes and extends it to 150,000, again and again: what it read
    that was not the committed file."""
    f = mnt.path / "resized"
    tl.write_file(f, COMMITTED)
    fd = os.open(f, os.O_RDONLY)
    wrong: list[str] = []
    try:
        assert os.pread(fd, len(COMMITTED) + 1, 0) == COMMITTED
        p = run_in_txn(mnt.path, RESIZER, f, 40, view=view)
        try:
            assert step(p) == "ready"
            p.stdin.write("go\n")
            p.stdin.flush()
            stop = threading.Event()

            def read_loop():
                n = 0
                while not stop.is_set() or n < 200:
                    got = os.pread(fd, len(COMMITTED) + 100, 0)
                    n += 1
                    if got != COMMITTED and len(wrong) < 5:
                        wrong.append(f"read {n}: {len(got)} bytes")
            t = threading.Thread(target=read_loop)
            t.start()
            try:
                assert step(p, timeout=120) == "done"
            finally:
                stop.set()
                t.join(60)
            finish(p)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    finally:
        os.close(fd)
    assert f.read_bytes() == COMMITTED  # aborted
    return wrong


def test_a_plain_fd_opened_before_a_transaction_extended_a_file_reads_the_committed_bytes(mnt):
    assert plain_reader_errors(mnt, view=True) == []


def test_the_shared_inode_still_leaks_without_a_view(mnt):
    """The shape the views remove, still there for a command run with --no-view: so the
    test above proves something (and docs/isolation.md, "Binding by process id", says
    what such a command still shares)."""
    assert plain_reader_errors(mnt, view=False) != []


MAPPER = r"""
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
m[0:11] = b"UNCOMMITTED"
print("written")
sys.stdin.readline()
m.close()
os.close(fd)
"""


@pytest.mark.parametrize("plain_first", [True, False], ids=["mapped-before", "mapped-during"])
def test_a_plain_mapping_never_sees_a_transactions_mapped_writes(mnt, plain_first):
    f = mnt.path / "mapped"
    tl.write_file(f, b"c" * 4096)
    fd = os.open(f, os.O_RDONLY)
    m = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ) if plain_first else None
    try:
        if m:
            assert m[0:11] == b"c" * 11
        p = run_in_txn(mnt.path, MAPPER, f)
        assert step(p) == "written"
        if m is None:
            m = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ)
        assert m[0:11] == b"c" * 11, "a plain mapping shows a transaction's mapped write"
        assert os.pread(fd, 11, 0) == b"c" * 11
        finish(p)
    finally:
        if m:
            m.close()
        os.close(fd)
    assert f.read_bytes() == b"c" * 4096


ACL_SETTER = r"""
import subprocess, sys
subprocess.run(["setfacl", "-m", "u:4242:rwx", sys.argv[1]], check=True)
print(subprocess.run(["getfacl", "-c", "-n", sys.argv[1]], check=True,
                     capture_output=True, text=True).stdout.replace("\n", ";"))
sys.stdin.readline()
"""


def getfacl(path) -> str:
    return subprocess.run(["getfacl", "-c", "-n", str(path)], check=True, capture_output=True,
                          text=True).stdout.replace("\n", ";")


def test_a_plain_getfacl_during_a_transaction_that_changes_the_acl_shows_the_committed_acl(mnt):
    f = mnt.path / "acl"
    tl.write_file(f, b"x")
    committed = getfacl(f)
    assert "4242" not in committed
    p = run_in_txn(mnt.path, ACL_SETTER, f)
    try:
        assert "user:4242:rwx" in step(p)
        assert getfacl(f) == committed
        os.stat(f)  # an attribute refresh in between must not fetch the transaction's copy
        assert getfacl(f) == committed
        finish(p)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert getfacl(f) == committed


def plain_handle(fh: tl.FileHandle) -> tl.FileHandle:
    """The handle of the same object outside any view: a view's nodeid carries its slot
    in bits 48-62 (src/txnfuse/fuse/views.h)."""
    nodeid, generation = fh.fuse_fields()
    return tl.FileHandle.fuse(nodeid & ((1 << 48) - 1), generation)


HANDLE_TAKER = r"""
import sys
sys.path.insert(0, sys.argv[2])
from txnfs_testing import txnfs_lib as tl
path = sys.argv[1]
with open(path, "wb") as f:
    f.write(b"made in the transaction")
fh = tl.name_to_handle_at(path)
print(fh.handle_type, fh.data.hex())
sys.stdin.readline()
"""


def test_a_handle_of_a_transaction_made_object_answers_estale_outside_it(mnt):
    made = mnt.path / "made"
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(tl.__file__)))
    p = run_in_txn(mnt.path, HANDLE_TAKER, made, tests_dir)
    mount_fd = os.open(mnt.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        t, hexraw = step(p).split()
        fh = plain_handle(tl.FileHandle(int(t), bytes.fromhex(hexraw)))
        with pytest.raises(OSError) as e:
            fd = tl.open_by_handle_at(mount_fd, fh, os.O_PATH)
            try:
                os.fstat(fd)
            finally:
                os.close(fd)
        assert e.value.errno in (errno.ESTALE, errno.ENOENT)
        assert not made.exists()
        finish(p)
    finally:
        os.close(mount_fd)
        if p.poll() is None:
            p.kill()
            p.wait()
    assert not made.exists()


# -- what a user of views relies on ------------------------------------------------------------

def txn_of_its_own(mnt):
    return tl.txn_in_view(mnt.path)


def test_a_view_path_shows_the_transaction_and_nobody_else_its_changes(mnt):
    tl.write_file(mnt.path / "f", b"committed")
    with txn_of_its_own(mnt) as (tid, v):
        (v / "f").write_bytes(b"uncommitted and longer")
        (v / "d").mkdir()
        (v / "d" / "g").write_bytes(b"new")
        os.rename(v / "f", v / "d" / "f2")
        assert sorted(os.listdir(v)) == ["d"]
        assert (v / "d" / "f2").read_bytes() == b"uncommitted and longer"
        assert sorted(os.listdir(mnt.path)) == ["f"]
        assert (mnt.path / "f").read_bytes() == b"committed"
        assert not (mnt.path / "d").exists()
        # the same object: same inode number and device in and out of the view
        assert os.stat(v / "d" / "f2").st_ino == os.stat(mnt.path / "f").st_ino
        assert os.stat(v / "d" / "f2").st_dev == os.stat(mnt.path / "f").st_dev
        fd = os.open(v / "d" / "f2", os.O_RDONLY)
        # a file the transaction made is read and written by the kernel itself (FUSE
        # passthrough); the view's end revokes it: EIO instead of ESTALE, close included
        made_fd = os.open(v / "d" / "g", os.O_RDWR)
        assert tl.txn_commit(mnt.path, tid) == 0
        with pytest.raises(OSError) as e:
            os.read(fd, 3)
        assert e.value.errno == errno.ESTALE, "an ended view's open file must be stale"
        os.close(fd)
        for use in (lambda: os.pwrite(made_fd, b"late", 0), lambda: os.pread(made_fd, 3, 0),
                    lambda: os.fstat(made_fd), lambda: os.close(made_fd)):
            with pytest.raises(OSError) as e:
                use()
            assert e.value.errno == errno.EIO, "a made file's open must be revoked"
        assert not (v / "d").exists()
        assert sorted(os.listdir(mnt.path)) == ["d"]
        assert (mnt.path / "d" / "f2").read_bytes() == b"uncommitted and longer"
        assert (mnt.path / "d" / "g").read_bytes() == b"new"


def test_an_aborted_views_changes_are_gone_and_its_files_stale(mnt):
    tl.write_file(mnt.path / "f", b"committed")
    with txn_of_its_own(mnt) as (tid, v):
        (v / "f").write_bytes(b"rolled back")
        (v / "new").write_bytes(b"rolled back")
        fd = os.open(v / "f", os.O_RDONLY)
        assert tl.txn_abort(mnt.path, tid) == 0
        with pytest.raises(OSError) as e:
            os.fstat(fd)
        assert e.value.errno == errno.ESTALE
        os.close(fd)
        assert os.listdir(mnt.path) == ["f"]
        assert (mnt.path / "f").read_bytes() == b"committed"


def passthrough(mnt) -> dict:
    return tl.txn_status(mnt.path)["passthrough"]


@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_a_transactions_new_files_pass_through_and_are_revoked_at_its_end(mnt, outcome):
    """A regular file a transaction made is read and written by the kernel itself
    (passthrough: no READ or WRITE reaches the daemon); an open of it that outlives the
    transaction answers EIO (the kernel cannot close a backing file: its inode is
    revoked), so no late write reaches the committed file, nor the store after an abort.
    A file that existed before is never passed through: its writes need their undo."""
    assert passthrough(mnt)["on"]
    tl.write_file(mnt.path / "old", b"committed")
    data = os.urandom(1 << 20)
    before = passthrough(mnt)
    with txn_of_its_own(mnt) as (tid, v):
        (v / "old").write_bytes(b"changed")  # (not passed through)
        assert passthrough(mnt)["opened"] == before["opened"]
        kept = os.open(v / "new", os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(kept, data, 0)
        assert passthrough(mnt)["open"] == before["open"] + 1
        # a second open of the same inode shares its backing file; a mapping works too
        with open(v / "new", "r+b") as f, mmap.mmap(f.fileno(), len(data)) as m:
            assert m[:len(data)] == data
            m[:4] = b"MAPD"
        assert os.pread(kept, 4, 0) == b"MAPD"
        assert passthrough(mnt)["opened"] == before["opened"] + 2
        assert not (mnt.path / "new").exists(), "plain readers see no uncommitted file"
        # the names that revoke are the daemon's own: anyone else finds nothing, revokes nothing
        ino = os.fstat(kept).st_ino
        for slot in range(1, 9):
            with pytest.raises(FileNotFoundError):
                os.stat(mnt.path / ".txnfs" / f"~{(slot << 48) | ino:x}")
        assert os.pread(kept, 4, 0) == b"MAPD"
        end = tl.txn_commit if outcome == "commit" else tl.txn_abort
        assert end(mnt.path, tid) == 0
        for use in (lambda: os.pwrite(kept, b"late", 0), lambda: os.pread(kept, 4, 0),
                    lambda: os.fstat(kept)):
            with pytest.raises(OSError) as e:
                use()
            assert e.value.errno == errno.EIO, f"{outcome}: an open outliving it is revoked"
        with pytest.raises(OSError) as e:
            os.close(kept)
        assert e.value.errno == errno.EIO
    after = passthrough(mnt)
    assert after["revoked"] == before["revoked"] + 1
    assert after["open"] == before["open"]
    if outcome == "commit":
        assert (mnt.path / "new").read_bytes() == b"MAPD" + data[4:]
        assert (mnt.path / "old").read_bytes() == b"changed"
    else:
        assert not (mnt.path / "new").exists()
        assert (mnt.path / "old").read_bytes() == b"committed"


def test_nopassthrough_serves_a_transactions_new_files_through_the_daemon(mnt):
    """-o nopassthrough: the daemon reads and writes every file itself; an open that
    outlives its transaction answers ESTALE as any other view's."""
    mnt.umount()
    mnt.mount("-o", "nopassthrough")
    assert not passthrough(mnt)["on"]
    with txn_of_its_own(mnt) as (tid, v):
        fd = os.open(v / "new", os.O_RDWR | os.O_CREAT, 0o644)
        os.write(fd, b"through the daemon")
        assert tl.txn_commit(mnt.path, tid) == 0
        with pytest.raises(OSError) as e:
            os.pwrite(fd, b"late", 0)
        assert e.value.errno == errno.ESTALE
        os.close(fd)
    assert (mnt.path / "new").read_bytes() == b"through the daemon"
    assert passthrough(mnt)["opened"] == 0


def test_a_views_directory_attributes_follow_every_committed_change(mnt):
    """A view caches a directory's attributes, which it reads committed (IS), also of a
    directory it changes itself: every committed change of the directory -- a plain
    request's, another transaction's commit -- drops the view's copy."""
    for d in ("changed", "read"):
        (mnt.path / d).mkdir()
    with txn_of_its_own(mnt) as (tid, v):
        (v / "changed" / "mine").write_bytes(b"x")  # (IX on "changed": compatible)
        for d in ("changed", "read"):
            assert os.stat(v / d).st_nlink == 2
        (mnt.path / "changed" / "sub").mkdir()  # plain
        (mnt.path / "read" / "sub").mkdir()
        for d in ("changed", "read"):
            assert os.stat(v / d).st_nlink == 3, f"{d}: a plain mkdir must show in the view"
        seen = {d: os.stat(v / d).st_mtime_ns for d in ("changed", "read")}
        with txn_of_its_own(mnt) as (other, w):
            (w / "changed" / "sub2").mkdir()
            (w / "read" / "sub2").mkdir()
            for d in ("changed", "read"):
                assert os.stat(v / d).st_nlink == 3, f"{d}: nothing uncommitted shows"
            assert tl.txn_commit(mnt.path, other) == 0
        for d in ("changed", "read"):
            assert os.stat(v / d).st_nlink == 4, f"{d}: another transaction's commit shows"
            assert os.stat(v / d).st_mtime_ns > seen[d], f"{d}: and its times"
        # a lazy commit on the thread that reads it (commit_here) of a transaction bound
        # to this thread on the plain path
        other = tl.txn_begin(mnt.path)
        for d in ("changed", "read"):
            (mnt.path / d / "sub3").mkdir()
        assert tl.txn_commit_lazy(mnt.path, other) == 0
        for d in ("changed", "read"):
            assert os.stat(v / d).st_nlink == 5, f"{d}: a lazy commit shows"
        assert tl.txn_commit(mnt.path, tid) == 0


def test_only_the_owner_and_root_may_enter_a_view(mnt):
    os.chmod(mnt.path, 0o777)
    owner = subprocess.Popen([*NOBODY, "sleep", "300"])
    try:
        rc, tid = tl.txn_begin_rc(mnt.path, tl.TXNFS_BIND_PROCESS, owner.pid)
        assert rc == 0
        # root began it for nobody's process: the transaction is root's; nobody is not let in
        v = mnt.path / ".txnfs" / str(tid)
        assert os.path.isdir(v)  # root may
        p = subprocess.run([*NOBODY, "ls", str(v)], capture_output=True, text=True)
        assert p.returncode != 0 and "Permission denied" in p.stderr, p
        p = subprocess.run([*NOBODY, "cat", str(v / "x")], capture_output=True, text=True)
        assert p.returncode != 0 and "Permission denied" in p.stderr, p
        assert tl.txn_abort(mnt.path, tid) == 0
    finally:
        owner.kill()
        owner.wait()
    # a transaction nobody began is nobody's: it may enter it, root too, another user not
    script = ("import os, sys\n"
              "open(os.path.join(sys.argv[1], 'mine'), 'w').write('x')\n"
              "print(open(os.path.join(sys.argv[1], 'mine')).read())\n")
    p = subprocess.run([*NOBODY, tl.txnfs_bin(), "run", "--abort", str(mnt.path), "--",
                        "/usr/bin/python3", "-c",
                        script, str(mnt.path)], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == "x", p
    assert not (mnt.path / "mine").exists()


def test_dot_txnfs_is_reserved_and_unlisted(mnt):
    assert ".txnfs" not in os.listdir(mnt.path)
    for make in (lambda p: os.mkdir(p), lambda p: open(p, "x").close(),
                 lambda p: os.symlink("x", p)):
        with pytest.raises(OSError) as e:
            make(mnt.path / ".txnfs")
        assert e.value.errno in (errno.EEXIST, errno.EPERM)
    tl.write_file(mnt.path / "f", b"x")
    with pytest.raises(OSError):
        os.rename(mnt.path / "f", mnt.path / ".txnfs")
    with pytest.raises(OSError) as e:
        os.mkdir(mnt.path / ".txnfs" / "x")
    assert e.value.errno in (errno.EACCES, errno.EPERM)
    assert (mnt.path / "f").read_bytes() == b"x"
    assert not (mnt.path / ".txnfs" / "12345").exists()


def test_txnfs_run_keeps_the_working_directory_and_hard_links(mnt):
    d = mnt.path / "d"
    d.mkdir()
    tl.write_file(d / "a", b"linked")
    os.link(d / "a", d / "b")
    script = (
        "import os, subprocess\n"
        "open('c', 'w').write('made here')\n"  # relative to the working directory
        "subprocess.run(['cp', '-a', '.', '../copy'], check=True)\n"
        "s = os.stat('../copy/a'); t = os.stat('../copy/b')\n"
        "print(s.st_ino == t.st_ino, s.st_nlink, os.stat('a').st_ino == os.stat('b').st_ino)\n")
    p = subprocess.run([tl.txnfs_bin(), "run", str(mnt.path), "--", PY, "-c", script],
                       cwd=d, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "2", "True"]
    assert (d / "c").read_bytes() == b"made here"
    assert os.stat(mnt.path / "copy" / "a").st_ino == os.stat(mnt.path / "copy" / "b").st_ino


def test_file_handles_taken_inside_a_view_resolve_there(mnt):
    tl.write_file(mnt.path / "f", b"committed")
    with txn_of_its_own(mnt) as (tid, v):
        (v / "f").write_bytes(b"the view's")
        fh = tl.name_to_handle_at(v / "f")
        mount_fd = os.open(v, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fd = tl.open_by_handle_at(mount_fd, fh, os.O_PATH)
            try:
                assert os.fstat(fd).st_ino == os.stat(mnt.path / "f").st_ino
                assert os.readlink(f"/proc/self/fd/{fd}").endswith("/f")
            finally:
                os.close(fd)
            # the same object's plain handle shows the committed state
            fd = tl.open_by_handle_at(mount_fd, plain_handle(fh), os.O_PATH)
            try:
                assert os.fstat(fd).st_size == len(b"committed")
            finally:
                os.close(fd)
        finally:
            os.close(mount_fd)
        assert tl.txn_abort(mnt.path, tid) == 0
