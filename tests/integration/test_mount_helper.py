"""The mount helper: `mount -t fuse.txnfs STORE MNT -o OPTS`, fstab lines (`mount -T
FSTAB MNT`), `umount MNT`, `mount -o remount,...`, txnfs options passed through and
unknown options refused -- with util-linux's real mount(8) and umount(8).

mount(8) runs /sbin/mount.fuse.txnfs (libmount looks only in /sbin). For this module the
helper built with the binary under test (contrib/mount.fuse.txnfs.in, configured in the
build directory of $TXNFS_BIN, else of <repo>/build) is put there; it runs the txnfs of
$TXNFS_BIN, which the tests set to the binary under test. A helper that was there before
is put back afterwards."""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from txnfs_testing import txnfs_lib as tl

SBIN_HELPER = Path("/sbin/mount.fuse.txnfs")
STATE_DIR = Path("/run/txnfs/mount.fuse.txnfs")


def built_helper() -> Path:
    """The helper of the build that made the binary under test (BUILD/src/txnfuse/txnfs ->
    BUILD/contrib/mount.fuse.txnfs), else the repository's build."""
    beside = Path(tl.txnfs_bin()).resolve().parents[2] / "contrib" / "mount.fuse.txnfs"
    return beside if beside.is_file() else tl.REPO / "build" / "contrib" / "mount.fuse.txnfs"


BUILT_HELPER = built_helper()


@pytest.fixture(scope="module", autouse=True)
def helper_in_sbin():
    assert BUILT_HELPER.is_file(), f"{BUILT_HELPER} missing: build first"
    backup = SBIN_HELPER.with_name(SBIN_HELPER.name + ".before-txnfs-tests")
    had = SBIN_HELPER.exists()
    if had:
        os.replace(SBIN_HELPER, backup)
    shutil.copy2(BUILT_HELPER, SBIN_HELPER)
    os.chmod(SBIN_HELPER, 0o755)
    old_bin = os.environ.get("TXNFS_BIN")
    os.environ["TXNFS_BIN"] = tl.txnfs_bin()   # mount(8) passes the environment on
    try:
        yield
    finally:
        if old_bin is None:
            del os.environ["TXNFS_BIN"]
        else:
            os.environ["TXNFS_BIN"] = old_bin
        SBIN_HELPER.unlink()
        if had:
            os.replace(backup, SBIN_HELPER)
        # the helper's records of the mounts these tests made (stores in temporary
        # directories, or named by fsname=; all unmounted now)
        if STATE_DIR.is_dir():
            tmp = os.path.realpath(tempfile.gettempdir())
            for f in STATE_DIR.iterdir():
                source = f.read_text().split("\n", 1)[0].removeprefix("txnfs:")
                if source.startswith((f"{tmp}/txnfs-it-", "txnfs-test-")):
                    f.unlink()


class HelperMount:
    """A mount made by mount(8); teardown unmounts it, waits for the daemon, checks fsck."""

    def __init__(self, store: tl.Store, path: Path, pid_file: Path):
        self.store, self.path, self.pid_file = store, path, pid_file
        path.mkdir(exist_ok=True)

    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def umount(self):
        pid = self.pid()
        p = tl.run(["umount", self.path])
        assert p.returncode == 0, tl.output_of(p)
        assert not tl.is_mounted(self.path)
        if pid is not None:
            assert tl.wait_dead(pid, 15), f"daemon {pid} still running 15 s after umount"

    def close(self):
        pid = self.pid()
        if tl.is_mounted(self.path):
            tl.run(["umount", self.path])
            tl.lazy_umount(self.path)
        if pid is not None and not tl.wait_dead(pid, 15):
            tl.kill_and_wait(pid)
            raise AssertionError(f"daemon {pid} still running after umount; killed")
        p = self.store.fsck()
        assert p.returncode == 0, tl.output_of(p)


@pytest.fixture
def hm(store, xfs):
    m = HelperMount(store, xfs.tmp / "mnt", xfs.tmp / "txnfs.pid")
    try:
        yield m
    finally:
        m.close()


