"""bench/tcnfs-eval — the TC-NFS evaluation (Su et al., SYSTOR 2020), scaled to this machine.

Three server configurations on one XFS image, driven by the same client library
(build/bench/txnfs-nfsbench, txnfs-nfs COMPOUNDs, one process per client):

    V  Debian's unpatched ganesha.nfsd exporting a plain XFS directory (the baseline)
    F  the patched ganesha.nfsd (+ bridge) exporting the txnfs mount; COMPOUNDs untagged
    T  the same server; COMPOUNDs tagged "txn": each one a transaction (commit included)
    L  T-lazy: tagged "txn-lazy": each one a transaction committed lazily (durable at the
       daemon's next group commit, within --lazy-flush-ms; the reply does not wait)

Every repetition runs V, F, T in turn (the order rotating between repetitions) on fresh
directories; figures are medians over the repetitions, ratios T/V and F/V of the medians
(times: > 1 is slower than V; relative throughput = V/T). Groups:

    writefiles   N files per client of 1 KiB .. 16 MiB (powers of 4), as many per
                 COMPOUND as fit 1 MiB (one per COMPOUND above that), 1, 2, 4 clients
    readfiles    the same files read back right after (warm caches)
    durable      writefiles, 1 client, FILE_SYNC4 writes on every side: V's data is
                 durable before each reply as T's is at its commit
    compound     files per COMPOUND 1 .. 256 x file size 1 KiB .. 128 KiB
    shared       4 clients, 0%, 5% and 20% of each one's files in common (NFS4ERR_DELAY retries)
    macro        a source-like tree created through COMPOUNDs, listed, removed
    latency      writefiles (1 client) with 1 ms and 5 ms netem delay on the NFS ports
    memory       VmHWM of ganesha and of the txnfs daemon per workload (reset per run)
    recovery     the txnfs daemon crashes in the middle of the largest transaction;
                 `txnfs recover` timed
    profile      FUSE requests per file by opcode and the time spent in them (the
                 kernel's fuse_request_send/_end tracepoints, perf; strace of the
                 daemon without perf: counts only), F, T and L

    bench/tcnfs-eval                 # the full run (about 30-40 min here)
    bench/tcnfs-eval --quick         # smoke check, a few minutes
    bench/tcnfs-eval --groups writefiles,macro --reps 5 --out /tmp/r

Writes into --out (default bench/results/): runs.csv (every run), profile.csv,
results.md (tables, ratios against the targets), and PNG plots. Needs root (loop mount,
FUSE, tc); builds what it needs first (scripts/build: missing Debian packages, the patched
Ganesha, libfuse 3.18, meson setup on a fresh clone, ninja). Cleans up servers (by PID),
mounts, the loop device and the netem qdisc on any exit, Ctrl-C included. A benchmark,
not a test: nothing passes or fails.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
from nfsstack import (CONFIGS, MIB, NFSBENCH, REPO, Stack, ensure_built, label,
                      run_workload, tl)

KIB = 1 << 10
GROUPS = ("writefiles", "durable", "compound", "shared", "macro", "latency", "recovery", "profile")

FUSE_OPS = {1: "LOOKUP", 2: "FORGET", 3: "GETATTR", 4: "SETATTR", 5: "READLINK", 6: "SYMLINK",
            8: "MKNOD", 9: "MKDIR", 10: "UNLINK", 11: "RMDIR", 12: "RENAME", 13: "LINK",
            14: "OPEN", 15: "READ", 16: "WRITE", 17: "STATFS", 18: "RELEASE", 20: "FSYNC",
            21: "SETXATTR", 22: "GETXATTR", 23: "LISTXATTR", 24: "REMOVEXATTR", 25: "FLUSH",
            26: "INIT", 27: "OPENDIR", 28: "READDIR", 29: "RELEASEDIR", 30: "FSYNCDIR",
            31: "GETLK", 32: "SETLK", 33: "SETLKW", 34: "ACCESS", 35: "CREATE", 36: "INTERRUPT",
            37: "BMAP", 38: "DESTROY", 39: "IOCTL", 40: "POLL", 41: "NOTIFY_REPLY",
            42: "BATCH_FORGET", 43: "FALLOCATE", 44: "READDIRPLUS", 45: "RENAME2", 46: "LSEEK",
            47: "COPY_FILE_RANGE", 50: "SYNCFS", 51: "TMPFILE", 52: "STATX"}


# ------------------------------------------------------------------------------------
# scale

class Scale:
    def __init__(self, quick: bool, reps: int | None):
        self.quick = quick
        self.reps = reps or (1 if quick else 3)
        self.transport = ""   # the txnfs daemon's, set once the stack is up
        if quick:
            self.sizes = [4 * KIB, 1 * MIB, 16 * MIB]
            self.clients = [1, 4]
            self.bytes_cap = 8 * MIB          # per client and run
            self.max_files = 200
            self.grid_per = [1, 16, 256]
            self.grid_sizes = [1 * KIB, 128 * KIB]
            self.grid_files = 256
            self.shared_files = 200
            self.tree = (500, 35, 15 * KIB)
            self.delays = [1, 5]
            self.lat_sizes = [4 * KIB]
            self.prof_files = 50
        else:
            self.sizes = [KIB << (2 * i) for i in range(8)]   # 1K 4K 16K 64K 256K 1M 4M 16M
            self.clients = [1, 2, 4]
            self.bytes_cap = 64 * MIB
            self.max_files = 1000
            self.grid_per = [1 << i for i in range(9)]        # 1 .. 256
            self.grid_sizes = [1 * KIB, 4 * KIB, 16 * KIB, 64 * KIB, 128 * KIB]
            self.grid_files = 256
            self.shared_files = 200   # one COMPOUND per client: conflicts wait for lock timeouts
            self.tree = (2000, 140, 15 * KIB)                 # 1/5 of 10,000 / 700
            self.delays = [1, 5]
            self.lat_sizes = [1 * KIB, 4 * KIB, 64 * KIB, 1 * MIB, 16 * MIB]
            self.prof_files = 100

    def files_for(self, size: int) -> int:
        return max(2, min(self.max_files, self.bytes_cap // size))

    def describe(self) -> list[str]:
        sz = ", ".join(f"{label(s)}: {self.files_for(s)}" for s in self.sizes)
        return [
            f"- repetitions: {self.reps} (medians), order of V, F, T rotating per repetition",
            f"- writefiles/readfiles: files per client by size ({sz}) — at most "
            f"{self.max_files} files and {label(self.bytes_cap)}B per client and run; "
            f"clients {', '.join(map(str, self.clients))}",
            f"- compound: {self.grid_files} files per run, files per COMPOUND "
            f"{', '.join(map(str, self.grid_per))} x sizes {', '.join(map(label, self.grid_sizes))}",
            f"- shared: 4 clients x {self.shared_files} files of 4 KiB (one COMPOUND per client), "
            f"5% / 20% shared",
            f"- macro: {self.tree[0]} files, {self.tree[1]} directories, {label(self.tree[2])}B "
            f"mean (exponential) — paper: 10,000 files / 700 directories"
            + (" (1/5 scale)" if not self.quick else ""),
            f"- latency: netem {', '.join(f'{d} ms' for d in self.delays)} on the NFS ports, "
            f"writefiles sizes {', '.join(map(label, self.lat_sizes))}, 1 client",
        ] + ([f"- txnfs daemon (F, T, L): {self.transport}"] if self.transport else [])


def need_bytes(per: int, size: int) -> int:
    """--max-request / --max-response for PER files of SIZE in one COMPOUND."""
    return max(MIB, per * (size + 512) + 64 * KIB)


# ------------------------------------------------------------------------------------
# runs

FIELDS = ["group", "workload", "config", "size", "clients", "per", "shared_pct", "delay_ms",
          "rep", "seconds", "files", "bytes", "compounds", "retries", "files_per_compound",
          "ganesha_rss_kib", "ganesha_hwm_kib", "txnfs_rss_kib", "txnfs_hwm_kib"]


class Runner:
    def __init__(self, stack: Stack, out: Path, reps: int):
        self.stack, self.reps = stack, reps
        self.rows: list[dict] = []
        self.csv_file = open(out / "runs.csv", "w", newline="")
        self.csv = csv.DictWriter(self.csv_file, fieldnames=FIELDS, extrasaction="ignore")
        self.csv.writeheader()
        self.serial = 0

    def local_dir(self, config: str, d: str) -> Path:
        return (self.stack.plain if config == "V" else self.stack.mnt.path) / d.lstrip("/")

    def remove(self, config: str, d: str) -> None:
        """Untimed: the run's directory, removed locally (XFS, or through the txnfs mount)."""
        shutil.rmtree(self.local_dir(config, d), ignore_errors=True)

    def record(self, r: dict, **extra) -> dict:
        r.update(extra)
        self.rows.append(r)
        self.csv.writerow(r)
        self.csv_file.flush()
        return r

    def cell(self, group: str, steps: list[tuple[str, list[str]]], *, size=0, clients=1,
             per=0, shared_pct=0, delay_ms=0, keep=False) -> None:
        """REPS repetitions of V, F, T; each runs STEPS (workload, args) in a fresh directory
        (--dir is added), which is removed afterwards."""
        for rep in range(self.reps):
            n = len(CONFIGS)
            order = list(CONFIGS[rep % n:] + CONFIGS[:rep % n])
            for cfg in order:
                self.serial += 1
                d = f"/e{self.serial}-{group}-{cfg}"
                try:
                    for workload, args in steps:
                        os.sync()   # untimed: one run's writeback stays out of the next
                        r = run_workload(self.stack, cfg, workload, ["--dir", d, *args])
                        self.record(r, group=group, config=cfg, size=size, clients=clients,
                                    per=per, shared_pct=shared_pct, delay_ms=delay_ms, rep=rep)
                finally:
                    if not keep:
                        self.remove(cfg, d)
            print(f"  {group} {steps[0][0]} size={label(size) if size else '-'} clients={clients} "
                  f"per={per or 'fit'} pct={shared_pct} delay={delay_ms} rep {rep}: " +
                  ", ".join(f"{r['config']} {r['workload']} {r['seconds']:.3f}s"
                            for r in self.rows[-len(steps) * len(CONFIGS):]), flush=True)

    def close(self):
        self.csv_file.close()


