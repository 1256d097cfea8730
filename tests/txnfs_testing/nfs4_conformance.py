"""A protocol walk over every NFSv4.0 / NFSv4.1 operation, for comparing servers.

`walk(port, minor)` runs one fixed script of COMPOUNDs against a server whose export is
empty and returns its transcript: for every step, the COMPOUND's status, each result's
(operation, status) and the values that do not depend on the server (data read, names
listed, type/size/mode, link targets, access bits). Two servers that behave the same
produce equal transcripts; `compare()` names the first steps where they differ.

The script covers every operation of RFC 7530 (4.0) and RFC 8881 (4.1), each on its
success path where the export allows one and on its error paths (no current filehandle,
bad or stale handle, bad names, wrong object type, missing or existing entries, bad and
stale stateids, lock conflicts, permission denied for another user, session and slot
errors, illegal operations, a minor version the server does not speak), and replays
(NFSv4.0's open-owner seqid replay; NFSv4.1's cached slot replay).

Rules the script keeps so that a server that runs each COMPOUND as a transaction (and
rolls a failed one back) must give the same transcript: an operation that changes
anything is the last one of its COMPOUND, or the COMPOUND succeeds. Every failing
operation ends its COMPOUND (the server stops there), so the probe only needs to decode
the results of operations before it.
"""

from __future__ import annotations

import os
import struct

from txnfs_testing import nfs4_probe as nfs
from txnfs_testing.nfs4_probe import op, opaque, string, u32, u64

OK = nfs.NFS4_OK

# operations the probe module does not name
OP_DELEGPURGE, OP_DELEGRETURN, OP_LINK, OP_LOCK, OP_LOCKT, OP_LOCKU = 7, 8, 11, 12, 13, 14
OP_LOOKUPP, OP_NVERIFY, OP_OPENATTR, OP_OPEN_DOWNGRADE, OP_PUTPUBFH = 16, 17, 19, 21, 23
OP_READLINK, OP_RENEW, OP_SECINFO, OP_VERIFY, OP_RELEASE_LOCKOWNER = 27, 30, 33, 37, 39
OP_BACKCHANNEL_CTL, OP_BIND_CONN_TO_SESSION, OP_FREE_STATEID = 40, 41, 45
OP_GET_DIR_DELEGATION, OP_GETDEVICEINFO, OP_GETDEVICELIST = 46, 47, 48
OP_LAYOUTCOMMIT, OP_LAYOUTGET, OP_LAYOUTRETURN, OP_SECINFO_NO_NAME = 49, 50, 51, 52
OP_SET_SSV, OP_WANT_DELEGATION, OP_ILLEGAL = 54, 56, 10044

NF4BLK, NF4CHR, NF4LNK, NF4SOCK, NF4FIFO = 3, 4, 5, 6, 7
READ_LT, WRITE_LT = 1, 2
FATTR4_OWNER, FATTR4_TIME_MODIFY_SET = 36, 54
ACCESS_ALL = 0x3F
OPEN4_SHARE_ACCESS_READ = 1


def _cinfo(u):
    return (u.u32(), u.u64(), u.u64())


def _secinfo(u):
    out = []
    for _ in range(u.u32()):
        flavor = u.u32()
        if flavor == nfs.RPCSEC_GSS:
            u.opaque(), u.u32(), u.u32()
        out.append(flavor)
    return out


# decoders of successful results the probe module does not know
_EXTRA = {
    nfs.OP_ACCESS: lambda u: (u.u32(), u.u32()),
    OP_LINK: _cinfo,
    OP_LOCK: lambda u: u.take(16),
    OP_LOCKU: lambda u: u.take(16),
    OP_OPEN_DOWNGRADE: lambda u: u.take(16),
    OP_READLINK: lambda u: u.opaque(),
    OP_SECINFO: _secinfo,
    OP_SECINFO_NO_NAME: _secinfo,
    OP_BIND_CONN_TO_SESSION: lambda u: (u.take(16), u.u32(), u.u32()),
    **{o: (lambda u: None) for o in (OP_LOCKT, OP_LOOKUPP, OP_PUTPUBFH, OP_NVERIFY, OP_VERIFY,
                                       OP_RENEW, OP_DELEGRETURN, OP_DELEGPURGE,
                                       OP_RELEASE_LOCKOWNER, OP_FREE_STATEID,
                                       OP_BACKCHANNEL_CTL)},
}


