"""The generator: seeded operation lists. gen_case(seed, oracle, procs, nops) is the whole
case of a seed -- per-process op lists (Gen), and for the crash oracle the crash and the
cut into transactions; the same seed always gives the same case. Ops are JSON-able dicts
({"o": "rename", "p": "P0/a", "q": "P0/c", "fl": "EXCHANGE"}); format_case/parse_case
write and read a case as a reproducer (tests/fuzz/run --replay FILE).

GEN_WEIGHTS weighs the ops; HANDLER_COVERAGE maps every FUSE handler of the daemon to
the ops that reach it (test_fuzz.py checks both against the source and the output).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from txnfs_testing.crash.points import crash_points
from txnfs_testing import txnfs_lib as tl
from txnfs_testing.fuzz.syscalls import (
    ACLS, FALLOC_FLAGS, NOBODY, OPEN_ACCESS, OPEN_EXTRA, RENAME_FLAGS, XATTR_FLAGS)
from txnfs_testing.fuzz.tree import DIRS, EXISTING, FREE, T0

# op name -> relative weight
GEN_WEIGHTS = {
    "create": 5, "open": 6, "mknod": 2, "mkdir": 3, "symlink": 2, "link": 4, "unlink": 6,
    "rmdir": 2, "rename": 10, "write": 10, "dwrite": 3, "dread": 2, "read": 4,
    "mmap_read": 2, "mmap_write": 2, "truncate": 3, "ftruncate": 2, "fallocate": 6,
    "copy_range": 3, "chmod": 3, "chown": 2, "utimens": 2, "setxattr": 4, "getxattr": 2,
    "listxattr": 1, "removexattr": 2, "fsync": 2, "fsyncdir": 1, "lseek": 2, "statfs": 1,
    "readdir": 2, "readlink": 1, "stat": 3, "ioctl": 1, "drop_caches": 1, "handle": 8,
}
GEN_OPS = sorted(GEN_WEIGHTS)
AS_NOBODY = {"create", "open", "write", "truncate", "ftruncate", "mkdir", "chmod", "setxattr",
             "unlink", "rename", "utimens", "fallocate", "link", "dwrite", "copy_range", "chown"}

# Ops that create an object run under one of these umasks now and then (else 0): with
# POSIX_ACL the daemon applies the umask itself, unless the parent has a default ACL.
UMASK_OPS = {"create", "open", "mknod", "mkdir"}
UMASKS = (0o022, 0o077, 0o027)

# FUSE handler (ops.NAME = op_NAME in src/txnfuse/fuse) -> generator ops that reach it
HANDLER_COVERAGE = {
    "init": ["statfs"],            # every run mounts; statfs is the first request after INIT
    "lookup": ["stat", "open", "unlink", "rename", "handle"],   # "handle": "." and ".."
    "forget": ["unlink", "drop_caches"],
    "forget_multi": ["drop_caches"],
    "getattr": ["stat", "open"],
    "setattr": ["chmod", "chown", "utimens", "truncate", "ftruncate"],
    "readlink": ["readlink"],
    "mknod": ["mknod"],
    "mkdir": ["mkdir"],
    "symlink": ["symlink"],
    "create": ["create", "open"],
    "link": ["link"],
    "unlink": ["unlink"],
    "rmdir": ["rmdir"],
    "rename": ["rename"],
    "open": ["open", "write", "read", "dwrite", "dread", "mmap_read", "mmap_write"],
    "release": ["open"],
    "flush": ["open"],
    "fsync": ["fsync"],
    "read": ["read", "dread", "mmap_read"],
    "write_buf": ["write", "dwrite", "mmap_write"],
    "fallocate": ["fallocate"],
    "lseek": ["lseek"],
    "copy_file_range": ["copy_range"],
    "statfs": ["statfs"],
    "getxattr": ["getxattr"],
    "listxattr": ["listxattr"],
    "setxattr": ["setxattr"],
    "removexattr": ["removexattr"],
    "opendir": ["readdir"],
    "readdir": ["readdir"],
    "readdirplus": ["readdir"],
    "releasedir": ["readdir"],
    "fsyncdir": ["fsyncdir"],
    "ioctl": ["ioctl"],
}


def handlers_in_source(src=tl.REPO / "src" / "txnfuse" / "fuse") -> set[str]:
    """Every `ops.NAME = op_NAME;` of the daemon's FUSE operation table."""
    out = set()
    for f in sorted(Path(src).glob("*.cc")):
        out |= set(re.findall(r"\bops\.(\w+)\s*=\s*op_\w+\s*;", f.read_text()))
    return out


