"""The transaction interface: `txnfs run`, begin/commit/abort from a shell, ownership
(EPERM for other uids), a killed owner's transaction, and `txnfs status`."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import select
import subprocess
import threading
import time

import test_txn_atomicity as A  # (populate(), the tree every test starts from)
from txnfs_testing import snapshot as S
from txnfs_testing import txnfs_lib as tl

NOBODY = ["setpriv", f"--reuid={tl.NOBODY_UID}", f"--regid={tl.NOBODY_GID}", "--clear-groups"]


def prepared(mnt):
    A.populate(mnt.path)
    return S.stable_snapshot(mnt.path)


def status(mnt) -> dict:
    p = tl.txnfs("status", mnt.path, "--json", check=True)
    return json.loads(p.stdout)


def open_txns(mnt) -> dict:
    return {t["id"]: t for t in status(mnt)["transactions"]}


def readline(p: subprocess.Popen, timeout=20) -> str:
    r, _, _ = select.select([p.stdout], [], [], timeout)
    assert r, f"no output from pid {p.pid} within {timeout} s"
    return p.stdout.readline()


class Sleeper:
    """`sleep 300` (optionally as nobody), killed at the end."""

    def __init__(self, as_nobody=False):
        self.p = subprocess.Popen([*(NOBODY if as_nobody else []), "sleep", "300"],
                                  stdin=subprocess.DEVNULL)
        self.pid = self.p.pid

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()


# --------------------------------------------------------------------------
# txnfs run
# --------------------------------------------------------------------------

SCRIPT = ("set -e; cd {m}; echo new > data/created; echo more >> data/app.txt; "
          "mkdir newdir; mv data/ren1 dir2/; rm data/victim.bin; chmod 600 data/small.txt; "
          "truncate -s 10 data/big.bin; setfattr -n user.q -v 1 data/xs.txt; echo ran")


def test_run_abort_leaves_no_trace_and_counts_ops(mnt):
    before = prepared(mnt)
    p = tl.txnfs("run", "--abort", mnt.path, "--", "sh", "-c", SCRIPT.format(m=mnt.path))
    assert p.returncode == 0, f"--abort keeps the command's status (0):\n{tl.output_of(p)}"
    assert "ran" in p.stdout, tl.output_of(p)
    S.assert_restored(mnt, before, "after `txnfs run --abort`")
    assert re.search(r"transaction \d+ aborted", p.stderr), p.stderr
    m = re.search(r"transaction \d+ aborted.*?(\d+) operations?", p.stderr)
    assert m and int(m.group(1)) >= 8, (
        f"`txnfs run --abort` must print how many operations the transaction covered "
        f"(the script did at least 8): {p.stderr!r}")


def test_run_commit_prints_count_and_keeps_effects(mnt, xfs):
    prepared(mnt)
    p = tl.txnfs("run", mnt.path, "--", "sh", "-c", SCRIPT.format(m=mnt.path))
    assert p.returncode == 0, tl.output_of(p)
    m = re.search(r"transaction (\d+) committed \((\d+) operations?\)", p.stderr)
    assert m and int(m.group(2)) >= 8, p.stderr
    after = S.stable_snapshot(mnt.path)
    assert "data/created" in after and "dir2/ren1" in after and "newdir" in after
    assert "data/victim.bin" not in after and "data/ren1" not in after
    assert after["data/big.bin"]["size"] == 10
    assert after["data/xs.txt"]["xattrs"]["user.q"] == b"1"
    S.assert_no_backups(mnt.store)
    mnt.remount()
    S.assert_same(after, S.snapshot(mnt.path), "committed `txnfs run`, after unmount + mount")


def test_run_failing_command_status_and_no_trace(mnt):
    before = prepared(mnt)
    p = tl.txnfs("run", mnt.path, "--", "sh", "-c", SCRIPT.format(m=mnt.path) + "; exit 42")
    assert p.returncode == 42, tl.output_of(p)
    assert re.search(r"transaction \d+ aborted \(command exited with status 42\)", p.stderr), p.stderr
    S.assert_restored(mnt, before, "after a `txnfs run` whose command exited 42")
    # killed by a signal: 128+N, aborted
    p = tl.txnfs("run", mnt.path, "--", "sh", "-c", SCRIPT.format(m=mnt.path) + "; kill -9 $$")
    assert p.returncode == 128 + 9, tl.output_of(p)
    assert "aborted" in p.stderr, p.stderr
    S.assert_restored(mnt, before, "after a `txnfs run` whose command was killed")


# --------------------------------------------------------------------------
# begin / commit / abort from a shell script
# --------------------------------------------------------------------------

def _shell_txn(mnt, end):
    script = f"""set -e
