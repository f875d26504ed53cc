# shellcheck shell=bash
# Helpers shared by scripts/bench.sh and its sections (scripts/bench/*.sh): timing,
# mount/unmount with bounded waits, data generation, the contender sampling loop
# and table rows. Sourced by bench.sh, never run on its own.

# ---------------------------------------------------------------- utilities
log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }
on_err() { printf '%s: error: command failed (exit %s) at line %s: %s\n' \
  "$PROG" "$1" "$2" "$3" >&2; }

now_ns() { date +%s%N; }
# seconds between two now_ns stamps, 3 decimals
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", (b-a)/1e9}'; }
# median of the numbers given as arguments
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END{
  if (NR==0) {print "nan"; exit}
  if (NR%2) print v[(NR+1)/2]; else printf "%.6g\n", (v[NR/2]+v[NR/2+1])/2}'; }
max_of() { printf '%s\n' "$@" | sort -g | tail -n 1; }
# fmt helpers
mib() { awk -v b="$1" 'BEGIN{printf "%.0f", b/1048576}'; }
gib() { awk -v b="$1" 'BEGIN{printf "%.2f", b/1073741824}'; }

size_to_bytes() {
  local s=$1 n u
  [[ $s =~ ^([0-9]+)([KMGTkmgt]?)(i?[Bb]?)$ ]] || die "bad size '$s' (use e.g. 512M, 2G)"
  n=${BASH_REMATCH[1]} u=${BASH_REMATCH[2]^^}
  case $u in
    '') echo "$n" ;; K) echo $((n << 10)) ;; M) echo $((n << 20)) ;;
    G) echo $((n << 30)) ;; T) echo $((n << 40)) ;;
  esac
}

sum_sizes() { local t=0 f s; for f in "$@"; do s=$(stat -c %s -- "$f") || return 1; t=$((t + s)); done; echo "$t"; }

pid_alive() {
  local st
  [[ -n ${1:-} && -r /proc/$1/stat ]] || return 1
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [[ -n $st && $st != Z && $st != X ]]
}

# mounted? (reads mountinfo; never stats the mountpoint, so a hung FUSE
# daemon cannot hang the check)
is_mounted() { awk -v m="$1" '$5==m {f=1} END {exit !f}' /proc/self/mountinfo; }

drop_caches() {
  timeout 120 sync || die "sync timed out or failed (a FUSE daemon hung?)"
  echo 3 > /proc/sys/vm/drop_caches || die "cannot write /proc/sys/vm/drop_caches (need root)"
}

# ------------------------------------------------------------ mount registry
declare -A MOUNT_PID=()   # mountpoint -> daemon pid ('' if unknown)
declare -A MOUNT_UMOUNT=() # mountpoint -> unmount command (eval'd words)

register_mount() { MOUNT_PID[$1]=${2:-}; MOUNT_UMOUNT[$1]=${3:-fusermount3 -u}; }

# Unmount one of our mounts, bounded, then make sure its daemon is gone.
unmount_one() {
  local mnt=$1 pid=${MOUNT_PID[$1]:-} cmd=${MOUNT_UMOUNT[$1]:-fusermount3 -u} i
  if is_mounted "$mnt"; then
    # shellcheck disable=SC2086
    timeout 20 $cmd "$mnt" >/dev/null 2>&1 ||
      { sleep 1; timeout 20 fusermount3 -u "$mnt" >/dev/null 2>&1; } ||
      { log "unmount of $mnt failed; detaching lazily"
        timeout 20 fusermount3 -uz "$mnt" >/dev/null 2>&1 || timeout 20 umount -l "$mnt" || true; }
  fi
  if [[ -n $pid ]]; then
    for ((i = 0; i < 100; i++)); do pid_alive "$pid" || break; sleep 0.1; done
    if pid_alive "$pid"; then
      log "daemon $pid for $mnt still running after unmount; sending TERM"
      kill -TERM "$pid" 2>/dev/null || true; sleep 2
      pid_alive "$pid" && { kill -KILL "$pid" 2>/dev/null || true; }
    fi
    wait "$pid" 2>/dev/null || true   # reap if it was our child
  fi
  unset 'MOUNT_PID[$mnt]' 'MOUNT_UMOUNT[$mnt]'
  ! is_mounted "$mnt"
}


