# shellcheck shell=bash
# The run section of scripts/bench.sh: a training run directory of 200 checkpoints: mount cost,
# first lookup, a checkpoint saved while mounted.
# Sourced by bench.sh (never run on its own): it defines run_section (runs the
# measurements, fills globals) and run_report (prints its tables), with lib.sh's
# helpers and the driver's settings (SIZE, REPS, WORKDIR, SCRATCH, CKPTFS...) in scope.

# run_gen DIR N: N checkpoint-<500*i>/ dirs, each a model.safetensors of 4 F32 tensors (256
# KiB) and a trainer_state.json, as transformers' Trainer leaves them.
run_gen() {
  local dir=$1 n=$2
  [[ -d $dir ]] && { log "reusing $dir"; return 0; }
  rm -rf --one-file-system -- "$dir.tmp"
  log "generating $dir ($n checkpoints)"
  "$PY" - "$dir.tmp" "$n" <<'PYEOF' || die "run_gen failed"
import json, os, struct, sys
root, n = sys.argv[1], int(sys.argv[2])
def save(path, step):
    tensors = {f"layer{i}.weight": struct.pack("<f", float(step)) * (16384) for i in range(4)}
    header, off = {}, 0
    for name, data in tensors.items():
        header[name] = {"dtype": "F32", "shape": [128, 128], "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(tensors.values()))
for i in range(1, n + 1):
    d = os.path.join(root, f"checkpoint-{500 * i}")
    os.makedirs(d)
    save(os.path.join(d, "model.safetensors"), 500 * i)
    with open(os.path.join(d, "trainer_state.json"), "w") as f:
        json.dump({"global_step": 500 * i, "best_model_checkpoint": os.path.join(root, "checkpoint-500")}, f)
PYEOF
  mv -- "$dir.tmp" "$dir"
  GENERATED+=("$dir")
}

# Saves checkpoint-STEP into run DIR as transformers does: the weights and, last, its
# trainer_state.json into a tmp- dir, then a rename (Trainer._save_checkpoint).
run_save() {
  local dir=$1 step=$2
  "$PY" - "$dir" "$step" <<'PYEOF' || die "run_save failed"
import json, os, struct, sys
root, step = sys.argv[1], int(sys.argv[2])
tmp = os.path.join(root, f"tmp-checkpoint-{step}")
os.makedirs(tmp)
data = struct.pack("<f", float(step)) * 16384
h = json.dumps({"w": {"dtype": "F32", "shape": [128, 128], "data_offsets": [0, len(data)]}}).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(tmp, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + data)
with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
    json.dump({"global_step": step, "best_model_checkpoint": os.path.join(root, "checkpoint-500")}, f)
os.rename(tmp, os.path.join(root, f"checkpoint-{step}"))
PYEOF
}

# Seconds from now until `test COND` holds (polled every 20 ms), or "timeout" after 60 s.
wait_secs() {
  local t0 deadline
  t0=$(now_ns); deadline=$((t0 + 60000000000))
  until "$@"; do
    (($(now_ns) > deadline)) && { echo timeout; return 0; }
    sleep 0.02
  done
  elapsed "$t0" "$(now_ns)"
}
run_listed() { [[ -d $1/$2 ]]; }
run_latest_is() { [[ $(readlink "$1/latest" 2>/dev/null) == "$2" ]]; }

run_section() {
  RUNDIR=$WORKDIR/run-$RUN_CHECKPOINTS
  run_gen "$RUNDIR" "$RUN_CHECKPOINTS"
  local mnt=$SCRATCH/mnt/run r mode t0 next
  RUNMOUNT_COLD=() RUNMOUNT_WARM=() RUNOPEN=() RUNVISIBLE=() RUNLATEST=()
  log "run: mount of $RUN_CHECKPOINTS checkpoints, $REPS reps cold + warm"
  for ((r = 1; r <= REPS; r++)); do
    for mode in cold warm; do
      [[ $mode == cold ]] && drop_caches
      ckptfs_mount "$RUNDIR" "$mnt"
      if [[ $mode == cold ]]; then RUNMOUNT_COLD+=("$CKPTFS_MOUNT_SECS"); else RUNMOUNT_WARM+=("$CKPTFS_MOUNT_SECS"); fi
      if [[ $mode == cold ]]; then
        t0=$(now_ns)
        ls "$mnt/views/checkpoint-$((500 * (RUN_CHECKPOINTS / 2)))/" >/dev/null || die "ls inside a checkpoint's views failed"
        RUNOPEN+=("$(elapsed "$t0" "$(now_ns)")")
        next=$((500 * (RUN_CHECKPOINTS + r)))
        run_save "$RUNDIR" "$next"
        RUNVISIBLE+=("$(wait_secs run_listed "$mnt" "checkpoint-$next")")
        RUNLATEST+=("$(wait_secs run_latest_is "$mnt" "checkpoint-$next")")
        rm -rf --one-file-system -- "${RUNDIR:?}/checkpoint-$next"
        log "  cold mount ${CKPTFS_MOUNT_SECS}s; new checkpoint listed after ${RUNVISIBLE[-1]}s, latest after ${RUNLATEST[-1]}s"
      fi
      if [[ -n $CKPTFS_PID ]]; then RUNRSS=$(proc_kb "$CKPTFS_PID" VmRSS); fi
      unmount_one "$mnt" || die "could not unmount $mnt"
    done
  done
}
RUN_CHECKPOINTS=200
RUNRSS=''

run_report() {
  echo
  echo "### run: a run directory of $RUN_CHECKPOINTS checkpoints ($RUNDIR)"
  echo
  echo "| what | value | target | result |"
  echo "|---|---:|---|---|"
  local rc rw
  rc=$(median "${RUNMOUNT_COLD[@]}"); rw=$(median "${RUNMOUNT_WARM[@]}")
  echo "| \`ckptfs mount\` until it returns, cold cache (median of $REPS: $(echo "${RUNMOUNT_COLD[*]}" | tr ' ' '/')) | ${rc} s | <= 1 s | $(verdict "$rc" '<=' 1) |"
  echo "| \`ckptfs mount\` until it returns, warm cache (median of $REPS: $(echo "${RUNMOUNT_WARM[*]}" | tr ' ' '/')) | ${rw} s | <= 1 s | $(verdict "$rw" '<=' 1) |"
  echo "| first \`ls\` of one checkpoint's views (views/NAME/), cold (headers parsed then; $(echo "${RUNOPEN[*]}" | tr ' ' '/')) | $(median "${RUNOPEN[@]}") s | - | - |"
  echo "| a checkpoint saved while mounted (tmp dir + rename) until \`ls MNT\` lists it ($(echo "${RUNVISIBLE[*]}" | tr ' ' '/')) | $(median "${RUNVISIBLE[@]}") s | <= 15 s | $(verdict "$(max_of "${RUNVISIBLE[@]}")" '<=' 15) |"
  echo "| ... until \`latest\` names it ($(echo "${RUNLATEST[*]}" | tr ' ' '/')) | $(median "${RUNLATEST[@]}") s | <= 15 s | $(verdict "$(max_of "${RUNLATEST[@]}")" '<=' 15) |"
  [[ -z $RUNRSS ]] || echo "| daemon VmRSS after the above | $(mib $((RUNRSS * 1024))) MiB | - | - |"
}
