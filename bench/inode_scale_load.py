"""The workload of bench/inode-scale: creates files on a txnfs mount (1,000 per
directory) and keeps every one known to the kernel by an inotify watch on it (a watch
holds the inode, so memory pressure cannot make the kernel forget it and the daemon
keeps its Inode). At each checkpoint prints the daemon's RSS, its fds and the inodes
its table holds.

usage: python3 inode_scale_load.py TXNFS MOUNT STORE DAEMON_PID CHECKPOINT...
"""

import ctypes
import json
import os
import subprocess
import sys
import time

IN_ATTRIB = 0x00000004

txnfs, mnt, store, pid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
points = [int(x) for x in sys.argv[5:]]
libc = ctypes.CDLL(None, use_errno=True)
ifd = libc.inotify_init1(os.O_CLOEXEC)
if ifd < 0:
    sys.exit(f"inotify_init1: {os.strerror(ctypes.get_errno())}")


def status_kib(key):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def fds():
    total = store_fds = 0
    for f in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{f}")
        except FileNotFoundError:
            continue
        total += 1
        store_fds += link.startswith(store)
    return total, store_fds


def known():
    out = subprocess.run([txnfs, "status", mnt, "--json"], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)["inodes"]


print(f"{'files':>10} {'known_inodes':>13} {'rss_mib':>9} {'hwm_mib':>9} {'daemon_fds':>11} "
      f"{'store_fds':>10} {'fd_cache':>9} {'secs':>6}", flush=True)
made = 0
start = time.monotonic()
for target in points:
    while made < target:
        d = f"{mnt}/d{made // 1000:04}"
        if made % 1000 == 0:
            os.mkdir(d)
        p = f"{d}/f{made % 1000:03}"
        os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        if libc.inotify_add_watch(ifd, os.fsencode(p), IN_ATTRIB) < 0:
            sys.exit(f"inotify_add_watch {p}: {os.strerror(ctypes.get_errno())} "
                     "(fs.inotify.max_user_watches)")
        made += 1
    k = known()
    total, store_fds = fds()
    print(f"{made:>10} {k['known']:>13} {status_kib('VmRSS') / 1024:>9.1f} "
          f"{status_kib('VmHWM') / 1024:>9.1f} {total:>11} {store_fds:>10} "
          f"{k['fd_cache_capacity']:>9} {time.monotonic() - start:>6.0f}", flush=True)