def decode(data: bytes):
    """COMPOUND4res -> (status, [(op, status, value)]). A successful last result the
    probe cannot decode gets the value None (nothing after it needs decoding)."""
    u = nfs.Unpacker(data)
    status, _tag, n = u.u32(), u.opaque(), u.u32()
    results = []
    for i in range(n):
        opnum, st = u.u32(), u.u32()
        value = None
        if st == OK:
            try:
                value = _EXTRA[opnum](u) if opnum in _EXTRA else nfs._decode_ok(opnum, u)
            except ValueError:
                if i != n - 1:
                    raise
        elif i != n - 1:
            raise ValueError(f"op {opnum} failed with {st} but is not the last result")
        results.append((opnum, st, value))
    return status, results


def observable(opnum, value):
    """What of a result's value must be equal on every server (None: nothing)."""
    if value is None:
        return None
    if opnum == nfs.OP_READ:
        return value
    if opnum == nfs.OP_READDIR:
        return sorted(value)
    if opnum == nfs.OP_GETATTR:
        return {k: v for k, v in value.items() if k != nfs.FATTR4_FILEID}
    if opnum in (OP_READLINK, OP_SECINFO, OP_SECINFO_NO_NAME):
        return value
    if opnum == nfs.OP_ACCESS:
        return value
    return None


def fattr(bits: dict) -> bytes:
    """fattr4 of {attr: encoded value}, in attribute order."""
    return nfs.bitmap(*bits) + opaque(b"".join(bits[a] for a in sorted(bits)))


class Transcript(list):
    """[(step name, COMPOUND status, [(op, status, observable value)])]; .sent holds
    every operation number the walk sent (an unimplemented one is answered OP_ILLEGAL)."""

    def __init__(self):
        super().__init__()
        self.sent = set()


