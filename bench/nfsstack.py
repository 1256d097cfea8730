"""bench/nfsstack.py — the NFS benchmark stack shared by bench/nfs-bench and bench/tcnfs-eval.

    stack = Stack(image_gib=16, txnfs_opts=[])
    try:
        res = run_workload(stack, "T", "write", ["--dir", "/x", "--files", "100"])
    finally:
        stack.close()

One sparse XFS image (reflink=1), loop-mounted; on it a plain directory and a txnfs store
whose mount is exported by the patched Ganesha (+ bridge); Debian's unpatched
ganesha.nfsd exports the plain directory. Configurations:

    V  Debian's ganesha.nfsd, plain XFS directory (the baseline)
    F  patched ganesha.nfsd on the txnfs mount, COMPOUNDs untagged (transactions off)
    T  the same server, COMPOUNDs tagged "txn" (each one a transaction)
    L  T-lazy: the same server, COMPOUNDs tagged "txn-lazy" (each one a transaction that
       commits lazily: the reply comes before it is durable)

Both servers get contrib/ganesha.conf; `rpc_buffer` (bytes) replaces its
MaxRPCRecvBufferSize / MaxRPCSendBufferSize (1 MiB) in a private copy of the template,
for both servers alike (Ganesha 4.3 accepts up to 9 MiB), so that a single file larger
than 1 MiB can travel in one COMPOUND.

Stack.close() stops both servers by PID, unmounts txnfs, unmounts the image and detaches
its loop device; it never raises before everything was tried.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from txnfs_testing import ganesha_lib as gl
from txnfs_testing import txnfs_lib as tl

REPO = Path(__file__).resolve().parents[1]

NFSBENCH = REPO / "build" / "bench" / "txnfs-nfsbench"
CONFIGS = ("V", "F", "T", "L")
# Operations per COMPOUND each server accepts: Debian's Ganesha 4.3 refuses more than 100
# (NFS4_MAX_OPERATIONS), whatever CREATE_SESSION granted; the patched one takes 16384.
MAX_OPS = {"V": 100, "F": 16384, "T": 16384, "L": 16384}
MIB = 1 << 20


def size_of(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    return int(t[:-1]) * units[t[-1]] if t[-1] in units else int(t)


def label(n: int) -> str:
    for unit, f in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= f and n % f == 0:
            return f"{n // f}{unit}"
    return str(n)


def rss_kib(pid: int | None) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in KiB, or (0, 0)."""
    out = {"VmRSS": 0, "VmHWM": 0}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            k, _, v = line.partition(":")
            if k in out:
                out[k] = int(v.split()[0])
    except (OSError, TypeError):
        pass
    return out["VmRSS"], out["VmHWM"]


def reset_hwm(pid: int | None) -> None:
    """Reset a process's VmHWM to its current RSS (/proc/PID/clear_refs, "5")."""
    if pid:
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        except OSError:
            pass


def ensure_built() -> None:
    """Builds what the NFS benchmarks need (scripts/build: missing Debian packages, the
    patched Ganesha, libfuse 3.18, meson setup on a fresh clone, ninja); exits on failure."""
    p = subprocess.run([str(REPO / "scripts" / "build")], stdout=sys.stderr)
    if p.returncode != 0 or not NFSBENCH.exists():
        sys.exit(f"{Path(sys.argv[0]).name}: the build failed (see above); run scripts/build as root")


