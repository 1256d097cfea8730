"""A transactional COMPOUND runs through its transaction's view (docs/isolation.md, Views,
"NFS"): the patched Ganesha opens every object it reaches through the view's kernel
inodes, hands clients plain handles only, and reopens plain, in place, every fd it keeps
past the COMPOUND (an OPEN's state).

- A plain NFS reader, whose Ganesha fd stays open across COMPOUNDs, reads the committed
  bytes and size while transactional COMPOUNDs truncate and extend the file.
- An OPEN made in a transactional COMPOUND serves later plain COMPOUNDs through its
  stateid (its fd was reopened plain), after a commit; after a rollback its creation is
  gone and its stateid is refused.
- MNT/.txnfs is not exported: neither a plain nor a transactional COMPOUND finds it, nor
  a view under it.
- No view outlives its COMPOUND.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from txnfs_testing import nfs4_probe as nfs
from txnfs_testing import txnfs_lib as tl
from txnfs_testing.nfs4_probe import op
from test_ganesha_bridge import FAILS, _servers_built, servers  # noqa: F401  (fixtures)

OK, NOENT = nfs.NFS4_OK, nfs.NFS4ERR_NOENT
NFS4ERR_STALE, NFS4ERR_BAD_STATEID = 70, 10025


def result(r, opnum, nth=0):
    return [x for x in r.results if x.op == opnum][nth].value


def views_open(mnt) -> int:
    return tl.txn_status(mnt.path)["views"]["open"]


def views_held(mnt) -> int:
    """Ended views whose nodeids the kernel still holds."""
    return tl.txn_status(mnt.path)["views"]["held"]


def test_a_plain_nfs_reader_reads_committed_bytes_while_compounds_truncate_and_extend(
        mnt, servers):
    committed = bytes(range(256)) * 400                # 102,400 bytes
    tl.write_file(mnt.path / "f", committed)
    g = servers()
    stop = threading.Event()
    wrong, reads = [], [0]

    def reader():
        with nfs.Client(g.port) as c:
            while not stop.is_set():
                r = c.compound([op.putrootfh(), op.lookup("f"),
                                op.getattr(nfs.FATTR4_SIZE),
                                op.read(1 << 16, 0), op.read(1 << 16, 1 << 16)])
                assert r.status == OK, r
                size = result(r, nfs.OP_GETATTR)[nfs.FATTR4_SIZE]
                data = result(r, nfs.OP_READ, 0)[1] + result(r, nfs.OP_READ, 1)[1]
                reads[0] += 1
                if size != len(committed) or data != committed:
                    wrong.append((size, len(data)))

    t = threading.Thread(target=reader)
    t.start()
    try:
        with nfs.Client(g.port) as w:
            for k in range(30):
                # truncate to 10 bytes, extend to 150,000 with 4 KiB writes; rolled back
                ops = [op.putrootfh(), op.open_existing("f", owner=b"w"), op.setattr_size(10)]
                ops += [op.write(b"x" * 4096, offset=off) for off in range(110_000, 150_000, 4096)]
                ops += [op.close()] + FAILS
                assert w.compound(ops, tag="txn").status == NOENT
    finally:
        stop.set()
        t.join(timeout=60)
    assert reads[0] > 0
    assert not wrong, f"{len(wrong)} of {reads[0]} plain reads were not the committed file: {wrong[:5]}"
    assert (mnt.path / "f").read_bytes() == committed
    assert views_open(mnt) == 0


def test_an_open_made_in_a_transaction_serves_later_plain_compounds(mnt, servers):
    tl.write_file(mnt.path / "old", b"committed")
    g = servers()
    with nfs.Client(g.port) as c:
        # created, written and left open by a committed transactional COMPOUND
        r = c.compound([op.putrootfh(), op.open_create("new", owner=b"a"), op.write(b"in txn"),
                        op.getfh()], tag="txn")
        assert r.status == OK, r
        sid, fh = result(r, nfs.OP_OPEN), result(r, nfs.OP_GETFH)
        r = c.compound([op.putfh(fh), op.write(b" later", offset=6, stateid=sid),
                        op.read(100, stateid=sid)])
        assert r.status == OK, r
        assert result(r, nfs.OP_READ)[1] == b"in txn later"
        assert c.compound([op.putfh(fh), op.close(stateid=sid)]).status == OK
        assert (mnt.path / "new").read_bytes() == b"in txn later"

        # an existing file opened by a committed transactional COMPOUND
        r = c.compound([op.putrootfh(), op.open_existing("old", owner=b"b"),
                        op.write(b"COMMITTED"), op.getfh()], tag="txn")
        assert r.status == OK, r
        sid, fh = result(r, nfs.OP_OPEN), result(r, nfs.OP_GETFH)
        r = c.compound([op.putfh(fh), op.read(100, stateid=sid)])
        assert r.status == OK and result(r, nfs.OP_READ)[1] == b"COMMITTED", r
        assert c.compound([op.putfh(fh), op.close(stateid=sid)]).status == OK

        # created by a rolled-back one: gone, and its stateid with it
        r = c.compound([op.putrootfh(), op.open_create("gone", owner=b"c"), op.write(b"x"),
                        op.getfh()] + FAILS, tag="txn")
        assert r.status == NOENT, r
        sid, fh = result(r, nfs.OP_OPEN), result(r, nfs.OP_GETFH)
        r = c.compound([op.putfh(fh), op.read(100, stateid=sid)])
        assert r.status in (NFS4ERR_STALE, NFS4ERR_BAD_STATEID), r
    assert not (mnt.path / "gone").exists()
    assert views_open(mnt) == 0


def test_long_transactional_compounds_walk_from_the_root_again_and_again(mnt, servers):
    """The root of a view has no parent to be reconnected through: a COMPOUND that comes
    back to it by handle (PUTROOTFH) after the kernel let its entry go -- a few ms into a
    long COMPOUND -- still finds it (the bridge holds it open for the COMPOUND)."""
    (mnt.path / "d").mkdir()
    g = servers()
    with nfs.Client(g.port, max_ops=1024) as c:
        for rnd in range(6):
            ops = []
            for i in range(150):
                ops += [op.putrootfh(), op.lookup("d"), op.open_create(f"f{rnd}-{i}", owner=b"o"),
                        op.write(bytes([i]) * 1024), op.close()]
            r = c.compound(ops, tag="txn")
            assert r.status == OK, [(x.op, x.status) for x in r.results if x.status != OK][:3]
            ops = []
            for i in range(150):
                ops += [op.putrootfh(), op.lookup("d"), op.lookup(f"f{rnd}-{i}"), op.read(1024)]
            r = c.compound(ops, tag="txn")
            assert r.status == OK, [(x.op, x.status) for x in r.results if x.status != OK][:3]
            assert [x.value[1] for x in r.results if x.op == nfs.OP_READ] == \
                [bytes([i]) * 1024 for i in range(150)]
    assert len(list((mnt.path / "d").iterdir())) == 900


def test_ended_views_leave_no_names_in_the_kernel(mnt, servers):
    """Hundreds of transactional COMPOUNDs working two directories deep: once each
    ends, the kernel forgets its view's nodeids (a name left in its cache would keep the
    view's slot held for good, and lengthen the kernel's inode hash chains with every
    COMPOUND: performance.md, Cluster)."""
    (mnt.path / "d" / "c").mkdir(parents=True)
    g = servers()
    n = 200
    with nfs.Client(g.port) as c:
        for i in range(n):
            r = c.compound([op.putrootfh(), op.lookup("d"), op.lookup("c"),
                            op.open_create(f"f{i}", owner=b"v"), op.write(b"x"), op.close()],
                           tag="txn")
            assert r.status == OK, r
    assert views_open(mnt) == 0
    deadline = time.monotonic() + 10      # (the kernel sends its FORGETs in batches)
    while (held := views_held(mnt)) > n // 20:
        assert time.monotonic() < deadline, f"{held} of {n} ended views are still held by the kernel"
        time.sleep(0.2)


def test_the_views_directory_is_not_exported(mnt, servers):
    g = servers()
    with tl.txn_in_view(mnt.path) as (tid, view):
        (view / "mine").write_bytes(b"uncommitted")
        with nfs.Client(g.port) as c:
            for tag in ("", "txn"):
                r = c.compound([op.putrootfh(), op.lookup(".txnfs")], tag=tag)
                assert r.status == NOENT, (tag, r)
                r = c.compound([op.putrootfh(), op.lookup(".txnfs"), op.lookup(str(tid))],
                               tag=tag)
                assert r.status == NOENT, (tag, r)
            r = c.compound([op.putrootfh(), op.readdir()])
            assert r.status == OK and ".txnfs" not in result(r, nfs.OP_READDIR), r
            tl.txn_abort(mnt.path, tid)
            # a transactional READDIR of the root waits for the local transaction's
            # locks; after it, it lists no .txnfs either
            r = c.compound([op.putrootfh(), op.readdir()], tag="txn")
            assert r.status == OK and ".txnfs" not in result(r, nfs.OP_READDIR), r


# --------------------------------------------------------------------------
# random COMPOUNDs against a model, with a plain observer
# --------------------------------------------------------------------------

DIRS = ("", "d")                                    # the root and one subdirectory
NAMES = ("a", "b", "c", "e")


def _walk(dirname):
    return [op.putrootfh()] + ([op.lookup(dirname)] if dirname else [])


def _gen_step(rng, model, k, owner):
    """One random step of a transactional COMPOUND that is valid against MODEL (a dict
    (dir, name) -> bytes, changed in place): (ops, or None when nothing fits; the (dir,
    name) of the file the step leaves open for later plain COMPOUNDs, or None)."""
    d = rng.choice(DIRS)
    present = [n for n in NAMES if (d, n) in model]
    kind = rng.choice(["write", "write", "truncate", "remove", "rename", "keep_open"])
    if kind in ("truncate", "remove", "rename", "keep_open") and not present:
        kind = "write"
    if kind == "write":
        name = rng.choice(NAMES)
        old = model.get((d, name), b"")
        off = rng.choice([0, len(old), rng.randrange(0, 70_000)])
        data = f"<{k}:{rng.randrange(1 << 30)}>".encode() * rng.choice([1, 40, 3000])
        model[(d, name)] = (old + bytes(max(0, off - len(old))))[:off] + data + old[off + len(data):]
        return _walk(d) + [op.open_create(name, owner=owner), op.write(data, offset=off),
                           op.close()], None
    name = rng.choice(present)
    if kind == "truncate":
        size = rng.choice([0, 7, 5000, 90_000])
        old = model[(d, name)]
        model[(d, name)] = (old + bytes(max(0, size - len(old))))[:size]
        return _walk(d) + [op.open_existing(name, owner=owner), op.setattr_size(size),
                           op.close()], None
    if kind == "remove":
        del model[(d, name)]
        return _walk(d) + [op.remove(name)], None
    if kind == "rename":
        new = rng.choice(NAMES)
        if new == name:
            return None, None
        model[(d, new)] = model.pop((d, name))
        return _walk(d) + [op.savefh(), op.rename(name, new)], None
    # keep_open: written here, written again, read and closed by later plain COMPOUNDs
    data = f"[{k}]".encode()
    old = model[(d, name)]
    model[(d, name)] = data + old[len(data):]
    return _walk(d) + [op.open_existing(name, owner=owner), op.write(data), op.getfh()], (d, name)


def _observe(c, name_keys):
    """What a plain reader sees of each (dir, name): None (absent) or (size, bytes). A
    name whose object a commit removed or renamed between the LOOKUP and the GETATTR or
    READ (NFS4ERR_STALE) is left out."""
    seen = {}
    for d, n in name_keys:
        r = c.compound(_walk(d) + [op.lookup(n), op.getattr(nfs.FATTR4_SIZE),
                                   op.read(1 << 20)])
        if r.status == NOENT:
            seen[(d, n)] = None
        elif r.status == NFS4ERR_STALE and r.results[-1].op != nfs.OP_LOOKUP:
            continue
        else:
            assert r.status == OK, r
            seen[(d, n)] = (result(r, nfs.OP_GETATTR)[nfs.FATTR4_SIZE],
                            result(r, nfs.OP_READ)[1])
    return seen


def test_a_straddled_read_may_end_in_zeros_that_are_also_other_versions_pages():
    """The oracle of the random test (tl.straddled_read) on reads its seed 3 met: a
    commit truncated d/a from 42,000 bytes to 0 (and, earlier, e from 90,000 to 5,000)
    while a plain reader's page-cache READ was in flight. The READ came back short after
    the commit, the commit's invalidation had reached the inode first (so the kernel kept
    the size it had), and the reader got the new version and zeros up to the old size --
    pages that are also pages of a sparse version of another name."""
    page = 4096
    sparse = bytes(8556) + b"<0:1>" * 102                  # 9,068 bytes, a hole first
    old = b"<11:477896378>" * 3000                          # 42,000 bytes
    versions = {None, sparse, old, b""}
    assert tl.straddled_read(bytes(len(old)), versions)                   # all zeros
    assert tl.straddled_read(old[:page] + bytes(len(old) - page), versions | {old[:page]})
    longer = b"[8]" * 160 + bytes(37_707) + b"<5:1>" * 10    # 38,235 bytes, a hole inside
    longer += bytes(90_000 - len(longer))                        # extended to 90,000
    assert tl.straddled_read(longer[:5000] + bytes(85_000), {longer, longer[:5000], sparse})
    # still refused: zeros that no commit explains, before or after the old bytes
    assert not tl.straddled_read(old[:2 * page] + bytes(len(old) - 2 * page), versions)
    assert not tl.straddled_read(old[:4 * page] + bytes(page) + old[5 * page:], versions)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_compounds_match_a_model_and_a_plain_reader_sees_only_committed_state(
        mnt, servers, seed):
    """Random transactional COMPOUNDs (writes at random offsets, truncations, removals,
    renames, OPENs left open and used by later plain COMPOUNDs), half of them aborted by
    a failing last operation. After each, the export and the mount hold exactly the
    model's files; all the while a plain NFS reader (its Ganesha fds kept open) reads
    only committed versions -- or, where its read straddled a commit, pages of them."""
    rng = random.Random(seed)
    (mnt.path / "d").mkdir()
    model: dict = {}
    keys = [(d, n) for d in DIRS for n in NAMES]
    history = {key: {None} for key in keys}         # every committed version of each name
    rolled_back = {key: set() for key in keys}      # every version only ever rolled back
    pending: dict = {}       # what the COMPOUND in flight commits: visible from any moment
    lock = threading.Lock()
    g = servers()
    stop = threading.Event()
    observed, straddled, failures = [0], [], []
    now = ["before the first"]                       # the COMPOUND in flight, for messages

    def observer():
        try:
            observe()
        except BaseException as e:   # reported by the test, not lost in the thread
            failures.append(e)

    def observe():
        with nfs.Client(g.port) as c:
            while not stop.is_set():
                for key, v in _observe(c, keys).items():
                    observed[0] += 1
                    if v is None:
                        continue
                    # LOOKUP, GETATTR and READ are three reads, and a commit may come
                    # between them: the object a name led to may have another name by
                    # the READ. So each must be of a version some name had committed.
                    with lock:
                        versions = set().union(*history.values(), *pending.values())
                    size, data = v
                    assert size in {len(x) for x in versions if x is not None}, \
                        f"{key}: a plain reader saw a size never committed: {size} ({now[0]})"
                    if data in versions:
                        continue
                    assert tl.straddled_read(data, versions), (
                        f"{key}: a plain reader saw {len(data)} bytes {data[:60]!r}, never "
                        f"committed{' (a rolled-back version)' if data in set().union(*rolled_back.values()) else ''}"
                        f" ({now[0]})")
                    straddled.append(key)

    t = threading.Thread(target=observer)
    t.start()
    try:
        with nfs.Client(g.port) as w:
            for k in range(40):
                commit = rng.random() < 0.5
                new = dict(model)
                ops, kept = [], None
                for _ in range(rng.randrange(1, 5)):
                    step, kept = _gen_step(rng, new, k, owner=f"o{k}".encode())
                    if step is not None:
                        ops += step
                    if kept:
                        break      # the state stays on the object that has this name
                with lock:
                    pending = {key: {new.get(key)} for key in keys} if commit else {}
                now[0] = f"round {k}, {'commit' if commit else 'abort'}, ops {[o[0] for o in ops]}"
                r = w.compound(ops + ([] if commit else FAILS), tag="txn")
                now[0] = f"after round {k}"
                assert r.status == (OK if commit else NOENT), (k, r)
                # only the failing last operation fails (a SEQUENCE comes first)
                assert len(r.results) == 1 + len(ops) + (0 if commit else len(FAILS)), \
                    (k, [(x.op, x.status) for x in r.results], [o[0] for o in ops])
                if not commit:
                    with lock:
                        for key in keys:
                            rolled_back[key].add(new.get(key))
                if commit:
                    with lock:
                        model = new
                        for key in keys:
                            history[key].add(model.get(key))
                if kept:           # the state an OPEN of this COMPOUND left open
                    sid = [x for x in r.results if x.op == nfs.OP_OPEN][-1].value
                    fh = result(r, nfs.OP_GETFH)
                    if commit:     # its fd is plain now: write, read and close through it
                        key = kept
                        more = f"(plain {k})".encode()
                        want = model[key][:3] + more + model[key][3 + len(more):]
                        with lock:       # committed the moment the plain WRITE runs
                            history[key].add(want)
                        r2 = w.compound([op.putfh(fh), op.write(more, offset=3, stateid=sid),
                                         op.read(1 << 20, stateid=sid),
                                         op.close(stateid=sid)])
                        assert r2.status == OK, (k, r2)
                        assert result(r2, nfs.OP_READ)[1] == want, (k, key)
                        model = dict(model)
                        model[key] = want
                    else:          # rolled back: closed, or stale with its creation
                        r2 = w.compound([op.putfh(fh), op.close(stateid=sid)])
                        assert r2.status in (OK, NFS4ERR_STALE, NFS4ERR_BAD_STATEID), (k, r2)
                # the export and the mount hold exactly the model
                seen = _observe(w, keys)
                for key in keys:
                    want = model.get(key)
                    assert seen[key] == (None if want is None else (len(want), want)), (k, key)
                    path = mnt.path / key[0] / key[1]
                    assert (path.read_bytes() if path.exists() else None) == want, (k, key)
    finally:
        stop.set()
        t.join(timeout=120)
    if failures:
        raise failures[0]
    print(f"seed {seed}: {observed[0]} plain observations, {len(straddled)} straddled a commit")
    assert observed[0] > 0
    assert views_open(mnt) == 0
    assert tl.txn_status(mnt.path)["transactions"] == []
