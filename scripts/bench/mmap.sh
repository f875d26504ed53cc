# shellcheck shell=bash
# The mmap section of scripts/bench.sh: the path loaders use (safetensors, torch.load with
# mmap, numpy): map the file, fault every page in, copy it out (scripts/bench/mmap_read.py),
# through the mount (raw shards and a `pack --level N` of them) vs the shards themselves,
# next to `cat` of each for the single sequential reader. Modes: cached (a fresh mount over
# backing files in the page cache: the mount's own cache empty, as after a restart of an
# inference server), warm (a second read: the mount's page cache), cold (drop_caches).
# Sourced by bench.sh (never run on its own): it defines mmap_section (runs the
# measurements, fills globals) and mmap_report (prints its tables), with lib.sh's helpers
# and the driver's settings (DATA, SHARD_FILES, REPS, WORKDIR, SCRATCH, CKPTFS...) in scope.

mmap_reader() { timeout --kill-after=10 "$READ_TIMEOUT" "$PY" "$REPO/scripts/bench/mmap_read.py" "$@"; }

c_mmap_merged_label() { echo "ckptfs: mmap MNT/model.safetensors (raw shards)"; }
c_mmap_merged_setup() { ckptfs_mount "$DATA" "$SCRATCH/mnt/mmap"; }
c_mmap_merged_files() { echo "$SCRATCH/mnt/mmap/model.safetensors"; }
c_mmap_merged_backing() { printf '%s\n' "${SHARD_FILES[@]}"; }
c_mmap_merged_read() { mmap_reader "$@"; }
c_mmap_merged_teardown() { mmap_note_stats "$SCRATCH/mnt/mmap"; unmount_one "$SCRATCH/mnt/mmap" || die "could not unmount ckptfs"; }

c_mmap_packed_label() { echo "ckptfs: mmap MNT/model.safetensors (pack --level $LEVEL)"; }
c_mmap_packed_setup() { ckptfs_mount "$MZDATA" "$SCRATCH/mnt/mmapz"; }
c_mmap_packed_files() { echo "$SCRATCH/mnt/mmapz/model.safetensors"; }
c_mmap_packed_backing() { printf '%s\n' "${MZST_FILES[@]}"; }
c_mmap_packed_read() { mmap_reader "$@"; }
c_mmap_packed_teardown() { unmount_one "$SCRATCH/mnt/mmapz" || die "could not unmount ckptfs"; }

c_mmap_shards_label() { echo "mmap: the shards from disk"; }
c_mmap_shards_files() { printf '%s\n' "${SHARD_FILES[@]}"; }
c_mmap_shards_backing() { printf '%s\n' "${SHARD_FILES[@]}"; }
c_mmap_shards_read() { mmap_reader "$@"; }

c_cat_merged_label() { echo "ckptfs: cat MNT/model.safetensors (raw shards)"; }
c_cat_merged_setup() { ckptfs_mount "$DATA" "$SCRATCH/mnt/mcat"; }
c_cat_merged_files() { echo "$SCRATCH/mnt/mcat/model.safetensors"; }
c_cat_merged_backing() { printf '%s\n' "${SHARD_FILES[@]}"; }
c_cat_merged_teardown() { unmount_one "$SCRATCH/mnt/mcat" || die "could not unmount ckptfs"; }

c_cat_mshards_label() { echo "cat: the shards from disk"; }
c_cat_mshards_files() { printf '%s\n' "${SHARD_FILES[@]}"; }
c_cat_mshards_backing() { printf '%s\n' "${SHARD_FILES[@]}"; }

MMAPCONTENDERS=(mmap_merged mmap_packed mmap_shards cat_merged cat_mshards)
# The issue's targets (28): a loader's load through the mount >= 0.9x on the shards; a
# single sequential reader of a fresh mount >= 0.7x cat, a second read >= 0.9x.
MMAPRATIOS=(
  "mmap_merged mmap_shards cached 0.9" "mmap_packed mmap_shards cached 0.9"
  "mmap_merged mmap_shards warm 0.9" "mmap_packed mmap_shards warm 0.9"
  "cat_merged cat_mshards cached 0.7" "cat_merged cat_mshards warm 0.9"
  "mmap_merged mmap_shards cold -"
)

# The daemon's own account of the last cached raw mmap read (stats.json "requests"): how
# much of the wall time it was busy. Cached only: a cold read's time is the disk's. `mode`
# is run_sample's, which calls the teardown.
mmap_note_stats() {
  local s
  [[ ${mode:-} == cached ]] || return 0
  s=$(timeout 30 "$PY" -c 'import json, sys
r = json.load(open(sys.argv[1] + "/.ckptfs/stats.json"))["requests"]
print("%d %s %.3f %.3f %d %d %d" % (sum(r["by_size"].values()), r["by_size"]["1M"],
      r["gather_seconds"], r["reply_seconds"], r["bytes_copied"], r["bytes_lent"],
      r["bytes_by_descriptor"]))' "$1" 2>/dev/null) || return 0
  MMAPSTATS=$s
}

# The packed copy of DATA the mmap and gpu sections read (the zstd section's, when it ran):
# MZDATA and its shards, MZST_FILES.
packed_data() {
  local f
  MZDATA=$WORKDIR/bench-bf16-${SIZE}-${SHARDS}shards-zst-L$LEVEL${FRAME:+-F$FRAME}
  pack_data "$DATA" "$MZDATA"
  MZST_FILES=()
  for f in "${SHARD_FILES[@]}"; do
    [[ -f $MZDATA/${f##*/}.zst ]] || die "$MZDATA/${f##*/}.zst missing: not packed as expected"
    MZST_FILES+=("$MZDATA/${f##*/}.zst")
  done
}

mmap_section() {
  packed_data
  log "mmap: ${#MMAPCONTENDERS[@]} contenders x {cached,warm,cold} x $REPS reps"
  sample_rounds "cached warm cold" "${MMAPCONTENDERS[@]}"
}
MMAPSTATS=''

mmap_report() {
  echo
  echo "### mmap: map, fault in and copy out MNT/model.safetensors vs the $SHARDS shards ($(gib "$(sum_sizes "${SHARD_FILES[@]}")") GiB, $DATA)"
  echo
  echo "| ratio | mode | value | target | result |"
  echo "|---|---|---:|---|---|"
  medians "cached warm cold" "${MMAPCONTENDERS[@]}"
  ratio_rows "${MMAPRATIOS[@]}"
  echo
  echo "| reader | MB | cached MB/s (median) | cached samples | backing % resident | warm MB/s (median) | warm samples | cold MB/s (median) | cold samples |"
  echo "|---|---:|---:|---|---|---:|---|---:|---|"
  contender_rows "cached warm cold" "${MMAPCONTENDERS[@]}"
  if [[ -n $MMAPSTATS ]]; then
    local n big gather reply copied lent fd
    read -r n big gather reply copied lent fd <<<"$MMAPSTATS"
    echo
    echo "The daemon's account of the last cached raw mmap read (stats.json \`requests\`): $n read requests ($big of 1 MiB), ${gather} s gathering and ${reply} s replying; bytes copied $copied, lent $lent, by descriptor $fd."
  fi
}
