"""The daemon's crash-injection points, as the binary lists them (`txnfs crash-points`):
crash_points() gives (name, where, what a crash there tests); points_markdown() the
table of docs/crash-model.md, which test_crash.py keeps equal to it.
"""

from __future__ import annotations


from txnfs_testing import txnfs_lib as tl


def crash_points() -> list[tuple[str, str, str]]:
    """(name, where, what it tests) of every crash-injection point, from the binary."""
    out = tl.txnfs("crash-points", check=True).stdout
    return [tuple(line.split("\t", 2)) for line in out.splitlines() if line.strip()]


def points_markdown() -> str:
    """The crash points as the markdown table of docs/crash-model.md (generated from the
    binary, never written by hand: `tests/crash/run --list-points --markdown`)."""
    rows = ["| point | where | a crash there tests |", "| --- | --- | --- |"]
    for name, where, tests in crash_points():
        rows.append(f"| `{name}` | {where} | {tests} |")
    return "\n".join(rows)
