"""Directory offsets mean the same thing to every opener (src/txnfuse/fuse/listings.h).

A listing is read in two parts, the way NFS-Ganesha reads a directory for a client's
READDIR continuation (it opens the directory anew for each READDIR) and the way a program
does with seekdir(): open, read a few entries, telldir, close; (a transaction begins,
changes the directory, commits or aborts, or nothing happens); open again, seekdir to
that offset, read the rest. In every combination -- a transaction open at the first
read, at the continuation, at both, at neither, one that commits or aborts a create and a
remove in between -- the two parts together name each entry at most once, and every name
that was there throughout. A plain listing that starts while a transaction is open is
served from a snapshot of the committed listing; its offsets used to be positions in it,
which a new handle read as XFS cookies: the continuation repeated or skipped entries.
"""

from __future__ import annotations

import errno
import os
import queue
import subprocess
import threading

import pytest

from txnfs_testing import ganesha_lib as gl
from txnfs_testing import nfs4_probe as nfs
from txnfs_testing import txnfs_lib as tl
from txnfs_testing.nfs4_probe import op
from txnfs_testing.txnfs_lib import (continuation, continued_listing, first_part,
                       listing_with_offsets)

SUBDIRS = [f"dir{k:03d}" for k in range(1, 101)]  # block form on XFS, as in the report
XFS_MAX_COOKIE = 0x7fffffff


class TxnThread:
    """A transaction bound to a thread of its own, which runs what it is given; the
    test's own thread stays plain."""

    def __init__(self, mnt):
        self.mnt = mnt
        self._q: queue.Queue = queue.Queue()
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()
        self.tid = self.run(lambda: tl.txn_begin(mnt.path))
        self.ended = False

    def _loop(self):
        while True:
            fn, box = self._q.get()
            if fn is None:
                return
            try:
                box.put(("ok", fn()))
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                box.put(("exc", e))

    def run(self, fn):
        box: queue.Queue = queue.Queue()
        self._q.put((fn, box))
        kind, val = box.get(timeout=60)
        if kind == "exc":
            raise val
        return val

    def end(self, how="commit"):
        fn = tl.txn_commit if how == "commit" else tl.txn_abort
        rc = self.run(lambda: fn(self.mnt.path, self.tid))
        self.ended = True
        self._q.put((None, None))
        assert rc == 0, f"{how} returned {rc}"

    def close(self):
        if not self.ended:
            self.end("abort")


@pytest.fixture
def txns(mnt):
    made = []

    def begin():
        t = TxnThread(mnt)
        made.append(t)
        return t

    yield begin
    for t in made:
        t.close()


class OpenOrNot:
    """A transaction (from `txns`) open at the first read if `first`; `between`, called
    between the two parts of a listing, commits it or begins one so that a transaction
    is open at the continuation exactly if `cont`. `t` is the one open, if any."""

    def __init__(self, txns, first, cont):
        self.txns, self.cont = txns, cont
        self.t = txns() if first else None

    def between(self):
        if self.t and not self.cont:
            self.t.end("commit")
            self.t = None
        elif self.cont and not self.t:
            self.t = self.txns()


def populate(d, names=SUBDIRS):
    d.mkdir()
    for n in names:
        (d / n).mkdir()
    return sorted([".", "..", *names])


def check_once(got, throughout, ever, what, may_repeat=()):
    dups = sorted({n for n in got if got.count(n) > 1} - set(may_repeat))
    assert not dups, f"{what}: listed twice: {dups}"
    missing = sorted(set(throughout) - set(got))
    assert not missing, f"{what}: missing names present throughout: {missing}"
    extra = sorted(set(got) - set(ever))
    assert not extra, f"{what}: names never committed: {extra}"


# --------------------------------------------------------------------------
# what XFS hands out
# --------------------------------------------------------------------------

