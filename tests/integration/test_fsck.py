"""`txnfs fsck STORE`: 0 when the handle table and the tree agree, 1 with each mismatch
named, 2 when it cannot check at all."""

from __future__ import annotations

import os
import stat

import txnfs_lib as tl


def populate(m):
    with open(m / "plain", "wb") as f:
        f.write(b"plain")
    os.makedirs(m / "d" / "e")
    with open(m / "d" / "e" / "deep", "wb") as f:
        f.write(b"deep")
    os.symlink("plain", m / "sym")
    os.mkfifo(m / "fifo")
    os.mknod(m / "chr", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    os.link(m / "plain", m / "d" / "hardlink")


def test_fresh_store_is_clean(store):
    p = store.fsck()
    assert p.returncode == 0, tl.output_of(p)


def test_clean_store_after_activity(mnt):
    populate(mnt.path)
    os.rename(mnt.path / "d" / "e", mnt.path / "e2")
    os.unlink(mnt.path / "sym")
    mnt.umount()
    p = mnt.store.fsck()
    assert p.returncode == 0, tl.output_of(p)
    mnt.mount()
    mnt.kill9()
    p = mnt.store.fsck()
    assert p.returncode == 0, f"fsck after kill -9 of an idle daemon:\n{tl.output_of(p)}"


def test_missing_row_is_reported(mnt):
    populate(mnt.path)
    with open(mnt.path / "d" / "row_victim_file", "wb") as f:
        f.write(b"v")
    nodeid = os.stat(mnt.path / "d" / "row_victim_file").st_ino
    mnt.umount()
    row = mnt.store.handle_row(nodeid)
    assert row is not None, f"no handles row for nodeid {nodeid}"
    mnt.store.execute("DELETE FROM handles WHERE nodeid = ?", (nodeid,))

    p = mnt.store.fsck()
    out = tl.output_of(p)
    assert p.returncode == 1, f"fsck with a missing row: exit {p.returncode}\n{out}"
    assert "row_victim_file" in out, f"fsck output does not name the file without a row:\n{out}"

    # repair: put the row back -> clean again (the fixture's teardown fsck also checks)
    cols = list(row)
    mnt.store.execute(f"INSERT INTO handles ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                      tuple(row[c] for c in cols))
    p = mnt.store.fsck()
    assert p.returncode == 0, tl.output_of(p)


def test_missing_object_is_reported(mnt):
    populate(mnt.path)
    with open(mnt.path / "d" / "ghost_file", "wb") as f:
        f.write(b"g")
    nodeid = os.stat(mnt.path / "d" / "ghost_file").st_ino
    mnt.umount()
    assert mnt.store.handle_row(nodeid) is not None
    os.unlink(mnt.store.tree / "d" / "ghost_file")     # behind txnfs's back

    p = mnt.store.fsck()
    out = tl.output_of(p)
    assert p.returncode == 1, f"fsck with a row for a missing object: exit {p.returncode}\n{out}"
    assert "ghost_file" in out or str(nodeid) in out, (
        f"fsck output names neither the row's name nor its nodeid {nodeid}:\n{out}")

    # repair: drop the orphan row -> clean again
    mnt.store.execute("DELETE FROM handles WHERE nodeid = ?", (nodeid,))
    p = mnt.store.fsck()
    assert p.returncode == 0, tl.output_of(p)


def test_fsck_reports_every_mismatch(mnt):
    for n in ("one", "two"):
        with open(mnt.path / n, "wb") as f:
            f.write(n.encode())
    ino_two = os.stat(mnt.path / "two").st_ino
    mnt.umount()
    os.unlink(mnt.store.tree / "one")
    with open(mnt.store.tree / "stray_extra", "wb") as f:      # object without a row
        f.write(b"s")
    p = mnt.store.fsck()
    out = tl.output_of(p)
    assert p.returncode == 1, out
    assert "one" in out and "stray_extra" in out, out
    # repair
    mnt.store.execute("DELETE FROM handles WHERE parent = 1 AND name = 'one'")
    os.unlink(mnt.store.tree / "stray_extra")
    assert mnt.store.handle_row(ino_two) is not None
    p = mnt.store.fsck()
    assert p.returncode == 0, tl.output_of(p)


def test_fsck_non_store_is_error(xfs):
    plain = xfs.dir / "plain_dir"
    plain.mkdir()
    (plain / "somefile").write_bytes(b"x")
    before = tl.hash_tree(plain)
    for target in (plain, xfs.dir / "does_not_exist", plain / "somefile"):
        p = tl.txnfs("fsck", target)
        assert p.returncode == 2, f"fsck {target}: exit {p.returncode}\n{tl.output_of(p)}"
        assert "txnfs: error:" in p.stderr, p.stderr
        assert str(target) in p.stderr, f"message does not name {target}: {p.stderr}"
    assert tl.hash_tree(plain) == before
    assert not (xfs.dir / "does_not_exist").exists()


def test_fsck_corrupt_db_is_error(store):
    store.db.write_bytes(os.urandom(64 * 1024))
    for suffix in ("-wal", "-shm"):
        q = store.db.with_name(store.db.name + suffix)
        if q.exists():
            q.unlink()
    p = store.fsck()
    assert p.returncode == 2, f"fsck of a garbage meta.db: exit {p.returncode}\n{tl.output_of(p)}"
    assert "txnfs: error:" in p.stderr, p.stderr


def _churn(root, seconds):
    """Namespace churn in the calling process until `seconds` pass or the mount dies."""
    import time
    deadline = time.monotonic() + seconds
    i = 0
    try:
        while time.monotonic() < deadline:
            d = root / f"d{i % 7}"
            os.makedirs(d, exist_ok=True)
            f = d / f"f{i}"
            with open(f, "wb") as fh:
                fh.write(b"%d" % i)
            if i % 3 == 0:
                os.link(f, root / f"hl{i}")
            if i % 4 == 0:
                os.rename(f, root / f"d{(i + 1) % 7}" / f"r{i}")
            elif i % 4 == 1:
                os.unlink(f)
            elif i % 4 == 2 and i > 10:
                try:
                    os.rename(root / f"hl{i - 2 - (i - 2) % 3}", d / f"over{i % 5}")
                except FileNotFoundError:
                    pass
            if i % 50 == 49:
                os.rename(root / f"d{i % 7}", root / f"tmpd{i}")
                os.rename(root / f"tmpd{i}", root / f"d{i % 7}")
            i += 1
    except OSError:
        pass  # ENOTCONN once the daemon is killed
    return i


def test_fsck_clean_after_kill9_during_namespace_churn(mnt):
    """A daemon killed in the middle of namespace changes: after mounting again the
    handle table and the tree agree (plain requests are each all-or-nothing)."""
    m = mnt.path
    pid = os.fork()
    if pid == 0:
        try:
            _churn(m, 30)
        finally:
            os._exit(0)
    import time
    time.sleep(0.7)
    mnt.kill9()
    _, status = os.waitpid(pid, 0)
    mnt.mount()
    # the tree is usable: walk it through the mount
    n = sum(len(files) + len(dirs) for _, dirs, files in os.walk(m))
    assert n > 0
    mnt.umount()
    p = mnt.store.fsck()
    assert p.returncode == 0, f"fsck after kill -9 during churn + remount:\n{tl.output_of(p)}"
