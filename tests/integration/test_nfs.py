"""NFS end to end: the patched NFS-Ganesha exports a real txnfs mount, the txnfs-nfs
client sends real NFSv4.1 COMPOUNDs over TCP. A COMPOUND tagged "txn" is one
transaction: all of its operations take effect or none do, seen both through NFS and on
the backing store. The same COMPOUNDs against Debian's unpatched Ganesha on plain XFS
leave partial state (the tests can fail)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from txnfs_testing import ganesha_lib as gl
from txnfs_testing import snapshot as S
from txnfs_testing import txnfs_lib as tl
from txnfs_testing.nfs_lib import Nfs

PASSWD = "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\n"
GROUP = "root:x:0:\nalice:x:1000:\n"
SHADOW = "root:*:19000:0:99999:7:::\nalice:$y$j9T$x:19000:0:99999:7:::\n"


def populate(root: Path) -> None:
    """/etc with the three files of the paper's Figure 1, and a few more objects."""
    (root / "etc").mkdir()
    for name, text in (("passwd", "root:x:0:0::/root:/bin/sh\n"), ("group", "root:x:0:\n"),
                       ("shadow", "root:*:19000:0:99999:7:::\n")):
        (root / "etc" / name).write_text(text)
    (root / "data").mkdir()
    (root / "data" / "a").write_bytes(b"a" * 5000)
    (root / "data" / "b").write_bytes(b"b" * 100)
    (root / "data" / "c").write_bytes(b"c" * 300)
    os.chmod(root / "data" / "c", 0o640)


FIGURE1 = [["write", "/etc/passwd", "=" + PASSWD], ["write", "/etc/group", "=" + GROUP],
           ["write", "/etc/shadow", "=" + SHADOW]]

# mkdir + write + rename + remove + setattr + link + symlink in one COMPOUND.
MIXED = [["mkdir", "/data/new"], ["write", "/data/new/f", "=fresh"],
         ["rename", "/data/a", "/data/new/a2"], ["remove", "/data/b"],
         ["setattr", "/data/c", "mode=0600", "size=7"], ["link", "/data/c", "/data/new/c-link"],
         ["symlink", "../c", "/data/new/sl"], ["write", "/etc/passwd", "=" + PASSWD]]
FAIL = ["remove", "/data/does-not-exist"]


@pytest.fixture
def nfs(mnt, xfs):
    """The patched Ganesha (with the bridge) exporting the txnfs mount."""
    populate(mnt.path)
    with gl.Ganesha(mnt.path, xfs.tmp / "ganesha") as g:
        yield Nfs(g.port)


@pytest.fixture
def plain_nfs(xfs):
    """Debian's unpatched Ganesha exporting a plain directory of the same kind of XFS."""
    root = xfs.dir / "plain"
    root.mkdir()
    populate(root)
    with gl.Ganesha(root, xfs.tmp / "ganesha-debian", debian=True, bridge=False) as g:
        yield Nfs(g.port), root


def test_figure1_compound_commits(nfs, mnt):
    r = nfs.must(*FIGURE1, txn=True)
    assert [o["status"] for o in r.ops] == ["NFS4_OK"] * 3
    for name, text in (("passwd", PASSWD), ("group", GROUP), ("shadow", SHADOW)):
        assert (mnt.path / "etc" / name).read_text() == text           # through FUSE
        assert (mnt.store.tree / "etc" / name).read_text() == text     # backing store
        assert nfs.read(f"/etc/{name}") == text.encode()               # through NFS
    S.assert_no_backups(mnt.store)


def test_figure1_failing_in_the_middle_changes_nothing(nfs, mnt):
    before = S.stable_snapshot(mnt.path)
    ops = FIGURE1[:2] + [FAIL] + FIGURE1[2:]
    r = nfs.run(*ops, txn=True)
    assert r.code == 1 and r.status == "NFS4ERR_NOENT", r.raw
    assert [o["status"] for o in r.ops[:2]] == ["NFS4_OK", "NFS4_OK"]
    assert r.ops[3]["status"] == "not run"
    S.assert_restored(mnt, before, "failed Figure-1 COMPOUND")
    assert nfs.read("/etc/passwd") == b"root:x:0:0::/root:/bin/sh\n"


