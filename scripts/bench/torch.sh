# shellcheck shell=bash disable=SC2153,SC2004  # MED is associative (report); SIZE, DATA, SHARD_FILES, BYTES: the driver's and lib.sh's
# The torch section of scripts/bench.sh: torch.load of MNT/pytorch_model.bin vs a physical copy,
# cold and warm; mount cost of a sharded torch.save source.
# Sourced by bench.sh (never run on its own): it defines torch_section (runs the
# measurements, fills globals) and torch_report (prints its tables), with lib.sh's
# helpers and the driver's settings (SIZE, REPS, WORKDIR, SCRATCH, CKPTFS...) in scope.

# torch contenders (section torch), cold and warm; each one file that a
# `python3 -c` process loads with torch.load. Pairs: tb_* = the sharded torch
# source, ts_* = the plain section's safetensors shards as the source.
TCONTENDERS=(tb_ckptfs tb_disk ts_ckptfs ts_disk)
# Ratio rows: "NUM DEN MODE TARGET" (mounted / physical seconds, target: <=)
TRATIOS=(
  "tb_ckptfs tb_disk cold 1.3"
  "tb_ckptfs tb_disk warm 1.1"
  "ts_ckptfs ts_disk cold 1.3"
  "ts_ckptfs ts_disk warm 1.1"
)

t_tb_ckptfs_label() { echo "ckptfs: MNT/pytorch_model.bin, source: $TSHARDS_FOUND torch.save shards (.bin)"; }
t_tb_ckptfs_setup() { ckptfs_mount "$TDATA" "$SCRATCH/mnt/tbin"; TLOAD_PID=$CKPTFS_PID; }
t_tb_ckptfs_file() { echo "$SCRATCH/mnt/tbin/pytorch_model.bin"; }
t_tb_ckptfs_teardown() { torch_note_hwm; unmount_one "$SCRATCH/mnt/tbin" || die "could not unmount ckptfs"; }

t_tb_disk_label() { echo "local disk: a copy of that merged pytorch_model.bin"; }
t_tb_disk_file() { echo "$TCOPY"; }

t_ts_ckptfs_label() { echo "ckptfs: MNT/pytorch_model.bin, source: ${#SHARD_FILES[@]} safetensors shards"; }
t_ts_ckptfs_setup() { ckptfs_mount "$DATA" "$SCRATCH/mnt/tst"; TLOAD_PID=$CKPTFS_PID; }
t_ts_ckptfs_file() { echo "$SCRATCH/mnt/tst/pytorch_model.bin"; }
t_ts_ckptfs_teardown() { torch_note_hwm; unmount_one "$SCRATCH/mnt/tst" || die "could not unmount ckptfs"; }

t_ts_disk_label() { echo "local disk: a copy of that merged pytorch_model.bin"; }
t_ts_disk_file() { echo "$SCOPY"; }

# the daemon's VmHWM after a timed load, max over samples, per contender
declare -A TLOAD_HWM=()
torch_note_hwm() {
  local kb
  [[ -n ${TLOAD_PID:-} ]] || return 0
  kb=$(proc_kb "$TLOAD_PID" VmHWM)
  [[ -n $kb ]] && ((kb > ${TLOAD_HWM[$TCUR]:-0})) && TLOAD_HWM[$TCUR]=$kb
  return 0
}

# One timed torch.load per process. torch is imported, and a tiny file loaded
# (so the loader's own imports are done), before the timer; the timer covers the
# torch.load call only. torch 1.13 loads eagerly: every storage record is read
# into memory before torch.load returns. Prints "seconds tensors bytes".
TORCH_LOAD_PY='
import io, sys, time, torch
buf = io.BytesIO()
torch.save({"w": torch.zeros(4)}, buf)
buf.seek(0)
torch.load(buf, weights_only=True)
t0 = time.perf_counter()
sd = torch.load(sys.argv[1], weights_only=True)
secs = time.perf_counter() - t0
print(f"{secs:.3f} {len(sd)} {sum(t.numel() * t.element_size() for t in sd.values())}")
'

