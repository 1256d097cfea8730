"""Worker processes: a Group is a leader process (which a transaction binds) and its
worker children, each running one op list in lockstep with the controller, one op at a
time, every op with a deadline (OP_DEADLINE; a stalled op raises Stall).
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import time

from txnfs_testing import txnfs_lib as tl
from txnfs_testing.fuzz.executor import exec_op


OP_DEADLINE = float(os.environ.get("TXNFS_FUZZ_DEADLINE", "30"))   # a stalled op fails


class Stall(Exception):
    pass


_ORIGINAL_NS = -1  # the worker's own mount namespace, to come back to from a view


def _enter_view(mount: str, tid: int) -> int:
    """Leaves the view the worker is in (if any), then enters transaction tid's, as
    `txnfs run` does (txnfs_enter_view: a private mount namespace with the view bound
    over the mount point). 0 or -errno."""
    global _ORIGINAL_NS
    if _ORIGINAL_NS < 0:
        _ORIGINAL_NS = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    elif _libc.setns(_ORIGINAL_NS, CLONE_NEWNS) != 0:
        return -ctypes.get_errno()
    os.chdir("/")
    if tid == 0:
        return 0
    lib = tl.libtxnfs()
    lib.txnfs_enter_view.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
    return lib.txnfs_enter_view(os.fsencode(mount), tid)


_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS = 0x00020000


def _worker_main(root: str, cmd_r: int, res_w: int):
    os.umask(0)
    os.chdir("/")
    out = os.fdopen(res_w, "w", buffering=1)
    out.write(json.dumps({"pid": os.getpid()}) + "\n")
    inp = os.fdopen(cmd_r, "r")
    for line in inp:
        o = json.loads(line)
        if o.get("o") == "_view":  # from now on the mount shows a transaction's view
            out.write(json.dumps({"r": _enter_view(o["mount"], o["tid"])}) + "\n")
            continue
        out.write(json.dumps(exec_op(root, o)) + "\n")
    os._exit(0)


class Group:
    """A leader process and `procs` worker processes (its children), each running one op
    list in lockstep with the controller (one op at a time, every op with a deadline).
    A transaction bound to the leader's pid covers the workers (its descendants)."""

    def __init__(self, root, nprocs: int):
        self.root = str(root)
        self.n = nprocs
        self.pipes = [(os.pipe(), os.pipe()) for _ in range(nprocs)]
        ctl_r, self.ctl_w = os.pipe()
        self.leader = os.fork()
        if self.leader == 0:
            try:
                os.close(self.ctl_w)
                kids = []
                for k, ((cr, cw), (rr, rw)) in enumerate(self.pipes):
                    pid = os.fork()
                    if pid == 0:
                        for j, ((a, b), (c, d)) in enumerate(self.pipes):
                            for fd in ((b, c) if j == k else (a, b, c, d)):
                                os.close(fd)
                        os.close(ctl_r)
                        _worker_main(self.root, cr, rw)
                    kids.append(pid)
                for (cr, cw), (rr, rw) in self.pipes:
                    for fd in (cr, cw, rr, rw):
                        os.close(fd)
                for pid in kids:
                    os.waitpid(pid, 0)
                os.read(ctl_r, 1)       # stay alive (the transaction's owner) until told
            finally:
                os._exit(0)
        os.close(ctl_r)
        self.cmd = []
        self.res = []
        for (cr, cw), (rr, rw) in self.pipes:
            os.close(cr)
            os.close(rw)
            self.cmd.append(cw)
            self.res.append(rr)
        self.buf = [b""] * nprocs
        self.pids = [json.loads(self._line(k, 10))["pid"] for k in range(nprocs)]

    def _line(self, k, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf[k]:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.res[k]], [], [], left)[0]:
                raise Stall(f"worker {k} gave no answer in {timeout} s")
            b = os.read(self.res[k], 65536)
            if not b:
                raise EOFError(f"worker {k} died")
            self.buf[k] += b
        line, _, self.buf[k] = self.buf[k].partition(b"\n")
        return line

    def run(self, lists, deadline=OP_DEADLINE, stop_after=None, on_step=None):
        """Runs lists[k] on worker k concurrently. Returns results[k][i] (None if not run).
        Stops sending after `stop_after` completed ops in total. Raises Stall (with
        .where) when an op takes longer than `deadline`."""
        results = [[None] * len(lst) for lst in lists]
        nxt = [0] * self.n
        started = {}
        done = 0

        def send(k):
            if nxt[k] < len(lists[k]) and (stop_after is None or done < stop_after):
                os.write(self.cmd[k], (json.dumps(lists[k][nxt[k]]) + "\n").encode())
                started[k] = time.monotonic()

        for k in range(self.n):
            send(k)
        while started:
            now = time.monotonic()
            oldest = min(started.values())
            wait = deadline - (now - oldest)
            if wait <= 0:
                k = min(started, key=started.get)
                e = Stall(f"op {nxt[k]} of process {k} ({json.dumps(lists[k][nxt[k]])}) "
                          f"did not return in {deadline:.0f} s")
                e.where = (k, nxt[k])
                raise e
            ready = select.select([self.res[k] for k in started], [], [], wait)[0]
            for fd in ready:
                k = self.res.index(fd)
                try:
                    line = self._line(k, deadline)
                except EOFError:
                    results[k][nxt[k]] = {"e": "worker died"}
                    del started[k]
                    continue
                results[k][nxt[k]] = json.loads(line)
                nxt[k] += 1
                done += 1
                del started[k]
                if on_step:
                    on_step(done)
                send(k)
        return results

    def enter_view(self, mount, tid, timeout=10):
        """From now on every worker sees the mount through transaction tid's view (0: the
        plain mount again). Returns the workers' 0 or -errno."""
        for k in range(self.n):
            os.write(self.cmd[k],
                     (json.dumps({"o": "_view", "mount": str(mount), "tid": tid}) + "\n").encode())
        return [json.loads(self._line(k, timeout))["r"] for k in range(self.n)]

    def end_workers(self, timeout=OP_DEADLINE):
        for fd in self.cmd:
            try:
                os.close(fd)
            except OSError:
                pass
        self.cmd = []

    def close(self, timeout=10.0):
        """Ends workers and leader; SIGKILLs (by pid) whatever does not exit in time."""
        self.end_workers()
        try:
            os.close(self.ctl_w)
        except OSError:
            pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, _ = os.waitpid(self.leader, os.WNOHANG)
            if pid:
                break
            time.sleep(0.01)
        else:
            for p in self.pids + [self.leader]:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            os.waitpid(self.leader, 0)
        for fd in self.res:
            os.close(fd)
        self.res = []

    def workers_done(self, timeout):
        """True when every worker process has exited (they exit once end_workers ran)."""
        return tl.wait_until(lambda: not any(tl.pid_alive(p) for p in self.pids), timeout, 0.01)
