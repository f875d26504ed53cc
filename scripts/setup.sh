#!/usr/bin/env bash
# Installs the Debian packages building and running ckptfs need (only those missing) and
# builds it. Test-only packages are installed by scripts/test.sh, the demo's by demo.sh.
# Usage: scripts/setup.sh [BUILD_DIR] [extra cmake args...]   (default BUILD_DIR: build)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/packages.sh
ensure_packages "${CKPTFS_BUILD_PACKAGES[@]}"

build_dir=${1:-build}
shift || true
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build_dir" -j2
