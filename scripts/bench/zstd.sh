# shellcheck shell=bash disable=SC2153  # SIZE, DATA, SHARD_FILES, BYTES: the driver's and lib.sh's
# The zstd section of scripts/bench.sh: seekable .zst shards (plain and byte-grouped) vs
# squashfuse_ll vs zstd -d; compression ratios; trained weights; random reads; peak RSS.
# Sourced by bench.sh (never run on its own): it defines zstd_section (runs the
# measurements, fills globals) and zstd_report (prints its tables), with lib.sh's
# helpers and the driver's settings (SIZE, REPS, WORKDIR, SCRATCH, CKPTFS...) in scope.

# zstd contenders (section zstd), cold and cached: what is measured is
# decompression, so a warm read of the FUSE file (the kernel's page cache serves
# it) is not; cached has the backing files (c_<id>_backing) in the page cache and
# the FUSE file's page cache empty (a fresh mount), as after a recent download.
ZCONTENDERS=(ckptfs_zst ckptfs_zstbg sqfs_shards zstd_d)

c_ckptfs_zst_label() { echo "ckptfs: cat MNT/model.safetensors, seekable .zst shards (default cache)"; }
c_ckptfs_zst_setup() { ckptfs_mount "$ZDATA" "$SCRATCH/mnt/zst"; }
c_ckptfs_zst_files() { echo "$SCRATCH/mnt/zst/model.safetensors"; }
c_ckptfs_zst_backing() { printf '%s\n' "${ZST_FILES[@]}"; }
c_ckptfs_zst_teardown() { unmount_one "$SCRATCH/mnt/zst" || die "could not unmount ckptfs"; }

c_ckptfs_zstbg_label() { echo "ckptfs: cat MNT/model.safetensors, byte-grouped .zst shards (pack --byte-group)"; }
c_ckptfs_zstbg_setup() { ckptfs_mount "$ZGDATA" "$SCRATCH/mnt/zstbg"; }
c_ckptfs_zstbg_files() { echo "$SCRATCH/mnt/zstbg/model.safetensors"; }
c_ckptfs_zstbg_backing() { printf '%s\n' "${ZGST_FILES[@]}"; }
c_ckptfs_zstbg_teardown() { unmount_one "$SCRATCH/mnt/zstbg" || die "could not unmount ckptfs"; }

c_sqfs_shards_label() { echo "squashfuse_ll: cat $SHARDS shards from a zstd squashfs image"; }
c_sqfs_shards_setup() { sqfs_mount "$SQFS" "$SCRATCH/mnt/sqfs"; }
c_sqfs_shards_files() { local f; for f in "${SHARD_FILES[@]}"; do echo "$SCRATCH/mnt/sqfs/${f##*/}"; done; }
c_sqfs_shards_backing() { echo "$SQFS"; }
c_sqfs_shards_teardown() { unmount_one "$SCRATCH/mnt/sqfs" || die "could not unmount squashfuse_ll"; }

c_zstd_d_label() { echo "zstd -d -T1: $SHARDS .zst shards to /dev/null"; }
c_zstd_d_files() { printf '%s\n' "${ZST_FILES[@]}"; }
c_zstd_d_backing() { printf '%s\n' "${ZST_FILES[@]}"; }
c_zstd_d_read() {
  local rc=0
  timeout --kill-after=10 "$READ_TIMEOUT" zstd -d -T1 -q -c -- "$@" >/dev/null || rc=$?
  ((rc == 124 || rc == 137)) && die "zstd -d timed out after ${READ_TIMEOUT}s"
  ((rc == 0)) || die "zstd -d failed (exit $rc): $*"
  echo "$ZBYTES"   # decoded bytes, as for the others
}

# Issue 15's targets, in one run, cold and with the backing files in page cache.
ZRATIOS=(
  "ckptfs_zst zstd_d cold 1.3"
  "ckptfs_zst zstd_d cached 1.3"
  "ckptfs_zst sqfs_shards cold 1.6"
  "ckptfs_zst sqfs_shards cached 1.6"
  "ckptfs_zstbg ckptfs_zst cold 1.0"
  "ckptfs_zstbg ckptfs_zst cached 1.0"
)

