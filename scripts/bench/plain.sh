# shellcheck shell=bash
# The plain section of scripts/bench.sh: sequential read of MNT/model.safetensors vs cat of the
# shards vs libfuse's passthrough_ll, cold and warm.
# Sourced by bench.sh (never run on its own): it defines plain_section (runs the
# measurements, fills globals) and plain_report (prints its tables), with lib.sh's
# helpers and the driver's settings (SIZE, REPS, WORKDIR, SCRATCH, CKPTFS...) in scope.

# -------------------------------------------------------------- contenders
# Each: label, files (to read), optional prepare/setup/teardown/read.
CONTENDERS=(ckptfs_merged cat_shards ptll_shards)

c_ckptfs_merged_label() { echo "ckptfs: cat MNT/model.safetensors"; }
c_ckptfs_merged_setup() { ckptfs_mount "$DATA" "$SCRATCH/mnt/ckptfs"; }
c_ckptfs_merged_files() { echo "$SCRATCH/mnt/ckptfs/model.safetensors"; }
c_ckptfs_merged_teardown() { unmount_one "$SCRATCH/mnt/ckptfs" || die "could not unmount ckptfs"; }

c_cat_shards_label() { echo "cat: $SHARDS shards from disk"; }
c_cat_shards_files() { printf '%s\n' "${SHARD_FILES[@]}"; }

c_ptll_shards_label() { echo "passthrough_ll: cat $SHARDS shards"; }
c_ptll_shards_setup() { ptll_mount "$DATA" "$SCRATCH/mnt/ptll"; }
c_ptll_shards_files() { local f; for f in "${SHARD_FILES[@]}"; do echo "$SCRATCH/mnt/ptll/${f##*/}"; done; }
c_ptll_shards_teardown() { unmount_one "$SCRATCH/mnt/ptll" || die "could not unmount passthrough_ll"; }

# Ratio rows: "NUM DEN MODE TARGET" (TARGET '-' = reported, no target)
RATIOS=(
  "ckptfs_merged ptll_shards cold 1.0"
  "ckptfs_merged ptll_shards warm 1.0"
  "ckptfs_merged cat_shards cold -"
  "ckptfs_merged cat_shards warm 0.8"
)


# plain_section: the throughput samples (the data, DATA and SHARD_FILES, is the driver's).
plain_section() {
  local id
  for id in "${CONTENDERS[@]}"; do
    if has_fn "c_${id}_prepare"; then "c_${id}_prepare"; fi
  done

  # Under a VM the guest's drop_caches does not empty the host's cache: the
  # first reader of freshly written data pays for it. One untimed pass over the
  # data first, so every contender starts from the same host state.
  log "warm-up: one untimed read of the shards"
  read_files "${SHARD_FILES[@]}"

  log "throughput: ${#CONTENDERS[@]} contenders x {cold,warm} x $REPS reps, interleaved"
  sample_rounds "cold warm" "${CONTENDERS[@]}"
}

plain_report() {
  echo "- passthrough_ll: libfuse $(pkg-config --modversion fuse3) example, defaults" \
       "(multithreaded loop, cache=auto: timeout=1s and no keep_cache, no splice); run with -f only to own its pid"
  echo
  echo "| contender | MB | cold MB/s (median) | cold samples | warm MB/s (median) | warm samples |"
  echo "|---|---:|---:|---|---:|---|"
  contender_rows "cold warm" "${CONTENDERS[@]}"
  echo
  echo "| ratio | mode | value | target | result |"
  echo "|---|---|---:|---|---|"
  ratio_rows "${RATIOS[@]}"
}