def mount_t(hm: HelperMount, opts: str, *extra) -> "tl.subprocess.CompletedProcess":
    return tl.run(["mount", *extra, "-t", "fuse.txnfs", "-o", opts, hm.store.path, hm.path])


def conflict_wait(mnt: Path) -> tuple[int | None, float]:
    """Hold a write lock on mnt/x in one transaction; write x in another: (errno, seconds)."""
    tl.write_file(mnt / "x", b"base")
    holding, release = threading.Event(), threading.Event()

    def holder():
        tid = tl.txn_begin(mnt)
        try:
            tl.write_file(mnt / "x", b"holder")
            holding.set()
            release.wait(30)
        finally:
            tl.txn_commit(mnt, tid)

    th = threading.Thread(target=holder)
    th.start()
    try:
        assert holding.wait(30)
        tid = tl.txn_begin(mnt)
        t0 = time.monotonic()
        err = tl.errno_of(tl.write_file, mnt / "x", b"loser")
        took = time.monotonic() - t0
        tl.txn_abort(mnt, tid)
    finally:
        release.set()
        th.join(30)
    return err, took


def test_mount_t_fuse_txnfs_passes_txnfs_options_and_umount_ends_daemon(hm):
    p = mount_t(hm, f"lock_timeout_ms=300,max_txn_ops=5,pid_file={hm.pid_file},noatime")
    assert p.returncode == 0, tl.output_of(p)
    ent = tl.mount_entry(hm.path)
    assert ent["fstype"] == "fuse.txnfs", ent
    assert ent["source"] == os.path.realpath(hm.store.path), ent
    assert "noatime" in ent["options"].split(","), ent
    assert hm.pid() and tl.pid_alive(hm.pid())
    # lock_timeout_ms=300: a conflicting write gives up after about 0.3 s
    err, took = conflict_wait(hm.path)
    assert err == errno.ETIMEDOUT and 0.25 <= took < 5, (err, took)
    # max_txn_ops=5: the sixth operation of a transaction fails with EDQUOT
    (hm.path / "sub").mkdir()
    tid = tl.txn_begin(hm.path)
    errs = [tl.errno_of(os.mkdir, hm.path / "sub" / f"d{i}") for i in range(8)]
    assert tl.txn_abort(hm.path, tid) == 0
    assert errno.EDQUOT in errs and errs[0] is None, errs
    hm.umount()


def test_fstab_line_mounts_with_mount_T(hm, xfs):
    fstab = xfs.tmp / "fstab"
    fstab.write_text(f"# txnfs\n{hm.store.path} {hm.path} fuse.txnfs "
                     f"defaults,_netdev,nofail,lock_timeout_ms=300,pid_file={hm.pid_file} 0 0\n")
    p = tl.run(["mount", "-T", fstab, hm.path])
    assert p.returncode == 0, tl.output_of(p)
    ent = tl.mount_entry(hm.path)
    assert ent and ent["fstype"] == "fuse.txnfs", ent
    (hm.path / "via-fstab").write_text("ok")
    err, took = conflict_wait(hm.path)
    assert err == errno.ETIMEDOUT and took < 5, (err, took)
    # a txnfs option cannot change on the mounted store: refused, the mount stays
    p = tl.run(["mount", "-T", fstab, "-o", "remount,lock_timeout_ms=1", hm.path])
    assert p.returncode != 0 and "cannot change" in tl.output_of(p), tl.output_of(p)
    assert tl.is_mounted(hm.path)
    # libmount repeats the line's txnfs options on remount: the same values are fine
    p = tl.run(["mount", "-T", fstab, "-o", "remount,ro", hm.path])
    assert p.returncode == 0, tl.output_of(p)
    assert "ro" in tl.mount_entry(hm.path)["options"].split(",")
    p = tl.run(["mount", "-T", fstab, "-o", "remount,rw", hm.path])
    assert p.returncode == 0, tl.output_of(p)
    hm.umount()
    assert (hm.store.tree / "via-fstab").read_text() == "ok"