# The trained weights (section zstd), read whole: the original torch.save file,
# which MNT/shards/ serves decoded, vs the same file in a squashfs image. Small
# (tens of MB), so a read takes tens of ms: reported, no targets.
TWCONTENDERS=(tw_zst tw_zstbg tw_sqfs)

c_tw_zst_label() { echo "ckptfs: cat MNT/shards/pytorch_model.bin, seekable .zst (plain pack)"; }
c_tw_zst_setup() { ckptfs_mount "$TWZ" "$SCRATCH/mnt/twz"; }
c_tw_zst_files() { echo "$SCRATCH/mnt/twz/shards/pytorch_model.bin"; }
c_tw_zst_backing() { echo "$TWZ/pytorch_model.bin.zst"; }
c_tw_zst_teardown() { unmount_one "$SCRATCH/mnt/twz" || die "could not unmount ckptfs"; }

c_tw_zstbg_label() { echo "ckptfs: cat MNT/shards/pytorch_model.bin, byte-grouped .zst (pack --byte-group)"; }
c_tw_zstbg_setup() { ckptfs_mount "$TWZG" "$SCRATCH/mnt/twzg"; }
c_tw_zstbg_files() { echo "$SCRATCH/mnt/twzg/shards/pytorch_model.bin"; }
c_tw_zstbg_backing() { echo "$TWZG/pytorch_model.bin.zst"; }
c_tw_zstbg_teardown() { unmount_one "$SCRATCH/mnt/twzg" || die "could not unmount ckptfs"; }

c_tw_sqfs_label() { echo "squashfuse_ll: cat pytorch_model.bin from a zstd squashfs image"; }
c_tw_sqfs_setup() { sqfs_mount "$TWSQFS" "$SCRATCH/mnt/twsqfs"; }
c_tw_sqfs_files() { echo "$SCRATCH/mnt/twsqfs/pytorch_model.bin"; }
c_tw_sqfs_backing() { echo "$TWSQFS"; }
c_tw_sqfs_teardown() { unmount_one "$SCRATCH/mnt/twsqfs" || die "could not unmount squashfuse_ll"; }

TWRATIOS=(
  "tw_zstbg tw_zst cold -"
  "tw_zstbg tw_zst cached -"
  "tw_zst tw_sqfs cold -"
  "tw_zst tw_sqfs cached -"
)

# ------------------------------------------------------------- zstd data
# pack_data SRC DEST: `ckptfs pack` SRC into DEST unless DEST exists (packed into
# DEST.tmp and renamed, so an existing DEST is complete). Falls back to the
# generator's seekable writer when this ckptfs has no pack command (reported).
pack_data() {
  local src=$1 dest=$2 t0 args=(--level "$LEVEL" "${@:3}")
  [[ -n $FRAME ]] && args+=(--frame-size "$FRAME")
  if [[ -d $dest ]]; then
    log "reusing $dest"
    PACKER=$(cat "$dest.packer" 2>/dev/null || echo unknown)
    return 0
  fi
  rm -rf --one-file-system -- "$dest.tmp"
  t0=$(now_ns)
  if "$CKPTFS" pack --help >/dev/null 2>&1; then
    log "packing $src into $dest (ckptfs pack ${args[*]})"
    timeout 3600 "$CKPTFS" pack "$src" "$dest.tmp" "${args[@]}" >"$SCRATCH/logs/pack.log" 2>&1 ||
      { tail -n 20 "$SCRATCH/logs/pack.log" >&2; rm -rf --one-file-system -- "$dest.tmp"; die "ckptfs pack failed"; }
    PACKER="ckptfs pack ${args[*]}"
  else
    log "warning: this ckptfs has no pack command; packing with make_checkpoint.py --compress seekable"
    timeout 3600 "$PY" "$REPO/scripts/make_checkpoint.py" "$dest.tmp" --from "$src" \
      --compress seekable --level "$LEVEL" --frame-size "${FRAME:-1M}" >"$SCRATCH/logs/pack.log" 2>&1 ||
      { tail -n 20 "$SCRATCH/logs/pack.log" >&2; rm -rf --one-file-system -- "$dest.tmp"; die "packing failed"; }
    PACKER="make_checkpoint.py --compress seekable --level $LEVEL --frame-size ${FRAME:-1M} (no ckptfs pack)"
  fi
  PACK_SECS=$(elapsed "$t0" "$(now_ns)")
  mv -- "$dest.tmp" "$dest"
  echo "$PACKER" >"$dest.packer"
  GENERATED+=("$dest" "$dest.packer")
  log "packed in $PACK_SECS s"
}

