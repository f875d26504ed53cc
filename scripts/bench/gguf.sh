# shellcheck shell=bash
# The gguf section of scripts/bench.sh: a llama-shaped GGUF v3 model of about --size, as one
# file NAME.gguf and as a split set NAME-0000K-of-0000N.gguf (scripts/make_gguf.py, which
# checks that the splits merged are the one file byte for byte): mount cost of the split
# set, sequential read of the merged MNT/NAME.gguf (the set as one file, from extents) vs
# `cat` of the splits, of the one file, and vs what users do today, `gguf-split --merge`'s
# read all + write all (cat of the splits into a merged copy on the same disk, then sync);
# then llama.cpp's way in, mmap of MNT/NAME.gguf vs of the one file (warm).
# Sourced by bench.sh (never run on its own): it defines gguf_section (runs the
# measurements, fills globals) and gguf_report (prints its tables), with lib.sh's
# helpers and the driver's settings (REPS, WORKDIR, SCRATCH, CKPTFS...) in scope.

c_ckptfs_gguf_label() { echo "ckptfs: cat MNT/$GGUFNAME.gguf (the ${#GGUF_SPLITS[@]} splits merged)"; }
c_ckptfs_gguf_setup() { ckptfs_mount "$GGUFSPLITDIR" "$SCRATCH/mnt/gguf"; }
c_ckptfs_gguf_files() { echo "$SCRATCH/mnt/gguf/$GGUFNAME.gguf"; }
c_ckptfs_gguf_teardown() { unmount_one "$SCRATCH/mnt/gguf" || die "could not unmount ckptfs"; }
c_cat_gsplits_label() { echo "cat: the ${#GGUF_SPLITS[@]} splits from disk"; }
c_cat_gsplits_files() { printf '%s\n' "${GGUF_SPLITS[@]}"; }
c_cat_gsingle_label() { echo "cat: the unsplit $GGUFNAME.gguf from disk"; }
c_cat_gsingle_files() { echo "$GGUFFILE"; }
# gguf-split --merge's cost: every split read and the merged file written on the same
# disk, then synced; MB/s of the bytes read. Warm: the two untimed reads are cats to
# /dev/null (the page cache filled alike, no copy written).
c_gmerge_label() { echo "cat the ${#GGUF_SPLITS[@]} splits > a merged copy on the same disk, then sync (gguf-split --merge)"; }
c_gmerge_files() { printf '%s\n' "${GGUF_SPLITS[@]}"; }
c_gmerge_setup() { rm -f -- "$GGUFCOPY"; }
c_gmerge_prime() { read_files "$@"; }
c_gmerge_read() {
  local rc=0
  { timeout --kill-after=10 "$READ_TIMEOUT" cat -- "$@" >"$GGUFCOPY" &&
    timeout 120 sync -- "$GGUFCOPY"; } || rc=$?
  ((rc == 0)) || die "merged copy of the splits failed (exit $rc)"
}
c_gmerge_teardown() { rm -f -- "$GGUFCOPY"; }
GGUFCONTENDERS=(ckptfs_gguf cat_gsplits cat_gsingle gmerge)
GGUFRATIOS=("ckptfs_gguf cat_gsplits cold 0.8" "ckptfs_gguf cat_gsplits warm 0.8"
  "ckptfs_gguf gmerge cold -" "ckptfs_gguf gmerge warm -")

# llama.cpp mmaps the model: the mmap reader of the mmap section (map, fault in, copy out)
gguf_mmap_reader() { timeout --kill-after=10 "$READ_TIMEOUT" "$PY" "$REPO/scripts/bench/mmap_read.py" "$@"; }
c_gmmap_ckptfs_label() { echo "ckptfs: mmap MNT/$GGUFNAME.gguf (scripts/bench/mmap_read.py)"; }
c_gmmap_ckptfs_setup() { ckptfs_mount "$GGUFSPLITDIR" "$SCRATCH/mnt/ggufmmap"; }
c_gmmap_ckptfs_files() { echo "$SCRATCH/mnt/ggufmmap/$GGUFNAME.gguf"; }
c_gmmap_ckptfs_read() { gguf_mmap_reader "$@"; }
c_gmmap_ckptfs_teardown() { unmount_one "$SCRATCH/mnt/ggufmmap" || die "could not unmount ckptfs"; }
c_gmmap_single_label() { echo "mmap: the unsplit $GGUFNAME.gguf from disk"; }
c_gmmap_single_files() { echo "$GGUFFILE"; }
c_gmmap_single_read() { gguf_mmap_reader "$@"; }
GGUFMMAPCONTENDERS=(gmmap_ckptfs gmmap_single)
GGUFMMAPRATIOS=("gmmap_ckptfs gmmap_single warm 0.9")

# the daemon's RSS after a mount of the split set (mount_rounds' hook)
gguf_note_rss() { if [[ -n $CKPTFS_PID ]]; then GGUFRSS=$(proc_kb "$CKPTFS_PID" VmRSS); fi; }

