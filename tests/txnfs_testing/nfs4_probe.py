"""A minimal NFSv4.0/4.1 client for probing the server side of the COMPOUND bridge.

It sends hand-built COMPOUNDs with any tag over one TCP connection (ONC RPC, AUTH_SYS)
and decodes the results of the few operations the tests use. It is a probe, not a
client: no retries, no state recovery, no callbacks. (txnfs-nfs, under
src/compound_bridge/client, is the real client.)

    c = Client(port)                       # NFSv4.1: EXCHANGE_ID, CREATE_SESSION, ...
    c = Client(port, minorversion=0)       # NFSv4.0: no set-up; c.setclientid() if needed
    r = c.compound([op.putrootfh(), op.open_create("a"), op.write_current(b"x"),
                    op.close_current(), op.remove("missing")], tag="txn:demo")
    r.status, r.results[i].op, r.results[i].status, r.results[i].value

c.compound() prepends SEQUENCE for v4.1 (results[0] is then SEQUENCE's) and advances
the slot's sequence id whenever SEQUENCE succeeded.
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass, field

# --------------------------------------------------------------------------
# constants (RFC 7530, RFC 8881)
# --------------------------------------------------------------------------

NFS4_OK = 0
NFS4ERR_NOENT = 2
NFS4ERR_EXIST = 17
NFS4ERR_STALE = 70
NFS4ERR_SERVERFAULT = 10006
NFS4ERR_DELAY = 10008
NFS4ERR_RESOURCE = 10018
NFS4ERR_BAD_STATEID = 10025
NFS4ERR_TOO_MANY_OPS = 10070

OP_ACCESS, OP_CLOSE, OP_COMMIT, OP_CREATE = 3, 4, 5, 6
OP_GETATTR, OP_GETFH, OP_LOOKUP = 9, 10, 15
OP_OPEN, OP_OPEN_CONFIRM, OP_PUTFH, OP_PUTROOTFH, OP_READ, OP_READDIR = 18, 20, 22, 24, 25, 26
OP_REMOVE, OP_RENAME, OP_RESTOREFH, OP_SAVEFH, OP_SETATTR, OP_WRITE = 28, 29, 31, 32, 34, 38
OP_SETCLIENTID, OP_SETCLIENTID_CONFIRM = 35, 36
OP_EXCHANGE_ID, OP_CREATE_SESSION, OP_DESTROY_SESSION = 42, 43, 44
OP_SEQUENCE, OP_TEST_STATEID, OP_DESTROY_CLIENTID, OP_RECLAIM_COMPLETE = 53, 55, 57, 58

NF4REG, NF4DIR = 1, 2
OPEN4_RESULT_CONFIRM = 2
FATTR4_TYPE, FATTR4_CHANGE, FATTR4_SIZE, FATTR4_FILEID, FATTR4_MODE = 1, 3, 4, 20, 33
FILE_SYNC4 = 2
OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_WANT_NO_DELEG = 3, 0x0400
OPEN4_NOCREATE, OPEN4_CREATE = 0, 1
UNCHECKED4, GUARDED4 = 0, 1
CURRENT_STATEID = struct.pack(">I", 1) + bytes(12)   # RFC 8881 16.2.3.1.2
ANONYMOUS_STATEID = bytes(16)

NFS_PROGRAM, NFS_V4, NFSPROC4_COMPOUND = 100003, 4, 1
AUTH_NONE, AUTH_SYS, RPCSEC_GSS = 0, 1, 6


# --------------------------------------------------------------------------
# XDR
# --------------------------------------------------------------------------

def u32(v):
    return struct.pack(">I", v)


def u64(v):
    return struct.pack(">Q", v)


def opaque(b: bytes):
    return u32(len(b)) + b + bytes(-len(b) % 4)


def string(s):
    return opaque(s.encode() if isinstance(s, str) else s)


def bitmap(*attrs):
    words = [0] * (max(attrs) // 32 + 1 if attrs else 0)
    for a in attrs:
        words[a // 32] |= 1 << (a % 32)
    return u32(len(words)) + b"".join(u32(w) for w in words)


class Unpacker:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, n):
        if self.pos + n > len(self.data):
            raise ValueError(f"short reply: need {n} bytes at {self.pos} of {len(self.data)}")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def u32(self):
        return struct.unpack(">I", self.take(4))[0]

    def u64(self):
        return struct.unpack(">Q", self.take(8))[0]

    def opaque(self):
        n = self.u32()
        b = self.take(n)
        self.take(-n % 4)
        return b

    def bitmap(self):
        return [self.u32() for _ in range(self.u32())]

    def fattr(self) -> dict:
        """fattr4 -> {attr: value} for the attributes attrs_of() can decode."""
        words = self.bitmap()
        return attrs_of(words, Unpacker(self.opaque()))


_ATTR_DECODERS = {FATTR4_TYPE: Unpacker.u32, FATTR4_CHANGE: Unpacker.u64,
                  FATTR4_SIZE: Unpacker.u64, FATTR4_FILEID: Unpacker.u64,
                  FATTR4_MODE: Unpacker.u32}


def attrs_of(words, u: Unpacker) -> dict:
    out = {}
    for a in sorted(a for w, word in enumerate(words) for a in range(32 * w, 32 * w + 32)
                    if word >> (a % 32) & 1):
        if a not in _ATTR_DECODERS:
            raise ValueError(f"attribute {a} is not decodable by this probe")
        out[a] = _ATTR_DECODERS[a](u)
    return out


# --------------------------------------------------------------------------
# operations: each is (opnum, encoded arguments)
# --------------------------------------------------------------------------

def _share_access(minor):
    return OPEN4_SHARE_ACCESS_BOTH | (OPEN4_SHARE_ACCESS_WANT_NO_DELEG if minor else 0)


class op:
    @staticmethod
    def putrootfh():
        return OP_PUTROOTFH, b""

    @staticmethod
    def putfh(fh: bytes):
        return OP_PUTFH, opaque(fh)

    @staticmethod
    def getfh():
        return OP_GETFH, b""

    @staticmethod
    def savefh():
        return OP_SAVEFH, b""

    @staticmethod
    def restorefh():
        return OP_RESTOREFH, b""

    @staticmethod
    def lookup(name):
        return OP_LOOKUP, string(name)

    @staticmethod
    def getattr(*attrs):
        return OP_GETATTR, bitmap(*(attrs or (FATTR4_TYPE, FATTR4_SIZE, FATTR4_FILEID)))

    @staticmethod
    def remove(name):
        return OP_REMOVE, string(name)

    @staticmethod
    def rename(old, new):
        return OP_RENAME, string(old) + string(new)

    @staticmethod
    def mkdir(name, mode=0o755):
        return OP_CREATE, u32(NF4DIR) + string(name) + bitmap(FATTR4_MODE) + opaque(u32(mode))

    @staticmethod
    def open_create(name, clientid=0, owner=b"probe", mode=0o644, guarded=False, seqid=0,
                    minor=1):
        """OPEN with create (UNCHECKED4, or GUARDED4), read+write, no delegation. NFSv4.0
        (minor=0): the clientid from SETCLIENTID, the open-owner's seqid, and no
        delegation wants (an NFSv4.1 flag)."""
        how = u32(GUARDED4 if guarded else UNCHECKED4) + bitmap(FATTR4_MODE) + opaque(u32(mode))
        return OP_OPEN, (u32(seqid) + u32(_share_access(minor))
                         + u32(0) + u64(clientid) + opaque(owner)
                         + u32(OPEN4_CREATE) + how + u32(0) + string(name))

    @staticmethod
    def open_existing(name, clientid=0, owner=b"probe", seqid=0, minor=1):
        return OP_OPEN, (u32(seqid) + u32(_share_access(minor))
                         + u32(0) + u64(clientid) + opaque(owner)
                         + u32(OPEN4_NOCREATE) + u32(0) + string(name))

    @staticmethod
    def write(data: bytes, offset=0, stateid=CURRENT_STATEID):
        return OP_WRITE, stateid + u64(offset) + u32(FILE_SYNC4) + opaque(data)

    @staticmethod
    def read(count, offset=0, stateid=ANONYMOUS_STATEID):
        return OP_READ, stateid + u64(offset) + u32(count)

    @staticmethod
    def close(stateid=CURRENT_STATEID, seqid=0):
        return OP_CLOSE, u32(seqid) + stateid

    @staticmethod
    def open_confirm(stateid, seqid):
        return OP_OPEN_CONFIRM, stateid + u32(seqid)

    @staticmethod
    def commit(offset=0, count=0):
        return OP_COMMIT, u64(offset) + u32(count)

    @staticmethod
    def setattr_size(size, stateid=CURRENT_STATEID):
        return OP_SETATTR, stateid + bitmap(FATTR4_SIZE) + opaque(u64(size))

    @staticmethod
    def test_stateid(*stateids):
        return OP_TEST_STATEID, u32(len(stateids)) + b"".join(stateids)

    @staticmethod
    def readdir(maxcount=65536, cookie=0, verifier=bytes(8)):
        """Decoded as a Listing: the names, with .cookies, .eof and .verifier."""
        return (OP_READDIR, u64(cookie) + verifier + u32(maxcount) + u32(maxcount)
                + bitmap(FATTR4_FILEID))


# --------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------

@dataclass
class Result:
    op: int
    status: int
    value: object = None


@dataclass
class Reply:
    status: int
    tag: bytes
    results: list[Result] = field(default_factory=list)

    def statuses(self):
        return [(r.op, r.status) for r in self.results]


def _cinfo(u):
    return (u.u32(), u.u64(), u.u64())


class Listing(list):
    """A READDIR's names (a list), with each one's cookie, eof and the cookie verifier."""
    cookies: list
    eof: bool = False
    verifier: bytes = bytes(8)


class OpenStateid(bytes):
    """The stateid an OPEN returned (bytes), with the OPEN's rflags."""
    rflags = 0