def test_remount_changes_mount_flags_and_refuses_txnfs_options(hm):
    p = mount_t(hm, f"pid_file={hm.pid_file}")
    assert p.returncode == 0, tl.output_of(p)
    pid = hm.pid()
    (hm.path / "f").write_text("1")
    p = tl.run(["mount", "-o", "remount,ro", hm.path])
    assert p.returncode == 0, tl.output_of(p)
    assert "ro" in tl.mount_entry(hm.path)["options"].split(",")
    assert tl.errno_of(tl.write_file, hm.path / "g", b"x") == errno.EROFS
    assert (hm.path / "f").read_text() == "1"   # still served, by the same daemon
    p = tl.run(["mount", "-o", "remount,rw", hm.path])
    assert p.returncode == 0, tl.output_of(p)
    (hm.path / "g").write_text("2")
    p = tl.run(["mount", "-o", "remount,lock_timeout_ms=5", hm.path])
    assert p.returncode != 0
    assert "txnfs options cannot change on a mounted store: lock_timeout_ms=5" in tl.output_of(p)
    assert tl.mount_entry(hm.path) and hm.pid() == pid and tl.pid_alive(pid)
    hm.umount()


def test_unknown_option_is_refused_clearly(hm):
    p = mount_t(hm, f"bogus=1,pid_file={hm.pid_file}")
    assert p.returncode != 0
    assert "mount.fuse.txnfs: error: unknown option 'bogus=1'" in tl.output_of(p)
    assert not tl.is_mounted(hm.path) and hm.pid() is None
    # sloppy (-s): dropped with a warning, the mount goes ahead
    p = mount_t(hm, f"bogus=1,pid_file={hm.pid_file}", "-s")
    assert p.returncode == 0, tl.output_of(p)
    assert "ignoring unknown option 'bogus=1'" in tl.output_of(p)
    hm.umount()


def test_bad_values_and_missing_store_fail_with_txnfs_errors(hm, xfs):
    p = mount_t(hm, "lock_timeout_ms=soon")
    assert p.returncode != 0 and "--lock-timeout-ms" in tl.output_of(p), tl.output_of(p)
    assert not tl.is_mounted(hm.path)
    p = tl.run(["mount", "-t", "fuse.txnfs", xfs.dir / "no-store", hm.path])
    assert p.returncode != 0 and "txnfs: error:" in tl.output_of(p), tl.output_of(p)
    assert not tl.is_mounted(hm.path)


def test_helper_usage():
    p = tl.run([SBIN_HELPER, "--help"])
    assert p.returncode == 0 and "mount -t fuse.txnfs" in tl.output_of(p)
    assert "lock_timeout_ms=MS" in tl.output_of(p) and "_netdev" in tl.output_of(p)
    p = tl.run([SBIN_HELPER])
    assert p.returncode == 1 and "usage:" in tl.output_of(p)


def test_umount_then_mount_at_once_waits_for_the_exiting_daemon(hm):
    """What test harnesses do: unmount, mount again at once -- twenty times. umount(8)
    returns before the daemon has let go of the store; the helper waits for it."""
    for i in range(20):
        p = mount_t(hm, f"pid_file={hm.pid_file}")
        assert p.returncode == 0, f"cycle {i}: {tl.output_of(p)}"
        (hm.path / f"cycle{i}").write_text(str(i))
        p = tl.run(["umount", hm.path])
        assert p.returncode == 0, tl.output_of(p)
    assert sorted(x.name for x in hm.store.tree.iterdir()) == sorted(f"cycle{i}" for i in range(20))


# --------------------------------------------------------------------------
# mount flags, source and defaults (README: "Mount flags and source")
# --------------------------------------------------------------------------

