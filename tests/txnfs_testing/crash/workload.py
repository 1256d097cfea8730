"""The crash harness's workload: THREADS threads, each in a loop of transactions bound to
its thread through libtxnfs, each a seeded mix of operations on the thread's own objects
(gen_op) applied to the mount (apply_fs) and to the thread's working model
(apply_model), then committed (durably or lazily) or aborted. Every acknowledged commit
goes to the journal with its intended effect; lock conflicts (RETRYABLE) abort the
transaction and go on.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import threading
import time
from pathlib import Path

from txnfs_testing import txnfs_lib as tl
from txnfs_testing.crash.model import Obj, Part


MAX_FILES = 40          # per thread: beyond this the workload prefers removals
MAX_FILE = 256 << 10    # file sizes stay below this
RETRYABLE = {errno.EDEADLK, errno.ETIMEDOUT}   # lock conflicts: abort, go on
# What a request meets when the daemon dies under it. Over FUSE's io_uring the ring's
# teardown ends the requests it still held with ECANCELED, or EINTR.
EXPECTED_CRASH_ERRNOS = {errno.ENOTCONN, errno.EIO, errno.ECONNABORTED, errno.ENODEV,
                         errno.ESHUTDOWN, errno.EROFS, errno.ECANCELED, errno.EINTR}


class Workload:
    """THREADS threads of transactions; see the module doc."""

    def __init__(self, mnt: Path, parts: list[Part], seed: int, journal, cycle: int,
                 abort_rate=0.25, lazy_rate=0.0):
        self.mnt = mnt
        self.parts = parts                  # committed state per thread (C), updated on acks
        self.base = list(parts)             # the state per thread when the workload began
        self.lazy_rate = lazy_rate          # share of commits that are lazy
        # per thread, every acknowledged commit: {"part", "txid", "lazy", "start", "ack"};
        # start/ack: the global event counter when its commit call began / returned 0
        self.history: list[list[dict]] = [[] for _ in parts]
        self.events = 0
        self.lazy_commits = 0
        self.seed = seed
        self.journal = journal
        self.cycle = cycle
        self.abort_rate = abort_rate
        self.stop = threading.Event()       # finish the current transaction, then stop
        self.crashing = threading.Event()   # a crash was triggered: errors are expected
        self.inflight: list[dict | None] = [None] * len(parts)
        self.errors: list[str] = []         # unexpected failures while nothing crashed
        self.commits = self.aborts = self.retryable = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(k,), daemon=True,
                                         name=f"worker{k}") for k in range(len(parts))]
        self.started = threading.Event()
        self.n_started = 0

    def start(self):
        for t in self.threads:
            t.start()

    def join(self, timeout=60.0) -> list[int]:
        """Joins the threads; returns the indexes of threads still running (hung)."""
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return [k for k, t in enumerate(self.threads) if t.is_alive()]

    # -- one thread -------------------------------------------------------
    def _run(self, k: int):
        rng = random.Random(f"{self.seed}/{self.cycle}/{k}")
        counter = [rng.randrange(1 << 20)]
        while not self.stop.is_set():
            committed = self.parts[k]
            work = committed.copy()
            info = {"phase": "begin", "txid": None, "work": work, "ops": []}
            self.inflight[k] = info
            try:
                rc, txid = tl.txn_begin_rc(self.mnt)
                if rc != 0:
                    raise OSError(-rc, f"txnfs_begin: {os.strerror(-rc)}")
                info["txid"] = txid
                info["phase"] = "active"
                # half the transactions work through their view (MNT/.txnfs/ID), half
                # through the mount, bound to the thread
                root = Path(tl.view_path(self.mnt, txid)) if rng.random() < 0.5 else self.mnt
                info["view"] = root != self.mnt
                nops = rng.choice((1, 2, 3, 5, 8, 12, 20)) if rng.random() < 0.9 else rng.randint(30, 80)
                for _ in range(nops):
                    op = gen_op(rng, work, k, counter)
                    if op is None:
                        continue
                    info["current"] = op_summary(op)
                    apply_fs(root, op)
                    apply_model(work, op)
                    info["ops"].append(op_summary(op))
                if rng.random() < self.abort_rate:
                    info["phase"] = "aborting"
                    rc = tl.txn_abort(self.mnt, txid)
                    if rc != 0:
                        raise OSError(-rc, f"txnfs_abort: {os.strerror(-rc)}")
                    with self.lock:
                        self.aborts += 1
                        self.journal.write(json.dumps(
                            {"cycle": self.cycle, "thread": k, "txid": txid, "outcome": "aborted",
                             "view": info["view"], "ops": info["ops"]}) + "\n")
                else:
                    info["phase"] = "committing"
                    lazy = rng.random() < self.lazy_rate
                    info["lazy"] = lazy
                    with self.lock:
                        self.events += 1
                        info["start"] = self.events
                    rc = (tl.txn_commit_lazy if lazy else tl.txn_commit)(self.mnt, txid)
                    if rc != 0:
                        raise OSError(-rc, f"txnfs_commit: {os.strerror(-rc)}")
                    self.parts[k] = work           # acknowledged: now the committed state
                    with self.lock:
                        self.events += 1
                        self.history[k].append({"part": work, "txid": txid, "lazy": lazy,
                                                "start": info["start"], "ack": self.events})
                        self.lazy_commits += lazy
                        self.commits += 1
                        self.journal.write(json.dumps(
                            {"cycle": self.cycle, "thread": k, "txid": txid,
                             "outcome": "committed lazily" if lazy else "committed",
                             "view": info["view"], "state": work.digest(), "ops": info["ops"]}) + "\n")
                self.inflight[k] = None
            except OSError as e:
                info["error"] = f"{errno.errorcode.get(e.errno, e.errno)}: {e}"
                if (e.errno in RETRYABLE and info["phase"] in ("active", "committing")
                        and not self.crashing.is_set()):
                    # a lock conflict (see docs/isolation.md): the transaction can only abort
                    info["phase"] = "aborting"
                    rc = tl.txn_abort(self.mnt, info["txid"])
                    with self.lock:
                        self.retryable += 1
                    if rc == 0:
                        self.inflight[k] = None
                        continue
                    info["error"] += f"; then txnfs_abort: {os.strerror(-rc)}"
                    e = OSError(-rc, os.strerror(-rc))
                if not self.crashing.is_set() and e.errno not in EXPECTED_CRASH_ERRNOS:
                    with self.lock:
                        self.journal.write(json.dumps(
                            {"cycle": self.cycle, "thread": k, "txid": info["txid"],
                             "outcome": "error: " + info["error"], "ops": info["ops"],
                             "failed": info.get("current")}) + "\n")
                        self.errors.append(f"thread {k} txn {info['txid']} ({info['phase']}, "
                                           f"after {len(info['ops'])} ops, failing "
                                           f"{info.get('current')}): {info['error']}")
                    # not a crash: end the transaction and go on (the error is reported)
                    if info["phase"] == "active" and info["txid"] is not None:
                        info["phase"] = "aborting"
                        if tl.txn_abort(self.mnt, info["txid"]) == 0:
                            self.inflight[k] = None
                            continue
                return
            except Exception as e:  # noqa: BLE001 - a harness bug: report, do not hang
                info["error"] = repr(e)
                with self.lock:
                    self.errors.append(f"thread {k}: harness error {e!r}")
                return


def _fresh(counter, prefix):
    counter[0] += 1
    return f"{prefix}{counter[0]}"


def _dirs(work: Part, k: int) -> list[str]:
    return [p for p, oid in work.names.items() if work.objs[oid].kind == "d"] + ["shared"]


# Transactions that stat and change one directory conflict on it (S + IX = X, see
# docs/isolation.md), and may then stall in the kernel until the lock wait times out:
# keep that short, and treat EDEADLK/ETIMEDOUT as "abort and go on".
LOCK_TIMEOUT_MS = 250
SHARED_RATE = 0.05   # how often a new name goes into the directory all threads share


def _new_path(rng, work: Part, k: int, counter, letter: str) -> str:
    d = "shared" if rng.random() < SHARED_RATE else rng.choice(_dirs(work, k)[:-1])
    if d == "shared":
        return f"shared/k{k}_{_fresh(counter, letter)}"
    return f"{d}/{_fresh(counter, letter)}"


def gen_op(rng: random.Random, work: Part, k: int, counter) -> tuple | None:
    """A random operation that is valid on `work` (thread k's working state)."""
    root = f"w{k}"
    files = [p for p, oid in work.names.items() if work.objs[oid].kind == "f"]
    links = [p for p, oid in work.names.items() if work.objs[oid].kind == "l"]
    dirs = [p for p, oid in work.names.items() if work.objs[oid].kind == "d" and p != root]
    nobj = len(work.names)
    r = rng.random()
    full = nobj >= MAX_FILES
    if files and r < 0.30:
        f = rng.choice(files)
        size = len(work.obj(f).data)
        kind = rng.random()
        if kind < 0.6:   # a write at a random offset (maybe past EOF: a hole)
            off = rng.randrange(0, min(size + 8192, MAX_FILE))
            n = rng.choice((1, 7, 100, 512, 4096, 5000, 16384, 65536))
            n = max(1, min(n, MAX_FILE - off))
            return ("write", f, off, rng.randbytes(n))
        if kind < 0.8:   # an extension (append)
            n = max(1, min(rng.choice((10, 4096, 20000)), MAX_FILE - size))
            return ("write", f, min(size, MAX_FILE - n), rng.randbytes(n))
        if kind < 0.93:
            return ("truncate", f, rng.choice((0, size // 2, size + 1000, rng.randrange(0, MAX_FILE))))
        if size:
            off = rng.randrange(0, size)
            return ("punch", f, off, rng.randrange(1, size - off + 1))
        return None
    if r < 0.45 and not full:
        kind = rng.random()
        if kind < 0.6:
            return ("create", _new_path(rng, work, k, counter, "f"), rng.choice((0o644, 0o600, 0o755)),
                    rng.randbytes(rng.choice((0, 10, 3000, 4096, 70000))))
        if kind < 0.85:
            return ("mkdir", _new_path(rng, work, k, counter, "d"), rng.choice((0o755, 0o700)))
        return ("symlink", _new_path(rng, work, k, counter, "s"), f"target-{rng.randrange(1000)}")
    if r < 0.55 and (files or links):
        return ("unlink", rng.choice(files + links))
    if r < 0.60 and dirs:
        empty = [d for d in dirs if not any(p.startswith(d + "/") for p in work.names)]
        if empty:
            return ("rmdir", rng.choice(empty))
    if r < 0.72 and (files or links or dirs):
        src = rng.choice(files + links + dirs)
        kind = work.obj(src).kind
        if kind == "f" and len(files) > 1 and rng.random() < 0.3:
            dst = rng.choice([f for f in files if f != src])
            if work.names[dst] != work.names[src]:
                return ("rename", src, dst)           # over an existing file
        dst = _new_path(rng, work, k, counter, "r")
        if kind == "d" and (dst + "/").startswith(src + "/"):
            return None
        return ("rename", src, dst)
    if r < 0.77 and files and not full:
        return ("link", rng.choice(files), _new_path(rng, work, k, counter, "h"))
    targets = files + dirs
    if not targets:
        return None
    t = rng.choice(targets)
    kind = rng.random()
    if kind < 0.3:
        o = work.obj(t)
        mode = (0o700 | rng.randrange(0o100)) if o.kind == "d" else rng.randrange(0o1000)
        return ("chmod", t, mode)
    if kind < 0.45:
        return ("chown", t, rng.choice((0, 1000, 65534)), rng.choice((0, 100, 65534)))
    o = work.obj(t)
    if o.xattrs and rng.random() < 0.35:
        return ("removexattr", t, rng.choice(sorted(o.xattrs)))
    return ("setxattr", t, f"user.x{rng.randrange(4)}", rng.randbytes(rng.choice((1, 10, 200))))


def apply_fs(mnt: Path, op: tuple):
    kind, p = op[0], mnt / op[1]
    if kind == "write":
        fd = os.open(p, os.O_WRONLY)
        try:
            data, off = op[3], op[2]
            while data:
                n = os.pwrite(fd, data, off)
                data, off = data[n:], off + n
        finally:
            os.close(fd)
    elif kind == "truncate":
        os.truncate(p, op[2])
    elif kind == "punch":
        fd = os.open(p, os.O_WRONLY)
        try:
            tl.fallocate(fd, tl.FALLOC_FL_PUNCH_HOLE | tl.FALLOC_FL_KEEP_SIZE, op[2], op[3])
        finally:
            os.close(fd)
    elif kind == "create":
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, op[2])
        try:
            data = op[3]
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
    elif kind == "mkdir":
        os.mkdir(p, op[2])
    elif kind == "symlink":
        os.symlink(op[2], p)
    elif kind == "unlink":
        os.unlink(p)
    elif kind == "rmdir":
        os.rmdir(p)
    elif kind == "rename":
        os.rename(p, mnt / op[2])
    elif kind == "link":
        os.link(p, mnt / op[2])
    elif kind == "chmod":
        os.chmod(p, op[2])
    elif kind == "chown":
        os.chown(p, op[2], op[3])
    elif kind == "setxattr":
        os.setxattr(p, op[2], op[3])
    elif kind == "removexattr":
        os.removexattr(p, op[2])
    else:
        raise ValueError(kind)


def apply_model(w: Part, op: tuple):
    kind, path = op[0], op[1]
    if kind == "write":
        o = w.obj(path)
        off, data = op[2], op[3]
        buf = o.data
        if off > len(buf):
            buf = buf + bytes(off - len(buf))
        o.data = buf[:off] + data + buf[off + len(data):]
    elif kind == "truncate":
        o = w.obj(path)
        n = op[2]
        o.data = o.data[:n] + bytes(max(0, n - len(o.data)))
    elif kind == "punch":
        o = w.obj(path)
        off, n = op[2], op[3]
        end = min(off + n, len(o.data))
        o.data = o.data[:off] + bytes(end - off) + o.data[end:]
    elif kind == "create":
        w.add(path, Obj("f", op[2], op[3]))
    elif kind == "mkdir":
        w.add(path, Obj("d", op[2]))
    elif kind == "symlink":
        w.add(path, Obj("l", 0o777, target=op[2]))
    elif kind in ("unlink", "rmdir"):
        w.drop_name(path)
    elif kind == "rename":
        dst = op[2]
        if dst in w.names:
            w.drop_name(dst)
        moved = {p: oid for p, oid in w.names.items() if p == path or p.startswith(path + "/")}
        for p in moved:
            del w.names[p]
        for p, oid in moved.items():
            w.names[dst + p[len(path):]] = oid
    elif kind == "link":
        w.names[op[2]] = w.names[path]
    elif kind == "chmod":
        w.obj(path).mode = op[2]
    elif kind == "chown":
        o = w.obj(path)
        o.uid, o.gid = op[2], op[3]
    elif kind == "setxattr":
        w.obj(path).xattrs[op[2]] = op[3]
    elif kind == "removexattr":
        del w.obj(path).xattrs[op[2]]


def op_summary(op: tuple) -> list:
    """A journal-friendly form of an operation (data as length + hash)."""
    out = []
    for v in op:
        if isinstance(v, bytes):
            out.append(f"<{len(v)} bytes {hashlib.sha256(v).hexdigest()[:12]}>")
        else:
            out.append(v)
    return out
