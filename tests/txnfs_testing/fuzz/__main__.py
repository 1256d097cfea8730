"""Differential op-space fuzzer for txnfs (the oracles: txnfs_testing/fuzz/__init__.py).

    tests/fuzz/run --seeds N [--seed S] [--oracle abort|commit|plain|crash|all]
                   [--procs 1|4] [--ops K] [--no-shrink] [--keep-going]
    tests/fuzz/run --replay FILE        # a reproducer printed by a failure

Prints the counts per oracle, the ops and flags covered, the documented divergences met,
every failure with its seed, oracle and minimised reproducer, and the wall time.
Exits 1 when anything failed. Needs root and a built tree (build/src/txnfuse/txnfs,
build/src/libtxnfs/libtxnfs.so, or $TXNFS_BIN / $TXNFS_LIB).
"""

import argparse
import os
import random
import sys
import time
from pathlib import Path

from txnfs_testing.fuzz import driver, generator, workers
from txnfs_testing.fuzz.oracles import Fuzzer


def main() -> int:
    ap = argparse.ArgumentParser(prog="tests/fuzz/run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10, help="seeds per oracle (default 10)")
    ap.add_argument("--seed", type=int, help="first seed (default: random, printed)")
    ap.add_argument("--oracle", default="all", choices=("abort", "commit", "plain", "crash", "all"))
    ap.add_argument("--procs", type=int, choices=(1, 4), action="append",
                    help="processes in the transaction (repeatable; default both)")
    ap.add_argument("--ops", type=int, default=20, help="ops per process (default 20)")
    ap.add_argument("--crash-kind", choices=("kill", "power", "inject"),
                    help="crash oracle: only this kind (default: chosen by the seed)")
    ap.add_argument("--point", help="crash oracle: only this injected point (NAME[:COUNT])")
    ap.add_argument("--without", action="append", default=[], metavar="OP",
                    help="do not generate OP (repeatable), to look past a known failure")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--shrink-seconds", type=float, default=300)
    ap.add_argument("--keep-going", action="store_true", help="go on after a failure")
    ap.add_argument("--replay", type=Path, help="run one reproducer file and exit")
    ap.add_argument("--deadline", type=float, default=workers.OP_DEADLINE,
                    help="seconds before an op counts as stalled (default 30)")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("tests/fuzz/run: must run as root", file=sys.stderr)
        return 2
    log = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    t0 = time.monotonic()
    for op in args.without:
        if op not in generator.GEN_WEIGHTS:
            ap.error(f"--without {op}: no such op ({', '.join(generator.GEN_OPS)})")
        generator.GEN_WEIGHTS[op] = 0
    fuzzer = Fuzzer(log=log, deadline=args.deadline)
    status = 0
    try:
        if args.replay:
            case = generator.parse_case(args.replay.read_text())
            f = fuzzer.check(case)
            print(f"replay: {'FAILED: ' + str(f) if f else 'passed'}")
            if f and f.report:
                print(f.report)
            return 1 if f else 0
        seed0 = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
        oracles = ("abort", "commit", "plain", "crash") if args.oracle == "all" else (args.oracle,)
        procs = args.procs or [1, 4]
        print(f"fuzz: seeds {seed0}..{seed0 + args.seeds - 1}, oracles {','.join(oracles)}, "
              f"procs {procs}, {args.ops} ops per process", flush=True)
        results = driver.soak(fuzzer, seed0, args.seeds, oracles, procs, args.ops, log=log,
                          shrink=not args.no_shrink, shrink_seconds=args.shrink_seconds,
                          keep_going=args.keep_going, crash_kind=args.crash_kind,
                          point=args.point)
        if args.quiet:          # (otherwise printed as they happened)
            for r in results:
                print(r)
        print(driver.summary(fuzzer.stats))
        status = 1 if results else 0
    except KeyboardInterrupt:
        print("interrupted")
        status = 130
    finally:
        problems = fuzzer.close()
        if problems:
            print(f"cleanup problems: {problems}")
            status = status or 1
        print(f"wall time {time.monotonic() - t0:.1f} s: {'FAILED' if status else 'passed'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
