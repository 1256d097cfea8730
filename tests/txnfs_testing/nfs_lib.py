"""The txnfs-nfs client for the NFS integration tests: run one COMPOUND, get its JSON.

    r = Nfs(port).run(["write", "/etc/passwd", "=root:x:0:0"], ["remove", "/x"], txn=True)
    r.status          # "NFS4_OK" or the failing operation's status, e.g. "NFS4ERR_NOENT"
    r.ops[0]["status"]

Each call is one txnfs-nfs process, hence one COMPOUND (plus session set-up), with a
timeout: a server that hangs fails the test instead of stalling the suite.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

from txnfs_testing.txnfs_lib import REPO

CLIENT = REPO / "build" / "src" / "compound_bridge" / "client" / "txnfs-nfs"
TIMEOUT = 60


@dataclass
class Reply:
    code: int       # txnfs-nfs exit status: 0 ok, 1 NFS error, 2 usage/connection, 3 too big
    status: str
    ops: list
    raw: dict
    stderr: str

    @property
    def ok(self) -> bool:
        return self.code == 0 and self.status == "NFS4_OK"


class Nfs:
    def __init__(self, port: int, export: str = "/"):
        self.port = port
        self.export = export

    def argv(self, ops, *, txn=False, tag=None, retry=None, extra=()) -> list[str]:
        cmd = [str(CLIENT), "--port", str(self.port), "--export", self.export, "--json", *extra]
        if txn:
            cmd.append("--txn")
        if tag is not None:
            cmd += ["--tag", tag]
        if retry is not None:
            cmd += ["--retry", str(retry)]
        for i, op in enumerate(ops):
            if i:
                cmd.append(";")
            cmd += [str(w) for w in op]
        return cmd

    def run(self, *ops, txn=False, tag=None, retry=None, extra=(), timeout=TIMEOUT) -> Reply:
        p = subprocess.run(self.argv(ops, txn=txn, tag=tag, retry=retry, extra=extra),
                           capture_output=True, text=True, timeout=timeout)
        try:
            raw = json.loads(p.stdout) if p.stdout.strip() else {}
        except json.JSONDecodeError:
            raise AssertionError(f"txnfs-nfs printed no JSON (exit {p.returncode}):\n"
                                 f"{p.stdout}\n{p.stderr}")
        return Reply(p.returncode, raw.get("status", ""), raw.get("ops", []), raw, p.stderr)

    def must(self, *ops, **kw) -> Reply:
        r = self.run(*ops, **kw)
        assert r.ok, f"COMPOUND failed: {r.status} {r.raw.get('failed_at')} {r.stderr}\n{r.raw}"
        return r

    def read(self, path) -> bytes | None:
        """The file's content through NFS (None if the COMPOUND failed)."""
        p = subprocess.run([str(CLIENT), "--port", str(self.port), "--export", self.export,
                            "read", path, "--out", "-"], capture_output=True, timeout=TIMEOUT)
        return p.stdout if p.returncode == 0 else None

    def getattr(self, path) -> dict | None:
        """The attributes through NFS (mode as an int), or None if the COMPOUND failed."""
        r = self.run(["getattr", path])
        if not r.ok:
            return None
        a = dict(r.ops[0]["attrs"])
        a["mode"] = int(a["mode"], 8) if isinstance(a["mode"], str) else a["mode"]
        return a

    def names(self, path) -> list[str] | None:
        r = self.run(["readdir", path])
        return sorted(r.ops[0]["names"]) if r.ok else None
