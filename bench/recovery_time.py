"""bench/recovery-time: how long recovery of an interrupted big transaction takes.

On a fresh loop-mounted XFS store (txnfs_testing.crash.env.Env): commits a tree of
--files files, then runs ONE transaction of --ops operations through the mount (mixed:
overwrites at random offsets, appends, truncations, chmod, setxattr, creates, mkdir,
renames, hard links, unlinks), kill -9s the daemon before it commits, and times
`txnfs recover STORE` (the same recovery `txnfs mount` runs). Checks that the tree is
byte-for-byte the committed one again and that fsck is clean, and prints the figure:

    recovery of an interrupted 10000-operation transaction: 0.84 s (limit 5 s) ...

Exit 0 when recovery was correct and within --limit seconds. Needs root; builds first
(scripts/build) unless $TXNFS_BIN names the txnfs to use.
"""

import argparse
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

from txnfs_testing.crash.env import Env
from txnfs_testing import snapshot as S
from txnfs_testing import txnfs_lib as tl


def big_transaction(mnt: Path, nops: int, nfiles: int, rng: random.Random) -> dict:
    """Runs nops operations in one transaction bound to a thread of its own; returns
    {"txid", "ops", "seconds"} (or "error") once they are done, the transaction open."""
    out = {}

    def body():
        try:
            t0 = time.monotonic()
            tid = tl.txn_begin(mnt)
            out["txid"] = tid
            files = [f"d{k % 50}/f{k}" for k in range(nfiles)]
            made = 0
            for i in range(nops):
                r = rng.random()
                if r < 0.35 and files:
                    f = mnt / rng.choice(files)
                    fd = os.open(f, os.O_WRONLY)
                    try:
                        os.pwrite(fd, rng.randbytes(rng.choice((100, 4096, 9000))),
                                  rng.randrange(0, 64 << 10))
                    finally:
                        os.close(fd)
                elif r < 0.45 and files:
                    os.truncate(mnt / rng.choice(files), rng.randrange(0, 32 << 10))
                elif r < 0.55 and files:
                    os.chmod(mnt / rng.choice(files), rng.choice((0o600, 0o640, 0o755)))
                elif r < 0.62 and files:
                    os.setxattr(mnt / rng.choice(files), f"user.b{rng.randrange(3)}",
                                rng.randbytes(32))
                elif r < 0.77:
                    made += 1
                    p = mnt / f"d{rng.randrange(50)}" / f"new{made}"
                    with open(p, "wb") as fh:
                        fh.write(rng.randbytes(rng.choice((0, 512, 5000))))
                    files.append(str(p.relative_to(mnt)))
                elif r < 0.80:
                    made += 1
                    os.mkdir(mnt / f"d{rng.randrange(50)}" / f"nd{made}")
                elif r < 0.88 and files:
                    src = files.pop(rng.randrange(len(files)))
                    made += 1
                    dst = f"d{rng.randrange(50)}/mv{made}"
                    os.rename(mnt / src, mnt / dst)
                    files.append(dst)
                elif r < 0.92 and files:
                    made += 1
                    dst = f"d{rng.randrange(50)}/ln{made}"
                    os.link(mnt / rng.choice(files), mnt / dst)
                    files.append(dst)
                elif files:
                    os.unlink(mnt / files.pop(rng.randrange(len(files))))
            out["ops"] = nops
            out["seconds"] = time.monotonic() - t0
        except Exception as e:  # noqa: BLE001
            out["error"] = repr(e)
        done.set()
        hold.wait()             # keep the thread (the transaction's owner) alive

    done, hold = threading.Event(), threading.Event()
    t = threading.Thread(target=body, daemon=True)
    t.start()
    done.wait()
    out["release"] = hold.set
    return out


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench/recovery-time", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=10000, help="operations in the transaction")
    ap.add_argument("--files", type=int, default=2000, help="committed files to start from")
    ap.add_argument("--limit", type=float, default=5.0, help="seconds recovery may take")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--image-gib", type=int, default=4)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/recovery-time: must run as root", file=sys.stderr)
        return 2
    if not os.environ.get("TXNFS_BIN"):   # build what it needs (a fresh clone has no build/)
        repo = Path(__file__).resolve().parents[1]
        if subprocess.run([str(repo / "scripts" / "build")], stdout=sys.stderr).returncode:
            print("bench/recovery-time: the build failed (see above); run scripts/build as root",
                  file=sys.stderr)
            return 2
    os.umask(0)
    rng = random.Random(args.seed)
    import tempfile
    work = Path(tempfile.mkdtemp(prefix="txnfs-recovery-time-"))
    env = Env(work, size=args.image_gib << 30)
    status = 1
    try:
        rc, _ = env.mount("prepare")
        assert rc is None, f"mount failed ({rc})"
        mnt = env.mnt
        t0 = time.monotonic()
        for d in range(50):
            os.mkdir(mnt / f"d{d}")
        for k in range(args.files):
            with open(mnt / f"d{k % 50}" / f"f{k}", "wb") as f:
                f.write(rng.randbytes(rng.choice((1000, 16384, 65536))))
        os.sync()
        env.umount()
        before = S.snapshot(env.store.tree, handles=False)   # names, data, modes, owners,
        # times but ctime, xattrs, link counts, inode numbers
        print(f"prepared {args.files} files in 50 directories ({time.monotonic() - t0:.1f} s)")

        env.mount("txn")
        res = big_transaction(env.mnt, args.ops, args.files, rng)
        if "error" in res:
            print(f"the transaction failed: {res['error']}")
            return 1
        steps = sum(1 for _ in os.scandir(env.store.internal / "backups" / str(res["txid"]))
                    if not _.name.endswith(".d"))
        print(f"transaction {res['txid']}: {res['ops']} operations in {res['seconds']:.1f} s, "
              f"{steps} undo steps; kill -9 of the daemon")
        env.kill()
        res["release"]()

        t0 = time.monotonic()
        p = tl.txnfs("recover", env.store.path, timeout=600)
        wall = time.monotonic() - t0
        print(p.stdout.strip().splitlines()[-1])
        progress = [ln for ln in p.stderr.splitlines() if ln.startswith("recovery: transaction")]
        if progress:
            print(f"{len(progress)} progress lines, the last: {progress[-1]}")
        if p.returncode != 0:
            print(f"txnfs recover failed (exit {p.returncode}): {p.stderr}")
            return 1
        after = S.snapshot(env.store.tree, handles=False)
        same = after == before
        fsck = env.store.fsck()
        ok = same and fsck.returncode == 0 and wall <= args.limit
        print(f"recovery of an interrupted {args.ops}-operation transaction: {wall:.2f} s "
              f"(limit {args.limit:g} s); tree restored byte for byte: {'yes' if same else 'NO'}; "
              f"fsck: {'clean' if fsck.returncode == 0 else 'NOT CLEAN'}")
        if not same:
            print("differences:", *S.diff(before, after), sep="\n  ")
        if fsck.returncode != 0:
            print(tl.output_of(fsck))
        status = 0 if ok else 1
    finally:
        problems = env.close()
        if problems:
            print(f"cleanup: {problems}")
            status = 1
        else:
            import shutil
            shutil.rmtree(work, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
