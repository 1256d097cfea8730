"""The differential op-space fuzzer: seeded random operation sequences over everything the
txnfs daemon implements, checked by oracles.

    abort   snapshot; run the sequence in a transaction; abort: the tree is the snapshot
            again (handles and inode numbers included, atime aside), fsck clean, no backups
    commit  the same single-process sequence on a plain XFS directory and in a committed
            transaction: the same result for every operation (value or errno, bytes read)
            and the same tree (times, inode numbers and handles aside); fsck clean
    plain   as commit, but outside any transaction (the daemon's plain path vs. XFS); on
            even seeds while another process holds an idle transaction open
    crash   kill -9 of the daemon, a power cut (xfs_io shutdown) or an injected crash
            point at a moment of the transaction; after recovery the tree is the snapshot
            before (or, once commit was asked for, the transaction's result); fsck clean

Every oracle ends with `txnfs fsck` (after unmounting), a check that every object of
STORE/tree has a row in the handle table, and that STORE/.txnfs/backups is empty.

Operations are JSON-able dicts ({"o": name, ...}); a sequence is a list of them per
process. Everything that makes a run -- the populated tree, the operations, the crash --
derives from the seed, so `tests/fuzz/run --seed S` repeats a run, and a failure is
shrunk (delta debugging) to a minimal op list that still fails the same way and printed
as a runnable case (`tests/fuzz/run --replay FILE`).

Known differences between txnfs and XFS are in ONE table, divergences.DIVERGENCES, each
with its reason; an operation whose txnfs result matches an entry is counted and
reported, and the XFS side does not run it (so the trees stay comparable) -- nothing is
skipped silently.

One module per job (python3 -m txnfs_testing.fuzz is the command line, tests/fuzz/run):

    syscalls     flag tables, ctypes wrappers (utimensat, POSIX ACL values)
    tree         the tree every run of a seed starts from (populate)
    generator    seeded cases: op lists, crashes, transaction cuts; reproducer files
    executor     running one op in a worker process (exec_op)
    workers      the worker processes of a run (Group), in lockstep, with deadlines
    divergences  the documented divergences from XFS (the one table)
    oracles      abort, commit, plain, crash (Fuzzer), the plain Observer, shrinking
    driver       the soak over seeds, failure reports, the summary
"""
