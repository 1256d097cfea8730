"""The server side of the NFS COMPOUND bridge: the patched NFS-Ganesha exporting a txnfs
mount runs every COMPOUND whose tag starts with "txn" as one transaction.

Each test gets its own XFS image, store and mount (conftest.py) and its own server
(ganesha_lib.py), and talks NFSv4.1 (or 4.0) to it with the probe client nfs4_probe.py.
The patched server must have been built (scripts/build-ganesha), else these tests skip;
Debian's unpatched ganesha.nfsd (package nfs-ganesha-vfs) is the baseline.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from txnfs_testing import ganesha_lib as gl
from txnfs_testing import nfs4_probe as nfs
from txnfs_testing import txnfs_lib as tl
from txnfs_testing.nfs4_probe import op



@pytest.fixture(autouse=True)
def _servers_built():
    """No skipping: scripts/test builds the patched server and installs Debian's."""
    assert os.access(gl.patched_bin(), os.X_OK) and os.path.isfile(gl.bridge_lib()), \
        "patched NFS-Ganesha or libtxnfs_bridge.so not built (scripts/build-ganesha; ninja -C build)"
    assert os.access(gl.DEBIAN_BIN, os.X_OK), "Debian's nfs-ganesha is not installed"


OK, NOENT, DELAY = nfs.NFS4_OK, nfs.NFS4ERR_NOENT, nfs.NFS4ERR_DELAY
FAILS = [op.putrootfh(), op.remove("missing")]   # ends a COMPOUND with NFS4ERR_NOENT


@pytest.fixture
def servers(mnt, tmp_path):
    """start(**Ganesha options) -> a started server exporting mnt; all stopped at teardown."""
    started = []

    def start(**kwargs):
        g = gl.Ganesha(mnt.path, tmp_path / f"ganesha{len(started)}", **kwargs).start()
        started.append(g)
        return g

    yield start
    failures = []
    for g in reversed(started):
        try:
            g.stop()
        except RuntimeError as e:
            failures.append(str(e))
    assert not failures, "\n".join(failures)


def entries(mnt) -> list[str]:
    return sorted(os.listdir(mnt.path))


def no_open_transactions(mnt) -> bool:
    return tl.txn_status(mnt.path)["transactions"] == []


def figure1(name, data=b"hello", fail=True):
    """The TC-NFS paper's Figure 1 COMPOUND (OPEN; WRITE; CLOSE, creating NAME), then an
    operation that fails if `fail`."""
    return ([op.putrootfh(), op.open_create(name), op.write(data), op.close()]
            + (FAILS if fail else []))


def fh_of(c, name) -> bytes:
    r = c.compound([op.putrootfh(), op.lookup(name), op.getfh()])
    assert r.status == OK, r
    return r.results[-1].value


# --------------------------------------------------------------------------
# atomicity of one COMPOUND
# --------------------------------------------------------------------------

def test_tagged_compound_takes_effect_completely_or_not_at_all(mnt, servers):
    g = servers()
    with nfs.Client(g.port) as c:
        r = c.compound(figure1("a"), tag="txn:fails")
        assert r.status == NOENT
        assert r.statuses() == [(nfs.OP_SEQUENCE, OK), (nfs.OP_PUTROOTFH, OK), (nfs.OP_OPEN, OK),
                                (nfs.OP_WRITE, OK), (nfs.OP_CLOSE, OK), (nfs.OP_PUTROOTFH, OK),
                                (nfs.OP_REMOVE, NOENT)]
        assert entries(mnt) == [], "a failed tagged COMPOUND left its effects behind"

        r = c.compound(figure1("b"), tag="linux")
        assert r.status == NOENT
        assert entries(mnt) == ["b"], "an untagged COMPOUND is not a transaction"
        assert (mnt.path / "b").read_bytes() == b"hello"

        r = c.compound(figure1("c", b"committed", fail=False), tag="txn:works")
        assert r.status == OK, r
    assert entries(mnt) == ["b", "c"]
    assert (mnt.path / "c").read_bytes() == b"committed"
    assert no_open_transactions(mnt)
    log = "\n".join(g.bridge_lines())
    assert "tag 'txn:fails'): aborted" in log and "tag 'txn:works'): committed" in log, log


def test_all_compounds_makes_untagged_compounds_transactions(mnt, servers):
    g = servers(bridge_options={"all_compounds": "yes"})
    with nfs.Client(g.port) as c:
        assert c.compound(figure1("a"), tag="").status == NOENT
        assert c.compound(figure1("b", fail=False), tag="").status == OK
    assert entries(mnt) == ["b"]
    assert no_open_transactions(mnt)


