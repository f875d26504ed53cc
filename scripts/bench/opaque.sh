# shellcheck shell=bash
# The opaque section of scripts/bench.sh: mount time and VmHWM of tensors inside Python objects
# vs a plain state dict.
# Sourced by bench.sh (never run on its own): it defines opaque_section (runs the
# measurements, fills globals) and opaque_report (prints its tables), with lib.sh's
# helpers and the driver's settings (SIZE, REPS, WORKDIR, SCRATCH, CKPTFS...) in scope.

# Mount cost of a torch.save whose tensors sit inside values no allowlist knows (issue 23):
# OPAQUE_TENSORS tensors as a plain state dict, and the same count as half class instances
# holding a tensor (a class of the writer's, which ckptfs never needs) and half numpy
# arrays (pickle_protocol=4: served from inside data.pkl), beside a Namespace, numpy
# scalars and the three RNG states. Warm `ckptfs mount` until it returns, and the daemon's
# VmHWM after it, median of --reps; the target is opaque <= 1.5x plain for both.
opaque_gen() {
  local dir=$1
  [[ -d $dir ]] && { log "reusing $dir"; return 0; }
  rm -rf --one-file-system -- "$dir.tmp"
  mkdir -p -- "$dir.tmp/plain" "$dir.tmp/opaque"
  log "generating $dir ($OPAQUE_TENSORS tensors, plain and opaque)"
  "$PY" - "$dir.tmp" "$OPAQUE_TENSORS" <<'PYEOF' >"$SCRATCH/logs/gen-opaque.log" 2>&1 ||
import argparse, pathlib, random, sys
import numpy as np, torch
class Holder:
    def __init__(self, w): self.w = w
out, n = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
plain = {f"layer{i}.w": torch.randn(16) for i in range(n)}
opaque = {f"layer{i}": Holder(torch.randn(16)) for i in range(n // 2)}
opaque.update({f"np{i}": np.random.rand(16).astype(np.float32) for i in range(n - n // 2)})
extra = {"args": argparse.Namespace(lr=1e-3, out=pathlib.Path("runs/x"), tags={"a"}),
         "loss": np.float64(0.25), "rng": {"python": random.getstate(),
         "numpy": np.random.get_state(), "torch": torch.random.get_rng_state()}}
torch.save({"model": plain}, f"{out}/plain/state.pt", pickle_protocol=4)
torch.save({"model": opaque, **extra}, f"{out}/opaque/state.pt", pickle_protocol=4)
PYEOF
    { tail -n 30 "$SCRATCH/logs/gen-opaque.log" >&2; die "generating $dir failed"; }
  mv -- "$dir.tmp" "$dir"
  GENERATED+=("$dir")
}

opaque_section() {
  OPAQUEDIR=$WORKDIR/opaque-$OPAQUE_TENSORS
  opaque_gen "$OPAQUEDIR"
  local kind r mnt=$SCRATCH/mnt/opaque
  log "opaque: warm mount cost, plain vs opaque, $REPS reps"
  read_files "$OPAQUEDIR/plain/state.pt" "$OPAQUEDIR/opaque/state.pt"
  for ((r = 1; r <= REPS; r++)); do
    for kind in plain opaque; do
      ckptfs_mount "$OPAQUEDIR/$kind/state.pt" "$mnt"
      OPAQUE_SECS[$kind]+=" $CKPTFS_MOUNT_SECS"
      [[ -n $CKPTFS_PID ]] && OPAQUE_HWM[$kind]+=" $(proc_kb "$CKPTFS_PID" VmHWM)"
      log "  $kind mount: ${CKPTFS_MOUNT_SECS}s"
      unmount_one "$mnt" || die "could not unmount $mnt"
    done
  done
}
OPAQUE_TENSORS=20000
declare -A OPAQUE_SECS=([plain]='' [opaque]='') OPAQUE_HWM=([plain]='' [opaque]='')

opaque_report() {
  local ps os ph oh
  # shellcheck disable=SC2086  # word lists
  ps=$(median ${OPAQUE_SECS[plain]}); os=$(median ${OPAQUE_SECS[opaque]})
  # shellcheck disable=SC2086
  ph=$(median ${OPAQUE_HWM[plain]:-0}); oh=$(median ${OPAQUE_HWM[opaque]:-0})
  echo
  echo "### opaque: $OPAQUE_TENSORS tensors inside Python objects vs a plain state dict ($OPAQUEDIR)"
  echo
  echo "| warm mount, median of $REPS | plain | opaque | opaque / plain | target | result |"
  echo "|---|---:|---:|---:|---|---|"
  local rt rh
  rt=$(awk -v a="$os" -v b="$ps" 'BEGIN{printf "%.2f", (b > 0 ? a/b : 0)}')
  rh=$(awk -v a="$oh" -v b="$ph" 'BEGIN{printf "%.2f", (b > 0 ? a/b : 0)}')
  echo "| \`ckptfs mount\` until it returns | ${ps} s | ${os} s | ${rt} | <= 1.5 | $(verdict "$rt" '<=' 1.5) |"
  echo "| daemon VmHWM after mount | $(mib $((ph * 1024))) MiB | $(mib $((oh * 1024))) MiB | ${rh} | <= 1.5 | $(verdict "$rh" '<=' 1.5) |"
}
