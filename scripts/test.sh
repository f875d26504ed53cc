#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test (unit and mount).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
ctest --test-dir build --output-on-failure --timeout 900 "$@"
