"""Fixtures for the txnfs Python package's tests: a real txnfs mount (run as root).

    mnt   a fresh loop-mounted XFS image (reflink=1), `txnfs init`, `txnfs mount`;
          .path, .store, .remount(*args); unmounted, and the store fsck-checked, after the test

They reuse the repository's test helpers (tests/txnfs_testing/txnfs_lib.py, on the
pythonpath that pytest.ini sets): the binary is $TXNFS_BIN or <repo>/build/src/txnfuse/txnfs. The package under test is
the `txnfs` that Python imports (scripts/test installs it with pip into a venv); it loads
$TXNFS_LIB, which defaults here to <repo>/build/src/libtxnfs/libtxnfs.so.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from txnfs_testing import txnfs_lib as tl

REPO = Path(__file__).resolve().parents[2]

os.environ.setdefault("TXNFS_LIB", str(REPO / "build" / "src" / "libtxnfs" / "libtxnfs.so"))


@pytest.fixture(scope="session", autouse=True)
def _preconditions():
    assert os.geteuid() == 0, "the txnfs Python tests mount file systems: run them as root"
    assert os.path.isfile(tl.txnfs_bin()), f"txnfs binary not found at {tl.txnfs_bin()}"


@pytest.fixture
def mnt():
    img = tl.XfsImage()
    try:
        store = tl.Store(img.dir / "store").init()
        m = tl.Mount(store, img.tmp / "mnt", img.tmp / "txnfs.pid")
        try:
            m.mount()
            yield m
        finally:
            m.close()
    finally:
        img.close()
