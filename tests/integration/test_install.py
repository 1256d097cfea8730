"""`meson install` gives working programs: the files land where the README says, the
binaries find libtxnfs.so.0 by their rpath (no ldconfig needed), and the installed
txnfs, mount helper, header, pkg-config file and library work on a real store.

The build directory (<repo>/build, configured with the default prefix /usr/local) is
installed with --destdir into a temporary directory; the installed tree is then put in
place at /usr/local and /usr/sbin in a private mount namespace (bind mount, overlay),
so the programs run exactly as installed without touching the host's /usr."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest

from txnfs_testing import txnfs_lib as tl

BUILD = tl.REPO / "build"


def meson_option(name: str) -> str:
    import json
    p = tl.run(["meson", "introspect", "--buildoptions", str(BUILD)], check=True)
    return next(o["value"] for o in json.loads(p.stdout) if o["name"] == name)


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """<repo>/build installed with DESTDIR=<tmp>/dest; yields (dest, prefix, libdir)."""
    dest = tmp_path_factory.mktemp("install") / "dest"
    p = tl.run(["meson", "install", "-C", str(BUILD), "--no-rebuild", "--quiet",
                "--destdir", str(dest)], timeout=300)
    assert p.returncode == 0, tl.output_of(p)
    prefix = meson_option("prefix")
    libdir = meson_option("libdir")
    libdir = libdir if libdir.startswith("/") else f"{prefix}/{libdir}"
    yield dest, prefix, libdir


def runpath(binary: Path) -> str:
    p = tl.run(["readelf", "-d", str(binary)], check=True)
    for line in p.stdout.splitlines():
        if "(RUNPATH)" in line or "(RPATH)" in line:
            return line.split("[", 1)[1].rstrip("]")
    return ""


def test_install_puts_every_piece_in_place(staged):
    dest, prefix, libdir = staged
    assert prefix == "/usr/local", "the default prefix is what this test installs"
    root = Path(str(dest) + prefix)
    lib = Path(str(dest) + libdir)
    for f in ["bin/txnfs", "bin/txnfs-nfs", "include/txnfs/txnfs.h", "share/txnfs/schema.sql",
              "share/txnfs/ganesha.conf", "share/txnfs/txnfs.env.example",
              "lib/systemd/system/txnfs@.service", "lib/systemd/system/txnfs-ganesha@.service",
              "lib/systemd/system/txnfs-node@.service", "share/txnfs/etcd/etcd.conf.yml"]:
        assert (root / f).is_file(), f"{prefix}/{f} not installed"
    for f in ["libtxnfs.so", "libtxnfs.so.0", "libtxnfs_bridge.so", "pkgconfig/libtxnfs.pc",
              "txnfs/libfuse3.so.4"]:
        assert (lib / f).exists(), f"{libdir}/{f} not installed"
    helper = dest / "sbin" / "mount.fuse.txnfs"
    assert helper.is_file() and os.access(helper, os.X_OK), "/sbin/mount.fuse.txnfs not installed"
    assert f"{prefix}/bin/txnfs" in helper.read_text()
    unit = (root / "lib/systemd/system/txnfs@.service").read_text()
    assert f"ExecStart={prefix}/bin/txnfs mount" in unit
    # the programs that link libtxnfs find it without ldconfig; txnfs also finds the
    # private libfuse 3.18 (scripts/build-libfuse), which the loader's cache never lists
    assert runpath(root / "bin/txnfs") == f"{libdir}:{libdir}/txnfs"
    assert runpath(lib / "libtxnfs_bridge.so") == libdir
    pc = (lib / "pkgconfig/libtxnfs.pc").read_text()
    assert f"prefix={prefix}" in pc and "-ltxnfs" in pc


def test_installed_programs_work_on_a_real_store(staged, xfs):
    """In a private mount namespace with the staged tree at /usr/local and /usr/sbin:
    --help of both programs, init/mount/run/umount of a real store, mount -t fuse.txnfs
    through the installed helper, a C program built with `pkg-config libtxnfs` against
    the installed header and library, and the Python package finding that library."""
    dest, prefix, libdir = staged
    work = xfs.tmp / "ns"
    work.mkdir()
    (work / "prog.c").write_text(textwrap.dedent("""\
        #include <stdio.h>
        #include <txnfs.h>
        int main(int argc, char **argv) {
          txnfs_id_t id;
          int rc = txnfs_begin(argv[1], TXNFS_BIND_THREAD, 0, &id);
          if (rc != 0) { fprintf(stderr, "begin: %d\\n", rc); return 1; }
          FILE *f = fopen(argv[2], "w");
          if (!f) return 2;
          fputs("from C\\n", f);
          fclose(f);
          rc = txnfs_commit(argv[1], id);
          printf("committed %llu rc=%d\\n", (unsigned long long)id, rc);
          return rc != 0;
        }
        """))
    store, mnt = xfs.dir / "store", xfs.tmp / "mnt"
    mnt.mkdir()
    script = textwrap.dedent(f"""\
        set -eux
        mount --bind '{dest}{prefix}' '{prefix}'
        mount -t overlay overlay -o 'lowerdir={dest}/sbin:/usr/sbin' /usr/sbin
        cleanup() {{ set +e; umount '{mnt}' 2>/dev/null; for i in $(seq 100); do [ -e '{work}/pid' ] || break; sleep 0.1; done; }}
        trap cleanup EXIT
        export PATH={prefix}/bin:/usr/sbin:/usr/bin:/sbin:/bin
        unset TXNFS_BIN
        [ "$(command -v txnfs)" = {prefix}/bin/txnfs ]
        ldd {prefix}/bin/txnfs | grep -q 'libfuse3.so.4 => {libdir}/txnfs/libfuse3.so.4'
        txnfs --help | grep -q 'transactional file system'
        txnfs mount --help | grep -q -- '--lock-timeout-ms'
        txnfs-nfs --help >/dev/null
        mount.fuse.txnfs --help 2>&1 | grep -q 'mount -t fuse.txnfs'
        txnfs init '{store}'
        txnfs mount '{store}' '{mnt}' --pid-file '{work}/pid'
        echo hello > '{mnt}/hello'
        txnfs run '{mnt}' -- sh -c "echo one > '{mnt}/one'"
        ! txnfs run '{mnt}' -- sh -c "echo two > '{mnt}/two'; false"
        [ ! -e '{mnt}/two' ]
        # what the install script's ldconfig does on a real install, in this namespace only
        ldconfig -C '{work}/ld.so.cache' && mount --bind '{work}/ld.so.cache' /etc/ld.so.cache
        cc -o '{work}/prog' '{work}/prog.c' $(PKG_CONFIG_PATH={libdir}/pkgconfig pkg-config --cflags --libs libtxnfs)
        '{work}/prog' '{mnt}' '{mnt}/from-c'
        unset TXNFS_LIB
        PYTHONPATH='{tl.REPO}/python' /usr/bin/python3 -c "import txnfs
        with txnfs.transaction('{mnt}') as t: open('{mnt}/from-py', 'w').write('py')
        print('python', txnfs.library_path(), t.committed)"
        txnfs umount '{mnt}'
        for i in $(seq 150); do [ -e '{work}/pid' ] || break; sleep 0.1; done
        [ ! -e '{work}/pid' ]
        mount -t fuse.txnfs -o lock_timeout_ms=500,pid_file='{work}/pid' '{store}' '{mnt}'
        findmnt -n -o FSTYPE '{mnt}' | grep -qx fuse.txnfs
        cat '{mnt}/hello' '{mnt}/one' '{mnt}/from-c'
        umount '{mnt}'
        for i in $(seq 150); do [ -e '{work}/pid' ] || break; sleep 0.1; done
        [ ! -e '{work}/pid' ]
        txnfs fsck '{store}'
        """)
    try:
        p = tl.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                   timeout=180)
    finally:   # the helper's record of the mount it made (see mount.fuse.txnfs)
        records = Path("/run/txnfs/mount.fuse.txnfs")
        for f in records.iterdir() if records.is_dir() else ():
            if f.read_text().split("\n", 1)[0] == os.path.realpath(store):   # its source
                f.unlink()
    out = tl.output_of(p)
    assert p.returncode == 0, out
    assert "hello\none\nfrom C\n" in p.stdout, out
    assert "committed" in p.stdout and "clean" in p.stdout, out
    assert "python libtxnfs.so.0 True" in p.stdout, out
    assert not tl.is_mounted(mnt)


def test_systemd_units_verify_clean_and_order_store_txnfs_ganesha(staged):
    """`systemd-analyze verify` of the installed units (instances of the templates for a
    store at /srv/xfs/store), with the installed tree at /usr/local so that the commands
    they run exist; then the ordering and restart policy the README describes."""
    dest, prefix, _ = staged
    units = Path(str(dest) + prefix) / "lib/systemd/system"
    inst = tl.run(["systemd-escape", "--path", "/srv/xfs/store"], check=True).stdout.strip()
    assert inst == "srv-xfs-store"
    d = units.parent / "verify"
    d.mkdir(exist_ok=True)
    names = []
    for tmpl in ("txnfs@.service", "txnfs-ganesha@.service", "txnfs-node@.service"):
        shutil.copy(units / tmpl, d / tmpl)
        name = tmpl.replace("@.", f"@{inst}.")
        link = d / name
        if not link.exists():
            link.symlink_to(tmpl)
        names.append(str(link))
    script = (f"mount --bind '{dest}{prefix}' '{prefix}' && "
              f"systemd-analyze verify --man=no {' '.join(names)}")
    p = tl.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script])
    assert p.returncode == 0 and tl.output_of(p).strip() == "", tl.output_of(p)

    txnfs_unit = (units / "txnfs@.service").read_text()
    ganesha_unit = (units / "txnfs-ganesha@.service").read_text()
    assert "RequiresMountsFor=%f" in txnfs_unit          # the store's file system first
    assert "Type=forking" in txnfs_unit                   # started = mounted and recovered
    assert "Restart=on-failure" in txnfs_unit and "Restart=on-failure" in ganesha_unit
    assert "BindsTo=txnfs@%i.service" in ganesha_unit
    assert "After=txnfs@%i.service" in ganesha_unit
    assert f"TXNFS_BRIDGE_LIB={prefix}/lib" in ganesha_unit
