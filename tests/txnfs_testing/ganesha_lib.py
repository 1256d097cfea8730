"""NFS-Ganesha servers for the integration tests.

    with Ganesha(export_path, work_dir) as g:      # patched server + txnfs bridge
        ... talk NFSv4 to 127.0.0.1:g.port ...

`Ganesha` writes contrib/ganesha.conf (placeholders filled in) into a private work
directory, starts the server in the foreground (-F) with its own pid and log files on a
free port of 127.0.0.1, and returns once the port accepts connections. Leaving the
block stops the server by its PID (SIGTERM, then SIGKILL after a timeout); if the server
failed to start or died, or the block raised, the tail of its logs is reported.

Servers:
  patched  build/ganesha/prefix/bin/ganesha.nfsd ($TXNFS_GANESHA_BIN), built by
           scripts/build-ganesha; with bridge=True it gets TXNFS_BRIDGE_LIB
           (build/src/compound_bridge/libtxnfs_bridge.so, or $TXNFS_BRIDGE_LIB) and a
           TXNFS_BRIDGE_CONF written into the work directory.
  debian   Debian's unpatched /usr/bin/ganesha.nfsd, the baseline.

Nothing here knows about pytest.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from txnfs_testing.txnfs_lib import REPO

TEMPLATE = REPO / "contrib" / "ganesha.conf"
DEBIAN_BIN = "/usr/bin/ganesha.nfsd"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0
PORT_LOCK_DIR = Path("/tmp/txnfs-ganesha-ports")


def patched_bin() -> str:
    """$TXNFS_GANESHA_BIN, else build/ganesha/prefix/bin/ganesha.nfsd."""
    env = os.environ.get("TXNFS_GANESHA_BIN")
    return env if env else str(REPO / "build" / "ganesha" / "prefix" / "bin" / "ganesha.nfsd")


def bridge_lib() -> str:
    """$TXNFS_BRIDGE_LIB, else build/src/compound_bridge/libtxnfs_bridge.so."""
    env = os.environ.get("TXNFS_BRIDGE_LIB")
    return env if env else str(REPO / "build" / "src" / "compound_bridge" / "libtxnfs_bridge.so")


def render_config(port: int, export_path, work, addr: str = "127.0.0.1") -> str:
    """contrib/ganesha.conf for a server on addr:port exporting export_path."""
    text = (TEMPLATE.read_text().replace("@PORT@", str(port)).replace("@ADDR@", addr)
            .replace("@EXPORT_PATH@", str(export_path)).replace("@WORK@", str(work)))
    assert "@" not in "".join(l.split("#")[0] for l in text.splitlines()), \
        "contrib/ganesha.conf has a placeholder this helper does not fill in"
    return text


class PortLease:
    """A free TCP port of 127.0.0.1, leased through an flock()ed file under
    PORT_LOCK_DIR for as long as the lease is held, so that concurrent runs of this
    helper never pick the same port. (Another program can still take it between the
    probe and the server's bind: Ganesha then fails to start, and the caller retries.)"""

    def __init__(self):
        PORT_LOCK_DIR.mkdir(mode=0o755, exist_ok=True)
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            fd = os.open(PORT_LOCK_DIR / str(port), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.port, self._fd = port, fd
            return
        raise RuntimeError("no free TCP port on 127.0.0.1 after 100 tries")

    def release(self):
        if self._fd is not None:
            os.close(self._fd)   # the file stays; its lock is what counts
            self._fd = None


def port_accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class Ganesha:
    """One NFS-Ganesha server exporting `export_path` (context manager).

    work_dir receives ganesha.conf, ganesha.pid, ganesha.log, ganesha.out (its stdout and
    stderr), recovery/, and with the bridge bridge.conf and bridge.log.
    bridge_options: extra `key = value` lines of the bridge configuration, e.g.
    {"all_compounds": "yes"} (mount, log and verbose = yes are always set).
    config_lines: {text: replacement} applied to the rendered ganesha.conf, e.g. to run
    a test against a deliberately different cache setting."""

    def __init__(self, export_path, work_dir, *, debian=False, bridge=True,
                 bridge_options: dict | None = None, extra_env: dict | None = None,
                 config_lines: dict | None = None):
        assert not (debian and bridge), "Debian's ganesha.nfsd has no bridge hook"
        self.export_path = Path(export_path)
        self.work = Path(work_dir)
        self.binary = DEBIAN_BIN if debian else patched_bin()
        self.bridge = bridge
        self.bridge_options = dict(bridge_options or {})
        self.extra_env = dict(extra_env or {})
        self.config_lines = dict(config_lines or {})
        self.conf = self.work / "ganesha.conf"
        self.pid_file = self.work / "ganesha.pid"
        self.log = self.work / "ganesha.log"
        self.out = self.work / "ganesha.out"
        self.bridge_conf = self.work / "bridge.conf"
        self.bridge_log = self.work / "bridge.log"
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self._lease: PortLease | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    # -- start / stop ---------------------------------------------------------------

    def _env(self) -> dict:
        env = {k: v for k, v in os.environ.items()
               if k not in ("TXNFS_BRIDGE_LIB", "TXNFS_BRIDGE_CONF")}
        if self.bridge:
            lines = {"mount": str(self.export_path), "log": str(self.bridge_log),
                     "verbose": "yes", **self.bridge_options}
            self.bridge_conf.write_text("".join(f"{k} = {v}\n" for k, v in lines.items()))
            env["TXNFS_BRIDGE_LIB"] = bridge_lib()
            env["TXNFS_BRIDGE_CONF"] = str(self.bridge_conf)
        env.update(self.extra_env)
        return env

    def _start_once(self) -> bool:
        """Start on a freshly leased port; True once it accepts, False if the port was
        taken under us (the server exited having failed to bind). Raises otherwise."""
        self._lease = PortLease()
        self.port = self._lease.port
        for f in (self.pid_file, self.log, self.out, self.bridge_log):
            f.unlink(missing_ok=True)
        text = render_config(self.port, self.export_path, self.work)
        for old_line, new_line in self.config_lines.items():
            assert old_line in text, f"contrib/ganesha.conf has no line {old_line!r}"
            text = text.replace(old_line, new_line)
        self.conf.write_text(text)
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(
                [self.binary, "-F", "-f", self.conf, "-p", self.pid_file, "-L", self.log,
                 "-N", "NIV_EVENT"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=self._env(), start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if "Address already in use" in self.log_tail():
                    self.proc, self.port = None, None
                    self._lease.release()
                    return False
                raise RuntimeError(f"{self.binary} exited with {self.proc.returncode} "
                                   f"while starting\n{self.log_tail()}")
            if port_accepts(self.port):
                return True
            time.sleep(0.05)
        raise RuntimeError(f"{self.binary} did not accept connections on port {self.port} "
                           f"within {START_TIMEOUT:.0f} s\n{self.log_tail()}")

    def start(self) -> "Ganesha":
        assert self.proc is None, "already started"
        assert os.access(self.binary, os.X_OK), (
            f"{self.binary} not found" + ("" if self.binary == DEBIAN_BIN else
                                          ": run scripts/build-ganesha (or set TXNFS_GANESHA_BIN)"))
        if self.bridge:
            assert os.path.isfile(bridge_lib()), (
                f"{bridge_lib()} not found: build it (ninja -C build) or set TXNFS_BRIDGE_LIB")
        self.work.mkdir(parents=True, exist_ok=True)
        try:
            for _ in range(5):
                if self._start_once():
                    return self
            raise RuntimeError("5 ports in a row were taken before Ganesha could bind them")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL after STOP_TIMEOUT; never raises for a dead server.
        Raises if the server had died before (its exit is then a failure to report)."""
        died = None
        if self.proc is not None:
            if self.proc.poll() is not None:
                died = self.proc.returncode
            else:
                try:
                    os.kill(self.proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    self.proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    sys.stderr.write(f"ganesha.nfsd {self.proc.pid} ignored SIGTERM for "
                                     f"{STOP_TIMEOUT:.0f} s; killing it\n")
                    os.kill(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(STOP_TIMEOUT)
            self.proc = None
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        if died is not None:
            raise RuntimeError(f"ganesha.nfsd had exited with {died} before it was stopped\n"
                               f"{self.log_tail()}")

    def __enter__(self) -> "Ganesha":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            sys.stderr.write(self.log_tail() + "\n")
        self.stop()

    # -- logs -----------------------------------------------------------------------

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the server's log, its stdout/stderr and the bridge's log."""
        parts = []
        for f in (self.log, self.out, self.bridge_log):
            try:
                text = f.read_text(errors="replace").splitlines()
            except FileNotFoundError:
                continue
            if text:
                parts.append(f"--- {f} (last {min(lines, len(text))} lines) ---\n"
                             + "\n".join(text[-lines:]))
        return "\n".join(parts) if parts else f"(no logs in {self.work})"

    def bridge_lines(self) -> list[str]:
        try:
            return self.bridge_log.read_text().splitlines()
        except FileNotFoundError:
            return []
