"""The helpers of txnfs's tests, one package: tests/integration, python/tests, the crash
harness (tests/crash/run), the fuzzer (tests/fuzz/run) and the bench drivers import it as

    from txnfs_testing import txnfs_lib as tl

pytest finds it through the `pythonpath` of pytest.ini (the repository's top directory);
the command-line tools' launchers put tests/ on PYTHONPATH; a test that starts a Python
child which imports it passes txnfs_lib.python_env() as the child's environment.

    txnfs_lib         the binary, stores, mounts, transactions (ctypes on libtxnfs),
                      syscalls Python lacks, running as another uid
    snapshot          byte-for-byte snapshots of a tree, and their comparison
    ganesha_lib       the patched NFS-Ganesha (+ bridge) and the plain one, as servers
    nfs_lib           the txnfs-nfs client: one COMPOUND per call, its JSON
    nfs4_probe        a minimal NFSv4.0/4.1 client (COMPOUNDs by hand)
    nfs4_conformance  the NFSv4 conformance script over nfs4_probe
    crash/            the crash-test harness (python3 -m txnfs_testing.crash: tests/crash/run)
    fuzz/             the differential op-space fuzzer (python3 -m txnfs_testing.fuzz:
                      tests/fuzz/run)
"""