# pack_rates: `ckptfs pack` of the bench data at --level (and --frame-size), timed whole
# (fsync and rename included, the source in page cache after the first run), with
# --threads 1 and with all cores, interleaved, REPS runs each, into SCRATCH (removed
# after each run). Fills PACK_RATE_1 and PACK_RATE_ALL with MB/s samples of decoded
# bytes; both stay empty when this ckptfs pack has no --threads (reported).
pack_rates() {
  local run threads t0 secs rate args=(--level "$LEVEL") out=$SCRATCH/pack-rate
  PACK_RATE_1='' PACK_RATE_ALL=''
  if ! "$CKPTFS" pack --help 2>/dev/null | grep -q -- --threads; then
    log "warning: this ckptfs pack has no --threads; no pack throughput rows"
    return 0
  fi
  [[ -n $FRAME ]] && args+=(--frame-size "$FRAME")
  for ((run = 1; run <= REPS; run++)); do
    for threads in 1 0; do
      rm -rf --one-file-system -- "$out"
      log "pack throughput: run $run/$REPS, --threads $threads"
      t0=$(now_ns)
      timeout 3600 "$CKPTFS" pack "$DATA" "$out" "${args[@]}" --threads "$threads" \
        >"$SCRATCH/logs/pack-rate.log" 2>&1 ||
        { tail -n 20 "$SCRATCH/logs/pack-rate.log" >&2; rm -rf --one-file-system -- "$out"
          die "ckptfs pack --threads $threads failed"; }
      secs=$(elapsed "$t0" "$(now_ns)")
      rate=$(awk -v b="$ZBYTES" -v s="$secs" 'BEGIN{printf "%.0f", b/1e6/s}')
      if ((threads == 1)); then PACK_RATE_1+=" $rate"; else PACK_RATE_ALL+=" $rate"; fi
    done
  done
  rm -rf --one-file-system -- "$out"
}

# squashfs_image SRC IMG: a zstd squashfs image of SRC at --level, unless IMG exists.
squashfs_image() {
  local src=$1 img=$2 t0
  [[ -f $img ]] && { log "reusing $img"; return 0; }
  rm -f -- "$img.tmp"
  log "building $img (mksquashfs -comp zstd -Xcompression-level $LEVEL)"
  t0=$(now_ns)
  timeout 3600 mksquashfs "$src" "$img.tmp" -comp zstd -Xcompression-level "$LEVEL" -noappend \
    -no-progress >"$SCRATCH/logs/mksquashfs.log" 2>&1 ||
    { tail -n 20 "$SCRATCH/logs/mksquashfs.log" >&2; rm -f -- "$img.tmp"; die "mksquashfs failed"; }
  SQFS_SECS=$(elapsed "$t0" "$(now_ns)")
  mv -- "$img.tmp" "$img"
  GENERATED+=("$img")
}

# trained_gen DIR: scripts/make_trained_checkpoint.py DIR TW_ARGS unless DIR exists
# (trained into DIR.tmp and renamed); its summary line (parameters, held-out loss
# before -> after) is kept in DIR.info, beside DIR so that DIR holds only
# pytorch_model.bin (what pack and mksquashfs compress).
trained_gen() {
  local dir=$1 t0 glog=$SCRATCH/logs/gen-trained.log
  if [[ -d $dir ]]; then
    log "reusing $dir"
  else
    rm -rf --one-file-system -- "$dir.tmp"
    log "training $dir (make_trained_checkpoint.py ${TW_ARGS[*]}; about a minute)"
    t0=$(now_ns)
    timeout 3600 "$PY" "$REPO/scripts/make_trained_checkpoint.py" "$dir.tmp" "${TW_ARGS[@]}" >"$glog" 2>&1 ||
      { tail -n 30 "$glog" >&2; rm -rf --one-file-system -- "$dir.tmp"; die "make_trained_checkpoint.py failed"; }
    [[ -f $dir.tmp/pytorch_model.bin ]] || die "make_trained_checkpoint.py wrote no $dir.tmp/pytorch_model.bin"
    tail -n 1 "$glog" | sed "s|^$dir.tmp: ||; s|\$| (trained in $(elapsed "$t0" "$(now_ns)") s)|" >"$dir.info"
    mv -- "$dir.tmp" "$dir"
    GENERATED+=("$dir" "$dir.info")
    log "trained: $(cat "$dir.info")"
  fi
  TW_INFO=$(cat "$dir.info" 2>/dev/null || echo "no $dir.info")
}

