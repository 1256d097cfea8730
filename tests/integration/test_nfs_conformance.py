"""The patched NFS-Ganesha answers every NFSv4 operation as Debian's unpatched one does.

For each minor version, the protocol walk of nfs4_conformance.py (every operation of
NFSv4.0 / 4.1, success and error paths, replays) runs against three servers, each on an
empty export:

    baseline   Debian's unpatched /usr/bin/ganesha.nfsd exporting a directory of plain XFS
    off        the patched server with the bridge loaded, exporting a txnfs mount; the walk
               sends untagged COMPOUNDs, so no transaction runs
    all        the same with `all_compounds = yes`: every COMPOUND is one transaction

The transcripts (every COMPOUND's status, every result's operation and status, and the
values that do not depend on the server) must be equal, and so must the trees the walks
leave behind. A difference is printed step by step.
"""

from __future__ import annotations

import os
import shutil
import stat

import pytest

from txnfs_testing import ganesha_lib as gl
from txnfs_testing import nfs4_conformance as nc
from txnfs_testing import nfs4_probe as nfs

# Every operation number of each minor version (RFC 7530 section 16, RFC 8881 section 18);
# the walk must send each of them at least once.
OPS_40 = set(range(3, 40))
OPS_41 = set(range(3, 59)) - {20, 30, 35, 36, 39}   # obsolete in 4.1


def tree_of(root) -> dict:
    """path -> (type, size of regular files, permission bits, link target)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (
                stat.S_IFMT(st.st_mode), st.st_size if stat.S_ISREG(st.st_mode) else None,
                stat.S_IMODE(st.st_mode), os.readlink(p) if stat.S_ISLNK(st.st_mode) else None)
    return out


def empty(root):
    for name in os.listdir(root):
        p = os.path.join(root, name)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.unlink(p)


def run_walk(server: gl.Ganesha, minor) -> nc.Transcript:
    with server as g:
        return nc.walk(g.port, minor)


@pytest.mark.parametrize("minor", [0, 1])
def test_patched_server_answers_every_operation_as_debian_does(mnt, xfs, tmp_path, minor):
    plain = xfs.dir / "plain"
    plain.mkdir()
    os.chmod(plain, 0o755)
    os.chmod(mnt.path, 0o755)
    baseline = run_walk(gl.Ganesha(plain, tmp_path / "debian", debian=True, bridge=False), minor)

    missing = (OPS_41 if minor else OPS_40) - baseline.sent
    assert not missing, f"the walk never sends operations {sorted(missing)}"
    errors = {s for _, _, results in baseline for _, s, _ in results if s != nfs.NFS4_OK}
    assert len(errors) >= 20, f"the walk meets only {len(errors)} distinct errors"

    failures = []
    for label, options in (("transactions off", {}), ("all_compounds", {"all_compounds": "yes"})):
        empty(mnt.path)
        server = gl.Ganesha(mnt.path, tmp_path / label.replace(" ", "-"),
                            bridge_options=options)
        transcript = run_walk(server, minor)
        diffs = nc.compare(baseline, transcript)
        if diffs:
            failures.append(f"--- {label}: {len(diffs)} steps differ\n" + "\n".join(diffs))
        if tree_of(plain) != tree_of(mnt.path):
            failures.append(f"--- {label}: trees differ\n  baseline {tree_of(plain)}\n"
                            f"  this     {tree_of(mnt.path)}")
        if options:
            committed = sum("committed" in line for line in server.bridge_lines())
            assert committed >= 50, f"all_compounds ran only {committed} transactions"
    assert not failures, "\n".join(failures)