class Walk:
    """One client's run of the script; self.transcript collects the steps."""

    def __init__(self, port, minor):
        self.port, self.minor = port, minor
        self.c = nfs.Client(port, minorversion=minor)
        if minor == 0:
            self.c.setclientid()
        self.transcript = Transcript()
        self.owners = 0
        self.seqids = {}   # NFSv4.0 open- and lock-owner seqids

    def close(self):
        self.c.close()

    # -- sending ----------------------------------------------------------------

    def raw(self, name, body: bytes, client=None):
        """Send one COMPOUND body; record and return (status, results)."""
        c = client or self.c
        status, results = decode(c.call_raw(body))
        if (c.minor == 1 and results and results[0][0] == nfs.OP_SEQUENCE
                and results[0][1] == OK):
            c.seq += 1
        self.transcript.append((name, status, [(o, s, observable(o, v)) for o, s, v in results]))
        return status, results

    def step(self, name, ops, client=None, sequence=True):
        c = client or self.c
        self.transcript.sent.update(o for o, _ in ops)
        return self.raw(name, c.encode(ops, tag="", sequence=sequence), client=c)

    def value(self, name, ops, client=None):
        """step() that must succeed; the value of its last result."""
        status, results = self.step(name, ops, client)
        assert status == OK, f"{name}: {status} {results}"
        return results[-1][2]

    def fh(self, *path):
        return self.value(f"getfh {'/'.join(path) or '/'}",
                          [op.putrootfh()] + [op.lookup(p) for p in path] + [op.getfh()])

    # -- state ------------------------------------------------------------------

    def owner(self):
        self.owners += 1
        return b"owner-%d" % self.owners

    def _seqid(self, owner):
        s = self.seqids.get(owner, 0)
        self.seqids[owner] = s + 1
        return s if self.minor == 0 else 0

    def open(self, name, *, create=True, dirs=(), owner=None, check=True):
        """OPEN (and OPEN_CONFIRM for 4.0) of dirs/name; returns (owner, stateid, fh)."""
        owner = owner or self.owner()
        args = dict(clientid=self.c.clientid, owner=owner, seqid=self._seqid(owner),
                    minor=self.minor)
        o = op.open_create(name, **args) if create else op.open_existing(name, **args)
        status, results = self.step(f"open {name}", [op.putrootfh()]
                                    + [op.lookup(d) for d in dirs] + [o, op.getfh()])
        if status != OK:
            assert not check, f"open {name}: {status} {results}"
            return owner, None, None
        stateid, fh = results[-2][2], results[-1][2]
        if self.minor == 0 and stateid.rflags & nfs.OPEN4_RESULT_CONFIRM:
            stateid = self.value(f"open_confirm {name}",
                                 [op.putfh(fh), op.open_confirm(stateid, self._seqid(owner))])
        return owner, bytes(stateid), fh

    def close_file(self, name, owner, stateid, fh):
        return self.step(f"close {name}", [op.putfh(fh), op.close(stateid, self._seqid(owner))])

    def lock_new(self, fh, owner, open_stateid, locktype, offset, length, lock_owner):
        lo = u64(self.c.clientid) + opaque(lock_owner)
        args = (u32(locktype) + u32(0) + u64(offset) + u64(length) + u32(1)
                + u32(self._seqid(owner)) + open_stateid + u32(self._seqid(lock_owner)) + lo)
        return self.step(f"lock {locktype} {offset}+{length}", [op.putfh(fh), (OP_LOCK, args)])

    def lockt(self, fh, locktype, offset, length, lock_owner):
        args = (u32(locktype) + u64(offset) + u64(length) + u64(self.c.clientid)
                + opaque(lock_owner))
        return self.step(f"lockt {locktype} {offset}+{length}", [op.putfh(fh), (OP_LOCKT, args)])

    def locku(self, fh, lock_owner, lock_stateid, offset, length):
        args = (u32(WRITE_LT) + u32(self._seqid(lock_owner)) + lock_stateid + u64(offset)
                + u64(length))
        return self.step(f"locku {offset}+{length}", [op.putfh(fh), (OP_LOCKU, args)])


def mknod(kind, name, extra=b""):
    return nfs.OP_CREATE, (u32(kind) + extra + string(name)
                           + nfs.bitmap(nfs.FATTR4_MODE) + opaque(u32(0o644)))


def symlink(name, target):
    return mknod(NF4LNK, name, string(target))


def setattr(bits: dict, stateid=bytes(16)):
    return nfs.OP_SETATTR, stateid + fattr(bits)


def attrs():
    return op.getattr(nfs.FATTR4_TYPE, nfs.FATTR4_SIZE, nfs.FATTR4_MODE)


def walk(port, minor) -> list:
    """Runs the whole script on a server with an empty export; returns the transcript."""
    w = Walk(port, minor)
    try:
        _script(w)
        return w.transcript
    finally:
        w.close()