# Largest decoded frame size in the seek tables of the given .zst files.
seekable_frame_size() {
  "$PY" - "$@" <<'EOF'
import sys
best = 0
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        f.seek(-9, 2)
        footer = f.read(9)
        assert int.from_bytes(footer[5:], "little") == 0x8F92EAB1, f"{path}: not seekable"
        count, desc = int.from_bytes(footer[:4], "little"), footer[4]
        size = 12 if desc & 0x80 else 8
        f.seek(-9 - count * size, 2)
        table = f.read(count * size)
    for k in range(count):
        best = max(best, int.from_bytes(table[k * size + 4:k * size + 8], "little"))
print(best)
EOF
}

# random_reads MODE ROOT: reads RANDOM_TENSORS whole tensors, picked with
# RANDOM_SEED from DATA's index, and prints "key=value" lines:
#   ckptfs MNT  reads MNT/tensors/<name>.safetensors (or .npy) and, around each
#               read, MNT/.ckptfs/stats.json's bytes_decompressed;
#   sqfs MNT    preads the same tensor bytes from MNT/<shard>.
random_reads() {
  "$PY" - "$1" "$2" "$DATA" "$RANDOM_TENSORS" "$RANDOM_SEED" "${ZFRAME:-0}" <<'EOF'
import json, os, random, sys, time
mode, root, data, n, seed, frame = sys.argv[1:7]
n, seed, frame = int(n), int(seed), int(frame)
index = json.load(open(os.path.join(data, "model.safetensors.index.json")))["weight_map"]
names = random.Random(seed).sample(sorted(index), min(n, len(index)))
ranges = {}
for shard in sorted(set(index.values())):
    with open(os.path.join(data, shard), "rb") as f:
        hlen = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(hlen))
    for name, e in header.items():
        if name != "__metadata__":
            b, end = e["data_offsets"]
            ranges[name] = (shard, 8 + hlen + b, end - b, e["dtype"])
def decoded():
    with open(os.path.join(root, ".ckptfs", "stats.json")) as f:
        return json.load(f)["bytes_decompressed"]
lat, requested, dec, within, worst = [], 0, 0, 0, 0.0
for name in names:
    shard, offset, nbytes, dtype = ranges[name]
    if mode == "ckptfs":
        ext = ".safetensors" if dtype in ("BF16", "F8_E4M3", "F8_E5M2") else ".npy"
        path = os.path.join(root, "tensors", *name.split(".")) + ext
        before = decoded()
        t0 = time.perf_counter()
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass
        lat.append(time.perf_counter() - t0)
        time.sleep(0.05)  # let prefetch that this read started finish before counting
        d = decoded() - before
        dec += d
        within += d <= nbytes + 2 * frame
        worst = max(worst, (d - nbytes) / frame if frame else 0)
    else:
        fd = os.open(os.path.join(root, shard), os.O_RDONLY)
        t0 = time.perf_counter()
        got, pos = 0, offset
        while got < nbytes:
            chunk = os.pread(fd, min(1 << 20, nbytes - got), pos)
            if not chunk:
                break
            got += len(chunk); pos += len(chunk)
        lat.append(time.perf_counter() - t0)
        os.close(fd)
    requested += nbytes