# torch_load FILE: one load in a new python process; prints "seconds tensors bytes"
torch_load() {
  local rc=0 out
  out=$(timeout --kill-after=10 "$READ_TIMEOUT" "$PY" -c "$TORCH_LOAD_PY" "$1" \
    2>>"$SCRATCH/logs/torch_load.log") || rc=$?
  ((rc == 124 || rc == 137)) && die "torch.load timed out after ${READ_TIMEOUT}s: $1"
  ((rc == 0)) || { tail -n 20 "$SCRATCH/logs/torch_load.log" >&2; die "torch.load failed (exit $rc): $1"; }
  [[ $out =~ ^[0-9.]+\ [0-9]+\ [0-9]+$ ]] || die "torch.load of $1 printed '$out'"
  echo "$out"
}

declare -A TSAMPLES=() TLOADED=() TRESIDENT=()

# torch_sample ID cold|warm: one timed load, appended to TSAMPLES[ID,MODE] (s).
# Both members of a pair must load the same number of tensors and bytes. Warm
# samples also note how much of the file was resident just before the timed
# load (TRESIDENT) and, through ckptfs, how many bytes the daemon served during
# it: this VM's kernel pages out page cache within seconds (see the report).
torch_sample() {
  local id=$1 mode=$2 file out secs n bytes pair=${1%%_*} res='' mnt='' b0=0 served=''
  TCUR=$id TLOAD_PID=''
  if has_fn "t_${id}_setup"; then "t_${id}_setup"; fi
  file=$("t_${id}_file")
  [[ $file == "$SCRATCH"/mnt/* ]] && mnt=${file%/*}
  if [[ $mode == warm ]]; then
    torch_load "$file" >/dev/null
    res=$(resident_pct "$file")
    TRESIDENT[$id]="${TRESIDENT[$id]:-} $res"
    [[ -n $mnt ]] && b0=$(daemon_bytes_read "$mnt")
  else
    drop_caches
  fi
  out=$(torch_load "$file")
  [[ $mode == warm && -n $mnt ]] && served=$(( $(daemon_bytes_read "$mnt") - b0 ))
  read -r secs n bytes <<<"$out"
  if has_fn "t_${id}_teardown"; then "t_${id}_teardown"; fi
  [[ -z ${TLOADED[$pair]:-} || ${TLOADED[$pair]} == "$n $bytes" ]] ||
    die "$id loaded $n tensors / $bytes B, its pair ${TLOADED[$pair]} (tensors / B)"
  TLOADED[$pair]="$n $bytes"
  TSAMPLES[$id,$mode]="${TSAMPLES[$id,$mode]:-} $secs"
  log "  $mode $id: torch.load of $n tensors ($(gib "$bytes") GiB) in ${secs}s${res:+; ${res}% resident before}${served:+, daemon served $(mib "$served") MiB}"
}

# gen_torch_data DIR: a transformers-like sharded torch.save checkpoint of about
# --size bytes in DIR, unless DIR exists (written into DIR.tmp and renamed):
# pytorch_model-0000K-of-0000N.bin shards (contiguous runs of tensors, as
# save_pretrained cuts them), pytorch_model.bin.index.json (weight_map and
# metadata.total_size), config.json. A llama-like stack of 32 layers: bf16
# attention and embedding, f16 MLP, f32 norms, rotary buffers and lm_head; the
# hidden size is picked to come closest to --size. Tensors are filled by
# copying from one random 1M-element block (at a per-tensor offset), so writing
# 2 GiB takes seconds.
gen_torch_data() {
  local dir=$1 t0 glog=$SCRATCH/logs/gen-torch.log
  [[ -d $dir ]] && { log "reusing $dir"; return 0; }
  rm -rf --one-file-system -- "$dir.tmp"
  mkdir -p -- "$dir.tmp"
  log "generating $dir (torch.save, $TSHARDS shards, about $SIZE)"
  t0=$(now_ns)
  if ! timeout 3600 "$PY" - "$dir.tmp" "$(size_to_bytes "$SIZE")" "$TSHARDS" >"$glog" 2>&1 <<'EOF'
import collections, json, os, sys
import torch
out, target, nshards = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
LAYERS, VOCAB, BLOCK = 32, 32000, 1 << 20
BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32
ESIZE = {BF16: 2, F16: 2, F32: 4}

def layout(h):
    inter = (h * 8 // 3 + 63) // 64 * 64
    t = [("model.embed_tokens.weight", (VOCAB, h), BF16)]
    for l in range(LAYERS):
        p = f"model.layers.{l}."
        t += [(p + f"self_attn.{x}_proj.weight", (h, h), BF16) for x in "qkvo"]
        t.append((p + "self_attn.rotary_emb.inv_freq", (64,), F32))
        t += [(p + f"mlp.{x}_proj.weight", (inter, h), F16) for x in ("gate", "up")]
        t.append((p + "mlp.down_proj.weight", (h, inter), F16))
        t.append((p + "input_layernorm.weight", (h,), F32))
        t.append((p + "post_attention_layernorm.weight", (h,), F32))
    t.append(("model.norm.weight", (h,), F32))
    t.append(("lm_head.weight", (VOCAB, h), F32))
    return t, inter

def nbytes(e):
    n = 1
    for d in e[1]:
        n *= d
    return n * ESIZE[e[2]]

hidden = min(range(64, 16385, 64), key=lambda h: abs(sum(map(nbytes, layout(h)[0])) - target))
tensors, inter = layout(hidden)
total = sum(map(nbytes, tensors))
gen = torch.Generator().manual_seed(1)
block = torch.randn(BLOCK + 4096, generator=gen) * 0.02
blocks = {dt: block.to(dt) for dt in ESIZE}

def make(k, name, shape, dtype):
    if name.endswith("inv_freq"):  # as llama computes it
        return 1.0 / (10000 ** (torch.arange(0, 128, 2, dtype=F32) / 128))
    t = torch.empty(shape, dtype=dtype)
    flat, src, off, pos = t.view(-1), blocks[dtype], (k * 997) % 4096, 0
    while pos < flat.numel():
        m = min(BLOCK, flat.numel() - pos)
        flat[pos:pos + m].copy_(src[off:off + m])
        pos += m
    if len(shape) == 1:
        t.add_(1)  # norms around 1
    return t

# contiguous runs, cut where the running size crosses k * total / nshards
parts, start = [], 0
for e in tensors:
    k = min(nshards - 1, start * nshards // total)
    while len(parts) <= k:
        parts.append([])
    parts[k].append(e)
    start += nbytes(e)
parts = [p for p in parts if p]
weight_map, k_tensor = {}, 0
for k, part in enumerate(parts):
    name = f"pytorch_model-{k + 1:05d}-of-{len(parts):05d}.bin"
    sd = collections.OrderedDict()
    for e in part:
        sd[e[0]] = make(k_tensor, *e)
        k_tensor += 1
        weight_map[e[0]] = name
    torch.save(sd, os.path.join(out, name))
    print(f"{name}: {len(sd)} tensors, {sum(map(nbytes, part))} B", flush=True)
    del sd
with open(os.path.join(out, "pytorch_model.bin.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2,
              sort_keys=True)
    f.write("\n")
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
               "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": LAYERS,
               "vocab_size": VOCAB, "torch_dtype": "bfloat16"}, f, indent=2)
    f.write("\n")
print(f"hidden {hidden}, intermediate {inter}: {len(tensors)} tensors, {total} B in {len(parts)} shards")
EOF
  then
    tail -n 30 "$glog" >&2; rm -rf --one-file-system -- "$dir.tmp"
    die "generating the torch checkpoint $dir failed"
  fi
  mv -- "$dir.tmp" "$dir"
  GENERATED+=("$dir")
  log "generated $dir in $(elapsed "$t0" "$(now_ns)") s: $(tail -n 1 "$glog")"
}

# same_file_ends A B: same size, and the same first and last 4 MiB (the zip's
# local headers and its central directory)
same_file_ends() {
  local a b
  a=$(stat -c %s -- "$1") && b=$(stat -c %s -- "$2") && [[ $a == "$b" ]] || return 1
  cmp -s <(timeout 60 head -c 4M -- "$1") <(timeout 60 head -c 4M -- "$2") &&
    cmp -s <(timeout 60 tail -c 4M -- "$1") <(timeout 60 tail -c 4M -- "$2")
}

# merged_copy SRC DEST: DEST = a copy of MNT/pytorch_model.bin of SRC mounted,
# made once (reused while it matches the mount's file).
merged_copy() {
  local src=$1 dest=$2 mnt=$SCRATCH/mnt/tcopy t0 existed=0 rc=0
  ckptfs_mount "$src" "$mnt"
  if [[ -f $dest ]]; then
    existed=1
    if same_file_ends "$mnt/pytorch_model.bin" "$dest"; then
      log "reusing $dest"
      unmount_one "$mnt" || die "could not unmount ckptfs"
      return 0
    fi
    log "$dest differs from $src's MNT/pytorch_model.bin now; copying it again"
  fi
  rm -f -- "$dest" "$dest.tmp"
  log "copying MNT/pytorch_model.bin of $src to $dest"
  t0=$(now_ns)
  timeout --kill-after=10 "$READ_TIMEOUT" cp -- "$mnt/pytorch_model.bin" "$dest.tmp" || rc=$?
  ((rc == 0)) || { rm -f -- "$dest.tmp"; die "copying $mnt/pytorch_model.bin failed (exit $rc)"; }
  mv -- "$dest.tmp" "$dest"
  ((existed)) || GENERATED+=("$dest")
  log "copied $(gib "$(stat -c %s -- "$dest")") GiB in $(elapsed "$t0" "$(now_ns)") s"
  unmount_one "$mnt" || die "could not unmount ckptfs"
}

# The whole torch section: data, copies, cold/warm loads, mount cost.
torch_section() {
  local r mode id
  TDIR=$WORKDIR/torch
  [[ -d $TDIR ]] || { mkdir -p -- "$TDIR"; GENERATED+=("$TDIR"); }
  TDATA=$TDIR/llama-bf16-f16-f32-${SIZE}-${TSHARDS}shards
  TCOPY=$TDATA.pytorch_model.bin
  SCOPY=$TDIR/${DATA##*/}.pytorch_model.bin
  gen_torch_data "$TDATA"
  mapfile -t TSHARD_FILES < <(ls -1 -- "$TDATA"/pytorch_model-*-of-*.bin)
  TSHARDS_FOUND=${#TSHARD_FILES[@]}
  ((TSHARDS_FOUND)) || die "no pytorch_model-*-of-*.bin shards in $TDATA"
  read -r TTENSORS TTOTAL < <("$PY" -c 'import json,sys; i=json.load(open(sys.argv[1])); print(len(i["weight_map"]), i["metadata"]["total_size"])' \
    "$TDATA/pytorch_model.bin.index.json") || true
  [[ -n ${TTOTAL:-} ]] || die "cannot read $TDATA/pytorch_model.bin.index.json"
  merged_copy "$TDATA" "$TCOPY"
  merged_copy "$DATA" "$SCOPY"

  log "warm-up: one untimed read of the torch shards, the safetensors shards and both copies"
  read_files "${TSHARD_FILES[@]}" "${SHARD_FILES[@]}" "$TCOPY" "$SCOPY"
  # The first cold load through a mount after other work runs up to 3x slower
  # on this VM (it is the first to touch ~6 GiB: shard and FUSE page cache and
  # the tensors; memory freed back to the host is slow to touch again). One
  # untimed cold load through ckptfs takes that.
  log "warm-up: one untimed cold torch.load through ckptfs"
  ckptfs_mount "$TDATA" "$SCRATCH/mnt/twarm"
  drop_caches
  torch_load "$SCRATCH/mnt/twarm/pytorch_model.bin" >/dev/null
  unmount_one "$SCRATCH/mnt/twarm" || die "could not unmount ckptfs"
  log "torch.load: ${#TCONTENDERS[@]} contenders x {cold,warm} x $REPS reps, interleaved"
  for ((r = 1; r <= REPS; r++)); do
    log "rep $r/$REPS"
    for mode in cold warm; do
      for id in "${TCONTENDERS[@]}"; do torch_sample "$id" "$mode"; done
    done
  done
  # everything is read: the loads saw every tensor the index lists
  [[ ${TLOADED[tb]} == "$TTENSORS $TTOTAL" ]] ||
    die "torch.load of the merged file gave ${TLOADED[tb]} (tensors B), the index says $TTENSORS $TTOTAL"

  local tm=$SCRATCH/mnt/tmount
  TMOUNT_COLD=() TMOUNT_WARM=()
  log "mount cost of the sharded torch source: $REPS reps cold + warm"
  mount_rounds "$TDATA" "$tm" TMOUNT_COLD TMOUNT_WARM
  drop_caches
  ckptfs_mount "$TDATA" "$tm"
  TRSS_MOUNT='' THWM_MOUNT=''
  if [[ -n $CKPTFS_PID ]]; then
    TRSS_MOUNT=$(proc_kb "$CKPTFS_PID" VmRSS); THWM_MOUNT=$(proc_kb "$CKPTFS_PID" VmHWM)
  fi
  unmount_one "$tm" || die "could not unmount $tm"
}

torch_report() {
  echo
  echo "### torch: \`torch.load(MNT/pytorch_model.bin, weights_only=True)\`"
  echo
  echo "- torch source: $TDATA: $TTENSORS tensors (bf16, f16, f32), $(gib "$TTOTAL") GiB in $TSHARDS_FOUND" \
       "pytorch_model-0000K-of-$(printf '%05d' "$TSHARDS_FOUND").bin shards + index, written by torch.save of torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  echo "- safetensors source: the plain section's $DATA"
  echo "- physical contenders: copies of each mount's pytorch_model.bin in $TDIR (same file system as the sources):" \
       "$(mib "$(stat -c %s -- "$TCOPY")") MiB and $(mib "$(stat -c %s -- "$SCOPY")") MiB"
  echo "- method: one \`$PY -c\` process per load, torch imported (and a tiny file loaded) before the timer," \
       "the timer around the torch.load call only (eager in torch 1.13); cold = fresh mount + sync + drop_caches;" \
       "warm = fresh mount, one untimed load in another process, then the timed one; $REPS reps interleaved, median seconds"
  echo
  echo "| torch.load of pytorch_model.bin | MB | cold s (median) | cold samples | cold MB/s | warm s (median) | warm samples | warm MB/s | warm: % resident before |"
  echo "|---|---:|---:|---|---:|---:|---|---:|---|"
  local id mode row med sl bytes r num den tgt v
  for id in "${TCONTENDERS[@]}"; do
    bytes=$(stat -c %s -- "$("t_${id%%_*}_disk_file")")
    row="| $("t_${id}_label") | $(awk -v b="$bytes" 'BEGIN{printf "%.0f", b/1e6}')"
    for mode in cold warm; do
      # shellcheck disable=SC2086  # split the sample list
      med=$(median ${TSAMPLES[$id,$mode]}); MED[$id,$mode]=$med
      read -ra sl <<<"${TSAMPLES[$id,$mode]}"
      row+=" | $med | $(IFS=/; echo "${sl[*]}") | $(awk -v b="$bytes" -v s="$med" 'BEGIN{printf "%.0f", (s > 0 ? b/1e6/s : 0)}')"
    done
    read -ra sl <<<"${TRESIDENT[$id]:-}"
    echo "$row | $(IFS=/; echo "${sl[*]}") |"
  done
  echo
  echo "| ratio (seconds, mounted / physical) | mode | value | target | result |"
  echo "|---|---|---:|---|---|"
  for r in "${TRATIOS[@]}"; do
    read -r num den mode tgt <<<"$r"
    v=$(awk -v a="${MED[$num,$mode]}" -v b="${MED[$den,$mode]}" 'BEGIN{if (b > 0) printf "%.2f", a/b; else print "nan"}')
    echo "| ${num} / ${den} | $mode | ${v}x | <= ${tgt}x | $(verdict "$v" '<=' "$tgt") |"
  done
  echo
  local mc mw
  mc=$(median "${TMOUNT_COLD[@]}"); mw=$(median "${TMOUNT_WARM[@]}")
  echo "| mount of the sharded torch source ($TTENSORS tensors, $TSHARDS_FOUND shards) | value | target | result |"
  echo "|---|---:|---|---|"
  echo "| \`ckptfs mount\` until it returns, cold cache (median of $REPS: $(echo "${TMOUNT_COLD[*]}" | tr ' ' '/')) | ${mc} s | - | - |"
  echo "| \`ckptfs mount\` until it returns, warm cache (median of $REPS: $(echo "${TMOUNT_WARM[*]}" | tr ' ' '/')) | ${mw} s | - | - |"
  if [[ -n $TRSS_MOUNT ]]; then
    echo "| daemon after mount: VmRSS / VmHWM | $(mib $((TRSS_MOUNT * 1024))) / $(mib $((THWM_MOUNT * 1024))) MiB | - | - |"
  else
    echo "| daemon RSS after mount | daemon pid not found | - | - |"
  fi
  for id in tb_ckptfs ts_ckptfs; do
    if [[ -n ${TLOAD_HWM[$id]:-} ]]; then
      echo "| daemon VmHWM after the timed loads through $id (max over samples) | $(mib $((TLOAD_HWM[$id] * 1024))) MiB | - | - |"
    fi
  done
}
