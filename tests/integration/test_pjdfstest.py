"""POSIX conformance: pjdfstest on txnfs must pass everything it passes on raw XFS.

pjdfstest (the Rust port, `cargo install pjdfstest`, installed by scripts/lib.sh) runs
with tests/pjdfstest.toml first on a directory of the raw XFS the store lives on, then on
the txnfs mount of that store.  Both counts are printed; the test fails if any test case
that passes on XFS fails (or is skipped, or never ran) on txnfs.  Raw outputs are kept in
build/pjdfstest-xfs.log and build/pjdfstest-txnfs.log.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path


from txnfs_testing import txnfs_lib as tl

CONFIG = tl.REPO / "tests" / "pjdfstest.toml"
LOG_DIR = tl.REPO / "build"
RUN_TIMEOUT = 60  # seconds per run (two runs stay below conftest's 180 s watchdog); ~2 s normally

# "<name> <padding> <status>", name like "chmod::eperm::regular"
RESULT_RE = re.compile(
    r"^(?P<name>\w+(?:::\w+)+)\s+"
    r"(?P<status>ok|FAILED|skipped|PASSED UNEXPECTEDLY|failed as expected)$")
SUMMARY_RE = re.compile(
    r"^Summary: (?P<failed>\d+) failed, (?P<skipped>\d+) skipped, (?P<passed>\d+) passed, "
    r"(?P<xfail>\d+) expected failures, (?P<total>\d+) total$")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


def pjdfstest_bin() -> str | None:
    return shutil.which("pjdfstest") or next(
        (str(p) for p in [Path.home() / ".cargo" / "bin" / "pjdfstest"] if p.exists()), None)


@dataclass
class PjdRun:
    label: str
    status: dict = field(default_factory=dict)    # test name -> ok | FAILED | skipped | ...
    message: dict = field(default_factory=dict)   # test name -> failure / skip text
    summary: dict | None = None
    returncode: int | None = None
    timed_out: bool = False
    stderr: str = ""

    def count(self, status) -> int:
        return sum(1 for s in self.status.values() if s == status)

    def counts(self) -> str:
        s = (f"{self.count('ok')} passed, {self.count('FAILED')} failed, "
             f"{self.count('skipped')} skipped of {len(self.status)}")
        if self.timed_out:
            s += f" (TIMED OUT after {RUN_TIMEOUT} s)"
        elif self.summary is None:
            s += f" (no summary line; exit {self.returncode})"
        return s


def parse(label: str, out: str) -> PjdRun:
    run = PjdRun(label)
    current = None
    for line in ANSI_RE.sub("", out).splitlines():
        m = RESULT_RE.match(line.rstrip())
        if m:
            current = m["name"]
            run.status[current] = m["status"]
            run.message[current] = ""
            continue
        m = SUMMARY_RE.match(line.strip())
        if m:
            run.summary = {k: int(v) for k, v in m.groupdict().items()}
            current = None
            continue
        if current is not None and line.strip():
            sep = "\n" if run.message[current] else ""
            run.message[current] += sep + line.strip()
    return run


def run_pjdfstest(label: str, path: Path, patterns=()) -> PjdRun:
    # pjdfstest binds unix sockets at <path>/.tmpXXXXXX/.tmpXXXXXX/<32 chars>[/<32 chars>],
    # and sun_path holds 107 bytes: reach `path` through a short symlink.
    short = Path(tempfile.mkdtemp(prefix="pjd-", dir="/tmp"))
    os.chmod(short, 0o755)
    os.symlink(path, short / "d")
    env = dict(os.environ, RUST_BACKTRACE="0", NO_COLOR="1")
    cmd = [pjdfstest_bin(), "-c", str(CONFIG), "-p", str(short / "d")]
    if patterns:  # substring patterns: pjdfstest's -e (exact) matches none of its own names
        cmd += ["--", *patterns]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT,
                           env=env, cwd=path, stdin=subprocess.DEVNULL)
        out, err, rc, timed_out = p.stdout, p.stderr, p.returncode, False
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        rc, timed_out = None, True
    finally:
        shutil.rmtree(short)  # the symlink and its directory only
    if LOG_DIR.is_dir():
        (LOG_DIR / f"pjdfstest-{label}.log").write_text(
            f"$ {' '.join(cmd)}   # {short / 'd'} -> {path}\n{out}\n--- stderr ---\n{err}")
    run = parse(label, out)
    run.returncode, run.timed_out, run.stderr = rc, timed_out, err
    return run


def world_traversable_dir(path: Path) -> Path:
    """pjdfstest switches to nobody/tests: they must be able to reach `path`."""
    path.mkdir()
    os.chmod(path, 0o755)
    return path


def test_pjdfstest_txnfs_matches_xfs(xfs, mnt, capsys):
    assert pjdfstest_bin(), "pjdfstest not found in PATH or ~/.cargo/bin (scripts/lib.sh installs it)"
    for user in ("nobody", "tests"):
        assert tl.run(["getent", "passwd", user]).returncode == 0, (
            f"user {user!r} is missing (scripts/lib.sh creates it)")
    # The fixtures' mktemp dir is 0700: open it up so the dummy users can reach both trees.
    os.chmod(xfs.tmp, 0o755)
    mode = os.stat(mnt.path).st_mode
    if mode & 0o011 != 0o011:
        os.chmod(mnt.path, mode | 0o011)

    xfs_run = run_pjdfstest("xfs", world_traversable_dir(xfs.dir / "pjdfstest-raw"))
    txn_run = run_pjdfstest("txnfs", world_traversable_dir(mnt.path / "pjdfstest"))

    with capsys.disabled():
        print(f"\npjdfstest on XFS:   {xfs_run.counts()}")
        print(f"pjdfstest on txnfs: {txn_run.counts()}")

    xfs_failed = [n for n, st in xfs_run.status.items() if st == "FAILED"]
    if xfs_failed:  # the same races can hit the baseline: re-run those cases alone, once
        again = run_pjdfstest("xfs-rerun", world_traversable_dir(xfs.dir / "pjdfstest-rerun"),
                              xfs_failed)
        for n in xfs_failed:
            if again.status.get(n) == "ok":
                xfs_run.status[n] = "ok"
    assert xfs_run.summary is not None and xfs_run.count("FAILED") == 0, (
        "the XFS baseline itself is broken, so the comparison means nothing:\n"
        f"{xfs_run.counts()}\n" + "\n".join(
            f"  {n}: {xfs_run.message[n]}" for n, s in xfs_run.status.items() if s == "FAILED")
        + f"\nstderr: {xfs_run.stderr[-2000:]}")
    assert xfs_run.count("ok") > 300, f"suspiciously few tests ran on XFS: {xfs_run.counts()}"

    # A few cases race processes against each other (open::etxtbsy execs a program and
    # opens it for writing meanwhile); on a loaded machine they can lose the race. Such
    # a case counts as a regression only if it fails in each of 3 runs on its own.
    suspects = [n for n, st in xfs_run.status.items()
                if st == "ok" and txn_run.status.get(n, "did not run") != "ok"]
    for attempt in range(3):
        if not suspects:
            break
        rerun = run_pjdfstest(f"txnfs-rerun{attempt}",
                              world_traversable_dir(mnt.path / f"pjdfstest-rerun{attempt}"), suspects)
        missing = [n for n in suspects if n not in rerun.status]
        assert not missing, f"the re-run did not run {missing}: {rerun.counts()}"
        flaky = [n for n in suspects if rerun.status.get(n) == "ok"]
        if flaky:
            with capsys.disabled():
                print(f"pjdfstest on txnfs: passed when re-run alone: {', '.join(flaky)}")
        for n in flaky:
            txn_run.status[n] = "ok"
        suspects = [n for n in suspects if n not in flaky]

    offenders = []
    for name, status in xfs_run.status.items():
        if status != "ok":
            continue
        got = txn_run.status.get(name, "did not run")
        if got != "ok":
            msg = txn_run.message.get(name, "")
            offenders.append(f"  {name}: {got}" + (f"\n      {msg.replace(chr(10), chr(10) + '      ')}" if msg else ""))
    assert not offenders, (
        f"{len(offenders)} pjdfstest case(s) pass on XFS but not on txnfs "
        f"(XFS: {xfs_run.counts()}; txnfs: {txn_run.counts()}):\n" + "\n".join(offenders)
        + (f"\ntxnfs run stderr (tail): {txn_run.stderr[-1500:]}" if txn_run.stderr.strip() else ""))