def readme_options() -> list[str]:
    """Every option the README's mount(8) section lists, placeholders filled in."""
    text = (tl.REPO / "README.md").read_text()
    m = re.search(r"^Options: txnfs's own .*?Anything else is an\s+error", text, re.M | re.S)
    assert m, "README.md: the mount(8) section's option list is gone"
    values = {"MS": "2000", "N": "8", "S": "2", "FILE": "/dev/null", "NAME": "txnfs-test-src"}
    opts = []
    for span in re.findall(r"`([^`]+)`", m.group(0)):
        if span.startswith("txnfs "):      # "the `txnfs mount` options of the same names"
            continue
        for word in span.split():
            word = word.replace("comment=…", "comment=txnfs-test").replace("x-…", "x-txnfs.test=1")
            if "=" in word and word.split("=", 1)[1] in values:
                word = word.split("=", 1)[0] + "=" + values[word.split("=", 1)[1]]
            if word.startswith("[no]"):
                opts += [word[4:], "no" + word[4:]]
            else:
                opts.append(word)
    return opts


# What each mount flag shows in /proc/self/mountinfo (per-mount and superblock options):
# (must be there, must not be there). mount(8) turns user/users/owner/group into flags.
FLAG_EFFECTS = {
    "ro": ({"ro"}, {"rw"}), "rw": ({"rw"}, {"ro"}),
    "nosuid": ({"nosuid"}, set()), "suid": (set(), {"nosuid"}),
    "nodev": ({"nodev"}, set()), "dev": (set(), {"nodev"}),
    "noexec": ({"noexec"}, set()), "exec": (set(), {"noexec"}),
    "sync": ({"sync"}, set()), "async": (set(), {"sync"}),
    "dirsync": ({"dirsync"}, set()),
    "noatime": ({"noatime"}, {"relatime"}), "atime": ({"relatime"}, {"noatime"}),
    "relatime": ({"relatime"}, {"noatime"}), "norelatime": (set(), {"noatime"}),
    "strictatime": (set(), {"relatime", "noatime"}), "nostrictatime": ({"relatime"}, set()),
    "nodiratime": ({"nodiratime"}, set()), "diratime": (set(), {"nodiratime"}),
    "lazytime": ({"lazytime"}, set()), "nolazytime": (set(), {"lazytime"}),
    "nosymfollow": ({"nosymfollow"}, set()), "symfollow": (set(), {"nosymfollow"}),
    "user": ({"nosuid", "nodev", "noexec"}, set()), "users": ({"nosuid", "nodev", "noexec"}, set()),
    "owner": ({"nosuid", "nodev"}, set()), "group": ({"nosuid", "nodev"}, set()),
}


def shown_options(ent: dict) -> set[str]:
    return set(ent["options"].split(",")) | set(ent["super_options"].split(","))


def test_mount_t_accepts_every_option_the_readme_lists(hm):
    """One mount per option of the README's list (so list and helper cannot drift
    apart); each mount flag shows in the mount table as mount(8) means it."""
    opts = readme_options()
    assert {"relatime", "strictatime", "lazytime", "fsname=txnfs-test-src", "user", "noauto",
            "_netdev", "nofail", "suid", "dev"} <= set(opts), opts
    failed = []
    for o in opts:
        if o.startswith("pid_file="):
            o = f"pid_file={hm.pid_file}"
        p = mount_t(hm, o if o.startswith("pid_file=") else f"{o},pid_file={hm.pid_file}")
        if p.returncode != 0:
            failed.append(f"-o {o}: exit {p.returncode}: {tl.output_of(p).strip()}")
            continue
        ent = tl.mount_entry(hm.path)
        must, must_not = FLAG_EFFECTS.get(o, (set(), set()))
        shown = shown_options(ent)
        if ent["fstype"] != "fuse.txnfs" or not must <= shown or must_not & shown:
            failed.append(f"-o {o}: mounted as {ent['fstype']} with {sorted(shown)}")
        hm.umount()
    assert not failed, "\n".join(failed)


