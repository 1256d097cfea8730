"""Crash-test txnfs: tests/crash/run --seed S --points N --kind kill|power|inject|all

Runs N crash cycles (txnfs_testing/crash/__init__.py): a concurrent, seeded transactional workload on a
fresh loop-mounted XFS store, crashed by kill -9, a power cut (xfs_io shutdown without
-f) or an injected crash point (`txnfs crash-points`), then recovered and checked:
acknowledged commits present, everything else all-or-nothing, fsck clean, no backups
left, the store works. Prints counts by kind, points fired, violations and the recovery
time distribution. Exit 0 when there was no violation.

Needs root (loop mounts, FUSE) and a built tree (build/src/txnfuse/txnfs and
build/src/libtxnfs/libtxnfs.so, or $TXNFS_BIN / $TXNFS_LIB).
"""

import argparse
import os
import random
import sys
import time
from pathlib import Path

from txnfs_testing.crash.driver import Runner, Violation, XfsLostStop
from txnfs_testing.crash.points import crash_points, points_markdown


def main() -> int:
    ap = argparse.ArgumentParser(prog="tests/crash/run", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=None, help="workload and crash seed (default: random, printed)")
    ap.add_argument("--points", type=int, default=30, help="number of crashes (default 30)")
    ap.add_argument("--kind", choices=("kill", "power", "inject", "all"), default="all",
                    help="crash kind; all = kill, power, inject in turn (default)")
    ap.add_argument("--point", help="with --kind inject: only this crash point")
    ap.add_argument("--threads", type=int, default=4, help="concurrent transaction threads (default 4)")
    ap.add_argument("--lazy-rate", type=float, default=0.5,
                    help="share of commits that are lazy (default 0.5; 0: durable only)")
    ap.add_argument("--max-delay", type=float, default=1.2,
                    help="kill/power: crash at a random moment up to this many seconds in (default 1.2)")
    ap.add_argument("--keep-going", action="store_true",
                    help="after a violation, repair, take the tree as it is and go on (soak)")
    ap.add_argument("--workdir", type=Path, help="keep everything here (default: a mktemp dir, "
                    "removed unless something failed)")
    ap.add_argument("--keep-image", action="store_true",
                    help="keep the XFS image in a kept work directory (default: logs and "
                    "journal only)")
    ap.add_argument("--list-points", action="store_true", help="print the crash points and exit")
    ap.add_argument("--markdown", action="store_true",
                    help="with --list-points: as the table in docs/crash-model.md")
    ap.add_argument("-q", "--quiet", action="store_true", help="no line per crash")
    args = ap.parse_args()

    if args.list_points and args.markdown:
        print(points_markdown())
        return 0
    if args.list_points:
        for name, where, tests in crash_points():
            print(f"{name}\n    where: {where}\n    tests: {tests}")
        return 0
    if os.geteuid() != 0:
        print("tests/crash/run: must run as root (loop mounts, FUSE)", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    print(f"crash test: seed {seed}, {args.points} crashes, kind {args.kind}, "
          f"{args.threads} threads", flush=True)
    log = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    r = Runner(seed, args.kind, threads=args.threads, workdir=args.workdir,
                        lazy_rate=args.lazy_rate,
                        keep_going=args.keep_going, log=log, only_point=args.point,
                        max_delay=args.max_delay, keep_image=args.keep_image)
    t0 = time.monotonic()
    status = 0
    try:
        r.run(args.points)
    except Violation as e:
        if str(e) not in r.stats.violations:     # (check() printed its own already)
            r.stats.violations.append(str(e))
            print(f"VIOLATION: {e}\n  replay: tests/crash/run --seed {seed} --points "
                  f"{args.points} --kind {args.kind} --threads {args.threads}", flush=True)
        status = 1
    except XfsLostStop:
        status = 1                               # (xfs_lost() printed it)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        status = 130
    finally:
        problems = r.close()
        if problems:
            print(f"cleanup problems: {problems}", flush=True)
            status = status or 1
    print(r.stats.summary(len(r.points)))
    if r.stats.workload_errors:
        print("workload errors:")
        for e in r.stats.workload_errors[:20]:
            print("  " + e)
    if r.stats.violations or r.stats.workload_errors:
        status = status or 1
        print(f"work directory kept: {r.work}")
    print(f"seed {seed}: {'FAILED' if status else 'passed'} in {time.monotonic() - t0:.1f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
