# shellcheck shell=bash
# The keras section of scripts/bench.sh: a Keras 3 `.weights.h5` (h5py, as H5IOStore writes
# it: layers/<name>/vars/<i>; no optimizer, so the merged model is the file's whole data)
# and the same file in a `.keras` zip:
# mount cost (libhdf5 in its child), sequential read of MNT/model.safetensors vs `cat` of
# the file.
# Sourced by bench.sh (never run on its own): it defines keras_section (runs the
# measurements, fills globals) and keras_report (prints its tables), with lib.sh's
# helpers and the driver's settings (REPS, WORKDIR, SCRATCH, CKPTFS...) in scope.

c_ckptfs_keras_label() { echo "ckptfs: cat MNT/model.safetensors of the .weights.h5"; }
c_ckptfs_keras_setup() { ckptfs_mount "$KERASFILE" "$SCRATCH/mnt/keras"; }
c_ckptfs_keras_files() { echo "$SCRATCH/mnt/keras/model.safetensors"; }
c_ckptfs_keras_teardown() { unmount_one "$SCRATCH/mnt/keras" || die "could not unmount ckptfs"; }
c_ckptfs_kzip_label() { echo "ckptfs: cat MNT/model.safetensors of the .keras zip"; }
c_ckptfs_kzip_setup() { ckptfs_mount "$KERASZIP" "$SCRATCH/mnt/kzip"; }
c_ckptfs_kzip_files() { echo "$SCRATCH/mnt/kzip/model.safetensors"; }
c_ckptfs_kzip_teardown() { unmount_one "$SCRATCH/mnt/kzip" || die "could not unmount ckptfs"; }
c_cat_keras_label() { echo "cat: the .weights.h5 from disk"; }
c_cat_keras_files() { echo "$KERASFILE"; }
KERASCONTENDERS=(ckptfs_keras ckptfs_kzip cat_keras)
KERASRATIOS=("ckptfs_keras cat_keras cold 0.8" "ckptfs_keras cat_keras warm 0.8"
  "ckptfs_kzip cat_keras cold 0.8" "ckptfs_kzip cat_keras warm 0.8")

keras_note_rss() { if [[ -n $CKPTFS_PID ]]; then KERASRSS=$(proc_kb "$CKPTFS_PID" VmRSS); fi; }

keras_section() {
  local dir=$WORKDIR/keras-model-${KERAS_SIZE} mnt=$SCRATCH/mnt/kerasmount
  if [[ ! -d $dir ]]; then
    rm -rf --one-file-system -- "$dir.tmp"
    log "generating $dir (Keras 3 .weights.h5 and .keras, float32 layers, about $KERAS_SIZE)"
    timeout 3600 "$PY" "$REPO/scripts/make_keras.py" --big "$KERAS_SIZE" "$dir.tmp" \
      >"$SCRATCH/logs/gen-keras.log" 2>&1 ||
      { tail -n 30 "$SCRATCH/logs/gen-keras.log" >&2; die "make_keras.py --big failed"; }
    mv -- "$dir.tmp" "$dir"
    GENERATED+=("$dir")
  fi
  KERASFILE=$dir/big.weights.h5
  KERASZIP=$dir/big.keras
  [[ -f $KERASFILE && -f $KERASZIP ]] || die "no big.weights.h5 / big.keras in $dir"
  KERASBYTES=$(sum_sizes "$KERASFILE")
  KERASMOUNT_COLD=() KERASMOUNT_WARM=()
  log "keras: mount of $KERASFILE, $REPS reps cold + warm"
  mount_rounds "$KERASFILE" "$mnt" KERASMOUNT_COLD KERASMOUNT_WARM keras_note_rss
  log "keras: sequential read, ${#KERASCONTENDERS[@]} contenders x {cold,warm} x $REPS reps"
  read_files "$KERASFILE" "$KERASZIP"
  sample_rounds "cold warm" "${KERASCONTENDERS[@]}"
}
KERAS_SIZE=1G
KERASRSS=''

keras_report() {
  local kc kw
  kc=$(median "${KERASMOUNT_COLD[@]}"); kw=$(median "${KERASMOUNT_WARM[@]}")
  echo
  echo "### keras: a Keras 3 .weights.h5 of $(gib "$KERASBYTES") GiB, and the same in a .keras zip ($KERASFILE)"
  echo
  echo "| what | value | target | result |"
  echo "|---|---:|---|---|"
  echo "| \`ckptfs mount\` of the .weights.h5 until it returns, cold cache (median of $REPS: $(echo "${KERASMOUNT_COLD[*]}" | tr ' ' '/')) | ${kc} s | <= 1 s | $(verdict "$kc" '<=' 1) |"
  echo "| \`ckptfs mount\` until it returns, warm cache (median of $REPS: $(echo "${KERASMOUNT_WARM[*]}" | tr ' ' '/')) | ${kw} s | <= 1 s | $(verdict "$kw" '<=' 1) |"
  [[ -z $KERASRSS ]] || echo "| daemon VmRSS after mount | $(mib $((KERASRSS * 1024))) MiB | - | - |"
  echo
  echo "| ratio | mode | value | target | result |"
  echo "|---|---|---:|---|---|"
  medians "cold warm" "${KERASCONTENDERS[@]}"
  ratio_rows "${KERASRATIOS[@]}"
  echo
  echo "| sequential read | MB | cold MB/s (median) | cold samples | warm MB/s (median) | warm samples |"
  echo "|---|---:|---:|---|---:|---|"
  contender_rows "cold warm" "${KERASCONTENDERS[@]}"
}
