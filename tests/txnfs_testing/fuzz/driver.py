"""The soak driver, for tests/fuzz/run and test_fuzz.py: soak() runs every oracle and
process count for a range of seeds, shrinks each failure and reports it as a runnable
reproducer; summary() prints the counts (runs, ops and flags covered, crashes, the
observer, documented divergences met, failures).
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

from txnfs_testing.fuzz.generator import GEN_OPS, crash_point_names, format_case, gen_case
from txnfs_testing.fuzz.oracles import Failure, Fuzzer, Stats


def report(f: Failure, shrunk: dict | None, runs: int) -> str:
    c = f.case
    lines = [f"FAILURE seed {c['seed']} oracle {f.oracle} procs {c['procs']}: {f.kind}",
             f"  {f.detail}"]
    best = shrunk or c
    fdir = Path(tempfile.mkdtemp(prefix=f"txnfs-fuzz-fail-{c['seed']}-{f.oracle}-"))
    (fdir / "case.json").write_text(format_case(best) + "\n")
    if f.report:
        (fdir / "report.txt").write_text(f.report)
        # the daemon's own frames first (a stall: who waits for what)
        own = [ln for ln in f.report.splitlines() if "txnfs::" in ln or ln.startswith("Thread ")]
        lines.append("  " + "\n  ".join(own[:80]))
        lines.append(f"  full report: {fdir / 'report.txt'}")
    lines.append(f"  reproducer file: {fdir / 'case.json'}")
    n = sum(len(x) for x in best["lists"])
    lines.append(f"  reproducer ({n} ops{', minimised in ' + str(runs) + ' runs' if shrunk else ''}; "
                 f"save as FILE, run: tests/fuzz/run --replay FILE):")
    lines.append(format_case(best))
    return "\n".join(lines)


def soak(fuzzer: Fuzzer, seed0: int, nseeds: int, oracles, procs_list, nops, log=print,
         shrink=True, shrink_seconds=300.0, keep_going=True, crash_kind=None, point=None,
         shrink_runs=200) -> list[str]:
    """Runs every (oracle, procs) for seeds seed0..; returns the failure reports."""
    out = []
    st = fuzzer.stats
    for s in range(seed0, seed0 + nseeds):
        for oracle in oracles:
            for procs in procs_list:
                case = gen_case(s, oracle, procs, nops)
                if oracle == "crash" and (crash_kind or point):
                    c = case["crash"]
                    if point:
                        c["kind"] = "inject"
                        c["point"] = point if ":" in point else f"{point}:1"
                    else:
                        c["kind"] = crash_kind
                        if crash_kind != "inject":
                            c.pop("point", None)
                        elif "point" not in c:
                            c["point"] = f"{random.Random(s).choice(crash_point_names())}:1"
                key = f"{oracle}/{procs}"
                st.runs[key] = st.runs.get(key, 0) + 1
                st.count_ops(case["lists"])
                t0 = time.monotonic()
                f = fuzzer.check(case)
                log(f"seed {s} {oracle} procs {procs}"
                    f"{' ' + case['crash']['kind'] + ' ' + case['crash'].get('point', '') if oracle == 'crash' else ''}"
                    f": {'FAIL ' + f.kind if f else 'ok'} ({time.monotonic() - t0:.1f} s)")
                if f is None:
                    continue
                shrunk, runs = (None, 0)
                if shrink:
                    shrunk, runs = fuzzer.shrink(f, budget_s=shrink_seconds, max_runs=shrink_runs)
                    # confirm the minimal case once more (and get its detail)
                    f2 = fuzzer.check(shrunk)
                    if f2 is not None and f2.kind == f.kind:
                        f2.case = shrunk
                        f.detail = f.detail + "\n  minimised case fails with: " + f2.detail
                    else:
                        shrunk = None
                r = report(f, shrunk, runs)
                log(r)
                out.append(r)
                st.failures.append(r)
                if not keep_going:
                    return out
    return out


def summary(st: Stats) -> str:
    lines = ["runs: " + ", ".join(f"{k} {v}" for k, v in sorted(st.runs.items()))]
    lines.append(f"ops covered ({len(st.ops)} of {len(GEN_OPS)}): "
                 + ", ".join(f"{k} {v}" for k, v in sorted(st.ops.items())))
    missing = sorted(set(GEN_OPS) - set(st.ops))
    if missing:
        lines.append(f"ops not generated: {missing}")
    lines.append("flags covered: " + ", ".join(f"{k} {v}" for k, v in sorted(st.flags.items())))
    if st.crash:
        lines.append("crashes: " + ", ".join(f"{k} {v}" for k, v in sorted(st.crash.items())))
    if st.observed:
        lines.append("plain observer: " + ", ".join(f"{k} {v}" for k, v in sorted(st.observed.items())))
    lines.append("documented divergences met: " + (", ".join(
        f"{k} {v}" for k, v in sorted(st.divergences.items())) or "none"))
    lines.append(f"failures: {len(st.failures)}")
    return "\n".join(lines)