def test_non_root_client(mnt, servers):
    """Operations run with the client's credentials, begin and commit with Ganesha's."""
    os.mkdir(mnt.path / "pub")
    os.chmod(mnt.path / "pub", 0o777)
    g = servers()
    with nfs.Client(g.port, uid=1000, gid=1000) as c:
        pub = [op.putrootfh(), op.lookup("pub")]
        assert c.compound(pub + figure1("u1")[1:], tag="txn").status == NOENT
        assert c.compound(pub + figure1("u2", fail=False)[1:], tag="txn").status == OK
        r = c.compound(figure1("denied", fail=False), tag="txn")
        assert r.results[-1].status == 13   # NFS4ERR_ACCESS: root's directory
    assert os.listdir(mnt.path / "pub") == ["u2"]
    assert os.stat(mnt.path / "pub" / "u2").st_uid == 1000
    assert no_open_transactions(mnt)


def test_baseline_unpatched_debian_server_ignores_tags(mnt, servers):
    g = servers(debian=True, bridge=False)
    with nfs.Client(g.port) as c:
        assert c.compound(figure1("a"), tag="txn:fails").status == NOENT
    assert entries(mnt) == ["a"]


def test_patched_server_without_bridge_behaves_unpatched(mnt, servers):
    g = servers(bridge=False)
    with nfs.Client(g.port) as c:
        assert c.compound(figure1("a"), tag="txn:fails").status == NOENT
    assert entries(mnt) == ["a"]
    assert "COMPOUND bridge" not in g.log.read_text()  # never loaded


def retransmit(c, body, xid, tries=10) -> nfs.Reply:
    """Resend a call until it is answered, as a client does after a timeout: Ganesha
    records a reply in its DRC only after sending it, and drops a retransmission that
    arrives in between as a request still in progress."""
    c.sock.settimeout(1.0)
    for _ in range(tries):
        try:
            return nfs.decode_compound_reply(nfs.Unpacker(c.call_raw(body, xid=xid)))
        except TimeoutError:
            continue
    raise AssertionError(f"xid {xid:#x} not answered after {tries} retransmissions")


def test_nfsv40_compounds_and_drc_replay(mnt, servers):
    g = servers()
    with nfs.Client(g.port, minorversion=0) as c:
        r = c.compound([op.putrootfh(), op.mkdir("d0")] + FAILS, tag="txn")
        assert r.statuses() == [(nfs.OP_PUTROOTFH, OK), (nfs.OP_CREATE, OK),
                                (nfs.OP_PUTROOTFH, OK), (nfs.OP_REMOVE, NOENT)]
        assert entries(mnt) == []
        # a retransmission (same xid) is answered from the DRC and runs nothing again
        body = c.encode([op.putrootfh(), op.mkdir("d1")], tag="txn")
        first = nfs.decode_compound_reply(nfs.Unpacker(c.call_raw(body, xid=0x7A5F0001)))
        assert first.status == OK and entries(mnt) == ["d1"]
        os.rmdir(mnt.path / "d1")
        again = retransmit(c, body, 0x7A5F0001)
        assert again.statuses() == first.statuses()
        assert entries(mnt) == [], "the DRC replay ran the COMPOUND again"
    assert sum("committed" in line for line in g.bridge_lines()) == 1


@pytest.mark.parametrize("cachethis", [True, False])
def test_nfsv41_slot_replay_runs_nothing(mnt, servers, cachethis):
    g = servers()
    with nfs.Client(g.port) as c:
        seq = c.seq
        first = c.compound(figure1("r", fail=False), tag="txn", cachethis=cachethis)
        assert first.status == OK
        os.unlink(mnt.path / "r")
        c.seq = seq   # same slot, same sequence id: a replay
        again = c.compound(figure1("r", fail=False), tag="txn", cachethis=cachethis)
        if cachethis:
            assert again.statuses() == first.statuses()
        else:
            assert again.results[1].status == 10068   # NFS4ERR_RETRY_UNCACHED_REP
        assert entries(mnt) == [], "the slot replay ran the COMPOUND again"
    assert any("slot-cache replay" in line for line in g.bridge_lines())
    assert no_open_transactions(mnt)


def test_compound_of_one_mib(mnt, servers):
    """The client packs COMPOUNDs up to 1 MiB: one that large runs and commits."""
    g = servers()
    with nfs.Client(g.port) as c:
        overhead = len(c.encode(figure1("big", b"", fail=False), tag="txn")) + 100
        data = os.urandom((1 << 20) - overhead)
        assert c.compound(figure1("big", data, fail=False), tag="txn").status == OK
    assert (mnt.path / "big").read_bytes() == data


