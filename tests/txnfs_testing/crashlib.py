"""The txnfs crash-test harness: crash a store under a concurrent transactional workload,
recover it, and check that every transaction is all-or-nothing (the contract:
docs/crash-model.md, "The crash-test harness").

One run = one XFS image, one store, and N *cycles*. Each cycle:

  1. mounts the store (`txnfs mount -f`, with TXNFS_CRASH_AT for an injected point);
  2. runs the workload: THREADS threads, each in a loop of transactions bound to its
     thread through libtxnfs (ctypes), each transaction a random mix of operations --
     writes at random offsets, extensions, truncations, hole punching, creates, mkdir,
     symlinks, unlink, rmdir, renames (also over existing files and of directories, also
     into and out of a directory all threads share), hard links, chmod, chown, xattrs --
     that then commits or aborts. Every acknowledged commit is appended to a journal
     outside the store, with its full intended effect;
  3. crashes it, one of three kinds:
       kill    `kill -9` of the daemon at a random moment;
       power   `xfs_io -x -c shutdown` on the backing XFS (no -f: the unflushed log is
               lost), kill -9 of the daemon, unmount and mount the image again;
       inject  a crash point of the daemon (`txnfs crash-points`): TXNFS_CRASH_AT=NAME:N
               makes the N-th arrival exit at once. Points of recovery itself
               ("recover.*") are armed on the mount that recovers a kill -9;
  4. mounts again (recovery runs), and checks:
       - every acknowledged commit is fully present;
       - a transaction without an acknowledgement is fully present or fully absent:
         present exactly when its commit record was durable (read from a copy of the
         database before recovery), absent if it never asked to commit;
       - no undo log is left; the store works (a probe transaction commits);
       - after unmounting, `txnfs fsck` is clean.

The model is exact because the threads never share an object: thread k owns the
directory w<k>/ and the names k<k>_* in shared/. For each thread the model holds its
committed state C (what the tree must show) and, while a transaction runs, its
working state W (what the tree shows once that transaction commits). Files are
described by type, mode, owner, size, SHA-256 of the content, user.* xattrs, symlink
targets, and which names are hard links of one object.

A failure prints the seed, the cycle, the crash kind and point; `--seed S --points N`
replays the same sequence of cycles (thread interleavings are the kernel's: with
`--threads 1` a replay is close to exact).
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import itertools
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import stat
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
from txnfs_testing import txnfs_lib as tl

KINDS = ("kill", "power", "inject")
MAX_FILES = 40          # per thread: beyond this the workload prefers removals
MAX_FILE = 256 << 10    # file sizes stay below this
RETRYABLE = {errno.EDEADLK, errno.ETIMEDOUT}   # lock conflicts: abort, go on
EXPECTED_CRASH_ERRNOS = {errno.ENOTCONN, errno.EIO, errno.ECONNABORTED, errno.ENODEV,
                         errno.ESHUTDOWN, errno.EROFS}


def crash_points() -> list[tuple[str, str, str]]:
    """(name, where, what it tests) of every crash-injection point, from the binary."""
    out = tl.txnfs("crash-points", check=True).stdout
    return [tuple(line.split("\t", 2)) for line in out.splitlines() if line.strip()]


def points_markdown() -> str:
    """The crash points as the markdown table of docs/crash-model.md (generated from the
    binary, never written by hand: `tests/crash/run --list-points --markdown`)."""
    rows = ["| point | where | a crash there tests |", "| --- | --- | --- |"]
    for name, where, tests in crash_points():
        rows.append(f"| `{name}` | {where} | {tests} |")
    return "\n".join(rows)


# --------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------

class Obj:
    __slots__ = ("kind", "data", "mode", "uid", "gid", "xattrs", "target")

    def __init__(self, kind, mode, data=b"", target=None, uid=0, gid=0, xattrs=None):
        self.kind = kind          # "f", "d", "l"
        self.data = data          # bytes (files)
        self.mode = mode          # permission bits
        self.uid = uid
        self.gid = gid
        self.xattrs = dict(xattrs or {})
        self.target = target      # symlinks

    def copy(self):
        return Obj(self.kind, self.mode, self.data, self.target, self.uid, self.gid, self.xattrs)


class Part:
    """One thread's share of the tree: names (paths from the mount root) -> object ids."""

    def __init__(self):
        self.names: dict[str, int] = {}
        self.objs: dict[int, Obj] = {}
        self.next_oid = 1

    def copy(self) -> "Part":
        p = Part()
        p.names = dict(self.names)
        p.objs = {k: v.copy() for k, v in self.objs.items()}
        p.next_oid = self.next_oid
        return p

    def add(self, path, obj) -> int:
        oid = self.next_oid
        self.next_oid += 1
        self.objs[oid] = obj
        self.names[path] = oid
        return oid

    def obj(self, path) -> Obj:
        return self.objs[self.names[path]]

    def drop_name(self, path):
        oid = self.names.pop(path)
        if oid not in self.names.values():
            del self.objs[oid]

    def describe(self) -> dict:
        """{path: description} plus the hard-link groups, comparable with actual()."""
        nlink = {}
        for oid in self.names.values():
            nlink[oid] = nlink.get(oid, 0) + 1
        out = {}
        for path, oid in self.names.items():
            o = self.objs[oid]
            d = {"kind": o.kind}
            if o.kind != "l":
                d.update(mode=o.mode, uid=o.uid, gid=o.gid,
                         xattrs={n: v.hex() for n, v in sorted(o.xattrs.items())})
            if o.kind == "f":
                d.update(size=len(o.data), sha=hashlib.sha256(o.data).hexdigest()[:16],
                         nlink=nlink[oid])
            if o.kind == "l":
                d["target"] = o.target
            out[path] = d
        groups = {}
        for path, oid in self.names.items():
            groups.setdefault(oid, []).append(path)
        links = sorted(sorted(g) for g in groups.values() if len(g) > 1)
        return {"entries": out, "links": links}

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.describe(), sort_keys=True).encode()).hexdigest()[:16]


