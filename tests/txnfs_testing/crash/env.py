"""The crash harness's environment: Env is one loop-mounted XFS image with a store on it
and the txnfs daemon serving it -- mount (with an injected crash point armed), kill -9,
power cut (xfs_io shutdown), unmount, the recovery time the daemon logged, the commit
records and backups left in the store -- and cleans all of it up. The fuzzer and
bench/recovery-time use it too.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

from txnfs_testing import txnfs_lib as tl
from txnfs_testing.crash.workload import LOCK_TIMEOUT_MS


class XfsLost(Exception):
    """XFS itself could not mount the image again (its log recovery failed after a power
    cut): the kernel's failure, not txnfs's; the image is lost."""


class Env:
    """A loop-mounted XFS image with a store, and the daemon serving it (foreground)."""

    def __init__(self, workdir: Path, size=2 << 30):
        self.work = workdir
        self.image = workdir / "image"
        self.xfs = workdir / "xfs"
        self.mnt = workdir / "mnt"
        self.logs = workdir / "logs"
        for d in (self.xfs, self.mnt, self.logs):
            d.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen | None = None
        self.log_file: Path | None = None
        self.aborted_connections = 0
        self.stuck_in: list[str] = []   # kernel waits of daemons that survived SIGKILL
        with open(self.image, "wb") as f:
            f.truncate(size)
        tl.run(["mkfs.xfs", "-q", "-m", "reflink=1", self.image], check=True)
        self.mount_xfs()
        try:
            self.store = tl.Store(self.xfs / "store").init()
        except BaseException:
            self.close()   # (e.g. no txnfs binary): the image is not left mounted
            raise

    # -- XFS --------------------------------------------------------------
    def mount_xfs(self):
        p = tl.run(["mount", "-o", "loop", self.image, self.xfs])
        if p.returncode != 0:
            # The kernel says why (log recovery failing, say) in its log, not on stderr.
            kernel = tl.run(["dmesg"]).stdout.splitlines()
            raise XfsLost(f"mount -o loop {self.image}: {p.stderr.strip()}\n    kernel: "
                          + "\n    kernel: ".join(ln for ln in kernel[-400:] if "XFS" in ln)[-2000:])

    def umount_xfs(self, release_timeout=60.0):
        """Unmounts the image and waits until its loop device is gone, which is when the
        XFS instance itself is gone. Another mount namespace (any `unshare --mount` made
        while the image was mounted, e.g. by a test running at the same time) holds a copy
        of the mount: the umount here then succeeds, the shut-down instance lives on, and
        `mount -o loop` would reuse its loop device and get that instance back, still shut
        down. So wait for the holder to go; name it if it does not."""
        p = tl.run(["umount", self.xfs])
        if p.returncode != 0:
            raise RuntimeError(f"umount {self.xfs}: {p.stderr.strip()}")
        self.wait_released(release_timeout)

    def wait_released(self, timeout=60.0):
        """Waits until no loop device is attached to the image (see umount_xfs)."""
        if not tl.wait_until(lambda: not self.loop_devices(), timeout, 0.05):
            raise RuntimeError(
                f"{self.image} is unmounted here but still attached to "
                f"{', '.join(self.loop_devices())}: mount namespaces of {self.holders()} "
                f"keep its XFS alive")

    def loop_devices(self) -> list[str]:
        p = tl.run(["losetup", "-n", "-O", "NAME", "-j", self.image])
        return p.stdout.split()

    def holders(self) -> list[str]:
        """Processes whose mount namespace still has a mount of one of our loop devices."""
        devs = {Path(d).name for d in self.loop_devices()}
        out = []
        for mi in Path("/proc").glob("[0-9]*/mountinfo"):
            try:
                text = mi.read_text()
            except OSError:
                continue
            if any(f"/dev/{d} " in text for d in devs):
                pid = mi.parent.name
                try:
                    comm = (mi.parent / "comm").read_text().strip()
                except OSError:
                    comm = "?"
                out.append(f"{pid} ({comm})")
        return out[:10]

    def power_cut(self):
        """xfs_io shutdown without -f: what the XFS log had not written is lost."""
        tl.run(["xfs_io", "-x", "-c", "shutdown", self.xfs], check=True)

    # -- the daemon -------------------------------------------------------
    def mount(self, name: str, crash_at: str | None = None, timeout=60.0,
              extra=()) -> tuple[int | None, float]:
        """Starts `txnfs mount -f`. Returns (None, seconds) once mounted, or (exit status,
        seconds) when the daemon exited first (a crash point in recovery: 137)."""
        assert self.proc is None
        env = dict(os.environ)
        env.pop("TXNFS_CRASH_AT", None)
        env.pop("TXNFS_TEST_LAZY_RECORDS", None)
        if crash_at:
            env["TXNFS_CRASH_AT"] = crash_at
            # Crashes right after a round synced its commit records: for this cycle lazy
            # commits get records too, as where the durable mark is refused, so that
            # path is crash-tested as well.
            if crash_at.startswith("commit.after_wal_sync"):
                env["TXNFS_TEST_LAZY_RECORDS"] = "1"
        self.log_file = self.logs / f"{name}.log"
        t0 = time.monotonic()
        with open(self.logs / f"{name}.stderr", "wb") as err:
            self.proc = subprocess.Popen(
                [tl.txnfs_bin(), "mount", "-f", str(self.store.path), str(self.mnt),
                 "--log-file", str(self.log_file), "--lock-timeout-ms", str(LOCK_TIMEOUT_MS),
                 *(("--io-uring",) if tl.io_uring_wanted() else ()), *extra],
                env=env, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            if tl.is_mounted(self.mnt):
                return None, time.monotonic() - t0
            rc = self.proc.poll()
            if rc is not None:
                self.proc = None
                return rc, time.monotonic() - t0
            time.sleep(0.005)
        raise RuntimeError(f"txnfs mount did not come up in {timeout} s (log {self.log_file})")

    @staticmethod
    def kernel_waits(pid) -> str:
        """Where the threads of `pid` wait in the kernel (wchan), for the report."""
        out = []
        for t in sorted(Path(f"/proc/{pid}/task").glob("*")):
            try:
                w = (t / "wchan").read_text().strip()
            except OSError:
                continue
            if w and w != "0":
                out.append(w)
        return ",".join(sorted(set(out))) or "?"

    def abort_connection(self):
        """What a user does with such a daemon: `txnfs umount --force` aborts the mount's
        FUSE connection and detaches the mount point."""
        p = tl.txnfs("umount", "--force", self.mnt, timeout=30)
        if p.returncode != 0:
            raise RuntimeError(f"txnfs umount --force {self.mnt}: {tl.output_of(p)}")
        self.aborted_connections += 1

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def daemon_exited(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def kill(self):
        """kill -9 of the daemon (if still running), reap it, clean the dead mount point.

        A daemon thread can be stuck in the kernel where SIGKILL does not reach it: the
        invalidator inside fuse_lowlevel_notify_inval_entry waits for a directory lock
        that a request holds while it waits for the daemon's answer. Nobody answers once
        the other threads are gone, so the process never exits until the FUSE connection
        is aborted -- which `txnfs umount --force` does here after a grace period, as a
        user would."""
        if self.proc is not None:
            try:
                self.proc.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                self.stuck_in.append(self.kernel_waits(self.proc.pid))
                self.abort_connection()
                self.proc.wait(30)
            self.proc = None
        if tl.is_mounted(self.mnt):
            tl.run(["umount", "-l", self.mnt])

    def umount(self):
        """Clean unmount; the daemon must exit 0. A mount still busy for a moment after the
        workload's processes exited (the kernel may release their files a little later)
        is tried again for up to 10 s; then the processes that use it are named."""
        deadline = time.monotonic() + 10
        while True:
            p = tl.txnfs("umount", self.mnt)
            if p.returncode == 0 or "busy" not in tl.output_of(p) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if p.returncode != 0:
            raise RuntimeError(f"txnfs umount: {tl.output_of(p)}; used by: {self.users()}")
        rc = self.proc.wait(30) if self.proc else 0
        self.proc = None
        if rc != 0:
            raise RuntimeError(f"daemon exited {rc} after umount (log {self.log_file})")

    def users(self) -> list[str]:
        """Processes with a file, a mapping or their working directory under the mount."""
        root, out = str(self.mnt), []
        for d in Path("/proc").glob("[0-9]*"):
            try:
                links = [os.readlink(d / "cwd"), os.readlink(d / "root")]
                links += [os.readlink(f) for f in (d / "fd").iterdir()]
                links += [ln.split(None, 5)[5] for ln in (d / "maps").read_text().splitlines()
                          if len(ln.split(None, 5)) == 6]
                if any(x == root or x.startswith(root + "/") for x in links):
                    out.append(f"{d.name} ({(d / 'comm').read_text().strip()})")
            except OSError:
                continue
        return out[:10]

    def recovery_seconds(self) -> float:
        """The recovery time the daemon logged (0 when there was nothing to recover).
        Recovery logs before the daemon switches to --log-file: it is in the .stderr."""
        text = ""
        for f in (self.log_file, self.log_file.with_suffix(".stderr")):
            try:
                text += f.read_text()
            except OSError:
                pass
        m = re.findall(r"recovery: .* in ([0-9.]+) s", text)
        return float(m[-1]) if m else 0.0

    def txn_records(self) -> dict[int, str]:
        """{id: state} of the transaction records in the database as the crash left it
        (read from a copy, so nothing of the store changes before recovery)."""
        tmp = Path(tempfile.mkdtemp(prefix="dbcopy-", dir=self.work))
        try:
            for suffix in ("", "-wal"):
                src = Path(str(self.store.db) + suffix)
                if src.exists():
                    shutil.copyfile(src, tmp / ("meta.db" + suffix))
            con = sqlite3.connect(str(tmp / "meta.db"))
            try:
                return dict(con.execute("SELECT id, state FROM txns"))
            finally:
                con.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def lazy_marks(self, logs) -> tuple[int, dict[int, int]]:
        """The durable mark of the backups directory and the commit markers of the logs
        that have one, as the crash left them."""
        d = self.store.internal / "backups"

        def value(path, xattr, link):
            try:
                return int(os.getxattr(path, xattr))
            except OSError:
                pass
            if link is None:
                return None
            try:
                return int(os.readlink(path / link))
            except OSError:
                return None
        mark = value(d, "trusted.txnfs.lazy_durable", None) or 0
        markers = {}
        for t in logs:
            seq = value(d / str(t), "trusted.txnfs.lazy", "lazy")
            if seq is not None:
                markers[t] = seq
        return mark, markers

    def backups_left(self) -> list[str]:
        d = self.store.internal / "backups"
        return sorted(os.listdir(d)) if d.exists() else ["<backups/ is missing>"]

    def close(self):
        problems = []
        try:
            self.kill()
        except Exception as e:  # noqa: BLE001
            problems.append(f"kill: {e}")
        if tl.is_mounted(self.mnt):
            tl.run(["umount", "-l", self.mnt])
        if tl.is_mounted(self.xfs):
            p = tl.run(["umount", self.xfs])
            if p.returncode != 0:
                problems.append(f"umount {self.xfs}: {p.stderr.strip()}")
                tl.run(["umount", "-l", self.xfs])
        for _ in range(50):
            loops = [ln.split(":", 1)[0] for ln in
                     tl.run(["losetup", "-j", self.image]).stdout.splitlines() if ln.strip()]
            if not loops:
                break
            for dev in loops:
                tl.run(["losetup", "-d", dev])
            time.sleep(0.05)
        return problems