# --------------------------------------------------------------------------
# what Ganesha serves after an abort
# --------------------------------------------------------------------------

def test_no_stale_state_after_an_aborted_compound(mnt, servers):
    """LOOKUP, GETATTR, READDIR and READ after aborted creations, writes, removals and
    renames show the state before them -- Ganesha keeps no cache that the rollback
    could make stale (contrib/ganesha.conf)."""
    for name, data in (("d", b"old"), ("e", b"eeee"), ("f", b"ffff")):
        tl.write_file(mnt.path / name, data)
    g = servers()
    with nfs.Client(g.port) as c:
        def lookup(name):
            return c.compound([op.putrootfh(), op.lookup(name), op.getattr()]).results[-1].status

        def ls():
            return sorted(c.compound([op.putrootfh(), op.readdir()]).results[-1].value)

        def read(name):
            r = c.compound([op.putrootfh(), op.lookup(name), op.read(100)])
            assert r.status == OK, r
            return r.results[-1].value[1]

        def getattr_fh(fh):
            return c.compound([op.putfh(fh), op.getattr()]).results[-1].status

        fh_e = fh_of(c, "e")   # every object is in Ganesha's cache before the aborts
        assert ls() == ["d", "e", "f"] and read("d") == b"old" and read("f") == b"ffff"

        r = c.compound([op.putrootfh(), op.open_create("a"), op.getfh(), op.write(b"new"),
                        op.close()] + FAILS, tag="txn")
        fh_a = r.results[3].value
        assert lookup("a") == NOENT and ls() == ["d", "e", "f"]
        assert getattr_fh(fh_a) == nfs.NFS4ERR_STALE

        c.compound([op.putrootfh(), op.open_existing("d"), op.write(b"new and longer"),
                    op.close()] + FAILS, tag="txn")
        assert read("d") == b"old"
        r = c.compound([op.putrootfh(), op.lookup("d"), op.getattr(nfs.FATTR4_SIZE)])
        assert r.results[-1].value == {nfs.FATTR4_SIZE: 3}

        c.compound([op.putrootfh(), op.remove("e")] + FAILS, tag="txn")
        assert lookup("e") == OK and read("e") == b"eeee" and getattr_fh(fh_e) == OK

        c.compound([op.putrootfh(), op.savefh(), op.rename("f", "g")] + FAILS, tag="txn")
        assert lookup("f") == OK and lookup("g") == NOENT and read("f") == b"ffff"

        r = c.compound([op.putrootfh(), op.mkdir("h"), op.getfh()] + FAILS, tag="txn")
        assert lookup("h") == NOENT and getattr_fh(r.results[3].value) == nfs.NFS4ERR_STALE
        assert ls() == ["d", "e", "f"]
    assert entries(mnt) == ["d", "e", "f"]


def test_open_stateid_of_an_existing_file_in_an_aborted_compound_stays_open(mnt, servers):
    """Ganesha's NFSv4 state is not rolled back: the OPEN of an existing file in an
    aborted COMPOUND leaves an open stateid (the file is still there). The client
    closes it."""
    tl.write_file(mnt.path / "o", b"old")
    g = servers()
    with nfs.Client(g.port) as c:
        r = c.compound([op.putrootfh(), op.open_existing("o"), op.getfh(), op.write(b"new")]
                       + FAILS, tag="txn")
        assert r.status == NOENT, r
        stateid, fh = r.results[2].value, r.results[3].value
        assert (mnt.path / "o").read_bytes() == b"old"
        r = c.compound([op.putfh(fh), op.read(10, stateid=stateid)])
        assert r.status == OK and r.results[-1].value == (True, b"old"), r
        assert c.compound([op.putfh(fh), op.close(stateid=stateid)]).status == OK
    assert entries(mnt) == ["o"]