def _script(w: Walk):
    s, v = w.step, w.value
    root = [op.putrootfh()]
    bogus_fh = b"\x01" * 20
    bogus_stateid = struct.pack(">I", 7) + b"\x55" * 12

    # -- filehandles ------------------------------------------------------------------
    s("getfh without a current filehandle", [op.getfh()])
    s("getattr without a current filehandle", [attrs()])
    s("putfh of a garbage handle", [op.putfh(bogus_fh)])
    s("putfh of an empty handle", [op.putfh(b"")])
    s("putpubfh", [(OP_PUTPUBFH, b""), attrs()])
    s("savefh without a current filehandle", [op.savefh()])
    s("restorefh without a saved filehandle", root + [op.restorefh()])
    s("root attributes", root + [attrs()])
    s("lookupp of the root", root + [(OP_LOOKUPP, b"")])

    # -- directories and names -------------------------------------------------------
    s("mkdir d", root + [op.mkdir("d")])
    s("mkdir d again", root + [op.mkdir("d")])
    s("mkdir with an empty name", root + [op.mkdir("")])
    s("mkdir named .", root + [op.mkdir(".")])
    s("mkdir named ..", root + [op.mkdir("..")])
    s("mkdir with a slash", root + [op.mkdir("a/b")])
    s("mkdir with a 256-byte name", root + [op.mkdir("n" * 256)])
    s("mkdir with a 255-byte name", root + [op.mkdir("n" * 255)])
    s("mkdir d/sub", root + [op.lookup("d"), op.mkdir("sub")])
    s("lookup d, lookupp, getattr", root + [op.lookup("d"), (OP_LOOKUPP, b""), attrs()])
    s("lookup a missing name", root + [op.lookup("missing")])
    s("lookup an empty name", root + [op.lookup("")])
    s("lookup .", root + [op.lookup(".")])
    s("lookup ..", root + [op.lookup("..")])
    s("readdir of /", root + [op.readdir()])
    s("readdir of d", root + [op.lookup("d"), op.readdir()])
    s("readdir with a tiny maxcount", root + [op.readdir(maxcount=8)])
    s("remove a non-empty directory", root + [op.remove("d")])
    s("remove a missing name", root + [op.remove("missing")])
    s("remove an empty name", root + [op.remove("")])

    # -- other object types -------------------------------------------------------------
    s("symlink l -> d/sub", root + [symlink("l", "d/sub")])
    s("readlink l", root + [op.lookup("l"), (OP_READLINK, b"")])
    s("readlink of a directory", root + [op.lookup("d"), (OP_READLINK, b"")])
    s("lookup through a symlink", root + [op.lookup("l"), op.lookup("x")])
    s("readdir of a symlink", root + [op.lookup("l"), op.readdir()])
    s("fifo p", root + [mknod(NF4FIFO, "p")])
    s("socket k", root + [mknod(NF4SOCK, "k")])
    s("char device c", root + [mknod(NF4CHR, "c", u32(1) + u32(3))])
    s("block device b", root + [mknod(NF4BLK, "b", u32(7) + u32(0))])
    s("create of a regular file (BADTYPE)", root + [mknod(nfs.NF4REG, "r")])
    s("create without a current filehandle", [op.mkdir("x")])
    s("attributes of the special files", root + [op.lookup("p"), attrs(), op.putrootfh(),
                                                 op.lookup("c"), attrs()])

    # -- files: open, write, read, commit, setattr ---------------------------------------
    owner, sid, ffh = w.open("f")
    s("write f", [op.putfh(ffh), op.write(b"0123456789", stateid=sid)])
    s("read f", [op.putfh(ffh), op.read(100, stateid=sid)])
    s("read f past its end", [op.putfh(ffh), op.read(100, offset=1000, stateid=sid)])
    s("read f with the anonymous stateid", [op.putfh(ffh), op.read(4, offset=2)])
    s("read f with a bogus stateid", [op.putfh(ffh), op.read(4, stateid=bogus_stateid)])
    s("write f with a bogus stateid", [op.putfh(ffh), op.write(b"x", stateid=bogus_stateid)])
    s("commit f", [op.putfh(ffh), op.commit()])
    s("commit a directory", root + [op.commit()])
    s("read a directory", root + [op.read(10)])
    s("write a directory", root + [op.write(b"x", stateid=nfs.ANONYMOUS_STATEID)])
    s("write f at 1 MiB", [op.putfh(ffh), op.write(b"tail", offset=1 << 20, stateid=sid)])
    s("attributes of f", [op.putfh(ffh), attrs()])
    s("truncate f to 5", [op.putfh(ffh), setattr({nfs.FATTR4_SIZE: u64(5)}, sid), attrs()])
    s("chmod f 0600", [op.putfh(ffh), setattr({nfs.FATTR4_MODE: u32(0o600)}), attrs()])
    s("chown f to 1000", [op.putfh(ffh), setattr({FATTR4_OWNER: string("1000")})])
    s("touch f (server time)", [op.putfh(ffh), setattr({FATTR4_TIME_MODIFY_SET: u32(0)})])
    s("setattr of a read-only attribute", [op.putfh(ffh), setattr({nfs.FATTR4_TYPE: u32(1)})])
    s("truncate a directory", root + [op.lookup("d"), setattr({nfs.FATTR4_SIZE: u64(0)})])
    s("setattr with a bogus stateid", [op.putfh(ffh), setattr({nfs.FATTR4_SIZE: u64(1)},
                                                              bogus_stateid)])
    s("verify f's size (true)", [op.putfh(ffh), (OP_VERIFY, fattr({nfs.FATTR4_SIZE: u64(5)}))])
    s("verify f's size (false)", [op.putfh(ffh), (OP_VERIFY, fattr({nfs.FATTR4_SIZE: u64(9)}))])
    s("nverify f's size (true)", [op.putfh(ffh), (OP_NVERIFY, fattr({nfs.FATTR4_SIZE: u64(9)}))])
    s("nverify f's size (false)", [op.putfh(ffh),
                                   (OP_NVERIFY, fattr({nfs.FATTR4_SIZE: u64(5)}))])
    s("access f", [op.putfh(ffh), (nfs.OP_ACCESS, u32(ACCESS_ALL))])
    s("access /", root + [(nfs.OP_ACCESS, u32(ACCESS_ALL))])
    s("openattr f", [op.putfh(ffh), (OP_OPENATTR, u32(0))])
    s("lookup below a file", [op.putfh(ffh), op.lookup("x")])
    s("readdir of a file", [op.putfh(ffh), op.readdir()])
    s("open of a missing file without create", root + [op.open_existing(
        "missing", clientid=w.c.clientid, owner=w.owner(), minor=w.minor)])
    s("exclusive-style guarded create of an existing f", root + [op.open_create(
        "f", clientid=w.c.clientid, owner=w.owner(), guarded=True, minor=w.minor)])
    s("open of a directory", root + [op.open_existing(
        "d", clientid=w.c.clientid, owner=w.owner(), minor=w.minor)])

    # -- locks ---------------------------------------------------------------------------
    lock_owner = b"locker-1"
    st, res = w.lock_new(ffh, owner, sid, WRITE_LT, 0, 10, lock_owner)
    lsid = res[-1][2] if st == OK else None
    w.lockt(ffh, WRITE_LT, 5, 10, b"locker-2")
    w.lockt(ffh, READ_LT, 20, 10, b"locker-2")
    owner2, sid2, _ = w.open("f", create=False)
    w.lock_new(ffh, owner2, sid2, WRITE_LT, 0, 1, b"locker-3")
    if lsid is not None:
        w.locku(ffh, lock_owner, lsid, 0, 10)
        w.lockt(ffh, WRITE_LT, 5, 10, b"locker-2")
    s("locku with a bogus stateid", [op.putfh(ffh), (OP_LOCKU, u32(WRITE_LT) + u32(0)
                                      + bogus_stateid + u64(0) + u64(1))])
    s("open_downgrade to read", [op.putfh(ffh), (OP_OPEN_DOWNGRADE, sid2 + u32(w._seqid(owner2))
                                                 + u32(OPEN4_SHARE_ACCESS_READ) + u32(0))])
    s("open_downgrade with a bogus stateid",
      [op.putfh(ffh), (OP_OPEN_DOWNGRADE, bogus_stateid + u32(0) + u32(1) + u32(0))])
    s("delegreturn of a bogus stateid", [op.putfh(ffh), (OP_DELEGRETURN, bogus_stateid)])
    s("delegpurge", [(OP_DELEGPURGE, u64(w.c.clientid))])

    # -- link, rename, remove -----------------------------------------------------------
    dfh = w.fh("d")
    s("link f as d/g", [op.putfh(ffh), op.savefh(), op.putfh(dfh), (OP_LINK, string("g"))])
    s("link f as d/g again", [op.putfh(ffh), op.savefh(), op.putfh(dfh), (OP_LINK, string("g"))])
    s("link a directory", root + [op.lookup("d"), op.lookup("sub"), op.savefh(),
                                  op.putrootfh(), (OP_LINK, string("sub2"))])
    s("link without a saved filehandle", [op.putfh(dfh), (OP_LINK, string("h"))])
    s("link into a file", [op.putfh(ffh), op.savefh(), (OP_LINK, string("h"))])
    s("link count of f", [op.putfh(ffh), op.getattr(nfs.FATTR4_TYPE, nfs.FATTR4_SIZE)])
    s("rename f to e", root + [op.savefh(), op.rename("f", "e")])
    s("rename a missing name", root + [op.savefh(), op.rename("missing", "x")])
    s("rename e over d/g (same file)", root + [op.savefh(), op.lookup("d"),
                                               op.rename("g", "g")])
    s("rename a directory over a file", root + [op.savefh(), op.rename("d", "e")])
    s("rename a file over a non-empty directory", root + [op.savefh(), op.rename("e", "d")])
    s("rename without a saved filehandle", root + [op.rename("e", "x")])
    s("rename d/sub to /sub", root + [op.lookup("d"), op.savefh(), op.putrootfh(),
                                      op.rename("sub", "sub")])
    s("rename a directory into itself", root + [op.savefh(), op.lookup("sub"),
                                                op.rename("sub", "x")])
    s("read e through the old handle", [op.putfh(ffh), op.read(5, stateid=sid)])
    w.close_file("e", owner, sid, ffh)
    s("read with the closed stateid", [op.putfh(ffh), op.read(5, stateid=sid)])
    s("close it again", [op.putfh(ffh), op.close(sid, 0)])
    s("remove e", root + [op.remove("e")])
    s("d/g is still f's data", [op.putfh(dfh), op.lookup("g"), op.read(5)])
    s("remove d/g", [op.putfh(dfh), op.remove("g")])
    s("the handle of a removed file", [op.putfh(ffh), attrs()])
    s("remove the socket, fifo, devices, symlink",
      root + [op.remove("k"), op.remove("p"), op.remove("c"), op.remove("b"), op.remove("l")])
    s("readdir at the end", root + [op.readdir()])

    # -- another user -----------------------------------------------------------------------
    s("mkdir private 0700", root + [op.mkdir("private", mode=0o700)])
    s("mkdir public 0777", root + [op.mkdir("public", mode=0o777)])
    s("chmod public 0777 (umask)", root + [op.lookup("public"),
                                           setattr({nfs.FATTR4_MODE: u32(0o777)})])
    other = nfs.Client(w.port, minorversion=w.minor, uid=65534, gid=65534)
    try:
        if w.minor == 0:
            other.setclientid()
        s("nobody: lookup in private", root + [op.lookup("private"), op.lookup("x")],
          client=other)
        s("nobody: readdir of private", root + [op.lookup("private"), op.readdir()],
          client=other)
        s("nobody: access private", root + [op.lookup("private"),
                                            (nfs.OP_ACCESS, u32(ACCESS_ALL))], client=other)
        s("nobody: mkdir in /", root + [op.mkdir("mine")], client=other)
        s("nobody: mkdir in public", root + [op.lookup("public"), op.mkdir("mine")],
          client=other)
        s("nobody: chmod of private", root + [op.lookup("private"),
                                              setattr({nfs.FATTR4_MODE: u32(0o777)})],
          client=other)
        s("nobody: remove private", root + [op.remove("private")], client=other)
        s("nobody: attributes of public/mine",
          root + [op.lookup("public"), op.lookup("mine"), attrs()], client=other)
    finally:
        other.close()

    # -- security flavours -------------------------------------------------------------------
    s("secinfo of d", root + [(OP_SECINFO, string("d"))])
    s("secinfo of a missing name", root + [(OP_SECINFO, string("missing"))])
    if w.minor == 1:
        s("secinfo_no_name of the current fh", root + [(OP_SECINFO_NO_NAME, u32(0))])
        s("secinfo_no_name of the parent", root + [op.lookup("d"),
                                                   (OP_SECINFO_NO_NAME, u32(1))])

    # -- minor-version specific ---------------------------------------------------------------
    if w.minor == 0:
        _v40(w)
    else:
        _v41(w)

    # -- not operations ------------------------------------------------------------------------
    s("OP_ILLEGAL", root + [(OP_ILLEGAL, b"")])
    s("an operation number no version has", root + [(9999, b"")])
    s("an operation of another minor version",
      root + [(OP_RENEW, u64(w.c.clientid))] if w.minor == 1
      else root + [(OP_FREE_STATEID, bogus_stateid)])
    body = string("") + u32(7) + u32(1) + u32(nfs.OP_PUTROOTFH)
    w.raw("minor version 7", body)
    s("the final tree", root + [op.readdir()])