def writefiles_args(size: int, files: int, clients: int, per: int = 0) -> tuple[list, list]:
    common = ["--files", str(files), "--size", str(size), "--clients", str(clients)]
    w = common + ["--per", str(per), "--max-request", str(need_bytes(max(per, 1), size))]
    r = common + ["--max-response", str(need_bytes(1, size))]
    return w, r


def group_writefiles(run: Runner, sc: Scale, delay_ms: int = 0, sizes=None, clients=None,
                     read=True, stable=False) -> None:
    group = "latency" if delay_ms else "durable" if stable else "writefiles"
    for size in sizes or sc.sizes:
        for nc in clients or sc.clients:
            w, r = writefiles_args(size, sc.files_for(size), nc)
            steps = [("write", w + (["--stable"] if stable else []))] + ([("read", r)] if read else [])
            run.cell(group, steps, size=size, clients=nc, delay_ms=delay_ms)


def group_compound(run: Runner, sc: Scale) -> None:
    for size in sc.grid_sizes:
        for per in sc.grid_per:
            w, _ = writefiles_args(size, max(sc.grid_files, per), 1, per)
            run.cell("compound", [("write", w)], size=size, per=per)


def group_shared(run: Runner, sc: Scale) -> None:
    for pct in (0, 5, 20):  # 0: the same run without conflicts, the reference for T
        w, _ = writefiles_args(4 * KIB, sc.shared_files, 4)
        run.cell("shared", [("write", w + ["--shared-pct", str(pct)])], size=4 * KIB, clients=4,
                 shared_pct=pct)


def group_macro(run: Runner, sc: Scale) -> None:
    files, dirs, mean = sc.tree
    a = ["--files", str(files), "--dirs", str(dirs), "--size", str(mean)]
    run.cell("macro", [("tree", a), ("list", a), ("remove", a)], size=mean)


# ------------------------------------------------------------------------------------
# netem

