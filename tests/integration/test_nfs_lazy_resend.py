"""txnfs-nfs --lazy --journal DIR: lazy COMPOUNDs (tag txn-lazy) that a crash of the
server lost are sent again, whole, in their order, each exactly once -- never one that
survived. Real parts only: a txnfs mount (--lazy-flush-ms 60000, so only what asks for
durability makes lazy commits durable), the patched NFS-Ganesha with the bridge, the
real client on the wire; the crash is kill -9 of the txnfs daemon, the restart is
recovery at the next mount and a new Ganesha (a new write verifier).

The COMPOUNDs are chosen so that sending one twice fails (mkdir of an existing
directory, remove or rename of a name that is gone), and so that sending them out of
order fails too (a later one works inside a directory an earlier one made)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from txnfs_testing import ganesha_lib as gl
from txnfs_testing import txnfs_lib as tl
from txnfs_testing.nfs_lib import CLIENT, TIMEOUT

NEVER = "60000"  # --lazy-flush-ms: only the test makes lazy commits durable
MARKER_DIR = ".txnfs-nfs"


class Server:
    """The txnfs mount and a Ganesha exporting it; crash() kills the daemon, recovers
    the store at a new mount and starts a new Ganesha. Every Ganesha is stopped (by PID)
    at teardown."""

    def __init__(self, mnt, work: Path):
        self.mnt = mnt
        self.work = work
        self.servers: list[gl.Ganesha] = []
        self.mnt.remount("--lazy-flush-ms", NEVER)
        self._start()

    def _start(self):
        g = gl.Ganesha(self.mnt.path, self.work / f"ganesha{len(self.servers)}")
        self.servers.append(g)
        g.start()
        self.started = time.time()   # the server's start time is at most this

    @property
    def port(self) -> int:
        return self.servers[-1].port

    def not_durable(self) -> int:
        return tl.txn_status(self.mnt.path)["lazy"]["not_durable"]

    def crash(self):
        self.mnt.kill9()                  # the unflushed lazy commits are lost
        self.servers[-1].stop()           # its export is gone with the daemon
        self.mnt.mount("--lazy-flush-ms", NEVER)   # recovery rolls them back
        # Ganesha's write verifier is its start time in whole seconds (nfs_ServerEpoch):
        # a server started within the same second would answer with the same one.
        time.sleep(max(0.0, int(self.started) + 1 - time.time()))
        self._start()

    def close(self):
        failures = []
        for g in reversed(self.servers):
            try:
                g.stop()
            except RuntimeError as e:
                failures.append(str(e))
        assert not failures, "\n".join(failures)


@pytest.fixture
def server(mnt, tmp_path):
    s = Server(mnt, tmp_path)
    try:
        yield s
    finally:
        s.close()


def txnfs_nfs(port, *args) -> subprocess.CompletedProcess:
    cmd = [str(CLIENT), "--port", str(port), *[str(a) for a in args]]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)


def argv(ops) -> list[str]:
    out = []
    for i, o in enumerate(ops):
        out += ([";"] if i else []) + list(o)
    return out


def lazy(server, journal, *ops) -> dict:
    """One journaled lazy COMPOUND that must succeed; its JSON report."""
    p = txnfs_nfs(server.port, "--json", "--lazy", "--journal", journal, *argv(ops))
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    r = json.loads(p.stdout)
    assert r["status"] == "NFS4_OK" and r["tag"] == "txn-lazy", r
    return r


def sync(server, journal) -> dict:
    p = txnfs_nfs(server.port, "--json", "--journal", journal, "sync")
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return json.loads(p.stdout)


def kept(journal: Path) -> list[int]:
    return sorted(int(n) for n in os.listdir(journal) if n.isdigit())


def tree(root: Path) -> dict:
    """path -> "dir" or the file's bytes, below ROOT, without the marker directory."""
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != MARKER_DIR]
        rel = Path(d).relative_to(root)
        for x in dirs:
            out[str(rel / x)] = "dir"
        for x in files:
            out[str(rel / x)] = (Path(d) / x).read_bytes()
    return out


def marker(mnt, journal: Path) -> str:
    ident = json.loads((journal / "journal").read_text().split("\n", 1)[1])["id"]
    return (mnt.path / MARKER_DIR / ident).read_text()


# The COMPOUNDs of the first two tests; each fails when sent a second time.
C1 = [["mkdir", "/a"], ["write", "/a/f", "=one"]]
C2 = [["rename", "/a/f", "/a/g"], ["mkdir", "/b"]]
C3 = [["remove", "/a/g"], ["mkdir", "/c"]]
C4 = [["rename", "/b", "/c/b2"], ["write", "/c/x", "=two"]]
C5 = [["mkdir", "/d"], ["write", "/d/y", "=three"]]
AFTER_C2 = {"a": "dir", "a/g": b"one", "b": "dir"}
AFTER_C5 = {"a": "dir", "c": "dir", "c/b2": "dir", "c/x": b"two", "d": "dir", "d/y": b"three"}


