# shellcheck shell=bash
# The tf section of scripts/bench.sh: TensorFlow bundles: mount cost of a 50,000-variable bundle,
# sequential read of MNT/model.safetensors vs cat of the data files.
# Sourced by bench.sh (never run on its own): it defines tf_section (runs the
# measurements, fills globals) and tf_report (prints its tables), with lib.sh's
# helpers and the driver's settings (SIZE, REPS, WORKDIR, SCRATCH, CKPTFS...) in scope.

# tf_gen DIR ARGS...: make_tf_checkpoint.py ARGS into DIR unless it exists.
tf_gen() {
  local dir=$1; shift
  [[ -d $dir ]] && { log "reusing $dir"; return 0; }
  rm -rf --one-file-system -- "$dir.tmp"
  log "generating $dir ($*)"
  timeout 3600 "$PY" "$REPO/scripts/make_tf_checkpoint.py" "$@" "$dir.tmp" \
    >"$SCRATCH/logs/gen-$(basename "$dir").log" 2>&1 ||
    { tail -n 30 "$SCRATCH/logs/gen-$(basename "$dir").log" >&2; die "make_tf_checkpoint.py $* failed"; }
  mv -- "$dir.tmp" "$dir"
  GENERATED+=("$dir")
}

c_ckptfs_tf_label() { echo "ckptfs: cat MNT/model.safetensors of a TF bundle"; }
c_ckptfs_tf_setup() { ckptfs_mount "$TFBIG" "$SCRATCH/mnt/tf"; }
c_ckptfs_tf_files() { echo "$SCRATCH/mnt/tf/model.safetensors"; }
c_ckptfs_tf_teardown() { unmount_one "$SCRATCH/mnt/tf" || die "could not unmount ckptfs"; }
c_cat_tf_label() { echo "cat: the bundle's ${#TF_FILES[@]} data files from disk"; }
c_cat_tf_files() { printf '%s\n' "${TF_FILES[@]}"; }
TFCONTENDERS=(ckptfs_tf cat_tf)
TFRATIOS=("ckptfs_tf cat_tf cold 0.8" "ckptfs_tf cat_tf warm 0.8")

# the daemon's RSS after a mount of the many-variable bundle (mount_rounds' hook)
tf_note_rss() {
  if [[ -n $CKPTFS_PID ]]; then TFRSS=$(proc_kb "$CKPTFS_PID" VmRSS); TFHWM=$(proc_kb "$CKPTFS_PID" VmHWM); fi
}

tf_section() {
  TFMANY=$WORKDIR/tf-many-${TF_VARIABLES}
  TFBIG=$WORKDIR/tf-big-$SIZE
  tf_gen "$TFMANY" many --count "$TF_VARIABLES"
  tf_gen "$TFBIG" big --size "$(size_to_bytes "$SIZE")" --shards 8
  mapfile -t TF_FILES < <(ls -1 "$TFBIG"/ckpt-1.data-* | sort)
  local mnt=$SCRATCH/mnt/tfmany
  TFMOUNT_COLD=() TFMOUNT_WARM=()
  log "tf: mount cost of $TF_VARIABLES variables, $REPS reps cold + warm"
  mount_rounds "$TFMANY" "$mnt" TFMOUNT_COLD TFMOUNT_WARM tf_note_rss
  log "tf: sequential read, ${#TFCONTENDERS[@]} contenders x {cold,warm} x $REPS reps"
  read_files "${TF_FILES[@]}"
  sample_rounds "cold warm" "${TFCONTENDERS[@]}"
}
TF_VARIABLES=50000
TFRSS='' TFHWM=''

tf_report() {
  local tc tw
  tc=$(median "${TFMOUNT_COLD[@]}"); tw=$(median "${TFMOUNT_WARM[@]}")
  echo
  echo "### tf: TensorFlow bundles (scripts/make_tf_checkpoint.py)"
  echo
  echo "| mount of a bundle of $TF_VARIABLES variables ($TFMANY) | value | target | result |"
  echo "|---|---:|---|---|"
  echo "| \`ckptfs mount\` until it returns, cold cache (median of $REPS: $(echo "${TFMOUNT_COLD[*]}" | tr ' ' '/')) | ${tc} s | <= 1 s | $(verdict "$tc" '<=' 1) |"
  echo "| \`ckptfs mount\` until it returns, warm cache (median of $REPS: $(echo "${TFMOUNT_WARM[*]}" | tr ' ' '/')) | ${tw} s | <= 1 s | $(verdict "$tw" '<=' 1) |"
  if [[ -n $TFRSS ]]; then
    echo "| daemon after mount: VmRSS / VmHWM | $(mib $((TFRSS * 1024))) / $(mib $((TFHWM * 1024))) MiB | <= 100 MiB | $(verdict "$(mib $((TFHWM * 1024)))" '<=' 100) |"
  fi
  echo
  echo "| sequential read of $(gib "$(sum_sizes "${TF_FILES[@]}")") GiB F32 ($TFBIG) | MB | cold MB/s (median) | cold samples | warm MB/s (median) | warm samples |"
  echo "|---|---:|---:|---|---:|---|"
  contender_rows "cold warm" "${TFCONTENDERS[@]}"
  echo
  echo "| ratio | mode | value | target | result |"
  echo "|---|---|---:|---|---|"
  ratio_rows "${TFRATIOS[@]}"
}
