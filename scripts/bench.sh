#!/usr/bin/env bash
# ckptfs benchmark: every contender side by side in ONE run, ratios first.
#
#   scripts/bench.sh [--size 2G] [--workdir DIR] [--reps N] [--keep] [--no-build]
#                    [--level N] [--frame-size SIZE] [--sections plain,mount,zstd,torch,remote,tf,run,deepspeed,opaque]
#                    [SECTION...]
#
# What it measures (see DESIGN.md section 3, "Performance rules"):
#   * sequential read of MNT/model.safetensors through ckptfs (merged view)
#     vs `cat` of the shard files straight from disk
#     vs the same shard files through libfuse's passthrough_ll example
#     each cold (fresh mount + drop_caches) and warm (fresh mount, read twice untimed,
#     time the third: see run_sample), interleaved A B C A B C, median of --reps samples;
#   * mount cost of a headers-only checkpoint (2000 shards, 200000 tensors):
#     time until `ckptfs mount` returns, daemon RSS after mount and after
#     `ls -R MNT/tensors`;
#   * zstd (the same data packed by `ckptfs pack --level N` into seekable .zst
#     shards, plain and --byte-group): sequential read of MNT/model.safetensors
#     through ckptfs (both packs)
#     vs `squashfuse_ll` reading the plain shard files from a squashfs image
#     made by `mksquashfs -comp zstd -Xcompression-level N` (same level)
#     vs `zstd -d -T1` of the .zst shards to /dev/null, each cold (fresh
#     mount + drop_caches) and cached (drop_caches, the contender's backing
#     files read twice untimed, then a fresh mount: the backing files are in
#     the page cache, the FUSE file's own page cache is empty), interleaved,
#     median of --reps; then compression ratios (plain, byte-grouped, squashfs)
#     of the random normal bench data and of trained weights (an MLP trained on
#     CPU by scripts/make_trained_checkpoint.py, BF16, torch.save; generated
#     once into the workdir, about a minute), and the trained weights' read
#     through ckptfs (both packs) vs squashfuse_ll, cold and cached; then random
#     reads of 32 whole tensors (latency, and bytes decoded per bytes requested
#     from stats.json) through ckptfs vs the same byte ranges through
#     squashfuse_ll; then the daemon's peak RSS (VmHWM) with --cache-size 256M
#     while two readers go through the whole checkpoint (8x the cache at 2G).
#   * torch: `torch.load(MNT/pytorch_model.bin, weights_only=True)` (the merged
#     torch.save-format view) through ckptfs vs torch.load of a physical copy of
#     the same merged file on local disk (copied once from the mount into the
#     workdir), each cold (fresh mount + drop_caches) and warm (fresh mount, one
#     untimed load first), interleaved, median of --reps. Each timed load is
#     its own `python3 -c` process that imports torch before the timer and
#     times the torch.load call only (eager in torch 1.13: every storage is
#     read). Two sources: a transformers-like sharded torch checkpoint of about
#     --size written by torch.save (4 pytorch_model-0000N-of-00004.bin shards
#     + pytorch_model.bin.index.json, ~320 bf16/f16/f32 tensors of a llama-like
#     stack; WORKDIR/torch/), and the plain section's safetensors shards (the
#     safetensors -> torch view). Warm rows also show how much of the file
#     was in the page cache just before the timed load (fincore). Then the
#     time until `ckptfs mount` of the sharded torch source returns (cold and
#     warm cache) and the daemon's RSS.
#   * remote (HTTP): an F32 checkpoint of --size (32 tensors in 8 shards,
#     64 MiB each at 2G; WORKDIR/bench-f32-*) served by an nginx the script
#     starts on a free loopback port (Debian's default tuning: worker_processes
#     auto, sendfile, tcp_nopush; access log with $body_bytes_sent per request)
#     and always stops. Its files stay in the page cache (one untimed read
#     first; no drop_caches but where said). Bytes the server sent come from
#     the access log, counted once it has been quiet for 0.5 s.
#     (a) time to first tensor: `ckptfs mount URL` until it returns + numpy.load
#         of one tensor's MNT/tensors/.../<leaf>.npy (a tensor in the middle of
#         the checkpoint; numpy imported before the timer, content checked
#         after it), fresh mount, median of --reps; bytes sent during the mount
#         and during the load, target: load <= tensor + 2 MiB, mount + load <=
#         tensor + 2 MiB + what a mount needs (shard headers, index, small files);
#         for reference, curl's time for a range GET of the same bytes;
#     (b) sequential read of MNT/model.safetensors (`cat`, fresh mount, mount
#         not timed) vs one `curl` process downloading the shards one after
#         another (one kept-alive connection) to /dev/null (the target pair)
#         and to files in the workdir, interleaved, median of --reps MB/s; bytes
#         the server sent during each ckptfs read (no block fetched twice) and
#         the daemon's CPU seconds per read;
#     (c) --cache-dir: mount with a fresh --cache-dir, read the merged file,
#         unmount, drop_caches, mount again with the same dir, read it again:
#         bytes the server sent during the second read (nginx log and
#         stats.json), target 0, and its time.
#   * opaque: warm `ckptfs mount` time and the daemon's VmHWM for a torch.save of
#     20000 tensors inside Python objects (class instances, numpy arrays at protocol
#     4, beside a Namespace and RNG states) against a plain state dict of as many
#     tensors; target opaque <= 1.5x plain (docs/formats.md, "Any other Python value").
#   The report's header also says whether libfuse can splice 1 MiB read
#   replies here (pipe size limit) and whether a DAMON pageout scheme is
#   evicting page cache (it makes "warm" data go cold within seconds).
#   * tf: TensorFlow bundles written by scripts/make_tf_checkpoint.py: mount cost
#     of a 50,000-variable bundle (time until `ckptfs mount` returns, cold and
#     warm; daemon RSS after mount), then sequential read of MNT/model.safetensors
#     of a --size bundle (F32 variables of 64 MiB in 8 data files) vs `cat` of
#     its data files, cold and warm, interleaved, median of --reps.
#   * run: a training run directory of 200 HF-Trainer-shaped
#     checkpoint-N/ dirs (small safetensors each): time until `ckptfs mount`
#     returns, cold and warm, daemon RSS; the first lookup inside one checkpoint
#     (its headers parsed then); and the time until a checkpoint saved while
#     mounted (written to a temporary dir, then renamed, as transformers does)
#     shows in `ls MNT`, and until `latest` names it.
#   * deepspeed: a ZeRO-3 checkpoint over 4 ranks (bf16 run, fp32 master weights and Adam
#     moments; about 2 GiB of rank files) written by tests/deepspeed/make_deepspeed_checkpoint.py:
#     time until `ckptfs mount` of its tag dir returns (cold and warm) and the daemon's RSS,
#     then sequential read of the consolidated MNT/model.safetensors (every tensor gathered
#     from 4 ranks' partitions) vs `cat` of the 4 optimizer rank files, cold and warm,
#     interleaved, median of --reps.
#   --sections (or bare section names: `bench.sh remote`) picks a subset
#   (default all eight, in one run); --level defaults to 3, --frame-size to
#   pack's own default.
# Targets are printed next to the figures as PASS/MISS. A MISS does not fail the
# script; a contender that cannot run does (exit 1).
#
# Needs root (drop_caches, /dev/fuse). Installs missing Debian packages itself.
# Data lives in the workdir (default /var/tmp/ckptfs-bench), never in the repo:
# data already there is reused and left alone; data generated by this run is
# deleted on exit unless --keep (keep it to make the next run faster). Results
# are also saved to WORKDIR/results/; logs are kept in WORKDIR/run.*/ on failure.
#
# Environment overrides: CKPTFS_BIN (binary to bench, implies no build),
# BENCH_READ_TIMEOUT (s, per read, default 900), BENCH_MOUNT_TIMEOUT (s, 120).
#
# Adding a contender: define c_<id>_label and c_<id>_files, and optionally
# c_<id>_prepare (once), c_<id>_setup / c_<id>_teardown (per sample, e.g.
# mount/unmount) and c_<id>_read (replaces the default `cat FILES >
# /dev/null`; must print the number of bytes it consumed if that differs from
# the files' sizes), then append <id> to CONTENDERS (cold and warm) or
# ZCONTENDERS (cold and cached, zstd section; also define c_<id>_backing, the
# files on disk the contender reads: .zst shards, squashfs image) or
# RCONTENDERS (fresh: a new mount, no drop_caches; remote section) and any
# ratio rows to RATIOS, ZRATIOS or RRATIOS.
# Torch contenders are t_<id>_label and t_<id>_file (the one file torch.load
# reads), optional t_<id>_setup / t_<id>_teardown, listed in TCONTENDERS, with
# ratio rows (mounted / physical seconds, target <=) in TRATIOS.
# The sampling loop and the table builder need no change.

set -Eeuo pipefail

