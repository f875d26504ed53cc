#!/bin/bash
# Per-tensor memory and mount time of ckptfs over a checkpoint of many tiny tensors.
#
#   scripts/tensor_overhead.sh [--ckptfs BIN] [--tensors N] [--shards S] [--ls] [--keep] [WORKDIR]
#
# Generates (once, kept in WORKDIR) a `make_checkpoint.py --kind headers` checkpoint of N
# tensors of a few bytes in S shards, so every byte the daemon holds is metadata, then:
#   mount      seconds until `ckptfs mount` returns (the mount answers)
#   rss mount  daemon VmRSS right after the mount
#   rss bin    after `cat pytorch_model.bin > /dev/null` (its lazily made zip headers)
#   rss ls     with --ls, after `ls -R tensors | wc -l` (every directory listed once; minutes
#              at 1M tensors, the kernel's lookups dominate)
# and each RSS divided by N: the bytes per tensor the README quotes. Defaults: 1000000
# tensors in 4 shards. The data bytes (4 MiB at 1M) are not in RSS: reads go through the
# page cache or splice, never the daemon's heap, for a plain local source.
set -euo pipefail

CKPTFS=$(dirname "$0")/../build/fs/ckptfs
TENSORS=1000000
SHARDS=4
KEEP=0
LS=0
WORKDIR=/var/tmp/ckptfs-tensor-overhead
while [ $# -gt 0 ]; do
  case "$1" in
    --ckptfs) CKPTFS=$2; shift 2 ;;
    --tensors) TENSORS=$2; shift 2 ;;
    --shards) SHARDS=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --ls) LS=1; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) WORKDIR=$1; shift ;;
  esac
done

SRC=$WORKDIR/headers-${SHARDS}shards-${TENSORS}tensors
MNT=$WORKDIR/mnt
mkdir -p "$WORKDIR" "$MNT"
if [ ! -f "$SRC/config.json" ]; then
  rm -rf "$SRC"
  /usr/bin/python3 "$(dirname "$0")/make_checkpoint.py" "$SRC" --kind headers \
    --shards "$SHARDS" --tensors "$TENSORS"
fi

mountpoint -q "$MNT" && fusermount3 -u "$MNT"
trap 'mountpoint -q "$MNT" && fusermount3 -u "$MNT"' EXIT

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
report() {  # label KiB
  printf '%-10s %8d KiB  %6d B/tensor\n' "$1" "$2" $(($2 * 1024 / TENSORS))
}

start=$(date +%s.%N)
"$CKPTFS" mount "$SRC" "$MNT"
end=$(date +%s.%N)
printf 'mount      %8.2f s\n' "$(echo "$end - $start" | bc)"
PID=$(pgrep -n -f -- " mount $SRC $MNT")
report "rss mount" "$(rss_kib "$PID")"
cat "$MNT/pytorch_model.bin" >/dev/null
report "rss bin" "$(rss_kib "$PID")"
if [ "$LS" = 1 ]; then
  echo "ls -R     $(ls -R "$MNT/tensors" | wc -l) lines"
  report "rss ls" "$(rss_kib "$PID")"
fi
if [ "$KEEP" = 1 ]; then
  trap - EXIT
  echo "mounted at $MNT (pid $PID)"
fi
