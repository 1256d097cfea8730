"""The commands of contrib/systemd/txnfs@.service do what the unit promises, run as
systemd runs them (specifiers and the EnvironmentFile expanded; systemd itself cannot
run as PID 1 here, `systemd-analyze verify` is in test_install.py): after a kill -9 of
the daemon, ExecStartPre clears the dead mount point (and a hung one, without hanging),
ExecStart recovers the store -- printing the recovery, which systemd sends to the
journal -- and returns once the tree is served with the daemon's PID in PIDFile, and
ExecStop unmounts and ends it."""

from __future__ import annotations

import os
import re
import shlex
import threading

from txnfs_testing import txnfs_lib as tl

UNIT = tl.REPO / "build" / "contrib" / "txnfs@.service"
GANESHA_UNIT = tl.REPO / "build" / "contrib" / "txnfs-ganesha@.service"


def unit_commands(instance: str, path: str, env: dict, unit=UNIT) -> dict:
    """{key: [argv, ...]} of the unit's Exec*/PIDFile lines, expanded like systemd does
    for these lines: %i %f %%, ${VAR} anywhere, $VAR as a word of its own (split)."""
    out: dict = {}
    for line in unit.read_text().splitlines():
        m = re.match(r"^(ExecStartPre|ExecStart|ExecStop|PIDFile)=(.*)$", line)
        if not m:
            continue
        key, value = m.groups()
        argv = []
        for w in shlex.split(value.lstrip("-")):
            if re.fullmatch(r"\$\w+", w):
                argv += env.get(w[1:], "").split()
                continue
            # specifiers after splitting: an escaped instance holds backslashes (\x2d)
            w = re.sub(r"%[if%]", lambda s: {"%i": instance, "%f": path, "%%": "%"}[s.group(0)], w)
            argv.append(re.sub(r"\$\{(\w+)\}", lambda v: env.get(v.group(1), ""), w))
        out.setdefault(key, []).append(argv)
    return out


def start_pre(cmds: dict) -> list:
    """ExecStartPre's commands, the build's txnfs standing in for the installed one."""
    installed = cmds["ExecStart"][0][0]
    return [[a.replace(installed, tl.txnfs_bin()) for a in argv] for argv in cmds["ExecStartPre"]]


def unit_env(mnt, xfs) -> tuple[str, dict]:
    instance = tl.run(["systemd-escape", "--path", mnt.store.path], check=True).stdout.strip()
    envfile = xfs.tmp / f"{instance}.env"
    envfile.write_text(f"MOUNTPOINT={mnt.path}\nTXNFS_OPTS=--lock-timeout-ms 500\n")
    env = dict(os.environ)
    for line in envfile.read_text().splitlines():
        k, _, v = line.partition("=")
        env[k] = v
    return instance, env


def test_txnfs_unit_start_takes_down_a_hung_mount_without_hanging(mnt, xfs):
    """A daemon that no longer answers (here: stopped) leaves a mount that a stat would
    hang on; ExecStartPre aborts it instead, and the requests waiting on it fail."""
    (mnt.path / "keep").write_text("committed")
    instance, env = unit_env(mnt, xfs)
    cmds = unit_commands(instance, str(mnt.store.path), env)
    pid = mnt.pid
    with tl.hung_mount(mnt, "waiting") as waiting:
        for argv in start_pre(cmds):
            p = tl.subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
            assert p.returncode == 0, tl.output_of(p)
        assert not tl.is_mounted(mnt.path), "ExecStartPre left the hung mount point"
        tl.release_stopped_daemon(pid, waiting)
    mnt.pid = None
    mnt.mount()
    assert (mnt.path / "keep").read_text() == "committed"
    assert not (mnt.path / "waiting").exists()


