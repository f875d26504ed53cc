# shellcheck shell=bash
# The deepspeed section of scripts/bench.sh: a ZeRO-3 checkpoint over 4 ranks: mount cost,
# consolidated sequential read vs cat of the rank files.
# Sourced by bench.sh (never run on its own): it defines deepspeed_section (runs the
# measurements, fills globals) and deepspeed_report (prints its tables), with lib.sh's
# helpers and the driver's settings (SIZE, REPS, WORKDIR, SCRATCH, CKPTFS...) in scope.

c_ckptfs_ds_label() { echo "ckptfs: cat MNT/model.safetensors (consolidated from ${#DS_FILES[@]} ranks)"; }
c_ckptfs_ds_setup() { ckptfs_mount "$DSTAG" "$SCRATCH/mnt/ds"; }
c_ckptfs_ds_files() { echo "$SCRATCH/mnt/ds/model.safetensors"; }
c_ckptfs_ds_teardown() { unmount_one "$SCRATCH/mnt/ds" || die "could not unmount ckptfs"; }
c_cat_ds_label() { echo "cat: the ${#DS_FILES[@]} optimizer rank files from disk"; }
c_cat_ds_files() { printf '%s\n' "${DS_FILES[@]}"; }
DSCONTENDERS=(ckptfs_ds cat_ds)
DSRATIOS=("ckptfs_ds cat_ds cold 0.8" "ckptfs_ds cat_ds warm 0.8")

# the daemon's RSS after a mount of the tag dir (mount_rounds' hook)
ds_note_rss() { if [[ -n $CKPTFS_PID ]]; then DSRSS=$(proc_kb "$CKPTFS_PID" VmRSS); fi; }

deepspeed_section() {
  local dir=$WORKDIR/ds-zero3-${DS_SIZE_MB}m mnt=$SCRATCH/mnt/dsmount
  if [[ ! -d $dir ]]; then
    rm -rf --one-file-system -- "$dir.tmp"
    log "generating $dir (ZeRO-3, 4 ranks, about ${DS_SIZE_MB} MiB of rank files)"
    timeout 3600 "$PY" "$REPO/tests/deepspeed/make_deepspeed_checkpoint.py" "$dir.tmp" \
      --stage 3 --ranks 4 --dtype bf16 --size-mb "$DS_SIZE_MB" --no-expected \
      >"$SCRATCH/logs/gen-ds.log" 2>&1 ||
      { tail -n 30 "$SCRATCH/logs/gen-ds.log" >&2; die "make_deepspeed_checkpoint.py failed"; }
    mv -- "$dir.tmp" "$dir"
    GENERATED+=("$dir")
  fi
  DSTAG=$dir/$(cat "$dir/latest")
  mapfile -t DS_FILES < <(ls -1 "$DSTAG"/*optim_states.pt | sort)
  DSBYTES=$(du -cb "$DSTAG" | tail -n 1 | cut -f1)
  DSMOUNT_COLD=() DSMOUNT_WARM=()
  log "deepspeed: mount of $DSTAG, $REPS reps cold + warm"
  mount_rounds "$DSTAG" "$mnt" DSMOUNT_COLD DSMOUNT_WARM ds_note_rss
  log "deepspeed: sequential read, ${#DSCONTENDERS[@]} contenders x {cold,warm} x $REPS reps"
  read_files "${DS_FILES[@]}"
  sample_rounds "cold warm" "${DSCONTENDERS[@]}"
}
DS_SIZE_MB=2048
DSRSS=''

deepspeed_report() {
  local dc dw
  dc=$(median "${DSMOUNT_COLD[@]}"); dw=$(median "${DSMOUNT_WARM[@]}")
  echo
  echo "### deepspeed: a ZeRO-3 checkpoint over 4 ranks, $(gib "$DSBYTES") GiB of rank files ($DSTAG)"
  echo
  echo "| what | value | target | result |"
  echo "|---|---:|---|---|"
  echo "| \`ckptfs mount\` of the tag dir until it returns, cold cache (median of $REPS: $(echo "${DSMOUNT_COLD[*]}" | tr ' ' '/')) | ${dc} s | <= 1 s | $(verdict "$dc" '<=' 1) |"
  echo "| \`ckptfs mount\` until it returns, warm cache (median of $REPS: $(echo "${DSMOUNT_WARM[*]}" | tr ' ' '/')) | ${dw} s | <= 1 s | $(verdict "$dw" '<=' 1) |"
  [[ -z $DSRSS ]] || echo "| daemon VmRSS after mount | $(mib $((DSRSS * 1024))) MiB | - | - |"
  echo
  echo "| sequential read | MB | cold MB/s (median) | cold samples | warm MB/s (median) | warm samples |"
  echo "|---|---:|---:|---|---:|---|"
  contender_rows "cold warm" "${DSCONTENDERS[@]}"
  echo
  echo "| ratio | mode | value | target | result |"
  echo "|---|---|---:|---|---|"
  ratio_rows "${DSRATIOS[@]}"
}