def open_files_of(pid, path) -> list[str]:
    """What the open files of process PID that are PATH (or were, if deleted) point at."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.removesuffix(" (deleted)") == str(path):
            found.append(target)
    return found


@pytest.mark.parametrize("minor", [1, 0])
def test_state_of_a_rolled_back_creation_is_stale_and_released(mnt, servers, minor):
    """OPEN(create) and WRITE in a transactional COMPOUND that then fails: the rollback
    removes the file, so nothing may be written through that OPEN's state any more -- a
    WRITE answered NFS4_OK would be lost. The server has released the state when the
    COMPOUND is answered (v4.1 TEST_STATEID; Ganesha holds no open file of it), every
    later use of the file handle answers NFS4ERR_STALE (WRITE, READ, COMMIT, SETATTR,
    CLOSE), and the stateid under another file's handle NFS4ERR_BAD_STATEID."""
    tl.write_file(mnt.path / "keep", b"keep")
    g = servers()
    with nfs.Client(g.port, minorversion=minor) as c:
        owner, seqid = b"owner-" + os.urandom(4).hex().encode(), 0
        fh_keep = fh_of(c, "keep")
        if minor == 0:
            c.setclientid()
            # A confirmed open-owner (its later OPENs need no OPEN_CONFIRM, which a
            # COMPOUND that then fails could not send).
            r = c.compound([op.putrootfh(), op.open_existing("keep", c.clientid, owner,
                                                                   minor=0)])
            assert r.status == OK, r
            seqid = 1
            if r.results[-1].value.rflags & nfs.OPEN4_RESULT_CONFIRM:
                r = c.compound([op.putfh(fh_keep), op.open_confirm(r.results[-1].value, seqid)])
                assert r.status == OK, r
                seqid += 1
        # v4.0 has no current stateid: the WRITE in the COMPOUND uses the anonymous one
        r = c.compound([op.putrootfh(), op.open_create("a", c.clientid, owner, seqid=seqid,
                                                        minor=minor),
                        op.getfh(), op.write(b"lost", stateid=nfs.CURRENT_STATEID if minor
                                             else nfs.ANONYMOUS_STATEID)] + FAILS, tag="txn")
        seqid += 1
        first = 1 if minor else 0   # v4.1: SEQUENCE's result comes first
        assert r.status == NOENT and r.statuses()[first:] == [
            (nfs.OP_PUTROOTFH, OK), (nfs.OP_OPEN, OK), (nfs.OP_GETFH, OK), (nfs.OP_WRITE, OK),
            (nfs.OP_PUTROOTFH, OK), (nfs.OP_REMOVE, NOENT)], r
        stateid, fh = r.results[first + 1].value, r.results[first + 2].value
        assert entries(mnt) == ["keep"]

        # released by the time the COMPOUND was answered, before any further use
        assert open_files_of(g.pid, mnt.path / "a") == [], "Ganesha still has the file open"
        if minor:
            r = c.compound([op.test_stateid(stateid)])
            assert r.status == OK and r.results[-1].value == [nfs.NFS4ERR_BAD_STATEID], r
        r = c.compound([op.putfh(fh_keep), op.write(b"lost", stateid=stateid)])
        assert r.status == nfs.NFS4ERR_BAD_STATEID, r

        for use in ([op.write(b"lost", stateid=stateid)], [op.read(10, stateid=stateid)],
                    [op.commit()], [op.setattr_size(0, stateid=stateid)],
                    [op.write(b"lost", stateid=nfs.ANONYMOUS_STATEID)], [op.getattr()],
                    [op.close(stateid=stateid, seqid=seqid)]):
            r = c.compound([op.putfh(fh)] + use)
            assert r.status == nfs.NFS4ERR_STALE, (use[0][0], r)
        assert (mnt.path / "keep").read_bytes() == b"keep"
    assert entries(mnt) == ["keep"]
    assert not (mnt.store.tree / "a").exists()


# --------------------------------------------------------------------------
# protocol edges
# --------------------------------------------------------------------------

GARBAGE_ARGS = "accept_stat 4"   # the RPC could not decode the arguments


def log_lines(g) -> int:
    return len(g.log.read_text(errors="replace").splitlines())


def crit_lines_since(g, start: int) -> list[str]:
    return [line for line in g.log.read_text(errors="replace").splitlines()[start:]
            if ":CRIT :" in line]


@pytest.mark.parametrize("server", ["debian", "patched"])
def test_create_session_may_offer_rpcsec_gss_for_callbacks(mnt, servers, server):
    """CREATE_SESSION's callback security parameters may list RPCSEC_GSS (RFC 8881
    18.36): the server chooses one it can use for callbacks, or none. The patched
    server, built without GSS, decodes such entries and never uses them, as Debian's
    server does (with GSS built in, it skips them too); no CRIT line either way. (On
    the patched server before the fix: GARBAGE_ARGS and "Bad xdr_free" CRIT lines.)"""
    g = servers(debian=True, bridge=False) if server == "debian" else servers()
    start = log_lines(g)
    for parms in ([nfs.cb_sec_gss()], [nfs.cb_sec_gss(), nfs.cb_sec_sys()],
                  [nfs.cb_sec_none(), nfs.cb_sec_gss(handle_from_server=b"x" * 100)]):
        for flags in (0, nfs.CREATE_SESSION4_FLAG_CONN_BACK_CHAN):
            with nfs.Client(g.port, cb_sec_parms=parms, session_flags=flags) as c:
                r = c.compound([op.putrootfh(), op.getattr()])
                assert r.status == OK, (parms, flags, r)
    assert crit_lines_since(g, start) == []