def _v40(w: Walk):
    s = w.step
    root = [op.putrootfh()]
    cb = u32(0x40000000) + string("tcp") + string("127.0.0.1.0.0") + u32(1)
    s("setclientid of a second client", [(nfs.OP_SETCLIENTID, os.urandom(8)
                                          + opaque(b"second-" + os.urandom(8).hex().encode())
                                          + cb)])
    s("renew", [(OP_RENEW, u64(w.c.clientid))])
    s("renew of an unknown clientid", [(OP_RENEW, u64(0x123456789))])
    s("release_lockowner", [(OP_RELEASE_LOCKOWNER, u64(w.c.clientid) + opaque(b"locker-1"))])
    s("setclientid_confirm of an unknown clientid",
      [(nfs.OP_SETCLIENTID_CONFIRM, u64(0x123456789) + bytes(8))])
    s("open with an unknown clientid", root + [op.open_create(
        "u", clientid=0x123456789, owner=b"stranger", minor=0)])
    # open-owner seqid replay: the same OPEN twice is answered from the owner's cache
    owner = w.owner()
    body = w.c.encode(root + [op.open_create("replayed", clientid=w.c.clientid, owner=owner,
                                             seqid=0, minor=0)], tag="")
    w.raw("open with a new owner", body)
    w.raw("the same open again (seqid replay)", body)
    s("open with a seqid from the future", root + [op.open_create(
        "replayed", clientid=w.c.clientid, owner=owner, seqid=9, minor=0)])
    s("sequence in a 4.0 COMPOUND", [(nfs.OP_SEQUENCE, bytes(16) + u32(1) + u32(0) + u32(0)
                                      + u32(0))])
    s("remove replayed", root + [op.remove("replayed")])