def _decode_ok(opnum, u: Unpacker):
    """The value of a successful result of opnum (after its status)."""
    if opnum in (OP_PUTROOTFH, OP_PUTFH, OP_SAVEFH, OP_RESTOREFH, OP_LOOKUP,
                 OP_RECLAIM_COMPLETE, OP_DESTROY_SESSION, OP_DESTROY_CLIENTID):
        return None
    if opnum == OP_GETFH:
        return u.opaque()
    if opnum == OP_GETATTR:
        return u.fattr()
    if opnum == OP_SEQUENCE:
        return (u.take(16), u.u32(), u.u32(), u.u32(), u.u32(), u.u32())
    if opnum in (OP_OPEN_CONFIRM,):
        return u.take(16)
    if opnum == OP_SETATTR:
        return u.bitmap()
    if opnum == OP_COMMIT:
        return u.take(8)
    if opnum == OP_TEST_STATEID:
        return [u.u32() for _ in range(u.u32())]
    if opnum == OP_SETCLIENTID:
        return (u.u64(), u.take(8))
    if opnum == OP_SETCLIENTID_CONFIRM:
        return None
    if opnum == OP_OPEN:
        stateid, cinfo, rflags, attrset = u.take(16), _cinfo(u), u.u32(), u.bitmap()
        deleg = u.u32()
        if deleg == 3:   # OPEN_DELEGATE_NONE_EXT
            if u.u32() in (1, 2):
                u.u32()
        elif deleg != 0:
            raise ValueError(f"OPEN granted delegation type {deleg}; the probe asks for none")
        stateid = OpenStateid(stateid)
        stateid.rflags = rflags
        return stateid
    if opnum == OP_WRITE:
        return (u.u32(), u.u32(), u.take(8))
    if opnum == OP_CLOSE:
        return u.take(16)
    if opnum == OP_READ:
        return (bool(u.u32()), u.opaque())
    if opnum in (OP_REMOVE,):
        return _cinfo(u)
    if opnum == OP_RENAME:
        return (_cinfo(u), _cinfo(u))
    if opnum == OP_CREATE:
        return (_cinfo(u), u.bitmap())
    if opnum == OP_READDIR:
        names = Listing()
        names.verifier, names.cookies = u.take(8), []
        while u.u32():
            names.cookies.append(u.u64())
            names.append(u.opaque().decode())
            u.fattr()
        names.eof = bool(u.u32())
        return names
    if opnum == OP_EXCHANGE_ID:
        clientid, seq, flags, how = u.u64(), u.u32(), u.u32(), u.u32()
        assert how == 0, f"EXCHANGE_ID state protection {how}"
        u.u64(), u.opaque(), u.opaque()
        for _ in range(u.u32()):
            u.opaque(), u.opaque(), u.u64(), u.u32()
        return (clientid, seq)
    if opnum == OP_CREATE_SESSION:
        sessionid, seq, flags = u.take(16), u.u32(), u.u32()
        for _ in range(2):
            [u.u32() for _ in range(6)]
            [u.u32() for _ in range(u.u32())]
        return sessionid
    raise ValueError(f"the probe cannot decode a successful result of op {opnum}")


