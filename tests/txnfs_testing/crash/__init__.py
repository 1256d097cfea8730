"""The txnfs crash-test harness: crash a store under a concurrent transactional workload,
recover it, and check that every transaction is all-or-nothing (the contract:
docs/crash-model.md, "The crash-test harness").

One run = one XFS image, one store, and N *cycles*. Each cycle:

  1. mounts the store (`txnfs mount -f`, with TXNFS_CRASH_AT for an injected point);
  2. runs the workload: THREADS threads, each in a loop of transactions bound to its
     thread through libtxnfs (ctypes), each transaction a random mix of operations --
     writes at random offsets, extensions, truncations, hole punching, creates, mkdir,
     symlinks, unlink, rmdir, renames (also over existing files and of directories, also
     into and out of a directory all threads share), hard links, chmod, chown, xattrs --
     that then commits or aborts. Every acknowledged commit is appended to a journal
     outside the store, with its full intended effect;
  3. crashes it, one of three kinds:
       kill    `kill -9` of the daemon at a random moment;
       power   `xfs_io -x -c shutdown` on the backing XFS (no -f: the unflushed log is
               lost), kill -9 of the daemon, unmount and mount the image again;
       inject  a crash point of the daemon (`txnfs crash-points`): TXNFS_CRASH_AT=NAME:N
               makes the N-th arrival exit at once. Points of recovery itself
               ("recover.*") are armed on the mount that recovers a kill -9;
  4. mounts again (recovery runs), and checks:
       - every acknowledged commit is fully present;
       - a transaction without an acknowledgement is fully present or fully absent:
         present exactly when its commit record was durable (read from a copy of the
         database before recovery), absent if it never asked to commit;
       - no undo log is left; the store works (a probe transaction commits);
       - after unmounting, `txnfs fsck` is clean.

The model is exact because the threads never share an object: thread k owns the
directory w<k>/ and the names k<k>_* in shared/. For each thread the model holds its
committed state C (what the tree must show) and, while a transaction runs, its
working state W (what the tree shows once that transaction commits). Files are
described by type, mode, owner, size, SHA-256 of the content, user.* xattrs, symlink
targets, and which names are hard links of one object.

A failure prints the seed, the cycle, the crash kind and point; `--seed S --points N`
replays the same sequence of cycles (thread interleavings are the kernel's: with
`--threads 1` a replay is close to exact).

One module per job (python3 -m txnfs_testing.crash is the command line, tests/crash/run):

    points    the crash-injection points, from the binary
    model     what each thread's part of the tree must be (Part, Obj)
    workload  the threads of transactions, the journal of acknowledged commits
    env       the image, the store, the daemon: mount, kill, power cut, cleanup (Env)
    judge     whether the trees after recovery are a state the contract allows
    driver    the crash cycles (Runner), their counts (Stats), Violation
"""
