# shellcheck shell=bash
# bench/lib.sh — setup shared by the bench drivers (fs-vs-xfs, txn-vs-plain).
# Source it from a bash script that runs with `set -euo pipefail`; do not run it.
#
# Before sourcing, set BENCH_NAME (used in messages and in the temp dir name).
#
#   log MSG / die MSG            messages on stderr, prefixed with BENCH_NAME
#   bench_need_root              refuse to run as non-root
#   bench_need_tools T...        refuse if a command is missing
#   bench_build                  scripts/build (deps, meson setup, ninja); sets $txnfs
#   bench_start                  mktemp -d -> $tmp, installs the cleanup trap
#   bench_make_xfs GIB [full]    image $tmp/xfs.img, mkfs.xfs -m reflink=1, loop device
#                                -> $loopdev, mounted at $xfs_mnt; sparse, or with "full"
#                                written with zeroes first (no host allocation later) and
#                                made with mkfs.xfs -K (a discard would punch it sparse again)
#   bench_txnfs_mount STORE MNT [OPTS]
#                                txnfs init + txnfs mount; sets $txn_pid ($txn_mnt = MNT);
#                                with -o io_uring unless TXNFS_IO_URING=0 (bench_start
#                                switches the fuse module's enable_uring on for the run
#                                and restores it at exit; binaries that do not know the
#                                option serve /dev/fuse)
#   bench_track_fuse MNT PID NAME   unmount MNT and stop PID (cmdline contains NAME) at exit;
#                                PID may be a pid file (an absolute path), read at exit
#   bench_track_bg PID           SIGINT + wait PID at exit (e.g. a perf record)
#   bench_stop_bg PID            SIGINT + wait PID now, and forget it
#   bench_header                 the "== BENCH_NAME date kernel cpus" lines + the mounts
#   is_ours PID NAME, stop_pid PID NAME, unmount_fuse MNT   (used by the cleanup)
#
# Cleanup on success, failure, Ctrl-C: background helpers, FUSE mounts (then their
# daemons, by PID), the XFS mount, the loop device, $tmp. Extra steps: append a
# function name to bench_cleanup_hooks (they run first).

: "${BENCH_NAME:?set BENCH_NAME before sourcing bench/lib.sh}"

bench_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bench_repo=$(cd "$bench_here/.." && pwd)
build=${BUILD_DIR:-$bench_repo/build}

tmp=
loopdev=
xfs_mnt=
txn_mnt=
txn_pid=
bench_fuse=()          # "mountpoint|pid|name" triples
bench_bg=()            # pids of background helpers (perf record, ...)
bench_cleanup_hooks=()

log() { printf '%s: %s\n' "$BENCH_NAME" "$*" >&2; }
die() { printf '%s: error: %s\n' "$BENCH_NAME" "$*" >&2; exit 1; }

bench_need_root() { [[ $(id -u) == 0 ]] || die "must run as root (loop and FUSE mounts)"; }

bench_need_tools() {
    local t
    for t in "$@"; do
        command -v "$t" >/dev/null || die "$t not found (Debian: apt-get install xfsprogs fuse3 mount)"
    done
}

# Builds what the benchmarks need: scripts/build (missing Debian packages, the patched
# Ganesha, libfuse 3.18, meson setup on a fresh clone, ninja). With BUILD_DIR set to
# another build tree, only `ninja -C BUILD_DIR` (that tree must be configured).
bench_build() {
    if [[ $build == "$bench_repo/build" ]]; then
        log "building (scripts/build)"
        "$bench_repo/scripts/build" || die "the build failed (see above); run scripts/build as root"
    else
        [[ -f $build/build.ninja ]] || die "BUILD_DIR=$build is not a configured meson build tree"
        log "ninja -C $build"
        ninja -C "$build" >&2
    fi
    txnfs=$build/src/txnfuse/txnfs
    [[ -x $txnfs ]] || die "$txnfs was not built"
}

# Is PID still the process we started (and not a recycled PID)?
is_ours() { # pid comm-substring
    [[ -n $1 && -r /proc/$1/cmdline ]] && { tr '\0' ' ' </proc/"$1"/cmdline; } 2>/dev/null | grep -q -- "$2"
}

stop_pid() { # pid comm-substring
    local pid=$1 what=$2 i
    is_ours "$pid" "$what" || return 0
    for i in $(seq 50); do is_ours "$pid" "$what" || return 0; sleep 0.1; done
    log "$what (pid $pid) still running after unmount: SIGTERM"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 50); do is_ours "$pid" "$what" || return 0; sleep 0.1; done
    log "$what (pid $pid) still running: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
}

