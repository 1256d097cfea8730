"""bench/nfs-bench — NFS workloads against three server configurations, side by side.

    V  Debian's unpatched ganesha.nfsd exporting a plain directory of the XFS image
       (the baseline)
    F  the patched ganesha.nfsd (+ bridge) exporting the txnfs mount of a store on the
       same image; COMPOUNDs untagged: transactions off
    T  the same server; COMPOUNDs tagged "txn": each one a transaction

Every repetition runs each configuration in turn (the order rotating between
repetitions) on fresh directories; each figure is the median over the repetitions, and
the ratios are T/V and F/V of those medians (for times; a ratio > 1 is slower than the
baseline). The client is build/bench/txnfs-nfsbench (the txnfs-nfs library), one process
per simulated client. Writes are UNSTABLE (as a client's would be) unless --stable; T
makes every COMPOUND durable at commit anyway.

    bench/nfs-bench                         # Writefiles: 1,000 files of 4 KiB, 1 client
    bench/nfs-bench --sizes 1K,4K,64K --clients 1,4 --reps 5 --csv out.csv

Needs root (loop mount, FUSE); builds what it needs first (scripts/build: missing Debian
packages, the patched Ganesha, libfuse 3.18, meson setup on a fresh clone, ninja).
Cleans up (servers by PID, mount, loop device) on any exit.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
from pathlib import Path

from nfsstack import CONFIGS, NFSBENCH, Stack, ensure_built, label, run_workload, size_of  # noqa: F401


def main() -> int:
    ap = argparse.ArgumentParser(
        prog="bench/nfs-bench", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=1000, help="files per client and size (default 1000)")
    ap.add_argument("--sizes", default="4K", help="file sizes, comma-separated (default 4K)")
    ap.add_argument("--clients", default="1", help="client counts, comma-separated (default 1)")
    ap.add_argument("--per", type=int, default=0, help="files per COMPOUND (0: as many as fit 1 MiB)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--configs", default="V,F,T")
    ap.add_argument("--read", action="store_true", help="also read the files back (Readfiles)")
    ap.add_argument("--stable", action="store_true", help="FILE_SYNC4 writes")
    ap.add_argument("--image-gib", type=int, default=16)
    ap.add_argument("--csv", help="append every run as a row to this CSV file")
    ap.add_argument("--txnfs-opts", default="", help="extra txnfs mount options")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("nfs-bench: run as root", file=sys.stderr)
        return 2
    ensure_built()
    configs = [c for c in a.configs.split(",") if c]
    assert set(configs) <= set(CONFIGS) and configs[0] == "V" or "V" not in configs, \
        "--configs: V first (the baseline), then any of F, T"
    sizes = [size_of(s) for s in a.sizes.split(",")]
    clients = [int(c) for c in a.clients.split(",")]
    workloads = ["write"] + (["read"] if a.read else [])

    stack = Stack(a.image_gib, a.txnfs_opts.split())
    rows = []
    try:
        print(f"nfs-bench: {a.files} files per client, sizes {a.sizes}, clients {a.clients}, "
              f"{a.reps} reps, configs {','.join(configs)} (V: Debian ganesha.nfsd on XFS; "
              f"F/T: patched ganesha on txnfs, transactions off/on); "
              f"{os.cpu_count()} CPUs", flush=True)
        for size in sizes:
            for nc in clients:
                for rep in range(a.reps):
                    order = configs[rep % len(configs):] + configs[:rep % len(configs)]
                    for cfg in order:
                        d = f"/r{size}-{nc}-{rep}-{cfg}"
                        # a file of 1 MiB or more needs a bigger COMPOUND than 1 MiB
                        big = str(max(1 << 20, max(a.per, 1) * (size + 512) + (64 << 10)))
                        common = ["--dir", d, "--files", str(a.files), "--size", str(size),
                                  "--clients", str(nc), "--per", str(a.per),
                                  "--max-request", big, "--max-response", big]
                        if a.stable:
                            common.append("--stable")
                        for w in workloads:
                            os.sync()  # untimed: one run's writeback stays out of the next
                            r = run_workload(stack, cfg, w, common)
                            r.update(config=cfg, size=size, rep=rep)
                            rows.append(r)
    finally:
        stack.close()

    if a.csv:
        new = not Path(a.csv).exists()
        with open(a.csv, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            if new:
                w.writeheader()
            w.writerows(rows)

    print()
    print("| workload | size | clients | files/COMPOUND | " +
          " | ".join(f"{c} s (median)" for c in configs) +
          "".join(f" | {c}/V" for c in configs if c != "V") + " | retries T | RSS txnfs / ganesha (MiB) |")
    print("|" + " --- |" * (5 + len(configs) + len([c for c in configs if c != "V"])))
    for w in workloads:
        for size in sizes:
            for nc in clients:
                sel = [r for r in rows if r["workload"] == w and r["size"] == size and r["clients"] == nc]
                med = {c: statistics.median(r["seconds"] for r in sel if r["config"] == c) for c in configs}
                fpc = statistics.median(r["files_per_compound"] for r in sel if r["config"] == configs[-1])
                retries = sum(r["retries"] for r in sel if r["config"] == "T")
                tx = max((r["txnfs_hwm_kib"] for r in sel), default=0) / 1024
                gn = max((r["ganesha_hwm_kib"] for r in sel if r["config"] != "V"), default=0) / 1024
                cells = [f"{med[c]:.3f}" for c in configs]
                ratios = [f"{med[c] / med['V']:.2f}×" for c in configs if c != "V" and "V" in med]
                print(f"| {w} | {label(size)} | {nc} | {fpc:.0f} | " + " | ".join(cells + ratios) +
                      f" | {retries} | {tx:.0f} / {gn:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
