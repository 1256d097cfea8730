# shellcheck shell=bash disable=SC2034
# Helpers sourced by scripts/up, scripts/down and scripts/test. Needs root (apt, mount).
set -euo pipefail

TXNFS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TXNFS=$TXNFS_ROOT/build/src/txnfuse/txnfs
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"   # where `cargo install` puts pjdfstest

TXNFS_PACKAGES=(build-essential meson ninja-build pkgconf libfuse3-dev fuse3 libsqlite3-dev
                sqlite3 uuid-dev catch2 libcli11-dev libfmt-dev libspdlog-dev nlohmann-json3-dev
                xfsprogs attr acl python3 python3-pytest fio)

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

txnfs_build() {
  cd "$TXNFS_ROOT"
  [[ -f build/build.ninja ]] || meson setup build
  [[ ${CI:-} != true ]] || meson configure build -Dwerror=true
  ninja -C build
}

# True while the process exists and is not a zombie (PID 1 of a container may not reap).
pid_alive() {
  local st
  st=$(cut -d')' -f2 "/proc/$1/stat" 2>/dev/null | awk '{print $1}') || return 1
  [[ -n $st && $st != Z && $st != X ]]
}