def test_xfs_cookies_fit_in_31_bits_and_pass_through_unchanged(mnt, xfs):
    """Snapshot offsets live above 0x7fffffff because XFS never hands out more, in any
    directory form (short-form, block, leaf, node; the end-of-directory cookie too); as
    nobody on the raw XFS directory and through txnfs without a transaction the offsets
    are XFS's own, and a continuation at each of them gives the same rest."""
    raw = xfs.dir / "raw"
    raw.mkdir()
    os.chmod(raw, 0o755)
    for n, shape in ((3, "short-form"), (100, "block"), (700, "leaf"), (3000, "node")):
        names = [f"entry-with-a-longish-name-{k:05d}" for k in range(n)]
        for top in (raw, mnt.path):
            d = top / shape
            d.mkdir()
            for name in names:
                (d / name).touch()
        got_raw = tl.as_user(listing_with_offsets, raw / shape)
        got_fuse = tl.as_user(listing_with_offsets, mnt.path / shape)
        assert max(o for _, o in got_raw) <= XFS_MAX_COOKIE, (shape, hex(max(o for _, o in got_raw)))
        assert sorted(x for x, _ in got_raw) == sorted(x for x, _ in got_fuse) == \
            sorted([".", "..", *names]), shape
        assert max(o for _, o in got_fuse) <= XFS_MAX_COOKIE, shape
        for k in (1, len(got_fuse) // 2, len(got_fuse) - 1):
            rest = tl.as_user(continuation, mnt.path / shape, got_fuse[k - 1][1])
            assert rest == [x for x, _ in got_fuse[k:]], (shape, k)


# --------------------------------------------------------------------------
# transactions open or not, at the first read and at the continuation
# --------------------------------------------------------------------------

@pytest.mark.parametrize("first,cont", [(False, False), (True, False), (False, True),
                                        (True, True)])
@pytest.mark.parametrize("count", [2, 10, 60])
def test_continuation_gives_each_entry_once(mnt, txns, first, cont, count):
    """The report: a listing begun while a transaction was open repeated its first
    entries when continued on a new handle. Every combination of a transaction open at
    the first read and at the continuation lists each of 100 subdirectories once, as
    the raw XFS directory does."""
    d = mnt.path / "top"
    want = populate(d)
    os.listdir(d)  # a listing the kernel may cache, while no transaction is open
    got = continued_listing(d, count, OpenOrNot(txns, first, cont).between)
    check_once(got, want, want, f"open at first read {first}, at continuation {cont}")
    assert sorted(got) == want


def test_continuation_with_a_transaction_held_by_txnfs_begin(mnt):
    """As reported: `txnfs begin M --pid` of a sleeping process holds the transaction;
    read two entries, close, reopen, seek to the last offset, read on."""
    d = mnt.path / "top"
    want = populate(d)
    sleeper = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
    try:
        tid = int(tl.txnfs("begin", mnt.path, "--pid", sleeper.pid, check=True).stdout)
        try:
            got = continued_listing(d, 2)
            check_once(got, want, want, "while the transaction is open")
        finally:
            assert tl.txnfs("abort", mnt.path, tid).returncode == 0
    finally:
        sleeper.kill()
        sleeper.wait(10)
    got = continued_listing(d, 2)
    check_once(got, want, want, "after the abort")


# --------------------------------------------------------------------------
# a transaction that changes the directory in between
# --------------------------------------------------------------------------

def _change(d):
    (d / "made-by-txn").mkdir()
    (d / SUBDIRS[0]).rmdir()       # listed in the first part
    (d / SUBDIRS[-1]).rmdir()      # not yet listed


@pytest.mark.parametrize("end", ["commit", "abort"])
@pytest.mark.parametrize("when", ["before-first-read", "after-first-read",
                                  "begun-after-first-read"])
def test_continuation_across_a_transaction_that_changes_the_directory(mnt, txns, end, when):
    """A transaction creates one name and removes two (one of the first part, one of the
    rest), then commits or aborts before the continuation: it changed the directory
    before the first read (the first read is served the committed listing without its
    changes), after it while it was open at the first read, or it began after it. Each
    name at most once, every name present throughout present, no name never committed."""
    d = mnt.path / "top"
    before = populate(d)
    committed_after = sorted(set(before) - {SUBDIRS[0], SUBDIRS[-1]} | {"made-by-txn"}) \
        if end == "commit" else before
    t = None
    if when != "begun-after-first-read":
        t = txns()
        if when == "before-first-read":
            t.run(lambda: _change(d))

    def between():
        nonlocal t
        if t is None:
            t = txns()
        if when != "before-first-read":
            t.run(lambda: _change(d))
        t.end(end)

    got = continued_listing(d, 10, between)
    throughout = sorted(set(before) & set(committed_after))
    # A listing begun with no transaction open goes on at an XFS cookie, and a rollback
    # puts the names it restores where XFS finds room (docs/isolation.md, "Limits"): as
    # on XFS itself when a name is renamed away and back during a listing, they may be
    # listed twice.
    may_repeat = {SUBDIRS[0], SUBDIRS[-1]} if (when, end) == ("begun-after-first-read",
                                                                "abort") else ()
    check_once(got, throughout, set(before) | set(committed_after), f"{when}, {end}",
               may_repeat)
    if when != "begun-after-first-read":
        # A listing begun while a transaction was open is one snapshot of the committed
        # listing, continued as such -- less the names removed since (NFS-Ganesha looks
        # each name up and fails a READDIR on one that is gone).
        assert set(throughout) <= set(got) <= set(before), f"{when}, {end}"


@pytest.mark.parametrize("count", [2, 50])
def test_snapshot_continued_while_the_transaction_keeps_its_changes(mnt, txns, count):
    """A transaction changed the directory before the first read and is still open at
    the continuation: the continuation goes on with the committed listing the first part
    came from."""
    d = mnt.path / "top"
    before = populate(d)
    t = txns()
    t.run(lambda: _change(d))
    got = continued_listing(d, count)
    assert sorted(got) == before
    check_once(got, before, before, "transaction open throughout")
    t.end("abort")


def test_transaction_continues_a_plain_snapshot_under_its_own_view(mnt, txns):
    """A plain listing begun while another transaction had changed the directory hands
    out positions in a snapshot; a transaction that continues at such an offset (an NFS
    client's READDIR inside a transactional COMPOUND) is given the names of its own view
    it was not given yet -- its own creation included, nothing twice."""
    d = mnt.path / "top"
    before = populate(d)
    other = txns()
    other.run(lambda: (d / "made-by-other").mkdir())
    names, off = first_part(d, 10)
    other.end("abort")
    mine = txns()
    mine.run(lambda: (d / "made-by-me").mkdir())
    rest = mine.run(lambda: continuation(d, off))
    got = names + rest
    check_once(got, before, set(before) | {"made-by-me"}, "transaction's continuation")
    assert "made-by-me" in got
    mine.end("abort")


# --------------------------------------------------------------------------
# offsets no listing handed out
# --------------------------------------------------------------------------

def test_offsets_no_listing_handed_out_are_refused(mnt, txns):
    """An offset above XFS's cookies that names no snapshot kept is refused with EINVAL,
    with and without an open transaction (NFS-Ganesha answers NFS4ERR_INVAL)."""
    d = mnt.path / "top"
    populate(d, SUBDIRS[:5])
    bad = [0x80000000, (1 << 62) | (1 << 61) | (12345 << 31) | 3, (1 << 62) | 7]
    for open_txn in (False, True):
        t = txns() if open_txn else None
        for off in bad:
            with pytest.raises(OSError) as ei:
                continuation(d, off)
            assert ei.value.errno == errno.EINVAL, (hex(off), open_txn)
        if t:
            t.end("abort")


# --------------------------------------------------------------------------
# over NFS: the patched NFS-Ganesha opens the directory anew for every READDIR
# --------------------------------------------------------------------------

def nfs_listing(c, maxcount, between=lambda: None, tag="") -> list[str]:
    """READDIR of /top from cookie 0 to eof, `maxcount` bytes at a time; `between` runs
    after the first reply."""
    def readdir(cookie=0, verifier=bytes(8)):
        r = c.compound([op.putrootfh(), op.lookup("top"),
                        op.readdir(maxcount, cookie, verifier)], tag=tag if cookie else "")
        assert r.status == nfs.NFS4_OK, r
        return r.results[-1].value

    got = readdir()
    names = list(got)
    assert not got.eof, "the first READDIR already reached the end: maxcount too large"
    between()
    for _ in range(len(SUBDIRS)):
        if got.eof:
            return names
        got = readdir(got.cookies[-1], got.verifier)
        names += got
    raise AssertionError(f"no eof after {len(SUBDIRS)} READDIRs: {names}")


def test_nfs_readdir_continuation_lists_each_entry_once(mnt, txns, tmp_path):
    """The report: an NFSv4.0 READDIR continuation of a 100-subdirectory directory while
    a transactional client is busy on the mount returned dir01..dir10 twice. With a
    small maxcount the listing takes several READDIRs; a transaction is open at the
    first one, at the continuations, at both or at neither; the continuations are plain
    COMPOUNDs or transactional ones."""
    d = mnt.path / "top"
    populate(d)
    with gl.Ganesha(mnt.path, tmp_path / "ganesha") as g, \
            nfs.Client(g.port, minorversion=0) as c:
        for first, cont in ((True, True), (True, False), (False, True), (False, False)):
            for tag in ("", "txn:readdir"):
                s = OpenOrNot(txns, first, cont)
                got = nfs_listing(c, 1024, s.between, tag)
                if s.t:
                    s.t.end("abort")
                what = f"open at first READDIR {first}, at continuation {cont}, tag {tag!r}"
                check_once(got, SUBDIRS, SUBDIRS, what)
                assert sorted(got) == SUBDIRS, what


def test_nfs_readdir_continuation_across_a_committed_change(mnt, txns, tmp_path):
    """A transaction open at the first READDIR removes a listed name and an unlisted
    one and makes a new one, and commits before the continuation: each name at most
    once, every name present throughout present."""
    d = mnt.path / "top"
    populate(d)
    with gl.Ganesha(mnt.path, tmp_path / "ganesha") as g, \
            nfs.Client(g.port, minorversion=0) as c:
        t = txns()

        def between():
            t.run(lambda: _change(d))
            t.end("commit")

        got = nfs_listing(c, 1024, between)
        after = set(SUBDIRS) - {SUBDIRS[0], SUBDIRS[-1]} | {"made-by-txn"}
        check_once(got, set(SUBDIRS) & after, set(SUBDIRS) | after, "committed in between")
