"""The source tree shows the architecture, and keeps showing it.

Directories are layers; a file may include its own layer's headers and those of layers
below it, never above (no upward arrow, so no cycle between directories):

    sync < store < recovery/undo < recovery < txnfuse/txn < txnfuse/fuse < txnfuse/cli

Includes between them name their path below src/ ("store/metadb.h"), so the arrow is
visible where it is drawn. The public headers (include/txnfs/) sit above all of them.
The transaction core (txnfuse/txn) knows nothing of FUSE: it reaches the daemon only
through TxnEnv (txnfuse/txn/txn_env.h).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
LAYERS = ["sync", "store", "recovery/undo", "recovery", "txnfuse/txn", "txnfuse/fuse",
          "txnfuse/cli"]
INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^">]+)[">]', re.M)


def layer_of(path: str) -> str | None:
    """The deepest layer directory that holds `path` (relative to src/)."""
    best = None
    for layer in LAYERS:
        if path.startswith(layer + "/") and (best is None or len(layer) > len(best)):
            best = layer
    return best


def sources():
    for layer in LAYERS:
        for p in sorted((SRC / layer).glob("*")):
            if p.suffix in (".h", ".cc", ".c"):
                yield p


def test_every_layer_directory_exists_and_has_sources():
    for layer in LAYERS:
        assert any((SRC / layer).glob("*.cc")) or any((SRC / layer).glob("*.h")), layer


def test_includes_point_down_and_name_their_path():
    bad = []
    for p in sources():
        rel = str(p.relative_to(SRC))
        mine = LAYERS.index(layer_of(rel))
        for kind, target in INCLUDE.findall(p.read_text()):
            if kind == "<":
                continue
            if "/" not in target:
                bad.append(f"{rel}: #include \"{target}\" does not name its directory")
                continue
            if target.startswith("txnfs/"):          # include/txnfs: the public headers
                continue
            theirs = layer_of(target)
            if theirs is None:
                bad.append(f"{rel}: #include \"{target}\" is in no layer")
            elif LAYERS.index(theirs) > mine:
                bad.append(f"{rel} ({LAYERS[mine]}) includes {target} ({theirs}): upward")
            elif not (SRC / target).exists() and target != "store/schema_sql.h":
                bad.append(f"{rel}: #include \"{target}\" does not exist")
    assert not bad, "\n".join(bad)


def test_the_transaction_core_knows_no_fuse():
    for p in (SRC / "txnfuse/txn").glob("*"):
        text = p.read_text()
        assert "fuse_" not in text.replace("txnfuse", ""), f"{p.name} mentions FUSE"
        assert "struct Fs" not in text and "Fs &" not in text, f"{p.name} reaches into Fs"


def test_this_layer_list_is_the_build_order():
    """meson builds the layers bottom-up; a new directory joins LAYERS and the build."""
    top = re.findall(r"subdir\('src/([^']+)'\)", (ROOT / "meson.build").read_text())
    inner = re.findall(r"subdir\('([^']+)'\)", (SRC / "txnfuse/meson.build").read_text())
    order = []
    for d in top:
        order += [f"txnfuse/{x}" for x in inner] if d == "txnfuse" else [d]
    assert [d for d in order if d in LAYERS] == LAYERS