class Netem:
    """A delay on lo for the NFS ports only (other loopback traffic, e.g. a concurrent test
    run, is untouched): HTB root with netem under one class, u32 filters sending packets
    from or to the servers' ports there. Both directions are delayed: RTT + 2 x delay.
    (This kernel has neither netem nor prio, so this path could not be exercised here.)"""

    def __init__(self):
        self.installed = False

    @staticmethod
    def tc(*args) -> subprocess.CompletedProcess:
        return subprocess.run(["tc", *args], capture_output=True, text=True)

    def probe(self) -> tuple[bool, str]:
        if not shutil.which("tc"):
            return False, "tc (iproute2) is not installed"
        cur = self.tc("qdisc", "show", "dev", "lo").stdout.strip()
        if not cur.startswith("qdisc noqueue"):
            return False, f"lo already has a root qdisc ({cur!r}); not touching it"
        p = self.tc("qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms")
        if p.returncode != 0:
            why = f"`tc qdisc add dev lo root netem delay 1ms` failed: {p.stderr.strip()}"
            try:
                import gzip
                cfg = gzip.open("/proc/config.gz", "rt").read()
                line = next((ln for ln in cfg.splitlines() if "CONFIG_NET_SCH_NETEM" in ln), None)
                why += (f" — the kernel ({platform.release()}) says "
                        f"{line!r}" if line else " — CONFIG_NET_SCH_NETEM is absent from /proc/config.gz")
                if not Path(f"/lib/modules/{platform.release()}").exists():
                    why += f", and there is no /lib/modules/{platform.release()} to load sch_netem from"
            except OSError:
                pass
            return False, why
        d = self.tc("qdisc", "del", "dev", "lo", "root")
        if d.returncode != 0:
            return False, f"netem added but could not be removed: {d.stderr.strip()}"
        return True, "`tc qdisc add dev lo root netem delay 1ms` works (added and removed again)"

    def add(self, delay_ms: int, ports: list[int]) -> None:
        """Root HTB on lo (default class 1:1 for all other traffic, both classes far above
        loopback speed), netem under class 1:2, u32 filters on the servers' ports."""
        self.installed = True
        cmds = [["qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "1"],
                ["class", "add", "dev", "lo", "parent", "1:", "classid", "1:1", "htb", "rate", "100gbit"],
                ["class", "add", "dev", "lo", "parent", "1:", "classid", "1:2", "htb", "rate", "100gbit"],
                ["qdisc", "add", "dev", "lo", "parent", "1:2", "handle", "20:", "netem",
                 "delay", f"{delay_ms}ms", "limit", "100000"]]
        for port in ports:
            for field in ("sport", "dport"):
                cmds.append(["filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip",
                             "prio", "1", "u32", "match", "ip", field, str(port), "0xffff",
                             "flowid", "1:2"])
        for c in cmds:
            p = self.tc(*c)
            if p.returncode != 0:
                raise RuntimeError(f"tc {' '.join(c)}: {p.stderr.strip()}")

    def remove(self) -> None:
        if self.installed:
            p = self.tc("qdisc", "del", "dev", "lo", "root")
            if p.returncode != 0:
                print(f"tcnfs-eval: removing the netem qdisc: {p.stderr.strip()}", file=sys.stderr)
            self.installed = False


def measure_rtt(port: int, n: int = 20) -> float:
    """Median TCP connect time to the port, ms (one SYN/SYN-ACK round trip)."""
    import socket
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            ts.append((time.perf_counter() - t0) * 1000)
    return statistics.median(ts)


# ------------------------------------------------------------------------------------
# recovery

def recovery(stack: Stack, sc: Scale) -> dict:
    """Commit files (untagged), then overwrite them all in one tagged COMPOUND (as many
    1 KiB files as fit 1 MiB: the transaction of most operations in this benchmark) with
    the daemon set to die after half of its undo records; time `txnfs recover`."""
    files = 800
    out: dict = {"files": files}
    d = "/recovery"
    os.sync()
    run_workload(stack, "F", "write", ["--dir", d, "--files", str(files), "--size", "2048"])
    committed = sorted(p.stat().st_size for p in (stack.mnt.path / "recovery" / "c000").iterdir())
    os.sync()
    stack.p.stop()
    stack.mnt.umount()
    crash = f"undo.after_record:{files // 2}"
    out["crash_at"] = crash
    os.environ["TXNFS_CRASH_AT"] = crash
    try:
        stack.mnt.mount(*stack.txnfs_opts)
    finally:
        del os.environ["TXNFS_CRASH_AT"]
    pid = stack.mnt.pid
    stack.restart_patched()
    g = stack.p
    t0 = time.monotonic()
    p = subprocess.run([str(NFSBENCH), "write", "--port", str(g.port), "--tag", "txn",
                        "--dir", d, "--files", str(files), "--size", "1024", "--max-retries", "0"],
                       capture_output=True, text=True, timeout=600)
    out["compound_exit"] = p.returncode
    out["compound_error"] = (p.stderr.strip().splitlines() or [""])[-1]
    died = tl.wait_dead(pid, 30)
    out["daemon_died"] = died
    out["crash_after_s"] = time.monotonic() - t0
    try:
        stack.p.stop()
    except Exception:  # noqa: BLE001 — it may have died with the mount
        pass
    if not died:
        out["error"] = "the crash point did not fire"
        return out
    stack.mnt.pid = None
    tl.lazy_umount(stack.mnt.path)
    backups = stack.store.path / ".txnfs" / "backups"
    out["undo_entries"] = sum(1 for _ in backups.rglob("*")) if backups.exists() else 0
    t0 = time.monotonic()
    r = tl.txnfs("recover", stack.store.path, timeout=600)
    out["recover_s"] = time.monotonic() - t0
    out["recover_exit"] = r.returncode
    out["recover_out"] = (r.stdout.strip().splitlines() or [""])[-1]
    f = stack.store.fsck()
    out["fsck_clean"] = f.returncode == 0
    t0 = time.monotonic()
    stack.mnt.mount(*stack.txnfs_opts)
    out["remount_s"] = time.monotonic() - t0
    after = sorted(p.stat().st_size for p in (stack.mnt.path / "recovery" / "c000").iterdir())
    out["restored"] = after == committed
    stack.restart_patched()
    return out


# ------------------------------------------------------------------------------------
# FUSE request profile

READ_RE = re.compile(r'^(\d+)\s+read\((\d+),\s*(?:"((?:\\x[0-9a-f]{2})*)"|<unfinished)')
RESUMED_RE = re.compile(r'^(\d+)\s+<\.\.\. read resumed>\s*"((?:\\x[0-9a-f]{2})*)".*=\s*(\d+)')
DONE_RE = re.compile(r'\)\s*=\s*(\d+)')


PERF_RE = re.compile(r"([\d.]+):\s+fuse:fuse_request_(send|end):\s+connection (\d+) req (\d+)"
                     r"(?: opcode \d+ \(FUSE_(\w+)\))?")


def parse_perf(trace: Path, conn: int) -> tuple[dict[str, int], dict[str, float]]:
    """Requests by opcode name that `perf record -e fuse:fuse_request_send -e
    fuse:fuse_request_end` saw on connection CONN (FORGETs travel on their own queue and
    are not among them), and the µs they took in all, from the kernel's send to its end
    (the daemon's work, both wake-ups and the reply)."""
    out = subprocess.run(["perf", "script", "-F", "time,event,trace", "-i", str(trace)],
                         capture_output=True, text=True).stdout
    counts: dict[str, int] = {}
    micros: dict[str, float] = {}
    sent: dict[int, tuple[str, float]] = {}
    for m in PERF_RE.finditer(out):
        if int(m.group(3)) != conn:
            continue
        t, unique = float(m.group(1)), int(m.group(4))
        if m.group(2) == "send":
            op = m.group(5) or "?"
            counts[op] = counts.get(op, 0) + 1
            sent[unique] = (op, t)
        elif unique in sent:
            op, t0 = sent.pop(unique)
            micros[op] = micros.get(op, 0.0) + (t - t0) * 1e6
    return counts, micros


def fuse_fds(pid: int) -> set[int]:
    fds = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "/dev/fuse":
                fds.add(int(fd))
        except OSError:
            pass
    return fds


def parse_strace(path: Path, fds: set[int]) -> dict[str, int]:
    counts: dict[str, int] = {}
    pending: dict[str, int] = {}

    def count(hexs: str, ret: int) -> None:
        b = bytes(int(h, 16) for h in hexs.split("\\x")[1:])
        if ret >= 40 and len(b) >= 8:
            op = int.from_bytes(b[4:8], "little")
            name = FUSE_OPS.get(op, f"op{op}")
            counts[name] = counts.get(name, 0) + 1

    for line in path.read_text(errors="replace").splitlines():
        m = RESUMED_RE.match(line)
        if m:
            fd = pending.pop(m.group(1), None)
            if fd in fds:
                count(m.group(2), int(m.group(3)))
            continue
        m = READ_RE.match(line)
        if not m:
            continue
        fd = int(m.group(2))
        if m.group(3) is None:
            pending[m.group(1)] = fd
        elif fd in fds:
            dm = DONE_RE.search(line)
            if dm:
                count(m.group(3), int(dm.group(1)))
    return counts


def profile(stack: Stack, sc: Scale, tmp: Path) -> list[dict]:
    """FUSE requests per file by opcode, F and T, one run each (counts exact, times
    distorted): the kernel's fuse_request_send tracepoint on the mount's connection
    (perf), whatever carries the requests (/dev/fuse or io_uring); without perf, strace of
    the daemon's /dev/fuse reads, which sees no request that comes over io_uring."""
    use_perf = shutil.which("perf") is not None
    if not use_perf and stack.io_uring:
        print("tcnfs-eval: perf not installed and requests come over io_uring: no FUSE "
              "profile", file=sys.stderr)
        return []
    if not use_perf and not shutil.which("strace"):
        print("tcnfs-eval: neither perf nor strace installed: no FUSE profile", file=sys.stderr)
        return []
    conn = os.minor(os.stat(stack.mnt.path).st_dev)   # /sys/fs/fuse/connections/CONN
    n = sc.prof_files
    tf, td = max(200, n * 2), 14
    tree = ["--files", str(tf), "--dirs", str(td), "--size", str(15 * KIB)]
    cases = [
        ("write 4 KiB, all in one COMPOUND", "write", ["--files", str(n), "--size", "4096", "--per", str(n)], n, "w"),
        ("read 4 KiB, all in one COMPOUND", "read", ["--files", str(n), "--size", "4096"], n, "w"),
        ("write 1 KiB, 1 per COMPOUND", "write", ["--files", str(n), "--size", "1024", "--per", "1"], n, "w1"),
        ("write 1 MiB, 1 per COMPOUND", "write", ["--files", "8", "--size", str(MIB), "--per", "1",
                                                   "--max-request", str(need_bytes(1, MIB))], 8, "wm"),
        ("macro tree create", "tree", tree, tf + td + 1, "t"),
        ("macro list (READDIR + GETATTR)", "list", tree, tf + td, "t"),
        ("macro remove", "remove", tree, tf + td + 1, "t"),
    ]
    rows = []
    for cfg in ("F", "T", "L"):
        for name, workload, args, per_file, dkey in cases:
            d = f"/prof-{cfg}-{dkey}"
            pid = stack.mnt.pid
            fds = set() if use_perf else fuse_fds(pid)   # strace: the daemon's /dev/fuse fds
            trace = tmp / f"{'perf' if use_perf else 'strace'}-{cfg}-{workload}-{dkey}"
            os.sync()
            if use_perf:
                st = subprocess.Popen(["perf", "record", "-q", "-a", "-e", "fuse:fuse_request_send",
                                       "-e", "fuse:fuse_request_end", "-o", str(trace)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            else:
                st = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=read", "-e",
                                       "signal=none", "-xx", "-s", "8", "-o", str(trace), "-p",
                                       str(pid)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                time.sleep(1.5)   # attach to every thread
                r = run_workload(stack, cfg, workload, ["--dir", d, *args])
                time.sleep(0.5)   # late requests (RELEASE, FORGET) of this run
            finally:
                st.send_signal(signal.SIGINT)
                try:
                    st.wait(30)
                except subprocess.TimeoutExpired:
                    st.kill()
                    st.wait()
            counts, micros = parse_perf(trace, conn) if use_perf else (parse_strace(trace, fds), {})
            total = sum(counts.values())
            rows.append({"config": cfg, "case": name, "units": per_file, "total": total,
                         "per_unit": total / per_file, "seconds": r["seconds"],
                         "us_per_unit": sum(micros.values()) / per_file,
                         **{k: v for k, v in sorted(counts.items())},
                         **{f"us_{k}": v for k, v in sorted(micros.items())}})
            print(f"  profile {cfg} {name}: {total / per_file:.1f} FUSE requests per file "
                  f"({', '.join(f'{k} {v / per_file:.1f}' for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))})"
                  + (f"; {sum(micros.values()) / per_file:.0f} µs in them per file ("
                     + ", ".join(f"{k} {v / per_file:.0f}" for k, v in
                                 sorted(micros.items(), key=lambda kv: -kv[1])) + ")"
                     if micros else ""),
                  flush=True)
        for dkey in ("w", "w1", "wm"):
            shutil.rmtree(stack.mnt.path / f"prof-{cfg}-{dkey}", ignore_errors=True)
        shutil.rmtree(stack.mnt.path / f"prof-{cfg}-t", ignore_errors=True)
    return rows


# ------------------------------------------------------------------------------------
# report

def medians(rows: list[dict], group: str) -> list[dict]:
    """One row per (workload, size, clients, per, pct, delay) with median seconds etc."""
    keys = []
    for r in rows:
        if r["group"] != group:
            continue
        k = (r["workload"], r["size"], r["clients"], r["per"], r["shared_pct"], r["delay_ms"])
        if k not in keys:
            keys.append(k)
    out = []
    for k in keys:
        sel = [r for r in rows if r["group"] == group and
               (r["workload"], r["size"], r["clients"], r["per"], r["shared_pct"], r["delay_ms"]) == k]
        m = {"workload": k[0], "size": k[1], "clients": k[2], "per": k[3], "pct": k[4], "delay": k[5]}
        for c in CONFIGS:
            cs = [r for r in sel if r["config"] == c]
            if not cs:
                continue
            m[c] = statistics.median(r["seconds"] for r in cs)
            m[f"{c}_spread"] = (max(r["seconds"] for r in cs) - min(r["seconds"] for r in cs)) / m[c] if m[c] else 0
            m[f"{c}_fpc"] = statistics.median(r["files_per_compound"] for r in cs)
            m[f"{c}_bytes"] = cs[0]["bytes"]
            m[f"{c}_files"] = cs[0]["files"]
            m[f"{c}_retries"] = sum(r["retries"] for r in cs)
            m[f"{c}_ghwm"] = max(r["ganesha_hwm_kib"] for r in cs)
            m[f"{c}_thwm"] = max(r["txnfs_hwm_kib"] for r in cs)
        if "V" in m:
            for c in ("F", "T", "L"):
                if c in m:
                    m[f"{c}/V"] = m[c] / m["V"] if m["V"] else float("nan")
        out.append(m)
    return out


def lazy_cells(m: dict, factor: float | None) -> str:
    """'L s | L/V | target' cells of a table row: T-lazy against V, the target (if any) a
    multiple of F/V of the same run."""
    if "L/V" not in m:
        return "| | |"
    tgt = f"≤{factor * m['F/V']:.2f}×: {verdict(m['L/V'], factor * m['F/V'])}" if factor else ""
    return f"{m['L']:.3f} | {m['L/V']:.2f}× | {tgt} |"


def verdict(ratio: float, target: float, higher_better=False) -> str:
    ok = ratio >= target if higher_better else ratio <= target
    return "met" if ok else "missed"


def mbps(m: dict, c: str) -> float:
    return m[f"{c}_bytes"] / m[c] / 1e6 if m.get(c) else 0.0


def write_report(out: Path, sc: Scale, rows: list[dict], extra: dict, started: float) -> None:
    L: list[str] = []
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    L += [f"# TC-NFS evaluation on txnfs — {now}", "",
          f"`bench/tcnfs-eval{' --quick' if sc.quick else ''}` on {os.cpu_count()} CPUs, "
          f"kernel {platform.release()}, {time.monotonic() - started:.0f} s wall. "
          "V = Debian's ganesha.nfsd on XFS, F = patched ganesha on txnfs (transactions off), "
          "T = tagged \"txn\" (each COMPOUND a transaction, commit included). "
          "Times are medians; ratios are T/V and F/V of the medians (> 1: slower than V); "
          "relative throughput = V/T. spread = (max-min)/median of T.", "",
          "Scale (scaled down from the paper for a 2-core VM):", "", *sc.describe(),
          "- V: Debian's Ganesha accepts at most 100 operations per COMPOUND, so V sends "
          "fewer files per COMPOUND than F/T where more were asked for (the files/COMPOUND "
          "columns show what each really sent); F/T take up to 16,384.",
          "- files of 1 MiB and more travel one per COMPOUND (CREATE_SESSION asks for a "
          "request/response big enough for one file); below, as many as fit 1 MiB.", ""]

    wf = medians(rows, "writefiles")
    if wf:
        L += ["## Writefiles and Readfiles", "",
              "| workload | size | files/client | clients | files/COMPOUND V / T | V s | F s | T s | F/V | T/V | rel. thr. V/T | T spread | target (T/V) | L s | L/V | target (L/V ≤ 1.2 × F/V) |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for m in wf:
            tgt = ""
            if m["workload"] == "write":
                if m["clients"] == 1:
                    t = 1.05 if m["size"] >= MIB else 1.25
                    tgt = f"≤{t}×: {verdict(m['T/V'], t)}"
                if m["clients"] == 4 and m["size"] <= 128 * KIB:
                    tgt = f"rel. ≥0.6: {verdict(1 / m['T/V'], 0.6, True)}"
            else:
                tgt = f"rel. ≥0.9: {verdict(1 / m['T/V'], 0.9, True)}"
            L.append(f"| {m['workload']} | {label(m['size'])} | {m['T_files'] // m['clients']} | {m['clients']} | "
                     f"{m['V_fpc']:.0f} / {m['T_fpc']:.0f} | {m['V']:.3f} | {m['F']:.3f} | {m['T']:.3f} | "
                     f"{m['F/V']:.2f}× | {m['T/V']:.2f}× | {1 / m['T/V']:.2f} | {m['T_spread']:.0%} | {tgt} | "
                     + lazy_cells(m, 1.2 if m["workload"] == "write" and 256 * KIB <= m["size"] <= MIB else None))
        L.append("")
        L += ["Throughput (MB/s, all clients together):", "",
              "| workload | size | " + " | ".join(f"{c} {n}cl" for n in sc.clients for c in CONFIGS) + " |",
              "| --- | --- |" + " --- |" * (len(CONFIGS) * len(sc.clients))]
        for w in ("write", "read"):
            for size in sc.sizes:
                cells = []
                for n in sc.clients:
                    m = next((x for x in wf if x["workload"] == w and x["size"] == size and x["clients"] == n), None)
                    cells += [f"{mbps(m, c):.0f}" if m else "" for c in CONFIGS]
                L.append(f"| {w} | {label(size)} | " + " | ".join(cells) + " |")
        L.append("")

    du = medians(rows, "durable")
    if du:
        L += ["## Writefiles with durable writes on every side (1 client, FILE_SYNC4)", "",
              "T commits every COMPOUND durably (syncfs of the store + SQLite fsync); with "
              "UNSTABLE writes V and F leave the data in the page cache. Here every WRITE is "
              "FILE_SYNC4 (V: an fsync per file on XFS; F, T: through FUSE), so V pays for "
              "durability too.", "",
              "| size | files | V s | F s | T s | F/V | T/V | T/V with UNSTABLE writes | target (T/V) |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for m in du:
            b = next((x for x in wf if x["workload"] == "write" and x["size"] == m["size"]
                      and x["clients"] == 1), None)
            t = 1.05 if m["size"] >= MIB else 1.25
            L.append(f"| {label(m['size'])} | {m['T_files']} | {m['V']:.3f} | {m['F']:.3f} | {m['T']:.3f} | "
                     f"{m['F/V']:.2f}× | {m['T/V']:.2f}× | {(format(b['T/V'], '.2f') + '×') if b else ''} | "
                     f"≤{t}×: {verdict(m['T/V'], t)} |")
        L.append("")

    cg = medians(rows, "compound")
    if cg:
        L += ["## Compounding degree (1 client, write)", "",
              "T/V (F/V) per file size and files asked per COMPOUND; V capped at 100 "
              "operations per COMPOUND (the files it really sent per COMPOUND in brackets).", "",
              "| size \\ per | " + " | ".join(str(p) for p in sc.grid_per) + " |",
              "| --- |" + " --- |" * len(sc.grid_per)]
        for size in sc.grid_sizes:
            cells = []
            for p in sc.grid_per:
                m = next((x for x in cg if x["size"] == size and x["per"] == p), None)
                lz = f" L {m['L/V']:.2f}×" if m and "L/V" in m else ""
                cells.append(f"{m['T/V']:.2f}× ({m['F/V']:.2f}×){lz} [{m['V_fpc']:.0f}]" if m else "")
            L.append(f"| {label(size)} | " + " | ".join(cells) + " |")
        L.append("")
        for size, per, t in ((KIB, 1, 1.5), (128 * KIB, 32, 1.15)):
            m = next((x for x in cg if x["size"] == size and x["per"] == per), None)
            if m:
                L.append(f"- {per} × {label(size)} per COMPOUND: T/V {m['T/V']:.2f}× "
                         f"(target ≤{t}×: {verdict(m['T/V'], t)}); V sent {m['V_fpc']:.0f} per COMPOUND")
        m = next((x for x in cg if x["size"] == KIB and x["per"] == 1), None)
        if m and "L/V" in m:
            L.append(f"- 1 × 1 KiB per COMPOUND, T-lazy: L/V {m['L/V']:.2f}× against F/V "
                     f"{m['F/V']:.2f}× (target L/V ≤ 1.5 × F/V = {1.5 * m['F/V']:.2f}×: "
                     f"{verdict(m['L/V'], 1.5 * m['F/V'])})")
        L.append("")

    sh = medians(rows, "shared")
    if sh:
        L += ["## Shared files (4 clients, 4 KiB files)", "",
              "| shared | V s | F s | T s | F/V | T/V | rel. thr. V/T | T / T(0 %) | NFS4ERR_DELAY retries T (all reps) | files/COMPOUND T |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        t0 = next((m["T"] for m in sh if m["pct"] == 0), None)
        for m in sh:
            rel = f"{m['T'] / t0:.2f}×" if t0 else ""
            L.append(f"| {m['pct']}% | {m['V']:.3f} | {m['F']:.3f} | {m['T']:.3f} | {m['F/V']:.2f}× | "
                     f"{m['T/V']:.2f}× | {1 / m['T/V']:.2f} | {rel} | {m['T_retries']} | {m['T_fpc']:.0f} |")
        L.append("")

    mc = medians(rows, "macro")
    if mc:
        L += ["## Metadata macro workload (source-like tree)", "",
              "| step | V s | F s | T s | F/V | T/V | COMPOUNDs V / T | target (T/V ≤1.3×) |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        tot = {c: 0.0 for c in CONFIGS}
        for m in mc:
            for c in CONFIGS:
                tot[c] += m[c]
            comp = lambda c: statistics.median(r["compounds"] for r in rows if r["group"] == "macro" and  # noqa: E731
                                               r["workload"] == m["workload"] and r["config"] == c)
            L.append(f"| {m['workload']} | {m['V']:.3f} | {m['F']:.3f} | {m['T']:.3f} | {m['F/V']:.2f}× | "
                     f"{m['T/V']:.2f}× | {comp('V'):.0f} / {comp('T'):.0f} | {verdict(m['T/V'], 1.3)} |")
        L.append(f"| **all three** | {tot['V']:.3f} | {tot['F']:.3f} | {tot['T']:.3f} | "
                 f"{tot['F'] / tot['V']:.2f}× | {tot['T'] / tot['V']:.2f}× | | {verdict(tot['T'] / tot['V'], 1.3)} |")
        L.append("")

    L += ["## Latency (netem)", "", extra.get("netem", "not run"), ""]
    lt = medians(rows, "latency")
    if lt:
        base = {(m["size"]): m for m in wf if m["workload"] == "write" and m["clients"] == 1}
        L += ["| delay each way | measured connect RTT | size | V s | F s | T s | F/V | T/V | T/V without delay |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for m in lt:
            b = base.get(m["size"])
            L.append(f"| {m['delay']} ms | {extra.get('rtt', {}).get(m['delay'], 0):.2f} ms | {label(m['size'])} | "
                     f"{m['V']:.3f} | {m['F']:.3f} | {m['T']:.3f} | {m['F/V']:.2f}× | {m['T/V']:.2f}× | "
                     f"{b['T/V']:.2f}× |" if b else "|")
        L.append("")

    L += ["## Memory (peak VmHWM per run, MiB; reset before every run)", "",
          "| group | workload | ganesha V | ganesha F | ganesha T | txnfs daemon F | txnfs daemon T |",
          "| --- | --- | --- | --- | --- | --- | --- |"]
    seen = []
    for r in rows:
        k = (r["group"], r["workload"])
        if k not in seen:
            seen.append(k)
    for g, w in seen:
        sel = [r for r in rows if r["group"] == g and r["workload"] == w]
        mx = lambda c, f: max((r[f] for r in sel if r["config"] == c), default=0) / 1024  # noqa: E731
        L.append(f"| {g} | {w} | {mx('V', 'ganesha_hwm_kib'):.0f} | {mx('F', 'ganesha_hwm_kib'):.0f} | "
                 f"{mx('T', 'ganesha_hwm_kib'):.0f} | {mx('F', 'txnfs_hwm_kib'):.0f} | {mx('T', 'txnfs_hwm_kib'):.0f} |")
    L.append("")

    rec = extra.get("recovery")
    L += ["## Recovery after a crash in the middle of the largest transaction", ""]
    if rec:
        if "error" in rec or "recover_s" not in rec:
            L.append(f"- not measured: {rec}")
        else:
            L += [f"- {rec['files']} committed 2 KiB files overwritten with 1 KiB in ONE tagged COMPOUND "
                  f"(the most operations per transaction in this benchmark); daemon mounted with "
                  f"`TXNFS_CRASH_AT={rec['crash_at']}`: it died {rec['crash_after_s']:.2f} s into the "
                  f"COMPOUND (client saw: {rec['compound_error'] or 'exit ' + str(rec['compound_exit'])})",
                  f"- entries left in the store's backup area: {rec['undo_entries']}",
                  f"- `txnfs recover`: **{rec['recover_s']:.2f} s** (exit {rec['recover_exit']}: "
                  f"{rec['recover_out']}); fsck clean: {rec['fsck_clean']}; the next mount took "
                  f"{rec['remount_s']:.2f} s; every file back to its committed 2 KiB: {rec['restored']}"]
    else:
        L.append("- not run")
    L.append("")

    prof = extra.get("profile") or []
    if prof:
        ops = sorted({k for r in prof for k in r if k.isupper()},
                     key=lambda k: -sum(r.get(k, 0) / r["units"] for r in prof))
        L += ["## FUSE requests per file (requests the kernel sent to the txnfs daemon, one run each)", "",
              "Per file (tree steps: per file or directory). V has no FUSE layer. "
              "One FUSE round trip costs ~20–25 µs here, a direct XFS syscall ~1–2 µs.", "",
              "| config | case | total | " + " | ".join(ops) + " |",
              "| --- | --- | --- |" + " --- |" * len(ops)]
        for r in prof:
            L.append(f"| {r['config']} | {r['case']} | {r['per_unit']:.1f} | " +
                     " | ".join(f"{r.get(k, 0) / r['units']:.1f}" if r.get(k) else "" for k in ops) + " |")
        L.append("")
        if any(r.get("us_per_unit") for r in prof):
            L += ["Time in those requests per file (µs, from the kernel's send to the request's "
                  "end: the daemon's work, its wake-ups and the reply; traced, so slower than "
                  "untraced runs):", "",
                  "| config | case | total µs | " + " | ".join(ops) + " |",
                  "| --- | --- | --- |" + " --- |" * len(ops)]
            for r in prof:
                L.append(f"| {r['config']} | {r['case']} | {r.get('us_per_unit', 0):.0f} | " +
                         " | ".join(f"{r.get('us_' + k, 0) / r['units']:.0f}" if r.get('us_' + k) else ""
                                    for k in ops) + " |")
            L.append("")

    L += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in sorted(out.glob("*.png"))] + [""]
    (out / "results.md").write_text("\n".join(L))


def plots(out: Path, sc: Scale, rows: list[dict]) -> None:
    try:
        import matplotlib
    except ImportError:
        print("tcnfs-eval: installing python3-matplotlib (apt)", flush=True)
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", "python3-matplotlib"], check=False,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        try:
            import matplotlib
        except ImportError:
            print("tcnfs-eval: no matplotlib: no plots", file=sys.stderr)
            return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wf = medians(rows, "writefiles")
    if wf:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        for ax, w in zip(axes, ("write", "read")):
            for n in sc.clients:
                ms = [m for m in wf if m["workload"] == w and m["clients"] == n]
                xs = [m["size"] for m in ms]
                ax.plot(xs, [m["T/V"] for m in ms], "o-", label=f"T/V {n} client(s)")
                ax.plot(xs, [m["F/V"] for m in ms], "x--", alpha=0.6, label=f"F/V {n} client(s)")
            ax.axhline(1, color="gray", lw=0.8)
            if w == "write":
                du = [m for m in medians(rows, "durable")]
                if du:
                    ax.plot([m["size"] for m in du], [m["T/V"] for m in du], "s-.", color="black",
                            label="T/V 1 client, FILE_SYNC4 on every side")
                ax.axhline(1.25, color="red", lw=0.8, ls=":", label="target 1.25× (1 client)")
            ax.set_xscale("log", base=2)
            ax.set_xticks(sc.sizes, [label(s) for s in sc.sizes])
            ax.set_xlabel("file size")
            ax.set_ylabel("time ratio vs V (Debian Ganesha on XFS)")
            ax.set_title("Writefiles" if w == "write" else "Readfiles")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "ratio_writefiles_readfiles.png", dpi=110)
        plt.close(fig)

        show = [s for s in sc.sizes if s in (4 * KIB, 64 * KIB, MIB, 16 * MIB)] or sc.sizes[:3]
        fig, axes = plt.subplots(2, len(show), figsize=(4 * len(show), 7), squeeze=False)
        for row, w in enumerate(("write", "read")):
            for ax, size in zip(axes[row], show):
                for c in CONFIGS:
                    ms = [m for m in wf if m["workload"] == w and m["size"] == size]
                    ax.plot([m["clients"] for m in ms], [mbps(m, c) for m in ms], "o-", label=c)
                ax.set_xticks(sc.clients)
                ax.set_xlabel("clients")
                ax.set_ylabel("MB/s")
                ax.set_title(f"{'Writefiles' if w == 'write' else 'Readfiles'} {label(size)}")
                ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "throughput_vs_clients.png", dpi=110)
        plt.close(fig)

    cg = medians(rows, "compound")
    if cg:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for size in sc.grid_sizes:
            ms = [m for m in cg if m["size"] == size]
            ax.plot([m["per"] for m in ms], [m["T/V"] for m in ms], "o-", label=f"T/V {label(size)}")
        ax.axhline(1, color="gray", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("files per COMPOUND asked (V: at most 100 operations)")
        ax.set_ylabel("time ratio T/V")
        ax.set_title("Compounding degree")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "ratio_compounding.png", dpi=110)
        plt.close(fig)

    bars = []
    for m in medians(rows, "macro"):
        bars.append((f"macro {m['workload']}", m["T/V"], m["F/V"]))
    for m in medians(rows, "shared"):
        bars.append((f"shared {m['pct']}%", m["T/V"], m["F/V"]))
    for m in medians(rows, "latency"):
        if m["size"] == 4 * KIB:
            bars.append((f"4K +{m['delay']}ms", m["T/V"], m["F/V"]))
    if bars:
        fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(bars)), 4.5))
        xs = range(len(bars))
        ax.bar([x - 0.2 for x in xs], [b[1] for b in bars], 0.4, label="T/V")
        ax.bar([x + 0.2 for x in xs], [b[2] for b in bars], 0.4, label="F/V")
        ax.set_xticks(list(xs), [b[0] for b in bars], rotation=30, ha="right")
        ax.axhline(1, color="gray", lw=0.8)
        ax.set_yscale("log")
        ax.set_ylabel("time ratio vs V (log)")
        ax.set_title("Macro, shared files, latency")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "ratio_macro_shared_latency.png", dpi=110)
        plt.close(fig)


# ------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(
        prog="bench/tcnfs-eval", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke check: small counts, 1 repetition")
    ap.add_argument("--reps", type=int, help="repetitions (default 3, --quick 1)")
    ap.add_argument("--groups", default=",".join(GROUPS), help=f"any of {','.join(GROUPS)}")
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    ap.add_argument("--image-gib", type=int, default=16)
    ap.add_argument("--txnfs-opts", default="", help="extra `txnfs mount` options")
    ap.add_argument("--sizes", help="writefiles: file sizes in KiB, comma-separated "
                    "(default: the scale's)")
    ap.add_argument("--clients", help="writefiles: client counts, comma-separated")
    ap.add_argument("--grid", help="compound: SIZE_KIB:PER[,SIZE_KIB:PER...] instead of the grid")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("tcnfs-eval: run as root", file=sys.stderr)
        return 2
    groups = [g for g in a.groups.split(",") if g]
    assert set(groups) <= set(GROUPS), f"--groups: any of {GROUPS}"
    ensure_built()
    sc = Scale(a.quick, a.reps)
    if a.sizes:
        sc.sizes = [int(x) * KIB for x in a.sizes.split(",")]
    if a.clients:
        sc.clients = [int(x) for x in a.clients.split(",")]
    if a.grid:
        pairs = [tuple(int(v) for v in x.split(":")) for x in a.grid.split(",")]
        sc.grid_sizes = sorted({p[0] * KIB for p in pairs})
        sc.grid_per = sorted({p[1] for p in pairs})
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.png"):
        old.unlink()
    started = time.monotonic()
    extra: dict = {}

    def on_term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)

    print(f"tcnfs-eval: {'quick' if a.quick else 'full'} run, groups {','.join(groups)}, "
          f"{sc.reps} reps, {os.cpu_count()} CPUs; results in {out}", flush=True)
    for line in sc.describe():
        print(" ", line)
    stack = Stack(a.image_gib, a.txnfs_opts.split())
    sc.transport = ("FUSE over io_uring where the kernel offers it (TXNFS_IO_URING=0: /dev/fuse)"
                    if stack.io_uring else "/dev/fuse")
    print(f"  - txnfs daemon (F, T, L): {sc.transport}")
    run = Runner(stack, out, sc.reps)
    netem = Netem()
    prof_rows: list[dict] = []
    try:
        if "writefiles" in groups:
            print("== writefiles / readfiles", flush=True)
            group_writefiles(run, sc)
        if "durable" in groups:
            print("== writefiles with FILE_SYNC4 writes (durable on every side)", flush=True)
            group_writefiles(run, sc, clients=[1], read=False, stable=True)
        if "compound" in groups:
            print("== compounding degree", flush=True)
            group_compound(run, sc)
        if "shared" in groups:
            print("== shared files", flush=True)
            group_shared(run, sc)
        if "macro" in groups:
            print("== metadata macro", flush=True)
            group_macro(run, sc)
        if "latency" in groups:
            print("== latency (netem)", flush=True)
            ok, why = netem.probe()
            print(f"  {why}", flush=True)
            if ok:
                ports = [stack.v.port, stack.p.port]
                rtt0 = measure_rtt(stack.p.port)
                extra["rtt"] = {0: rtt0}
                for d in sc.delays:
                    try:
                        netem.add(d, ports)
                        extra["rtt"][d] = measure_rtt(stack.p.port)
                        print(f"  netem {d} ms each way on ports {ports}: connect RTT "
                              f"{extra['rtt'][d]:.2f} ms (without: {rtt0:.2f} ms)", flush=True)
                        group_writefiles(run, sc, delay_ms=d, sizes=sc.lat_sizes, clients=[1], read=False)
                    finally:
                        netem.remove()
                extra["netem"] = (f"{why}. Runs used a delay on the NFS ports only (HTB qdisc on lo, "
                                  f"netem on one band, u32 filters on the servers' ports, both "
                                  f"directions: RTT + 2 × delay; other loopback traffic untouched). "
                                  f"Measured TCP connect RTT: " +
                                  ", ".join(f"{k} ms → {v:.2f} ms" for k, v in extra["rtt"].items()) + ".")
            else:
                extra["netem"] = f"netem not usable here: {why}"
        if "profile" in groups:
            print("== FUSE request profile", flush=True)
            prof_rows = profile(stack, sc, stack.img.tmp)
            extra["profile"] = prof_rows
            if prof_rows:
                keys = ["config", "case", "units", "total", "per_unit", "seconds"]
                keys += sorted({k for r in prof_rows for k in r} - set(keys))
                with open(out / "profile.csv", "w", newline="") as f:
                    w = csv.DictWriter(f, fieldnames=keys, restval=0)
                    w.writeheader()
                    w.writerows(prof_rows)
        if "recovery" in groups:
            print("== recovery after a crash mid-transaction", flush=True)
            extra["recovery"] = recovery(stack, sc)
            print(f"  {extra['recovery']}", flush=True)
    finally:
        netem.remove()
        run.close()
        stack.close()
    if run.rows or extra:
        plots(out, sc, run.rows)
        write_report(out, sc, run.rows, extra, started)
        print(f"\n{(out / 'results.md').read_text()}")
    print(f"tcnfs-eval: done in {time.monotonic() - started:.0f} s; {out}/results.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
