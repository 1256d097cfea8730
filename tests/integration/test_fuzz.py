"""The differential op-space fuzzer (tests/fuzz) in CI: a bounded number of seeds of every
oracle, in one process and in four processes of one transaction, every injected crash
point once, and the coverage guards (every FUSE handler of the daemon and every
renameat2 / fallocate / open flag is generated).

The seeds are fixed (TXNFS_FUZZ_SEED, default 1000) so that CI is deterministic; soaks
use tests/fuzz/run. A failure shows its seed, oracle and a minimised reproducer.
"""

from __future__ import annotations

import os

import pytest

from txnfs_testing import txnfs_lib as tl
from txnfs_testing.fuzz import divergences, driver, generator, oracles, syscalls

SEED = int(os.environ.get("TXNFS_FUZZ_SEED", "1000"))
SEEDS = int(os.environ.get("TXNFS_FUZZ_SEEDS", "25"))
OPS = 20
SHRINK_S = float(os.environ.get("TXNFS_FUZZ_SHRINK_SECONDS", "20"))


@pytest.fixture(scope="module")
def fuzzer():
    f = oracles.Fuzzer(log=lambda *a: print(*a, flush=True))
    try:
        yield f
    finally:
        problems = f.close()
        assert not problems, f"cleanup: {problems}"


def _soak(fuzzer, oracle, procs, seeds=SEEDS, **kw):
    reports = driver.soak(fuzzer, SEED, seeds, (oracle,), (procs,), OPS, shrink_seconds=SHRINK_S,
                          keep_going=False, shrink_runs=60, **kw)
    assert not reports, "\n\n".join(reports)


@pytest.mark.parametrize("procs", (1, 4))
def test_fuzz_abort(fuzzer, procs):
    _soak(fuzzer, "abort", procs)


@pytest.mark.parametrize("procs", (1, 4))
def test_fuzz_commit(fuzzer, procs):
    _soak(fuzzer, "commit", procs)


@pytest.mark.parametrize("procs", (1, 4))
def test_fuzz_plain(fuzzer, procs):
    _soak(fuzzer, "plain", procs)


@pytest.mark.parametrize("kind", ("kill", "power"))
@pytest.mark.parametrize("procs", (1, 4))
def test_fuzz_crash(fuzzer, procs, kind):
    _soak(fuzzer, "crash", procs, seeds=3, crash_kind=kind)


def test_fuzz_every_crash_point(fuzzer):
    """Every injected crash point once (alternating 1 and 4 processes)."""
    reports = []
    for i, point in enumerate(generator.crash_point_names()):
        reports += driver.soak(fuzzer, SEED + i, 1, ("crash",), (1 + 3 * (i % 2),), OPS,
                               shrink_seconds=SHRINK_S / 2, shrink_runs=30, point=point)
        if reports:
            break
    assert not reports, "\n\n".join(reports)


# -- coverage guards (no mount) -----------------------------------------------------

def test_every_fuse_handler_is_fuzzed():
    handlers = generator.handlers_in_source()
    assert len(handlers) > 20, f"parsing the handler table found only {sorted(handlers)}"
    missing = sorted(handlers - set(generator.HANDLER_COVERAGE))
    assert not missing, (f"FUSE handlers without a fuzzer op in HANDLER_COVERAGE "
                         f"(tests/txnfs_testing/fuzz/generator.py): {missing}")
    for h, ops in generator.HANDLER_COVERAGE.items():
        assert ops, h
        unknown = [o for o in ops if o not in generator.GEN_OPS]
        assert not unknown, f"HANDLER_COVERAGE[{h!r}] names ops the generator lacks: {unknown}"
    stale = sorted(set(generator.HANDLER_COVERAGE) - handlers)
    assert not stale, f"HANDLER_COVERAGE lists handlers the daemon no longer has: {stale}"


