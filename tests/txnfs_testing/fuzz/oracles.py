"""The oracles: Fuzzer runs a case under one of them on a fresh store of one XFS image
(txnfs_testing.crash.env.Env) and returns None or the Failure (a signature kept while shrinking).

    abort   snapshot; the lists in a transaction; abort: the same tree again
    commit  the same lists on plain XFS and in a committed transaction: the same results
            and the same tree (lazy commits on odd seeds)
    plain   as commit, outside transactions (with a Bystander's idle transaction open on
            even seeds)
    crash   consecutive transactions, a crash (kill -9, power cut, injected point),
            recovery: the state after some prefix of the transactions

Every run ends with fsck, the handle rows and an empty backups directory. On half the
abort and commit seeds an Observer (a plain reader) snapshots the mount meanwhile: it
must only ever see committed state. Fuzzer.shrink minimises a failing case (ddmin).
Stats counts what ran, for the summary.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from txnfs_testing.crash.env import Env
from txnfs_testing import snapshot as snap
from txnfs_testing import txnfs_lib as tl
from txnfs_testing.fuzz.divergences import DIVERGENCE_BY_ID, divergence_of
from txnfs_testing.fuzz.generator import BEGIN2_LOCK_TIMEOUT_MS, begin_of, txn_segments
from txnfs_testing.fuzz.tree import areas, populate
from txnfs_testing.fuzz.workers import Group, OP_DEADLINE, Stall


def committed_view(env, tids) -> dict:
    """STORE/tree as it will be once transactions `tids` have committed (and are
    durable): what they removed is stashed in their log directories, whose links to those
    objects go once the commit is durable."""
    if isinstance(tids, int):
        tids = [tids]
    for _ in range(20):   # a group commit may drop links meanwhile: look again
        view = strip_atime(snap.snapshot(env.store.tree, handles=False))
        held = _held_links(env, tids)
        if strip_atime(snap.snapshot(env.store.tree, handles=False)) == view:
            break
    for v in view.values():
        if v.get("type") != stat.S_IFDIR and v.get("ino") in held:
            v["nlink"] -= held[v["ino"]]
    return view


def _held_links(env, tids) -> dict[int, int]:
    """inode -> links the logs of `tids` hold on objects their transactions removed."""
    held: dict[int, int] = {}
    for tid in tids:
        logdir = Path(env.store.path) / ".txnfs" / "backups" / str(tid)
        if not logdir.is_dir():
            continue
        try:
            ents = [(e.name, e.stat(follow_symlinks=False)) for e in os.scandir(logdir)]
        except FileNotFoundError:
            continue   # the cleaner is discarding the log of a durable commit
        for name, st in ents:
            if name.endswith(".d") and not stat.S_ISDIR(st.st_mode):
                held[st.st_ino] = held.get(st.st_ino, 0) + 1
    return held


@dataclass
class Failure(Exception):
    oracle: str
    kind: str            # the failure signature kept while shrinking
    detail: str
    case: dict = None
    report: str = ""

    def __str__(self):
        return f"{self.oracle}: {self.kind}: {self.detail}"


@dataclass
class Stats:
    runs: dict = field(default_factory=dict)         # oracle/procs -> count
    ops: dict = field(default_factory=dict)          # op name -> executed count
    flags: dict = field(default_factory=dict)        # "rename:EXCHANGE" -> count
    divergences: dict = field(default_factory=dict)  # id -> count
    crash: dict = field(default_factory=dict)        # kind/point -> count
    observed: dict = field(default_factory=dict)     # Observer: "runs"/"snapshots" -> count
    failures: list = field(default_factory=list)

    def count_ops(self, lists):
        for lst in lists:
            for o in lst:
                self.ops[o["o"]] = self.ops.get(o["o"], 0) + 1
                for f in op_flags(o):
                    self.flags[f] = self.flags.get(f, 0) + 1


def op_flags(o) -> list[str]:
    out = []
    if o["o"] == "rename":
        out.append(f"rename:{o['fl']}")
    if o["o"] == "fallocate":
        out.append(f"fallocate:{o['mode']}")
    if o["o"] in ("open", "write", "dwrite"):
        out += [f"open:{f}" for f in o.get("fl", "").split("|") if f]
        if o["o"] == "dwrite":
            out.append("open:O_DIRECT")
    if o["o"] == "dread":
        out += ["open:O_RDONLY", "open:O_DIRECT"]
    if o.get("u"):
        out.append(f"uid:{o['o']}")
    if "um" in o:
        out.append(f"umask:{o['o']}")
    return out


def strip_atime(s):
    return snap.strip(s, ("atime_ns",))


class Fuzzer:
    """One XFS image (crash.env.Env) for many runs; each run gets a fresh store and raw dir."""

    def __init__(self, workdir: Path | None = None, log=print, deadline=OP_DEADLINE):
        self.own = workdir is None
        self.work = Path(tempfile.mkdtemp(prefix="txnfs-fuzz-")) if workdir is None else workdir
        # (mkdtemp makes it 0700: the ops run as nobody must reach the trees below it)
        os.chmod(self.work, 0o755)
        self.env = Env(self.work, size=1 << 30)
        self.n = 0
        self.log = log
        self.deadline = deadline
        self.stats = Stats()

    def close(self):
        problems = self.env.close()
        if self.own and not problems:
            shutil.rmtree(self.work, ignore_errors=True)
        return problems

    # -- helpers -----------------------------------------------------------
    def _fresh(self):
        self.n += 1
        env = self.env
        env.store = tl.Store(env.xfs / f"store{self.n}").init()
        raw = env.xfs / f"raw{self.n}"
        raw.mkdir()
        return raw

    def _mount(self, name, crash_at=None, extra=()):
        rc, _ = self.env.mount(f"{self.n}-{name}", crash_at, extra=extra)
        if rc is not None:
            err = (self.env.logs / f"{self.n}-{name}.stderr").read_text()[-2000:]
            raise Failure("", "mount-failed", f"txnfs mount ({name}) exited {rc}: {err}")

    def _drop_store(self, raw):
        """Free the space of a passing run (the image is small)."""
        shutil.rmtree(self.env.store.path, ignore_errors=True)
        if raw:
            shutil.rmtree(raw, ignore_errors=True)
        for f in self.env.logs.glob(f"{self.n}-*"):
            f.unlink()

    def _gdb(self) -> str:
        pid = self.env.pid
        if not pid:
            return "(no daemon)"
        p = tl.run(["gdb", "-batch", "-p", str(pid), "-ex", "thread apply all bt"], timeout=120)
        return p.stdout[-20000:] + p.stderr[-2000:]

    def _umount_fsck(self, oracle):
        env = self.env
        env.umount()
        p = env.store.fsck()
        if p.returncode != 0:
            raise Failure(oracle, "fsck", f"txnfs fsck exit {p.returncode}:\n{tl.output_of(p)}")
        rows = {r["ino"] for r in env.store.query("SELECT ino FROM handles")}
        objs = {e["ino"]: path for path, e in snap.snapshot(env.store.tree, handles=False).items()}
        norow = sorted(p for ino, p in objs.items() if ino not in rows)
        if norow:
            raise Failure(oracle, "handle-rows", f"objects of STORE/tree without a handle row: {norow}")
        left = snap.backups_left(env.store)
        if left:
            raise Failure(oracle, "backups-left", f"STORE/.txnfs/backups after the run: {left[:10]}")

    def _run_group(self, root, lists, oracle, txn_bind=None, end=None, stop_after=None,
                   crash_cb=None, begin="begin", before_end=None, view=False):
        """Runs the lists in a Group; with txn_bind (the mount) inside a transaction bound
        to the leader, ended by `end` ("commit" / "abort" / None: left open; `before_end()`
        is called right before), the workers working through its view with `view`.
        Returns (results, end_rc, tid)."""
        g = Group(root, len(lists))
        tid = None
        try:
            if txn_bind:
                set_rc = 0
                if begin == "begin2":
                    rc, tid = tl.txn_begin2_rc(txn_bind, tl.TXNFS_BIND_PROCESS, g.leader,
                                               BEGIN2_LOCK_TIMEOUT_MS)
                elif begin == "begin3":
                    rc, tid, set_rc = tl.txn_begin3_rc(
                        txn_bind, tl.TXNFS_BIND_PROCESS, g.leader, BEGIN2_LOCK_TIMEOUT_MS,
                        tl.lock_records(tl.lock_node(1), tl.lock_object(0, tl.TXNFS_LOCK_IS)),
                        BEGIN2_LOCK_TIMEOUT_MS)
                else:
                    rc, tid = tl.txn_begin_rc(txn_bind, tl.TXNFS_BIND_PROCESS, g.leader)
                if rc != 0 or set_rc != 0:
                    raise Failure(oracle, "begin", f"txnfs_{begin}: "
                                                   f"{os.strerror(-(rc or set_rc))}")
                if view and any(g.enter_view(tl.view_path(txn_bind, tid), tid)):
                    raise Failure(oracle, "begin", "the workers could not enter the view")
            try:
                res = g.run(lists, self.deadline, stop_after=stop_after,
                            on_step=crash_cb)
            except Stall as e:
                bt = self._gdb()
                raise Failure(oracle, "stall", str(e), report="gdb backtrace of the daemon:\n" + bt)
            g.end_workers()
            if not g.workers_done(self.deadline):
                bt = self._gdb()
                raise Failure(oracle, "stall", "workers did not exit (a close/release hangs)",
                              report="gdb backtrace of the daemon:\n" + bt)
            end_rc = None
            if before_end:
                before_end()
            if txn_bind and end:
                fn = {"commit": tl.txn_commit, "commit-lazy": tl.txn_commit_lazy,
                      "commit-2pc": tl.txn_commit_2pc, "abort-2pc": tl.txn_abort_2pc}.get(end, tl.txn_abort)
                end_rc = _with_deadline(lambda: fn(txn_bind, tid), self.deadline)
                if end_rc == "stall":
                    bt = self._gdb()
                    raise Failure(oracle, "stall", f"txnfs_{end} did not return",
                                  report="gdb backtrace of the daemon:\n" + bt)
            return res, end_rc, tid
        finally:
            g.close()

    def _count_two_phase(self, case):
        if case.get("two_phase"):
            k = f"{case['oracle']} oracle: ended through both phases (prepare, resolve)"
            self.stats.crash[k] = self.stats.crash.get(k, 0) + 1

    def _count_observer(self, obs):
        if obs:
            for k, v in (("runs", 1), ("snapshots", obs.snapshots)):
                self.stats.observed[k] = self.stats.observed.get(k, 0) + v

    # -- abort --------------------------------------------------------------
    def run_abort(self, case):
        oracle = "abort"
        env = self.env
        raw = None
        self._fresh()
        self._mount("a")
        populate(env.mnt, case["seed"], areas(case["procs"], case["shared"]))
        before = strip_atime(snap.stable_snapshot(env.mnt))
        obs = (Observer(env.mnt, before, case["lists"], case.get("view", False))
               if case.get("observer") else None)
        try:
            res, rc, _ = self._run_group(env.mnt, case["lists"], oracle, env.mnt,
                                         "abort-2pc" if case.get("two_phase") else "abort",
                                         begin=begin_of(case), view=case.get("view", False))
        finally:
            seen = obs.stop() if obs else None  # it watched the rollback too
        self._count_observer(obs)
        if seen:
            raise Failure(oracle, "isolation", seen)
        if rc != 0:
            raise Failure(oracle, "abort-rc", f"txnfs_abort returned {rc} ({os.strerror(-rc)})")
        self._count_two_phase(case)
        after = strip_atime(snap.snapshot(env.mnt))
        d = snap.diff(before, after)
        if d:
            raise Failure(oracle, "tree", "after abort the tree differs from before:\n  " + "\n  ".join(d))
        self._umount_fsck(oracle)
        self._drop_store(raw)
        return res

    # -- commit / plain -------------------------------------------------------
    def run_commit(self, case, txn=True):
        oracle = "commit" if txn else "plain"
        env = self.env
        raw = self._fresh()
        self._mount("c")
        ars = areas(case["procs"], case["shared"])
        populate(env.mnt, case["seed"], ars)
        populate(raw, case["seed"], ars)
        before_inos = {e["ino"] for e in snap.snapshot(env.mnt, handles=False).values()}
        by = Bystander(env.mnt) if (not txn and case.get("bystander")) else None
        obs = (Observer(env.mnt, strip_atime(snap.stable_snapshot(env.mnt)), case["lists"],
                        case.get("view", False))
               if txn and case.get("observer") else None)
        seen = []
        try:
            res_m, rc, _ = self._run_group(env.mnt, case["lists"], oracle, env.mnt if txn else None,
                                           "commit-lazy" if case.get("lazy")
                                           else "commit-2pc" if case.get("two_phase") else "commit",
                                           begin=begin_of(case), view=case.get("view", False),
                                           before_end=obs and (lambda: seen.append(obs.stop())))
        finally:
            if by:
                by.close()
            if obs and not seen:
                seen.append(obs.stop())
        self._count_observer(obs)
        if seen and seen[0]:
            raise Failure(oracle, "isolation", seen[0])
        if txn and rc != 0:
            raise Failure(oracle, "commit-rc", f"txnfs_commit returned {rc} ({os.strerror(-rc)})")
        self._count_two_phase(case)
        if case.get("lazy"):
            self.stats.crash["commit oracle: lazy commits"] = \
                self.stats.crash.get("commit oracle: lazy commits", 0) + 1
        ctx = {"txn": txn or by is not None, "before_inos": before_inos}
        skip_lists, divs = [], {}
        for k, lst in enumerate(case["lists"]):
            sl = []
            for i, o in enumerate(lst):
                d = divergence_of(o, res_m[k][i], ctx)
                if d:           # counted and reported; XFS runs a harmless stat instead
                    divs[(k, i)] = d
                    self.stats.divergences[d] = self.stats.divergences.get(d, 0) + 1
                    if not DIVERGENCE_BY_ID[d].same_op:
                        o = {"o": "stat", "p": ".", "instead_of": o["o"]}
                sl.append(o)
            skip_lists.append(sl)
        res_r, _, _ = self._run_group(raw, skip_lists, oracle)
        for k, lst in enumerate(case["lists"]):
            for i, o in enumerate(lst):
                if (k, i) in divs:
                    continue
                a, b = dict(res_r[k][i] or {}), dict(res_m[k][i] or {})
                for x in (a, b):
                    x.pop("ino", None)
                    x.pop("ft", None)
                    x.pop("ftq", None)
                if a != b:
                    sig = lambda r: r.get("e", "ok")
                    raise Failure(oracle, f"result:{o['o']}:{sig(a)}->{sig(b)}",
                                  f"process {k} op {i} {json.dumps(o)}: XFS {json.dumps(a)}, "
                                  f"txnfs {json.dumps(b)}")
        sm = snap.shape(snap.snapshot(env.mnt, handles=False))
        sr = snap.shape(snap.snapshot(raw, handles=False))
        d = snap.diff(sr, sm)
        if d:
            raise Failure(oracle, "tree", "the tree differs from XFS (expected = XFS):\n  " + "\n  ".join(d))
        self._umount_fsck(oracle)
        self._drop_store(raw)
        return res_m

    # -- crash ----------------------------------------------------------------
    def run_crash(self, case):
        """The ops run as consecutive transactions (txn_segments), committed lazily or
        durably; a crash comes after a chosen number of ops, or at an injected point.
        After recovery STORE/tree must be the state after the first i transactions for
        some i: no transaction partly there (atomicity), and only a suffix of the
        committed ones lost (the lazy-commit contract) -- and i must include every
        transaction whose durable commit returned, or that a later durable commit or a
        sync covered (docs/crash-model.md)."""
        oracle = "crash"
        env = self.env
        c = case["crash"]
        segs, lazy, flush_ms = txn_segments(case)
        extra = ("--lazy-flush-ms", str(flush_ms)) if flush_ms else ()
        self._fresh()
        self._mount("p")
        populate(env.mnt, case["seed"], areas(case["procs"], case["shared"]))
        env.umount()
        point = c.get("point")
        recovery_point = point and point.startswith("recover.")
        self._mount("w", point if point and not recovery_point else None, extra)
        before = strip_atime(snap.stable_snapshot(env.mnt))
        # states[i]: STORE/tree after the first i transactions committed
        states = [strip_atime(snap.snapshot(env.store.tree, handles=False))]
        must = 0          # how many transactions must survive the crash
        acked = 0         # how many commits returned 0
        label = c["kind"] + (f" {point}" if point else "")
        crashed = {"done": False}

        def crash_now():
            if crashed["done"]:
                return
            crashed["done"] = True
            time.sleep(c.get("delay_ms", 0) / 1000)
            if c["kind"] == "power":
                env.power_cut()
            env.kill()

        stop = c["after"] if c["kind"] in ("kill", "power") or recovery_point else None
        g = Group(env.mnt, len(case["lists"]))
        tids = []
        try:
            for j, seg in enumerate(segs):
                last = j == len(segs) - 1
                if env.daemon_exited() is not None:
                    break
                rc, tid = tl.txn_begin_rc(env.mnt, tl.TXNFS_BIND_PROCESS, g.leader)
                if rc != 0:
                    # an injected point in begin (txn.after_begin): the daemon is exiting
                    if not (point and tl.wait_until(lambda: env.daemon_exited() is not None, 5)):
                        raise Failure(oracle, "begin", f"txnfs_begin: {os.strerror(-rc)}")
                    break
                tids.append(tid)
                if case.get("view") and any(g.enter_view(env.mnt, tid)):
                    if env.daemon_exited() is not None:
                        break
                    raise Failure(oracle, "begin", "the workers could not enter the view")
                n = sum(len(x) for x in seg)
                here = None if stop is None else max(0, stop)
                try:
                    g.run(seg, self.deadline, stop_after=here)
                except Stall as e:
                    if env.daemon_exited() is None:
                        bt = self._gdb()
                        raise Failure(oracle, "stall", str(e), report="gdb:\n" + bt)
                if stop is not None:
                    stop -= n
                    if stop < 0 or (stop == 0 and last):
                        break      # crash inside (or right at the end of) this transaction
                if env.daemon_exited() is not None:
                    break
                if last and case["end"] != "commit":
                    _with_deadline(lambda: tl.txn_abort(env.mnt, tid), self.deadline)
                    break
                states.append(committed_view(env, tids))
                commit = tl.txn_commit_lazy if lazy[j] else tl.txn_commit
                rc = _with_deadline(lambda: commit(env.mnt, tid), self.deadline)
                if rc != 0:
                    break          # the daemon died inside the commit (injected)
                acked = j + 1
                if not lazy[j]:
                    must = j + 1   # durable: this one and every earlier lazy one
            g.end_workers()
            g.workers_done(self.deadline)
            if stop is not None:
                crash_now()
        finally:
            g.close()
        fired = env.daemon_exited() == 137
        if point and not recovery_point:
            self.stats.crash[f"inject {point.split(':')[0]} {'fired' if fired else 'not reached'}"] = \
                self.stats.crash.get(f"inject {point.split(':')[0]} {'fired' if fired else 'not reached'}", 0) + 1
        else:
            self.stats.crash[c["kind"]] = self.stats.crash.get(c["kind"], 0) + 1
        if any(lazy[:len(tids)]):
            self.stats.crash["with lazy commits"] = self.stats.crash.get("with lazy commits", 0) + 1
        env.kill()
        if c["kind"] == "power":
            env.umount_xfs()
            env.mount_xfs()
        if recovery_point:
            rc, _ = env.mount(f"{self.n}-rc", point)
            key = f"inject {point.split(':')[0]} {'fired' if rc == 137 else 'not reached'}"
            self.stats.crash[key] = self.stats.crash.get(key, 0) + 1
            if rc is None:
                env.umount()
            elif rc != 137:
                raise Failure(oracle, "recovery-mount", f"mount with {point} armed exited {rc}")
        try:
            self._mount("r")
        except Failure as f:
            f.oracle = oracle
            f.report = (f.report + "\n" if f.report else "") + self._xfs_state()
            raise
        store_now = strip_atime(snap.snapshot(env.store.tree, handles=False))
        survived = [i for i, s in enumerate(states) if not snap.diff(s, store_now)]
        if not survived:
            near = min(range(len(states)), key=lambda i: len(snap.diff(states[i], store_now)))
            raise Failure(oracle, "tree", f"after {label} and recovery STORE/tree is not the state "
                          f"after any prefix of the {len(states) - 1} committed transaction(s) "
                          f"(lazy: {lazy[:len(states) - 1]}); nearest, after {near}:\n  "
                          + "\n  ".join(snap.diff(states[near], store_now)))
        if max(survived) < must:
            raise Failure(oracle, "lost-durable", f"after {label} and recovery only the first "
                          f"{max(survived)} transaction(s) survived, but {must} were durable "
                          f"(lazy: {lazy[:len(states) - 1]}); vs. the state after {must}:\n  "
                          + "\n  ".join(snap.diff(states[must], store_now)))
        if max(survived) < acked:
            k = "lost acknowledged lazy commits (a suffix)"
            self.stats.crash[k] = self.stats.crash.get(k, 0) + 1
        if max(survived) == 0:
            after = strip_atime(snap.snapshot(env.mnt))
            d = snap.diff(before, after)
            if d:
                raise Failure(oracle, "tree", f"after {label} and recovery the mount is not the "
                              "snapshot before:\n  " + "\n  ".join(d))
        self._umount_fsck(oracle)
        self._drop_store(None)

    # -- one case, any oracle ----------------------------------------------------
    def check(self, case) -> Failure | None:
        """Runs the case; returns its Failure (environment cleaned for the next run)."""
        oracle = case["oracle"]
        try:
            if oracle == "abort":
                self.run_abort(case)
            elif oracle == "commit":
                self.run_commit(case, txn=True)
            elif oracle == "plain":
                self.run_commit(case, txn=False)
            elif oracle == "crash":
                self.run_crash(case)
            else:
                raise ValueError(oracle)
            return None
        except Failure as f:
            f.oracle = f.oracle or oracle
            f.case = case
            self._reset()
            return f
        except Exception as e:  # noqa: BLE001 - an unexpected error is a failure too
            import traceback
            f = Failure(oracle, f"error:{type(e).__name__}", f"{e!r}\n{traceback.format_exc()[-3000:]}")
            f.case = case
            self._reset()
            return f

    def _xfs_state(self) -> str:
        """What the backing XFS looked like when a mount after a crash failed: rare power-cut
        runs found a store that `txnfs init` had synced missing after the remount."""
        env = self.env
        out = []
        for cmd in (["findmnt", "-n", str(env.xfs)], ["losetup", "-j", str(env.image)],
                    ["ls", "-la", str(env.xfs)], ["dmesg", "--ctime"]):
            p = tl.run(cmd)
            text = (p.stdout + p.stderr).splitlines()
            out.append(f"$ {' '.join(cmd)}\n" + "\n".join(text[-25:]))
        return "\n".join(out)

    def _reset(self):
        """After a failure: no daemon, no FUSE mount, the XFS image mounted."""
        env = self.env
        try:
            env.kill()
        except Exception:  # noqa: BLE001
            pass
        if not tl.is_mounted(env.xfs):
            env.mount_xfs()
        else:
            # a power cut leaves XFS shut down: remount it
            try:
                os.statvfs(env.xfs)
                os.listdir(env.xfs)
            except OSError:
                env.umount_xfs()
                env.mount_xfs()

    # -- shrinking ---------------------------------------------------------------
    def shrink(self, fail: Failure, budget_s=120.0, max_runs=80) -> tuple[dict, int]:
        """Delta debugging (ddmin) over the (process, op) list while the failure keeps its
        oracle and kind. Returns (minimal case, runs)."""
        case = fail.case
        items = [(k, i) for k, lst in enumerate(case["lists"]) for i in range(len(lst))]
        t0 = time.monotonic()
        runs = 0

        def build(sub):
            lists = [[] for _ in case["lists"]]
            for k, i in sub:
                lists[k].append(case["lists"][k][i])
            c = dict(case, lists=lists)
            if "crash" in case:
                c["crash"] = dict(case["crash"], after=min(case["crash"]["after"], max(0, len(sub) - 1)))
            return c

        def fails(sub):
            nonlocal runs
            if runs >= max_runs or time.monotonic() - t0 > budget_s:
                return False
            runs += 1
            # a stall is known to be one already: no need to wait the full deadline again
            # (lock waits are 250 ms on these mounts; 10 s is no ordinary slowness)
            saved = self.deadline
            if fail.kind == "stall":
                self.deadline = min(saved, 10.0)
            try:
                f = self.check(build(sub))
            finally:
                self.deadline = saved
            return f is not None and f.kind == fail.kind

        n = 2
        while len(items) >= 2:
            chunk = max(1, len(items) // n)
            subsets = [items[j:j + chunk] for j in range(0, len(items), chunk)]
            reduced = False
            for s in subsets:
                if fails(s):
                    items, n, reduced = s, 2, True
                    break
            if not reduced:
                for s in subsets:
                    comp = [x for x in items if x not in s]
                    if comp and fails(comp):
                        items, n, reduced = comp, max(n - 1, 2), True
                        break
            if not reduced:
                if n >= len(items):
                    break
                n = min(len(items), n * 2)
            if runs >= max_runs or time.monotonic() - t0 > budget_s:
                break
        return build(items), runs


class Observer:
    """A plain reader (a thread of this process, which no transaction binds) that takes
    snapshots of the mount over and over while a transaction runs -- and, for the abort
    oracle, while it is rolled back. The committed state stays `expected` all that time,
    so every entry of every snapshot must equal it (atime aside): anything else is the
    transaction's uncommitted or rolled-back state reaching a plain reader, through the
    daemon or a kernel cache. The transaction, for its part, must keep seeing its own
    changes whatever the reader made the kernel cache: the commit oracle checks that
    against XFS."""

    def __init__(self, mnt, expected: dict, lists, view: bool = False):
        import threading
        self.mnt = mnt
        # A transaction that works through its view shares no kernel inode or dentry with
        # this reader: nothing is exempt. One bound by process id alone shares them
        # (docs/isolation.md, "Binding by process id"): names its renames touched are
        # exempt, with everything below them -- the kernel moves its cached dentry to the
        # new name, which other processes may see until the transaction ends -- and so
        # are the ACL xattrs of what it chmods or sets xattrs on: the kernel caches POSIX
        # ACLs per inode and updates that copy itself.
        self.exempt = [] if view else sorted(
            {o[k] for lst in lists for o in lst if o["o"] == "rename" for k in ("p", "q")})
        self.acl_exempt = set() if view else {o["p"] for lst in lists for o in lst
                                              if o["o"] in ("chmod", "setxattr", "removexattr")}
        self.expected = self._judged(expected)
        self.snapshots = 0
        self.failure: str | None = None
        self._rng = random.Random(len(self.expected))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        while not self._stop.is_set() and self.failure is None:
            try:
                # Exempt names are not visited at all: a plain lookup of the committed
                # place of a directory the transaction moved would make the kernel move
                # that directory's one dentry back there, under the transaction's feet.
                got = self._judged(strip_atime(snap.snapshot(self.mnt, skip=self._is_exempt)))
            except OSError as e:
                self.failure = f"a plain reader failed on a committed path: {e}"
                return
            if got != self.expected:
                self.failure = ("a plain reader saw state that was never committed "
                                "(expected = committed):\n  "
                                + "\n  ".join(snap.diff(self.expected, got)))
                return
            self.failure = self._continued_listings()
            self.snapshots += 1
            time.sleep(0.001)

    def _continued_listings(self) -> str | None:
        """Every directory listed in two parts on two handles, as NFS-Ganesha continues a
        READDIR (it opens the directory for each) and as seekdir after a reopen does: the
        first k entries, telldir, close; open, seekdir, the rest. Together they must be
        the committed names, each once, also while the transaction changes the directory
        or is rolled back in between (an offset means the same thing to every opener).
        Only listings begun while the transaction is open are judged: one begun before
        it goes on streaming the directory as it is (docs/isolation.md, "Limits")."""
        if not tl.txn_status(self.mnt)["transactions"]:
            return None
        for rel, e in self.expected.items():
            if "entries" not in e:
                continue
            k = self._rng.randint(1, len(e["entries"]) + 2)
            try:
                got = tl.continued_listing(os.path.join(self.mnt, rel), k)
            except OSError as ex:
                return f"a plain listing of {rel} continued after {k} entries failed: {ex}"
            got = [n for n in got if n not in (".", "..")]
            if sorted(got) != e["entries"]:
                return (f"a plain listing of {rel} continued after {k} entries on a new handle "
                        f"gave {got}; committed: {e['entries']}")
        return None

    def _is_exempt(self, rel: str) -> bool:
        return any(rel == x or rel.startswith(x + "/") for x in self.exempt)

    def _judged(self, snapshot: dict) -> dict:
        out = {}
        for rel, e in snapshot.items():
            if self._is_exempt(rel):
                continue
            if rel in self.acl_exempt:
                e = dict(e, xattrs={k: v for k, v in e["xattrs"].items()
                                    if not k.startswith("system.posix_acl_")})
            out[rel] = e
        return out

    def stop(self) -> str | None:
        """Stops it; the violation it saw, or None."""
        self._stop.set()
        self._thread.join(OP_DEADLINE)
        if self._thread.is_alive():
            return "the plain observer's snapshot did not return (stalled)"
        return self.failure


class Bystander:
    """An idle transaction of another process, open while plain requests run (the daemon
    takes its plain-isolated paths then)."""

    def __init__(self, mnt):
        self.mnt = mnt
        r, self.w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.w)
            os.read(r, 1)
            os._exit(0)
        os.close(r)
        rc, self.tid = tl.txn_begin_rc(mnt, tl.TXNFS_BIND_PROCESS, self.pid)
        if rc != 0:
            self.close()
            raise Failure("plain", "begin", f"bystander txnfs_begin: {os.strerror(-rc)}")

    def close(self):
        if self.tid:
            tl.txn_abort(self.mnt, self.tid)
            self.tid = None
        os.close(self.w)
        os.waitpid(self.pid, 0)


def _with_deadline(fn, timeout):
    """fn() on a thread; 'stall' if it does not return in time."""
    import threading
    out = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(timeout)
    return out[0] if out else "stall"
