#!/usr/bin/env bash
# ckptfs benchmark: every contender side by side in ONE run, ratios first.
#
#   scripts/bench.sh [--size 2G] [--workdir DIR] [--reps N] [--keep] [--no-build]
#                    [--level N] [--frame-size SIZE] [--sections plain,mmap,many,gpu,mount,zstd,torch,remote,wan,tf,run,deepspeed,dcp,keras,gguf,opaque]
#                    [SECTION...]
#
# What it measures (docs/benchmarks.md, "Reading the figures"):
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
#   * wan: remote reads over a loopback link with a first-byte latency and a rate per
#     connection (scripts/wan_server.py: a token bucket on every byte of every reply), in
#     two profiles, "object-store" (40 ms, 10 MB/s a connection) and "CDN" (15 ms,
#     40 MB/s); --size / 8 of F32 (256 MiB at 2G) in 4 shards of 4 MiB tensors
#     (WORKDIR/bench-wan-f32-*). Contenders, each on a fresh mount or process,
#     interleaved, median of --reps MB/s: ckptfs (`cat` of MNT/model.safetensors over
#     http://; a safetensors-style mmap loader copying each tensor out in file order,
#     scripts/bench/mmap_read.py --tensors), one `curl` (the 4 shards on one
#     connection), `aria2c -x16 -s16 -k1M -j4` (the 4 shards at once, to files) and
#     `rclone mount` of the server's S3 listener (cat of the 4 shards); bytes the
#     server sent per byte read (its --log); ckptfs's first tensor (a pread of it
#     after a fresh mount); then, object-store only, a second mount with the same
#     --cache-dir (bytes sent during its read, target 0) and two mounts at once
#     sharing a fresh --cache-dir (both read right; bytes sent twice, target 0).
#     Targets (object-store): cat >= 0.9x aria2c and >= 8x curl, mmap >= 0.8x cat,
#     first 4 MiB tensor <= 2 x (latency + size / rate), fetched <= 1.1x read.
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
#   * dcp: a torch.distributed.checkpoint directory over 4 ranks (.metadata + 4 .distcp
#     files, about 2 GiB of bf16 64 MiB matrices split Shard(0) and Shard(1) alternately)
#     written by scripts/make_dcp.py --case big: time until `ckptfs mount` of the dir
#     returns (cold and warm) and the daemon's RSS, then sequential read of the
#     consolidated MNT/model.safetensors (every tensor assembled from 4 ranks' chunks) vs
#     `cat` of the 4 .distcp files, cold and warm, interleaved, median of --reps.
#   * mmap: the path loaders use (safetensors, torch.load(mmap=True), numpy): map
#     MNT/model.safetensors, fault every page in and copy it out
#     (scripts/bench/mmap_read.py), raw and packed, vs the same on the shards, and `cat`
#     of each; cached (a fresh mount over page-cached backing files), warm, cold; the
#     daemon's stats.json account of where a read's time went.
#   * many: MANY_READERS processes (default twice the cores, at most 16) read different
#     tensors at once (scripts/bench/many_read.py, tensors dealt round-robin, pread):
#     MNT/tensors/ files and ranges of MNT/model.safetensors, raw and packed, vs the same
#     readers on the shards' ranges; cached and warm; the packed mount's bytes served,
#     decoded and read compressed.
#   * gpu: where torch.cuda.is_available() and safetensors imports (reported as skipped
#     otherwise): safetensors.torch.load_file(..., device="cuda") of MNT/model.safetensors,
#     raw and packed, vs of the shards (scripts/bench/gpu_load.py), cached and warm.
#   * keras: a Keras 3 .weights.h5 of about 1 GiB of float32 layers (no optimizer), and
#     the same in a .keras zip, written by scripts/make_keras.py --big: time until
#     `ckptfs mount` of the file returns (libhdf5 reads its metadata in a child; cold and
#     warm) and the daemon's RSS, then sequential read of MNT/model.safetensors of each vs
#     `cat` of the .weights.h5, cold and warm, interleaved, median of --reps.
#   * gguf: a llama-shaped GGUF v3 model of about --size (F16 matrices, F32 norms, Q8_0
#     embeddings, a 32000-token tokenizer), as one NAME.gguf and as 4 splits
#     NAME-0000K-of-0000N.gguf, written by scripts/make_gguf.py (which checks that the
#     splits merged are the one file): first a cmp of the mount's merged MNT/NAME.gguf with
#     the one file; time until `ckptfs mount` of the split-set dir returns (cold and warm)
#     and the daemon's RSS; then sequential read of MNT/NAME.gguf vs `cat` of the 4 splits,
#     of the unsplit file, and vs `cat` of the splits into a merged copy on the same disk
#     then sync (gguf-split --merge: read all, write all), cold and warm, interleaved,
#     median of --reps; then mmap of MNT/NAME.gguf vs of the unsplit file (llama.cpp maps
#     the model; scripts/bench/mmap_read.py), warm.
#   --sections (or bare section names: `bench.sh remote`) picks a subset
#   (default all sixteen, in one run); --level defaults to 3, --frame-size to
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
# BENCH_PYTHON (the Python the readers, loaders and generators run on, default
# /usr/bin/python3: a GPU machine's torch often lives in a venv),
# BENCH_READ_TIMEOUT (s, per read, default 900), BENCH_MOUNT_TIMEOUT (s, 120).
# Only what the chosen sections need is asked for: with --no-build (or CKPTFS_BIN)
# and --sections mmap,many,gpu the script needs no compiler, no squashfuse and no
# libfuse headers, so it runs on a machine where nothing can be installed.
#
# Layout: this driver (arguments, builds, the data the sections share, the
# section loop, the report's header) sources scripts/bench/lib.sh (timing,
# mounts with bounded waits, the sampling loop, table rows) and one
# scripts/bench/<section>.sh per section, which defines <section>_section (run
# it) and <section>_report (print its tables); RUN_ORDER and REPORT_ORDER list
# them. Adding a section: a new file, its name in both lists, the argument
# parser's and ensure_packages' lists.
#
# Adding a contender (in its section's file): define c_<id>_label and c_<id>_files, and optionally
# c_<id>_prepare (once), c_<id>_setup / c_<id>_teardown (per sample, e.g.
# mount/unmount) and c_<id>_read (replaces the default `cat FILES >
# /dev/null`; must print the number of bytes it consumed if that differs from
# the files' sizes), c_<id>_prime (the untimed reads of a warm sample, where
# the reader's own start-up is costly), then append <id> to CONTENDERS (cold and warm) or
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
PY=${BENCH_PYTHON:-/usr/bin/python3}

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
SECTIONS=plain,mmap,many,gpu,mount,zstd,torch,remote,wan,tf,run,deepspeed,dcp,keras,gguf,opaque
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

