#!/usr/bin/env python3
"""Attribute perf traces to txnfs-fsbench steps (used by `bench/fs-vs-xfs --profile`).

Step windows come from the stderr of `txnfs-fsbench -v` (CLOCK_MONOTONIC start/end, the
directory's device = FUSE connection id); perf must record with `-k mono`.

--mode trace (default): stdin is `perf script -F pid,tid,time,event,trace` of
    `perf record -a -k mono -e fuse:fuse_request_send -e raw_syscalls:sys_enter`.
    Prints per step and directory: FUSE requests per operation by opcode (only requests
    of that directory's FUSE connection), which fsbench syscall sent them, and syscalls
    per operation of the daemon(s) and of fsbench.
--mode cpu: stdin is `perf script -F tid,pid,time,event,ip,sym,dso` of
    `perf record -k mono -g -p DAEMON_PID` (dwarf call graphs work best).  Prints per
    step where the daemon's CPU samples fall (SQLite, libfuse receive/reply, syscalls).
"""
import argparse
import bisect
import collections
import re
import sys

STEP_ORDER = ["a", "b", "c", "c'", "d", "e", "f", "g"]
STEP_TITLE = {"a": "create+write+close 4K", "b": "stat", "c": "readdir + stat each",
              "c'": "readdir (d_type only)", "d": "open+read+close 4K", "e": "unlink",
              "f": "seq write 1M + fsync (per MiB)", "g": "seq read 1M (per MiB)"}


def syscall_names():
    names = {}
    for hdr in ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"):
        try:
            with open(hdr) as f:
                for line in f:
                    m = re.match(r"#define __NR_(\w+)\s+(\d+)", line)
                    if m:
                        names[int(m.group(2))] = m.group(1)
            break
        except OSError:
            continue
    return names


class Windows:
    def __init__(self, path):
        self.w = []  # (start, end, step, label, ops, pid, dev)
        wre = re.compile(r"step=(\S+) dir=(\S+) rep=\d+ pid=(\d+) ops=(\d+) dev=(\d+) "
                         r"start=([\d.]+) end=([\d.]+)")
        with open(path) as f:
            for line in f:
                m = wre.search(line)
                if m:
                    self.w.append((float(m.group(6)), float(m.group(7)), m.group(1), m.group(2),
                                   int(m.group(4)), int(m.group(3)), int(m.group(5))))
        self.w.sort()
        self.starts = [x[0] for x in self.w]
        self.bench_pids = {x[5] for x in self.w}
        self.labels = []
        for x in self.w:
            if x[3] not in self.labels:
                self.labels.append(x[3])

    def find(self, t):
        i = bisect.bisect_right(self.starts, t) - 1
        if i < 0 or t > self.w[i][1]:
            return None
        return self.w[i]

    def steps(self):
        for step in STEP_ORDER:
            ws = [x for x in self.w if x[2] == step]
            if ws:
                yield step, ws


def per_op(counter, ops, top):
    total = sum(counter.values())
    parts = ", ".join(f"{k} {v / ops:.2f}" for k, v in counter.most_common(top) if v / ops >= 0.005)
    more = len(counter) - top
    return f"{total / ops:7.2f}  = {parts}{' ...' if more > 0 else ''}"


def mode_trace(a, win, daemons):
    nr = syscall_names()
    fuse = collections.defaultdict(collections.Counter)
    fuse_by_call = collections.defaultdict(lambda: collections.defaultdict(collections.Counter))
    sysc = collections.defaultdict(collections.Counter)
    last_call = {}  # fsbench tid -> last syscall entered
    ere = re.compile(r"^\s*(\d+)/(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)$")
    fre = re.compile(r"connection (\d+) req \d+ opcode \d+ \((\w+)\)")
    sre = re.compile(r"NR (\d+)")
    lines = foreign = 0
    for line in sys.stdin:
        m = ere.match(line)
        if not m:
            continue
        lines += 1
        pid, tid, t, ev, rest = int(m.group(1)), int(m.group(2)), float(m.group(3)), m.group(4), m.group(5)
        if ev.startswith("raw_syscalls:") and pid in win.bench_pids:
            sm = sre.search(rest)
            last_call[tid] = nr.get(int(sm.group(1)), "NR" + sm.group(1)) if sm else "?"
        w = win.find(t)
        if w is None:
            continue
        key = (w[2], w[3])
        if ev.startswith("fuse:"):
            fm = fre.search(rest)
            if not fm:
                continue
            if int(fm.group(1)) != w[6]:
                foreign += 1  # another FUSE mount on this machine (other users, other tests)
                continue
            op = fm.group(2).replace("FUSE_", "")
            fuse[key][op] += 1
            via = last_call.get(tid, "?") if pid in win.bench_pids else "kernel/async"
            fuse_by_call[key][via][op] += 1
        elif ev.startswith("raw_syscalls:"):
            sm = sre.search(rest)
            n = int(sm.group(1)) if sm else -1
            who = daemons.get(pid) or ("fsbench" if pid in win.bench_pids else None)
            if who:
                sysc[key + (who,)][nr.get(n, f"NR{n}")] += 1

    print(f"== FUSE requests and syscalls per operation (per file for a-e, per MiB for f-g); "
          f"{lines} trace events, {foreign} requests of other FUSE mounts ignored")
    for step, ws in win.steps():
        print(f"\n-- {step}: {STEP_TITLE[step]}")
        for label in win.labels:
            wl = [x for x in ws if x[3] == label]
            if not wl:
                continue
            ops = sum(x[4] for x in wl) or 1
            secs = sum(x[1] - x[0] for x in wl)
            print(f"  [{label}] {secs:.3f} s traced for {ops} ops")
            key = (step, label)
            if fuse[key]:
                print(f"    {'FUSE requests/op':<26}{per_op(fuse[key], ops, a.top)}")
                calls = sorted(fuse_by_call[key].items(), key=lambda kv: -sum(kv[1].values()))
                for via, c in calls:
                    if sum(c.values()) / ops >= 0.005:
                        print(f"      {'sent during ' + via:<24}{per_op(c, ops, a.top)}")
            for who in (label, "fsbench"):
                c = sysc.get(key + (who,))
                if c:
                    print(f"    {who + ' syscalls/op':<26}{per_op(c, ops, a.top)}")