# ------------------------------------------------------------------ data
# gen_data DIR ARGS...: run the generator into DIR unless DIR already exists.
# Generated into DIR.tmp and renamed, so an existing DIR is always complete.
gen_data() {
  local dir=$1; shift
  [[ -d $dir ]] && { log "reusing $dir"; return 0; }
  local gen=$REPO/scripts/make_checkpoint.py
  [[ -f $gen ]] || die "generator $gen not found"
  rm -rf --one-file-system -- "$dir.tmp"
  log "generating $dir ($*)"
  local t0; t0=$(now_ns)
  timeout 3600 "$PY" "$gen" "$dir.tmp" "$@" >"$SCRATCH/logs/gen-$(basename "$dir").log" 2>&1 ||
    { tail -n 30 "$SCRATCH/logs/gen-$(basename "$dir").log" >&2; rm -rf --one-file-system -- "$dir.tmp"
      die "generator failed: $gen $dir $*"; }
  mv -- "$dir.tmp" "$dir"
  GENERATED+=("$dir")
  log "generated $dir in $(elapsed "$t0" "$(now_ns)") s"
}

# shard files of a checkpoint dir, in index order (all *.safetensors if no index)
shard_files() {
  "$PY" - "$1" <<'EOF'
import glob, json, os, sys
d = sys.argv[1]
idx = sorted(glob.glob(os.path.join(d, "*.safetensors.index.json")))
if idx:
    wm = json.load(open(idx[0]))["weight_map"]
    seen = []
    for v in wm.values():
        if v not in seen:
            seen.append(v)
    names = sorted(seen)
else:
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(d, "*.safetensors")))
for n in names:
    print(os.path.join(d, n))
EOF
}

# --------------------------------------------------------------- mounting
# ckptfs_mount SRC MNT [MOUNT OPTIONS...]: `ckptfs mount` returns once the mount answers.
ckptfs_mount() {
  local src=$1 mnt=$2 pid='' p comm
  shift 2
  mkdir -p -- "$mnt"
  is_mounted "$mnt" && die "$mnt is already mounted"
  local rc=0 t0
  t0=$(now_ns)
  timeout "$MOUNT_TIMEOUT" "$CKPTFS" mount "$@" "$src" "$mnt" >>"$SCRATCH/logs/ckptfs.log" 2>&1 || rc=$?
  # shellcheck disable=SC2034  # CKPTFS_MOUNT_SECS and CKPTFS_PID: read by the sections
  CKPTFS_MOUNT_SECS=$(elapsed "$t0" "$(now_ns)")   # until `ckptfs mount` returned
  if ((rc == 124)); then die "ckptfs mount $src $mnt did not return within ${MOUNT_TIMEOUT}s"
  elif ((rc != 0)); then tail -n 20 "$SCRATCH/logs/ckptfs.log" >&2; die "ckptfs mount $src $mnt failed (exit $rc)"; fi
  is_mounted "$mnt" || die "ckptfs mount returned but $mnt is not mounted"
  # the daemon: newest process whose command line is 'ckptfs mount ... MNT'
  for p in $(pgrep -f -- "ckptfs mount .*${mnt}( |\$)" || true); do
    comm=$(cat "/proc/$p/comm" 2>/dev/null || true)
    [[ $comm == timeout ]] && continue
    pid=$p
  done
  [[ -n $pid ]] || log "warning: could not find the ckptfs daemon pid for $mnt"
  register_mount "$mnt" "$pid" "$CKPTFS umount"
  # shellcheck disable=SC2034
  CKPTFS_PID=$pid
}

# fg_mount NAME MNT CMD...: run CMD (a FUSE daemon kept in the foreground, so
# that we own its pid) in the background, logging to logs/NAME.log, and wait,
# bounded by MOUNT_TIMEOUT, until MNT is mounted; die if it exits first.
fg_mount() {
  local name=$1 mnt=$2 pid i
  shift 2
  mkdir -p -- "$mnt"
  is_mounted "$mnt" && die "$mnt is already mounted"
  "$@" >>"$SCRATCH/logs/$name.log" 2>&1 &
  pid=$!
  register_mount "$mnt" "$pid" "fusermount3 -u"
  for ((i = 0; i < MOUNT_TIMEOUT * 20; i++)); do
    is_mounted "$mnt" && return 0
    pid_alive "$pid" || { cat "$SCRATCH/logs/$name.log" >&2; die "$name exited before mounting $mnt"; }
    sleep 0.05
  done
  die "$name did not mount $mnt within ${MOUNT_TIMEOUT}s"
}

# passthrough_ll SRC MNT with its defaults, in the foreground (-f) only so we own its pid.
ptll_mount() { fg_mount passthrough_ll "$2" "$PTLL" -f -o "source=$1" "$2"; }

# squashfuse_ll IMG MNT in the foreground (-f) only so we own its pid; otherwise defaults.
sqfs_mount() { fg_mount squashfuse_ll "$2" squashfuse_ll -f "$1" "$2"; }

has_fn() { declare -F "$1" >/dev/null; }

