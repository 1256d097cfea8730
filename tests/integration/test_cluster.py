"""A txnfs cluster on this machine (docs/cluster.md): a real three-member etcd, two nodes
(each an XFS image, its txnfs daemon with --cluster and its patched Ganesha on a
loopback address of its own, port 2049), brought up by `scripts/cluster up` in a
directory and on a /24 of this test run, with a prepared-transaction timeout of 3 s.

What it proves, against the oracle "every global id's effects are on all its nodes or on
none, no prepared transaction outlives its timeout by more than 5 s":
  - referrals: a path under another node's directory reaches that node;
  - a cross-node batch commits on every node; one whose operation fails on one node
    leaves nothing on any;
  - the coordinator killed (SIGKILL) after every prepare answered, and after the
    decision was written: the nodes resolve by themselves, from etcd;
  - a participant's daemon killed (kill -9) while prepared, with and without a decision:
    its next mount asks etcd and follows it;
  - the etcd leader stopped (SIGSTOP) during the batch: all or nothing;
  - fsck is clean on every node at the end, and `scripts/cluster down` leaves no mount,
    process or loop device.
"""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from txnfs_testing import txnfs_lib as tl

pytestmark = pytest.mark.txnfs_timeout(600)

SCRIPT = tl.REPO / "scripts" / "cluster"
NFS = tl.REPO / "build" / "src" / "compound_bridge" / "client" / "txnfs-nfs"
PREPARED_MS = 3000
SETTLE_S = PREPARED_MS / 1000 + 5     # the oracle's bound for prepared transactions


def _free_net() -> str:
    """A 127.X.Y of no other run: nothing listens on its nodes' and members' ports."""
    rng = random.Random(os.getpid() ^ time.time_ns())
    for _ in range(50):
        net = f"127.{rng.randrange(100, 250)}.{rng.randrange(1, 255)}"
        taken = False
        for host, port in [(f"{net}.1", 2049), (f"{net}.2", 2049), (f"{net}.11", 2379)]:
            with socket.socket() as s:
                s.settimeout(0.2)
                taken = taken or s.connect_ex((host, port)) == 0
        if not taken:
            return net
    raise RuntimeError("no free 127.X.Y found")


