"""The crash harness's driver: Runner runs N crash cycles on one image and store -- mount,
workload, crash (kill, power, inject, in turn or as asked), recovery, the checks (judge,
probe transaction, fsck) -- and counts them in Stats; a failed check raises Violation,
or with keep_going is recorded and the tree taken as it is.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from txnfs_testing import txnfs_lib as tl
from txnfs_testing.crash.env import Env, XfsLost
from txnfs_testing.crash.judge import judge_crash
from txnfs_testing.crash.model import Obj, Part, actual, model_from_tree
from txnfs_testing.crash.points import crash_points
from txnfs_testing.crash.workload import Workload


KINDS = ("kill", "power", "inject")


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
    xfs_lost: list = field(default_factory=list)  # images XFS could not mount after a power cut

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
        if self.xfs_lost:
            lines.append(f"XFS could not replay its own log after a power cut: "
                         f"{len(self.xfs_lost)} time(s); each time the soak went on with a "
                         f"fresh image (not a txnfs violation; see the kernel lines above)")
        lines.append(f"violations: {len(self.violations)}")
        for v in self.violations:
            lines.append("  " + v.splitlines()[0])
        return "\n".join(lines)


class Violation(Exception):
    pass


class XfsLostStop(Exception):
    """A run without --keep-going stops at an image XFS could not mount again."""


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
        if getattr(self, "old_umask", None) is None:  # (setup runs again after a lost image)
            self.old_umask = os.umask(0)  # modes in the model are exact; restored by close()
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
            try:
                env.mount_xfs()
            except XfsLost as e:
                self.xfs_lost(where, e)
                return
        records = env.txn_records()
        logs = set(int(n) for n in env.backups_left() if n.isdigit())
        # What the crash left, for the journal: a violation is judged against it.
        mark, markers = env.lazy_marks(logs)
        self.journal.write(json.dumps(
            {"cycle": i, "after_crash": {"records": {str(t): s for t, s in sorted(records.items())},
                                         "logs": sorted(logs), "durable_mark": mark,
                                         "lazy_markers": {str(t): s for t, s in sorted(markers.items())}}}) + "\n")
        # A log whose marker the durable mark covers is a committed transaction's, as much
        # as one with a commit record (docs/crash-model.md, Lazy commit).
        for t, seq in markers.items():
            if seq <= mark:
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

    def xfs_lost(self, where: str, e: XfsLost):
        """XFS could not replay its own log after the power cut. Nothing of txnfs can be
        judged on a file system that does not mount: reported apart from violations; a
        soak (--keep-going) goes on with a fresh image and store, one run stops."""
        msg = f"XFS LOST its image at {where}: {e}"
        self.stats.xfs_lost.append(msg)
        print(msg, flush=True)
        if not self.keep_going:
            raise XfsLostStop(msg)
        self.journal.write(json.dumps({"cycle": where, "xfs_lost": str(e)}) + "\n")
        problems = self.env.close()
        if problems:
            raise RuntimeError(f"cleaning up the lost image: {problems}")
        self.env.image.rename(self.work / f"image.lost-{len(self.stats.xfs_lost)}")
        if not self.keep_image:
            (self.work / f"image.lost-{len(self.stats.xfs_lost)}").unlink()
        self.setup()

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
