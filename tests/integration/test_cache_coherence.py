"""Every cache between a reader and the store serves committed state only: the kernel's
FUSE caches of the mount (attributes, entries, pages) and NFS-Ganesha's MDCACHE behind
the export. Objects are changed by NFS COMPOUNDs run as transactions and by local
transactions, which commit or abort; readers over NFS (plain COMPOUNDs and transactional
ones) and local readers read attributes, data, listings and lookups of them.

- After every abort and every commit, each reader sees exactly the last committed state,
  although it had read the objects just before (every cache was warm).
- While a transaction is open, readers that do not belong to it see the committed state.
- With readers polling concurrently while NFS and local transactions commit and abort,
  no reader ever sees a version that was rolled back or never committed, nor a committed
  one cut or zero-filled to a size a transaction gave the file: both kinds of writer work
  through their transaction's view (NFS COMPOUNDs through the patch, local ones through
  MNT/.txnfs/ID), so no kernel inode a reader uses ever holds their state. The one shape
  left, recognised exactly and counted: a plain read that straddles a commit may see the
  new version at the committed size before it (cut, or followed by zeros).
- After a crash and recovery, every layer serves the committed state.
- The checks have teeth: with Ganesha's attribute and directory caches made
  unconditionally valid, the first check catches the rolled-back state they serve.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from txnfs_testing import nfs4_probe as nfs
from txnfs_testing import txnfs_lib as tl
from txnfs_testing.nfs4_probe import op
from test_fuse_protocol import FuseTrace
from test_ganesha_bridge import FAILS, _servers_built, servers  # noqa: F401  (fixtures)

OK, NOENT = nfs.NFS4_OK, nfs.NFS4ERR_NOENT
F, D = "f", "d"                       # the file and the directory every test changes
MODE = 0o644                          # the committed mode; rolled-back chmods use 0o600
FUSE_GETATTR = 3                      # the opcode, as the fuse_request_send tracepoint shows it


@dataclass(frozen=True)
class View:
    """What a reader saw: the file's size, mode and bytes, and the directory's names."""
    size: int
    mode: int
    data: bytes
    names: tuple


def committed_view(data: bytes, names) -> View:
    return View(len(data), MODE, data, tuple(sorted(names)))


def result(r, opnum, nth=0):
    return [x for x in r.results if x.op == opnum][nth].value


def nfs_view(c, tag="") -> View | None:
    """One COMPOUND: GETATTR and READ of F, READDIR of D; None if it did not succeed
    (a transactional reader may be answered NFS4ERR_DELAY while a writer holds F)."""
    r = c.compound([op.putrootfh(), op.lookup(F),
                    op.getattr(nfs.FATTR4_SIZE, nfs.FATTR4_MODE), op.read(1 << 16),
                    op.putrootfh(), op.lookup(D), op.readdir()], tag=tag)
    if r.status != OK:
        return None
    attrs = result(r, nfs.OP_GETATTR)
    return View(attrs[nfs.FATTR4_SIZE], attrs[nfs.FATTR4_MODE] & 0o7777,
                result(r, nfs.OP_READ)[1], tuple(sorted(result(r, nfs.OP_READDIR))))


def local_view(root) -> View:
    """One read(2) of the file: two reads could straddle a commit and see two versions."""
    st = os.stat(root / F)
    fd = os.open(root / F, os.O_RDONLY)
    try:
        data = os.read(fd, 1 << 16)
    finally:
        os.close(fd)
    return View(st.st_size, st.st_mode & 0o7777, data, tuple(sorted(os.listdir(root / D))))


def nfs_lookup(c, name) -> int:
    return c.compound([op.putrootfh(), op.lookup(D), op.lookup(name)]).status


def check_all(mnt, plain, txn_reader, want: View, gone=(), transactional=True):
    """Every reader sees WANT; every name in GONE is absent to LOOKUP and stat (the
    entry caches). transactional=False while a local transaction holds the objects:
    a transactional NFS reader would wait for it."""
    seen = {"nfs": nfs_view(plain), "local": local_view(mnt.path)}
    if transactional:
        seen["nfs txn"] = nfs_view(txn_reader, tag="txn")
    for who, v in seen.items():
        assert v == want, f"{who} reader saw {v}, the committed state is {want}"
    for name in gone:
        assert nfs_lookup(plain, name) == NOENT, f"NFS LOOKUP found {name}"
        assert not os.path.lexists(mnt.path / D / name), f"local lookup found {name}"


def setup_objects(mnt, data: bytes, names):
    tl.write_file(mnt.path / F, data)
    os.chmod(mnt.path / F, MODE)
    (mnt.path / D).mkdir()
    for n in names:
        tl.write_file(mnt.path / D / n, b"")


def nfs_change(c, data: bytes, new_name: str, old_name: str, commit: bool, tag="txn") -> int:
    """One transactional COMPOUND: rewrite F with DATA (GETATTR after it, so that the
    server's caches hold the new attributes), create D/NEW_NAME, remove D/OLD_NAME; it
    aborts (a failing operation at the end) unless COMMIT."""
    ops = [op.putrootfh(), op.open_existing(F), op.write(data), op.setattr_size(len(data)),
           op.getattr(nfs.FATTR4_SIZE, nfs.FATTR4_MODE), op.close(),
           op.putrootfh(), op.lookup(D), op.open_create(new_name, owner=b"cc"), op.close(),
           op.putrootfh(), op.lookup(D), op.remove(old_name), op.readdir()]
    return c.compound(ops + ([] if commit else FAILS), tag=tag).status


def local_change(root, data: bytes, new_name: str, old_name: str, mode: int):
    """The same change through ROOT (a transaction's view of the mount), plus a chmod."""
    tl.write_file(root / F, data)
    os.chmod(root / F, mode)
    tl.write_file(root / D / new_name, b"")
    os.unlink(root / D / old_name)
    os.listdir(root / D)


def version(k: int) -> bytes:
    return (f"committed {k}\n" * (k + 1)).encode()      # each version has its own size


def rolled_back(k: int) -> bytes:
    return (f"rolled back {k}\n" * (k + 3)).encode()


def test_every_layer_serves_the_committed_state_after_each_abort_and_commit(mnt, servers):
    data, names = version(0), {"e0"}
    setup_objects(mnt, data, names)
    g = servers()
    other = ThreadPoolExecutor(max_workers=1)    # readers outside the local transaction
    with nfs.Client(g.port) as writer, nfs.Client(g.port) as plain, \
            nfs.Client(g.port) as txn_reader, other:
        for k in range(1, 13):
            want = committed_view(data, names)
            check_all(mnt, plain, txn_reader, want)           # warms every cache
            commit = k % 3 == 0
            new = f"n{k}"
            new_data = version(k) if commit else rolled_back(k)
            old = sorted(names)[0]
            if k % 2:
                assert nfs_change(writer, new_data, new, old, commit) == (OK if commit else NOENT)
            else:
                with tl.txn_in_view(mnt.path) as (tid, view):
                    local_change(view, new_data, new, old, MODE if commit else 0o600)
                    other.submit(check_all, mnt, plain, txn_reader, want,
                                 transactional=False).result()
                    rc = tl.txn_commit(mnt.path, tid) if commit else tl.txn_abort(mnt.path, tid)
                assert rc == 0
            if commit:
                data, names = new_data, (names - {old}) | {new}
                check_all(mnt, plain, txn_reader, committed_view(data, names), gone=[old])
            else:
                check_all(mnt, plain, txn_reader, want, gone=[new])
    assert tl.txn_status(mnt.path)["transactions"] == []


def test_concurrent_readers_see_only_committed_versions(mnt, servers):
    """Two writers (NFS COMPOUNDs and local transactions, half of them aborted) and three
    readers (plain NFS, transactional NFS, local) run at once. Every version a reader saw
    -- the file's bytes and size, its mode, each name of the directory -- must be one
    that was committed; mode 0o600 and names ending in 'r' are only ever rolled back."""
    setup_objects(mnt, b"initial", {"e0"})
    g = servers()
    committed_data = {b"initial"}
    committed_names = {"e0"}   # the directory's committed names now (the NFS writer's)
    ever_committed = {"e0"}    # every name that was ever in a committed state
    seen: list[tuple[str, View]] = []
    stop = threading.Event()
    lock = threading.Lock()
    rounds = 25

    def nfs_writer():
        with nfs.Client(g.port) as c:
            for k in range(rounds):
                commit = k % 2 == 0
                data = f"nfs {k} {'c' if commit else 'r'}\n".encode() * (k + 1)
                new = f"nfs{k}{'c' if commit else 'r'}"
                with lock:
                    old = sorted(n for n in committed_names if n.startswith(("e", "nfs")))
                old_name = old[0] if old else None
                if old_name is None:
                    continue
                status = nfs_change(c, data, new, old_name, commit)
                if commit and status == OK:
                    with lock:
                        committed_data.add(data)
                        committed_names.add(new)
                        committed_names.discard(old_name)
                        ever_committed.add(new)

    def local_writer():
        for k in range(rounds):
            commit = k % 2 == 1
            data = f"local {k} {'c' if commit else 'r'}\n".encode() * (k + 2)
            new = f"loc{k}{'c' if commit else 'r'}"
            with tl.txn_in_view(mnt.path) as (tid, view):
                ok = False
                try:
                    tl.write_file(view / F, data)
                    os.chmod(view / F, MODE if commit else 0o600)
                    tl.write_file(view / D / new, b"")
                    ok = True
                except OSError:   # lost a lock wait to the other writer: abort-only
                    pass
                finally:
                    rc = (tl.txn_commit(mnt.path, tid) if commit and ok
                          else tl.txn_abort(mnt.path, tid))
            if commit and ok and rc == 0:
                with lock:
                    committed_data.add(data)
                    ever_committed.add(new)

    def reader(kind):
        c = None if kind == "local" else nfs.Client(g.port)
        try:
            while not stop.is_set():
                v = (local_view(mnt.path) if c is None
                     else nfs_view(c, tag="txn" if kind == "nfs txn" else ""))
                if v is not None:
                    seen.append((kind, v))
        finally:
            if c is not None:
                c.close()

    with ThreadPoolExecutor(max_workers=5) as pool:
        readers = [pool.submit(reader, k) for k in ("nfs", "nfs txn", "local")]
        writers = [pool.submit(nfs_writer), pool.submit(local_writer)]
        try:
            for w in writers:
                w.result(timeout=300)
        finally:
            stop.set()
        for r in readers:
            r.result(timeout=60)

    kinds = {k for k, _ in seen}
    assert kinds == {"nfs", "nfs txn", "local"}, f"a reader saw nothing: {kinds}"
    sizes = {len(d) for d in committed_data}
    torn = []
    for kind, v in seen:
        assert v.mode == MODE, f"{kind} reader saw a rolled-back mode: {v}"
        assert v.size in sizes, f"{kind} reader saw a size never committed: {v}"
        if v.data not in committed_data:
            # The one shape left (docs/isolation.md, Limits, "A plain read that
            # straddles a commit"), for these one-page files: a committed version read
            # at the size another committed version had -- the reader's kernel learnt the
            # size before the commit and the bytes after it: cut, or followed by zeros.
            # Nothing uncommitted, nothing rolled back: anything else fails.
            assert kind != "nfs txn" and tl.straddled_read(v.data, committed_data), \
                f"{kind} reader saw data never committed: {v}"
            torn.append((kind, v.size))
        assert set(v.names) <= ever_committed, f"{kind} reader saw a name never committed: {v}"
    print(f"{len(seen)} observations, {len(torn)} straddled a commit: {torn}")
    # and afterwards, every layer agrees on the last committed state
    final = local_view(mnt.path)
    assert final.data in committed_data
    with nfs.Client(g.port) as plain, nfs.Client(g.port) as txn_reader:
        check_all(mnt, plain, txn_reader, final)


def test_after_recovery_every_layer_serves_the_committed_state(mnt, servers):
    data, names = version(0), {"e0"}
    setup_objects(mnt, data, names)
    want = committed_view(data, names)
    g = servers()
    with nfs.Client(g.port) as plain, nfs.Client(g.port) as txn_reader:
        check_all(mnt, plain, txn_reader, want)
        with nfs.Client(g.port) as writer:   # a committed NFS change, then a local one lost
            assert nfs_change(writer, version(1), "n1", "e0", commit=True) == OK
        data, names = version(1), {"n1"}
        want = committed_view(data, names)
        check_all(mnt, plain, txn_reader, want)
    tl.txn_begin(mnt.path)
    local_change(mnt.path, rolled_back(2), "n2", "n1", 0o600)
    mnt.kill9()          # the transaction never committed
    g.stop()
    mnt.mount()          # recovery rolls it back
    g = servers()
    with nfs.Client(g.port) as plain, nfs.Client(g.port) as txn_reader:
        check_all(mnt, plain, txn_reader, want, gone=["n2"])


def test_checks_catch_an_unconditionally_valid_cache(mnt, servers):
    """The same checks against a server whose attribute and directory caches stay valid
    for an hour (no invalidation): the rolled-back size and name it serves after an
    aborted COMPOUND must be caught. If this passes, the checks above could not fail."""
    data, names = version(0), {"e0"}
    setup_objects(mnt, data, names)
    g = servers(config_lines={"Attr_Expiration_Time = 0;": "Attr_Expiration_Time = 3600;",
                              "Dir_Chunk = 0;": "Dir_Chunk = 128;"})
    want = committed_view(data, names)
    with nfs.Client(g.port) as writer, nfs.Client(g.port) as plain, \
            nfs.Client(g.port) as txn_reader:
        check_all(mnt, plain, txn_reader, want)
        assert nfs_change(writer, rolled_back(1), "n1", "e0", commit=False) == NOENT
        with pytest.raises(AssertionError, match="the committed state is|found n1"):
            check_all(mnt, plain, txn_reader, want, gone=["n1"])


def test_a_lookup_fetches_no_attributes_yet_getattr_serves_the_committed_ones(mnt, servers):
    """LOOKUP asks the file system for no attributes (the Ganesha patch's
    mdc_lookup_uncached and lookup_with_fd): a directory a local transaction is changing
    has no attribute lifetime in the kernel, so every fetch of its attributes is a FUSE
    GETATTR, and a lookup used to fetch them only for MDCACHE to throw them away. Twenty
    plain COMPOUNDs walking to it now send none (a GETFH of a directory still fetches
    them: Ganesha checks its mode for a referral). The GETATTR a client then asks for still
    answers the directory's committed attributes: the new MDCACHE entry starts with its
    attributes untrusted, not with the few a lookup took for the handle."""
    setup_objects(mnt, version(0), {"e0"})
    committed = os.stat(mnt.path / D)
    g = servers()
    with nfs.Client(g.port) as plain:
        tid = tl.txn_begin(mnt.path)
        try:
            tl.write_file(mnt.path / D / "uncommitted", b"x" * 100)
            assert os.stat(mnt.path / D).st_mtime_ns != committed.st_mtime_ns
            with FuseTrace(mnt.path) as trace:
                for _ in range(20):
                    assert plain.compound([op.putrootfh(), op.lookup(D)]).status == OK
                walks = trace.opcodes()
            # (The root's attributes may expire in the kernel meanwhile: one fetch, not 20.)
            assert walks.count(FUSE_GETATTR) <= 2, \
                f"{walks.count(FUSE_GETATTR)} GETATTRs for 20 LOOKUPs of {D}"
            r = plain.compound([op.putrootfh(), op.lookup(D),
                                op.getattr(nfs.FATTR4_TYPE, nfs.FATTR4_SIZE, nfs.FATTR4_MODE)])
            assert r.status == OK
            attrs = result(r, nfs.OP_GETATTR)
            assert (attrs[nfs.FATTR4_TYPE], attrs[nfs.FATTR4_SIZE], attrs[nfs.FATTR4_MODE]) == \
                (nfs.NF4DIR, committed.st_size, committed.st_mode & 0o7777)
            r = plain.compound([op.putrootfh(), op.lookup(D), op.lookup("uncommitted")])
            assert r.status == NOENT
        finally:
            assert tl.txn_abort(mnt.path, tid) == 0
        r = plain.compound([op.putrootfh(), op.lookup(D), op.readdir()])
        assert r.status == OK and sorted(result(r, nfs.OP_READDIR)) == ["e0"]
