"""docs/cli.md and `--help` cannot drift apart, and the docs' links lead somewhere.

* Every subcommand `txnfs --help` lists has a section in docs/cli.md headed
  "### `txnfs NAME`", and every such section is a subcommand `--help` lists.
* For each subcommand, the options `txnfs NAME --help` lists (short and long forms;
  -h/--help aside) are exactly the options of that section's table (the first column),
  and every option the synopsis at the top of the page gives that subcommand is one of
  them. The same for `txnfs-nfs --help` and the "## `txnfs-nfs`" section.
* Every relative link in README.md, docs/*.md and the READMEs of bench/ and tests/
  points to a file or directory that exists, and its anchor, if any, to a heading there.

Needs the built programs (build/src/txnfuse/txnfs or $TXNFS_BIN; txnfs-nfs in build/,
else its part is skipped) and no mount.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from txnfs_testing.txnfs_lib import REPO, txnfs_bin

CLI_MD = REPO / "docs" / "cli.md"
NFS_CLIENT = REPO / "build" / "src" / "compound_bridge" / "client" / "txnfs-nfs"
FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def help_text(*args: str) -> str:
    p = subprocess.run([*args, "--help"], capture_output=True, text=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, f"{' '.join(args)} --help exited {p.returncode}:\n{p.stderr}"
    return p.stdout


def help_section(text: str, title: str) -> list[str]:
    """The lines of one section of CLI11's help ("Options:", "Subcommands:"): from its
    title to the next blank line."""
    out, inside = [], False
    for line in text.splitlines():
        if re.match(r"^[A-Z][A-Za-z ]*:\s*$", line):
            inside = line.strip().lower() == title.lower()
        elif not line.strip():
            inside = False
        elif inside:
            out.append(line)
    return out


def help_options(text: str) -> set[str]:
    """Option names an option section lists: `  -f,--foreground`, `  --pid-file TEXT`."""
    opts = set()
    for line in help_section(text, "Options:"):
        m = re.match(r"^  (-\S+)", line)
        if m:
            opts |= {o for o in m.group(1).split(",") if o.startswith("-")}
    return opts - {"-h", "--help"}


def help_subcommands(text: str) -> set[str]:
    return {m.group(1) for line in help_section(text, "Subcommands:")
            if (m := re.match(r"^  ([a-z][\w-]*)", line))}


def doc_sections(md: str) -> dict[str, str]:
    """Heading text -> the body up to the next heading of the same or a higher level."""
    out = {}
    heads = list(re.finditer(r"^(#{2,3}) (.+)$", md, re.M))
    for i, h in enumerate(heads):
        level = len(h.group(1))
        end = len(md)
        for nxt in heads[i + 1:]:
            if len(nxt.group(1)) <= level:
                end = nxt.start()
                break
        out[h.group(2).strip()] = md[h.end():end]
    return out


def table_options(body: str) -> set[str]:
    """Options in the first column of a section's tables ("| `-f`, `--foreground` | ...")."""
    opts = set()
    for line in body.splitlines():
        cells = line.split("|")
        if line.startswith("| `-") and len(cells) > 2:
            opts |= set(FLAG.findall(cells[1]))
    return opts


def synopsis_options(md: str, sub: str) -> set[str]:
    """Options the synopsis block at the top gives `txnfs SUB` (its line and continuations)."""
    block = re.search(r"```\n(txnfs init.*?)```", md, re.S).group(1)
    opts, current = set(), None
    for line in block.splitlines():
        m = re.match(r"^txnfs (\w[\w-]*)", line)
        if m:
            current = m.group(1)
        elif not line.startswith(" "):
            current = None
        if current == sub:
            opts |= set(FLAG.findall(line))
    return opts


@pytest.fixture(scope="module")
def md() -> str:
    return CLI_MD.read_text()


@pytest.fixture(scope="module")
def txnfs() -> str:
    b = txnfs_bin()
    if not os.access(b, os.X_OK):
        pytest.fail(f"{b} is not built (scripts/build)")
    return b


def test_every_subcommand_has_a_section_and_every_section_is_a_subcommand(txnfs, md):
    listed = help_subcommands(help_text(txnfs))
    assert listed, "txnfs --help lists no subcommands: has its format changed?"
    documented = {m.group(1) for m in re.finditer(r"^### `txnfs ([\w-]+)`$", md, re.M)}
    assert listed - documented == set(), "subcommands without a section in docs/cli.md"
    assert documented - listed == set(), "sections in docs/cli.md of no subcommand --help lists"


def test_every_option_of_every_subcommand_is_documented_and_nothing_else(txnfs, md):
    sections = doc_sections(md)
    problems = []
    for sub in sorted(help_subcommands(help_text(txnfs))):
        have = help_options(help_text(txnfs, sub))
        if f"`txnfs {sub}`" not in sections:
            problems.append(f"txnfs {sub}: no section in docs/cli.md")
            continue
        doc = table_options(sections[f"`txnfs {sub}`"])
        syn = synopsis_options(md, sub)
        if have - doc:
            problems.append(f"txnfs {sub}: in --help, not in its table: {sorted(have - doc)}")
        if doc - have:
            problems.append(f"txnfs {sub}: in its table, not in --help: {sorted(doc - have)}")
        if syn - have:
            problems.append(f"txnfs {sub}: in the synopsis, not in --help: {sorted(syn - have)}")
    assert not problems, "\n".join(problems)


def test_txnfs_nfs_options_are_documented_and_nothing_else(md):
    if not os.access(NFS_CLIENT, os.X_OK):
        pytest.skip(f"{NFS_CLIENT} is not built (it needs the Ganesha source: scripts/build)")
    have = help_options(help_text(str(NFS_CLIENT)))
    assert have, "txnfs-nfs --help lists no options: has its format changed?"
    doc = table_options(doc_sections(md)["`txnfs-nfs`"])
    assert have - doc == set(), "txnfs-nfs options missing from docs/cli.md"
    assert doc - have == set(), "options in docs/cli.md that txnfs-nfs --help does not list"


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, no punctuation but - and _, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(md: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_every_relative_link_in_the_docs_leads_to_a_file():
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
            REPO / "bench" / "README.md", *sorted((REPO / "tests").glob("*/README.md"))]
    broken = []
    for doc in docs:
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)  # code is not links
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue                                  # a URL
            path, _, anchor = target.partition("#")
            dest = doc if not path else doc.parent / path
            if not dest.exists():
                broken.append(f"{doc.relative_to(REPO)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{doc.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "links to nothing:\n" + "\n".join(broken)
