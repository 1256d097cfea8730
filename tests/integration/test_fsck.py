"""`txnfs fsck STORE`: 0 when the handle table and the tree agree, 1 with each mismatch
named, 2 when it cannot check at all."""

from __future__ import annotations

import os
import re
import shutil
import stat

import pytest

from txnfs_testing import txnfs_lib as tl


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


# --------------------------------------------------------------------------
# what fsck checks without any history
# --------------------------------------------------------------------------

def fsck_repair(store):
    return tl.txnfs("fsck", store.path, "--repair")


def test_row_whose_name_leads_to_another_object(mnt):
    (mnt.path / "a").write_bytes(b"a")
    (mnt.path / "b").write_bytes(b"b")
    ino_a, ino_b = os.stat(mnt.path / "a").st_ino, os.stat(mnt.path / "b").st_ino
    mnt.umount()
    mnt.store.execute("UPDATE handles SET name = 'b' WHERE nodeid = ?", (ino_a,))
    p = mnt.store.fsck()
    out = tl.output_of(p)
    assert p.returncode == 1, out
    lines = [l for l in p.stdout.splitlines() if f"nodeid={ino_a} " in l]
    assert len(lines) == 1, out
    assert f"/b is another object (inode {ino_b})" in lines[0] and "is at /a" in lines[0], out
    p = fsck_repair(mnt.store)
    assert p.returncode == 0, tl.output_of(p)
    assert mnt.store.handle_row(ino_a)["name"] == "a"
    assert mnt.store.handle_row(ino_b)["name"] == "b"
    mnt.mount()
    assert (mnt.path / "a").read_bytes() == b"a"


def test_objects_without_rows_anywhere_are_reported_one_line_each(mnt, xfs):
    os.makedirs(mnt.path / "d" / "e")
    mnt.umount()
    tree = mnt.store.tree
    (tree / "d" / "e" / "deep_no_row").write_bytes(b"x")           # in a subdirectory
    os.mknod(tree / "wh", stat.S_IFCHR | 0o000, os.makedev(0, 0))   # a whiteout
    (tree / "d" / "00000000000000a3.d").write_bytes(b"leftover")   # a log's data object
    os.symlink("1 D 3 x", tree / "00000000000000a4")               # a log's record
    p = mnt.store.fsck()
    out = p.stdout
    assert p.returncode == 1, tl.output_of(p)
    expect = {"/d/e/deep_no_row": "file", "/wh": "whiteout",
              "/d/00000000000000a3.d": "file", "/00000000000000a4": "symlink"}
    for path, kind in expect.items():
        lines = [l for l in out.splitlines() if l.startswith(f"{path} ({kind}, inode ")]
        assert len(lines) == 1 and "has no handle row" in lines[0], out
        assert ("undo log" in lines[0]) == path.startswith(("/d/0", "/0")), lines[0]
    assert "4 problems" in out, out
    p = fsck_repair(mnt.store)
    assert p.returncode == 0, tl.output_of(p)
    assert out.count("added a row") == 0 and p.stdout.count("added a row") == 4, p.stdout
    mnt.mount()
    assert (mnt.path / "d" / "e" / "deep_no_row").read_bytes() == b"x"


def test_links_outside_the_tree_are_reported(mnt, xfs):
    (mnt.path / "f").write_bytes(b"f")
    mnt.umount()
    outside = xfs.dir / "outside_link"
    os.link(mnt.store.tree / "f", outside)
    p = mnt.store.fsck()
    assert p.returncode == 1, tl.output_of(p)
    assert re.search(r"^/f \(file, inode \d+\) has 2 links but 1 name in the tree", p.stdout,
                     re.M), p.stdout
    os.unlink(outside)
    assert mnt.store.fsck().returncode == 0


def test_names_like_log_entries_with_rows_are_fine(mnt):
    """A user may name a file like an undo log's entry: with its row, it is no leftover."""
    for n in ("0123456789abcdef", "0123456789abcdef.d"):
        (mnt.path / n).write_bytes(n.encode())
    mnt.umount()
    p = mnt.store.fsck()
    assert p.returncode == 0, tl.output_of(p)