def decode_compound_reply(u: Unpacker) -> Reply:
    reply = Reply(u.u32(), u.opaque())
    for _ in range(u.u32()):
        opnum, status = u.u32(), u.u32()
        value = None
        if status == NFS4_OK:
            value = _decode_ok(opnum, u)
        elif opnum == OP_SETATTR:
            u.bitmap()
        reply.results.append(Result(opnum, status, value))
    return reply


# --------------------------------------------------------------------------
# callback security parameters (callback_sec_parms4, RFC 8881 18.36)
# --------------------------------------------------------------------------

CREATE_SESSION4_FLAG_CONN_BACK_CHAN = 0x2
RPC_GSS_SVC_NONE = 1


def cb_sec_none():
    return u32(AUTH_NONE)


def cb_sec_sys(uid=0, gid=0, machine="txnfs-probe"):
    return u32(AUTH_SYS) + u32(0) + string(machine) + u32(uid) + u32(gid) + u32(0)


def cb_sec_gss(service=RPC_GSS_SVC_NONE, handle_from_server=b"srv", handle_from_client=b"cli"):
    return u32(RPCSEC_GSS) + u32(service) + opaque(handle_from_server) + opaque(handle_from_client)


# --------------------------------------------------------------------------
# the connection
# --------------------------------------------------------------------------