def test_unknown_callback_flavour_is_garbage_without_a_crit_line(mnt, servers):
    """A callback security flavour callback_sec_parms4 has no arm for cannot be
    decoded (GARBAGE_ARGS, as on Debian's server); freeing the half-decoded request
    must not fail ("Bad xdr_free", CRIT)."""
    g = servers()
    start = log_lines(g)
    with pytest.raises(nfs.RpcError, match=GARBAGE_ARGS):
        nfs.Client(g.port, cb_sec_parms=[nfs.cb_sec_sys(), nfs.u32(5)])   # AUTH_DH's number
    with nfs.Client(g.port) as c:
        assert c.compound([op.putrootfh(), op.getattr()]).status == OK
    assert crit_lines_since(g, start) == []


@pytest.mark.parametrize("minor", [0, 1])
def test_compound_over_the_operation_limit_is_refused_not_garbage(mnt, servers, minor):
    """A COMPOUND of up to 16384 operations runs (README, "COMPOUND length"); a longer
    one, whatever its length, is refused without running any operation -- not
    GARBAGE_ARGS, and with no CRIT line: NFS4ERR_RESOURCE in NFSv4.0 (as Debian's server
    answers above its limit of 100), NFS4ERR_TOO_MANY_OPS in NFSv4.1 (RFC 8881's error
    for more operations than the server takes; Debian's answers it above the session's
    ca_maxoperations). The session stays usable (v4.1: SEQUENCE did not run, the slot
    did not advance)."""
    g = servers()
    start = log_lines(g)
    refused = nfs.NFS4ERR_TOO_MANY_OPS if minor else nfs.NFS4ERR_RESOURCE
    with nfs.Client(g.port, minorversion=minor, max_ops=16384) as c:
        limit = 16384 - minor   # operations after v4.1's SEQUENCE
        for n in (limit + 1, 16500, 100_000):
            seq = c.seq
            r = c.compound([op.putrootfh(), op.mkdir("d")] + [op.putrootfh()] * (n - 2),
                           tag="txn")
            assert (r.status, r.results) == (refused, []), (n, r.status, len(r.results))
            assert c.seq == seq
        assert entries(mnt) == []
        r = c.compound([op.putrootfh(), op.mkdir("d")] + [op.putrootfh()] * (limit - 2),
                       tag="txn")
        assert r.status == OK and len(r.results) == 16384, (r.status, len(r.results))
    assert entries(mnt) == ["d"]
    assert crit_lines_since(g, start) == []


# --------------------------------------------------------------------------
# conflicts: retryable NFS4ERR_DELAY
# --------------------------------------------------------------------------

class LocalTxn:
    """A transaction of a local program, bound to a thread of its own."""

    def __init__(self, mount):
        self.mount = mount
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.id = self.pool.submit(tl.txn_begin, mount).result()

    def write(self, name, data=b"LOCAL"):
        """A future: pwrite at offset 0 on the transaction's thread."""
        def w():
            fd = os.open(os.path.join(self.mount, name), os.O_WRONLY)
            try:
                os.pwrite(fd, data, 0)
            finally:
                os.close(fd)
        return self.pool.submit(w)

    def commit(self):
        rc = self.pool.submit(tl.txn_commit, self.mount, self.id).result()
        self.pool.shutdown()
        assert rc == 0, f"commit of local transaction {self.id}: {os.strerror(-rc)}"


def lock_waiters(mnt) -> int:
    return sum(t["locks_waiting"] for t in tl.txn_status(mnt.path)["transactions"])


def wait_for_waiters(mnt, n):
    assert tl.wait_until(lambda: lock_waiters(mnt) >= n, timeout=10), \
        f"expected {n} lock waits, status: {tl.txn_status(mnt.path)}"


def test_lock_timeout_answers_delay_and_rolls_back(mnt, servers):
    """The bridge's lock_timeout_ms (default 250 ms), not the mount's 10 s, bounds the
    wait of a transactional COMPOUND (inside a FUSE request: with predeclared lock sets
    off, so that the COMPOUND waits there and not before its first operation)."""
    for name in ("x", "y"):
        tl.write_file(mnt.path / name, b"orig")
    g = servers(bridge_options={"lock_set_timeout_ms": "0"})
    with nfs.Client(g.port) as c:
        fx, fy = fh_of(c, "x"), fh_of(c, "y")
        holder = LocalTxn(mnt.path)
        holder.write("x").result()
        t0 = time.monotonic()
        r = c.compound([op.putfh(fy), op.write(b"NFS", stateid=nfs.ANONYMOUS_STATEID),
                        op.putfh(fx), op.write(b"NFS", stateid=nfs.ANONYMOUS_STATEID)], tag="txn")
        assert 0.25 <= time.monotonic() - t0 < 5
        assert r.status == DELAY and r.results[-1].status == DELAY, r
        assert [s for _, s in r.statuses()[:-1]] == [OK] * 4
        holder.commit()
    assert (mnt.path / "y").read_bytes() == b"orig", "the timed-out COMPOUND was not rolled back"
    assert (mnt.path / "x").read_bytes() == b"LOCAL"
    assert any("lost a lock wait (timeout)" in line for line in g.bridge_lines())
    assert no_open_transactions(mnt)