PROG=bench.sh
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3

SIZE=2G
WORKDIR=/var/tmp/ckptfs-bench
REPS=3
KEEP=0
NO_BUILD=0
READ_TIMEOUT=${BENCH_READ_TIMEOUT:-900}
MOUNT_TIMEOUT=${BENCH_MOUNT_TIMEOUT:-120}
SHARDS=8
HDR_SHARDS=2000
HDR_TENSORS=200000
LEVEL=3
FRAME=''            # --frame-size for ckptfs pack; '' = its default
SECTIONS=plain,mount,zstd,torch,remote,tf,run,deepspeed,opaque
RSS_CACHE=256M      # --cache-size for the peak RSS measurement
RSS_SLACK_MIB=64    # target: VmHWM <= cache + this
RANDOM_TENSORS=32
RANDOM_SEED=1
# the zstd section's trained weights: make_trained_checkpoint.py arguments (a
# 2048-wide, 4-layer MLP, 16.8M parameters; 250 Adam steps of 4 samples on a task
# of 16 latent dimensions: about a minute on 2 cores with Debian's torch)
TW_ARGS=(--width 2048 --depth 4 --steps 250 --batch 4 --lr 3e-4 --latent 16 --seed 0 --dtype bfloat16)
TSHARDS=4           # shards of the torch section's generated checkpoint
RTENSORS=32         # tensors of the remote section's checkpoint (64 MiB each at 2G)
NGINX=/usr/sbin/nginx

# ---------------------------------------------------------------- utilities
log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }
on_err() { printf '%s: error: command failed (exit %s) at line %s: %s\n' \
  "$PROG" "$1" "$2" "$3" >&2; }
trap 'on_err $? $LINENO "$BASH_COMMAND"' ERR

usage() {
  sed -n '2,/^$/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
}

now_ns() { date +%s%N; }
# seconds between two now_ns stamps, 3 decimals
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", (b-a)/1e9}'; }
# median of the numbers given as arguments
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END{
  if (NR==0) {print "nan"; exit}
  if (NR%2) print v[(NR+1)/2]; else printf "%.3f\n", (v[NR/2]+v[NR/2+1])/2}'; }
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

# ------------------------------------------------------------------ nginx
# One nginx at a time (remote section): its config, pid file and logs in NGINX_DIR.
NGINX_DIR='' NGINX_PORT=''

free_port() {   # a loopback port nothing listens on right now (the kernel's pick)
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
nginx_version() { "$NGINX" -v 2>&1 | sed 's|.*nginx/||'; }

# nginx_start ROOT PROBE: nginx serving ROOT on a free loopback port (NGINX_PORT),
# with Debian's default tuning (worker_processes auto, sendfile, tcp_nopush,
# default keep-alive) and an access log line per request: msec method uri status
# body_bytes_sent "range" request_time connection. Up once `curl -I` of ROOT/PROBE answers 200.
nginx_start() {
  local root=$1 probe=$2 try d conf
  [[ -x $NGINX ]] || die "$NGINX missing (apt-get install nginx-light)"
  d=$SCRATCH/nginx conf=$SCRATCH/nginx/nginx.conf
  mkdir -p -- "$d"
  for ((try = 1; try <= 5; try++)); do
    NGINX_PORT=$(free_port) || die "cannot pick a free loopback port"
    cat >"$conf" <<EOF
user root;
worker_processes auto;
pid $d/nginx.pid;
error_log $d/error.log;
events { worker_connections 768; }
http {
  sendfile on;
  tcp_nopush on;
  default_type application/octet-stream;
  log_format bytes '\$msec \$request_method \$uri \$status \$body_bytes_sent "\$http_range" \$request_time \$connection';
  access_log $d/access.log bytes;
  client_body_temp_path $d/body;
  proxy_temp_path $d/proxy;
  fastcgi_temp_path $d/fastcgi;
  uwsgi_temp_path $d/uwsgi;
  scgi_temp_path $d/scgi;
  server { listen 127.0.0.1:$NGINX_PORT; root $root; }
}
EOF
    rm -f -- "$d/nginx.pid"
    if timeout 10 "$NGINX" -c "$conf" >>"$SCRATCH/logs/nginx.log" 2>&1; then
      NGINX_DIR=$d   # from here on, cleanup stops it
      timeout 15 curl -sSf -o /dev/null -I --retry 5 --retry-connrefused --retry-delay 1 \
        "http://127.0.0.1:$NGINX_PORT/$probe" ||
        { tail -n 5 "$d/error.log" >&2; die "nginx on 127.0.0.1:$NGINX_PORT does not serve $root/$probe"; }
      log "nginx $(nginx_version) serving $root on 127.0.0.1:$NGINX_PORT"
      return 0
    fi
    log "nginx did not start on port $NGINX_PORT (try $try): $(tail -n 1 "$SCRATCH/logs/nginx.log")"
  done
  die "nginx did not start (see $SCRATCH/logs/nginx.log, $d/error.log)"
}

# Stop our nginx (if any), bounded; TERM/KILL its master if `-s stop` fails.
nginx_stop() {
  [[ -n $NGINX_DIR ]] || return 0
  local pid i
  pid=$(cat "$NGINX_DIR/nginx.pid" 2>/dev/null || true)
  timeout 10 "$NGINX" -c "$NGINX_DIR/nginx.conf" -s stop >/dev/null 2>&1 ||
    { [[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null; } || true
  if [[ -n $pid ]]; then
    for ((i = 0; i < 100; i++)); do pid_alive "$pid" || break; sleep 0.1; done
    pid_alive "$pid" && { log "nginx $pid still running; sending KILL"; kill -KILL "$pid" 2>/dev/null || true; }
  fi
  NGINX_DIR=''
}

# nginx_mark: the access log's line count once no line has come for 0.5 s
# (nginx writes a line as each request ends), at most 15 s
nginx_mark() {
  local n last=-1 i
  for ((i = 0; i < 30; i++)); do
    n=$(wc -l <"$NGINX_DIR/access.log")
    [[ $n == "$last" ]] && break
    last=$n
    sleep 0.5
  done
  echo "$n"
}

# nginx_sent FROM TO: "bytes requests errors" of access-log lines FROM+1..TO
# (every request; errors: status >= 400, but for 404s to HEADs, since a mount asks for
# optional files such as tokenizer_config.json by name, and a 403 or 404 to the GET of a
# directory, since a mount asks once for a JSON listing, which tells a run from one
# checkpoint and which this nginx, without autoindex, refuses)
nginx_sent() {
  awk -v a="$1" -v b="$2" 'NR > a && NR <= b {s += $5; n++
      e += ($4 >= 400 && !($4 == 404 && $2 == "HEAD") && !(($4 == 403 || $4 == 404) && $2 == "GET" && $3 ~ /\/$/))}
    END {printf "%.0f %d %d\n", s, n, e}' "$NGINX_DIR/access.log"
}

SCRATCH=''
GENERATED=()
cleanup() {
  local rc=$? mnt left=0
  trap - ERR
  set +e
  for mnt in "${!MOUNT_PID[@]}"; do unmount_one "$mnt" || { left=1; log "could not unmount $mnt"; }; done
  nginx_stop   # after the mounts that talk to it, before the scratch dir holding its config
  # scratch (passthrough_ll build, daemon and build logs, mountpoints): removed
  # on success, kept after a failure for a look at its logs/
  if [[ -n $SCRATCH && -d $SCRATCH ]]; then
    if grep -qF " $SCRATCH" /proc/self/mountinfo; then
      log "something is still mounted under $SCRATCH; not removing it"
    elif ((rc != 0)); then
      log "logs kept in $SCRATCH/logs"
    else
      rm -rf --one-file-system -- "$SCRATCH"
    fi
  fi
  if [[ $KEEP == 0 && $left == 0 ]]; then
    for d in "${GENERATED[@]}"; do rm -rf --one-file-system -- "$d"; done
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT
trap 'log "terminated"; exit 143' TERM

# --------------------------------------------------------------- arguments
BARE_SECTIONS=()
while (($#)); do
  case $1 in
    --size) SIZE=${2:?--size needs a value}; shift 2 ;;
    --size=*) SIZE=${1#*=}; shift ;;
    --workdir) WORKDIR=${2:?--workdir needs a value}; shift 2 ;;
    --workdir=*) WORKDIR=${1#*=}; shift ;;
    --reps) REPS=${2:?--reps needs a value}; shift 2 ;;
    --reps=*) REPS=${1#*=}; shift ;;
    --keep) KEEP=1; shift ;;
    --no-build) NO_BUILD=1; shift ;;
    --level) LEVEL=${2:?--level needs a value}; shift 2 ;;
    --level=*) LEVEL=${1#*=}; shift ;;
    --frame-size) FRAME=${2:?--frame-size needs a value}; shift 2 ;;
    --frame-size=*) FRAME=${1#*=}; shift ;;
    --sections) SECTIONS=${2:?--sections needs a value}; shift 2 ;;
    --sections=*) SECTIONS=${1#*=}; shift ;;
    plain|mount|zstd|torch|remote|tf|run|deepspeed|opaque) BARE_SECTIONS+=("$1"); shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; printf '%s: error: unknown argument %s\n' "$PROG" "$1" >&2; exit 2 ;;
  esac
