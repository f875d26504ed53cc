#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test.
#   1. the concurrency tests of the caches and prefetcher under ThreadSanitizer
#      (a separate build in build-tsan; skip with CKPTFS_SKIP_TSAN=1);
#   2. the five longest files and functions of core/ and fs/ (scripts/rooms.py);
#   3. everything (unit, fuzz-corpus replay, mount tests with real clients) through
#      ctest, whose closing line gives the counts.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/packages.sh
# GoogleTest, the clients the mount tests drive (numpy, torch, zstandard, unzip, rsync,
# man to render the man page, zsh for its completion)
# and their servers (nginx, s3rver).
ensure_packages "${CKPTFS_BUILD_PACKAGES[@]}" libgtest-dev googletest \
  python3-numpy python3-h5py python3-zstandard python3-torch nginx-light curl zstd unzip rsync man-db zsh
ensure_s3rver
# Warnings are errors here: a fresh build prints none, and CI keeps it so.
scripts/setup.sh build -DCKPTFS_BUILD_TESTS=ON -DCKPTFS_WERROR=ON

# Release (-O3) warns where -O2 does not (GCC 12's -Wrestrict): the binary builds clean there too.
if [ "${CKPTFS_SKIP_RELEASE:-0}" != 1 ]; then
  echo "test: Release build of the binary with -Werror (build-release)"
  cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DCKPTFS_WERROR=ON \
    -DCKPTFS_BUILD_TESTS=OFF >/dev/null
  cmake --build build-release -j2 --target ckptfs >/dev/null
fi

if [ "${CKPTFS_SKIP_TSAN:-0}" != 1 ]; then
  echo "test: ThreadSanitizer build of the unit tests (build-tsan)"
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPTFS_TSAN=ON \
    -DCKPTFS_BUILD_TESTS=ON >/dev/null
  cmake --build build-tsan -j2 --target unit_tests >/dev/null
  TSAN_OPTIONS="halt_on_error=1" build-tsan/tests/unit/unit_tests \
    --gtest_filter='BlockCache*:CachedBlocks*:VolumeRead*:RemoteSource*:ThreadPool*:Readahead*:ZstdSource*:LayoutFaults*:DiskCache*:RunTree*' --gtest_brief=1
fi

# The house's rooms (no file over 800 lines, no function over 120): the longest, so that
# growth is seen in the log when it happens. Informational; never fails the run.
/usr/bin/python3 scripts/rooms.py || true

ctest --test-dir build --output-on-failure --no-tests=error --timeout 900 "$@"