def _v41(w: Walk):
    s = w.step
    c = w.c
    root = [op.putrootfh()]
    bogus_stateid = b"\x00\x00\x00\x07" + b"\x55" * 12

    def seq(sessionid=None, seqid=None, slot=0, highest=0):
        return nfs.OP_SEQUENCE, ((sessionid or c.sessionid) + u32(c.seq if seqid is None else seqid)
                                 + u32(slot) + u32(highest) + u32(0))

    s("sequence of an unknown session", [seq(sessionid=b"\x09" * 16)] + root, sequence=False)
    s("sequence misordered", [seq(seqid=c.seq + 5)] + root, sequence=False)
    s("sequence on a slot out of range", [seq(slot=4000, highest=4000)] + root, sequence=False)
    s("an operation without sequence", root, sequence=False)
    s("sequence not first", root + [seq()], sequence=False)
    s("exchange_id inside a session COMPOUND", [(nfs.OP_EXCHANGE_ID, os.urandom(8)
                                                 + opaque(b"x") + u32(0) + u32(0) + u32(0))])
    # a cached slot replay answers the same without running anything again
    first_seq = c.seq
    s("mkdir cached (cachethis)", root + [op.mkdir("cached")], sequence=True)
    c.seq = first_seq
    body = c.encode(root + [op.mkdir("cached")], tag="", cachethis=False)
    w.raw("the same slot and seqid again", body)
    s("test_stateid", [op.test_stateid(bogus_stateid, nfs.ANONYMOUS_STATEID)])
    s("free_stateid of a bogus stateid", [(OP_FREE_STATEID, bogus_stateid)])
    owner, sid, fh = w.open("g41")
    s("test_stateid of an open stateid", [op.test_stateid(sid)])
    s("free_stateid of an open stateid (locks held? no; open: LOCKS_HELD or OK)",
      [(OP_FREE_STATEID, sid)])
    w.close_file("g41", owner, sid, fh)
    s("test_stateid of the closed stateid", [op.test_stateid(sid)])
    s("write with the current stateid and no current stateid",
      [op.putfh(fh), op.write(b"x")])
    s("open; write; close with the current stateid",
      root + [op.open_existing("g41", owner=w.owner()), op.write(b"abc"), op.close()])
    s("read it back", root + [op.lookup("g41"), op.read(10)])
    s("remove g41, cached", root + [op.remove("g41"), op.remove("cached")])
    s("reclaim_complete again", [(nfs.OP_RECLAIM_COMPLETE, u32(0))])
    s("backchannel_ctl", [(OP_BACKCHANNEL_CTL, u32(0x40000000) + u32(1) + nfs.cb_sec_none())])
    s("bind_conn_to_session", [(OP_BIND_CONN_TO_SESSION, c.sessionid + u32(1) + u32(0))],
      sequence=False)
    s("bind_conn_to_session of an unknown session",
      [(OP_BIND_CONN_TO_SESSION, b"\x09" * 16 + u32(1) + u32(0))], sequence=False)
    s("get_dir_delegation", root + [(OP_GET_DIR_DELEGATION, u32(0) + nfs.bitmap()
                                     + u64(0) + u32(0) + u64(0) + u32(0)
                                     + nfs.bitmap() + nfs.bitmap())])
    s("want_delegation", root + [(OP_WANT_DELEGATION, u32(0) + u32(4))])
    s("getdeviceinfo", [(OP_GETDEVICEINFO, bytes(16) + u32(1) + u32(4096) + nfs.bitmap())])
    s("getdevicelist", root + [(OP_GETDEVICELIST, u32(1) + u32(16) + u64(0) + bytes(8))])
    s("layoutget", root + [(OP_LAYOUTGET, u32(0) + u32(1) + u32(1) + u64(0) + u64(4096)
                            + u64(4096) + bogus_stateid + u32(4096))])
    s("layoutcommit", root + [(OP_LAYOUTCOMMIT, u64(0) + u64(4096) + u32(0) + bogus_stateid
                               + u32(0) + u32(0) + u32(1) + opaque(b""))])
    s("layoutreturn", root + [(OP_LAYOUTRETURN, u32(0) + u32(1) + u32(1) + u32(3))])
    s("set_ssv", [(OP_SET_SSV, opaque(b"ssv") + opaque(b"digest"))])
    s("destroy_session of an unknown session", [(nfs.OP_DESTROY_SESSION, b"\x09" * 16)],
      sequence=False)
    s("destroy_clientid of the session's own client",
      [(nfs.OP_DESTROY_CLIENTID, u64(c.clientid))], sequence=False)
    s("create_session for an unknown clientid",
      [(nfs.OP_CREATE_SESSION, u64(0x123456789) + u32(1) + u32(0)
        + (u32(0) + u32(1 << 20) * 2 + u32(64 << 10) + u32(16) + u32(8) + u32(0)) * 2
        + u32(0x40000000) + u32(1) + nfs.cb_sec_none())], sequence=False)


def compare(base: list, other: list) -> list[str]:
    """The differences between two transcripts, as readable lines (empty: equal)."""
    out = []
    for i, (a, b) in enumerate(zip(base, other)):
        if a != b:
            out.append(f"step {i} {a[0]!r}:\n    baseline {a[1:]}\n    this     {b[1:]}")
    if len(base) != len(other):
        out.append(f"{len(base)} steps in the baseline, {len(other)} here")
    return out
