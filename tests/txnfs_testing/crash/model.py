"""The model of the crash harness: what each thread's part of the tree must be. A Part is
one thread's objects (Obj: type, mode, owner, data, xattrs, symlink target; hard links
share one Obj) by path; describe() and digest() are what the checks compare. actual()
reads a thread's part of the mounted tree in the same form; diff() names the
differences; model_from_tree() rebuilds a Part from the tree (after a soak's repair).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from pathlib import Path


class Obj:
    __slots__ = ("kind", "data", "mode", "uid", "gid", "xattrs", "target")

    def __init__(self, kind, mode, data=b"", target=None, uid=0, gid=0, xattrs=None):
        self.kind = kind          # "f", "d", "l"
        self.data = data          # bytes (files)
        self.mode = mode          # permission bits
        self.uid = uid
        self.gid = gid
        self.xattrs = dict(xattrs or {})
        self.target = target      # symlinks

    def copy(self):
        return Obj(self.kind, self.mode, self.data, self.target, self.uid, self.gid, self.xattrs)


class Part:
    """One thread's share of the tree: names (paths from the mount root) -> object ids."""

    def __init__(self):
        self.names: dict[str, int] = {}
        self.objs: dict[int, Obj] = {}
        self.next_oid = 1

    def copy(self) -> "Part":
        p = Part()
        p.names = dict(self.names)
        p.objs = {k: v.copy() for k, v in self.objs.items()}
        p.next_oid = self.next_oid
        return p

    def add(self, path, obj) -> int:
        oid = self.next_oid
        self.next_oid += 1
        self.objs[oid] = obj
        self.names[path] = oid
        return oid

    def obj(self, path) -> Obj:
        return self.objs[self.names[path]]

    def drop_name(self, path):
        oid = self.names.pop(path)
        if oid not in self.names.values():
            del self.objs[oid]

    def describe(self) -> dict:
        """{path: description} plus the hard-link groups, comparable with actual()."""
        nlink = {}
        for oid in self.names.values():
            nlink[oid] = nlink.get(oid, 0) + 1
        out = {}
        for path, oid in self.names.items():
            o = self.objs[oid]
            d = {"kind": o.kind}
            if o.kind != "l":
                d.update(mode=o.mode, uid=o.uid, gid=o.gid,
                         xattrs={n: v.hex() for n, v in sorted(o.xattrs.items())})
            if o.kind == "f":
                d.update(size=len(o.data), sha=hashlib.sha256(o.data).hexdigest()[:16],
                         nlink=nlink[oid])
            if o.kind == "l":
                d["target"] = o.target
            out[path] = d
        groups = {}
        for path, oid in self.names.items():
            groups.setdefault(oid, []).append(path)
        links = sorted(sorted(g) for g in groups.values() if len(g) > 1)
        return {"entries": out, "links": links}

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.describe(), sort_keys=True).encode()).hexdigest()[:16]


def _xattrs_of(path) -> dict:
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return {}
        raise
    return {n: os.getxattr(path, n, follow_symlinks=False).hex()
            for n in sorted(names) if n.startswith("user.")}


def actual(mnt: Path, k: int) -> dict:
    """What the tree under `mnt` shows of thread k's share, in Part.describe() form."""
    paths = []
    root = mnt / f"w{k}"
    if root.exists() or root.is_symlink():
        paths.append(f"w{k}")
        for dirpath, dirnames, filenames in os.walk(root):
            rel = os.path.relpath(dirpath, mnt)
            paths += [f"{rel}/{n}" for n in dirnames + filenames]
    shared = mnt / "shared"
    for n in sorted(os.listdir(shared)):
        if n.startswith(f"k{k}_"):
            paths.append(f"shared/{n}")
            p = shared / n
            if p.is_dir() and not p.is_symlink():
                for dirpath, dirnames, filenames in os.walk(p):
                    rel = os.path.relpath(dirpath, mnt)
                    paths += [f"{rel}/{x}" for x in dirnames + filenames]
    out, inodes = {}, {}
    for rel in paths:
        p = mnt / rel
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):
            out[rel] = {"kind": "l", "target": os.readlink(p)}
            continue
        d = {"kind": "d" if stat.S_ISDIR(st.st_mode) else "f" if stat.S_ISREG(st.st_mode) else "?",
             "mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid, "gid": st.st_gid,
             "xattrs": _xattrs_of(p)}
        if d["kind"] == "f":
            with open(p, "rb") as f:
                data = f.read()
            d.update(size=st.st_size, sha=hashlib.sha256(data).hexdigest()[:16], nlink=st.st_nlink)
            inodes.setdefault(st.st_ino, []).append(rel)
        out[rel] = d
    links = sorted(sorted(g) for g in inodes.values() if len(g) > 1)
    return {"entries": out, "links": links}


def diff(expected: dict, got: dict, limit=30) -> list[str]:
    out = []
    e, g = expected["entries"], got["entries"]
    for p in sorted(set(e) | set(g)):
        if p not in g:
            out.append(f"{p}: missing (expected {e[p]})")
        elif p not in e:
            out.append(f"{p}: unexpected ({g[p]})")
        elif e[p] != g[p]:
            keys = sorted(set(e[p]) | set(g[p]))
            out.append(f"{p}: " + ", ".join(f"{k} expected {e[p].get(k)!r} got {g[p].get(k)!r}"
                                            for k in keys if e[p].get(k) != g[p].get(k)))
        if len(out) >= limit:
            return out + ["..."]
    if expected["links"] != got["links"]:
        out.append(f"hard links: expected {expected['links']}, got {got['links']}")
    return out


def model_from_tree(mnt: Path, k: int) -> Part:
    """A Part that describes what the tree shows now (to go on after a reported violation)."""
    p = Part()
    by_ino = {}
    paths = [f"w{k}"]
    for dirpath, dirnames, filenames in os.walk(mnt / f"w{k}"):
        rel = os.path.relpath(dirpath, mnt)
        paths += [f"{rel}/{n}" for n in dirnames + filenames]
    for n in sorted(os.listdir(mnt / "shared")):
        if n.startswith(f"k{k}_"):
            paths.append(f"shared/{n}")
            if (mnt / "shared" / n).is_dir() and not (mnt / "shared" / n).is_symlink():
                for dirpath, dirnames, filenames in os.walk(mnt / "shared" / n):
                    rel = os.path.relpath(dirpath, mnt)
                    paths += [f"{rel}/{x}" for x in dirnames + filenames]
    for rel in paths:
        path = mnt / rel
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and st.st_ino in by_ino:
            p.names[rel] = by_ino[st.st_ino]
            continue
        if stat.S_ISLNK(st.st_mode):
            o = Obj("l", 0o777, target=os.readlink(path))
        else:
            xs = {n: bytes.fromhex(v) for n, v in _xattrs_of(path).items()}
            data = path.read_bytes() if stat.S_ISREG(st.st_mode) else b""
            o = Obj("f" if stat.S_ISREG(st.st_mode) else "d", stat.S_IMODE(st.st_mode), data,
                    uid=st.st_uid, gid=st.st_gid, xattrs=xs)
        oid = p.add(rel, o)
        if stat.S_ISREG(st.st_mode):
            by_ino[st.st_ino] = oid
    return p