# ------------------------------------------------------------ library, sections
# Helpers in scripts/bench/lib.sh; each section's contenders, measurements and
# tables in scripts/bench/<section>.sh, sourced here at the top level (their
# declare -A stay global) and run in the same shell.
BENCH_LIB=$REPO/scripts/bench
# shellcheck source=scripts/bench/lib.sh
. "$BENCH_LIB/lib.sh"
# sections in the order they run, and the order their tables are printed in
RUN_ORDER=(plain mmap many gpu mount zstd torch remote wan tf run deepspeed dcp keras gguf opaque)
REPORT_ORDER=(plain mmap many gpu mount zstd torch remote wan tf opaque run deepspeed dcp keras gguf)
# shellcheck source=scripts/bench/plain.sh
. "$BENCH_LIB/plain.sh"
# shellcheck source=scripts/bench/mount.sh
. "$BENCH_LIB/mount.sh"
# shellcheck source=scripts/bench/zstd.sh
. "$BENCH_LIB/zstd.sh"
# shellcheck source=scripts/bench/torch.sh
. "$BENCH_LIB/torch.sh"
# shellcheck source=scripts/bench/remote.sh
. "$BENCH_LIB/remote.sh"
# shellcheck source=scripts/bench/wan.sh
. "$BENCH_LIB/wan.sh"
# shellcheck source=scripts/bench/tf.sh
. "$BENCH_LIB/tf.sh"
# shellcheck source=scripts/bench/run.sh
. "$BENCH_LIB/run.sh"
# shellcheck source=scripts/bench/deepspeed.sh
. "$BENCH_LIB/deepspeed.sh"
# shellcheck source=scripts/bench/dcp.sh
. "$BENCH_LIB/dcp.sh"
# shellcheck source=scripts/bench/keras.sh
. "$BENCH_LIB/keras.sh"
# shellcheck source=scripts/bench/gguf.sh
. "$BENCH_LIB/gguf.sh"
# shellcheck source=scripts/bench/mmap.sh
. "$BENCH_LIB/mmap.sh"
# shellcheck source=scripts/bench/many.sh
. "$BENCH_LIB/many.sh"
# shellcheck source=scripts/bench/gpu.sh
. "$BENCH_LIB/gpu.sh"
# shellcheck source=scripts/bench/opaque.sh
. "$BENCH_LIB/opaque.sh"