def test_sync_sends_only_the_lost_compounds_again_in_order(server, mnt, tmp_path):
    j = tmp_path / "journal"
    lazy(server, j, *C1)
    lazy(server, j, *C2)
    assert kept(j) == [1, 2] and server.not_durable() == 2
    s = sync(server, j)
    assert (s["durable"], s["resent"], s["marker"]) == (2, 0, 2), s
    assert kept(j) == [] and server.not_durable() == 0
    verifiers = [lazy(server, j, *c)["journal"]["verifier"] for c in (C3, C4, C5)]
    assert len(set(verifiers)) == 1 and len(verifiers[0]) == 16, verifiers
    assert kept(j) == [3, 4, 5] and server.not_durable() == 3
    assert tree(mnt.path) == AFTER_C5 and marker(mnt, j) == "5\n"

    server.crash()
    assert tree(mnt.path) == AFTER_C2     # the lazy C3..C5 were lost, C1 and C2 durable
    assert marker(mnt, j) == "2\n"

    s = sync(server, j)
    assert (s["durable"], s["resent"], s["dropped"], s["marker"]) == (0, 3, 0, 5), s
    assert kept(j) == [] and server.not_durable() == 0
    assert tree(mnt.path) == AFTER_C5     # each applied exactly once, in order
    # the restarted server answers with another write verifier
    r = lazy(server, j, ["write", "/e", "=four"])
    assert r["journal"]["verifier"] not in ("", verifiers[0]), r["journal"]
    assert r["journal"]["seq"] == 6 and kept(j) == [6]


def test_next_lazy_compound_sends_the_lost_ones_first(server, mnt, tmp_path):
    j = tmp_path / "journal"
    lazy(server, j, *C1)
    sync(server, j)
    lazy(server, j, *C2)
    lazy(server, j, ["mkdir", "/b/inner"])
    server.crash()
    assert tree(mnt.path) == {"a": "dir", "a/f": b"one"}
    # needs both lost COMPOUNDs (the directory /b/inner), in their order
    r = lazy(server, j, ["write", "/b/inner/z", "=after"])
    assert (r["journal"]["resent"], r["journal"]["seq"]) == (2, 4), r["journal"]
    assert kept(j) == [2, 3, 4]
    want = {"a": "dir", "a/g": b"one", "b": "dir", "b/inner": "dir", "b/inner/z": b"after"}
    assert tree(mnt.path) == want
    # a failing lazy COMPOUND is rolled back (marker included) and not kept
    p = txnfs_nfs(server.port, "--json", "--lazy", "--journal", j, "mkdir", "/x", ";",
                  "remove", "/missing")
    assert p.returncode == 1, p.stderr
    assert json.loads(p.stdout)["journal"]["kept"] is False
    assert kept(j) == [2, 3, 4] and marker(mnt, j) == "4\n"
    s = sync(server, j)
    assert (s["durable"], s["resent"]) == (3, 0), s
    assert tree(mnt.path) == want and kept(j) == []


def test_sync_with_nothing_lost_removes_everything(server, mnt, tmp_path):
    # --lazy alone: the lazy tag, no marker, nothing kept
    p = txnfs_nfs(server.port, "--json", "--lazy", "mkdir", "/lazy")
    assert p.returncode == 0 and json.loads(p.stdout)["tag"] == "txn-lazy", p.stderr
    assert server.not_durable() == 1 and not (mnt.path / MARKER_DIR).exists()
    os.rmdir(mnt.path / "lazy")           # a plain change: makes it durable first
    assert server.not_durable() == 0
    j = tmp_path / "journal"
    for i in range(3):
        lazy(server, j, ["mkdir", f"/d{i}"], ["write", f"/d{i}/f", f"={i}"])
    assert kept(j) == [1, 2, 3] and server.not_durable() == 3
    p = txnfs_nfs(server.port, "--journal", j, "sync")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("sync: 3 durable, 0 lost and sent again"), p.stdout
    assert kept(j) == [] and server.not_durable() == 0
    # --journal-max: a sync by itself once more COMPOUNDs are kept
    for i in range(3, 6):
        p = txnfs_nfs(server.port, "--json", "--lazy", "--journal", j, "--journal-max", "2",
                      "mkdir", f"/d{i}")
        assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["sync"]["durable"] == 3
    assert kept(j) == [] and server.not_durable() == 0
    server.crash()                        # nothing left to lose
    assert sorted(k for k in tree(mnt.path) if "/" not in k) == [f"d{i}" for i in range(6)]
    assert sync(server, j)["durable"] == 0 and kept(j) == []
    # the marker directory is in the export, one marker per journal; like /tmp, every
    # user may keep markers there, and only remove their own
    assert stat.S_IMODE(os.stat(mnt.path / MARKER_DIR).st_mode) == 0o1777
    assert os.listdir(mnt.path / MARKER_DIR) == [json.loads(
        (j / "journal").read_text().split("\n", 1)[1])["id"]]