def test_mixed_compound_rolls_back_everything(nfs, mnt):
    before = S.stable_snapshot(mnt.path)
    r = nfs.run(*MIXED, FAIL, txn=True)
    assert r.status == "NFS4ERR_NOENT" and all(o["status"] == "NFS4_OK" for o in r.ops[:-1]), r.raw
    S.assert_restored(mnt, before, "failed mixed COMPOUND")
    assert nfs.names("/data") == ["a", "b", "c"]
    assert nfs.getattr("/data/c")["mode"] == 0o640


def test_mixed_compound_commits_everything(nfs, mnt):
    nfs.must(*MIXED, txn=True)
    d = mnt.path / "data"
    assert sorted(os.listdir(d)) == ["c", "new"]
    assert sorted(os.listdir(d / "new")) == ["a2", "c-link", "f", "sl"]
    assert (d / "new" / "f").read_bytes() == b"fresh"
    assert (d / "new" / "a2").read_bytes() == b"a" * 5000
    st = os.stat(d / "c")
    assert (st.st_mode & 0o7777, st.st_size, st.st_nlink) == (0o600, 7, 2)
    assert os.readlink(d / "new" / "sl") == "../c"
    assert mnt.store.fsck().returncode == 0


@pytest.mark.parametrize("case", ["untagged-on-txnfs", "unpatched-ganesha-on-xfs"])
def test_without_a_transaction_a_failing_compound_leaves_partial_state(case, request):
    """The control: the same failing COMPOUND is not atomic without a transaction (an
    untagged COMPOUND on txnfs; Debian's Ganesha on plain XFS, tagged or not)."""
    if case == "untagged-on-txnfs":
        nfs = request.getfixturevalue("nfs")
        root = request.getfixturevalue("mnt").path
        r = nfs.run(*MIXED, FAIL)
    else:
        nfs, root = request.getfixturevalue("plain_nfs")
        r = nfs.run(*MIXED, FAIL, txn=True)
    assert r.status == "NFS4ERR_NOENT"
    assert (root / "data" / "new" / "f").read_bytes() == b"fresh"
    assert not (root / "data" / "b").exists()
    assert (root / "etc" / "passwd").read_text() == PASSWD


def test_all_compounds_option_makes_untagged_compounds_atomic(mnt, xfs):
    populate(mnt.path)
    before = S.stable_snapshot(mnt.path)
    with gl.Ganesha(mnt.path, xfs.tmp / "ganesha", bridge_options={"all_compounds": "yes"}) as g:
        nfs = Nfs(g.port)
        r = nfs.run(*MIXED, FAIL)
        assert r.status == "NFS4ERR_NOENT"
        S.assert_restored(mnt, before, "failed untagged COMPOUND with all_compounds")
        nfs.must(*FIGURE1)
    assert (mnt.path / "etc" / "shadow").read_text() == SHADOW


def test_after_abort_nfs_shows_the_old_state_everywhere(nfs, mnt):
    """GETATTR, READ, READDIR and LOOKUP right after an aborted COMPOUND: no cache in
    Ganesha or the kernel serves rolled-back state."""
    old_attr = nfs.getattr("/data/c")
    old_names = nfs.names("/data")
    assert nfs.read("/data/a") == b"a" * 5000
    r = nfs.run(["write", "/data/a", "=short"], ["setattr", "/data/c", "mode=0600"],
                ["write", "/data/created", "=x"], ["remove", "/data/b"], FAIL, txn=True)
    assert r.status == "NFS4ERR_NOENT"
    attr = nfs.getattr("/data/c")
    assert (attr["mode"], attr["size"]) == (old_attr["mode"], old_attr["size"])
    assert nfs.read("/data/a") == b"a" * 5000
    assert nfs.getattr("/data/a")["size"] == 5000
    assert nfs.names("/data") == old_names
    assert nfs.run(["getattr", "/data/created"]).status == "NFS4ERR_NOENT"  # LOOKUP
    assert nfs.read("/data/b") == b"b" * 100