def test_source_is_the_store_path_and_umount_store_works(hm, xfs):
    """As ext4 or XFS show their device: findmnt, `umount STORE` and fstab tools compare
    the source with what was mounted. mount(8) gives the helper the canonical path, also
    for a store named through a symbolic link."""
    link = xfs.tmp / "store-link"
    link.symlink_to(hm.store.path)
    p = mount_t(hm, f"pid_file={hm.pid_file}")
    assert p.returncode == 0, tl.output_of(p)
    store = os.path.realpath(hm.store.path)
    ent = tl.mount_entry(hm.path)
    assert (ent["fstype"], ent["source"]) == ("fuse.txnfs", store), ent
    p = tl.run(["findmnt", "-n", "-o", "SOURCE,FSTYPE", "--mountpoint", hm.path])
    assert p.stdout.split() == [store, "fuse.txnfs"], tl.output_of(p)
    p = tl.run(["findmnt", "-n", "-o", "TARGET", "--source", link])
    assert p.stdout.strip() == str(hm.path), tl.output_of(p)
    # umount(8) takes an existing directory for a mount point without looking at the
    # mount table (as for a bind mount's source); -c makes it look the store up
    pid = hm.pid()
    p = tl.run(["umount", "-c", store])
    assert p.returncode == 0, tl.output_of(p)
    assert not tl.is_mounted(hm.path) and tl.wait_dead(pid, 15)
    # mounted through the link: the same source; txnfs umount takes the store too
    p = tl.run(["mount", "-t", "fuse.txnfs", "-o", f"pid_file={hm.pid_file}", link, hm.path])
    assert p.returncode == 0, tl.output_of(p)
    assert tl.mount_entry(hm.path)["source"] == store
    pid = hm.pid()
    p = tl.txnfs("umount", hm.store.path)
    assert p.returncode == 0, tl.output_of(p)
    assert not tl.is_mounted(hm.path) and tl.wait_dead(pid, 15)


def test_mount_a_finds_an_fstab_line_mounted(hm, xfs):
    """`mount -a` mounts what of fstab is not mounted yet: it compares each line's source
    with the mount table's, so a mounted txnfs line is left alone."""
    fstab = xfs.tmp / "fstab"
    fstab.write_text(f"{hm.store.path} {hm.path} fuse.txnfs defaults,pid_file={hm.pid_file} 0 0\n")
    for _ in range(2):
        p = tl.run(["mount", "-a", "-T", fstab])
        assert p.returncode == 0, tl.output_of(p)
    assert len([ln for ln in Path("/proc/self/mountinfo").read_text().splitlines()
                if f" {hm.path} " in ln]) == 1
    hm.umount()


def test_fsname_names_the_source(hm, xfs):
    p = mount_t(hm, f"fsname=txnfs-test-src,pid_file={hm.pid_file}")
    assert p.returncode == 0, tl.output_of(p)
    assert tl.mount_entry(hm.path)["source"] == "txnfs-test-src"
    (hm.path / "f").write_text("served")
    # the source cannot change on remount; repeating it (as libmount does) is fine
    p = tl.run(["mount", "-o", "remount,fsname=txnfs-test-other", hm.path])
    assert p.returncode != 0 and "cannot change" in tl.output_of(p), tl.output_of(p)
    p = tl.run(["mount", "-o", "remount,ro,fsname=txnfs-test-src", hm.path])
    assert p.returncode == 0, tl.output_of(p)
    ent = tl.mount_entry(hm.path)
    assert ent["source"] == "txnfs-test-src" and "ro" in ent["options"].split(","), ent
    hm.umount()
    # txnfs mount takes it too
    m = tl.Mount(hm.store, xfs.tmp / "mnt2", xfs.tmp / "pid2")
    try:
        m.mount("-o", "fsname=txnfs-test-cli")
        assert tl.mount_entry(m.path)["source"] == "txnfs-test-cli"
        assert (m.path / "f").read_text() == "served"
    finally:
        m.close()


def _as_nobody_run(argv) -> str:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                          timeout=30).stdout


def _open_write(path) -> int:
    fd = os.open(path, os.O_WRONLY)
    try:
        return os.write(fd, b"x")
    finally:
        os.close(fd)