lat.sort()
ms = lambda q: f"{1000 * lat[min(len(lat) - 1, int(q * len(lat)))]:.1f}"
print(f"count={len(lat)}")
print(f"median_ms={ms(0.5)}")
print(f"p90_ms={ms(0.9)}")
print(f"max_ms={1000 * lat[-1]:.1f}")
print(f"tensor_mib={requested / len(lat) / 1048576:.1f}")
print(f"requested={requested}")
print(f"decoded={dec}")
if mode == "ckptfs":
    # The mount's own per-view account (stats.json views), prefetch included.
    with open(os.path.join(root, ".ckptfs", "stats.json")) as f:
        view = json.load(f).get("views", {}).get("tensors", {})
    print(f"view_served={view.get('bytes_served', 0)}")
    print(f"view_decoded={view.get('bytes_decoded', 0)}")
print(f"within={within}")
print(f"worst_excess_frames={worst:.2f}")
EOF
}

# The whole zstd section: data, sequential contenders, random reads, peak RSS.
zstd_section() {
  local tag=L$LEVEL key value f
  ZSECTION_T0=$(now_ns)
  [[ -n $FRAME ]] && tag+=-F$FRAME
  ZDATA=$WORKDIR/bench-bf16-${SIZE}-${SHARDS}shards-zst-$tag
  SQFS=$WORKDIR/bench-bf16-${SIZE}-${SHARDS}shards-zstd-L$LEVEL.sqfs
  ZGDATA=$WORKDIR/bench-bf16-${SIZE}-${SHARDS}shards-zstbg-$tag

  # trained weights first: PACK_SECS and SQFS_SECS report the bench data's packing
  TWDIR=$WORKDIR/trained-mlp-$(printf '%s' "${TW_ARGS[*]}" | sed 's/--//g; s/ /-/g')
  TWZ=$TWDIR-zst-$tag TWZG=$TWDIR-zstbg-$tag TWSQFS=$TWDIR-zstd-L$LEVEL.sqfs
  trained_gen "$TWDIR"
  pack_data "$TWDIR" "$TWZ"
  pack_data "$TWDIR" "$TWZG" --byte-group
  squashfs_image "$TWDIR" "$TWSQFS"
  TWBYTES=$(stat -c %s -- "$TWDIR/pytorch_model.bin")
  TWCBYTES=$(sum_sizes "$TWZ/pytorch_model.bin.zst") || die "$TWZ/pytorch_model.bin.zst missing"
  TWGCBYTES=$(sum_sizes "$TWZG/pytorch_model.bin.zst") || die "$TWZG/pytorch_model.bin.zst missing"
  TWSQFS_BYTES=$(stat -c %s -- "$TWSQFS")

  PACK_SECS='' SQFS_SECS=''
  pack_data "$DATA" "$ZGDATA" --byte-group
  pack_data "$DATA" "$ZDATA"
  squashfs_image "$DATA" "$SQFS"
  ZST_FILES=() ZGST_FILES=()
  for f in "${SHARD_FILES[@]}"; do
    [[ -f $ZDATA/${f##*/}.zst ]] || die "$ZDATA/${f##*/}.zst missing: not packed as expected"
    [[ -f $ZGDATA/${f##*/}.zst ]] || die "$ZGDATA/${f##*/}.zst missing: not packed as expected"
    ZST_FILES+=("$ZDATA/${f##*/}.zst")
    ZGST_FILES+=("$ZGDATA/${f##*/}.zst")
  done
  ZBYTES=$(sum_sizes "${SHARD_FILES[@]}")
  ZCBYTES=$(sum_sizes "${ZST_FILES[@]}")
  ZGCBYTES=$(sum_sizes "${ZGST_FILES[@]}")
  pack_rates
  SQFS_BYTES=$(stat -c %s -- "$SQFS")
  ZFRAME=$(seekable_frame_size "${ZST_FILES[@]}") || die "cannot read the seek tables in $ZDATA"

  log "warm-up: one untimed read of the .zst shards and the squashfs images"
  read_files "${ZST_FILES[@]}" "${ZGST_FILES[@]}" "$SQFS"
  log "zstd throughput: ${#ZCONTENDERS[@]} contenders x {cold,cached} x $REPS reps, interleaved"
  ZSEQ_T0=$(now_ns) ZLOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
  sample_rounds "cold cached" "${ZCONTENDERS[@]}"
  ZSEQ_SECS=$(elapsed "$ZSEQ_T0" "$(now_ns)") ZLOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

  log "trained weights: ${#TWCONTENDERS[@]} contenders x {cold,cached} x $REPS reps, interleaved"
  read_files "$TWZ/pytorch_model.bin.zst" "$TWZG/pytorch_model.bin.zst" "$TWSQFS"
  sample_rounds "cold cached" "${TWCONTENDERS[@]}"

  log "random reads: $RANDOM_TENSORS tensors, fresh mounts, dropped caches"
  declare -gA RR_CKPTFS=() RR_SQFS=()
  ckptfs_mount "$ZDATA" "$SCRATCH/mnt/zst"
  drop_caches
  while IFS='=' read -r key value; do RR_CKPTFS[$key]=$value; done \
    < <(random_reads ckptfs "$SCRATCH/mnt/zst" || die "random reads through ckptfs failed")
  unmount_one "$SCRATCH/mnt/zst" || die "could not unmount ckptfs"
  sqfs_mount "$SQFS" "$SCRATCH/mnt/sqfs"
  drop_caches
  while IFS='=' read -r key value; do RR_SQFS[$key]=$value; done \
    < <(random_reads sqfs "$SCRATCH/mnt/sqfs" || die "random reads through squashfuse_ll failed")
  unmount_one "$SCRATCH/mnt/sqfs" || die "could not unmount squashfuse_ll"
  [[ -n ${RR_CKPTFS[count]:-} && -n ${RR_SQFS[count]:-} ]] || die "random reads printed no results"

  log "peak RSS: --cache-size $RSS_CACHE, merged file and every tensor read concurrently"
  ckptfs_mount "$ZDATA" "$SCRATCH/mnt/rss" --cache-size "$RSS_CACHE"
  RSS_PID=$CKPTFS_PID RSS_HWM_MOUNT='' RSS_HWM='' RSS_CHARGED='' RSS_CAPACITY=''
  [[ -n $RSS_PID ]] || die "no daemon pid: cannot measure RSS"
  RSS_HWM_MOUNT=$(proc_kb "$RSS_PID" VmHWM)
  drop_caches
  local t0 pids=() p
  t0=$(now_ns)
  timeout "$READ_TIMEOUT" cat -- "$SCRATCH/mnt/rss/model.safetensors" >/dev/null & pids+=($!)
  (find "$SCRATCH/mnt/rss/tensors" -type f -print0 | sort -rz |
     timeout "$READ_TIMEOUT" xargs -0 cat -- >/dev/null) & pids+=($!)
  for p in "${pids[@]}"; do wait "$p" || die "a reader failed during the RSS measurement"; done
  RSS_SECS=$(elapsed "$t0" "$(now_ns)")
  RSS_HWM=$(proc_kb "$RSS_PID" VmHWM)
  read -r RSS_CAPACITY RSS_CHARGED < <("$PY" -c 'import json,sys; c=json.load(open(sys.argv[1]))["cache"]; print(c["capacity_bytes"], c["charged_bytes"])' \
    "$SCRATCH/mnt/rss/.ckptfs/stats.json") || true
  unmount_one "$SCRATCH/mnt/rss" || die "could not unmount ckptfs"
  ZSECTION_SECS=$(elapsed "$ZSECTION_T0" "$(now_ns)")
}

# compression_row PACKER DATA ORIGINAL_BYTES PACKED_BYTES [TARGET]: a row of the
# zstd section's compression table (ratio = original / packed, target >=).
compression_row() {
  local v; v=$(awk -v c="$4" -v b="$3" 'BEGIN{printf "%.3f", (c > 0 ? b/c : 0)}')
  if [[ -n ${5:-} ]]; then echo "| $1 | $2 | $(mib "$3") | $(mib "$4") | ${v}x | >= ${5}x | $(verdict "$v" '>=' "$5") |"
  else echo "| $1 | $2 | $(mib "$3") | $(mib "$4") | ${v}x | - | - |"; fi
}

zstd_report() {
  local rss_cap_mib hwm_mib ratio excess_ok
  echo
  echo "### zstd level $LEVEL"
  echo
  echo "- seekable shards: $PACKER${PACK_SECS:+, packed in $PACK_SECS s}; $(mib "$ZCBYTES") MiB for $(mib "$ZBYTES") MiB" \
       "($(awk -v c="$ZCBYTES" -v b="$ZBYTES" 'BEGIN{printf "%.1f", 100*c/b}')%), frames of up to $(mib "$ZFRAME") MiB" \
       "($ZFRAME B); $ZDATA; byte-grouped: $ZGDATA"
  echo "- squashfs: mksquashfs $(mksquashfs -version 2>/dev/null | head -n1 | awk '{print $3}') -comp zstd -Xcompression-level $LEVEL," \
       "default 128 KiB blocks${SQFS_SECS:+, built in $SQFS_SECS s}; $(mib "$SQFS_BYTES") MiB; squashfuse_ll $({ squashfuse_ll -V 2>&1 || true; } | awk 'NR==1 {print $2}') (multithreaded), -f only to own its pid"
  echo "- zstd: $(zstd -qV)"
  echo "- trained weights: scripts/make_trained_checkpoint.py ${TW_ARGS[*]} (torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null), CPU):" \
       "$TW_INFO; torch.save, $TWBYTES B; $TWDIR"
  echo "- method: cold = fresh mount + sync + drop_caches; cached = sync + drop_caches, the contender's backing files" \
       "(.zst shards, or the squashfs image) read twice untimed, then a fresh mount (the FUSE file's own page cache" \
       "empty) and the timed read; one untimed warm-up read of the backing files first; $REPS reps, cold and cached" \
       "interleaved, median MB/s of decoded bytes; the sequential reads took ${ZSEQ_SECS} s, the section ${ZSECTION_SECS} s (training and packing included when this run did them)"
  echo "- load average (1/5/15 min) before / after the sequential reads: $ZLOAD_START / $ZLOAD_END (other work on the machine shows here)"
  echo
  medians "cold cached" "${ZCONTENDERS[@]}"
  echo "| ratio (MB/s) | mode | value | target | result |"
  echo "|---|---|---:|---|---|"
  ratio_rows "${ZRATIOS[@]}"
  echo
  echo "| sequential read of $(gib "$ZBYTES") GiB | MB (decoded) | cold MB/s (median) | cold samples | cached MB/s (median) | cached samples | cached: % of backing files resident before |"
  echo "|---|---:|---:|---|---:|---|---|"
  contender_rows "cold cached" "${ZCONTENDERS[@]}"
  echo
  local twp; twp=$(awk -v i="$TW_INFO" 'BEGIN{split(i, w, " "); printf "%.1fM", w[1]/1e6}')
  echo "| compression at level $LEVEL (ratio = original / packed) | data | original MiB | packed MiB | ratio | target | result |"
  echo "|---|---|---:|---:|---:|---|---|"
  local rn="random normal BF16 (make_checkpoint.py --kind bench, ${#SHARD_FILES[@]} safetensors shards)"
  local tw="trained weights BF16 (MLP, $twp parameters, torch.save)"
  compression_row "\`ckptfs pack\` (plain: \`zstd -d\` gives the shards back)" "$rn" "$ZBYTES" "$ZCBYTES"
  compression_row "\`ckptfs pack --byte-group\`" "$rn" "$ZBYTES" "$ZGCBYTES" 1.40
  compression_row "\`mksquashfs -comp zstd\` (the whole image)" "$rn" "$ZBYTES" "$SQFS_BYTES"
  compression_row "\`ckptfs pack\`" "$tw" "$TWBYTES" "$TWCBYTES"
  compression_row "\`ckptfs pack --byte-group\`" "$tw" "$TWBYTES" "$TWGCBYTES"
  compression_row "\`mksquashfs -comp zstd\` (the whole image)" "$tw" "$TWBYTES" "$TWSQFS_BYTES"
  echo
  if [[ -n ${PACK_RATE_1:-} ]]; then
    local s1 sall
    read -ra s1 <<<"$PACK_RATE_1"
    read -ra sall <<<"$PACK_RATE_ALL"
    echo "| \`ckptfs pack\` of $(gib "$ZBYTES") GiB at level $LEVEL (whole command: fsync and rename included; source in page cache) | MB/s (median, decoded) | samples |"
    echo "|---|---:|---|"
    echo "| \`ckptfs pack --threads 1\` | $(median "${s1[@]}") | $(IFS=/; echo "${s1[*]}") |"
    echo "| \`ckptfs pack\` (all $(nproc) cores) | $(median "${sall[@]}") | $(IFS=/; echo "${sall[*]}") |"
    echo
  fi
  medians "cold cached" "${TWCONTENDERS[@]}"
  echo "| trained weights: ratio (MB/s) | mode | value | target | result |"
  echo "|---|---|---:|---|---|"
  ratio_rows "${TWRATIOS[@]}"
  echo
  echo "| trained weights: read of pytorch_model.bin ($(mib "$TWBYTES") MiB: tens of ms, noisy) | MB | cold MB/s (median) | cold samples | cached MB/s (median) | cached samples | cached: % of backing files resident before |"
  echo "|---|---:|---:|---|---:|---|---|"
  contender_rows "cold cached" "${TWCONTENDERS[@]}"
  echo
  ratio=$(awk -v d="${RR_CKPTFS[decoded]}" -v r="${RR_CKPTFS[requested]}" 'BEGIN{printf "%.3f", (r > 0 ? d/r : 0)}')
  excess_ok=$([[ ${RR_CKPTFS[within]} == "${RR_CKPTFS[count]}" ]] && echo PASS || echo MISS)
  echo "| random reads: ${RR_CKPTFS[count]} whole tensors of ${RR_CKPTFS[tensor_mib]} MiB, fresh mount, dropped caches | median ms | p90 ms | max ms |"
  echo "|---|---:|---:|---:|"
  echo "| ckptfs: read MNT/tensors/<name>.safetensors | ${RR_CKPTFS[median_ms]} | ${RR_CKPTFS[p90_ms]} | ${RR_CKPTFS[max_ms]} |"
  echo "| squashfuse_ll: pread of the same bytes of MNT/<shard> | ${RR_SQFS[median_ms]} | ${RR_SQFS[p90_ms]} | ${RR_SQFS[max_ms]} |"
  echo
  echo "| ckptfs decoding on those reads (stats.json bytes_decompressed) | value | target | result |"
  echo "|---|---:|---|---|"
  echo "| bytes decoded / bytes requested, all reads | ${ratio} | - | - |"
  view_ratio=$(awk -v d="${RR_CKPTFS[view_decoded]:-0}" -v r="${RR_CKPTFS[view_served]:-0}" 'BEGIN{printf "%.3f", (r > 0 ? d/r : 0)}')
  echo "| tensors/ view: bytes decoded / bytes served (stats.json views) | ${view_ratio} | - | - |"
  echo "| reads decoding <= requested + 2 frames | ${RR_CKPTFS[within]} of ${RR_CKPTFS[count]} (worst: requested + ${RR_CKPTFS[worst_excess_frames]} frames) | all | $excess_ok |"
  echo
  rss_cap_mib=$(mib "$(size_to_bytes "$RSS_CACHE")")
  hwm_mib=$(mib $((RSS_HWM * 1024)))
  echo "| memory: \`--cache-size $RSS_CACHE\`, $(gib "$ZBYTES") GiB read by two concurrent readers (merged file; every tensor file) in ${RSS_SECS} s | value | target | result |"
  echo "|---|---:|---|---|"
  echo "| daemon VmHWM after mount | $(mib $((RSS_HWM_MOUNT * 1024))) MiB | - | - |"
  echo "| daemon VmHWM after the reads | ${hwm_mib} MiB | <= $((rss_cap_mib + RSS_SLACK_MIB)) MiB | $(verdict "$hwm_mib" '<=' $((rss_cap_mib + RSS_SLACK_MIB))) |"
  echo "| cache capacity / charged at the end (stats.json) | $(mib "${RSS_CAPACITY:-0}") / $(mib "${RSS_CHARGED:-0}") MiB | - | - |"
}