class Cluster:
    def __init__(self, root: Path):
        self.dir = root / "cluster"
        self.net = _free_net()
        self.env = dict(os.environ, TXNFS_CLUSTER_DIR=str(self.dir), TXNFS_CLUSTER_NET=self.net,
                        TXNFS_CLUSTER_PREPARED_MS=str(PREPARED_MS))
        self.conf = self.dir / "cluster.conf"

    def script(self, *args, check=True, timeout=180) -> subprocess.CompletedProcess:
        p = subprocess.run([str(SCRIPT), *args], env=self.env, capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        if check:
            assert p.returncode == 0, f"scripts/cluster {' '.join(args)}:\n{p.stdout}\n{p.stderr}"
        return p

    def mnt(self, i: int) -> Path:
        return self.dir / f"n{i}" / "mnt"

    def store(self, i: int) -> Path:
        return self.dir / f"n{i}" / "xfs" / "store"

    def nfs(self, *args, env=None, timeout=120) -> subprocess.CompletedProcess:
        return subprocess.run([str(NFS), "--cluster", str(self.conf), *args],
                              env=dict(os.environ, **(env or {})), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def etcdctl(self, *args) -> str:
        eps = ",".join(f"http://{self.net}.1{k}:2379" for k in (1, 2, 3))
        p = subprocess.run(["etcdctl", "--endpoints", eps, "--dial-timeout=2s",
                            "--command-timeout=5s", *args],
                           env=dict(os.environ, ETCDCTL_API="3"), capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        return p.stdout

    def cluster_name(self) -> str:
        for line in self.conf.read_text().splitlines():
            k, _, v = line.partition("=")
            if k.strip() == "cluster":
                return v.split("#")[0].strip()
        raise AssertionError("no cluster name")

    def decision(self, gid: str) -> str | None:
        out = self.etcdctl("get", f"/txnfs/{self.cluster_name()}/decisions/{gid}").split()
        return out[1] if len(out) == 2 else None

    def prepared(self, i: int) -> list[str]:
        p = tl.txnfs("status", str(self.mnt(i)), "--json")
        assert p.returncode == 0, tl.output_of(p)
        return [t["gid"] for t in json.loads(p.stdout)["transactions"] if t["state"] == "prepared"]

    def wait_settled(self, bound: float = SETTLE_S) -> None:
        """The oracle's second half: no prepared transaction on any node within `bound`."""
        deadline = time.monotonic() + bound
        while True:
            left = {i: self.prepared(i) for i in (1, 2)}
            if not any(left.values()):
                return
            assert time.monotonic() < deadline, f"prepared transactions left after {bound} s: {left}"
            time.sleep(0.2)

    def daemon_pid(self, i: int) -> int:
        return int((self.dir / f"n{i}" / "txnfs.pid").read_text())


def gid_of(p: subprocess.CompletedProcess) -> str:
    for line in (p.stdout + p.stderr).splitlines():
        for word in line.split():
            if word.startswith("gid="):
                return word[4:]
    raise AssertionError(f"no gid in the client's output:\n{p.stdout}\n{p.stderr}")


def all_or_nothing(c: Cluster, files: dict[Path, str]) -> bool:
    """The oracle's first half: every file of one global transaction has the batch's
    content, or none exists. Returns which."""
    present = {f: f.exists() for f in files}
    assert len(set(present.values())) == 1, f"a global transaction is on some nodes only: {present}"
    if all(present.values()):
        for f, want in files.items():
            assert f.read_text() == want, f
    return all(present.values())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    assert NFS.exists(), f"{NFS} is not built"
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        t0 = time.monotonic()
        c.script("up", "2")
        c.up_seconds = time.monotonic() - t0
        yield c
    finally:
        p = c.script("down", "--wipe", check=False)
        mounts = Path("/proc/mounts").read_text()
        loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
        assert p.returncode == 0, p.stdout + p.stderr
        assert str(c.dir) not in mounts, mounts
        assert str(c.dir) not in loops, loops


def test_up_brings_up_etcd_and_two_nodes_with_stubs(cluster):
    c = cluster
    health = subprocess.run(
        ["etcdctl", "--endpoints", ",".join(f"http://{c.net}.1{k}:2379" for k in (1, 2, 3)),
         "endpoint", "health"], env=dict(os.environ, ETCDCTL_API="3"),
        capture_output=True, text=True, timeout=30)
    assert health.returncode == 0 and health.stdout.count("is healthy") + health.stderr.count("is healthy") == 3
    assert c.etcdctl("get", f"/txnfs/{c.cluster_name()}/map/b").split()[1] == "n2"
    stub = c.mnt(1) / "b"
    assert stub.is_dir() and (stub.stat().st_mode & 0o7777) == 0o1000
    assert os.getxattr(stub, "user.fs_location").decode() == f"{c.net}.2:/b"
    assert (c.mnt(2) / "b").is_dir() and (c.mnt(1) / "a").is_dir()
    again = c.script("up")   # idempotent
    assert "already up" in again.stdout + again.stderr


def test_a_referral_is_followed_to_the_owning_node(cluster):
    c = cluster
    p = subprocess.run([str(NFS), "--server", f"{c.net}.1", "--port", "2049", "--txn",
                        "write", "/b/by-referral", "=R"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (c.mnt(2) / "b" / "by-referral").read_text() == "R"
    assert os.listdir(c.mnt(1) / "b") == []     # nothing in node 1's stub


def test_a_cross_node_batch_commits_on_every_node(cluster):
    c = cluster
    p = c.nfs("--txn", "write", "/a/c1", "=one", ";", "write", "/b/c1", "=two")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "decision=commit" in p.stdout
    assert all_or_nothing(c, {c.mnt(1) / "a" / "c1": "one", c.mnt(2) / "b" / "c1": "two"})
    assert c.decision(gid_of(p)) == "commit"
    c.wait_settled(0)


def test_an_operation_failing_on_one_node_leaves_nothing_on_any(cluster):
    c = cluster
    p = c.nfs("--txn", "write", "/a/f1", "=one", ";", "write", "/b/f1", "=two", ";",
              "remove", "/b/does-not-exist")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "decision=abort" in p.stdout
    assert not all_or_nothing(c, {c.mnt(1) / "a" / "f1": "one", c.mnt(2) / "b" / "f1": "two"})
    c.wait_settled(0)


def test_a_cross_node_rename_is_refused_before_anything_is_sent(cluster):
    c = cluster
    (c.mnt(1) / "a" / "r1").write_text("x")
    p = c.nfs("--txn", "rename", "/a/r1", "/b/r1")
    assert p.returncode == 2 and "crosses nodes" in p.stdout + p.stderr
    assert (c.mnt(1) / "a" / "r1").exists() and not (c.mnt(2) / "b" / "r1").exists()


@pytest.mark.parametrize("stop", ["after-prepare", "after-decision"])
def test_a_killed_coordinator_blocks_nobody_past_the_timeout(cluster, stop):
    c = cluster
    name = f"k-{stop}"
    files = {c.mnt(1) / "a" / name: "one", c.mnt(2) / "b" / name: "two"}
    p = c.nfs("--txn", "write", f"/a/{name}", "=one", ";", "write", f"/b/{name}", "=two",
              env={"TXNFS_NFS_2PC_STOP": stop})
    assert p.returncode == -signal.SIGKILL, p.stdout + p.stderr
    gid = gid_of(p)
    assert c.prepared(1) == [gid] and c.prepared(2) == [gid]
    for f in files:   # a plain reader sees only committed state
        assert not f.exists()
    assert c.decision(gid) == (None if stop == "after-prepare" else "commit")
    c.wait_settled()
    committed = all_or_nothing(c, files)
    assert committed == (stop == "after-decision")
    assert c.decision(gid) == ("commit" if committed else "abort")


@pytest.mark.parametrize("decided", [False, True])
def test_a_participant_killed_while_prepared_follows_etcd_at_its_next_mount(cluster, decided):
    c = cluster
    name = f"p-{int(decided)}"
    files = {c.mnt(1) / "a" / name: "one", c.mnt(2) / "b" / name: "two"}
    p = c.nfs("--txn", "write", f"/a/{name}", "=one", ";", "write", f"/b/{name}", "=two",
              env={"TXNFS_NFS_2PC_STOP": "after-decision" if decided else "after-prepare"})
    assert p.returncode == -signal.SIGKILL, p.stdout + p.stderr
    gid = gid_of(p)
    pid = c.daemon_pid(2)
    os.kill(pid, signal.SIGKILL)     # node 2 dies while prepared
    assert tl.wait_dead(pid)
    # Node 1 settles by itself; node 2 when it is mounted again (scripts/cluster up finds
    # the dead daemon, unmounts it and mounts the store again: recovery asks etcd).
    up = c.script("up")
    assert "transaction" in (c.dir / "n2" / "txnfs.log").read_text()
    c.wait_settled()
    assert all_or_nothing(c, files) == decided, up.stdout + up.stderr
    assert c.decision(gid) == ("commit" if decided else "abort")


def test_the_etcd_leader_stopped_during_a_batch_leaves_all_or_nothing(cluster):
    c = cluster
    eps = ",".join(f"http://{c.net}.1{k}:2379" for k in (1, 2, 3))
    out = subprocess.run(["etcdctl", "--endpoints", eps, "endpoint", "status", "-w", "json"],
                         env=dict(os.environ, ETCDCTL_API="3"), capture_output=True, text=True,
                         timeout=30)
    st = json.loads(out.stdout)
    leader = next(e["Endpoint"] for e in st if e["Status"]["leader"] == e["Status"]["header"]["member_id"])
    k = leader.split(":")[1][-1]          # http://127.X.Y.1k:2379
    pid = int((c.dir / f"etcd{k}.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        files = {c.mnt(1) / "a" / "l1": "one", c.mnt(2) / "b" / "l1": "two"}
        p = c.nfs("--txn", "write", "/a/l1", "=one", ";", "write", "/b/l1", "=two")
    finally:
        os.kill(pid, signal.SIGCONT)
    c.wait_settled(SETTLE_S + 5)
    committed = all_or_nothing(c, files)
    assert committed == (p.returncode == 0), p.stdout + p.stderr


def test_status_and_metrics_show_the_node_and_etcd(cluster):
    c = cluster
    p = tl.txnfs("status", str(c.mnt(1)))
    assert p.returncode == 0, tl.output_of(p)
    assert f"cluster {c.cluster_name()}: node n1" in p.stdout
    deadline = time.monotonic() + 10     # checked every 5 s
    while "etcd: healthy (3 of 3 members answer" not in p.stdout:
        assert time.monotonic() < deadline, p.stdout
        time.sleep(0.5)
        p = tl.txnfs("status", str(c.mnt(1)))
    prom = c.dir / "n1" / "txnfs-n1.prom"
    while not prom.exists():
        assert time.monotonic() < deadline, f"{prom} was not written"
        time.sleep(0.5)
    def values():
        out = {}
        for line in prom.read_text().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)        # the Prometheus text format: NAME VALUE
        return out
    c.wait_settled()
    deadline = time.monotonic() + 12           # rewritten every 5 s
    while (v := values())["txnfs_prepared_transactions"] != 0:
        assert time.monotonic() < deadline, v
        time.sleep(0.5)
    values = v
    assert values["txnfs_cluster_etcd_healthy"] == 1
    assert values["txnfs_commits_total"] >= 1 and values["txnfs_prepares_total"] >= 1
    assert values['txnfs_commit_seconds_bucket{le="+Inf"}'] == values["txnfs_commit_seconds_count"]


def test_a_prepared_store_is_refused_without_its_cluster_and_recovered_with_it(cluster, mnt, tmp_path):
    """A transaction prepared through libtxnfs, then a crash: without a cluster
    configuration mount and recover refuse and change nothing; with one they follow
    etcd's decision."""
    c = cluster
    gid = f"solo-{os.getpid()}"
    tid = tl.txn_begin(mnt.path)
    tl.write_file(mnt.path / "prepared-file", b"decided by etcd")
    assert tl.txn_prepare(mnt.path, tid, gid) == 0
    assert tl.txn_prepare(mnt.path, tid, gid) == -errno.ENOENT        # prepared: not again
    assert tl.txn_commit(mnt.path, tid) == -errno.ENOENT              # nor committed by id
    assert not (mnt.path / "prepared-file").exists()                  # plain: committed state
    mnt.kill9()
    for p in (tl.txnfs("recover", str(mnt.store.path)),):
        assert p.returncode == 1 and f"is prepared (global id {gid}" in tl.output_of(p), tl.output_of(p)
    with pytest.raises(AssertionError, match="waits for its cluster's decision"):
        mnt.mount()
    conf = tmp_path / "solo.conf"
    conf.write_text(c.conf.read_text() + "node = solo\n")
    c.etcdctl("put", f"/txnfs/{c.cluster_name()}/decisions/{gid}", "commit")
    p = tl.txnfs("recover", str(mnt.store.path), "--cluster", str(conf))
    assert p.returncode == 0, tl.output_of(p)
    mnt.mount("--cluster", str(conf))
    assert (mnt.path / "prepared-file").read_bytes() == b"decided by etcd"


def test_txnfs_resolve_applies_etcds_decision_and_only_root_may(cluster, mnt, tmp_path):
    """`txnfs resolve` by hand: no decision -> exit 3, nothing changed; with
    --abort-if-undecided it writes ABORT and rolls back; a COMMIT in etcd commits. Another
    user can neither resolve nor prepare someone else's transaction."""
    c = cluster
    conf = tmp_path / "solo.conf"
    text = c.conf.read_text()
    assert f"prepared_timeout_ms = {PREPARED_MS}" in text
    conf.write_text(text.replace(f"prepared_timeout_ms = {PREPARED_MS}",
                                 "prepared_timeout_ms = 600000") + "node = solo\n")
    mnt.remount("--cluster", str(conf))            # (its resolver waits 10 minutes)
    gids = [f"byhand-{os.getpid()}-{k}" for k in (1, 2)]
    for k, gid in enumerate(gids):
        tid = tl.txn_begin(mnt.path)
        tl.write_file(mnt.path / f"f{k}", b"x")
        assert tl.as_user(tl.txn_prepare, mnt.path, tid, gid) == -errno.EPERM
        assert tl.txn_prepare(mnt.path, tid, gid) == 0
        assert tl.as_user(tl.txn_resolve, mnt.path, gid, True) == -errno.EPERM
    p = tl.txnfs("resolve", str(mnt.path), gids[0], "--cluster", str(conf))
    assert p.returncode == 3 and "no decision" in tl.output_of(p), tl.output_of(p)
    assert c.decision(gids[0]) is None and not (mnt.path / "f0").exists()
    p = tl.txnfs("resolve", str(mnt.path), gids[0], "--cluster", str(conf), "--abort-if-undecided")
    assert p.returncode == 0 and "rolled back" in p.stdout, tl.output_of(p)
    assert c.decision(gids[0]) == "abort"
    c.etcdctl("put", f"/txnfs/{c.cluster_name()}/decisions/{gids[1]}", "commit")
    p = tl.txnfs("resolve", str(mnt.path), gids[1], "--cluster", str(conf), "--abort-if-undecided")
    assert p.returncode == 0 and "committed" in p.stdout, tl.output_of(p)
    assert (mnt.path / "f1").read_bytes() == b"x" and not (mnt.path / "f0").exists()
    p = tl.txnfs("resolve", str(mnt.path), gids[1], "--cluster", str(conf))
    assert p.returncode == 0 and "resolved already" in p.stdout, tl.output_of(p)


def test_zz_every_node_is_clean_and_down_leaves_nothing(cluster):
    c = cluster
    c.wait_settled()
    for i in (1, 2):
        p = tl.txnfs("fsck", str(c.store(i)))
        assert p.returncode == 0, tl.output_of(p)
    check = c.script("check", check=False, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