gguf_section() {
  local size=${GGUF_SIZE:-$SIZE}
  local dir=$WORKDIR/gguf-llama-${size}-${GGUF_NSPLITS}splits mnt=$SCRATCH/mnt/ggufmount
  if [[ ! -d $dir ]]; then
    rm -rf --one-file-system -- "$dir.tmp"
    log "generating $dir (llama-shaped GGUF v3, one file and $GGUF_NSPLITS splits, about $size)"
    timeout 3600 "$PY" "$REPO/scripts/make_gguf.py" "$dir.tmp" --size "$size" \
      --splits "$GGUF_NSPLITS" --name "$GGUFNAME" \
      >"$SCRATCH/logs/gen-gguf.log" 2>&1 ||
      { tail -n 30 "$SCRATCH/logs/gen-gguf.log" >&2; die "make_gguf.py failed"; }
    cp -- "$SCRATCH/logs/gen-gguf.log" "$dir.tmp/make_gguf.out"
    mv -- "$dir.tmp" "$dir"
    GENERATED+=("$dir")
  fi
  GGUFDIR=$dir
  GGUFFILE=$dir/$GGUFNAME.gguf
  GGUFSPLITDIR=$dir/split
  GGUFCOPY=$dir/merged-copy.gguf   # the gmerge contender's output, same disk, removed after
  GGUF_SPLITS=("$GGUFSPLITDIR/$GGUFNAME"-*-of-*.gguf)   # zero-padded: in split order
  [[ -f $GGUFFILE && -f ${GGUF_SPLITS[0]} ]] || die "no $GGUFNAME.gguf / splits in $dir"
  ((${#GGUF_SPLITS[@]} == GGUF_NSPLITS)) || die "$GGUFSPLITDIR: ${#GGUF_SPLITS[@]} splits, not $GGUF_NSPLITS"
  GGUFBYTES=$(sum_sizes "$GGUFFILE")
  GGUFSPLITBYTES=$(sum_sizes "${GGUF_SPLITS[@]}")
  GGUFWHAT=$(sed -n 's/.*); \(width [^;]*\); merge.*/\1/p' "$dir/make_gguf.out" 2>/dev/null || true)
  # the merged file must be the unsplit one, or the read figures mean nothing
  log "gguf: checking MNT/$GGUFNAME.gguf == $GGUFFILE"
  ckptfs_mount "$GGUFSPLITDIR" "$mnt"
  timeout --kill-after=10 "$READ_TIMEOUT" cmp -- "$mnt/$GGUFNAME.gguf" "$GGUFFILE" >&2 ||
    die "MNT/$GGUFNAME.gguf of $GGUFSPLITDIR differs from $GGUFFILE"
  GGUFSAME=1
  unmount_one "$mnt" || die "could not unmount $mnt"
  GGUFMOUNT_COLD=() GGUFMOUNT_WARM=()
  log "gguf: mount of $GGUFSPLITDIR, $REPS reps cold + warm"
  mount_rounds "$GGUFSPLITDIR" "$mnt" GGUFMOUNT_COLD GGUFMOUNT_WARM gguf_note_rss
  log "gguf: sequential read, ${#GGUFCONTENDERS[@]} contenders x {cold,warm} x $REPS reps"
  read_files "$GGUFFILE" "${GGUF_SPLITS[@]}"
  sample_rounds "cold warm" "${GGUFCONTENDERS[@]}"
  log "gguf: mmap, ${#GGUFMMAPCONTENDERS[@]} contenders x warm x $REPS reps"
  sample_rounds "warm" "${GGUFMMAPCONTENDERS[@]}"
}
GGUF_NSPLITS=4
GGUFNAME=model
GGUFRSS=''
GGUFSAME=0

gguf_report() {
  local gc gw
  gc=$(median "${GGUFMOUNT_COLD[@]}"); gw=$(median "${GGUFMOUNT_WARM[@]}")
  echo
  echo "### gguf: a llama-shaped GGUF v3 of $(gib "$GGUFBYTES") GiB${GGUFWHAT:+ ($GGUFWHAT)}, one file and ${#GGUF_SPLITS[@]} splits ($GGUFDIR)"
  echo
  echo "| what | value | target | result |"
  echo "|---|---:|---|---|"
  echo "| MNT/$GGUFNAME.gguf of the splits == the unsplit $GGUFNAME.gguf (cmp) | $( ((GGUFSAME)) && echo same || echo differs) | same | $( ((GGUFSAME)) && echo PASS || echo MISS) |"
  echo "| \`ckptfs mount\` of the split-set dir until it returns, cold cache (median of $REPS: $(echo "${GGUFMOUNT_COLD[*]}" | tr ' ' '/')) | ${gc} s | <= 1 s | $(verdict "$gc" '<=' 1) |"
  echo "| \`ckptfs mount\` until it returns, warm cache (median of $REPS: $(echo "${GGUFMOUNT_WARM[*]}" | tr ' ' '/')) | ${gw} s | <= 1 s | $(verdict "$gw" '<=' 1) |"
  [[ -z $GGUFRSS ]] || echo "| daemon VmRSS after mount | $(mib $((GGUFRSS * 1024))) MiB | - | - |"
  echo
  echo "| ratio | mode | value | target | result |"
  echo "|---|---|---:|---|---|"
  medians "cold warm" "${GGUFCONTENDERS[@]}"
  ratio_rows "${GGUFRATIOS[@]}"
  medians "warm" "${GGUFMMAPCONTENDERS[@]}"
  ratio_rows "${GGUFMMAPRATIOS[@]}"
  echo
  echo "| sequential read | MB | cold MB/s (median) | cold samples | warm MB/s (median) | warm samples |"
  echo "|---|---:|---:|---|---:|---|"
  contender_rows "cold warm" "${GGUFCONTENDERS[@]}"
  echo
  echo "| mmap read (map, fault in, copy out) | MB | warm MB/s (median) | warm samples |"
  echo "|---|---:|---:|---|"
  contender_rows "warm" "${GGUFMMAPCONTENDERS[@]}"
  echo
  echo "The merged-copy row's MB/s are of the ${#GGUF_SPLITS[@]} splits' $(awk -v b="$GGUFSPLITBYTES" 'BEGIN{printf "%.0f", b/1e6}') MB read; it also writes them once and syncs."
}
