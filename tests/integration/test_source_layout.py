"""The source tree shows the architecture, and keeps showing it.

Every directory of C or C++ sources is a layer with a row in LAYERS: what it may include
besides its own headers, all of them folders of earlier rows. So no arrow points up and
no two folders include each other; a new folder has no row and fails here until it gets
one. Includes name their path from an include root the build adds (meson.build: src/,
include/, and the top directory for tests/ and bench/): "store/metadb.h",
"compound_bridge/client/session.h", "txnfs/ioctl_abi.h", "bench/lib/stats.h" -- never a
bare name, so the arrow is visible where it is drawn. Each folder's README.md says in
its introduction what the folder holds and what it may include. The transaction core
(src/txnfuse/txn) knows nothing of FUSE: it reaches the daemon only through TxnEnv
(txnfuse/txn/txn_env.h).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_DAEMON_BELOW_TXN = ["src/recovery", "src/recovery/undo", "src/store", "src/sync"]

# folder -> the folders it may include, bottom-up (a folder may name only earlier rows)
LAYERS: dict[str, list[str]] = {
    "include/txnfs": [],   # the C API, its types and the control channel's wire format
    "src/sync": [],
    "src/cluster": [],
    "src/store": ["src/sync"],
    "src/recovery/undo": ["src/store", "src/sync"],
    "src/recovery": ["src/recovery/undo", "src/store", "src/sync"],
    "src/libtxnfs": ["include/txnfs"],
    "src/txnfuse/txn": _DAEMON_BELOW_TXN + ["src/cluster", "include/txnfs"],
    "src/txnfuse/fuse": ["src/txnfuse/txn"] + _DAEMON_BELOW_TXN
                        + ["src/cluster", "include/txnfs"],
    "src/txnfuse/cli": ["src/txnfuse/fuse", "src/txnfuse/txn"] + _DAEMON_BELOW_TXN
                       + ["src/cluster", "include/txnfs"],
    "src/compound_bridge": [],  # txnfs_bridge.h, the ABI the Ganesha patch includes too
    "src/compound_bridge/bridge": ["src/compound_bridge", "src/cluster", "include/txnfs"],
    "src/compound_bridge/client/ganesha_shim": [],
    "src/compound_bridge/client": ["src/cluster"],
    "bench/lib": [],
    "bench/txnbench": ["bench/lib", "include/txnfs"],
    "bench": ["bench/lib", "src/compound_bridge/client"],
    "tests/unit": ["src/txnfuse/cli", "src/txnfuse/fuse", "src/txnfuse/txn"]
                  + _DAEMON_BELOW_TXN + ["src/cluster", "src/compound_bridge/client",
                                         "include/txnfs"],
    "tests/integration": [],   # C programs the pytest tests compile when they run
}

# Within include/txnfs: the values both sides carry at the bottom; the API (txnfs.h) and
# the wire format (ioctl_abi.h, not installed) over them, neither including the other.
PUBLIC_HEADERS = {
    "txnfs_types.h": [],
    "ioctl_abi.h": ["txnfs_types.h"],
    "txnfs.h": ["txnfs_types.h"],
}

C_SUFFIXES = {".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".hxx", ".inc"}
ROOT_PREFIXES = ("src/", "include/")   # include roots; anything else is spelt from the top
INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^">]+)[">]', re.M)


def repo_files() -> list[str]:
    """Every file of the source tree (tracked or not, not ignored), relative to ROOT."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"],
                             capture_output=True, text=True, check=True).stdout
        return [f for f in out.splitlines() if (ROOT / f).is_file()]
    except (OSError, subprocess.CalledProcessError):   # not a git checkout
        files = []
        for d, dirs, names in os.walk(ROOT):
            rel = Path(d).relative_to(ROOT)
            dirs[:] = [x for x in dirs if not (x.startswith((".", "build")) or x == "__pycache__"
                                                or (rel == Path(".") and x == "var"))]
            files += [str(rel / n) if str(rel) != "." else n for n in names]
        return files


def is_c(path: str) -> bool:
    """A C or C++ source, or the template of one (configure_file: NAME.h.in -> NAME.h)."""
    p = Path(path)
    return p.suffix in C_SUFFIXES or (p.suffix == ".in" and Path(p.stem).suffix in C_SUFFIXES)


def spelling(path: str) -> str:
    """How an include names PATH (relative to ROOT): from its include root."""
    path = path[:-3] if path.endswith(".in") else path
    for prefix in ROOT_PREFIXES:
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


FILES = repo_files()
C_FILES = [f for f in FILES if is_c(f)]
BY_SPELLING = {spelling(f): f for f in C_FILES}


def folder(path: str) -> str:
    return str(Path(path).parent)


def project_includes(path: str):
    """(kind, text, target file or None) of every include in PATH that is the project's,
    or that is written in quotes (which only the project's may be)."""
    for kind, text in INCLUDE.findall((ROOT / path).read_text()):
        target = BY_SPELLING.get(text)
        if kind == '"' or target is not None:
            yield kind, text, target


