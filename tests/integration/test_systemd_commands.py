"""The commands of contrib/systemd/txnfs@.service do what the unit promises, run as
systemd runs them (specifiers and the EnvironmentFile expanded; systemd itself cannot
run as PID 1 here, `systemd-analyze verify` is in test_install.py): after a kill -9 of
the daemon, ExecStartPre clears the dead mount point, ExecStart recovers the store --
printing the recovery, which systemd sends to the journal -- and returns once the tree
is served with the daemon's PID in PIDFile, and ExecStop unmounts and ends it."""

from __future__ import annotations

import os
import re
import shlex
import threading

import txnfs_lib as tl

UNIT = tl.REPO / "build" / "contrib" / "txnfs@.service"


def unit_commands(instance: str, path: str, env: dict) -> dict:
    """{key: [argv, ...]} of the unit's Exec*/PIDFile lines, expanded like systemd does
    for these lines: %i %f %%, ${VAR} anywhere, $VAR as a word of its own (split)."""
    out: dict = {}
    for line in UNIT.read_text().splitlines():
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


def test_txnfs_unit_commands_recover_mount_and_stop(mnt, xfs):
    m = mnt.path
    (m / "keep").write_text("committed")
    # a transaction that is open when the daemon dies
    started = threading.Event()

    def open_txn():
        tl.txn_begin(m)
        (m / "keep").write_text("uncommitted")
        (m / "new").write_text("uncommitted")
        started.set()

    th = threading.Thread(target=open_txn)
    th.start()
    th.join(30)
    assert started.is_set()
    assert tl.kill_and_wait(mnt.pid, 15)
    mnt.pid = None
    assert tl.is_mounted(m) and tl.errno_of(os.stat, m) is not None   # a dead mount point

    instance = tl.run(["systemd-escape", "--path", mnt.store.path], check=True).stdout.strip()
    envfile = xfs.tmp / f"{instance}.env"
    envfile.write_text(f"MOUNTPOINT={m}\nTXNFS_OPTS=--lock-timeout-ms 500\n")
    env = dict(os.environ)
    for line in envfile.read_text().splitlines():
        k, _, v = line.partition("=")
        env[k] = v
    cmds = unit_commands(instance, str(mnt.store.path), env)
    pidfile = cmds["PIDFile"][0][0]
    assert pidfile == f"/run/txnfs-{instance}.pid"
    started_daemon = None
    try:
        for argv in cmds["ExecStartPre"]:
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
