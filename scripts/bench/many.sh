# shellcheck shell=bash
# The many section of scripts/bench.sh: loaders that shard a model across processes read
# different tensors of one mount at once. MANY_READERS forked readers
# (scripts/bench/many_read.py; default twice the cores, at most 16) are dealt the tensors
# round-robin and read them with pread: per-tensor files (MNT/tensors/) and ranges of
# MNT/model.safetensors, through a mount of the raw shards and of a `pack --level N` of
# them, against the same readers on the same tensors' ranges of the shards themselves.
# Modes: cached (a fresh mount over backing files in the page cache) and warm (a second
# read). Sourced by bench.sh (never run on its own): it defines many_section and
# many_report, with lib.sh's helpers and the driver's settings in scope.

MANY_READERS=${MANY_READERS:-$(($(nproc) * 2 > 16 ? 16 : $(nproc) * 2))}
many_reader() {
  timeout --kill-after=10 "$READ_TIMEOUT" "$PY" "$REPO/scripts/bench/many_read.py" \
    --readers "$MANY_READERS" "$@"
}

c_many_tensors_label() { echo "ckptfs: the files of MNT/tensors/ (raw shards)"; }
c_many_tensors_setup() { ckptfs_mount "$DATA" "$SCRATCH/mnt/many"; }
c_many_tensors_files() { echo "$SCRATCH/mnt/many/tensors"; }
c_many_tensors_backing() { printf '%s\n' "${SHARD_FILES[@]}"; }
c_many_tensors_read() { many_reader --tensors "$1"; }
c_many_tensors_teardown() { unmount_one "$SCRATCH/mnt/many" || die "could not unmount ckptfs"; }

c_many_ranges_label() { echo "ckptfs: ranges of MNT/model.safetensors (raw shards)"; }
c_many_ranges_setup() { ckptfs_mount "$DATA" "$SCRATCH/mnt/many"; }
c_many_ranges_files() { echo "$SCRATCH/mnt/many/model.safetensors"; }
c_many_ranges_backing() { printf '%s\n' "${SHARD_FILES[@]}"; }
c_many_ranges_read() { many_reader --ranges "$@"; }
c_many_ranges_teardown() { unmount_one "$SCRATCH/mnt/many" || die "could not unmount ckptfs"; }

c_many_ptensors_label() { echo "ckptfs: the files of MNT/tensors/ (pack --level $LEVEL)"; }
c_many_ptensors_setup() { ckptfs_mount "$MZDATA" "$SCRATCH/mnt/manyz"; }
c_many_ptensors_files() { echo "$SCRATCH/mnt/manyz/tensors"; }
c_many_ptensors_backing() { printf '%s\n' "${MZST_FILES[@]}"; }
c_many_ptensors_read() { many_reader --tensors "$1"; }
c_many_ptensors_teardown() { many_note_stats "$SCRATCH/mnt/manyz"; unmount_one "$SCRATCH/mnt/manyz" || die "could not unmount ckptfs"; }

c_many_pranges_label() { echo "ckptfs: ranges of MNT/model.safetensors (pack --level $LEVEL)"; }
c_many_pranges_setup() { ckptfs_mount "$MZDATA" "$SCRATCH/mnt/manyz"; }
c_many_pranges_files() { echo "$SCRATCH/mnt/manyz/model.safetensors"; }
c_many_pranges_backing() { printf '%s\n' "${MZST_FILES[@]}"; }
c_many_pranges_read() { many_reader --ranges "$@"; }
c_many_pranges_teardown() { unmount_one "$SCRATCH/mnt/manyz" || die "could not unmount ckptfs"; }

c_many_shards_label() { echo "the same readers: ranges of the shards from disk"; }
c_many_shards_files() { printf '%s\n' "${SHARD_FILES[@]}"; }
c_many_shards_backing() { printf '%s\n' "${SHARD_FILES[@]}"; }
c_many_shards_read() { many_reader --ranges "$@"; }

# What the packed shards cost to decode with the same parallelism outside the mount:
# MANY_READERS `zstd -d -T1` at once, a shard each.
c_many_zstd_label() {
  local n=${#MZST_FILES[@]}
  echo "zstd -d -T1: the packed shards, $((n < MANY_READERS ? n : MANY_READERS)) at once, to /dev/null"
}
c_many_zstd_files() { printf '%s\n' "${MZST_FILES[@]}"; }
c_many_zstd_backing() { printf '%s\n' "${MZST_FILES[@]}"; }
c_many_zstd_read() {
  local rc=0
  printf '%s\0' "$@" | timeout --kill-after=10 "$READ_TIMEOUT" \
    xargs -0 -n 1 -P "$MANY_READERS" zstd -d -T1 -q -c -- >/dev/null || rc=$?
  ((rc == 124 || rc == 137)) && die "zstd -d timed out after ${READ_TIMEOUT}s"
  ((rc == 0)) || die "zstd -d failed (exit $rc): $*"
  sum_sizes "${SHARD_FILES[@]}"  # decoded bytes, as for the others
}

MANYCONTENDERS=(many_tensors many_ranges many_ptensors many_pranges many_shards many_zstd)
# The issue's target (28): N readers through one mount >= 0.8x the same N on the stored
# files, raw and packed.
MANYRATIOS=(
  "many_tensors many_shards cached 0.8" "many_ranges many_shards cached 0.8"
  "many_ptensors many_shards cached 0.8" "many_pranges many_shards cached 0.8"
  "many_tensors many_shards warm 0.8" "many_ranges many_shards warm 0.8"
  "many_ptensors many_shards warm 0.8" "many_pranges many_shards warm 0.8"
  "many_ptensors many_zstd cached -" "many_pranges many_zstd cached -"
)

# The packed mount's account of the last per-tensor read (stats.json "views"): bytes
# served, decoded and read compressed, to show the readers cost no amplification.
many_note_stats() {
  local s
  s=$(timeout 30 "$PY" -c 'import json, sys
v = json.load(open(sys.argv[1] + "/.ckptfs/stats.json"))["views"]["tensors"]
print(v["bytes_served"], v["bytes_decoded"], v["compressed_bytes_read"])' "$1" 2>/dev/null) || return 0
  MANYSTATS=$s
}
MANYSTATS=''

many_section() {
  packed_data
  log "many: $MANY_READERS readers; ${#MANYCONTENDERS[@]} contenders x {cached,warm} x $REPS reps"
  sample_rounds "cached warm" "${MANYCONTENDERS[@]}"
}

many_report() {
  echo
  echo "### many: $MANY_READERS readers of different tensors at once, through one mount vs the $SHARDS shards ($(gib "$(sum_sizes "${SHARD_FILES[@]}")") GiB, $DATA)"
  echo
  echo "| ratio | mode | value | target | result |"
  echo "|---|---|---:|---|---|"
  medians "cached warm" "${MANYCONTENDERS[@]}"
  ratio_rows "${MANYRATIOS[@]}"
  echo
  echo "| readers | MB | cached MB/s (median) | cached samples | backing % resident | warm MB/s (median) | warm samples |"
  echo "|---|---:|---:|---|---|---:|---|"
  contender_rows "cached warm" "${MANYCONTENDERS[@]}"
  if [[ -n $MANYSTATS ]]; then
    local served decoded compressed
    read -r served decoded compressed <<<"$MANYSTATS"
    echo
    echo "The packed mount's account of its last per-tensor read (stats.json \`views.tensors\`): $served bytes served, $decoded decoded, $compressed compressed bytes read."
  fi
}