def test_every_c_folder_has_a_row():
    folders = {folder(f) for f in C_FILES}
    no_row = sorted(folders - LAYERS.keys())
    assert not no_row, f"folders of C/C++ sources without a row in LAYERS: {no_row}"
    gone = sorted(f for f in LAYERS if not (ROOT / f).is_dir())
    assert not gone, f"rows of LAYERS for folders that no longer exist: {gone}"


def test_rows_name_only_earlier_rows():
    order = list(LAYERS)
    bad = [f"{f} may include {g}, " + ("no row" if g not in LAYERS else "a later row")
           for f, uses in LAYERS.items() for g in uses
           if g not in LAYERS or order.index(g) >= order.index(f)]
    assert not bad, "\n".join(bad)


def test_includes_name_their_path_and_point_down():
    bad = []
    for f in C_FILES:
        mine = folder(f)
        for kind, text, target in project_includes(f):
            where = f"{f}: #include {kind}{text}{'>' if kind == '<' else kind}"
            if target is None:
                if text in C_FILES:
                    bad.append(f"{where}: write it as \"{spelling(text)}\"")
                elif "/" not in text:
                    bad.append(f"{where} is a bare name: write its path from src/, include/ "
                               f"or the top directory")
                else:
                    bad.append(f"{where} names no file of the project from an include root")
            elif kind == "<":
                bad.append(f"{where}: a project header, include it in quotes")
            elif folder(target) != mine and folder(target) not in LAYERS.get(mine, []):
                bad.append(f"{where}: {mine} may not include {folder(target)}")
    assert not bad, "\n".join(bad)


def test_the_control_channel_does_not_include_the_api():
    """ioctl_abi.h (the wire format) and txnfs.h (the library's API) share txnfs_types.h."""
    here = sorted(Path(f).name for f in C_FILES if folder(f) == "include/txnfs")
    bad = []
    for name in here:
        for _, text, target in project_includes(f"include/txnfs/{name}"):
            if target is None or Path(target).name not in PUBLIC_HEADERS.get(name, []):
                bad.append(f"include/txnfs/{name} includes {text}")
    assert not bad, "\n".join(bad)
    assert here == sorted(PUBLIC_HEADERS), "include/txnfs: give every header a PUBLIC_HEADERS row"


def test_every_folder_says_what_it_holds_and_what_it_may_include():
    """README.md: the title names the folder; its introduction (before the first `## `)
    says what the folder holds and has a paragraph `May include: ...` naming, in
    backquotes, exactly the folders of its row (and no other backquoted text)."""
    bad = []
    for f, uses in LAYERS.items():
        readme = ROOT / f / "README.md"
        if not readme.is_file():
            bad.append(f"{f}: no README.md")
            continue
        lines = readme.read_text().splitlines()
        if not re.match(rf"# {re.escape(f)}/?( |$)", lines[0]):
            bad.append(f"{f}/README.md: the first line is not `# {f} ...`")
        intro = next((i for i, line in enumerate(lines) if line.startswith("## ")), len(lines))
        head = "\n".join(lines[:intro])
        m = re.search(r"^May include:(.*?)(?:\n\s*\n|\Z)", head, re.M | re.S)
        if not m:
            bad.append(f"{f}/README.md: no `May include:` paragraph before its first `## `")
            continue
        said = {s.rstrip("/") for s in re.findall(r"`([^`]+)`", m.group(1))}
        if said != set(uses):
            bad.append(f"{f}/README.md says it may include {sorted(said)}, LAYERS {sorted(uses)}")
    assert not bad, "\n".join(bad)


def test_the_transaction_core_knows_no_fuse():
    for p in (ROOT / "src/txnfuse/txn").glob("*"):
        if p.suffix not in C_SUFFIXES:
            continue
        text = p.read_text()
        assert "fuse_" not in text.replace("txnfuse", ""), f"{p.name} mentions FUSE"
        assert "struct Fs" not in text and "Fs &" not in text, f"{p.name} reaches into Fs"


def meson_order(d: Path = ROOT) -> list[str]:
    """The directories meson enters, in the order it enters them (subdir() calls)."""
    order = []
    for sub in re.findall(r"subdir\('([^']+)'\)", (d / "meson.build").read_text()):
        order.append(str((d / sub).relative_to(ROOT)))
        order += meson_order(d / sub)
    return order


def test_meson_builds_a_folder_after_the_folders_it_includes():
    """A row with a meson.build of its own is built by it, after those of the folders it
    may include (a new directory joins LAYERS and the build)."""
    order = meson_order()
    built = [f for f in LAYERS if (ROOT / f / "meson.build").is_file()]
    bad = [f"{f} has a meson.build that no subdir() reaches" for f in built if f not in order]
    bad += [f"meson builds {f} before {g}, which it may include"
            for f in built if f in order for g in LAYERS[f]
            if g in order and order.index(g) > order.index(f)]
    assert not bad, "\n".join(bad)
