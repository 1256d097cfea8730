"""Predeclared lock sets: the bridge derives a transactional COMPOUND's locks from its
decoded operations and acquires them all at once, before its first operation runs
(docs/isolation.md, "Predeclared lock sets"). Conflicting COMPOUNDs then queue at begin,
holding nothing, instead of timing out inside FUSE requests and retrying.

Real parts only: a txnfs mount over loop-mounted XFS, the patched Ganesha with the
bridge, NFSv4.1 on the wire (nfs4_probe.py); a local transaction (LocalTxn) holds locks
so that the NFS COMPOUNDs have to wait, deterministically, without timing assertions.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from txnfs_testing import nfs4_probe as nfs
from txnfs_testing import txnfs_lib as tl
from txnfs_testing.nfs4_probe import op
from test_ganesha_bridge import (_servers_built, LocalTxn, entries, fh_of,  # noqa: F401
                                 no_open_transactions, servers)

OK, DELAY = nfs.NFS4_OK, nfs.NFS4ERR_DELAY
ANON = nfs.ANONYMOUS_STATEID


def counters(mnt) -> dict:
    return tl.txn_status(mnt.path)["counters"]


def wait_for_set_waits(mnt, n):
    assert tl.wait_until(lambda: counters(mnt)["lock_set_waits"] >= n, timeout=20), \
        f"expected {n} lock-set waits, status: {tl.txn_status(mnt.path)}"


def writes(*pairs):
    """PUTFH + WRITE (anonymous stateid) for each (handle, data)."""
    ops = []
    for fh, data in pairs:
        ops += [op.putfh(fh), op.write(data, stateid=ANON)]
    return ops


def test_overlapping_compounds_in_opposite_orders_queue_and_serialize(mnt, servers):
    """A local transaction holds a. COMPOUND 1 writes a then b, COMPOUND 2 writes b then a:
    per request, each would take its first file and wait for the other's (a deadlock, one
    of them answered NFS4ERR_DELAY). Predeclared, both wait at begin holding nothing; when
    the local transaction commits, they run one after the other: both succeed, and a and
    b hold the data of the same COMPOUND (the one that ran last)."""
    for name in ("a", "b"):
        tl.write_file(mnt.path / name, b"orig!")  # every write below has 5 bytes
    g = servers()
    with nfs.Client(g.port) as c1, nfs.Client(g.port) as c2, ThreadPoolExecutor(2) as ex:
        fa, fb = fh_of(c1, "a"), fh_of(c1, "b")
        holder = LocalTxn(mnt.path)
        holder.write("a").result()
        base = counters(mnt)["lock_set_waits"]
        r1 = ex.submit(c1.compound, writes((fa, b"first"), (fb, b"first")), tag="txn:1")
        wait_for_set_waits(mnt, base + 1)
        r2 = ex.submit(c2.compound, writes((fb, b"secnd"), (fa, b"secnd")), tag="txn:2")
        wait_for_set_waits(mnt, base + 2)
        assert (mnt.path / "b").read_bytes() == b"orig!", "a COMPOUND ran before its locks"
        holder.commit()
        replies = [r1.result(timeout=60), r2.result(timeout=60)]
    for r in replies:
        assert r.status == OK, r
        assert all(s == OK for _, s in r.statuses()), r
    a, b = (mnt.path / "a").read_bytes(), (mnt.path / "b").read_bytes()
    assert a == b and a in (b"first", b"secnd"), f"a mix of two COMPOUNDs: a={a!r} b={b!r}"
    c = counters(mnt)
    assert c["deadlocks"] == 0 and c["timeouts"] == 0, c
    log = "\n".join(g.bridge_lines())
    assert "NFS4ERR_DELAY" not in log and "lost a lock wait" not in log, log
    assert no_open_transactions(mnt)


def test_many_conflicting_compounds_all_commit_without_delay(mnt, servers):
    """Six clients each write the same three files in one COMPOUND (in three different
    orders), then read them in one COMPOUND, five times: every COMPOUND commits at its
    first attempt, and no reader sees a mix of two writers."""
    names = ("x", "y", "z")
    for name in names:
        tl.write_file(mnt.path / name, b"-.-")  # as long as every write below
    g = servers()
    with nfs.Client(g.port) as c0:
        fhs = [fh_of(c0, n) for n in names]

    def client(i):
        statuses = []
        with nfs.Client(g.port) as c:
            for k in range(5):
                order = fhs[i % 3:] + fhs[:i % 3]
                data = f"{i}.{k}".encode()
                r = c.compound(writes(*[(fh, data) for fh in order]), tag=f"txn:{i}.{k}")
                statuses.append(r.status if r.status == OK else (f"{i}.{k}", r.statuses()))
                # The three files, read in one transactional COMPOUND (predeclared S).
                ops = []
                for fh in fhs:
                    ops += [op.putfh(fh), op.read(16)]
                r = c.compound(ops, tag=f"txn:read{i}.{k}")
                statuses.append(r.status if r.status == OK else (f"read{i}.{k}", r.statuses()))
                got = {res.value[1] for res in r.results if res.op == nfs.OP_READ}
                assert len(got) == 1, f"a reader saw a mix of COMPOUNDs: {got}"
        return statuses

    with ThreadPoolExecutor(6) as ex:
        results = [f.result(timeout=300) for f in [ex.submit(client, i) for i in range(6)]]
    assert all(s == OK for st in results for s in st), (results, g.bridge_lines()[-20:])
    assert len({(mnt.path / n).read_bytes() for n in names}) == 1
    c = counters(mnt)
    assert c["deadlocks"] == 0 and c["timeouts"] == 0 and c["lock_set_timeouts"] == 0, c
    assert no_open_transactions(mnt)


def test_lock_set_timeout_refuses_the_compound_with_delay(mnt, servers):
    """A lock set not granted within lock_set_timeout_ms: the COMPOUND is answered
    NFS4ERR_DELAY without running any operation (not even SEQUENCE), and leaves no trace."""
    for name in ("x", "y"):
        tl.write_file(mnt.path / name, b"ori")
    g = servers(bridge_options={"lock_set_timeout_ms": "300"})
    with nfs.Client(g.port) as c:
        fx, fy = fh_of(c, "x"), fh_of(c, "y")
        holder = LocalTxn(mnt.path)
        holder.write("x", b"LOC").result()
        r = c.compound(writes((fy, b"NFS"), (fx, b"NFS")), tag="txn:late")
        assert r.status == DELAY and r.results == [], r
        assert counters(mnt)["lock_set_timeouts"] == 1
        holder.commit()
        # The slot did not advance: the client simply retries.
        r = c.compound(writes((fy, b"NFS"), (fx, b"NFS")), tag="txn:again")
        assert r.status == OK, r
    assert (mnt.path / "x").read_bytes() == b"NFS" and (mnt.path / "y").read_bytes() == b"NFS"
    assert any("were not granted within 300 ms" in line for line in g.bridge_lines())
    assert no_open_transactions(mnt)


@pytest.mark.parametrize("fail", [False, True])
def test_objects_created_by_the_compound_lock_per_request(mnt, servers, fail):
    """Names below a directory the COMPOUND itself creates cannot be resolved before it
    runs: the plan is partial, the entry locks above them are predeclared, and the rest
    locks per request. The COMPOUND is still one transaction."""
    g = servers()
    with nfs.Client(g.port) as c:
        ops = [op.putrootfh(), op.mkdir("d"), op.open_create("f"), op.write(b"new"), op.close()]
        if fail:
            ops += [op.putrootfh(), op.remove("missing")]
        r = c.compound(ops, tag="txn:below")
        assert r.status == (nfs.NFS4ERR_NOENT if fail else OK), r
    if fail:
        assert entries(mnt) == []
    else:
        assert (mnt.path / "d" / "f").read_bytes() == b"new"
    assert any("tag 'txn:below'): " in line and "locks predeclared (partial" in line
               for line in g.bridge_lines()), g.bridge_lines()
    assert no_open_transactions(mnt)