def test_every_op_and_flag_is_generated():
    st = oracles.Stats()
    for s in range(40):
        for oracle, procs in (("abort", 1), ("commit", 1), ("abort", 4)):
            st.count_ops(generator.gen_case(s, oracle, procs, OPS)["lists"])
    assert set(st.ops) == set(generator.GEN_OPS), sorted(set(generator.GEN_OPS) - set(st.ops))
    # mapped writes synced before munmap and left for munmap to write back
    syncs = {o.get("sync") for s in range(40)
             for lst in generator.gen_case(s, "commit", 4, OPS)["lists"]
             for o in lst if o["o"] == "mmap_write"}
    assert syncs == {False, True}, syncs
    # every way of beginning a transaction (txnfs_begin; txnfs_begin2 with a lock timeout;
    # txnfs_begin3 with a lock timeout and a lock set)
    for oracle in ("abort", "commit"):
        begins = {generator.gen_case(s, oracle, 1, OPS)["begin"] for s in range(6)}
        assert begins == set(generator.BEGINS)
        # half the cases with a plain Observer reading the mount concurrently
        observed = {generator.gen_case(s, oracle, 1, OPS)["observer"] for s in range(4)}
        assert observed == {False, True}
    # ... which watches lazy and durable commits alike
    assert {(c["observer"], c["lazy"]) for c in (generator.gen_case(s, "commit", 1, OPS)
                                                 for s in range(8))} == {
        (o, lz) for o in (False, True) for lz in (False, True)}
    want = ([f"rename:{f}" for f in syscalls.RENAME_FLAGS]
            + [f"fallocate:{f}" for f in syscalls.FALLOC_FLAGS]
            + [f"open:{f}" for f in syscalls.OPEN_FLAGS] + [f"uid:{o}" for o in generator.AS_NOBODY]
            + [f"umask:{o}" for o in generator.UMASK_OPS])
    missing = [f for f in want if f not in st.flags]
    assert not missing, f"never generated: {missing}"
    assert set(syscalls.RENAME_FLAGS) == {"0", "NOREPLACE", "EXCHANGE", "WHITEOUT",
                                          "NOREPLACE|WHITEOUT"}
    assert set(syscalls.FALLOC_FLAGS) == {"0", "KEEP_SIZE", "PUNCH_HOLE|KEEP_SIZE", "ZERO_RANGE",
                                          "ZERO_RANGE|KEEP_SIZE", "COLLAPSE_RANGE", "INSERT_RANGE"}
    assert set(syscalls.OPEN_FLAGS) >= {"O_RDONLY", "O_WRONLY", "O_RDWR", "O_TRUNC", "O_APPEND",
                                        "O_DIRECT", "O_NOATIME", "O_CREAT"}


def test_cases_are_reproducible():
    a = generator.gen_case(7, "crash", 4, OPS)
    assert a == generator.gen_case(7, "crash", 4, OPS)
    assert generator.parse_case(generator.format_case(a)) == a


def test_a_fuzzer_that_cannot_start_leaves_nothing_mounted(tmp_path):
    """Its image is mounted before the first txnfs command; when that fails (here: no
    binary), the image is unmounted and its loop device detached all the same."""
    work = tmp_path / "fuzz"
    work.mkdir()
    old = os.environ.get("TXNFS_BIN")
    os.environ["TXNFS_BIN"] = str(tmp_path / "no-such-txnfs")
    try:
        with pytest.raises(Exception):
            oracles.Fuzzer(workdir=work)
    finally:
        if old is None:
            del os.environ["TXNFS_BIN"]
        else:
            os.environ["TXNFS_BIN"] = old
    assert not tl.is_mounted(work / "xfs"), "the image stayed mounted"
    loops = tl.run(["losetup", "-j", work / "image"]).stdout.strip()
    assert not loops, f"the loop device stayed: {loops}"


def test_divergences_are_documented():
    ids = [d.id for d in divergences.DIVERGENCES]
    assert len(ids) == len(set(ids))
    for d in divergences.DIVERGENCES:
        assert len(d.reason) > 40, d.id