class Stack:
    """The XFS image, the txnfs store and mount, and the two servers."""

    def __init__(self, image_gib: int, txnfs_opts: list[str], rpc_buffer: int = MIB):
        self.txnfs_opts = list(txnfs_opts)
        self.img = self.store = self.mnt = self.v = self.p = None
        self._template = None
        self._uring_old = None
        try:
            # FUSE over io_uring, as scripts/up serves it (TXNFS_IO_URING=0: /dev/fuse);
            # the module parameter is restored by close()
            if os.environ.get("TXNFS_IO_URING", "1") != "0":
                self._uring_old = tl.enable_uring()
            self.io_uring = self._uring_old is not None
            if self.io_uring and "--io-uring" not in self.txnfs_opts:
                self.txnfs_opts.append("--io-uring")
            self.img = tl.XfsImage(size=image_gib << 30)
            self.store = tl.Store(self.img.dir / "store").init()
            self.mnt = tl.Mount(self.store, self.img.tmp / "mnt", self.img.tmp / "txnfs.pid")
            self.mnt.mount(*self.txnfs_opts)
            self.plain = self.img.dir / "plain"
            self.plain.mkdir()
            self.work = self.img.tmp / "ganesha"
            if rpc_buffer != MIB:
                self._use_rpc_buffer(rpc_buffer)
            self.v = gl.Ganesha(self.plain, self.work / "v", debian=True, bridge=False)
            self.p = gl.Ganesha(self.mnt.path, self.work / "p", bridge=True,
                                bridge_options={"verbose": "no"})
            self.v.start()
            self.p.start()
        except BaseException:
            self.close()
            raise

    def _use_rpc_buffer(self, nbytes: int) -> None:
        text = gl.TEMPLATE.read_text()
        for key in ("MaxRPCRecvBufferSize", "MaxRPCSendBufferSize"):
            old = f"{key} = {MIB};"
            assert old in text, f"contrib/ganesha.conf: no '{old}' to replace"
            text = text.replace(old, f"{key} = {nbytes};")
        fd, path = tempfile.mkstemp(prefix="ganesha-bench-", suffix=".conf", dir=self.img.tmp)
        os.write(fd, text.encode())
        os.close(fd)
        self._template = Path(path)
        gl.TEMPLATE = self._template  # render_config() reads the module global

    def server(self, config: str) -> tuple[gl.Ganesha, str]:
        tag = {"T": "txn", "L": "txn-lazy"}.get(config, "plain")
        return (self.v, "plain") if config == "V" else (self.p, tag)

    def restart_patched(self, extra_env: dict | None = None) -> None:
        """Stop the patched server and start a new one (e.g. after the mount changed)."""
        try:
            self.p.stop()
        except Exception as e:  # noqa: BLE001 — it may have died with the daemon
            print(f"nfsstack: patched ganesha had stopped: {str(e).splitlines()[0]}", file=sys.stderr)
        self.p = gl.Ganesha(self.mnt.path, self.work / "p", bridge=True,
                            bridge_options={"verbose": "no"}, extra_env=extra_env)
        self.p.start()

    def close(self) -> None:
        for g in (self.p, self.v):
            if g is None:
                continue
            try:
                g.stop()
            except Exception as e:  # noqa: BLE001 — keep cleaning up
                print(f"nfsstack: stopping ganesha: {e}", file=sys.stderr)
        try:
            if self.mnt is not None:
                if self.mnt.pid is not None and not tl.pid_alive(self.mnt.pid):
                    self.mnt.pid = None
                if self.mnt.mounted:
                    if self.mnt.pid is None:
                        tl.lazy_umount(self.mnt.path)
                    else:
                        self.mnt.umount()
        except Exception as e:  # noqa: BLE001
            print(f"nfsstack: unmounting txnfs: {e}", file=sys.stderr)
            tl.lazy_umount(self.mnt.path)
            if self.mnt.pid is not None:
                tl.kill_and_wait(self.mnt.pid)
        finally:
            if self.img is not None:
                self.img.close()
            try:
                tl.restore_uring(self._uring_old)
            except (OSError, subprocess.CalledProcessError) as e:
                print(f"nfsstack: restoring {tl.URING_PARAM}: {e}", file=sys.stderr)


def run_workload(stack: Stack, config: str, workload: str, args: list[str],
                 timeout: float = 3600) -> dict:
    """Runs txnfs-nfsbench once against CONFIG; its JSON result plus, after the run,
    VmRSS/VmHWM (KiB) of the server and (F, T) of the txnfs daemon, VmHWM reset before."""
    g, tag = stack.server(config)
    cmd = [str(NFSBENCH), workload, "--port", str(g.port), "--tag", tag,
           "--max-ops", str(MAX_OPS[config]), *args]
    reset_hwm(g.pid)
    reset_hwm(stack.mnt.pid)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}\n{g.log_tail()}")
    res = json.loads(p.stdout.strip().splitlines()[-1])
    res["ganesha_rss_kib"], res["ganesha_hwm_kib"] = rss_kib(g.pid)
    res["txnfs_rss_kib"], res["txnfs_hwm_kib"] = rss_kib(stack.mnt.pid) if config != "V" else (0, 0)
    return res