# default reader: cat FILES > /dev/null; prints bytes read (sum of sizes)
read_files() {
  local rc=0
  timeout --kill-after=10 "$READ_TIMEOUT" cat -- "$@" >/dev/null || rc=$?
  ((rc == 124 || rc == 137)) && die "read timed out after ${READ_TIMEOUT}s: $*"
  ((rc == 0)) || die "read failed (exit $rc): $*"
}

declare -A SAMPLES=() BYTES=() RESIDENT=()

# resident_pct FILE...: how much of the files is in the page cache (fincore), in percent
resident_pct() {
  timeout 30 fincore -nb -o RES,SIZE -- "$@" 2>/dev/null |
    awk '{r += $1; t += $2} END {if (NR == 0) print "?"; else printf "%.0f", (t > 0 ? 100 * r / t : 0)}'
}

# run_sample ID cold|warm|cached|fresh: one timed read, appended to SAMPLES[ID,MODE]
# as MB/s. cold: drop_caches first; warm: two untimed reads first; fresh: neither (a
# new mount from setup, whatever is in the page cache stays). Two, not one: the second
# touch of a page-cache page moves it to the active LRU list (folio_mark_accessed), about
# a fifth of a warm read's time, and the files `cat` reads straight from disk have been
# read many times before; so every contender's timed read is at least a third touch.
# cached: drop_caches, then the contender's backing files (c_ID_backing) read twice,
# untimed, BEFORE setup, so a FUSE contender's mount is new and its file's own page
# cache empty: the timed read decodes from page-cached backing files. How much of them
# was still resident just before the timed read goes to RESIDENT[ID] (fincore).
run_sample() {
  local id=$1 mode=$2 files bytes t0 t1 secs secs_own='' mbps out='' backing=() res=''
  if [[ $mode == cached ]]; then
    has_fn "c_${id}_backing" || die "$id: no c_${id}_backing: cannot run it cached"
    mapfile -t backing < <("c_${id}_backing")
    ((${#backing[@]})) || die "$id: no backing files"
    drop_caches
    for _ in 1 2; do read_files "${backing[@]}"; done
  fi
  if has_fn "c_${id}_setup"; then "c_${id}_setup"; fi
  mapfile -t files < <("c_${id}_files")
  ((${#files[@]})) || die "$id: no files to read"
  bytes=$(sum_sizes "${files[@]}") || die "$id: cannot stat ${files[*]}"
  case $mode in
    warm)
      # c_ID_prime, where a contender has one, does the untimed reads instead of its
      # reader: the page cache is filled alike, without a loader's start-up (CUDA) each time
      for _ in 1 2; do
        if has_fn "c_${id}_prime"; then "c_${id}_prime" "${files[@]}" >/dev/null
        elif has_fn "c_${id}_read"; then "c_${id}_read" "${files[@]}" >/dev/null
        else read_files "${files[@]}" >/dev/null; fi
      done ;;
    cold) drop_caches ;;
    cached)
      res=$(resident_pct "${backing[@]}")
      RESIDENT[$id]="${RESIDENT[$id]:-} $res" ;;
    fresh) ;;
    *) die "run_sample: unknown mode $mode" ;;
  esac
  t0=$(now_ns)
  if has_fn "c_${id}_read"; then
    out=$("c_${id}_read" "${files[@]}")
  else
    read_files "${files[@]}"
  fi
  t1=$(now_ns)
  if has_fn "c_${id}_teardown"; then "c_${id}_teardown"; fi
  secs=$(elapsed "$t0" "$t1")
  # A reader may print the bytes it read, or "BYTES SECONDS" when it times itself (to
  # leave out its own start-up: forking readers, parsing headers).
  if [[ -n $out ]]; then
    read -r bytes secs_own <<<"$out"
    [[ -n $secs_own ]] && secs=$secs_own
  fi
  mbps=$(awk -v b="$bytes" -v s="$secs" 'BEGIN{printf "%.0f", (s > 0 ? b/1e6/s : 0)}')
  SAMPLES[$id,$mode]="${SAMPLES[$id,$mode]:-} $mbps"
  BYTES[$id]=$bytes
  log "  $mode $id: $(gib "$bytes") GiB in ${secs}s = ${mbps} MB/s${res:+; backing files ${res}% resident before}"
}

# sample_rounds MODES ID...: REPS rounds of run_sample, each round every mode
# and, within a mode, every contender in turn (A B C A B C), so that what
# drifts during the run (other work, the host's cache) hits all of them alike.
sample_rounds() {
  local modes=$1 r mode id
  shift
  for ((r = 1; r <= REPS; r++)); do
    log "rep $r/$REPS"
    for mode in $modes; do
      for id in "$@"; do run_sample "$id" "$mode"; done
    done
  done
}

# mount_rounds SRC MNT COLD WARM [HOOK]: REPS rounds of a cold (drop_caches
# first) then a warm `ckptfs mount SRC MNT`, appending CKPTFS_MOUNT_SECS (until
# the command returned) to the arrays named COLD and WARM; HOOK, a function,
# runs while each mount is up (e.g. to read the daemon's RSS).
mount_rounds() {
  local src=$1 mnt=$2 hook=${5:-} r mode
  local -n mount_cold_=$3 mount_warm_=$4
  for ((r = 1; r <= REPS; r++)); do
    for mode in cold warm; do
      [[ $mode == cold ]] && drop_caches
      ckptfs_mount "$src" "$mnt"
      if [[ $mode == cold ]]; then mount_cold_+=("$CKPTFS_MOUNT_SECS"); else mount_warm_+=("$CKPTFS_MOUNT_SECS"); fi
      [[ -z $hook ]] || "$hook"
      log "  $mode mount: ${CKPTFS_MOUNT_SECS}s"
      unmount_one "$mnt" || die "could not unmount $mnt"
    done
  done
}

# ---------------------------------------------------------- daemon stats
# stats_fields MNT KEY...: values of MNT/.ckptfs/stats.json on one line; a KEY
# may be dotted (remote.bytes_fetched); a missing one prints '-'
stats_fields() {
  local mnt=$1; shift
  timeout 30 "$PY" - "$mnt/.ckptfs/stats.json" "$@" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
out = []
for key in sys.argv[2:]:
    v = j
    for part in key.split("."):
        v = v.get(part, "-") if isinstance(v, dict) else "-"
    out.append(str(v))
print(" ".join(out))
EOF
}
# daemon_bytes_read MNT: stats.json's bytes_read (what the daemon has served)
daemon_bytes_read() { stats_fields "$1" bytes_read 2>/dev/null || echo 0; }

# ----------------------------------------------------------- /proc reads
proc_kb() { awk -v k="$2:" '$1==k {print $2}' "/proc/$1/status" 2>/dev/null; }
# CPU seconds (user + system, all threads) a process has used so far
proc_cpu() {
  [[ -n $1 && -r /proc/$1/stat ]] || { echo 0; return 0; }
  sed 's/.*) //' "/proc/$1/stat" |
    awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($12 + $13) / hz}'
}