done
[[ $REPS =~ ^[1-9][0-9]*$ ]] || { echo "$PROG: error: --reps must be a positive integer" >&2; exit 2; }
size_to_bytes "$SIZE" >/dev/null   # validate
[[ $LEVEL =~ ^[0-9]+$ ]] && ((LEVEL >= 1 && LEVEL <= 19)) ||
  { echo "$PROG: error: --level must be 1..19" >&2; exit 2; }
[[ -z $FRAME ]] || size_to_bytes "$FRAME" >/dev/null
((${#BARE_SECTIONS[@]})) && SECTIONS=$(IFS=,; echo "${BARE_SECTIONS[*]}")
[[ ,$SECTIONS, =~ ^(,(plain|mount|zstd|torch|remote|tf|run|deepspeed|opaque))+,$ ]] ||
  { echo "$PROG: error: --sections takes a comma list of plain, mount, zstd, torch, remote, tf, run, deepspeed, opaque" >&2; exit 2; }
section() { [[ ,$SECTIONS, == *,$1,* ]]; }
mkdir -p -- "$WORKDIR"
WORKDIR=$(cd "$WORKDIR" && pwd)

# ------------------------------------------------------------ prerequisites
[[ $(id -u) == 0 ]] || die "must run as root (drop_caches, FUSE mounts)"
[[ -c /dev/fuse ]] || die "/dev/fuse missing: FUSE is not available here"

ensure_packages() {
  # command or check -> Debian package
  local -A need=(
    [gcc]=gcc [g++]=g++ [cmake]=cmake [pkg-config]=pkg-config
    [fusermount3]=fuse3 [pgrep]=procps [timeout]=coreutils [mountpoint]=util-linux
    [squashfuse_ll]=squashfuse [mksquashfs]=squashfs-tools [zstd]=zstd
  )
  local missing=() c
  for c in "${!need[@]}"; do command -v "$c" >/dev/null 2>&1 || missing+=("${need[$c]}"); done
  pkg-config --exists fuse3 2>/dev/null || missing+=(libfuse3-dev)
  [[ -f /usr/share/doc/libfuse3-dev/examples/passthrough_ll.c ]] || missing+=(libfuse3-dev)
  [[ -x $PY ]] || missing+=(python3)
  # building ckptfs needs the one list README and the other scripts install
  local p
  for p in $("$REPO/scripts/packages.sh" build); do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if section zstd; then
    "$PY" -c 'import torch' 2>/dev/null || missing+=(python3-torch)
    command -v fincore >/dev/null 2>&1 || missing+=(util-linux)
  fi
  if section remote; then
    command -v curl >/dev/null 2>&1 || missing+=(curl)
    [[ -x $NGINX ]] || missing+=(nginx-light)
    "$PY" -c 'import numpy' 2>/dev/null || missing+=(python3-numpy)
  fi
  ((${#missing[@]})) || return 0
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  log "installing missing packages: ${missing[*]}"
  timeout 600 apt-get update -qq || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive timeout 1200 apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
  # the examples are gzip-compressed in some Debian releases
}
ensure_packages

SCRATCH=$(mktemp -d "$WORKDIR/run.XXXXXX")
mkdir -p "$SCRATCH/mnt" "$SCRATCH/tools" "$SCRATCH/logs" "$WORKDIR/results"
# The zip CRC sidecars the mounts write (the default --zip-crc auto) stay with the run.
export XDG_CACHE_HOME=$SCRATCH/xdg-cache

# ---------------------------------------------------------------- builds
build_ckptfs() {
  if [[ -n ${CKPTFS_BIN:-} ]]; then
    CKPTFS=$CKPTFS_BIN
  else
    CKPTFS=$REPO/build/fs/ckptfs
    if [[ $NO_BUILD == 0 ]]; then
      local bt=''
      [[ -f $REPO/build/CMakeCache.txt ]] &&
        bt=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$REPO/build/CMakeCache.txt")
      # an optimized tree (Release, or a developer's RelWithDebInfo) is used as
      # is; anything else (Debug, unconfigured) is configured as Release
      if [[ $bt != Release && $bt != RelWithDebInfo ]]; then
        log "configuring ckptfs (Release) in $REPO/build"
        timeout 600 cmake -S "$REPO" -B "$REPO/build" -DCMAKE_BUILD_TYPE=Release \
          >"$SCRATCH/logs/cmake-configure.log" 2>&1 ||
          { tail -n 30 "$SCRATCH/logs/cmake-configure.log" >&2; die "cmake configure failed"; }
      fi
      log "building ckptfs"
      timeout 1800 cmake --build "$REPO/build" -j2 >"$SCRATCH/logs/cmake-build.log" 2>&1 ||
        { tail -n 30 "$SCRATCH/logs/cmake-build.log" >&2; die "ckptfs build failed"; }
    fi
  fi
  [[ -x $CKPTFS ]] || die "ckptfs binary not found at $CKPTFS"
  CKPTFS_BUILD=unknown
  if [[ $CKPTFS == "$REPO/build/fs/ckptfs" && -f $REPO/build/CMakeCache.txt ]]; then
    CKPTFS_BUILD=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$REPO/build/CMakeCache.txt")
  fi
}

build_passthrough_ll() {
  local ex=/usr/share/doc/libfuse3-dev/examples f
  for f in passthrough_ll.c passthrough_helpers.h; do
    if [[ -f $ex/$f ]]; then cp "$ex/$f" "$SCRATCH/tools/"
    elif [[ -f $ex/$f.gz ]]; then gzip -dc "$ex/$f.gz" >"$SCRATCH/tools/$f"
    else die "$ex/$f not found (libfuse3-dev examples)"; fi
  done
  # shellcheck disable=SC2046
  gcc -O2 -Wall -D_GNU_SOURCE -I"$SCRATCH/tools" "$SCRATCH/tools/passthrough_ll.c" \
    $(pkg-config --cflags --libs fuse3) -o "$SCRATCH/tools/passthrough_ll" \
    >"$SCRATCH/logs/passthrough_ll-build.log" 2>&1 ||
    { cat "$SCRATCH/logs/passthrough_ll-build.log" >&2; die "building passthrough_ll failed"; }
  PTLL=$SCRATCH/tools/passthrough_ll
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
  CKPTFS_PID=$pid
}

# passthrough_ll with its defaults, in the foreground (-f) only so we own its pid.
ptll_mount() {
  local src=$1 mnt=$2 pid i
  mkdir -p -- "$mnt"
  is_mounted "$mnt" && die "$mnt is already mounted"
  "$PTLL" -f -o "source=$src" "$mnt" >>"$SCRATCH/logs/passthrough_ll.log" 2>&1 &
  pid=$!
  register_mount "$mnt" "$pid" "fusermount3 -u"
  for ((i = 0; i < MOUNT_TIMEOUT * 20; i++)); do
    is_mounted "$mnt" && return 0
    pid_alive "$pid" || { cat "$SCRATCH/logs/passthrough_ll.log" >&2; die "passthrough_ll exited before mounting $mnt"; }
    sleep 0.05
  done
  die "passthrough_ll did not mount $mnt within ${MOUNT_TIMEOUT}s"
}

# squashfuse_ll in the foreground (-f) only so we own its pid; otherwise defaults.
sqfs_mount() {
  local img=$1 mnt=$2 pid i
  mkdir -p -- "$mnt"
  is_mounted "$mnt" && die "$mnt is already mounted"
  squashfuse_ll -f "$img" "$mnt" >>"$SCRATCH/logs/squashfuse_ll.log" 2>&1 &
  pid=$!
  register_mount "$mnt" "$pid" "fusermount3 -u"
  for ((i = 0; i < MOUNT_TIMEOUT * 20; i++)); do
    is_mounted "$mnt" && return 0
    pid_alive "$pid" || { cat "$SCRATCH/logs/squashfuse_ll.log" >&2; die "squashfuse_ll exited before mounting $mnt"; }
    sleep 0.05
  done
  die "squashfuse_ll did not mount $mnt within ${MOUNT_TIMEOUT}s"
}

# -------------------------------------------------------------- contenders
# Each: label, files (to read), optional prepare/setup/teardown/read.
CONTENDERS=(ckptfs_merged cat_shards ptll_shards)

c_ckptfs_merged_label() { echo "ckptfs: cat MNT/model.safetensors"; }
c_ckptfs_merged_setup() { ckptfs_mount "$DATA" "$SCRATCH/mnt/ckptfs"; }
c_ckptfs_merged_files() { echo "$SCRATCH/mnt/ckptfs/model.safetensors"; }
c_ckptfs_merged_teardown() { unmount_one "$SCRATCH/mnt/ckptfs" || die "could not unmount ckptfs"; }

c_cat_shards_label() { echo "cat: $SHARDS shards from disk"; }
c_cat_shards_files() { printf '%s\n' "${SHARD_FILES[@]}"; }

c_ptll_shards_label() { echo "passthrough_ll: cat $SHARDS shards"; }
c_ptll_shards_setup() { ptll_mount "$DATA" "$SCRATCH/mnt/ptll"; }
c_ptll_shards_files() { local f; for f in "${SHARD_FILES[@]}"; do echo "$SCRATCH/mnt/ptll/${f##*/}"; done; }
c_ptll_shards_teardown() { unmount_one "$SCRATCH/mnt/ptll" || die "could not unmount passthrough_ll"; }

# Ratio rows: "NUM DEN MODE TARGET" (TARGET '-' = reported, no target)
RATIOS=(
  "ckptfs_merged ptll_shards cold 1.0"
  "ckptfs_merged ptll_shards warm 1.0"
  "ckptfs_merged cat_shards cold -"
  "ckptfs_merged cat_shards warm 0.8"
)

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
  local id=$1 mode=$2 files bytes t0 t1 secs mbps out backing=() res=''
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
      for _ in 1 2; do
        if has_fn "c_${id}_read"; then "c_${id}_read" "${files[@]}" >/dev/null; else read_files "${files[@]}"; fi
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
    out=$("c_${id}_read" "${files[@]}"); [[ -n $out ]] && bytes=$out
  else
    read_files "${files[@]}"
  fi
  t1=$(now_ns)
  if has_fn "c_${id}_teardown"; then "c_${id}_teardown"; fi
  secs=$(elapsed "$t0" "$t1")
  mbps=$(awk -v b="$bytes" -v s="$secs" 'BEGIN{printf "%.0f", (s > 0 ? b/1e6/s : 0)}')
  SAMPLES[$id,$mode]="${SAMPLES[$id,$mode]:-} $mbps"
  BYTES[$id]=$bytes
  log "  $mode $id: $(gib "$bytes") GiB in ${secs}s = ${mbps} MB/s${res:+; backing files ${res}% resident before}"
}

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
print(f"within={within}")
print(f"worst_excess_frames={worst:.2f}")
EOF
}

# The whole zstd section: data, sequential contenders, random reads, peak RSS.
zstd_section() {
  local tag=L$LEVEL r mode id key value f
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
  SQFS_BYTES=$(stat -c %s -- "$SQFS")
  ZFRAME=$(seekable_frame_size "${ZST_FILES[@]}") || die "cannot read the seek tables in $ZDATA"

  log "warm-up: one untimed read of the .zst shards and the squashfs images"
  read_files "${ZST_FILES[@]}" "${ZGST_FILES[@]}" "$SQFS"
  log "zstd throughput: ${#ZCONTENDERS[@]} contenders x {cold,cached} x $REPS reps, interleaved"
  ZSEQ_T0=$(now_ns) ZLOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
  for ((r = 1; r <= REPS; r++)); do
    log "rep $r/$REPS"
    for mode in cold cached; do
      for id in "${ZCONTENDERS[@]}"; do run_sample "$id" "$mode"; done
    done
  done
  ZSEQ_SECS=$(elapsed "$ZSEQ_T0" "$(now_ns)") ZLOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

  log "trained weights: ${#TWCONTENDERS[@]} contenders x {cold,cached} x $REPS reps, interleaved"
  read_files "$TWZ/pytorch_model.bin.zst" "$TWZG/pytorch_model.bin.zst" "$TWSQFS"
  for ((r = 1; r <= REPS; r++)); do
    for mode in cold cached; do
      for id in "${TWCONTENDERS[@]}"; do run_sample "$id" "$mode"; done
    done
  done

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

# ---------------------------------------------------------- torch section
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
  for ((r = 1; r <= REPS; r++)); do
    for mode in cold warm; do
      [[ $mode == cold ]] && drop_caches
      ckptfs_mount "$TDATA" "$tm"
      if [[ $mode == cold ]]; then TMOUNT_COLD+=("$CKPTFS_MOUNT_SECS"); else TMOUNT_WARM+=("$CKPTFS_MOUNT_SECS"); fi
      log "  $mode mount: ${CKPTFS_MOUNT_SECS}s"
      unmount_one "$tm" || die "could not unmount $tm"
    done
  done
  drop_caches
  ckptfs_mount "$TDATA" "$tm"
  TRSS_MOUNT='' THWM_MOUNT=''
  if [[ -n $CKPTFS_PID ]]; then
    TRSS_MOUNT=$(proc_kb "$CKPTFS_PID" VmRSS); THWM_MOUNT=$(proc_kb "$CKPTFS_PID" VmHWM)
  fi
  unmount_one "$tm" || die "could not unmount $tm"
}

# --------------------------------------------------------- remote section
# Contenders of the sequential read (section remote), mode fresh: each sample
# reads on a new mount (or with a new curl process) while the server's files
# stay in its page cache. Ratio rows as RATIOS (MB/s, num / den, target >=).
RCONTENDERS=(ckptfs_http curl_null curl_file)
RRATIOS=(
  "ckptfs_http curl_null fresh 1.0"
  "ckptfs_http curl_file fresh -"
)

c_ckptfs_http_label() { echo "ckptfs: cat MNT/model.safetensors, http source (fresh mount, not timed)"; }
c_ckptfs_http_setup() {
  ckptfs_mount "$RURL" "$SCRATCH/mnt/http"
  RMARK_MOUNTED=$(nginx_mark)
  RCPU0=$(proc_cpu "$CKPTFS_PID")
}
c_ckptfs_http_files() { echo "$SCRATCH/mnt/http/model.safetensors"; }
c_ckptfs_http_teardown() {
  local m out sent n err fetched req pre cpu
  m=$(nginx_mark)
  cpu=$(awk -v a="$RCPU0" -v b="$(proc_cpu "$CKPTFS_PID")" 'BEGIN{printf "%.2f", b - a}')
  out=$(nginx_sent "$RMARK_MOUNTED" "$m"); read -r sent n err <<<"$out"
  out=$(stats_fields "$SCRATCH/mnt/http" remote.bytes_fetched remote.requests remote.prefetched_blocks)
  read -r fetched req pre <<<"$out"
  unmount_one "$SCRATCH/mnt/http" || die "could not unmount ckptfs"
  RSEQ_SENT+=("$sent") RSEQ_REQS+=("$n") RSEQ_ERRS=$((RSEQ_ERRS + err)) RSEQ_CPU+=("$cpu")
  log "    read: daemon used ${cpu} CPU-s; server sent $(mib "$sent") MiB in $n requests ($err errors);" \
      "stats.json: $(mib "$fetched") MiB fetched in $req requests, $pre blocks prefetched"
}

c_curl_null_label() { echo "curl: the ${#RSHARD_FILES[@]} shards one after another (one process) to /dev/null"; }
c_curl_null_files() { printf '%s\n' "${RSHARD_FILES[@]}"; }
c_curl_null_read() { curl_shards /dev/null "$@"; }

c_curl_file_label() { echo "curl: the same, to files in the workdir (page cache, no fsync)"; }
c_curl_file_files() { printf '%s\n' "${RSHARD_FILES[@]}"; }
c_curl_file_setup() { rm -rf --one-file-system -- "$SCRATCH/dl"; mkdir -p -- "$SCRATCH/dl"; }
c_curl_file_read() { curl_shards "$SCRATCH/dl" "$@"; }
c_curl_file_teardown() { rm -rf --one-file-system -- "$SCRATCH/dl"; }

# curl_shards DEST FILE...: one curl process GETs RURL/<name> of each FILE in
# turn (one kept-alive connection) into DEST/<name>, or /dev/null; prints the
# bytes downloaded
curl_shards() {
  local dest=$1 f args=() rc=0 out
  shift
  for f in "$@"; do
    if [[ $dest == /dev/null ]]; then args+=("$RURL${f##*/}" -o /dev/null)
    else args+=("$RURL${f##*/}" -o "$dest/${f##*/}"); fi
  done
  out=$(timeout --kill-after=10 "$READ_TIMEOUT" curl -sS --fail -w '%{size_download}\n' "${args[@]}") || rc=$?
  ((rc == 124 || rc == 137)) && die "curl timed out after ${READ_TIMEOUT}s"
  ((rc == 0)) || die "curl failed (exit $rc): ${args[*]}"
  awk '{s += $1} END {printf "%.0f\n", s}' <<<"$out"
}

# remote_pick DIR: key=value lines: the tensor (a) loads (the one just past the
# middle in file order, so not at a shard's start), its shard, absolute offset
# and size; the tensor count; the bytes a mount needs: shard headers (8-byte
# length + json) and the other files of DIR (index, config, tokenizer).
remote_pick() {
  "$PY" - "$1" <<'EOF'
import json, os, sys
d = sys.argv[1]
index = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
shards = sorted(set(index.values()))
tensors, header_bytes = [], 0
for shard in shards:
    with open(os.path.join(d, shard), "rb") as f:
        hlen = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(hlen))
    header_bytes += 8 + hlen
    for name, e in header.items():
        if name != "__metadata__":
            b, end = e["data_offsets"]
            tensors.append((shard, 8 + hlen + b, end - b, name, e["dtype"]))
tensors.sort()
shard, offset, nbytes, name, dtype = tensors[min(len(tensors) - 1, len(tensors) // 2 + 1)]
assert dtype in ("F16", "F32", "F64"), f"{name}: {dtype} has no .npy view"
print(f"name={name}")
print(f"path=tensors/{'/'.join(name.split('.'))}.npy")
print(f"shard={shard}")
print(f"offset={offset}")
print(f"nbytes={nbytes}")
print(f"count={len(tensors)}")
print(f"header_bytes={header_bytes}")
print(f"other_bytes={sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d) if n not in shards)}")
EOF
}

# One timed numpy.load of a .npy (numpy imported before the timer), then its
# bytes compared with the tensor's bytes in the shard. Prints "seconds nbytes same".
RT_LOAD_PY='
import sys, time, numpy
path, shard, offset, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
t0 = time.perf_counter()
a = numpy.load(path)
secs = time.perf_counter() - t0
with open(shard, "rb") as f:
    f.seek(offset)
    same = a.nbytes == nbytes and a.tobytes() == f.read(nbytes)
print(f"{secs:.3f} {a.nbytes} {int(same)}")
'

# remote_ttft_sample: (a) once: fresh mount, numpy.load of the picked tensor;
# appends to the RTT_* arrays
remote_ttft_sample() {
  local mnt=$SCRATCH/mnt/ttft m0 m1 m2 out rc=0 secs nbytes same fetched req pre
  local msent mreq merr lsent lreq lerr
  m0=$(nginx_mark)
  ckptfs_mount "$RURL" "$mnt"
  m1=$(nginx_mark)
  out=$(timeout --kill-after=10 "$READ_TIMEOUT" "$PY" -c "$RT_LOAD_PY" "$mnt/${RT[path]}" \
    "$RDATA/${RT[shard]}" "${RT[offset]}" "${RT[nbytes]}" 2>>"$SCRATCH/logs/numpy_load.log") || rc=$?
  ((rc == 0)) || { tail -n 20 "$SCRATCH/logs/numpy_load.log" >&2; die "numpy.load of $mnt/${RT[path]} failed (exit $rc)"; }
  read -r secs nbytes same <<<"$out"
  [[ $same == 1 ]] || die "numpy.load of $mnt/${RT[path]} gave $nbytes B that differ from ${RT[shard]}'s"
  m2=$(nginx_mark)
  out=$(stats_fields "$mnt" remote.bytes_fetched remote.requests remote.prefetched_blocks)
  read -r fetched req pre <<<"$out"
  unmount_one "$mnt" || die "could not unmount ckptfs"
  out=$(nginx_sent "$m0" "$m1"); read -r msent mreq merr <<<"$out"
  out=$(nginx_sent "$m1" "$m2"); read -r lsent lreq lerr <<<"$out"
  # reference: a range GET of the same bytes, curl's own transfer time
  out=$(timeout 120 curl -sS --fail -o /dev/null -w '%{time_total}' \
    -r "${RT[offset]}-$((RT[offset] + RT[nbytes] - 1))" "$RURL${RT[shard]}") ||
    die "curl -r of ${RT[shard]} failed"
  RTT_CURL+=("$(awk -v s="$out" 'BEGIN{printf "%.3f", s}')")
  RTT_MOUNT+=("$CKPTFS_MOUNT_SECS") RTT_LOAD+=("$secs")
  RTT_TOTAL+=("$(awk -v a="$CKPTFS_MOUNT_SECS" -v b="$secs" 'BEGIN{printf "%.3f", a + b}')")
  RTT_MSENT+=("$msent") RTT_MREQ+=("$mreq") RTT_LSENT+=("$lsent") RTT_LREQ+=("$lreq")
  RTT_TOTAL_SENT+=($((msent + lsent)))
  RTT_ERRS=$((RTT_ERRS + merr + lerr))
  log "  mount ${CKPTFS_MOUNT_SECS}s + numpy.load ${secs}s; server sent $msent B in $mreq requests" \
      "at mount, $lsent B in $lreq requests for the tensor ($nbytes B);" \
      "stats.json: $fetched B fetched in $req requests, $pre blocks prefetched; curl -r of the same bytes ${RTT_CURL[-1]}s"
}

# remote_cache_dir: (c): a fresh --cache-dir filled by one read of the merged
# file, then drop_caches, a second mount with it and a second read; sets RC[*]
remote_cache_dir() {
  local cdir=$SCRATCH/cache-dir mnt=$SCRATCH/mnt/cached m0 m1 m2 m3 m4 t0 out size
  size=$(($(size_to_bytes "$SIZE") * 2 / 1048576 + 64))M
  declare -gA RC=()
  rm -rf --one-file-system -- "$cdir"
  mkdir -p -- "$cdir"
  m0=$(nginx_mark)
  ckptfs_mount "$RURL" "$mnt" --cache-dir "$cdir" --cache-dir-size "$size"
  m1=$(nginx_mark)
  t0=$(now_ns); read_files "$mnt/model.safetensors"; RC[secs1]=$(elapsed "$t0" "$(now_ns)")
  m2=$(nginx_mark)
  out=$(stats_fields "$mnt" remote.bytes_fetched disk_cache.bytes_written disk_cache.write_errors)
  read -r "RC[fetched1]" "RC[written1]" "RC[werr1]" <<<"$out"
  unmount_one "$mnt" || die "could not unmount ckptfs"
  out=$(nginx_sent "$m1" "$m2"); read -r "RC[sent1]" "RC[reqs1]" "RC[errs1]" <<<"$out"
  log "  1st mount (fresh --cache-dir $size): read in ${RC[secs1]}s; server sent $(mib "${RC[sent1]}") MiB" \
      "in ${RC[reqs1]} requests; disk cache wrote $(mib "${RC[written1]}") MiB (${RC[werr1]} write errors)"
  drop_caches
  ckptfs_mount "$RURL" "$mnt" --cache-dir "$cdir" --cache-dir-size "$size"
  RC[mount2]=$CKPTFS_MOUNT_SECS
  m3=$(nginx_mark)
  t0=$(now_ns); read_files "$mnt/model.safetensors"; RC[secs2]=$(elapsed "$t0" "$(now_ns)")
  m4=$(nginx_mark)
  out=$(stats_fields "$mnt" remote.bytes_fetched remote.requests remote.disk_cache_bytes disk_cache.hits disk_cache.misses disk_cache.corrupt)
  read -r "RC[fetched2]" "RC[req2]" "RC[dcbytes2]" "RC[hits2]" "RC[misses2]" "RC[corrupt2]" <<<"$out"
  unmount_one "$mnt" || die "could not unmount ckptfs"
  out=$(nginx_sent "$m2" "$m3"); read -r "RC[msent2]" "RC[mreqs2]" "RC[merrs2]" <<<"$out"
  out=$(nginx_sent "$m3" "$m4"); read -r "RC[sent2]" "RC[reqs2]" "RC[errs2]" <<<"$out"
  RC[du]=$(du -sb -- "$cdir" | cut -f1)
  log "  2nd mount (same dir, after drop_caches): mount ${RC[mount2]}s, server sent ${RC[msent2]} B in ${RC[mreqs2]} requests;" \
      "read in ${RC[secs2]}s, server sent ${RC[sent2]} B in ${RC[reqs2]} requests; stats.json: ${RC[fetched2]} B fetched," \
      "${RC[dcbytes2]} B from the disk cache, ${RC[hits2]} hits / ${RC[misses2]} misses"
  rm -rf --one-file-system -- "$cdir"
}

# The whole remote section: data, nginx, (a), (b), (c); nginx stopped at the end.
remote_section() {
  local r id key value t0 ts
  RDATA=$WORKDIR/bench-f32-${SIZE}-${SHARDS}shards-${RTENSORS}tensors
  gen_data "$RDATA" --kind bench --total-bytes "$SIZE" --dtype F32 --shards "$SHARDS" --tensors "$RTENSORS"
  mapfile -t RSHARD_FILES < <(shard_files "$RDATA")
  ((${#RSHARD_FILES[@]})) || die "no shard files found in $RDATA"
  RBYTES=$(sum_sizes "${RSHARD_FILES[@]}")
  declare -gA RT=()
  while IFS='=' read -r key value; do RT[$key]=$value; done < <(remote_pick "$RDATA")
  [[ -n ${RT[nbytes]:-} ]] || die "cannot pick a tensor from $RDATA"
  RLOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
  nginx_start "$WORKDIR" "${RDATA##*/}/model.safetensors.index.json"
  RURL=http://127.0.0.1:$NGINX_PORT/${RDATA##*/}/
  log "warm-up: one untimed read of the shards (the server's page cache)"
  read_files "${RSHARD_FILES[@]}"

  RTT_MOUNT=() RTT_LOAD=() RTT_TOTAL=() RTT_MSENT=() RTT_MREQ=() RTT_LSENT=() RTT_LREQ=()
  RTT_TOTAL_SENT=() RTT_CURL=() RTT_ERRS=0
  log "(a) time to first tensor: numpy.load of ${RT[path]} ($(mib "${RT[nbytes]}") MiB), fresh mount, $REPS reps"
  t0=$(now_ns)
  for ((r = 1; r <= REPS; r++)); do remote_ttft_sample; done
  log "(a) took $(elapsed "$t0" "$(now_ns)") s"

  RSEQ_SENT=() RSEQ_REQS=() RSEQ_ERRS=0 RSEQ_CPU=()
  log "(b) sequential read: ${#RCONTENDERS[@]} contenders x $REPS reps, interleaved"
  t0=$(now_ns)
  for ((r = 1; r <= REPS; r++)); do
    log "rep $r/$REPS"
    for id in "${RCONTENDERS[@]}"; do run_sample "$id" fresh; done
  done
  log "(b) took $(elapsed "$t0" "$(now_ns)") s"

  log "(c) --cache-dir: read, unmount, drop_caches, mount with the same dir, read again"
  t0=$(now_ns)
  remote_cache_dir
  log "(c) took $(elapsed "$t0" "$(now_ns)") s"

  ts=$(date -u +%Y%m%d-%H%M%S)
  RACCESS_LOG=$WORKDIR/results/remote-access-$ts.log.gz
  gzip -c -- "$NGINX_DIR/access.log" >"$RACCESS_LOG" || RACCESS_LOG=''
  nginx_stop
  RLOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
}

# ------------------------------------------------------------------- main
build_ckptfs
if section plain; then build_passthrough_ll; fi

# the plain BF16 checkpoint: read by plain, packed by zstd, a torch source
DATA='' SHARD_FILES=()
if section plain || section zstd || section torch; then
  DATA=$WORKDIR/bench-bf16-${SIZE}-${SHARDS}shards
  gen_data "$DATA" --kind bench --total-bytes "$SIZE" --dtype BF16 --shards "$SHARDS"
  mapfile -t SHARD_FILES < <(shard_files "$DATA")
  ((${#SHARD_FILES[@]})) || die "no shard files found in $DATA"
fi

if section plain; then
for id in "${CONTENDERS[@]}"; do
  if has_fn "c_${id}_prepare"; then "c_${id}_prepare"; fi
done

# Under a VM the guest's drop_caches does not empty the host's cache: the
# first reader of freshly written data pays for it. One untimed pass over the
# data first, so every contender starts from the same host state.
log "warm-up: one untimed read of the shards"
read_files "${SHARD_FILES[@]}"

log "throughput: ${#CONTENDERS[@]} contenders x {cold,warm} x $REPS reps, interleaved"
for ((r = 1; r <= REPS; r++)); do
  log "rep $r/$REPS"
  for mode in cold warm; do
    for id in "${CONTENDERS[@]}"; do run_sample "$id" "$mode"; done
  done
done
fi

# ------------------------------------------------------------ mount cost
proc_kb() { awk -v k="$2:" '$1==k {print $2}' "/proc/$1/status" 2>/dev/null; }
# CPU seconds (user + system, all threads) a process has used so far
proc_cpu() {
  [[ -n $1 && -r /proc/$1/stat ]] || { echo 0; return 0; }
  sed 's/.*) //' "/proc/$1/stat" |
    awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($12 + $13) / hz}'
}
if section mount; then
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
fi

# ------------------------------------------------------------------ zstd
section zstd && zstd_section

# ----------------------------------------------------------------- torch
if section torch; then torch_section; fi

# ---------------------------------------------------------------- remote
if section remote; then remote_section; fi

# -------------------------------------------------------------------- tf
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

tf_section() {
  TFMANY=$WORKDIR/tf-many-${TF_VARIABLES}
  TFBIG=$WORKDIR/tf-big-$SIZE
  tf_gen "$TFMANY" many --count "$TF_VARIABLES"
  tf_gen "$TFBIG" big --size "$(size_to_bytes "$SIZE")" --shards 8
  mapfile -t TF_FILES < <(ls -1 "$TFBIG"/ckpt-1.data-* | sort)
  local mnt=$SCRATCH/mnt/tfmany r mode
  TFMOUNT_COLD=() TFMOUNT_WARM=()
  log "tf: mount cost of $TF_VARIABLES variables, $REPS reps cold + warm"
  for ((r = 1; r <= REPS; r++)); do
    for mode in cold warm; do
      [[ $mode == cold ]] && drop_caches
      ckptfs_mount "$TFMANY" "$mnt"
      if [[ $mode == cold ]]; then TFMOUNT_COLD+=("$CKPTFS_MOUNT_SECS"); else TFMOUNT_WARM+=("$CKPTFS_MOUNT_SECS"); fi
      if [[ -n $CKPTFS_PID ]]; then TFRSS=$(proc_kb "$CKPTFS_PID" VmRSS); TFHWM=$(proc_kb "$CKPTFS_PID" VmHWM); fi
      log "  $mode mount: ${CKPTFS_MOUNT_SECS}s"
      unmount_one "$mnt" || die "could not unmount $mnt"
    done
  done
  log "tf: sequential read, ${#TFCONTENDERS[@]} contenders x {cold,warm} x $REPS reps"
  read_files "${TF_FILES[@]}"
  for ((r = 1; r <= REPS; r++)); do
    for mode in cold warm; do
      for id in "${TFCONTENDERS[@]}"; do run_sample "$id" "$mode"; done
    done
  done
}
TF_VARIABLES=50000
TFRSS='' TFHWM=''
if section tf; then tf_section; fi

# ------------------------------------------------------------------- run
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
        ls "$mnt/checkpoint-$((500 * (RUN_CHECKPOINTS / 2)))/" >/dev/null || die "ls inside a checkpoint of the run failed"
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
if section run; then run_section; fi

# ------------------------------------------------------------- deepspeed
c_ckptfs_ds_label() { echo "ckptfs: cat MNT/model.safetensors (consolidated from ${#DS_FILES[@]} ranks)"; }
c_ckptfs_ds_setup() { ckptfs_mount "$DSTAG" "$SCRATCH/mnt/ds"; }
c_ckptfs_ds_files() { echo "$SCRATCH/mnt/ds/model.safetensors"; }
c_ckptfs_ds_teardown() { unmount_one "$SCRATCH/mnt/ds" || die "could not unmount ckptfs"; }
c_cat_ds_label() { echo "cat: the ${#DS_FILES[@]} optimizer rank files from disk"; }
c_cat_ds_files() { printf '%s\n' "${DS_FILES[@]}"; }
DSCONTENDERS=(ckptfs_ds cat_ds)
DSRATIOS=("ckptfs_ds cat_ds cold 0.8" "ckptfs_ds cat_ds warm 0.8")

deepspeed_section() {
  local dir=$WORKDIR/ds-zero3-${DS_SIZE_MB}m mnt=$SCRATCH/mnt/dsmount r mode
  if [[ ! -d $dir ]]; then
    rm -rf --one-file-system -- "$dir.tmp"
    log "generating $dir (ZeRO-3, 4 ranks, about ${DS_SIZE_MB} MiB of rank files)"
    timeout 3600 "$PY" "$REPO/tests/deepspeed/make_deepspeed_checkpoint.py" "$dir.tmp" \
      --stage 3 --ranks 4 --dtype bf16 --size-mb "$DS_SIZE_MB" --no-expected \
      >"$SCRATCH/logs/gen-ds.log" 2>&1 ||
      { tail -n 30 "$SCRATCH/logs/gen-ds.log" >&2; die "make_deepspeed_checkpoint.py failed"; }
    mv -- "$dir.tmp" "$dir"
    GENERATED+=("$dir")
  fi
  DSTAG=$dir/$(cat "$dir/latest")
  mapfile -t DS_FILES < <(ls -1 "$DSTAG"/*optim_states.pt | sort)
  DSBYTES=$(du -cb "$DSTAG" | tail -n 1 | cut -f1)
  DSMOUNT_COLD=() DSMOUNT_WARM=()
  log "deepspeed: mount of $DSTAG, $REPS reps cold + warm"
  for ((r = 1; r <= REPS; r++)); do
    for mode in cold warm; do
      [[ $mode == cold ]] && drop_caches
      ckptfs_mount "$DSTAG" "$mnt"
      if [[ $mode == cold ]]; then DSMOUNT_COLD+=("$CKPTFS_MOUNT_SECS"); else DSMOUNT_WARM+=("$CKPTFS_MOUNT_SECS"); fi
      if [[ -n $CKPTFS_PID ]]; then DSRSS=$(proc_kb "$CKPTFS_PID" VmRSS); fi
      unmount_one "$mnt" || die "could not unmount $mnt"
    done
  done
  log "deepspeed: sequential read, ${#DSCONTENDERS[@]} contenders x {cold,warm} x $REPS reps"
  read_files "${DS_FILES[@]}"
  for ((r = 1; r <= REPS; r++)); do
    for mode in cold warm; do
      for id in "${DSCONTENDERS[@]}"; do run_sample "$id" "$mode"; done
    done
  done
}
DS_SIZE_MB=2048
DSRSS=''
if section deepspeed; then deepspeed_section; fi

# ---------------------------------------------------------------- opaque
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
if section opaque; then opaque_section; fi

# ------------------------------------------------------------------ report
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
      # shellcheck disable=SC2086  # split the sample list
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

# compression_row PACKER DATA ORIGINAL_BYTES PACKED_BYTES [TARGET]: a row of the
# zstd section's compression table (ratio = original / packed, target >=).
compression_row() {
  local v; v=$(awk -v c="$4" -v b="$3" 'BEGIN{printf "%.3f", (c > 0 ? b/c : 0)}')
  if [[ -n ${5:-} ]]; then echo "| $1 | $2 | $(mib "$3") | $(mib "$4") | ${v}x | >= ${5}x | $(verdict "$v" '>=' "$5") |"
  else echo "| $1 | $2 | $(mib "$3") | $(mib "$4") | ${v}x | - | - |"; fi
}

# Can libfuse splice a 1 MiB read reply? It needs a pipe of about 1 MiB + a few
# pages, which F_SETPIPE_SZ rounds to 2 MiB: allowed up to fs.pipe-max-size, or
# past it with CAP_SYS_RESOURCE. When it cannot, it falls back to reading the
# shard bytes into a buffer and writing that (two copies) for every request.
splice_note() {
  local pmax cap
  pmax=$(cat /proc/sys/fs/pipe-max-size 2>/dev/null || echo 0)
  cap=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
  if (( (16#${cap:-0} >> 24) & 1 )); then
    echo "possible (CAP_SYS_RESOURCE held; fs.pipe-max-size $pmax)"
  elif ((pmax >= 2097152)); then
    echo "possible (fs.pipe-max-size $pmax, no CAP_SYS_RESOURCE)"
  else
    echo "NOT possible for 1 MiB replies: fs.pipe-max-size $pmax and no CAP_SYS_RESOURCE, so libfuse" \
         "cannot grow its pipe past 1 MiB: passthrough_ll copies each reply through a fresh buffer," \
         "ckptfs through a reused per-thread one (pread + writev)"
  fi
}

# Is a DAMON pageout scheme running (it evicts page cache that looks idle, so
# "warm" data may not stay in memory)? Read-only look at sysfs.
damon_note() {
  local k c sch age aggr out=''
  for k in /sys/kernel/mm/damon/admin/kdamonds/*; do
    [[ $(cat "$k/state" 2>/dev/null) == on ]] || continue
    for c in "$k"/contexts/*; do
      aggr=$(cat "$c/monitoring_attrs/intervals/aggr_us" 2>/dev/null || echo 0)
      for sch in "$c"/schemes/[0-9]*; do
        [[ $(cat "$sch/action" 2>/dev/null) == pageout ]] || continue
        age=$(cat "$sch/access_pattern/age/min" 2>/dev/null || echo 0)
        out="DAMON pageout scheme on ($(cat "$c/operations" 2>/dev/null)): memory that looks idle for"
        out+=" $(awk -v a="$age" -v u="$aggr" 'BEGIN{printf "%g", a*u/1e6}') s is paged out, page cache included; regions are physical, so pages cached a few seconds ago can go (see % resident)"
      done
    done
  done
  echo "${out:-no DAMON pageout scheme running}"
}

report() {
  local commit dirty mem
  commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
  dirty=$(git -C "$REPO" status --porcelain --untracked-files=no 2>/dev/null | head -c1)
  [[ -n $dirty ]] && commit="$commit (+uncommitted changes)"
  mem=$(awk '/^MemTotal:/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)
  declare -gA MED=()
  echo "## ckptfs bench"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "- machine: $(nproc) cores ($(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)), $mem RAM, kernel $(uname -r)"
  echo "- commit: $commit; ckptfs $CKPTFS (build type ${CKPTFS_BUILD:-none})"
  echo "- FUSE splice: $(splice_note)"
  echo "- page cache: $(damon_note)"
  [[ -z $DATA ]] ||
    echo "- data: $(gib "$(sum_sizes "${SHARD_FILES[@]}")") GiB bf16 in ${#SHARD_FILES[@]} shards ($DATA)"
  echo "- sections: $SECTIONS"
  echo "- method: reader \`cat FILES > /dev/null\`; cold = fresh mount + sync + drop_caches;" \
       "warm = fresh mount, read twice, time the 3rd read; one untimed warm-up read of the files first;" \
       "$REPS reps interleaved, median MB/s (1 MB = 10^6 B)"
  if section plain; then
    echo "- passthrough_ll: libfuse $(pkg-config --modversion fuse3) example, defaults" \
         "(multithreaded loop, cache=auto: timeout=1s and no keep_cache, no splice); run with -f only to own its pid"
    echo
    echo "| contender | MB | cold MB/s (median) | cold samples | warm MB/s (median) | warm samples |"
    echo "|---|---:|---:|---|---:|---|"
    contender_rows "cold warm" "${CONTENDERS[@]}"
    echo
    echo "| ratio | mode | value | target | result |"
    echo "|---|---|---:|---|---|"
    ratio_rows "${RATIOS[@]}"
  fi
  if section mount; then
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
  fi
  if section zstd; then
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
    echo "| reads decoding <= requested + 2 frames | ${RR_CKPTFS[within]} of ${RR_CKPTFS[count]} (worst: requested + ${RR_CKPTFS[worst_excess_frames]} frames) | all | $excess_ok |"
    echo
    rss_cap_mib=$(mib "$(size_to_bytes "$RSS_CACHE")")
    hwm_mib=$(mib $((RSS_HWM * 1024)))
    echo "| memory: \`--cache-size $RSS_CACHE\`, $(gib "$ZBYTES") GiB read by two concurrent readers (merged file; every tensor file) in ${RSS_SECS} s | value | target | result |"
    echo "|---|---:|---|---|"
    echo "| daemon VmHWM after mount | $(mib $((RSS_HWM_MOUNT * 1024))) MiB | - | - |"
    echo "| daemon VmHWM after the reads | ${hwm_mib} MiB | <= $((rss_cap_mib + RSS_SLACK_MIB)) MiB | $(verdict "$hwm_mib" '<=' $((rss_cap_mib + RSS_SLACK_MIB))) |"
    echo "| cache capacity / charged at the end (stats.json) | $(mib "${RSS_CAPACITY:-0}") / $(mib "${RSS_CHARGED:-0}") MiB | - | - |"
  fi
  if section torch; then
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
  fi
  if section remote; then
    local tb=${RT[nbytes]} mneed lmax mmax tmax rsmin rsmax
    mneed=$((RT[header_bytes] + RT[other_bytes]))
    mmax=$(max_of "${RTT_MSENT[@]}"); lmax=$(max_of "${RTT_LSENT[@]}")
    tmax=$(max_of "${RTT_TOTAL_SENT[@]}")
    echo
    echo "### remote: HTTP source on a loopback nginx"
    echo
    echo "- data: $(gib "$RBYTES") GiB F32, ${RT[count]} tensors in ${#RSHARD_FILES[@]} shards ($RDATA);" \
         "a mount needs $((RT[header_bytes])) B of shard headers + $((RT[other_bytes])) B of index, config and tokenizer"
    echo "- server: nginx $(nginx_version) on 127.0.0.1, worker_processes auto ($(nproc)), sendfile, tcp_nopush," \
         "default keep-alive; its files in the page cache (one untimed read first), no drop_caches but before (c)'s 2nd mount"
    echo "- ckptfs: defaults (512M memory cache); bytes sent = nginx access log, \$body_bytes_sent of every request," \
         "counted once the log has been quiet for 0.5 s${RACCESS_LOG:+; log saved as $RACCESS_LOG}"
    echo "- curl $(curl --version | awk 'NR==1 {print $2}'): one process, the shards one after another on one connection"
    echo "- load average (1/5/15 min) at the section's start / end: $RLOAD_START / $RLOAD_END (other work on the machine shows here)"
    echo
    echo "| (a) time to first tensor: numpy.load of MNT/${RT[path]} ($(mib "$tb") MiB), fresh mount, median of $REPS | s | samples |"
    echo "|---|---:|---|"
    echo "| \`ckptfs mount URL\` until it returns | $(median "${RTT_MOUNT[@]}") | $(IFS=/; echo "${RTT_MOUNT[*]}") |"
    echo "| numpy.load (numpy imported before the timer) | $(median "${RTT_LOAD[@]}") | $(IFS=/; echo "${RTT_LOAD[*]}") |"
    echo "| time to first tensor (mount + load) | $(median "${RTT_TOTAL[@]}") | $(IFS=/; echo "${RTT_TOTAL[*]}") |"
    echo "| for reference: \`curl -r\` of the tensor's byte range to /dev/null (curl's time_total) | $(median "${RTT_CURL[@]}") | $(IFS=/; echo "${RTT_CURL[*]}") |"
    echo
    echo "| (a) bytes the server sent (max of $REPS) | value | target | result |"
    echo "|---|---:|---|---|"
    echo "| during the mount ($(IFS=/; echo "${RTT_MREQ[*]}") requests) | $mmax B | - (needs $mneed B) | - |"
    echo "| during numpy.load ($(IFS=/; echo "${RTT_LREQ[*]}") requests) | $lmax B = tensor + $(awk -v a="$lmax" -v t="$tb" 'BEGIN{printf "%.2f", (a-t)/1048576}') MiB |" \
         "<= tensor + 2 MiB = $((tb + 2097152)) B | $(verdict "$lmax" '<=' $((tb + 2097152))) |"
    echo "| mount + load | $tmax B | <= tensor + 2 MiB + headers = $((tb + 2097152 + mneed)) B | $(verdict "$tmax" '<=' $((tb + 2097152 + mneed))) |"
    ((RTT_ERRS == 0)) || echo "| requests answered >= 400 | $RTT_ERRS | 0 | MISS |"
    echo
    echo "| (b) sequential read of $(gib "$RBYTES") GiB, fresh mount / new curl, server page cache warm | MB | MB/s (median) | samples |"
    echo "|---|---:|---:|---|"
    contender_rows fresh "${RCONTENDERS[@]}"
    echo
    echo "| ratio (MB/s) | mode | value | target | result |"
    echo "|---|---|---:|---|---|"
    ratio_rows "${RRATIOS[@]}"
    rsmin=$(printf '%s\n' "${RSEQ_SENT[@]}" | sort -g | head -n1); rsmax=$(max_of "${RSEQ_SENT[@]}")
    echo
    echo "| (b) bytes the server sent per ckptfs read (after the mount) | value | target | result |"
    echo "|---|---:|---|---|"
    echo "| min / max of $REPS ($(IFS=/; echo "${RSEQ_REQS[*]}") requests) | $rsmin / $rsmax B | <= the shards' $RBYTES B (no block fetched twice) | $(verdict "$rsmax" '<=' "$RBYTES") |"
    echo "| daemon CPU per read (user + system, samples $(IFS=/; echo "${RSEQ_CPU[*]}")) | $(median "${RSEQ_CPU[@]}") s | - | - |"
    ((RSEQ_ERRS == 0)) || echo "| requests answered >= 400 | $RSEQ_ERRS | 0 | MISS |"
    echo
    echo "| (c) \`--cache-dir\`: read, unmount, drop_caches, mount with the same dir, read again | value | target | result |"
    echo "|---|---:|---|---|"
    echo "| 1st mount (fresh dir): read of model.safetensors | ${RC[secs1]} s ($(awk -v b="${BYTES[ckptfs_http]}" -v s="${RC[secs1]}" 'BEGIN{printf "%.0f", (s > 0 ? b/1e6/s : 0)}') MB/s); server sent $(mib "${RC[sent1]}") MiB in ${RC[reqs1]} requests | - | - |"
    echo "| disk cache after it: bytes written / dir size (du) | $(mib "${RC[written1]}") / $(mib "${RC[du]}") MiB | - | - |"
    echo "| 2nd mount: \`ckptfs mount\` until it returns; server sent at mount | ${RC[mount2]} s; ${RC[msent2]} B in ${RC[mreqs2]} requests | - | - |"
    echo "| 2nd mount: bytes the server sent during the read (nginx log; ${RC[reqs2]} requests) | ${RC[sent2]} B | 0 | $(verdict "${RC[sent2]}" '<=' 0) |"
    echo "| 2nd mount: stats.json remote.bytes_fetched (whole mount) / remote.disk_cache_bytes | ${RC[fetched2]} / ${RC[dcbytes2]} B | - | - |"
    echo "| 2nd mount: disk_cache hits / misses / corrupt | ${RC[hits2]} / ${RC[misses2]} / ${RC[corrupt2]} | - | - |"
    echo "| 2nd mount: read of model.safetensors | ${RC[secs2]} s ($(awk -v b="${BYTES[ckptfs_http]}" -v s="${RC[secs2]}" 'BEGIN{printf "%.0f", (s > 0 ? b/1e6/s : 0)}') MB/s) | - | - |"
  fi
  if section tf; then
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
  fi
  if section opaque; then
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
  fi
  if section run; then
    echo
    echo "### run: a run directory of $RUN_CHECKPOINTS checkpoints ($RUNDIR)"
    echo
    echo "| what | value | target | result |"
    echo "|---|---:|---|---|"
    local rc rw
    rc=$(median "${RUNMOUNT_COLD[@]}"); rw=$(median "${RUNMOUNT_WARM[@]}")
    echo "| \`ckptfs mount\` until it returns, cold cache (median of $REPS: $(echo "${RUNMOUNT_COLD[*]}" | tr ' ' '/')) | ${rc} s | <= 1 s | $(verdict "$rc" '<=' 1) |"
    echo "| \`ckptfs mount\` until it returns, warm cache (median of $REPS: $(echo "${RUNMOUNT_WARM[*]}" | tr ' ' '/')) | ${rw} s | <= 1 s | $(verdict "$rw" '<=' 1) |"
    echo "| first \`ls\` inside one checkpoint, cold (headers parsed then; $(echo "${RUNOPEN[*]}" | tr ' ' '/')) | $(median "${RUNOPEN[@]}") s | - | - |"
    echo "| a checkpoint saved while mounted (tmp dir + rename) until \`ls MNT\` lists it ($(echo "${RUNVISIBLE[*]}" | tr ' ' '/')) | $(median "${RUNVISIBLE[@]}") s | <= 15 s | $(verdict "$(max_of "${RUNVISIBLE[@]}")" '<=' 15) |"
    echo "| ... until \`latest\` names it ($(echo "${RUNLATEST[*]}" | tr ' ' '/')) | $(median "${RUNLATEST[@]}") s | <= 15 s | $(verdict "$(max_of "${RUNLATEST[@]}")" '<=' 15) |"
    [[ -z $RUNRSS ]] || echo "| daemon VmRSS after the above | $(mib $((RUNRSS * 1024))) MiB | - | - |"
  fi
  if section deepspeed; then
    local dc dw
    dc=$(median "${DSMOUNT_COLD[@]}"); dw=$(median "${DSMOUNT_WARM[@]}")
    echo
    echo "### deepspeed: a ZeRO-3 checkpoint over 4 ranks, $(gib "$DSBYTES") GiB of rank files ($DSTAG)"
    echo
    echo "| what | value | target | result |"
    echo "|---|---:|---|---|"
    echo "| \`ckptfs mount\` of the tag dir until it returns, cold cache (median of $REPS: $(echo "${DSMOUNT_COLD[*]}" | tr ' ' '/')) | ${dc} s | <= 1 s | $(verdict "$dc" '<=' 1) |"
    echo "| \`ckptfs mount\` until it returns, warm cache (median of $REPS: $(echo "${DSMOUNT_WARM[*]}" | tr ' ' '/')) | ${dw} s | <= 1 s | $(verdict "$dw" '<=' 1) |"
    [[ -z $DSRSS ]] || echo "| daemon VmRSS after mount | $(mib $((DSRSS * 1024))) MiB | - | - |"
    echo
    echo "| sequential read | MB | cold MB/s (median) | cold samples | warm MB/s (median) | warm samples |"
    echo "|---|---:|---:|---|---:|---|"
    contender_rows "cold warm" "${DSCONTENDERS[@]}"
    echo
    echo "| ratio | mode | value | target | result |"
    echo "|---|---|---:|---|---|"
    ratio_rows "${DSRATIOS[@]}"
  fi
}

RESULT=$WORKDIR/results/bench-$(date -u +%Y%m%d-%H%M%S).md
report | tee "$RESULT"
log "results saved to $RESULT"