# FILE:LINE, since the failing line may be in a sourced section file
trap 'on_err $? "${BASH_SOURCE[0]##*/}:$LINENO" "$BASH_COMMAND"' ERR

usage() {
  sed -n '2,/^$/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
}


SCRATCH=''
GENERATED=()
cleanup() {
  local rc=$? mnt left=0
  trap - ERR
  set +e
  for mnt in "${!MOUNT_PID[@]}"; do unmount_one "$mnt" || { left=1; log "could not unmount $mnt"; }; done
  nginx_stop   # after the mounts that talk to it, before the scratch dir holding its config
  wan_stop
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
    plain|mmap|many|gpu|mount|zstd|torch|remote|wan|tf|run|deepspeed|dcp|keras|gguf|opaque) BARE_SECTIONS+=("$1"); shift ;;
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
[[ ,$SECTIONS, =~ ^(,(plain|mmap|many|gpu|mount|zstd|torch|remote|wan|tf|run|deepspeed|dcp|keras|gguf|opaque))+,$ ]] ||
  { echo "$PROG: error: --sections takes a comma list of plain, mmap, many, gpu, mount, zstd, torch, remote, wan, tf, run, deepspeed, dcp, keras, gguf, opaque" >&2; exit 2; }
section() { [[ ,$SECTIONS, == *,$1,* ]]; }
mkdir -p -- "$WORKDIR"
WORKDIR=$(cd "$WORKDIR" && pwd)

# ------------------------------------------------------------ prerequisites
[[ $(id -u) == 0 ]] || die "must run as root (drop_caches, FUSE mounts)"
[[ -c /dev/fuse ]] || die "/dev/fuse missing: FUSE is not available here"