# ------------------------------------------------------------ table rows
verdict() { # value op target -> PASS/MISS
  awk -v v="$1" -v t="$3" -v op="$2" 'BEGIN{
    if (v == "" || v == "nan") {print "n/a"; exit}
    ok = (op == ">=") ? (v >= t) : (v <= t); print (ok ? "PASS" : "MISS")}'
}

# medians MODES ID...: fills MED[ID,MODE] with the median of each sample list,
# so that ratio rows can be printed before the contender rows.
medians() {
  local modes=$1 id mode
  shift
  for id in "$@"; do
    for mode in $modes; do
      # shellcheck disable=SC2086,SC2004  # split the sample list; MED is associative (report)
      MED[$id,$mode]=$(median ${SAMPLES[$id,$mode]})
    done
  done
}

# contender_rows MODES ID...: one table row per contender with median + samples
# per mode (and, for cached, how much of its backing files was resident before
# each timed read); fills MED[ID,MODE].
contender_rows() {
  local modes=$1 id mode row sl
  shift
  medians "$modes" "$@"
  for id in "$@"; do
    row="| $("c_${id}_label") | $(awk -v b="${BYTES[$id]}" 'BEGIN{printf "%.0f", b/1e6}')"
    for mode in $modes; do
      read -ra sl <<<"${SAMPLES[$id,$mode]}"
      row+=" | ${MED[$id,$mode]} | $(IFS=/; echo "${sl[*]}")"
      if [[ $mode == cached ]]; then
        read -ra sl <<<"${RESIDENT[$id]:-}"
        row+=" | $(IFS=/; echo "${sl[*]}")"
      fi
    done
    echo "$row |"
  done
}

# ratio_rows "NUM DEN MODE TARGET"...
ratio_rows() {
  local r num den mode tgt v
  for r in "$@"; do
    read -r num den mode tgt <<<"$r"
    v=$(awk -v a="${MED[$num,$mode]}" -v b="${MED[$den,$mode]}" 'BEGIN{if (b > 0) printf "%.2f", a/b; else print "nan"}')
    if [[ $tgt == - ]]; then
      echo "| ${num} / ${den} | $mode | ${v}x | - | - |"
    else
      echo "| ${num} / ${den} | $mode | ${v}x | >= ${tgt}x | $(verdict "$v" '>=' "$tgt") |"
    fi
  done
}

