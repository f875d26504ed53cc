# shellcheck shell=bash
# The gpu section of scripts/bench.sh: safetensors.torch.load_file(..., device="cuda") of
# MNT/model.safetensors (raw shards and a `pack --level N` of them) vs of the shards
# themselves (scripts/bench/gpu_load.py), cached (a fresh mount over page-cached backing
# files) and warm (the untimed reads before the timed load are `cat`s, c_ID_prime: the
# page cache fills alike without starting CUDA twice more per sample). It runs where
# torch.cuda.is_available() and safetensors imports, and reports why it was skipped
# otherwise, so one script measures a GPU machine and this one.
# Sourced by bench.sh (never run on its own): it defines gpu_section and gpu_report, with
# lib.sh's helpers and the mmap section's packed_data (MZDATA, MZST_FILES) in scope.

gpu_loader() { timeout --kill-after=10 "$READ_TIMEOUT" "$PY" "$REPO/scripts/bench/gpu_load.py" "$@"; }

c_gpu_merged_label() { echo "ckptfs: load_file(MNT/model.safetensors, device=cuda) (raw shards)"; }
c_gpu_merged_setup() { ckptfs_mount "$DATA" "$SCRATCH/mnt/gpu"; }
c_gpu_merged_files() { echo "$SCRATCH/mnt/gpu/model.safetensors"; }
c_gpu_merged_backing() { printf '%s\n' "${SHARD_FILES[@]}"; }
c_gpu_merged_read() { gpu_loader "$@"; }
c_gpu_merged_prime() { read_files "$@"; }
c_gpu_merged_teardown() { unmount_one "$SCRATCH/mnt/gpu" || die "could not unmount ckptfs"; }

c_gpu_packed_label() { echo "ckptfs: load_file(MNT/model.safetensors, device=cuda) (pack --level $LEVEL)"; }
c_gpu_packed_setup() { ckptfs_mount "$MZDATA" "$SCRATCH/mnt/gpuz"; }
c_gpu_packed_files() { echo "$SCRATCH/mnt/gpuz/model.safetensors"; }
c_gpu_packed_backing() { printf '%s\n' "${MZST_FILES[@]}"; }
c_gpu_packed_read() { gpu_loader "$@"; }
c_gpu_packed_prime() { read_files "$@"; }
c_gpu_packed_teardown() { unmount_one "$SCRATCH/mnt/gpuz" || die "could not unmount ckptfs"; }

c_gpu_shards_label() { echo "load_file(each shard, device=cuda)"; }
c_gpu_shards_files() { printf '%s\n' "${SHARD_FILES[@]}"; }
c_gpu_shards_backing() { printf '%s\n' "${SHARD_FILES[@]}"; }
c_gpu_shards_read() { gpu_loader "$@"; }
c_gpu_shards_prime() { read_files "$@"; }

GPUCONTENDERS=(gpu_merged gpu_packed gpu_shards)
GPURATIOS=("gpu_merged gpu_shards cached 0.9" "gpu_packed gpu_shards cached 0.9"
  "gpu_merged gpu_shards warm 0.9" "gpu_packed gpu_shards warm 0.9")
GPUSKIP=''

gpu_section() {
  local device
  if ! device=$("$PY" -c 'import torch; assert torch.cuda.is_available(); print(torch.cuda.get_device_name(0))' 2>/dev/null); then
    GPUSKIP="torch.cuda.is_available() is False here (or torch is missing)"
    log "gpu: skipped: $GPUSKIP"
    return 0
  fi
  if ! "$PY" -c 'import safetensors.torch' 2>/dev/null; then
    GPUSKIP="safetensors is not installed for $PY"
    log "gpu: skipped: $GPUSKIP"
    return 0
  fi
  GPUDEVICE=$device
  packed_data
  log "gpu: ${#GPUCONTENDERS[@]} contenders x {cached,warm} x $REPS reps on $GPUDEVICE"
  sample_rounds "cached warm" "${GPUCONTENDERS[@]}"
}
GPUDEVICE=''

gpu_report() {
  echo
  if [[ -n $GPUSKIP ]]; then
    echo "### gpu: skipped ($GPUSKIP)"
    return 0
  fi
  echo "### gpu: safetensors load_file(..., device=\"cuda\") on $GPUDEVICE, $(gib "$(sum_sizes "${SHARD_FILES[@]}")") GiB in $SHARDS shards ($DATA)"
  echo
  echo "| ratio | mode | value | target | result |"
  echo "|---|---|---:|---|---|"
  medians "cached warm" "${GPUCONTENDERS[@]}"
  ratio_rows "${GPURATIOS[@]}"
  echo
  echo "| loader | MB | cached MB/s (median) | cached samples | backing % resident | warm MB/s (median) | warm samples |"
  echo "|---|---:|---:|---|---|---:|---|"
  contender_rows "cached warm" "${GPUCONTENDERS[@]}"
}