def _xattrs_of(path) -> dict:
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return {}
        raise
    return {n: os.getxattr(path, n, follow_symlinks=False).hex()
            for n in sorted(names) if n.startswith("user.")}


def actual(mnt: Path, k: int) -> dict:
    """What the tree under `mnt` shows of thread k's share, in Part.describe() form."""
    paths = []
    root = mnt / f"w{k}"
    if root.exists() or root.is_symlink():
        paths.append(f"w{k}")
        for dirpath, dirnames, filenames in os.walk(root):
            rel = os.path.relpath(dirpath, mnt)
            paths += [f"{rel}/{n}" for n in dirnames + filenames]
    shared = mnt / "shared"
    for n in sorted(os.listdir(shared)):
        if n.startswith(f"k{k}_"):
            paths.append(f"shared/{n}")
            p = shared / n
            if p.is_dir() and not p.is_symlink():
                for dirpath, dirnames, filenames in os.walk(p):
                    rel = os.path.relpath(dirpath, mnt)
                    paths += [f"{rel}/{x}" for x in dirnames + filenames]
    out, inodes = {}, {}
    for rel in paths:
        p = mnt / rel
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):
            out[rel] = {"kind": "l", "target": os.readlink(p)}
            continue
        d = {"kind": "d" if stat.S_ISDIR(st.st_mode) else "f" if stat.S_ISREG(st.st_mode) else "?",
             "mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid, "gid": st.st_gid,
             "xattrs": _xattrs_of(p)}
        if d["kind"] == "f":
            with open(p, "rb") as f:
                data = f.read()
            d.update(size=st.st_size, sha=hashlib.sha256(data).hexdigest()[:16], nlink=st.st_nlink)
            inodes.setdefault(st.st_ino, []).append(rel)
        out[rel] = d
    links = sorted(sorted(g) for g in inodes.values() if len(g) > 1)
    return {"entries": out, "links": links}


def diff(expected: dict, got: dict, limit=30) -> list[str]:
    out = []
    e, g = expected["entries"], got["entries"]
    for p in sorted(set(e) | set(g)):
        if p not in g:
            out.append(f"{p}: missing (expected {e[p]})")
        elif p not in e:
            out.append(f"{p}: unexpected ({g[p]})")
        elif e[p] != g[p]:
            keys = sorted(set(e[p]) | set(g[p]))
            out.append(f"{p}: " + ", ".join(f"{k} expected {e[p].get(k)!r} got {g[p].get(k)!r}"
                                            for k in keys if e[p].get(k) != g[p].get(k)))
        if len(out) >= limit:
            return out + ["..."]
    if expected["links"] != got["links"]:
        out.append(f"hard links: expected {expected['links']}, got {got['links']}")
    return out


def model_from_tree(mnt: Path, k: int) -> Part:
    """A Part that describes what the tree shows now (to go on after a reported violation)."""
    p = Part()
    by_ino = {}
    paths = [f"w{k}"]
    for dirpath, dirnames, filenames in os.walk(mnt / f"w{k}"):
        rel = os.path.relpath(dirpath, mnt)
        paths += [f"{rel}/{n}" for n in dirnames + filenames]
    for n in sorted(os.listdir(mnt / "shared")):
        if n.startswith(f"k{k}_"):
            paths.append(f"shared/{n}")
            if (mnt / "shared" / n).is_dir() and not (mnt / "shared" / n).is_symlink():
                for dirpath, dirnames, filenames in os.walk(mnt / "shared" / n):
                    rel = os.path.relpath(dirpath, mnt)
                    paths += [f"{rel}/{x}" for x in dirnames + filenames]
    for rel in paths:
        path = mnt / rel
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and st.st_ino in by_ino:
            p.names[rel] = by_ino[st.st_ino]
            continue
        if stat.S_ISLNK(st.st_mode):
            o = Obj("l", 0o777, target=os.readlink(path))
        else:
            xs = {n: bytes.fromhex(v) for n, v in _xattrs_of(path).items()}
            data = path.read_bytes() if stat.S_ISREG(st.st_mode) else b""
            o = Obj("f" if stat.S_ISREG(st.st_mode) else "d", stat.S_IMODE(st.st_mode), data,
                    uid=st.st_uid, gid=st.st_gid, xattrs=xs)
        oid = p.add(rel, o)
        if stat.S_ISREG(st.st_mode):
            by_ino[st.st_ino] = oid
    return p