class Gen:
    def __init__(self, seed: int, area: str, shared: str | None, rng: random.Random):
        self.rng = rng
        self.seed = seed
        self.own = [f"{area}/{n}" for n in EXISTING + FREE]
        self.pool = self.own + ([f"{shared}/{n}" for n in EXISTING + FREE] if shared else [])
        self.dirs = [f"{area}/{d}" for d in DIRS] + ([f"{shared}/{d}" for d in DIRS] if shared else [])
        self.recent: list[str] = []
        self.n = 0

    def path(self, own_only=False) -> str:
        r = self.rng
        if self.recent and r.random() < 0.4:
            return r.choice(self.recent[-4:])
        return r.choice(self.own if own_only else self.pool)

    def touch(self, *paths):
        self.recent += paths
        del self.recent[:-8]

    def op(self) -> dict:
        r = self.rng
        name = r.choices(GEN_OPS, weights=[GEN_WEIGHTS[o] for o in GEN_OPS])[0]
        self.n += 1
        ds = r.randrange(1 << 30)
        p = self.path(own_only=name in ("mmap_read", "mmap_write"))
        size = lambda: r.choice((0, 1, 100, 4096, 5000, 65536, 70000, r.randrange(0, 140000)))
        if name == "create":
            o = {"p": p, "m": r.choice((0o644, 0o600, 0o4755, 0o2755, 0o777, 0o6777))}
            self.touch(p)
        elif name == "open":
            acc = r.choice(list(OPEN_ACCESS))
            ex = [f for f in OPEN_EXTRA if r.random() < 0.2]
            o = {"p": p, "fl": "|".join([acc] + ex)}
        elif name == "mknod":
            o = {"p": p, "k": r.choice(("fifo", "chr00")), "m": r.choice((0o644, 0o600))}
            self.touch(p)
        elif name == "mkdir":
            o = {"p": r.choice((p, r.choice(self.dirs))), "m": r.choice((0o755, 0o777, 0o2775))}
        elif name == "symlink":
            o = {"p": p, "t": r.choice(("f0", "../f1", "missing", "D0", "x" * 200))}
        elif name in ("link", "copy_range"):
            q = self.path()
            o = {"p": p, "q": q}
            if name == "copy_range":
                o.update(so=size(), do=size(), n=r.choice((1, 4096, 10000, 65536, 200000)))
            self.touch(p, q)
        elif name in ("unlink", "rmdir", "readlink", "stat", "listxattr", "statfs", "readdir",
                      "fsyncdir", "ioctl"):
            if name in ("rmdir", "readdir", "fsyncdir") and r.random() < 0.5:
                p = r.choice(self.dirs)
            o = {"p": p}
            if name == "readdir" and r.random() < 0.5:
                o["k"] = r.randint(1, 8)  # read k entries, then go on on a new handle
        elif name == "rename":
            q = self.path()
            if r.random() < 0.2:
                p, q = r.choice(self.dirs), r.choice((q, r.choice(self.dirs)))
            o = {"p": p, "q": q, "fl": r.choice(list(RENAME_FLAGS))}
            self.touch(p, q)
        elif name in ("write", "read"):
            if name == "write":
                acc = r.choice(("O_WRONLY", "O_RDWR"))
                ex = [f for f in ("O_APPEND", "O_TRUNC", "O_CREAT") if r.random() < 0.2]
                o = {"p": p, "fl": "|".join([acc] + ex), "off": size(),
                     "n": r.choice((1, 100, 4096, 5000, 65536)), "ds": ds}
            else:
                o = {"p": p, "off": size(), "n": r.choice((1, 4096, 100000))}
        elif name in ("dwrite", "dread"):
            off, n = r.choice(((65536, 8192), (r.randrange(0, 40) * 4096, r.randrange(1, 5) * 4096)))
            o = {"p": p, "off": off, "n": n}
            if name == "dwrite":
                o.update(ds=ds, fl=r.choice(("O_WRONLY", "O_RDWR")))
        elif name == "mmap_read":
            o = {"p": p, "off": r.randrange(0, 9000), "n": r.choice((1, 4096, 10000))}
        elif name == "mmap_write":
            # without msync the pages go back when munmap runs (fuse_vma_close)
            o = {"p": p, "off": r.randrange(0, 9000), "n": r.choice((1, 4096, 10000)), "ds": ds,
                 "sync": r.random() < 0.5}
        elif name in ("truncate", "ftruncate"):
            o = {"p": p, "size": size()}
        elif name == "fallocate":
            mode = r.choice(list(FALLOC_FLAGS))
            if mode in ("COLLAPSE_RANGE", "INSERT_RANGE") and r.random() < 0.85:
                off, n = r.randrange(0, 20) * 4096, r.randrange(1, 6) * 4096
            else:
                off, n = r.randrange(0, 100000), r.choice((1, 4096, 5000, 65536))
            o = {"p": p, "mode": mode, "off": off, "n": n}
        elif name == "chmod":
            o = {"p": p, "m": r.choice((0o644, 0o600, 0o4777, 0o2777, 0o6777, 0o1777, 0o755, 0o2755))}
        elif name == "chown":
            o = {"p": p, "uid": r.choice((0, NOBODY, -1, 1000)), "gid": r.choice((0, NOBODY, -1, 100))}
        elif name == "utimens":
            t = lambda: r.choice(("NOW", "OMIT", T0 + r.randrange(10**12)))
            o = {"p": p, "a": t(), "m": t(), "nofollow": r.random() < 0.3}
        elif name in ("setxattr", "getxattr", "removexattr"):
            xn = r.choice(("user.a", "user.b", "trusted.t", "system.posix_acl_access",
                           "system.posix_acl_default"))
            o = {"p": p, "x": xn}
            if name == "setxattr":
                if xn.startswith("system."):
                    o["v"] = "acl:" + r.choice(list(ACLS))
                else:
                    o["v"] = r.choice(("", "v1", "x" * 300))
                o["fl"] = r.choice(list(XATTR_FLAGS))
        elif name == "fsync":
            o = {"p": p, "data": r.random() < 0.5}
        elif name == "lseek":
            o = {"p": p, "off": size(), "w": r.choice(("DATA", "HOLE"))}
        elif name == "drop_caches":
            o = {}
        elif name == "handle":   # open the file handle a slot holds, then keep p's there
            o = {"p": p, "slot": r.randrange(2), "up": r.random() < 0.4}
        else:
            raise AssertionError(name)
        o = {"o": name, **o}
        if name in AS_NOBODY and r.random() < 0.2:
            o["u"] = NOBODY
        if name in UMASK_OPS and r.random() < 0.3:
            o["um"] = r.choice(UMASKS)   # the umask applies unless the parent has a default ACL
        return o