def test_a_compound_whose_reply_was_never_seen_is_settled_by_the_marker(server, mnt, tmp_path):
    """The client stopped after sending (the entry still pending): the marker tells
    whether it took effect -- kept if it did, dropped (never sent again) if not."""
    j = tmp_path / "journal"
    lazy(server, j, ["mkdir", "/a"])
    lazy(server, j, ["mkdir", "/b"])
    os.rename(j / "2", j / "2.pending")      # took effect, reply not recorded
    s = sync(server, j)
    assert (s["durable"], s["dropped"]) == (2, 0), s
    lazy(server, j, ["mkdir", "/c"])
    entry = (j / "3").read_bytes().replace(b'"seq":3', b'"seq":4')
    (j / "4.pending").write_bytes(entry)     # saved, never sent
    r = lazy(server, j, ["mkdir", "/d"])
    assert (r["journal"]["dropped"], r["journal"]["resent"], r["journal"]["seq"]) == (1, 0, 5)
    assert kept(j) == [3, 5] and not os.path.exists(j / "4.pending")
    s = sync(server, j)
    assert (s["durable"], s["resent"]) == (2, 0), s
    assert tree(mnt.path) == {"a": "dir", "b": "dir", "c": "dir", "d": "dir"}


def test_each_user_keeps_its_own_marker(server, mnt, tmp_path):
    """The marker directory is shared like /tmp (mode 1777): a second user's journal
    keeps its marker beside root's, owned by that user."""
    (mnt.path / "pub").mkdir()
    os.chmod(mnt.path / "pub", 0o777)
    lazy(server, tmp_path / "journal", ["mkdir", "/pub/root"])
    home = Path(tempfile.mkdtemp())          # its parent is searchable; tmp_path is not
    try:
        os.chown(home, 1000, 1000)
        user = {"user": 1000, "group": 1000, "extra_groups": []}
        for args in (["--lazy", "--journal", home / "j", "mkdir", "/pub/user"],
                     ["--journal", home / "j", "sync"]):
            p = subprocess.run([str(CLIENT), "--port", str(server.port), *map(str, args)],
                               capture_output=True, text=True, timeout=TIMEOUT, **user)
            assert p.returncode == 0, p.stderr
        assert "sync: 1 durable, 0 lost" in p.stdout, p.stdout
        markers = {m.stat().st_uid for m in (mnt.path / MARKER_DIR).iterdir()}
        assert markers == {0, 1000}
        assert (mnt.path / "pub" / "user").stat().st_uid == 1000
    finally:
        shutil.rmtree(home)


def test_missing_or_garbled_marker_is_a_clear_error(server, mnt, tmp_path):
    j = tmp_path / "journal"
    lazy(server, j, ["mkdir", "/a"])
    ident = json.loads((j / "journal").read_text().split("\n", 1)[1])["id"]
    m = mnt.path / MARKER_DIR / ident
    m.write_text("garbage\n")
    p = txnfs_nfs(server.port, "--journal", j, "sync")
    assert p.returncode == 2 and "is garbled (it holds 'garbage" in p.stderr, p.stderr
    p = txnfs_nfs(server.port, "--lazy", "--journal", j, "mkdir", "/b")
    assert p.returncode == 2 and "is garbled" in p.stderr, p.stderr
    m.unlink()
    p = txnfs_nfs(server.port, "--journal", j, "sync")
    assert p.returncode == 2 and f"the marker /{MARKER_DIR}/{ident} is missing" in p.stderr, p.stderr
    assert kept(j) == [1]                 # nothing dropped on a guess
    assert not (mnt.path / "b").exists()
    m.write_text("7\n")                   # ahead of the journal
    p = txnfs_nfs(server.port, "--journal", j, "sync")
    assert p.returncode == 2 and "says 7, but the journal's last COMPOUND is 1" in p.stderr, p.stderr
    m.write_text("1\n")
    assert sync(server, j)["durable"] == 1


def test_bad_journal_directory_is_a_clear_error(server, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    other = tmp_path / "other"
    other.mkdir()
    (other / "data").write_text("mine")
    garbled = tmp_path / "garbled"
    garbled.mkdir()
    (garbled / "journal").write_text("txnfs-nfs journal 1\n{\"id\": 3}\n")
    cases = [
        (["--lazy", "--journal", f, "mkdir", "/a"], "not a directory"),
        (["--lazy", "--journal", tmp_path / "no" / "such", "mkdir", "/a"], "cannot create it"),
        (["--lazy", "--journal", other, "mkdir", "/a"], "not a txnfs-nfs journal"),
        (["--journal", garbled, "sync"], "garbled journal state"),
        (["--journal", tmp_path / "j", "mkdir", "/a"], "--journal keeps lazy COMPOUNDs: add --lazy"),
        (["sync"], "sync needs --journal DIR"),
    ]
    for args, why in cases:
        p = txnfs_nfs(server.port, *args)
        assert p.returncode == 2 and why in p.stderr, (args, p.stderr)
    assert (other / "data").read_text() == "mine" and sorted(os.listdir(other)) == ["data"]
    assert not (tmp_path / "j").exists()
    assert not (server.mnt.path / "a").exists()