def _setid_program_and_device(root: Path) -> tuple[Path, Path]:
    """root/id: a copy of id(1), set-user-ID root; root/null: the null device (1:3)."""
    root.mkdir(mode=0o755)
    shutil.copy2("/usr/bin/id", root / "id")
    os.chown(root / "id", 0, 0)
    os.chmod(root / "id", 0o4755)
    os.mknod(root / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.chmod(root / "null", 0o666)
    return root / "id", root / "null"


def test_root_mount_carries_set_id_programs_and_device_nodes_as_xfs(hm, xfs):
    """Mounted by root with the defaults or with suid,dev, a set-user-ID program that
    another user runs from the mount gets the owner's effective uid, and a device node
    opens: as on XFS (mounted with mount(8)'s defaults) -- also inside a transaction
    bound by process id; inside a transaction's view (a user namespace of the user's own
    ids) the program runs unprivileged.
    With nosuid,nodev (or noexec) asked for, neither (nor running it)."""
    ref_prog, ref_dev = _setid_program_and_device(xfs.dir / "ref")
    xfs_run = tl.as_user(_as_nobody_run, [ref_prog]), tl.as_user(_open_write, ref_dev)
    assert "euid=0(root)" in xfs_run[0] and xfs_run[1] == 1, xfs_run
    for opts in ("", "suid,dev,"):
        p = mount_t(hm, f"{opts}pid_file={hm.pid_file}")
        assert p.returncode == 0, tl.output_of(p)
        if not (hm.path / "d").exists():
            _setid_program_and_device(hm.path / "d")
        prog, dev = hm.path / "d" / "id", hm.path / "d" / "null"
        def in_txn(*run_opts):
            return (tl.as_user(_as_nobody_run, [tl.txnfs_bin(), "run", *run_opts, hm.path, "--",
                                                prog]),
                    tl.as_user(_as_nobody_run, [tl.txnfs_bin(), "run", *run_opts, hm.path, "--",
                                                "sh", "-c", f"echo x > {dev} && echo opened"]))
        runs = {
            "plain": (tl.as_user(_as_nobody_run, [prog]), tl.as_user(_open_write, dev)),
            "in a transaction bound by process id": in_txn("--no-view"),
        }
        for how, (ident, opened) in runs.items():
            assert "euid=0(root)" in ident and "uid=65534" in ident, (opts, how, ident)
            assert opened in (1, "opened\n"), (opts, how, opened)
        # Another user's `txnfs run` enters the view in a user namespace of its own ids,
        # where root is unmapped: a set-user-ID root program runs without its privilege
        # (docs/isolation.md, "Views"); device nodes still open.
        ident, opened = in_txn()
        assert "uid=65534" in ident and "euid=" not in ident, (opts, ident)
        assert opened == "opened\n", (opts, opened)
        hm.umount()
    p = mount_t(hm, f"nosuid,nodev,pid_file={hm.pid_file}")
    assert p.returncode == 0, tl.output_of(p)
    ident = tl.as_user(_as_nobody_run, [prog])
    assert "uid=65534" in ident and "euid=" not in ident, ident
    assert tl.as_user(tl.errno_of, _open_write, dev) == errno.EACCES
    hm.umount()
    p = mount_t(hm, f"noexec,pid_file={hm.pid_file}")
    assert p.returncode == 0, tl.output_of(p)
    assert tl.errno_of(subprocess.run, [prog]) == errno.EACCES
    hm.umount()


def test_defaults_are_as_documented(hm, xfs):
    """README: root's mounts start from mount(8)'s defaults, rw,suid,dev,exec,relatime,
    async -- through mount(8) and through txnfs mount alike."""
    def check(ent):
        shown = shown_options(ent)
        assert {"rw", "relatime"} <= shown, ent
        assert not {"nosuid", "nodev", "noexec", "noatime", "sync", "ro"} & shown, ent
    p = mount_t(hm, f"pid_file={hm.pid_file}")
    assert p.returncode == 0, tl.output_of(p)
    check(tl.mount_entry(hm.path))
    hm.umount()
    m = tl.Mount(hm.store, xfs.tmp / "mnt2", xfs.tmp / "pid2")
    try:
        m.mount()
        ent = tl.mount_entry(m.path)
        check(ent)
        assert (ent["fstype"], ent["source"]) == ("fuse.txnfs", os.path.realpath(hm.store.path))
    finally:
        m.close()