def test_deadlock_victim_answers_delay_and_rolls_back(mnt, servers):
    """Local T1 holds x, local T3 holds z. The NFS COMPOUND T2 writes y, then waits for z.
    T1 then waits for y (held by T2). When T3 commits, T2 goes on to write x: that closes
    the cycle T2 -> T1 -> T2, and T2, the requester, is the victim. (Predeclared lock
    sets off: with them T2 would wait for all three before writing y, holding nothing,
    test_lock_sets.py.) The bridge's lock timeout is raised from 250 ms to 10 s: T2 waits
    for z until T3's durable commit, whose syncfs alone took longer than 250 ms on a loaded
    CI machine -- T2 then timed out instead of meeting the deadlock this test is about."""
    for name in ("x", "y", "z"):
        tl.write_file(mnt.path / name, b"orig")
    g = servers(bridge_options={"lock_set_timeout_ms": "0", "lock_timeout_ms": "10000"})
    with nfs.Client(g.port) as c, ThreadPoolExecutor(max_workers=1) as nfs_thread:
        fx, fy, fz = fh_of(c, "x"), fh_of(c, "y"), fh_of(c, "z")
        t1, t3 = LocalTxn(mnt.path), LocalTxn(mnt.path)
        t1.write("x").result()
        t3.write("z").result()
        anon = nfs.ANONYMOUS_STATEID
        reply = nfs_thread.submit(c.compound, [
            op.putfh(fy), op.write(b"NFS", stateid=anon), op.putfh(fz),
            op.write(b"NFS", stateid=anon), op.putfh(fx), op.write(b"NFS", stateid=anon)],
            tag="txn:deadlock")
        wait_for_waiters(mnt, 1)          # T2 waits for z
        t1_writes_y = t1.write("y")
        wait_for_waiters(mnt, 2)          # T1 waits for y
        t3.commit()
        r = reply.result(timeout=30)
        assert r.status == DELAY and r.results[-1].status == DELAY, r
        t1_writes_y.result(timeout=30)    # T2's abort released y
        t1.commit()
    assert [(mnt.path / n).read_bytes() for n in ("x", "y", "z")] == [b"LOCAL"] * 3
    assert any("lost a lock wait (deadlock)" in line for line in g.bridge_lines())
    assert no_open_transactions(mnt)


# --------------------------------------------------------------------------
# failures of the transaction itself
# --------------------------------------------------------------------------

@pytest.mark.parametrize("minor", [1, 0])
def test_failed_commit_collapses_reply_and_dead_mount_refuses(mnt, servers, minor):
    """The txnfs daemon dies inside the commit (crash-injection point): the reply becomes
    one NFS4ERR_DELAY (after SEQUENCE for v4.1). The next tagged COMPOUND cannot begin a
    transaction on the dead mount and is refused without running (SERVERFAULT, no
    results, SEQUENCE not run). Recovery at the next mount rolls the first one back."""
    mnt.umount()
    with tl.crash_at("commit.after_syncfs:1"):
        mnt.mount()
    g = servers()
    with nfs.Client(g.port, minorversion=minor) as c:
        ops = ([op.putrootfh(), op.open_create("lost"), op.write(b"x" * 10000), op.close()]
               if minor else [op.putrootfh(), op.mkdir("lost")])
        r = c.compound(ops + [op.putrootfh(), op.lookup("lost"), op.getattr()], tag="txn")
        expected = [(nfs.OP_PUTROOTFH, DELAY)]
        assert r.statuses() == ([(nfs.OP_SEQUENCE, OK)] if minor else []) + expected
        assert r.status == DELAY
        seq = c.seq
        r = c.compound([op.putrootfh(), op.readdir()], tag="txn")
        assert (r.status, r.results) == (nfs.NFS4ERR_SERVERFAULT, [])
        assert c.seq == seq
    g.stop()
    log = "\n".join(g.bridge_lines())
    assert "error: commit of transaction" in log and "answering NFS4ERR_DELAY" in log, log
    assert "cannot begin a transaction" in log and "NFS4ERR_SERVERFAULT" in log, log
    mnt.kill9()          # the daemon is gone already; clean the dead mount point
    mnt.mount()          # recovery rolls the uncommitted transaction back
    assert entries(mnt) == []