txnfs={tl.txnfs_bin()}
m={mnt.path}
id=$($txnfs begin $m)
echo "id=$id"
mkdir $m/s; echo hello > $m/s/f; ln -s f $m/s/l
mv $m/data/ren1 $m/s/; rm $m/data/victim.bin; echo x >> $m/data/app.txt
$txnfs status $m --json
$txnfs {end} $m $id
echo ended
"""
    p = tl.run(["sh", "-c", script])
    assert p.returncode == 0, tl.output_of(p)
    tid = int(re.search(r"id=(\d+)", p.stdout).group(1))
    st = json.loads(p.stdout.splitlines()[1])
    mine = [t for t in st["transactions"] if t["id"] == tid]
    assert mine and mine[0]["ops"] >= 6 and mine[0]["flags"] == tl.TXNFS_BIND_PROCESS, st
    assert "ended" in p.stdout
    assert tid not in open_txns(mnt)
    return tid


def test_begin_commands_commit_from_one_shell_script(mnt):
    prepared(mnt)
    _shell_txn(mnt, "commit")
    after = S.stable_snapshot(mnt.path)
    assert after["s/f"]["size"] == 6 and after["s/l"]["target"] == "f" and "s/ren1" in after
    assert "data/victim.bin" not in after and "data/ren1" not in after
    S.assert_no_backups(mnt.store)
    mnt.remount()
    S.assert_same(after, S.snapshot(mnt.path), "shell-bracketed commit, after unmount + mount")


def test_begin_commands_abort_from_one_shell_script(mnt):
    before = prepared(mnt)
    _shell_txn(mnt, "abort")
    S.assert_restored(mnt, before, "after `txnfs abort` from the shell")


# --------------------------------------------------------------------------
# ownership
# --------------------------------------------------------------------------

def test_commit_abort_by_other_uid_eperm(mnt):
    before = prepared(mnt)
    with Sleeper() as sl:
        p = tl.txnfs("begin", mnt.path, "--pid", sl.pid, check=True)
        tid = int(p.stdout.strip())
        t = open_txns(mnt)[tid]
        assert t["uid"] == 0 and t["pid"] == sl.pid, t
        for verb in ("commit", "abort"):
            q = tl.run([*NOBODY, tl.txnfs_bin(), verb, mnt.path, tid])
            assert q.returncode == 1, f"nobody could {verb} root's transaction:\n{tl.output_of(q)}"
            assert "not yours" in q.stderr, q.stderr
        # the library says EPERM
        assert tl.as_user(tl.txn_commit, str(mnt.path), tid) == -errno.EPERM
        assert tl.as_user(tl.txn_abort, str(mnt.path), tid) == -errno.EPERM
        assert tl.as_user(lambda: tl.txn_info(str(mnt.path), tid)[0]) in (0, -errno.EPERM)
        # still open and untouched; nobody may not bind root's process either
        assert open_txns(mnt)[tid]["state"] in ("active", 1), open_txns(mnt)
        with Sleeper() as sl2:
            q = tl.run([*NOBODY, tl.txnfs_bin(), "begin", mnt.path, "--pid", sl2.pid])
            assert q.returncode == 1, tl.output_of(q)
        assert tl.txnfs("abort", mnt.path, tid).returncode == 0
    assert tid not in open_txns(mnt)
    S.assert_restored(mnt, before, "after root aborted its transaction")


def test_nobody_owns_its_own_transaction_root_may_end_it(mnt):
    with Sleeper(as_nobody=True) as sl:
        q = tl.run([*NOBODY, tl.txnfs_bin(), "begin", mnt.path, "--pid", sl.pid])
        assert q.returncode == 0, tl.output_of(q)
        tid = int(q.stdout.strip())
        assert open_txns(mnt)[tid]["uid"] == tl.NOBODY_UID
        q = tl.run([*NOBODY, tl.txnfs_bin(), "commit", mnt.path, tid])
        assert q.returncode == 0, tl.output_of(q)
        q = tl.run([*NOBODY, tl.txnfs_bin(), "begin", mnt.path, "--pid", sl.pid])
        tid2 = int(q.stdout.strip())
        assert tl.txnfs("abort", mnt.path, tid2).returncode == 0, "root may abort any transaction"
    assert not open_txns(mnt)


# --------------------------------------------------------------------------
# a killed owner
# --------------------------------------------------------------------------

def test_killed_sleep_owner_is_aborted(mnt):
    aborts0 = status(mnt)["counters"]["aborts"]
    with Sleeper() as sl:
        tid = int(tl.txnfs("begin", mnt.path, "--pid", sl.pid, check=True).stdout)
        assert open_txns(mnt)[tid]["pid"] == sl.pid
        os.kill(sl.pid, 9)
        sl.p.wait(10)
        gone = tl.wait_until(lambda: tid not in open_txns(mnt), 5)
        assert gone, f"5 s after its owner was killed, transaction {tid} is still open: {status(mnt)}"
    assert status(mnt)["counters"]["aborts"] >= aborts0 + 1, status(mnt)


def test_killed_shell_owner_with_changes_leaves_no_trace(mnt):
    before = prepared(mnt)
    script = f"""set -e
