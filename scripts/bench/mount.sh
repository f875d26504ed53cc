# shellcheck shell=bash
# The mount section of scripts/bench.sh: mount cost of a headers-only checkpoint (time until
# `ckptfs mount` returns, daemon RSS after mount and after `ls -R MNT/tensors`).
# Sourced by bench.sh (never run on its own): it defines mount_section (runs the
# measurements, fills globals) and mount_report (prints its tables), with lib.sh's
# helpers and the driver's settings (SIZE, REPS, WORKDIR, SCRATCH, CKPTFS...) in scope.

mount_section() {
  HDR=$WORKDIR/headers-${HDR_SHARDS}shards-${HDR_TENSORS}tensors
  gen_data "$HDR" --kind headers --shards "$HDR_SHARDS" --tensors "$HDR_TENSORS"
  HMNT=$SCRATCH/mnt/headers
  MOUNT_COLD=() MOUNT_WARM=()
  log "mount cost: $HDR_TENSORS tensors in $HDR_SHARDS shards, $REPS reps cold + warm"
  for ((r = 1; r <= REPS; r++)); do
    for mode in cold warm; do
      [[ $mode == cold ]] && drop_caches
      t0=$(now_ns); ckptfs_mount "$HDR" "$HMNT"; t1=$(now_ns)
      s=$(elapsed "$t0" "$t1")
      if [[ $mode == cold ]]; then MOUNT_COLD+=("$s"); else MOUNT_WARM+=("$s"); fi
      log "  $mode mount: ${s}s"
      unmount_one "$HMNT" || die "could not unmount $HMNT"
    done
  done

  drop_caches
  ckptfs_mount "$HDR" "$HMNT"
  HPID=$CKPTFS_PID
  RSS_MOUNT='' HWM_MOUNT='' RSS_LS='' HWM_LS='' LS_LINES='' LS_SECS=''
  if [[ -n $HPID ]]; then RSS_MOUNT=$(proc_kb "$HPID" VmRSS); HWM_MOUNT=$(proc_kb "$HPID" VmHWM); fi
  t0=$(now_ns)
  LS_LINES=$(set -o pipefail; timeout "$READ_TIMEOUT" ls -R "$HMNT/tensors" | wc -l) ||
    die "ls -R $HMNT/tensors failed or timed out"
  LS_SECS=$(elapsed "$t0" "$(now_ns)")
  if [[ -n $HPID ]]; then RSS_LS=$(proc_kb "$HPID" VmRSS); HWM_LS=$(proc_kb "$HPID" VmHWM); fi
  unmount_one "$HMNT" || die "could not unmount $HMNT"
}

mount_report() {
  echo
  local mc mw
  mc=$(median "${MOUNT_COLD[@]}"); mw=$(median "${MOUNT_WARM[@]}")
  echo "| mount cost ($HDR_TENSORS tensors, $HDR_SHARDS shards) | value | target | result |"
  echo "|---|---:|---|---|"
  echo "| \`ckptfs mount\` until it returns, cold cache (median of $REPS: $(echo "${MOUNT_COLD[*]}" | tr ' ' '/')) | ${mc} s | <= 2 s | $(verdict "$mc" '<=' 2) |"
  echo "| \`ckptfs mount\` until it returns, warm cache (median of $REPS: $(echo "${MOUNT_WARM[*]}" | tr ' ' '/')) | ${mw} s | <= 2 s | $(verdict "$mw" '<=' 2) |"
  if [[ -n $HPID ]]; then
    echo "| daemon after mount: VmRSS / VmHWM | $(mib $((RSS_MOUNT * 1024))) / $(mib $((HWM_MOUNT * 1024))) MiB | <= 300 MiB | $(verdict "$(mib $((HWM_MOUNT * 1024)))" '<=' 300) |"
    echo "| daemon after \`ls -R tensors\` ($LS_LINES lines, ${LS_SECS} s): VmRSS / VmHWM | $(mib $((RSS_LS * 1024))) / $(mib $((HWM_LS * 1024))) MiB | <= 300 MiB | $(verdict "$(mib $((HWM_LS * 1024)))" '<=' 300) |"
  else
    echo "| daemon RSS | daemon pid not found | <= 300 MiB | n/a |"
  fi
}