def gen_case(seed: int, oracle: str, procs: int, nops: int) -> dict:
    """The case of `seed`: per-process op lists, and for the crash oracle the crash."""
    rng = random.Random(f"{seed}/{oracle}/{procs}")
    shared = not (oracle in ("commit", "plain") and procs > 1)
    lists = []
    for k in range(procs):
        g = Gen(seed, f"P{k}", "S" if shared else None, random.Random(f"{seed}/{oracle}/{procs}/{k}"))
        lists.append([g.op() for _ in range(nops)])
    case = {"seed": seed, "oracle": oracle, "procs": procs, "shared": shared, "lists": lists,
            "end": "commit" if oracle in ("commit", "plain") else "abort"}
    if oracle == "plain":       # every other seed with another process's transaction open
        case["bystander"] = seed % 2 == 0
    if oracle == "commit":      # every other seed commits lazily: the same results, at once
        case["lazy"] = seed % 2 == 1
    if oracle in ("abort", "commit"):  # every way of beginning, by seed (BEGINS): same results
        case["begin"] = BEGINS[seed // 2 % len(BEGINS)]
        # half the seeds (lazy and durable commits alike) with a plain Observer
        case["observer"] = seed // 2 % 2 == 0
    if oracle in ("abort", "commit") and not case.get("lazy"):
        # a durable end in three goes through both phases of a two-phase commit: prepared
        # (durable, locks kept, its view ended), then resolved: the same results
        case["two_phase"] = seed // 4 % 3 == 1
    if oracle in ("abort", "commit", "crash"):
        # two seeds in three work through the transaction's view (MNT/.txnfs/ID), the
        # third through the mount, bound by process id
        case["view"] = seed % 3 != 2
    if oracle == "crash":
        kind = rng.choice(("kill", "power", "inject"))
        case["crash"] = {"kind": kind, "after": rng.randrange(0, max(1, nops * procs)),
                         "delay_ms": rng.choice((0, 0, 1, 5, 20))}
        if kind == "inject":
            case["crash"]["point"] = f"{rng.choice(crash_point_names())}:{rng.choice((1, 1, 2, 3))}"
        case["end"] = rng.choice(("abort", "commit"))
        case["txns"] = gen_txns(rng, nops)
    return case


# The ways a transaction begins: txnfs_begin; txnfs_begin2 with a lock timeout; txnfs_begin3
# with a lock timeout and a predeclared lock set (IS on the mount's root, which every
# case's transaction then takes per request anyway).
BEGINS = ("begin", "begin2", "begin3")
# their lock timeout: the mount's default (--lock-timeout-ms)
BEGIN2_LOCK_TIMEOUT_MS = 10000


def begin_of(case) -> str:
    """How CASE's transaction begins (reproducers written before BEGINS say "begin2")."""
    return case.get("begin") or ("begin2" if case.get("begin2") else "begin")


def gen_txns(rng, nops: int) -> dict:
    """The crash oracle's transactions: the op lists are cut at the same indexes in every
    process into consecutive transactions, each committed lazily or durably (the last
    one ends with case["end"]); the daemon flushes lazy commits after `flush_ms`."""
    n = rng.choice((1, 2, 3, 3, 4))
    cuts = sorted(rng.randrange(0, nops + 1) for _ in range(n - 1))
    return {"cuts": cuts, "lazy": [rng.random() < 0.6 for _ in range(n)],
            "flush_ms": rng.choice((5, 50, 60000, 60000))}


def txn_segments(case) -> tuple[list[list[list]], list[bool], int | None]:
    """(segments, lazy, flush_ms): segments[j][k] is process k's ops in transaction j."""
    t = case.get("txns") or {"cuts": [], "lazy": [False], "flush_ms": None}
    bounds = [0, *t["cuts"], None]
    segs = [[lst[bounds[j]:bounds[j + 1]] for lst in case["lists"]] for j in range(len(bounds) - 1)]
    return segs, t["lazy"], t["flush_ms"]


_points = None


def crash_point_names() -> list[str]:
    global _points
    if _points is None:
        _points = [p[0] for p in crash_points()]
    return _points


def format_case(case: dict) -> str:
    """A runnable reproducer: JSON with one op per line (tests/fuzz/run --replay FILE)."""
    head = {k: v for k, v in case.items() if k != "lists"}
    lines = ["{", f'  "meta": {json.dumps(head)},', '  "lists": [']
    for k, lst in enumerate(case["lists"]):
        lines.append("    [")
        lines += [f"      {json.dumps(o)}{',' if i < len(lst) - 1 else ''}" for i, o in enumerate(lst)]
        lines.append("    ]" + ("," if k < len(case["lists"]) - 1 else ""))
    lines += ["  ]", "}"]
    return "\n".join(lines)


def parse_case(text: str) -> dict:
    j = json.loads(text)
    return dict(j["meta"], lists=j["lists"])