def test_handles_survive_restart_and_a_rolled_back_creation_is_stale(mnt, xfs):
    populate(mnt.path)
    work = xfs.tmp / "ganesha"
    with gl.Ganesha(mnt.path, work) as g:
        nfs = Nfs(g.port)
        fh_a = nfs.must(["getfh", "/data/a"]).ops[0]["fh"]
        fh_etc = nfs.must(["getfh", "/etc"]).ops[0]["fh"]
        r = nfs.run(["write", "/data/ghost", "=boo"], ["getfh", "/data/ghost"], FAIL, txn=True)
        assert r.status == "NFS4ERR_NOENT" and r.ops[1]["status"] == "NFS4_OK"
        fh_ghost = r.ops[1]["fh"]
    mnt.umount()
    mnt.mount()
    with gl.Ganesha(mnt.path, work) as g:
        nfs = Nfs(g.port)
        assert nfs.getattr(f"fh:{fh_a}")["size"] == 5000
        assert nfs.read(f"fh:{fh_a}") == b"a" * 5000
        assert sorted(nfs.names(f"fh:{fh_etc}")) == ["group", "passwd", "shadow"]
        r = nfs.run(["getattr", f"fh:{fh_ghost}"])
        assert r.status in ("NFS4ERR_STALE", "NFS4ERR_BADHANDLE"), r.raw


def test_lock_conflict_answers_delay_and_a_retry_succeeds(store, xfs):
    """A COMPOUND that loses a lock wait is rolled back and answered NFS4ERR_DELAY, the
    status that tells clients to retry; once the holder has finished, the retry succeeds."""
    m = tl.Mount(store, xfs.tmp / "mnt", xfs.tmp / "txnfs.pid")
    m.mount("--lock-timeout-ms", "300")
    try:
        populate(m.path)
        before = S.stable_snapshot(m.path)
        # The COMPOUND's lock set is predeclared: it waits at begin, holding nothing,
        # for at most lock_set_timeout_ms, and then is answered DELAY with nothing run.
        with gl.Ganesha(m.path, xfs.tmp / "ganesha",
                        bridge_options={"lock_set_timeout_ms": "300"}) as g:
            nfs = Nfs(g.port)
            tid = tl.txn_begin(m.path)  # this thread's transaction holds /data/a
            try:
                tl.write_file(m.path / "data" / "a", b"held")
                r = nfs.run(["write", "/etc/passwd", "=x"], ["write", "/data/a", "=nfs"], txn=True)
                assert r.status == "NFS4ERR_DELAY", r.raw
            finally:
                assert tl.txn_abort(m.path, tid) == 0
            S.assert_restored(m, before, "NFS COMPOUND that lost a lock wait")
            nfs.must(["write", "/etc/passwd", "=x"], ["write", "/data/a", "=nfs"], txn=True)
        assert (m.path / "data" / "a").read_text() == "nfs"
    finally:
        m.close()


def test_daemon_crash_in_the_middle_of_a_compound_is_recovered(store, xfs):
    m = tl.Mount(store, xfs.tmp / "mnt", xfs.tmp / "txnfs.pid")
    m.mount()
    populate(m.path)
    before = S.stable_snapshot(m.path)
    m.umount()
    # The daemon dies after the 4th undo record of the next transaction: mid-COMPOUND.
    with tl.crash_at("undo.after_record:4"):
        m.mount()
    try:
        with gl.Ganesha(m.path, xfs.tmp / "ganesha") as g:
            r = Nfs(g.port).run(*FIGURE1, ["write", "/data/a", "=zzz"], txn=True, timeout=120)
            assert r.status != "NFS4_OK", r.raw
        assert tl.wait_dead(m.pid, 10), "the crash point did not fire"
        m.pid = None
        tl.lazy_umount(m.path)
        m.mount()  # recovery runs first
        S.assert_restored(m, before, "daemon crash mid-COMPOUND")
        assert store.fsck().returncode == 0
    finally:
        m.close()


def test_client_session_works_after_a_failed_open(nfs, mnt):
    """Ganesha's own state is not rolled back: the OPEN of a failed COMPOUND leaves an
    open stateid in the session (released at DESTROY_CLIENTID or lease expiry). The file
    itself is gone, and the same client can create it again."""
    r = nfs.run(["write", "/data/tmpfile", "=one"], FAIL, txn=True)
    assert r.status == "NFS4ERR_NOENT"
    assert not (mnt.path / "data" / "tmpfile").exists()
    nfs.must(["write", "/data/tmpfile", "=two"], txn=True)
    assert (mnt.path / "data" / "tmpfile").read_text() == "two"