class RpcError(Exception):
    pass


class Client:
    """One TCP connection to 127.0.0.1:port. minorversion 1 sets up a session (and
    RECLAIM_COMPLETE) at once; 0 sends plain COMPOUNDs."""

    def __init__(self, port, minorversion=1, uid=0, gid=0, timeout=60, cb_sec_parms=None,
                 session_flags=0, max_ops=64):
        """CREATE_SESSION (v4.1): cb_sec_parms, the callback security parameters, a list
        of cb_sec_none() / cb_sec_sys() / cb_sec_gss() (default: AUTH_NONE);
        session_flags, its csa_flags (e.g. CREATE_SESSION4_FLAG_CONN_BACK_CHAN); max_ops,
        the fore channel's ca_maxoperations."""
        self.minor = minorversion
        self.max_ops = max_ops
        self.cb_sec_parms = cb_sec_parms if cb_sec_parms is not None else [cb_sec_none()]
        self.session_flags = session_flags
        self.uid, self.gid = uid, gid
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.xid = int.from_bytes(os.urandom(4), "big")
        self.clientid = 0
        self.sessionid = None
        self.seq = 1
        if minorversion == 1:
            self._setup_session()

    def close(self):
        if self.sessionid is not None:
            try:
                self.compound([(OP_DESTROY_SESSION, self.sessionid)], sequence=False)
                self.compound([(OP_DESTROY_CLIENTID, u64(self.clientid))], sequence=False)
            except (OSError, RpcError):
                pass
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- RPC ----------------------------------------------------------------------

    def _cred(self):
        body = u32(0) + string("txnfs-probe") + u32(self.uid) + u32(self.gid) + u32(0)
        return u32(AUTH_SYS) + opaque(body)

    def call_raw(self, body: bytes, xid=None) -> bytes:
        """Send one NFSv4 COMPOUND call with this body (args after the procedure
        header) under XID (default: a new one); return the COMPOUND4res bytes."""
        if xid is None:
            self.xid = (self.xid + 1) & 0xFFFFFFFF
            xid = self.xid
        msg = (u32(xid) + u32(0) + u32(2) + u32(NFS_PROGRAM) + u32(NFS_V4)
               + u32(NFSPROC4_COMPOUND) + self._cred() + u32(AUTH_NONE) + opaque(b"") + body)
        self.sock.sendall(u32(0x80000000 | len(msg)) + msg)
        while True:
            reply = self._read_record()
            u = Unpacker(reply)
            if u.u32() == xid:
                break
        if u.u32() != 1:
            raise RpcError("not a reply")
        if u.u32() != 0:
            raise RpcError("RPC call denied")
        u.u32(), u.opaque()   # verifier
        accept = u.u32()
        if accept != 0:
            raise RpcError(f"RPC accept_stat {accept}")
        return reply[u.pos:]

    def _read_record(self) -> bytes:
        out = b""
        while True:
            hdr = self._recv(4)
            n = struct.unpack(">I", hdr)[0]
            out += self._recv(n & 0x7FFFFFFF)
            if n & 0x80000000:
                return out

    def _recv(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise RpcError("connection closed by the server")
            buf += chunk
        return buf

    # -- COMPOUND -------------------------------------------------------------------

    def setclientid(self):
        """NFSv4.0: SETCLIENTID and SETCLIENTID_CONFIRM (no callback); sets clientid."""
        assert self.minor == 0
        owner = b"txnfs-probe-" + os.urandom(8).hex().encode()
        cb = u32(0x40000000) + string("tcp") + string("127.0.0.1.0.0") + u32(1)
        r = self.compound([(OP_SETCLIENTID, os.urandom(8) + opaque(owner) + cb)])
        assert r.status == NFS4_OK, f"SETCLIENTID: {r}"
        clientid, verifier = r.results[0].value
        r = self.compound([(OP_SETCLIENTID_CONFIRM, u64(clientid) + verifier)])
        assert r.status == NFS4_OK, f"SETCLIENTID_CONFIRM: {r}"
        self.clientid = clientid

    def encode(self, ops, tag="", sequence=True, cachethis=False) -> bytes:
        ops = list(ops)
        if self.minor == 1 and sequence:
            ops.insert(0, (OP_SEQUENCE, self.sessionid + u32(self.seq) + u32(0) + u32(0)
                           + u32(1 if cachethis else 0)))
        return (string(tag) + u32(self.minor) + u32(len(ops))
                + b"".join(u32(n) + args for n, args in ops))

    def compound(self, ops, tag="", sequence=True, cachethis=False, xid=None) -> Reply:
        body = self.encode(ops, tag, sequence, cachethis)
        reply = decode_compound_reply(Unpacker(self.call_raw(body, xid)))
        if (self.minor == 1 and sequence and reply.results
                and reply.results[0].op == OP_SEQUENCE and reply.results[0].status == NFS4_OK):
            self.seq += 1
        return reply

    def _setup_session(self):
        owner = b"txnfs-probe-" + os.urandom(8).hex().encode()
        r = self.compound([(OP_EXCHANGE_ID, os.urandom(8) + opaque(owner) + u32(0x00010000)
                            + u32(0) + u32(0))], sequence=False)
        assert r.status == NFS4_OK, f"EXCHANGE_ID: {r}"
        self.clientid, seq = r.results[0].value
        def attrs(max_ops):
            return (u32(0) + u32(2 << 20) + u32(2 << 20) + u32(64 << 10) + u32(max_ops) + u32(8)
                    + u32(0))
        r = self.compound([(OP_CREATE_SESSION, u64(self.clientid) + u32(seq)
                            + u32(self.session_flags) + attrs(self.max_ops) + attrs(64)
                            + u32(0x40000000)
                            + u32(len(self.cb_sec_parms)) + b"".join(self.cb_sec_parms))],
                          sequence=False)
        assert r.status == NFS4_OK, f"CREATE_SESSION: {r}"
        self.sessionid = r.results[0].value
        r = self.compound([(OP_RECLAIM_COMPLETE, u32(0))])
        assert r.status == NFS4_OK, f"RECLAIM_COMPLETE: {r}"
