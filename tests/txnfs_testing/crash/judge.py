"""The crash harness's checker: judge_crash() decides whether the trees the threads show
after recovery are a state the contract allows (docs/crash-model.md): acknowledged
durable commits present, lost lazy commits only a suffix of the commit order, an
unacknowledged transaction present exactly when its commit record was durable, nothing
partial. A thread's tree may equal several of its states; the crash passes if one
reading of all threads meets every rule.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from txnfs_testing.crash.model import diff
from txnfs_testing.crash.workload import Workload


@dataclass
class Verdict:
    """What one reading of a crash's outcome finds (Runner.judge)."""
    problems: list = field(default_factory=list)
    new_parts: list = field(default_factory=list)
    unacked_absent: int = 0
    unacked_present: int = 0
    lost: int = 0                  # acknowledged lazy commits lost


def judge_crash(wl: "Workload", got: list, records: dict[int, str], logs: set[int]) -> Verdict:
    """Whether the trees `got` (one description per thread) after a crash are consistent
    with the workload's history, the commit records and the undo logs the crash left."""
    committed_ids = {t for t, s in records.items() if s == "committed"}
    # A thread's tree may match several of its states: a transaction that changed
    # nothing (say, a create and an unlink of one name) leaves two equal states, and
    # whether it survived is not observable. The crash is consistent if one reading
    # of every thread is; the report shows the latest reading of each.
    cands = []
    for k in range(len(got)):
        hist = wl.history[k]
        descs = [d.describe() for d in [wl.base[k]] + [h["part"] for h in hist]]
        cands.append([j for j in range(len(descs) - 1, -1, -1) if descs[j] == got[k]]
                     or [None])
    verdict = None
    for n, choice in enumerate(itertools.product(*cands)):
        v = judge_reading(wl, got, choice, records, logs, committed_ids)
        if verdict is None or not v.problems:
            verdict = v
        if not v.problems or n >= 4096:
            break
    return verdict


def judge_reading(wl: Workload, got: list, choice: tuple, records: dict[int, str],
                  logs: set[int], committed_ids: set[int]) -> Verdict:
    """The problems of one reading of the crash: thread k's tree is its state
    choice[k] (0: as before this cycle, i: after its i-th acknowledged commit; None:
    none of them)."""
    v = Verdict()
    lost_acks, kept_starts = [], []   # (ack, who) of lost / (start, who) of surviving commits
    lost_here = 0
    for k in range(len(got)):
        # the states thread k may be in: before this cycle, after each acknowledged
        # commit; lazy ones may be lost, but only the latest of all (a suffix)
        hist = wl.history[k]
        states = [wl.base[k]] + [h["part"] for h in hist]
        descs = [st.describe() for st in states]
        info = wl.inflight[k]
        j = choice[k]
        if j is not None:
            if info and info["phase"] == "committing":
                if info["work"].describe() == descs[-1]:
                    pass   # the transaction changed nothing: present = absent
                elif info["txid"] in committed_ids:
                    v.problems.append(f"thread {k}: transaction {info['txid']} has a durable "
                                      f"commit record but is absent")
                else:
                    v.unacked_absent += 1
            for h in hist[j:]:
                lost_acks.append((h["ack"], f"thread {k} txn {h['txid']}"))
                if not h["lazy"]:
                    v.problems.append(f"thread {k}: transaction {h['txid']} was committed "
                                      f"durably but is lost")
                elif h["txid"] in committed_ids:
                    v.problems.append(f"thread {k}: lazy transaction {h['txid']} has a "
                                      f"durable commit record but is lost")
            lost_here += len(hist[j:])
            for h in hist[:j]:
                kept_starts.append((h["start"], f"thread {k} txn {h['txid']}"))
            v.new_parts.append(states[j])
            continue
        if info and info["phase"] == "committing":
            expect_w = info["work"].describe()
            if got[k] == expect_w:
                tx = info["txid"]
                for h in hist:
                    kept_starts.append((h["start"], f"thread {k} txn {h['txid']}"))
                kept_starts.append((info.get("start", 0), f"thread {k} txn {tx} (in flight)"))
                if tx in committed_ids or (tx not in records and tx not in logs):
                    v.unacked_present += 1
                    v.new_parts.append(info["work"])
                    continue
                v.problems.append(f"thread {k}: transaction {tx} is present but its commit "
                                  f"record was not durable (record: {records.get(tx)}, log "
                                  f"{'present' if tx in logs else 'absent'})")
                v.new_parts.append(info["work"])
                continue
            d = diff(descs[-1], got[k])
            dw = diff(expect_w, got[k])
            v.problems.append(
                f"thread {k}: neither a committed state nor that of unacknowledged "
                f"transaction {info['txid']} (commit record "
                f"{'durable' if info['txid'] in committed_ids else 'not durable'}); vs. "
                f"committed:\n    " + "\n    ".join(d) + "\n  vs. with the transaction:\n    "
                + "\n    ".join(dw))
        else:
            phase = info["phase"] if info else "idle"
            v.problems.append(
                f"thread {k} ({phase}, txn {info and info['txid']}, "
                f"{len(info['ops']) if info else 0} ops done): the tree is not a committed "
                f"state:\n    " + "\n    ".join(diff(descs[-1], got[k])))
        v.new_parts.append(None)
    # the suffix contract across threads: nothing whose commit began after a lost
    # commit was acknowledged may survive
    if lost_acks:
        first_lost = min(lost_acks)
        later = [w for start, w in kept_starts if start > first_lost[0]]
        if later:
            v.problems.append(f"lost commits are not a suffix of the commit order: "
                              f"{first_lost[1]} is lost, but {later[:5]}, committed after it "
                              f"was acknowledged, survived")
        v.lost = lost_here
    return v