unmount_fuse() { # mountpoint
    local m=$1
    mountpoint -q "$m" 2>/dev/null || { grep -qs " $m fuse" /proc/mounts || return 0; }
    fusermount3 -u "$m" 2>/dev/null || umount "$m" 2>/dev/null || {
        log "lazy unmount of $m"; umount -l "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null || true; }
}

bench_track_fuse() { bench_fuse+=("$1|$2|$3"); }
bench_track_bg() { bench_bg+=("$1"); }
bench_stop_bg() {
    local p keep=()
    kill -INT "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    for p in "${bench_bg[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
    bench_bg=("${keep[@]}")
}

bench_cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    set +e
    local h p entry m pid name
    for h in "${bench_cleanup_hooks[@]}"; do "$h"; done
    for p in "${bench_bg[@]}"; do kill -INT "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    for entry in "${bench_fuse[@]}"; do
        IFS='|' read -r m pid name <<<"$entry"
        [[ $pid == /* ]] && pid=$(cat "$pid" 2>/dev/null || true)
        unmount_fuse "$m"
        [[ -n $pid ]] && stop_pid "$pid" "$name"
    done
    if [[ -n $xfs_mnt ]] && mountpoint -q "$xfs_mnt" 2>/dev/null; then
        umount "$xfs_mnt" 2>/dev/null || { sleep 1; umount "$xfs_mnt" 2>/dev/null; } ||
            { log "lazy unmount of $xfs_mnt"; umount -l "$xfs_mnt"; }
    fi
    [[ -n $loopdev ]] && losetup -d "$loopdev" 2>/dev/null
    [[ -n $tmp && -d $tmp ]] && rm -rf "$tmp"
    ((rc == 0)) || log "exit status $rc (cleaned up)"
    exit "$rc"
}

bench_start() {
    tmp=$(mktemp -d "/tmp/txnfs-$BENCH_NAME.XXXXXX")
    trap bench_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    bench_io_uring_on
}

# FUSE over io_uring for the run, when the kernel has it (TXNFS_IO_URING=0: /dev/fuse).
# Held through scripts/io-uring-param, which puts the old value back when the last run on
# the machine lets go (runs may overlap).
bench_io_uring=0
bench_io_uring_on() {
    [[ ${TXNFS_IO_URING:-1} != 0 ]] || return 0
    "$bench_repo/scripts/io-uring-param" hold $$ || return 0
    bench_cleanup_hooks+=(bench_io_uring_restore)
    bench_io_uring=1
}
bench_io_uring_restore() { "$bench_repo/scripts/io-uring-param" release $$; }

bench_image_kind=sparse
bench_make_xfs() { # size-gib [full]
    local gib=$1 kind=${2:-sparse}
    xfs_mnt=$tmp/xfs
    if [[ $kind == full ]]; then
        log "writing ${gib} GiB of zeroes into the image (--full-image)"
        dd if=/dev/zero of="$tmp/xfs.img" bs=4M count=$((gib * 256)) conv=fsync status=none
        mkfs.xfs -q -K -m reflink=1 "$tmp/xfs.img"
    else
        truncate -s "${gib}G" "$tmp/xfs.img"
        mkfs.xfs -q -m reflink=1 "$tmp/xfs.img"
    fi
    bench_image_kind=$kind
    loopdev=$(losetup --find --show "$tmp/xfs.img")
    mkdir -p "$xfs_mnt"
    mount "$loopdev" "$xfs_mnt"
    log "XFS image $tmp/xfs.img (${gib} GiB $kind) on $loopdev at $xfs_mnt"
}

# Mounts a new store; sets $txn_mnt and $txn_pid. BINARY (default $txnfs) is the txnfs
# program to serve it with: another build, to compare two daemons side by side.
bench_txnfs_mount() { # store mountpoint [fuse-opts] [binary]
    local store=$1 opts=${3:-} bin=${4:-$txnfs} i
    txn_mnt=$2
    local pidf=$tmp/txnfs-$(basename "$txn_mnt").pid
    mkdir -p "$txn_mnt"
    "$bin" init "$store" >&2
    local args=("$store" "$txn_mnt" --pid-file "$pidf")
    ((bench_io_uring)) && opts=${opts:+$opts,}io_uring
    [[ -n $opts ]] && args+=(-o "$opts")
    bench_track_fuse "$txn_mnt" "$pidf" txnfs   # also if the mount fails half-way
    "$bin" mount "${args[@]}" >&2
    # The contract says the mount is ready when `txnfs mount` returns; tolerate (and
    # report) a pid file or mount that shows up a little later.
    for i in $(seq 100); do
        [[ -s $pidf ]] && grep -qs " $txn_mnt fuse" /proc/mounts && break
        sleep 0.1
    done
    ((i == 1)) || log "note: pid file/mount appeared $(( (i - 1) * 100 )) ms after 'txnfs mount' returned"
    [[ -s $pidf ]] || die "txnfs mount returned but wrote no pid file"
    txn_pid=$(cat "$pidf")
    bench_fuse[-1]="$txn_mnt|$txn_pid|txnfs"  # the daemon unlinks its pid file at exit
    grep -qs " $txn_mnt fuse" /proc/mounts || die "txnfs mount returned but $txn_mnt is not mounted"
    log "txnfs daemon pid $txn_pid mounted at $txn_mnt"
}

bench_header() { # image-gib [mountpoints to show...]
    local gib=$1 m; shift
    echo "== $BENCH_NAME $(date -u +%Y-%m-%dT%H:%M:%SZ)  kernel $(uname -r)  $(nproc) cpus  txnfs $(git -C "$bench_repo" describe --always --dirty 2>/dev/null || echo '?')"
    local how="sparse"
    [[ $bench_image_kind == full ]] && how="fully written with zeroes first, mkfs.xfs -K"
    ((bench_io_uring)) && echo "   txnfs mounts with -o io_uring (FUSE over io_uring where the binary supports it)"
    echo "   XFS image ${gib} GiB $how, mkfs.xfs -m reflink=1, on $loopdev (backing file on $(df --output=source,fstype "$tmp" | tail -1 | tr -s ' '))"
    for m in "$xfs_mnt" "$@"; do
        awk -v a="$m" '$2==a {print "   mount: " $0}' /proc/mounts
    done
}