m={mnt.path}
id=$({tl.txnfs_bin()} begin $m)
mkdir $m/dir2/s; echo hello > $m/dir2/s/f; mv $m/data/ren1 $m/dir2/s/
rm $m/data/victim.bin; head -c 100000 /dev/urandom >> $m/data/app.txt; chmod 700 $m/dir1/sub
echo "ready $id"
exec sleep 300
"""
    p = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL)
    try:
        line = readline(p)
        assert line.startswith("ready "), line
        tid = int(line.split()[1])
        t = open_txns(mnt)[tid]
        assert t["pid"] == p.pid and t["ops"] >= 5, t
        os.kill(p.pid, 9)
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert tl.wait_until(lambda: tid not in open_txns(mnt), 5), \
        f"5 s after its owner was killed, transaction {tid} is still open: {status(mnt)}"
    S.wait_restored(mnt, before, 5, "after the owner shell was killed")


def test_exited_thread_owner_is_aborted(mnt):
    before = prepared(mnt)
    out = {}

    def body():
        out["tid"] = tl.txn_begin(mnt.path)
        A.apply(mnt.path, ["write_random", "create", "unlink", "rename_dir"])
        # the thread ends without commit or abort

    t = threading.Thread(target=body)
    t.start()
    t.join(30)
    assert not t.is_alive() and "tid" in out
    assert tl.wait_until(lambda: out["tid"] not in open_txns(mnt), 5), \
        f"5 s after its thread exited, transaction {out['tid']} is still open: {status(mnt)}"
    S.wait_restored(mnt, before, 5, "after the owner thread exited")


# --------------------------------------------------------------------------
# txnfs status
# --------------------------------------------------------------------------

def _status_of_open_transaction(mnt, where):
    prepared(mnt)
    tid = tl.txn_begin(mnt.path)           # bound to this (the main) thread
    try:
        (where / "st_new").write_bytes(b"x" * 10_000)
        os.mkdir(where / "st_dir")
        A.op_write_random(mnt.path)
        rc, info = tl.txn_info(mnt.path, tid)
        assert rc == 0 and info.id == tid and info.state == 1 and info.owner_uid == 0, rc
        assert info.flags == tl.TXNFS_BIND_THREAD and info.pid == threading.get_native_id()
        assert info.ops >= 4 and info.backup_bytes > 0, (info.ops, info.backup_bytes)
        # the CLI runs in another process: not part of the transaction
        t = open_txns(mnt)[tid]
        assert t["state"] in ("active", 1) and t["uid"] == 0, t
        assert t["pid"] == threading.get_native_id() and t["flags"] == tl.TXNFS_BIND_THREAD, t
        assert t["ops"] >= 4 and t["backup_bytes"] > 0 and t["locks_held"] >= 1, t
        table = tl.txnfs("status", mnt.path, check=True).stdout
        row = [ln for ln in table.splitlines() if ln.split() and ln.split()[0] == str(tid)]
        assert row and "thread" in row[0] and "active" in row[0], table
        assert str(t["ops"]) in row[0].split(), table
    finally:
        assert tl.txn_abort(mnt.path, tid) == 0
    st = status(mnt)
    assert st["transactions"] == [] and st["counters"]["aborts"] >= 1, st


def test_status_lists_open_transaction_with_ops(mnt):
    """The transaction creates entries in a subdirectory (see the next test for the root)."""
    _status_of_open_transaction(mnt, mnt.path / "dir2")


def test_status_while_transaction_changed_the_root_directory(mnt):
    """`txnfs status` (and every other control call from another process: commit, abort,
    begin) must work while an open transaction holds the mount's root directory, e.g.
    after `txnfs run MNT -- touch MNT/x` created a name in it; that is when status
    matters most."""
    _status_of_open_transaction(mnt, mnt.path)


def test_fsync_in_a_transaction_succeeds_and_abort_still_undoes(mnt):
    """fsync/fdatasync of a transaction's thread return at once (commit makes everything
    durable); an aborted transaction's fsync'd write is undone all the same."""
    p = mnt.path / "synced"
    tl.write_file(p, b"before")
    d = os.open(mnt.path, os.O_RDONLY | os.O_DIRECTORY)
    tid = tl.txn_begin(mnt.path)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
        os.write(fd, b"during")
        os.fsync(fd)
        os.fdatasync(fd)
        os.close(fd)
        os.fsync(d)
    finally:
        os.close(d)
        assert tl.txn_abort(mnt.path, tid) == 0
    assert p.read_bytes() == b"before"


def test_fd_calls_work_on_a_kept_fd_of_the_mount(mnt, xfs):
    """The txnfs_*_fd calls: begin, info, lock timeout, commit (durable and lazy), abort,
    sync and status on one fd the caller keeps open -- any file or directory of the mount
    -- with the same results as the path calls; -EBADF for a negative fd, -ENOTTY for an
    fd outside a txnfs mount."""
    lib = tl.libtxnfs()
    u64, i = ctypes.c_uint64, ctypes.c_int
    lib.txnfs_begin_fd.argtypes = [i, ctypes.c_uint, i, ctypes.POINTER(u64)]
    lib.txnfs_commit2_fd.argtypes = [i, u64, ctypes.c_uint]
    lib.txnfs_abort_fd.argtypes = [i, u64]
    lib.txnfs_info_fd.argtypes = [i, u64, ctypes.POINTER(tl.TxnInfo)]
    lib.txnfs_set_lock_timeout_fd.argtypes = [i, u64, ctypes.c_uint32]
    lib.txnfs_sync_fd.argtypes = [i]
    lib.txnfs_status_json_fd.argtypes = [i, ctypes.c_char_p, ctypes.c_size_t]
    tl.write_file(mnt.path / "kept", b"x")
    root = os.open(mnt.path, os.O_RDONLY | os.O_DIRECTORY)
    file_fd = os.open(mnt.path / "kept", os.O_RDONLY)
    outside = os.open(xfs.dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        def run(fd, name, data):
            tid = u64(0)
            assert lib.txnfs_begin_fd(fd, tl.TXNFS_BIND_THREAD, 0, ctypes.byref(tid)) == 0
            assert lib.txnfs_set_lock_timeout_fd(fd, tid.value, 500) == 0
            tl.write_file(mnt.path / name, data)
            info = tl.TxnInfo()
            assert lib.txnfs_info_fd(fd, tid.value, ctypes.byref(info)) == 0
            assert info.id == tid.value and info.ops > 0
            return tid.value

        tid = run(root, "committed", b"c")
        assert lib.txnfs_commit2_fd(root, tid, 0) == 0
        tid = run(file_fd, "lazy", b"l")
        assert lib.txnfs_commit2_fd(file_fd, tid, tl.TXNFS_COMMIT_LAZY) == 0
        assert lib.txnfs_sync_fd(root) == 0
        tid = run(root, "aborted", b"a")
        assert lib.txnfs_abort_fd(root, tid) == 0

        buf = ctypes.create_string_buffer(8192)
        assert lib.txnfs_status_json_fd(root, buf, len(buf)) == 0
        st = json.loads(buf.value)
        assert st["counters"]["commits"] >= 2 and st["lazy"]["not_durable"] == 0
        tid = u64(0)
        assert lib.txnfs_begin_fd(-1, tl.TXNFS_BIND_THREAD, 0, ctypes.byref(tid)) == -errno.EBADF
        assert lib.txnfs_begin_fd(outside, tl.TXNFS_BIND_THREAD, 0,
                                  ctypes.byref(tid)) == -errno.ENOTTY
    finally:
        for fd in (root, file_fd, outside):
            os.close(fd)
    assert (mnt.path / "committed").read_bytes() == b"c"
    assert (mnt.path / "lazy").read_bytes() == b"l"
    assert not (mnt.path / "aborted").exists()