def _mixed_ops(m, rng, n, prefix):
    """n random namespace and data operations below m/prefix (never failing on purpose)."""
    base = m / prefix
    base.mkdir(exist_ok=True)
    for i in range(n):
        op = rng.randrange(12)
        p = base / f"n{rng.randrange(40)}"
        q = base / f"n{rng.randrange(40)}"
        try:
            if op <= 2:
                if p.is_fifo():        # opening a fifo for writing waits for a reader
                    continue
                with open(p, "ab") as f:
                    f.write(os.urandom(rng.randrange(1, 9000)))
            elif op == 3:
                os.makedirs(p / "sub", exist_ok=True)
                (p / "sub" / f"f{i}").write_bytes(b"%d" % i)
            elif op == 4:
                os.rename(p, q)
            elif op == 5:
                os.link(p, q)
            elif op == 6:
                if p.is_dir():
                    shutil.rmtree(p)
                else:
                    os.unlink(p)
            elif op == 7:
                os.symlink(f"t{i}", p)
            elif op == 8:
                os.truncate(p, rng.randrange(0, 20000))
            elif op == 9:
                os.setxattr(p, "user.k", b"%d" % i, follow_symlinks=False)
            elif op == 10:
                tl.renameat2(p, q, tl.RENAME_EXCHANGE)
            else:
                os.mknod(p, stat.S_IFIFO | 0o644)
        except OSError:
            pass


def test_clean_store_stays_clean_after_mixed_work(mnt):
    """A few hundred mixed operations, plain and in committed and aborted transactions:
    fsck finds nothing (no false positives), before and after a remount."""
    import random
    import threading
    rng = random.Random(2026)
    _mixed_ops(mnt.path, rng, 150, "plain")
    for k in range(6):
        result = {}

        def work(k=k):
            tid = tl.txn_begin(mnt.path)
            _mixed_ops(mnt.path, random.Random(k), 50, f"txn{k % 3}")
            result["rc"] = tl.txn_commit(mnt.path, tid) if k % 2 == 0 else tl.txn_abort(mnt.path, tid)

        t = threading.Thread(target=work)
        t.start()
        t.join(120)
        assert result.get("rc") == 0, result
    _mixed_ops(mnt.path, rng, 100, "txn0")
    mnt.umount()
    p = mnt.store.fsck()
    assert p.returncode == 0, tl.output_of(p)
    assert not mnt.store.query("SELECT * FROM damage")
    mnt.mount()


def test_whiteout_left_by_a_rename_has_a_row(mnt):
    (mnt.path / "a").write_bytes(b"a")
    tl.renameat2(mnt.path / "a", mnt.path / "b", 4)     # RENAME_WHITEOUT
    mnt.umount()
    p = mnt.store.fsck()
    mnt.expect_dirty = p.returncode != 0
    assert p.returncode == 0, tl.output_of(p)


def test_kept_log_without_a_damage_record_is_reported(store):
    kept = store.internal / "damaged" / "77"
    kept.mkdir(parents=True)
    (kept / "0000000000000001.d").write_bytes(b"what a rollback could not put back")
    p = store.fsck()
    assert p.returncode == 1, tl.output_of(p)
    assert re.search(rf"^{re.escape(str(kept))} is an undo log kept by an incomplete rollback, "
                     r"but no open damage record names it", p.stdout, re.M), p.stdout
    # never deleted by a repair: only the administrator knows whether it is still needed
    assert tl.txnfs("fsck", store.path, "--repair").returncode == 1
    assert (kept / "0000000000000001.d").exists()
    shutil.rmtree(store.internal / "damaged")
    assert store.fsck().returncode == 0


def test_handle_table_marked_stale_is_reported_and_reconciled_at_the_next_mount(mnt):
    """A daemon whose handle-row write failed after a rename or removal had already
    changed the tree marks the table stale (.txnfs/handles-stale, with the reason): fsck
    names the mark, the next mount's recovery reconciles the rows and removes it."""
    (mnt.path / "a").write_bytes(b"a")
    ino = os.stat(mnt.path / "a").st_ino
    mnt.umount()
    mnt.store.execute("UPDATE handles SET name = 'gone' WHERE nodeid = ?", (ino,))
    mark = mnt.store.path / ".txnfs" / "handles-stale"
    mark.write_text("rename a in 1 to gone in 1: disk I/O error\n")
    p = mnt.store.fsck()
    out = tl.output_of(p)
    assert p.returncode == 1, out
    assert "the handle table is marked for reconciling (rename a in 1 to gone in 1: disk I/O " \
           "error)" in out, out
    mnt.mount()
    assert (mnt.path / "a").read_bytes() == b"a"
    mnt.umount()
    assert not mark.exists()
    assert mnt.store.handle_row(ino)["name"] == "a"
    p = mnt.store.fsck()
    assert p.returncode == 0, tl.output_of(p)
