#!/usr/bin/env bash
# Installs the Debian packages ckptfs needs (only when some are missing) and builds it.
# Usage: scripts/setup.sh [BUILD_DIR] [extra cmake args...]   (default BUILD_DIR: build)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake g++ make pkg-config clang-format
          libfuse3-dev fuse3 nlohmann-json3-dev libzstd-dev zstd libxxhash-dev libcli11-dev zlib1g-dev
          libcurl4-openssl-dev libtinyxml2-dev nginx-light
          libgtest-dev googletest python3-numpy python3-zstandard python3-torch rsync)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# s3rver (npm), the S3 server the S3 mount tests run on loopback; Node and npm from Debian
# only if npm is missing. Kept in a fixed place the tests look in; skipped once there.
s3rver_dir=/opt/ckptfs-s3rver
if [ ! -x "$s3rver_dir/node_modules/.bin/s3rver" ]; then
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  if ! command -v npm >/dev/null; then
    echo "setup: installing nodejs npm"
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  fi
  echo "setup: installing s3rver into $s3rver_dir"
  "${sudo_cmd[@]}" env CI=true npm_config_yes=true npm install --prefix "$s3rver_dir" s3rver@3 \
    --no-audit --no-fund --no-update-notifier --loglevel=error </dev/null >/dev/null
fi

build_dir=${1:-build}
shift || true
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build_dir" -j2
