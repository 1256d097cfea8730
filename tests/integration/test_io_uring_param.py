"""scripts/io-uring-param: FUSE over io_uring held on (enable_uring = Y) for as long as a
test run, a benchmark or `scripts/up`'s daemon lives, and the value from before put back
when the last of them lets go or dies -- also when runs overlap, which saving and restoring
the value in each run got wrong (A saves N and sets Y, B saves Y, A restores N under B's
feet, B "restores" Y and leaves it on).

The module parameter itself is shared by everything on the machine, so these tests point
the script at a file of their own (TXNFS_URING_PARAM) and a state directory of their own.
"""
import fcntl
import os
import subprocess

import pytest

from txnfs_testing import txnfs_lib as tl

SCRIPT = tl.REPO / "scripts" / "io-uring-param"


@pytest.fixture
def param(tmp_path):
    p = tmp_path / "enable_uring"
    p.write_text("N\n")
    env = dict(os.environ, TXNFS_URING_PARAM=str(p), TXNFS_URING_STATE=str(tmp_path / "state"))

    def run(*args):
        return subprocess.run([SCRIPT, *map(str, args)], env=env, capture_output=True, text=True)

    procs = []

    def holder():
        procs.append(subprocess.Popen(["sleep", "300"]))
        return procs[-1]

    yield p, run, holder
    for q in procs:
        q.kill()
        q.wait()


def value(p) -> str:
    return p.read_text().strip()


def test_the_value_from_before_comes_back_when_the_last_holder_lets_go(param):
    p, run, holder = param
    a, b = holder(), holder()
    assert run("hold", a.pid).returncode == 0 and value(p) == "Y"
    assert run("hold", b.pid).returncode == 0 and value(p) == "Y"
    assert run("release", a.pid).returncode == 0
    assert value(p) == "Y", "released while another run still held it"
    assert run("release", b.pid).returncode == 0
    assert value(p) == "N"
    # A value that was Y before stays Y.
    p.write_text("Y\n")
    assert run("hold", a.pid).returncode == 0
    assert run("release", a.pid).returncode == 0
    assert value(p) == "Y"


def test_a_holder_that_died_is_dropped_and_the_value_restored(param):
    p, run, holder = param
    a = holder()
    assert run("hold", a.pid).returncode == 0 and value(p) == "Y"
    a.kill()
    a.wait()
    out = run("status")
    assert out.returncode == 0, out.stderr
    assert value(p) == "N", out.stdout
    assert "nothing held" in out.stdout


def test_a_reused_pid_is_not_a_holder(param, tmp_path):
    p, run, holder = param
    a = holder()
    assert run("hold", a.pid).returncode == 0
    # The holder's file names its process by PID and start time: one with the same PID
    # and another start time (a reused PID) is a dead holder.
    held = list((tmp_path / "state" / "holders").iterdir())
    assert [h.name.split(".")[0] for h in held] == [str(a.pid)]
    held[0].rename(held[0].with_name(f"{a.pid}.1"))
    run("status")
    assert value(p) == "N"


def test_no_hold_where_the_parameter_cannot_be_written(param, tmp_path):
    p, run, holder = param
    env = dict(os.environ, TXNFS_URING_PARAM=str(tmp_path / "missing"),
               TXNFS_URING_STATE=str(tmp_path / "state"))
    a = holder()
    r = subprocess.run([SCRIPT, "hold", str(a.pid)], env=env, capture_output=True, text=True)
    assert r.returncode == 1
    assert run("hold", 2 ** 22 + 7).returncode == 2   # no such process: a usage error
    assert run("frobnicate").returncode == 2


def test_a_hung_call_holding_the_lock_is_waited_for_a_bounded_time(param, tmp_path):
    p, run, holder = param
    state = tmp_path / "state"
    state.mkdir()
    with open(state / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # a call that hangs while it holds the lock
        env = dict(os.environ, TXNFS_URING_PARAM=str(p), TXNFS_URING_STATE=str(state),
                   TXNFS_URING_LOCK_WAIT="1")
        a = holder()
        r = subprocess.run([SCRIPT, "hold", str(a.pid)], env=env, capture_output=True, text=True,
                           timeout=20)
    assert r.returncode == 3, r.stderr
    assert "held for 1 s" in r.stderr
    assert value(p) == "N"
    assert run("hold", a.pid).returncode == 0 and value(p) == "Y"   # free again