ensure_packages() {
  # command -> Debian package; what every section needs, then each section's own
  local -A need=([pgrep]=procps [timeout]=coreutils [awk]=gawk)
  local building=0
  [[ -z ${CKPTFS_BIN:-} && $NO_BUILD == 0 ]] && building=1
  ((building)) && need+=([g++]=g++ [cmake]=cmake [pkg-config]=pkg-config)
  if section plain; then need+=([gcc]=gcc [pkg-config]=pkg-config [fusermount3]=fuse3); fi
  if section zstd; then
    need+=([squashfuse_ll]=squashfuse [mksquashfs]=squashfs-tools [zstd]=zstd
           [fusermount3]=fuse3 [fincore]=util-linux)
  fi
  if section many; then need+=([zstd]=zstd); fi
  if section mmap || section many || section gpu; then need+=([fincore]=util-linux); fi
  if section remote; then need+=([curl]=curl); fi
  if section wan; then need+=([curl]=curl [aria2c]=aria2 [rclone]=rclone [fusermount3]=fuse3 [md5sum]=coreutils); fi
  if section gguf; then need+=([cmp]=diffutils [sync]=coreutils); fi
  local missing=() c
  for c in "${!need[@]}"; do command -v "$c" >/dev/null 2>&1 || missing+=("${need[$c]}"); done
  if section plain; then
    pkg-config --exists fuse3 2>/dev/null || missing+=(libfuse3-dev)
    [[ -f /usr/share/doc/libfuse3-dev/examples/passthrough_ll.c ]] || missing+=(libfuse3-dev)
  fi
  [[ -x $PY ]] || missing+=(python3)
  # building ckptfs needs the one list README and the other scripts install
  local p
  if ((building)); then
    for p in $("$REPO/scripts/packages.sh" build); do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
  fi
  if section zstd || section dcp; then "$PY" -c 'import torch' 2>/dev/null || missing+=(python3-torch); fi
  if section keras; then "$PY" -c 'import h5py' 2>/dev/null || missing+=(python3-h5py); fi
  if section plain || section mmap || section many || section gpu || section zstd || section torch ||
    section remote || section wan || section gguf; then
    "$PY" -c 'import numpy' 2>/dev/null || missing+=(python3-numpy)
  fi
  if section remote; then [[ -x $NGINX ]] || missing+=(nginx-light); fi
  ((${#missing[@]})) || return 0
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  command -v apt-get >/dev/null 2>&1 ||
    die "missing here, and no apt-get to install them: ${missing[*]} (Debian package names)"
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

# ------------------------------------------------------------------- main
build_ckptfs
if section plain; then build_passthrough_ll; fi

# the plain BF16 checkpoint: read by plain, packed by zstd, a torch source
DATA='' SHARD_FILES=()
if section plain || section mmap || section many || section gpu || section zstd || section torch; then
  DATA=$WORKDIR/bench-bf16-${SIZE}-${SHARDS}shards
  gen_data "$DATA" --kind bench --total-bytes "$SIZE" --dtype BF16 --shards "$SHARDS"
  mapfile -t SHARD_FILES < <(shard_files "$DATA")
  ((${#SHARD_FILES[@]})) || die "no shard files found in $DATA"
fi

for bench_section in "${RUN_ORDER[@]}"; do
  if section "$bench_section"; then "${bench_section}_section"; fi
done

# ------------------------------------------------------------------ report

# Can libfuse splice a read reply? It grows a per-thread pipe to the reply plus a page per
# segment and two more, which F_SETPIPE_SZ rounds up to a power of two: ckptfs's replies
# (992 KiB requests) fit 1 MiB, the default fs.pipe-max-size; passthrough_ll's (1 MiB)
# need 2 MiB, past it, which takes CAP_SYS_RESOURCE or a raised limit. Without splice,
# libfuse reads the shard bytes into a fresh buffer and writes that (two copies).
splice_note() {
  local pmax cap ckptfs passthrough
  pmax=$(cat /proc/sys/fs/pipe-max-size 2>/dev/null || echo 0)
  cap=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
  ckptfs=copied passthrough=copied
  if (( (16#${cap:-0} >> 24) & 1 )); then
    ckptfs=spliced passthrough=spliced
  else
    ((pmax >= 1048576)) && ckptfs=spliced
    ((pmax >= 2097152)) && passthrough=spliced
  fi
  echo "ckptfs $ckptfs, passthrough_ll $passthrough (fs.pipe-max-size $pmax)"
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
  dirty=$(git -C "$REPO" status --porcelain --untracked-files=no 2>/dev/null | head -c1 || true)
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
  local name
  for name in "${REPORT_ORDER[@]}"; do
    if section "$name"; then "${name}_report"; fi
  done
}

RESULT=$WORKDIR/results/bench-$(date -u +%Y%m%d-%H%M%S).md
report | tee "$RESULT"
log "results saved to $RESULT"