@pytest.mark.parametrize("bad", ["config", "library"])
def test_unusable_bridge_stops_the_server(mnt, servers, bad):
    kwargs = ({"bridge_options": {"monut": "/typo"}} if bad == "config"
              else {"extra_env": {"TXNFS_BRIDGE_LIB": "/nonexistent/libtxnfs_bridge.so"}})
    g = servers(**kwargs)
    with pytest.raises((OSError, nfs.RpcError)):
        nfs.Client(g.port)   # its first COMPOUND loads the bridge
    assert tl.wait_until(lambda: g.proc.poll() is not None, timeout=10)
    with pytest.raises(RuntimeError, match="exited"):
        g.stop()
    why = "unknown key `monut`" if bad == "config" else "cannot load TXNFS_BRIDGE_LIB"
    assert why in g.log.read_text()
    assert entries(mnt) == []


# --------------------------------------------------------------------------
# lazy COMPOUNDs (tag prefix txn-lazy): the reply before durability, opted into
# --------------------------------------------------------------------------

def test_lazy_tag_commits_lazily_and_durability_requests_flush_it(mnt, servers):
    mnt.remount("--lazy-flush-ms", "60000")
    g = servers()

    def not_durable():
        return tl.txn_status(mnt.path)["lazy"]["not_durable"]
    with nfs.Client(g.port) as c:
        assert c.compound([op.putrootfh(), op.mkdir("d1")], tag="txn-lazy").status == OK
        assert entries(mnt) == ["d1"] and not_durable() == 1
        # a failing lazy COMPOUND is rolled back like any other
        assert c.compound([op.putrootfh(), op.mkdir("d2")] + FAILS, tag="txn-lazy").status == NOENT
        assert entries(mnt) == ["d1"] and not_durable() == 1
        # FILE_SYNC4 WRITEs inside a lazy COMPOUND ask for durability: a durable commit,
        # which makes the earlier lazy one durable too
        assert c.compound(figure1("f", fail=False), tag="txn-lazy").status == OK
        assert not_durable() == 0
        assert c.compound([op.putrootfh(), op.mkdir("d3")], tag="txn-lazy").status == OK
        assert not_durable() == 1
        # a plain client's COMMIT (an fsync outside any transaction) flushes it
        r = c.compound([op.putrootfh(), op.lookup("f"), op.commit()])
        assert r.status == OK, r
        assert not_durable() == 0
        # untagged and "txn" COMPOUNDs keep durable commits
        assert c.compound([op.putrootfh(), op.mkdir("d4")], tag="txn").status == OK
        assert not_durable() == 0
    assert tl.txn_status(mnt.path)["counters"]["lazy_commits"] == 2
    log = "\n".join(g.bridge_lines())
    assert "tag 'txn-lazy'): committed lazily" in log, log
    assert "those whose tag starts with 'txn-lazy' commit lazily" in log, log


