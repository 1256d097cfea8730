# shellcheck shell=bash disable=SC2034
# Helpers sourced by scripts/up, scripts/down and scripts/test. Needs root (apt, mount).
set -euo pipefail

TXNFS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TXNFS=$TXNFS_ROOT/build/src/txnfuse/txnfs
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"   # where `cargo install` puts pjdfstest

TXNFS_PACKAGES=(build-essential meson ninja-build pkgconf fuse3 libsqlite3-dev
                sqlite3 uuid-dev catch2 libcli11-dev libfmt-dev libspdlog-dev nlohmann-json3-dev
                xfsprogs attr acl python3 python3-pytest fio
                libntirpc-dev nfs-ganesha nfs-ganesha-vfs clang gdb
                python3-pip python3-venv python3-setuptools systemd
                etcd-server etcd-client libcurl4-openssl-dev)
# fuse3: fusermount3 and /etc/fuse.conf; the library txnfs links is libfuse 3.18, built by
# scripts/build-libfuse (Debian 12's libfuse3 3.14 speaks FUSE 7.31 only).
# clang: the thread-safety analysis of the lock hierarchy (build-tsa, see txnfs_build_tsa);
# gdb: the daemon's stack dumps of stalled requests (TXNFS_STALL_DUMP).
# nfs-ganesha + nfs-ganesha-vfs: Debian's unpatched server, the baseline the NFS tests and
# benchmarks compare with (the patched one is built by scripts/build-ganesha).
# python3-pip, -venv, -setuptools: `pip install ./python` (the Python package) into a venv
# for its tests; systemd: `systemd-analyze verify` of contrib/systemd.
# etcd-server + etcd-client: the cluster's commit decisions and map (src/cluster), and its
# tests; libcurl4-openssl-dev: the etcd client (its v3 JSON gateway).

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Install those of the given Debian packages that are missing; silent when none is.
txnfs_apt() {
  local p missing=()
  for p in "$@"; do
    [[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null) == ii* ]] || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# pjdfstest 0.2 needs Rust >= 1.85. Debian 12's `cargo` package (cargo 1.65, rustc 1.63) cannot
# build it: it reaches crates.io only through the git index, and the dependencies use edition
# 2024. Debian 12's `cargo-web` (Rust 1.85 in bookworm, 1.96 in bookworm-security) can.
txnfs_pjdfstest() {
  command -v pjdfstest >/dev/null && return 0
  local cargo=cargo rustc=rustc v
  v=$(rustc --version 2>/dev/null | awk '{print $2}') || true
  if [[ -z $v || $(printf '%s\n' 1.85 "$v" | sort -V | head -1) != 1.85 ]]; then
    txnfs_apt cargo-web
    cargo=/usr/bin/cargo rustc=/usr/bin/rustc
  fi
  log "cargo install pjdfstest (about 1 min)"
  RUSTC=$rustc "$cargo" install --quiet --locked pjdfstest
}

txnfs_deps() {
  ((EUID == 0)) || die "run as root (needs apt-get, mount, /dev/fuse)"
  txnfs_apt "${TXNFS_PACKAGES[@]}"
  txnfs_pjdfstest
  # pjdfstest switches to these users; Debian has nobody, `tests` is ours.
  local u
  for u in nobody tests; do
    getent passwd "$u" >/dev/null || useradd -M -s /usr/sbin/nologin "$u"
  done
}

# Debian's nfs-ganesha package enables a system NFS server; txnfs only runs private
# instances of its binary, so the service stays off where systemd runs.
txnfs_no_system_ganesha() {
  [[ -d /run/systemd/system ]] || return 0
  systemctl disable --now nfs-ganesha.service >/dev/null 2>&1 || true
}

txnfs_build() {
  cd "$TXNFS_ROOT"
  txnfs_no_system_ganesha
  # The patched Ganesha first: its source tree also gives the txnfs-nfs client its XDR.
  "$TXNFS_ROOT/scripts/build-ganesha" >/dev/null
  local pc
  pc=$("$TXNFS_ROOT/scripts/build-libfuse")
  if [[ ! -f build/build.ninja ]]; then
    meson setup build -Dpkg_config_path="$pc"
  elif ! grep -q 'txnfs-nfs' build/build.ninja || ! grep -q 'libfuse/prefix/lib' build/build.ninja; then
    # configured before the Ganesha source was there, or against Debian's libfuse 3.14
    meson setup --reconfigure build -Dpkg_config_path="$pc"
  fi
  [[ ${CI:-} != true ]] || meson configure build -Dwerror=true
  ninja -C build ${TXNFS_NINJA_JOBS:+-j "$TXNFS_NINJA_JOBS"}
}