def classify(frames):
    """frames: list of (sym, dso), leaf first."""
    dsos = [d for _, d in frames]
    syms = [s for s, _ in frames]
    if any("libsqlite3" in d for d in dsos):
        sub = next((s for s in syms if s.startswith("__x64_sys_")), None)
        return "SQLite" + (f" -> {sub[10:]}" if sub else " (user)")
    for s in syms:
        if "fuse_session_receive_buf" in s or "fuse_ll_receive" in s or s == "fuse_dev_do_read":
            return "libfuse: receive request"
        if "fuse_send_msg" in s or "fuse_reply" in s or "send_reply" in s or s == "fuse_dev_do_write":
            return "libfuse: send reply"
    sysname = next((s for s in syms if s.startswith("__x64_sys_")), None)
    user = next(((s, d) for s, d in frames if "kernel" not in d and "libc.so" not in d
                 and "libstdc++" not in d), None)
    if sysname:
        return f"syscall {sysname[10:]}" + (f" (from {user[0][:50]})" if user else "")
    if frames and "kernel" in frames[0][1]:
        return "kernel (no syscall frame)"
    if user:
        d = user[1].rsplit("/", 1)[-1]
        return f"{d}: {user[0][:60]}"
    return frames[0][1].rsplit("/", 1)[-1] if frames else "?"


def mode_cpu(a, win, daemons):
    hz = a.hz
    hdr = re.compile(r"^\s*(?:\S+\s+)?(\d+)/(\d+)\s+([\d.]+):\s+(?:\d+\s+)?(\S+):")
    fr = re.compile(r"^\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")
    samples = collections.defaultdict(collections.Counter)
    cur = None
    frames = []

    def flush():
        if cur is not None:
            w = win.find(cur)
            if w is not None:
                samples[(w[2], w[3])][classify(frames)] += 1

    for line in sys.stdin:
        m = hdr.match(line)
        if m:
            flush()
            pid = int(m.group(1))
            cur = float(m.group(3)) if (not daemons or pid in daemons) else None
            frames = []
            continue
        f = fr.match(line)
        if f and cur is not None:
            if f.group(2) != "inlined":  # keep real frames only
                frames.append((f.group(1).split("+0x")[0], f.group(2)))
    flush()
    print(f"== daemon CPU samples per step ({hz} Hz cpu-clock; a sample = {1000 / hz:.2f} ms of CPU); "
          "share of the step's samples by where they fall")
    for step, ws in win.steps():
        for label in win.labels:
            wl = [x for x in ws if x[3] == label]
            c = samples.get((step, label))
            if not wl or not c:
                continue
            ops = sum(x[4] for x in wl) or 1
            secs = sum(x[1] - x[0] for x in wl)
            n = sum(c.values())
            unit = "MiB" if step in ("f", "g") else "op"
            print(f"\n-- {step}: {STEP_TITLE[step]} [{label}]: {secs:.3f} s wall, {n} samples = "
                  f"{n / hz:.3f} s CPU = {n / hz / ops * 1e6:.1f} us CPU/{unit}")
            for k, v in c.most_common(a.top):
                print(f"    {100 * v / n:5.1f}%  {v / hz / ops * 1e6:7.1f} us/{unit}  {k}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--windows", required=True, help="stderr of txnfs-fsbench -v")
    ap.add_argument("--daemon", action="append", default=[], help="LABEL=PID of a FUSE daemon")
    ap.add_argument("--mode", choices=["trace", "cpu"], default="trace")
    ap.add_argument("--hz", type=float, default=999)
    ap.add_argument("--top", type=int, default=14)
    a = ap.parse_args()
    daemons = {}
    for d in a.daemon:
        label, pid = d.split("=", 1)
        daemons[int(pid)] = label
    win = Windows(a.windows)
    if not win.w:
        sys.exit("perf-steps: no step windows in " + a.windows)
    (mode_cpu if a.mode == "cpu" else mode_trace)(a, win, daemons)


if __name__ == "__main__":
    main()