def fds_of(pid) -> list[str]:
    """What the process's open fds name."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return out


def test_a_directory_handle_follows_its_directory_and_goes_stale_with_it(mnt, servers):
    """The server keeps one O_PATH fd per directory it serves (ganesha-4.3.patch,
    "Directories opened once"). Through a directory's handle a client sees the
    directory wherever it is now: after a rename, a rolled-back rename or removal,
    and once it is really removed, NFS4ERR_STALE -- as when every operation opened
    the directory by handle."""
    (mnt.path / "d").mkdir()
    tl.write_file(mnt.path / "d" / "x", b"xx")
    g = servers()
    with nfs.Client(g.port) as c:
        fh_d = fh_of(c, "d")

        def in_d(*ops):
            return c.compound([op.putfh(fh_d), *ops])

        def names_in_d():
            r = in_d(op.readdir())
            assert r.status == OK, r
            return sorted(r.results[-1].value)

        assert in_d(op.lookup("x"), op.read(10)).results[-1].value[1] == b"xx"
        assert in_d(op.open_create("y"), op.write(b"yy"), op.close()).status == OK
        assert str(mnt.path / "d") in fds_of(g.pid), "the server keeps no fd of the directory"

        # renamed and renamed back by a rolled-back transaction, then renamed for real
        c.compound([op.putrootfh(), op.savefh(), op.rename("d", "e")] + FAILS, tag="txn")
        assert names_in_d() == ["x", "y"] and entries(mnt) == ["d"]
        r = c.compound([op.putrootfh(), op.savefh(), op.rename("d", "e")], tag="txn")
        assert r.status == OK, r
        assert entries(mnt) == ["e"] and names_in_d() == ["x", "y"]
        assert in_d(op.lookup("y"), op.read(10)).results[-1].value[1] == b"yy"

        # emptied and removed by a rolled-back transaction: all of it still there
        r = c.compound([op.putfh(fh_d), op.remove("x"), op.remove("y"), op.putrootfh(),
                        op.remove("e")] + FAILS, tag="txn")
        assert r.results[5].status == OK, r    # the rmdir ran, then the rollback
        assert names_in_d() == ["x", "y"] and entries(mnt) == ["e"]

        assert str(mnt.path / "e") in fds_of(g.pid)

        # removed for real: the handle is stale, not an empty directory
        r = c.compound([op.putfh(fh_d), op.remove("x"), op.remove("y"), op.putrootfh(),
                        op.remove("e")], tag="txn")
        assert r.status == OK, r
        assert entries(mnt) == []
        assert in_d(op.getattr()).results[-1].status == nfs.NFS4ERR_STALE
        assert in_d(op.lookup("x")).results[-1].status == nfs.NFS4ERR_STALE
        assert in_d(op.readdir()).results[-1].status == nfs.NFS4ERR_STALE


def test_directories_renamed_removed_and_made_again_under_concurrent_walkers(mnt, servers):
    """Stress for the directory fds the server keeps: two clients rename, empty, remove and
    make again a small tree of directories (in transactions and without) while two others
    walk it by path and by handles they hold. Every reply is one a client may get for a
    tree changing under it, the server stays up without a CRIT line, and what is left on
    the mount is what the last COMPOUNDs made."""
    g = servers()
    start = log_lines(g)
    notdir, notempty = 20, 66   # NFS4ERR_NOTDIR, NFS4ERR_NOTEMPTY
    allowed = {OK, NOENT, nfs.NFS4ERR_EXIST, nfs.NFS4ERR_STALE, DELAY, notdir, notempty}
    deadline = time.monotonic() + 6
    seen = set()

    def changer(k):
        with nfs.Client(g.port) as c:
            n = 0
            while time.monotonic() < deadline:
                d, e = f"d{k}", f"e{k}"
                tag = "txn" if n % 2 else "plain"
                steps = [
                    [op.putrootfh(), op.mkdir(d), op.open_create("f"), op.write(b"x"), op.close()],
                    [op.putrootfh(), op.savefh(), op.rename(d, e)],
                    [op.putrootfh(), op.lookup(e), op.remove("f"), op.putrootfh(), op.remove(e)]
                    + (FAILS if n % 3 == 0 else []),
                    [op.putrootfh(), op.lookup(e), op.remove("f"), op.putrootfh(), op.remove(e)],
                ]
                for ops in steps:
                    r = c.compound(ops, tag=tag)
                    seen.update(s for _, s in r.statuses())
                n += 1
            return n

    def walker(k):
        with nfs.Client(g.port) as c:
            handles = []
            n = 0
            while time.monotonic() < deadline:
                name = f"{'de'[n % 2]}{k % 2}"
                r = c.compound([op.putrootfh(), op.lookup(name), op.getfh(), op.readdir()])
                seen.update(s for _, s in r.statuses())
                if r.status == OK:
                    handles = (handles + [r.results[3].value])[-4:]
                for fh in handles:
                    r = c.compound([op.putfh(fh), op.lookup("f"), op.read(10)])
                    seen.update(s for _, s in r.statuses())
                    r = c.compound([op.putfh(fh), op.getattr(), op.readdir()])
                    seen.update(s for _, s in r.statuses())
                n += 1
            return n

    with ThreadPoolExecutor(4) as ex:
        runs = [ex.submit(changer, 0), ex.submit(changer, 1), ex.submit(walker, 0),
                ex.submit(walker, 1)]
        counts = [f.result() for f in runs]
    assert all(n > 0 for n in counts), counts
    assert seen <= allowed, f"unexpected statuses: {sorted(seen - allowed)}"
    assert g.proc.poll() is None, "the server died"
    assert crit_lines_since(g, start) == []
    assert no_open_transactions(mnt)
    # what is left is what whole COMPOUNDs made: directories holding f = "x", or nothing
    for name in entries(mnt):
        assert name in ("d0", "d1", "e0", "e1"), entries(mnt)
        left = sorted(os.listdir(mnt.path / name))
        assert left in ([], ["f"]), (name, left)
        if left:
            assert (mnt.path / name / "f").read_bytes() == b"x"