def test_txnfs_unit_commands_recover_mount_and_stop(mnt, xfs):
    m = mnt.path
    (m / "keep").write_text("committed")
    # a transaction that is open when the daemon dies
    # (its thread stays alive until the daemon is dead: the daemon aborts a transaction
    # whose thread is gone)
    started, killed = threading.Event(), threading.Event()

    def open_txn():
        tl.txn_begin(m)
        (m / "keep").write_text("uncommitted")
        (m / "new").write_text("uncommitted")
        started.set()
        killed.wait(60)

    th = threading.Thread(target=open_txn)
    th.start()
    try:
        assert started.wait(30)
        assert tl.kill_and_wait(mnt.pid, 15)
        mnt.pid = None
    finally:
        killed.set()
        th.join(30)
    assert tl.is_mounted(m) and tl.errno_of(os.stat, m) is not None   # a dead mount point

    instance, env = unit_env(mnt, xfs)
    cmds = unit_commands(instance, str(mnt.store.path), env)
    pidfile = cmds["PIDFile"][0][0]
    assert pidfile == f"/run/txnfs-{instance}.pid"
    started_daemon = None
    try:
        for argv in start_pre(cmds):
            p = tl.subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, tl.output_of(p)
        assert not tl.is_mounted(m), "ExecStartPre left the dead mount point"
        [start] = cmds["ExecStart"]
        assert os.path.basename(start[0]) == "txnfs" and start[1:3] == ["mount", str(mnt.store.path)]
        assert start[3:] == [str(m), "--pid-file", pidfile, "--lock-timeout-ms", "500"], start
        start[0] = tl.txnfs_bin()   # the build's binary stands in for the installed one
        p = tl.subprocess.run(start, env=env, capture_output=True, text=True, timeout=120)
        out = tl.output_of(p)
        assert p.returncode == 0, out
        started_daemon = int(open(pidfile).read())
        assert tl.pid_alive(started_daemon) and tl.is_mounted(m)
        assert re.search(r"\[info\] recovery: rolled back 1 transaction \(", out), out
        assert (m / "keep").read_text() == "committed" and not (m / "new").exists()
        [stop] = cmds["ExecStop"]
        stop[0] = tl.txnfs_bin()
        p = tl.subprocess.run(stop, env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, tl.output_of(p)
        assert tl.wait_dead(started_daemon, 15) and not tl.is_mounted(m)
        assert not os.path.exists(pidfile)
    finally:
        if started_daemon and tl.pid_alive(started_daemon):
            tl.run(["fusermount3", "-u", m])
            if not tl.wait_dead(started_daemon, 15):
                tl.kill_and_wait(started_daemon)
        tl.lazy_umount(m)


def unit_settings(unit, key: str) -> list[str]:
    return [l.split("=", 1)[1] for l in unit.read_text().splitlines() if l.startswith(key + "=")]


def test_ganesha_unit_commands_export_the_mount_with_the_bridge(mnt, xfs):
    """txnfs-ganesha@.service's environment and commands, replayed: the patched Ganesha
    of the tests ($TXNFS_GANESHA_BIN or build/ganesha/prefix) as GANESHA_NFSD, the build's
    bridge standing in for the installed one; a COMPOUND tagged txn commits through it, a
    failing one leaves nothing, and the bridge logs where the unit says."""
    from txnfs_testing import ganesha_lib as gl
    from txnfs_testing import nfs_lib

    instance = tl.run(["systemd-escape", "--path", mnt.store.path], check=True).stdout.strip()
    assert unit_settings(GANESHA_UNIT, "BindsTo") == ["txnfs@%i.service"]
    [sysconf] = {os.path.dirname(f.lstrip("-")) for f in unit_settings(GANESHA_UNIT, "EnvironmentFile")}
    etc = xfs.tmp / "etc"
    run, state = xfs.tmp / "run", xfs.tmp / "state"
    for d in (etc, run, state):
        d.mkdir()
    (etc / f"{instance}.env").write_text(f"MOUNTPOINT={mnt.path}\n")
    (etc / "ganesha.env").write_text(f"GANESHA_NFSD={gl.patched_bin()}\n")
    lease = gl.PortLease()
    proc = None
    try:
        (etc / f"{instance}.ganesha.conf").write_text(gl.render_config(lease.port, mnt.path, state))
        # systemd: Environment= first, EnvironmentFile= override; then its own variables
        env = dict(os.environ)
        for e in unit_settings(GANESHA_UNIT, "Environment"):
            k, _, v = e.replace("%i", instance).partition("=")
            env[k] = v
        for f in unit_settings(GANESHA_UNIT, "EnvironmentFile"):
            f = f.lstrip("-").replace(sysconf, str(etc)).replace("%i", instance)
            for line in open(f).read().splitlines():
                k, _, v = line.partition("=")
                env[k] = v
        assert env["TXNFS_BRIDGE_LIB"].endswith("/libtxnfs_bridge.so")
        env["TXNFS_BRIDGE_LIB"] = gl.bridge_lib()
        env["TXNFS_BRIDGE_CONF"] = env["TXNFS_BRIDGE_CONF"].replace(
            f"/run/txnfs-ganesha-{instance}", str(run))
        env.update(RUNTIME_DIRECTORY=str(run), STATE_DIRECTORY=str(state))
        cmds = unit_commands(instance, str(mnt.store.path), env, GANESHA_UNIT)
        for argv in cmds["ExecStartPre"]:
            p = tl.subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, tl.output_of(p)
        assert (run / "bridge.conf").read_text() == f"mount = {mnt.path}\nlog = {run}/bridge.log\n"
        [start] = cmds["ExecStart"]
        start = [w.replace(sysconf, str(etc)) for w in start]
        out = open(xfs.tmp / "ganesha.out", "w")
        proc = tl.subprocess.Popen(start, env=env, stdout=out, stderr=tl.subprocess.STDOUT,
                                   start_new_session=True)
        assert tl.wait_until(lambda: gl.port_accepts(lease.port) or proc.poll() is not None, 30)
        assert proc.poll() is None, (xfs.tmp / "ganesha.out").read_text()[-3000:]
        nfs = nfs_lib.Nfs(lease.port)
        nfs.must(("mkdir", "/etc"))
        nfs.must(("write", "/etc/passwd", "=root"), ("write", "/etc/group", "=wheel"), txn=True)
        r = nfs.run(("write", "/etc/passwd", "=mallory"), ("remove", "/etc/nothing"),
                    ("write", "/etc/group", "=mallory"), txn=True)
        assert not r.ok
        assert (mnt.path / "etc/passwd").read_text() == "root"
        assert (mnt.path / "etc/group").read_text() == "wheel"
        assert f"ready: mount {mnt.path};" in (run / "bridge.log").read_text()
        counters = tl.txn_status(mnt.path)["counters"]
        assert counters["commits"] >= 1 and counters["aborts"] >= 1, counters
        # -L STDOUT: Ganesha's log goes where systemd sends stdout, the journal
        assert "NFS SERVER INITIALIZED" in (xfs.tmp / "ganesha.out").read_text()
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()   # systemd's stop: SIGTERM to the main process
            try:
                proc.wait(15)
            except tl.subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        lease.release()