def test_concurrent_compounds_are_serializable(nfs, mnt):
    """Writers each replace three files in one COMPOUND with the same stamp; readers read
    the three in one COMPOUND and must never see a mix. Nothing hangs."""
    (mnt.path / "s").mkdir()
    for n in "xyz":
        (mnt.path / "s" / n).write_text("0.0")
    rounds = 15

    def writer(i):
        for k in range(rounds):
            r = nfs.run(*[["write", f"/s/{n}", f"={i}.{k}"] for n in "xyz"], txn=True, retry=50)
            assert r.ok, r.raw

    def reader(_):
        seen = []
        for _k in range(rounds * 2):
            r = nfs.run(*[["read", f"/s/{n}"] for n in "xyz"], txn=True, retry=50)
            assert r.ok, r.raw
            crcs = {o["crc32"] for o in r.ops}
            assert len(crcs) == 1, f"a reader saw a mix of transactions: {r.ops}"
            seen.append(crcs.pop())
        return seen

    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(6) as ex:
        futs = [ex.submit(writer, i) for i in range(1, 5)] + [ex.submit(reader, j) for j in range(2)]
        for f in futs:
            f.result(timeout=600)
    final = {(mnt.path / "s" / n).read_text() for n in "xyz"}
    assert len(final) == 1


def test_a_1_mib_compound_of_over_1024_operations_is_one_transaction(nfs, mnt):
    """As many 4 KiB files as fit in 1 MiB: about 1,200 NFS operations, beyond stock
    Ganesha's limits (100 operations; 1024 in its XDR code), in one transaction."""
    n = 220  # 5 NFS operations each (PUTROOTFH, LOOKUP, OPEN, WRITE, CLOSE)
    ops = [["write", f"/data/f{i:04}", "--size", "4096"] for i in range(n)]
    r = nfs.run(*ops, txn=True)
    assert r.ok, r.raw
    assert r.raw["nfs_ops"] > 1024 and r.raw["request_bytes"] > 800_000, r.raw
    assert len(os.listdir(mnt.path / "data")) == n + 3
    before = S.stable_snapshot(mnt.path)
    r = nfs.run(*[["write", f"/data/f{i:04}", "=overwritten"] for i in range(n)], FAIL, txn=True)
    assert r.status == "NFS4ERR_NOENT" and r.raw["nfs_results"] > 1024, r.raw
    S.assert_restored(mnt, before, "failed COMPOUND of over 1,024 operations")


def test_plain_compounds_do_not_see_an_open_transaction(nfs, mnt):
    """An untagged COMPOUND is a plain request to the daemon: while a transaction has
    changed a file and created another, NFS shows the committed state only."""
    tid = tl.txn_begin(mnt.path)  # bound to this thread; the client is another process
    try:
        tl.write_file(mnt.path / "data" / "a", b"uncommitted")
        (mnt.path / "data" / "new").write_bytes(b"uncommitted")
        assert nfs.read("/data/a") == b"a" * 5000
        assert nfs.getattr("/data/a")["size"] == 5000
        assert nfs.names("/data") == ["a", "b", "c"]
        assert nfs.run(["getattr", "/data/new"]).status == "NFS4ERR_NOENT"
    finally:
        assert tl.txn_commit(mnt.path, tid) == 0
    assert nfs.read("/data/a") == b"uncommitted"
    assert nfs.names("/data") == ["a", "b", "c", "new"]


def test_concurrent_creations_are_all_or_nothing(nfs, mnt):
    """Writers each create three files in three directories in one COMPOUND, some
    COMPOUNDs failing at the end; readers list the three directories in one COMPOUND and
    must see every stamp in all three or in none."""
    for d in "pqr":
        (mnt.path / d).mkdir()

    def writer(i):
        for k in range(10):
            ops = [["write", f"/{d}/w{i}-{k}", f"={i}.{k}"] for d in "pqr"]
            if k % 3 == 2:
                ops.append(FAIL)
            r = nfs.run(*ops, txn=True, retry=50)
            assert r.ok == (k % 3 != 2), r.raw

    def reader(_):
        for _k in range(20):
            r = nfs.run(*[["readdir", f"/{d}"] for d in "pqr"], txn=True, retry=50)
            assert r.ok, r.raw
            listings = [set(o["names"]) for o in r.ops]
            assert listings[0] == listings[1] == listings[2], f"a reader saw a partial COMPOUND: {listings}"

    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(5) as ex:
        futs = [ex.submit(writer, i) for i in range(3)] + [ex.submit(reader, j) for j in range(2)]
        for f in futs:
            f.result(timeout=600)
    want = {f"w{i}-{k}" for i in range(3) for k in range(10) if k % 3 != 2}
    for d in "pqr":
        assert set(os.listdir(mnt.path / d)) == want
