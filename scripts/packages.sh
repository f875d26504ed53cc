#!/usr/bin/env bash
# Sourced by setup.sh, test.sh and demo.sh: install Debian packages only when missing.
# Run as `scripts/packages.sh build` it prints the build packages: README's install command
# uses that, so README, the scripts and CI share one list (tests/unit/setup_test.cc checks it
# against CMakeLists.txt's requirements).
# Each script asks for what it needs, so trying ckptfs does not install a test stack.

# The packages building and running ckptfs need.
CKPTFS_BUILD_PACKAGES=(cmake g++ make pkg-config
                       libfuse3-dev fuse3 nlohmann-json3-dev libzstd-dev libxxhash-dev
                       libcli11-dev zlib1g-dev libcurl4-openssl-dev libtinyxml2-dev
                       libsnappy-dev libhdf5-dev)

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# ensure_packages PKG...: apt-get install those of PKG that are not installed.
ensure_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  echo "${0##*/}: installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" </dev/null >/dev/null
}

# ensure_s3rver: s3rver (npm), the S3 server the S3 mount tests run on loopback, kept in a
# fixed place the tests look in; Node and npm from Debian only if npm is missing.
ensure_s3rver() {
  local dir=/opt/ckptfs-s3rver
  [ -x "$dir/node_modules/.bin/s3rver" ] && return 0
  command -v npm >/dev/null || ensure_packages nodejs npm
  echo "${0##*/}: installing s3rver into $dir"
  as_root env CI=true npm_config_yes=true npm install --prefix "$dir" s3rver@3 \
    --no-audit --no-fund --no-update-notifier --loglevel=error </dev/null >/dev/null
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case ${1:-} in
    build) echo "${CKPTFS_BUILD_PACKAGES[*]}" ;;
    *) echo "usage: scripts/packages.sh build   (prints the Debian packages building ckptfs needs)" >&2; exit 2 ;;
  esac
fi
