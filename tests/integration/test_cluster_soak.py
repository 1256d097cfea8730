"""The cross-node crash soak at CI size: `tests/crash/cluster-soak --cases 16` runs two
cases of each of its eight failure kinds (the coordinator killed after prepare, after the
decision and at a random moment; a participant's daemon killed while prepared and while
committing; a participant's power cut; the etcd leader stopped and killed) against a
cluster of its own (three etcd members, two nodes, prepared timeout 2 s), with its
oracle after every case: all or nothing on every node, the decision in etcd agreeing, no
transaction left past the timeout + 5 s, fsck clean. The soak itself
(tests/crash/README.md, "cluster-soak") runs 300 and more.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from txnfs_testing import txnfs_lib as tl

pytestmark = pytest.mark.txnfs_timeout(900)

SOAK = tl.REPO / "tests" / "crash" / "cluster-soak"
KINDS = 8
SEED = 3807


def test_every_cluster_failure_kind_leaves_all_or_nothing(tmp_path):
    work = tmp_path / "soak"
    fail = tmp_path / "fail"
    p = subprocess.run([str(SOAK), "--cases", str(2 * KINDS), "--seed", str(SEED),
                        "--prepared-ms", "2000", "--fsck-every", "8", "--full-every", "4",
                        "--workdir", str(work), "--fail-dir", str(fail)],
                       capture_output=True, text=True, timeout=840, stdin=subprocess.DEVNULL)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "violations 0, unresolved 0, errors 0" in out, out
    kinds = re.search(r"cases per kind: (.*)", out).group(1)
    counts = [int(n) for n in re.findall(r"\S+ (\d+)(?:,|$)", kinds)]
    assert len(counts) == KINDS and set(counts) == {2}, kinds
    assert re.search(r"fsck: \d+ runs x 2 nodes, all clean", out), out
    assert "cluster down (no mount, loop device or process left)" in out, out
    assert str(work) not in open("/proc/mounts").read()
    assert str(work) not in subprocess.run(["losetup", "-a"], capture_output=True,
                                           text=True).stdout