# --------------------------------------------------------------------------
# the workload
# --------------------------------------------------------------------------

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
                nops = rng.choice((1, 2, 3, 5, 8, 12, 20)) if rng.random() < 0.9 else rng.randint(30, 80)
                for _ in range(nops):
                    op = gen_op(rng, work, k, counter)
                    if op is None:
                        continue
                    info["current"] = op_summary(op)
                    apply_fs(self.mnt, op)
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
                             "ops": info["ops"]}) + "\n")
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
                             "state": work.digest(), "ops": info["ops"]}) + "\n")
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


# --------------------------------------------------------------------------
# the environment: image, store, daemon
# --------------------------------------------------------------------------

class Env:
    """A loop-mounted XFS image with a store, and the daemon serving it (foreground)."""

    def __init__(self, workdir: Path, size=2 << 30):
        self.work = workdir
        self.image = workdir / "image"
        self.xfs = workdir / "xfs"
        self.mnt = workdir / "mnt"
        self.logs = workdir / "logs"
        for d in (self.xfs, self.mnt, self.logs):
            d.mkdir(parents=True, exist_ok=True)
        with open(self.image, "wb") as f:
            f.truncate(size)
        tl.run(["mkfs.xfs", "-q", "-m", "reflink=1", self.image], check=True)
        self.mount_xfs()
        self.store = tl.Store(self.xfs / "store").init()
        self.proc: subprocess.Popen | None = None
        self.log_file: Path | None = None
        self.aborted_connections = 0
        self.stuck_in: list[str] = []   # kernel waits of daemons that survived SIGKILL

    # -- XFS --------------------------------------------------------------
    def mount_xfs(self):
        tl.run(["mount", "-o", "loop", self.image, self.xfs], check=True)

    def umount_xfs(self, release_timeout=60.0):
        """Unmounts the image and waits until its loop device is gone, which is when the
        XFS instance itself is gone. Another mount namespace (any `unshare --mount` made
        while the image was mounted, e.g. by a test running at the same time) holds a copy
        of the mount: the umount here then succeeds, the shut-down instance lives on, and
        `mount -o loop` would reuse its loop device and get that instance back, still shut
        down. So wait for the holder to go; name it if it does not."""
        p = tl.run(["umount", self.xfs])
        if p.returncode != 0:
            raise RuntimeError(f"umount {self.xfs}: {p.stderr.strip()}")
        self.wait_released(release_timeout)

    def wait_released(self, timeout=60.0):
        """Waits until no loop device is attached to the image (see umount_xfs)."""
        if not tl.wait_until(lambda: not self.loop_devices(), timeout, 0.05):
            raise RuntimeError(
                f"{self.image} is unmounted here but still attached to "
                f"{', '.join(self.loop_devices())}: mount namespaces of {self.holders()} "
                f"keep its XFS alive")

    def loop_devices(self) -> list[str]:
        p = tl.run(["losetup", "-n", "-O", "NAME", "-j", self.image])
        return p.stdout.split()

    def holders(self) -> list[str]:
        """Processes whose mount namespace still has a mount of one of our loop devices."""
        devs = {Path(d).name for d in self.loop_devices()}
        out = []
        for mi in Path("/proc").glob("[0-9]*/mountinfo"):
            try:
                text = mi.read_text()
            except OSError:
                continue
            if any(f"/dev/{d} " in text for d in devs):
                pid = mi.parent.name
                try:
                    comm = (mi.parent / "comm").read_text().strip()
                except OSError:
                    comm = "?"
                out.append(f"{pid} ({comm})")
        return out[:10]

    def power_cut(self):
        """xfs_io shutdown without -f: what the XFS log had not written is lost."""
        tl.run(["xfs_io", "-x", "-c", "shutdown", self.xfs], check=True)

    # -- the daemon -------------------------------------------------------
    def mount(self, name: str, crash_at: str | None = None, timeout=60.0,
              extra=()) -> tuple[int | None, float]:
        """Starts `txnfs mount -f`. Returns (None, seconds) once mounted, or (exit status,
        seconds) when the daemon exited first (a crash point in recovery: 137)."""
        assert self.proc is None
        env = dict(os.environ)
        env.pop("TXNFS_CRASH_AT", None)
        env.pop("TXNFS_TEST_LAZY_RECORDS", None)
        if crash_at:
            env["TXNFS_CRASH_AT"] = crash_at
            # Crashes right after a round synced its commit records: for this cycle lazy
            # commits get records too, as where the durable mark is refused, so that
            # path is crash-tested as well.
            if crash_at.startswith("commit.after_wal_sync"):
                env["TXNFS_TEST_LAZY_RECORDS"] = "1"
        self.log_file = self.logs / f"{name}.log"
        t0 = time.monotonic()
        with open(self.logs / f"{name}.stderr", "wb") as err:
            self.proc = subprocess.Popen(
                [tl.txnfs_bin(), "mount", "-f", str(self.store.path), str(self.mnt),
                 "--log-file", str(self.log_file), "--lock-timeout-ms", str(LOCK_TIMEOUT_MS),
                 *(("--io-uring",) if tl.io_uring_wanted() else ()), *extra],
                env=env, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            if tl.is_mounted(self.mnt):
                return None, time.monotonic() - t0
            rc = self.proc.poll()
            if rc is not None:
                self.proc = None
                return rc, time.monotonic() - t0
            time.sleep(0.005)
        raise RuntimeError(f"txnfs mount did not come up in {timeout} s (log {self.log_file})")

    @staticmethod
    def kernel_waits(pid) -> str:
        """Where the threads of `pid` wait in the kernel (wchan), for the report."""
        out = []
        for t in sorted(Path(f"/proc/{pid}/task").glob("*")):
            try:
                w = (t / "wchan").read_text().strip()
            except OSError:
                continue
            if w and w != "0":
                out.append(w)
        return ",".join(sorted(set(out))) or "?"

    def abort_connection(self):
        """What a user does with such a daemon: `txnfs umount --force` aborts the mount's
        FUSE connection and detaches the mount point."""
        p = tl.txnfs("umount", "--force", self.mnt, timeout=30)
        if p.returncode != 0:
            raise RuntimeError(f"txnfs umount --force {self.mnt}: {tl.output_of(p)}")
        self.aborted_connections += 1

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def daemon_exited(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def kill(self):
        """kill -9 of the daemon (if still running), reap it, clean the dead mount point.

        A daemon thread can be stuck in the kernel where SIGKILL does not reach it: the
        invalidator inside fuse_lowlevel_notify_inval_entry waits for a directory lock
        that a request holds while it waits for the daemon's answer. Nobody answers once
        the other threads are gone, so the process never exits until the FUSE connection
        is aborted -- which `txnfs umount --force` does here after a grace period, as a
        user would."""
        if self.proc is not None:
            try:
                self.proc.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                self.stuck_in.append(self.kernel_waits(self.proc.pid))
                self.abort_connection()
                self.proc.wait(30)
            self.proc = None
        if tl.is_mounted(self.mnt):
            tl.run(["umount", "-l", self.mnt])

    def umount(self):
        """Clean unmount; the daemon must exit 0."""
        p = tl.txnfs("umount", self.mnt)
        if p.returncode != 0:
            raise RuntimeError(f"txnfs umount: {tl.output_of(p)}")
        rc = self.proc.wait(30) if self.proc else 0
        self.proc = None
        if rc != 0:
            raise RuntimeError(f"daemon exited {rc} after umount (log {self.log_file})")

    def recovery_seconds(self) -> float:
        """The recovery time the daemon logged (0 when there was nothing to recover).
        Recovery logs before the daemon switches to --log-file: it is in the .stderr."""
        text = ""
        for f in (self.log_file, self.log_file.with_suffix(".stderr")):
            try:
                text += f.read_text()
            except OSError:
                pass
        m = re.findall(r"recovery: .* in ([0-9.]+) s", text)
        return float(m[-1]) if m else 0.0

    def txn_records(self) -> dict[int, str]:
        """{id: state} of the transaction records in the database as the crash left it
        (read from a copy, so nothing of the store changes before recovery)."""
        tmp = Path(tempfile.mkdtemp(prefix="dbcopy-", dir=self.work))
        try:
            for suffix in ("", "-wal"):
                src = Path(str(self.store.db) + suffix)
                if src.exists():
                    shutil.copyfile(src, tmp / ("meta.db" + suffix))
            con = sqlite3.connect(str(tmp / "meta.db"))
            try:
                return dict(con.execute("SELECT id, state FROM txns"))
            finally:
                con.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def marked_committed(self, logs) -> set[int]:
        """The logs (as the crash left them) whose commit marker is at or below the
        durable mark of the backups directory."""
        d = self.store.internal / "backups"

        def value(path, xattr, link):
            try:
                return int(os.getxattr(path, xattr))
            except OSError:
                pass
            if link is None:
                return None
            try:
                return int(os.readlink(path / link))
            except OSError:
                return None
        mark = value(d, "trusted.txnfs.lazy_durable", None) or 0
        out = set()
        for t in logs:
            seq = value(d / str(t), "trusted.txnfs.lazy", "lazy")
            if seq is not None and seq <= mark:
                out.add(t)
        return out

    def backups_left(self) -> list[str]:
        d = self.store.internal / "backups"
        return sorted(os.listdir(d)) if d.exists() else ["<backups/ is missing>"]

    def close(self):
        problems = []
        try:
            self.kill()
        except Exception as e:  # noqa: BLE001
            problems.append(f"kill: {e}")
        if tl.is_mounted(self.mnt):
            tl.run(["umount", "-l", self.mnt])
        if tl.is_mounted(self.xfs):
            p = tl.run(["umount", self.xfs])
            if p.returncode != 0:
                problems.append(f"umount {self.xfs}: {p.stderr.strip()}")
                tl.run(["umount", "-l", self.xfs])
        for _ in range(50):
            loops = [ln.split(":", 1)[0] for ln in
                     tl.run(["losetup", "-j", self.image]).stdout.splitlines() if ln.strip()]
            if not loops:
                break
            for dev in loops:
                tl.run(["losetup", "-d", dev])
            time.sleep(0.05)
        return problems


# --------------------------------------------------------------------------
# the driver
# --------------------------------------------------------------------------

@dataclass
class Stats:
    by_kind: dict = field(default_factory=lambda: {k: 0 for k in KINDS})
    points_hit: dict = field(default_factory=dict)      # injected point -> times it fired
    not_reached: dict = field(default_factory=dict)     # injected point -> times it did not
    violations: list = field(default_factory=list)
    recovery: list = field(default_factory=list)        # seconds, as txnfs logged them
    mount: list = field(default_factory=list)           # seconds until the recovery mount was up
    commits: int = 0
    aborts: int = 0
    retryable: int = 0
    aborted_connections: int = 0
    stuck_in: list = field(default_factory=list)
    unacked_present: int = 0
    unacked_absent: int = 0
    lazy_commits: int = 0
    lazy_lost: int = 0            # acknowledged lazy commits a crash took (always a suffix)
    crashes_losing_lazy: int = 0
    workload_errors: list = field(default_factory=list)

    def summary(self, npoints) -> str:
        lines = [f"crash points: {sum(self.by_kind.values())} "
                 f"({', '.join(f'{k} {v}' for k, v in self.by_kind.items())})",
                 f"injected points fired: {sum(self.points_hit.values())} "
                 f"({len(self.points_hit)} of {npoints} distinct)"]
        for name in sorted(self.points_hit):
            lines.append(f"  {name}: {self.points_hit[name]}")
        missing = [n for n in self.not_reached if n not in self.points_hit]
        if missing:
            lines.append(f"  never reached: {', '.join(sorted(missing))}")
        lines.append(f"transactions: {self.commits} acknowledged commits, {self.aborts} aborts, "
                     f"{self.retryable} aborted after a lock conflict; "
                     f"unacknowledged at a crash: {self.unacked_present} present (commit record "
                     f"durable), {self.unacked_absent} absent")
        lines.append(f"lazy commits: {self.lazy_commits} acknowledged, {self.lazy_lost} lost "
                     f"to {self.crashes_losing_lazy} crashes (each loss a suffix of the commit "
                     f"order, checked)")
        for name, xs in (("recovery time (txnfs)", self.recovery),
                         ("mount time incl. recovery", self.mount)):
            if xs:
                s = sorted(xs)
                p95 = s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]
                lines.append(f"{name}: min {s[0]*1000:.1f} ms, median "
                             f"{statistics.median(s)*1000:.1f} ms, p95 {p95*1000:.1f} ms, "
                             f"max {s[-1]*1000:.1f} ms (n={len(s)})")
        lines.append(f"daemons stuck after kill -9 until their FUSE connection was aborted: "
                     f"{self.aborted_connections}"
                     + (f" (waiting in {', '.join(sorted(set(self.stuck_in)))})" if self.stuck_in else ""))
        lines.append(f"workload errors (unexpected, no crash yet): {len(self.workload_errors)}")
        lines.append(f"violations: {len(self.violations)}")
        for v in self.violations:
            lines.append("  " + v.splitlines()[0])
        return "\n".join(lines)


@dataclass
class Verdict:
    """What one reading of a crash's outcome finds (Runner.judge)."""
    problems: list = field(default_factory=list)
    new_parts: list = field(default_factory=list)
    unacked_absent: int = 0
    unacked_present: int = 0
    lost: int = 0                  # acknowledged lazy commits lost


def judge_crash(wl: "Workload", got: list, records: dict[int, str], logs: set[int]) -> Verdict:
    """Whether the trees `got` (one description per thread) after a crash are consistent
    with the workload's history, the commit records and the undo logs the crash left."""
    committed_ids = {t for t, s in records.items() if s == "committed"}
    # A thread's tree may match several of its states: a transaction that changed
    # nothing (say, a create and an unlink of one name) leaves two equal states, and
    # whether it survived is not observable. The crash is consistent if one reading
    # of every thread is; the report shows the latest reading of each.
    cands = []
    for k in range(len(got)):
        hist = wl.history[k]
        descs = [d.describe() for d in [wl.base[k]] + [h["part"] for h in hist]]
        cands.append([j for j in range(len(descs) - 1, -1, -1) if descs[j] == got[k]]
                     or [None])
    verdict = None
    for n, choice in enumerate(itertools.product(*cands)):
        v = judge_reading(wl, got, choice, records, logs, committed_ids)
        if verdict is None or not v.problems:
            verdict = v
        if not v.problems or n >= 4096:
            break
    return verdict


def judge_reading(wl: Workload, got: list, choice: tuple, records: dict[int, str],
                  logs: set[int], committed_ids: set[int]) -> Verdict:
    """The problems of one reading of the crash: thread k's tree is its state
    choice[k] (0: as before this cycle, i: after its i-th acknowledged commit; None:
    none of them)."""
    v = Verdict()
    lost_acks, kept_starts = [], []   # (ack, who) of lost / (start, who) of surviving commits
    lost_here = 0
    for k in range(len(got)):
        # the states thread k may be in: before this cycle, after each acknowledged
        # commit; lazy ones may be lost, but only the latest of all (a suffix)
        hist = wl.history[k]
        states = [wl.base[k]] + [h["part"] for h in hist]
        descs = [st.describe() for st in states]
        info = wl.inflight[k]
        j = choice[k]
        if j is not None:
            if info and info["phase"] == "committing":
                if info["work"].describe() == descs[-1]:
                    pass   # the transaction changed nothing: present = absent
                elif info["txid"] in committed_ids:
                    v.problems.append(f"thread {k}: transaction {info['txid']} has a durable "
                                      f"commit record but is absent")
                else:
                    v.unacked_absent += 1
            for h in hist[j:]:
                lost_acks.append((h["ack"], f"thread {k} txn {h['txid']}"))
                if not h["lazy"]:
                    v.problems.append(f"thread {k}: transaction {h['txid']} was committed "
                                      f"durably but is lost")
                elif h["txid"] in committed_ids:
                    v.problems.append(f"thread {k}: lazy transaction {h['txid']} has a "
                                      f"durable commit record but is lost")
            lost_here += len(hist[j:])
            for h in hist[:j]:
                kept_starts.append((h["start"], f"thread {k} txn {h['txid']}"))
            v.new_parts.append(states[j])
            continue
        if info and info["phase"] == "committing":
            expect_w = info["work"].describe()
            if got[k] == expect_w:
                tx = info["txid"]
                for h in hist:
                    kept_starts.append((h["start"], f"thread {k} txn {h['txid']}"))
                kept_starts.append((info.get("start", 0), f"thread {k} txn {tx} (in flight)"))
                if tx in committed_ids or (tx not in records and tx not in logs):
                    v.unacked_present += 1
                    v.new_parts.append(info["work"])
                    continue
                v.problems.append(f"thread {k}: transaction {tx} is present but its commit "
                                  f"record was not durable (record: {records.get(tx)}, log "
                                  f"{'present' if tx in logs else 'absent'})")
                v.new_parts.append(info["work"])
                continue
            d = diff(descs[-1], got[k])
            dw = diff(expect_w, got[k])
            v.problems.append(
                f"thread {k}: neither a committed state nor that of unacknowledged "
                f"transaction {info['txid']} (commit record "
                f"{'durable' if info['txid'] in committed_ids else 'not durable'}); vs. "
                f"committed:\n    " + "\n    ".join(d) + "\n  vs. with the transaction:\n    "
                + "\n    ".join(dw))
        else:
            phase = info["phase"] if info else "idle"
            v.problems.append(
                f"thread {k} ({phase}, txn {info and info['txid']}, "
                f"{len(info['ops']) if info else 0} ops done): the tree is not a committed "
                f"state:\n    " + "\n    ".join(diff(descs[-1], got[k])))
        v.new_parts.append(None)
    # the suffix contract across threads: nothing whose commit began after a lost
    # commit was acknowledged may survive
    if lost_acks:
        first_lost = min(lost_acks)
        later = [w for start, w in kept_starts if start > first_lost[0]]
        if later:
            v.problems.append(f"lost commits are not a suffix of the commit order: "
                              f"{first_lost[1]} is lost, but {later[:5]}, committed after it "
                              f"was acknowledged, survived")
        v.lost = lost_here
    return v


class Violation(Exception):
    pass


class Runner:
    def __init__(self, seed: int, kind: str, threads: int = 4, workdir: Path | None = None,
                 keep_going: bool = False, log=print, only_point: str | None = None,
                 max_delay: float = 1.2, keep_image: bool = False, lazy_rate: float = 0.5):
        self.seed = seed
        self.lazy_rate = lazy_rate
        self.kind = kind
        self.nthreads = threads
        self.keep_going = keep_going
        self.log = log
        self.max_delay = max_delay
        self.keep_image = keep_image
        self.master = random.Random(seed)
        self.points = [p[0] for p in crash_points()]
        if only_point:
            if only_point not in self.points:
                raise SystemExit(f"no crash point {only_point!r}; see `txnfs crash-points`")
            self.points = [only_point]
        self.todo = list(self.points)       # injected points not fired yet, in order
        self.next_point = 0
        self.stats = Stats()
        self.own_workdir = workdir is None
        self.work = Path(tempfile.mkdtemp(prefix="txnfs-crash-")) if workdir is None else workdir
        self.work.mkdir(parents=True, exist_ok=True)
        self.env: Env | None = None
        self.parts: list[Part] = []
        self.journal = open(self.work / "journal.jsonl", "a")

    # -- setup ------------------------------------------------------------
    def setup(self):
        self.old_umask = os.umask(0)      # modes in the model are exact; restored by close()
        self.env = Env(self.work)
        rc, _ = self.env.mount("setup")
        assert rc is None, f"setup mount failed ({rc})"
        mnt = self.env.mnt
        os.mkdir(mnt / "shared", 0o777)
        self.parts = []
        for k in range(self.nthreads):
            os.mkdir(mnt / f"w{k}", 0o755)
            p = Part()
            p.add(f"w{k}", Obj("d", 0o755))
            self.parts.append(p)
        # warm-up: some committed content before the first crash
        wl = Workload(mnt, self.parts, self.seed, self.journal, -1, abort_rate=0.1)
        wl.start()
        time.sleep(1.0)
        wl.stop.set()
        hung = wl.join(60)
        if hung:
            raise Violation(f"warm-up: threads {hung} hung")
        self.stats.workload_errors += [f"seed {self.seed}, warm-up: {e}" for e in wl.errors]
        self.parts = wl.parts
        self.stats.commits += wl.commits
        self.stats.aborts += wl.aborts
        self.env.umount()

    def close(self):
        if getattr(self, "old_umask", None) is not None:
            os.umask(self.old_umask)
            self.old_umask = None
        self.journal.close()
        problems = self.env.close() if self.env else []
        if (self.own_workdir and not problems and not self.stats.violations
                and not self.stats.workload_errors):
            shutil.rmtree(self.work, ignore_errors=True)
        elif not problems and not self.keep_image and self.env:
            # kept for its logs and journal; the image (tens of MB of data) goes
            self.env.image.unlink(missing_ok=True)
        return problems

    # -- one crash --------------------------------------------------------
    def pick(self, i: int) -> tuple[str, str | None]:
        kind = self.kind if self.kind != "all" else KINDS[i % 3]
        if kind != "inject":
            return kind, None
        if self.todo:
            name = self.todo[0]
        else:
            name = self.points[self.next_point % len(self.points)]
            self.next_point += 1
        return kind, name

    def cycle(self, i: int):
        kind, point = self.pick(i)
        cseed = self.master.getrandbits(48)
        rng = random.Random(cseed)
        env = self.env
        retry = point is not None and point in self.stats.not_reached and point not in self.stats.points_hit
        count = 1 if (retry or point is None) else rng.choice((1, 1, 2, 3, 5, 8))
        recovery_point = point is not None and point.startswith("recover.")
        label = f"cycle {i} ({kind}{' ' + point + ':' + str(count) if point else ''}, seed {cseed})"
        where = (f"seed {self.seed}, crash #{i}: kind {kind}"
                 f"{', point ' + point + ':' + str(count) if point else ''}")
        crash_at = f"{point}:{count}" if point and not recovery_point else None
        flush_ms = rng.choice((5, 50, 1000))
        rc, _ = env.mount(f"c{i}-work", crash_at, extra=("--lazy-flush-ms", str(flush_ms)))
        if rc is not None:
            raise Violation(f"{where}: the workload mount failed (exit {rc}); log "
                            f"{env.logs}/c{i}-work.stderr")
        wl = Workload(env.mnt, self.parts, cseed, self.journal, i, lazy_rate=self.lazy_rate)
        wl.start()
        delay = rng.uniform(0.05, self.max_delay)
        fired = False
        actual_kind = kind
        if kind == "inject" and not recovery_point:
            try:
                rc = env.proc.wait(timeout=4.0)
            except subprocess.TimeoutExpired:
                rc = None
            wl.crashing.set()
            if rc == 137:
                fired = True
            elif rc is None:
                # not reached in time: crash anyway with kill -9, try count 1 next time
                actual_kind = "kill"
            else:
                raise Violation(f"{where}: the daemon died with status {rc}, not at the "
                                f"crash point (log {env.log_file})")
            env.kill()
        elif kind == "power":
            time.sleep(delay)
            self.alive_or_violation(where)
            wl.crashing.set()
            env.power_cut()
            time.sleep(rng.uniform(0.0, 0.05))
            env.kill()
        else:
            time.sleep(max(delay, 0.3) if recovery_point else delay)
            self.alive_or_violation(where)
            wl.crashing.set()
            env.kill()
        hung = wl.join(60)
        if hung:
            raise Violation(f"{where}: workload threads {hung} still blocked 60 s after the crash")
        if kind == "power":
            env.umount_xfs()
            env.mount_xfs()
        records = env.txn_records()
        logs = set(int(n) for n in env.backups_left() if n.isdigit())
        # A log whose marker the durable mark covers is a committed transaction's, as much
        # as one with a commit record (docs/crash-model.md, Lazy commit).
        for t in env.marked_committed(logs):
            records[t] = "committed"
        for k, info in enumerate(wl.inflight):      # the journal gets the unfinished ones too
            if info:
                self.journal.write(json.dumps(
                    {"cycle": i, "thread": k, "txid": info["txid"],
                     "outcome": f"in flight at the crash ({info['phase']}), record "
                                f"{records.get(info['txid'])}, log "
                                f"{'present' if info['txid'] in logs else 'absent'}",
                     "ops": info["ops"], "failed": info.get("current")}) + "\n")
        self.journal.flush()
        self.stats.commits += wl.commits
        self.stats.lazy_commits += wl.lazy_commits
        self.stats.aborts += wl.aborts
        self.stats.retryable += wl.retryable
        for e in wl.errors:
            self.stats.workload_errors.append(f"{where}: {e}")

        # recovery (maybe crashing inside it first)
        if recovery_point:
            rc, _ = env.mount(f"c{i}-rcrash", f"{point}:{count}")
            if rc == 137:
                fired = True
            elif rc is None:
                env.umount()            # recovery finished without reaching the point
                actual_kind = "kill"
            else:
                raise Violation(f"{where}: the mount with {point} armed failed with exit {rc}")
        if kind == "inject":
            if fired:
                self.stats.points_hit[point] = self.stats.points_hit.get(point, 0) + 1
                if point in self.todo:
                    self.todo.remove(point)
            else:
                self.stats.not_reached[point] = self.stats.not_reached.get(point, 0) + 1
        self.stats.by_kind[actual_kind] += 1
        self.stats.aborted_connections = env.aborted_connections
        self.stats.stuck_in = env.stuck_in
        rc, mount_s = env.mount(f"c{i}-recover")
        if rc is not None:
            raise Violation(f"{where}: mounting after the crash failed (exit {rc}):\n"
                            + (env.logs / f"c{i}-recover.stderr").read_text()[-3000:])
        self.stats.mount.append(mount_s)
        self.stats.recovery.append(env.recovery_seconds())
        self.check(i, where, wl, records, logs, keep_logs=bool(wl.errors))
        self.log(f"{label}: ok ({'fired' if fired or kind != 'inject' else 'not reached: killed'}, "
                 f"{wl.commits} commits, {wl.aborts} aborts, recovery "
                 f"{self.stats.recovery[-1]*1000:.1f} ms)")

    def alive_or_violation(self, where):
        rc = self.env.daemon_exited()
        if rc is not None:
            raise Violation(f"{where}: the daemon died by itself (status {rc}) before the crash "
                            f"(log {self.env.log_file})")

    def check(self, i: int, where: str, wl: Workload, records: dict[int, str], logs: set[int],
              keep_logs=False):
        """`records` and `logs`: transaction records and undo logs as the crash left them.
        An unacknowledged transaction may be present only if its commit record was durable:
        it is 'committed' in `records`, or it has neither record nor log left (its commit
        was durable and its cleanup had finished when the crash came)."""
        env = self.env
        mnt = env.mnt
        problems = []
        left = env.backups_left()
        if left:
            problems.append(f"undo logs left after recovery: {left}")
        got = [actual(mnt, k) for k in range(self.nthreads)]
        verdict = judge_crash(wl, got, records, logs)
        problems += verdict.problems
        new_parts = verdict.new_parts
        self.stats.unacked_absent += verdict.unacked_absent
        self.stats.unacked_present += verdict.unacked_present
        if verdict.lost:
            self.stats.lazy_lost += verdict.lost
            self.stats.crashes_losing_lazy += 1
        # names in shared/ that belong to nobody
        stray = [n for n in os.listdir(mnt / "shared")
                 if not re.match(r"k(\d+)_", n) or int(re.match(r"k(\d+)_", n).group(1)) >= self.nthreads]
        top = sorted(set(os.listdir(mnt)) - {"shared"} - {f"w{k}" for k in range(self.nthreads)})
        if stray or top:
            problems.append(f"unexpected names: shared/{stray} top-level {top}")
        # the store works: a probe transaction
        try:
            self.probe(mnt)
        except Exception as e:  # noqa: BLE001
            problems.append(f"the recovered store does not work: {e!r}")
        env.umount()
        p = env.store.fsck()
        if p.returncode != 0:
            problems.append(f"txnfs fsck after recovery: exit {p.returncode}\n{tl.output_of(p)}")
        if problems:
            msg = (f"VIOLATION at {where}\n  " + "\n  ".join(problems) +
                   f"\n  replay: tests/crash/run --seed {self.seed} --points {i + 1} "
                   f"--kind {self.kind} --threads {self.nthreads}"
                   f"\n  logs: {env.logs} (c{i}-*.log), journal: {self.work / 'journal.jsonl'}")
            self.stats.violations.append(msg)
            print(msg, flush=True)             # also with --quiet
            if not self.keep_going:
                raise Violation(msg)
            self.resync(new_parts)
        else:
            self.parts = new_parts
            if not keep_logs:      # daemon logs of passing cycles are not needed
                for f in env.logs.glob(f"c{i}-*"):
                    f.unlink()

    def probe(self, mnt: Path):
        result = {}

        def body():
            try:
                tid = tl.txn_begin(mnt)
                with open(mnt / "shared" / "probe", "wb") as f:
                    f.write(b"probe")
                rc = tl.txn_commit(mnt, tid)
                assert rc == 0, f"probe commit: {rc}"
                assert (mnt / "shared" / "probe").read_bytes() == b"probe"
                os.unlink(mnt / "shared" / "probe")
                result["ok"] = True
            except Exception as e:  # noqa: BLE001
                result["error"] = e

        t = threading.Thread(target=body)   # its own thread: the transaction binds to it
        t.start()
        t.join(30)
        if "ok" not in result:
            raise RuntimeError(result.get("error", "probe hung"))

    def resync(self, new_parts):
        """After a reported violation (--keep-going): repair and take the tree as it is."""
        # The violation is reported already: accept a damage mark too, or mount refuses.
        p = tl.txnfs("fsck", self.env.store.path, "--repair", "--accept-damage")
        self.log(f"  fsck --repair: exit {p.returncode}")
        rc, _ = self.env.mount("resync")
        assert rc is None
        self.parts = [np if np is not None else model_from_tree(self.env.mnt, k)
                      for k, np in enumerate(new_parts)]
        self.env.umount()

    def run(self, n: int) -> Stats:
        self.setup()
        for i in range(n):
            self.cycle(i)
        return self.stats
