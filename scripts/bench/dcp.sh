# shellcheck shell=bash
# The dcp section of scripts/bench.sh: a torch.distributed.checkpoint (DCP) directory over 4
# ranks: mount cost, consolidated sequential read vs cat of the .distcp files.
# Sourced by bench.sh (never run on its own): it defines dcp_section (runs the
# measurements, fills globals) and dcp_report (prints its tables), with lib.sh's
# helpers and the driver's settings (REPS, WORKDIR, SCRATCH, CKPTFS...) in scope.

c_ckptfs_dcp_label() { echo "ckptfs: cat MNT/model.safetensors (consolidated from ${#DCP_FILES[@]} ranks)"; }
c_ckptfs_dcp_setup() { ckptfs_mount "$DCPDIR" "$SCRATCH/mnt/dcp"; }
c_ckptfs_dcp_files() { echo "$SCRATCH/mnt/dcp/model.safetensors"; }
c_ckptfs_dcp_teardown() { unmount_one "$SCRATCH/mnt/dcp" || die "could not unmount ckptfs"; }
c_cat_dcp_label() { echo "cat: the ${#DCP_FILES[@]} .distcp files from disk"; }
c_cat_dcp_files() { printf '%s\n' "${DCP_FILES[@]}"; }
DCPCONTENDERS=(ckptfs_dcp cat_dcp)
DCPRATIOS=("ckptfs_dcp cat_dcp cold 0.8" "ckptfs_dcp cat_dcp warm 0.8")

# the daemon's RSS after a mount of the DCP dir (mount_rounds' hook)
dcp_note_rss() { if [[ -n $CKPTFS_PID ]]; then DCPRSS=$(proc_kb "$CKPTFS_PID" VmRSS); fi; }

dcp_section() {
  local dir=$WORKDIR/dcp-big-${DCP_SIZE}-4ranks mnt=$SCRATCH/mnt/dcpmount
  if [[ ! -d $dir ]]; then
    rm -rf --one-file-system -- "$dir.tmp"
    log "generating $dir (DCP, 4 ranks, Shard(0)/Shard(1) bf16 matrices, about $DCP_SIZE)"
    timeout 3600 "$PY" "$REPO/scripts/make_dcp.py" "$dir.tmp" \
      --case big --ranks 4 --bytes "$DCP_SIZE" --no-expected \
      >"$SCRATCH/logs/gen-dcp.log" 2>&1 ||
      { tail -n 30 "$SCRATCH/logs/gen-dcp.log" >&2; die "make_dcp.py failed"; }
    mv -- "$dir.tmp" "$dir"
    GENERATED+=("$dir")
  fi
  DCPDIR=$dir
  DCP_FILES=("$DCPDIR"/*.distcp)   # __R_0.distcp, in rank order for up to 10 ranks
  [[ -f ${DCP_FILES[0]} ]] || die "no .distcp files in $DCPDIR"
  DCPBYTES=$(sum_sizes "${DCP_FILES[@]}")
  DCPMOUNT_COLD=() DCPMOUNT_WARM=()
  log "dcp: mount of $DCPDIR, $REPS reps cold + warm"
  mount_rounds "$DCPDIR" "$mnt" DCPMOUNT_COLD DCPMOUNT_WARM dcp_note_rss
  log "dcp: sequential read, ${#DCPCONTENDERS[@]} contenders x {cold,warm} x $REPS reps"
  read_files "${DCP_FILES[@]}"
  sample_rounds "cold warm" "${DCPCONTENDERS[@]}"
}
DCP_SIZE=2G
DCPRSS=''

dcp_report() {
  local dc dw
  dc=$(median "${DCPMOUNT_COLD[@]}"); dw=$(median "${DCPMOUNT_WARM[@]}")
  echo
  echo "### dcp: a DCP checkpoint over 4 ranks, $(gib "$DCPBYTES") GiB of .distcp files ($DCPDIR)"
  echo
  echo "| what | value | target | result |"
  echo "|---|---:|---|---|"
  echo "| \`ckptfs mount\` of the DCP dir until it returns, cold cache (median of $REPS: $(echo "${DCPMOUNT_COLD[*]}" | tr ' ' '/')) | ${dc} s | <= 1 s | $(verdict "$dc" '<=' 1) |"
  echo "| \`ckptfs mount\` until it returns, warm cache (median of $REPS: $(echo "${DCPMOUNT_WARM[*]}" | tr ' ' '/')) | ${dw} s | <= 1 s | $(verdict "$dw" '<=' 1) |"
  [[ -z $DCPRSS ]] || echo "| daemon VmRSS after mount | $(mib $((DCPRSS * 1024))) MiB | - | - |"
  echo
  echo "| ratio | mode | value | target | result |"
  echo "|---|---|---:|---|---|"
  medians "cold warm" "${DCPCONTENDERS[@]}"
  ratio_rows "${DCPRATIOS[@]}"
  echo
  echo "| sequential read | MB | cold MB/s (median) | cold samples | warm MB/s (median) | warm samples |"
  echo "|---|---:|---:|---|---:|---|"
  contender_rows "cold warm" "${DCPCONTENDERS[@]}"
}