# Compiles the daemon and the store with clang++, -Wthread-safety -Wthread-safety-beta
# (-Dthread_safety=true) and -Werror: an unannotated access to a guarded member, a call
# without a required mutex, or an ordering clang can see broken fails the build. Only
# the object files of the daemon, the store and src/sync are compiled; nothing is linked
# or run.
txnfs_build_tsa() {
  cd "$TXNFS_ROOT"
  local pc
  pc=$("$TXNFS_ROOT/scripts/build-libfuse")
  if [[ -f build-tsa/build.ninja ]] && ! grep -q 'libfuse/prefix/lib' build-tsa/build.ninja; then
    rm -rf build-tsa   # configured against Debian's libfuse 3.14
  fi
  if [[ ! -f build-tsa/build.ninja ]]; then
    CC=clang CXX=clang++ meson setup build-tsa -Dthread_safety=true -Dwerror=true \
      -Dpkg_config_path="$pc" >/dev/null
  fi
  ninja -C build-tsa build.ninja >/dev/null  # re-runs meson if the tree's layout changed
  local objs
  mapfile -t objs < <(ninja -C build-tsa -t targets all |
    grep -E '^src/(txnfuse/(txnfs\.p|txn/libtxncore\.a\.p|fuse/libtxnfuse\.a\.p|cli/libtxncli\.a\.p)|store/libtxnstore\.a\.p|sync/libtxnsync\.a\.p)/[^:]*\.o:' |
    cut -d: -f1)
  ((${#objs[@]} > 20)) || die "build-tsa: the daemon's object files are not where expected"
  ninja -C build-tsa "${objs[@]}"
}

# True while any thread of the process exists and is not a zombie (PID 1 of a container
# may not reap; a killed daemon's main thread shows Z while another thread still holds
# its files).
pid_alive() {
  local f st
  for f in /proc/"$1"/task/*/stat; do
    st=$(cut -d')' -f2 "$f" 2>/dev/null | awk '{print $1}') || continue
    [[ -n $st && $st != Z && $st != X ]] && return 0
  done
  return 1
}

# -- the patched NFS-Ganesha of scripts/up (tests use tests/txnfs_testing/ganesha_lib.py) --
GANESHA_BIN=$TXNFS_ROOT/build/ganesha/prefix/bin/ganesha.nfsd
BRIDGE_LIB=$TXNFS_ROOT/build/src/compound_bridge/libtxnfs_bridge.so

txnfs_ganesha_running() {  # WORKDIR
  [[ -f $1/ganesha.pid ]] && pid_alive "$(cat "$1/ganesha.pid")"
}

# Renders contrib/ganesha.conf into WORKDIR and starts the server exporting MOUNT on
# ADDR:PORT (ADDR: default 127.0.0.1; scripts/cluster gives each node its own loopback
# address, all on port 2049); returns once the port accepts connections. CLUSTER: a
# cluster node's cluster.conf (absolute), the bridge's `cluster =` (two-phase commit).
txnfs_start_ganesha() {  # WORKDIR MOUNT PORT [ADDR [CLUSTER]]
  local w=$1 mnt=$2 port=$3 addr=${4:-127.0.0.1} cluster=${5:-} i
  mkdir -p "$w/recovery"
  if (exec 3<>"/dev/tcp/$addr/$port") 2>/dev/null; then
    die "port $port on $addr is in use (set TXNFS_NFS_PORT to another port)"
  fi
  sed -e "s|@PORT@|$port|g" -e "s|@ADDR@|$addr|g" -e "s|@EXPORT_PATH@|$mnt|g" -e "s|@WORK@|$w|g" \
    "$TXNFS_ROOT/contrib/ganesha.conf" >"$w/ganesha.conf"
  printf 'mount = %s\nlog = %s\n' "$mnt" "$w/bridge.log" >"$w/bridge.conf"
  [[ -z $cluster ]] || printf 'cluster = %s\n' "$cluster" >>"$w/bridge.conf"
  echo "$port" >"$w/port"
  echo "$addr" >"$w/addr"
  rm -f "$w/ganesha.pid"
  TXNFS_BRIDGE_LIB=$BRIDGE_LIB TXNFS_BRIDGE_CONF=$w/bridge.conf \
    setsid "$GANESHA_BIN" -F -f "$w/ganesha.conf" -p "$w/ganesha.pid" -L "$w/ganesha.log" \
    -N NIV_EVENT </dev/null >"$w/ganesha.out" 2>&1 &
  echo $! >"$w/ganesha.pid"
  for i in $(seq 300); do
    (exec 3<>"/dev/tcp/$addr/$port") 2>/dev/null && return 0
    pid_alive "$(cat "$w/ganesha.pid")" || break
    sleep 0.1
  done
  tail -20 "$w/ganesha.log" "$w/ganesha.out" >&2 || true
  die "NFS-Ganesha did not start on $addr:$port (see $w/ganesha.log)"
}

txnfs_stop_ganesha() {  # WORKDIR
  local pid i
  pid=$(cat "$1/ganesha.pid" 2>/dev/null) || return 0
  if pid_alive "$pid"; then
    kill -TERM "$pid"
    for i in $(seq 150); do pid_alive "$pid" || break; sleep 0.1; done
    if pid_alive "$pid"; then kill -KILL "$pid"; sleep 0.2; fi
  fi
  rm -f "$1/ganesha.pid"
}
