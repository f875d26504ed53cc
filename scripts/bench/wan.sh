# shellcheck shell=bash disable=SC2153  # SIZE, REPS, SCRATCH, CKPTFS: the driver's and lib.sh's
# The wan section of scripts/bench.sh: remote reads over a loopback "network" with a
# first-byte latency and a rate per connection (scripts/wan_server.py), in two profiles;
# ckptfs (cat, an mmap loader, one tensor) vs curl, aria2c and rclone mount; bytes
# fetched per byte read; --cache-dir reuse, and two mounts sharing one --cache-dir.
# Sourced by bench.sh (never run on its own): it defines wan_section (runs the
# measurements, fills globals), wan_report (prints its tables) and wan_stop (cleanup).

# Profiles: "NAME LATENCY_MS RATE_MB/s". The issue's targets are judged on the first.
WAN_PROFILES=("object-store 40 10" "CDN 15 40")
WCONTENDERS=(wan_ckptfs wan_hf wan_mmap wan_curl wan_aria2 wan_rclone)
WAN_PID='' WAN_LOG='' WAN_FILES_PORT='' WAN_S3_PORT='' WAN_HUB_PORT=''
WAN_HUB_COMMIT=0123456789abcdef0123456789abcdef01234567   # the hub repo bench/wan's main
WAN_TENSOR_BYTES=$((4 << 20))
ARIA2_OPTS=(-x16 -s16 -k1M -j4)   # the issue's -x16 -s16 -k1M; -j4: the 4 shards at once

# ---------------------------------------------------------------- the server
# wan_start LATENCY_MS RATE: scripts/wan_server.py serving WAN_ROOT (files), the S3
# bucket WAN_S3ROOT/wan and the Hub repo bench/wan of WAN_HUB (its LFS files through the
# server's CDN listener), logging to a fresh WAN_LOG; up once it writes its port file.
wan_start() {
  local ports="$SCRATCH/wan/ports.json" i
  wan_stop
  rm -f -- "$ports"
  WAN_LOG=$SCRATCH/wan/requests-$1ms-$2MBps.jsonl
  : >"$WAN_LOG"
  "$PY" "$REPO/scripts/wan_server.py" --latency-ms "$1" --rate "$2" --files "$WAN_ROOT" \
    --s3 "$WAN_S3ROOT" --hub "$WAN_HUB" --log "$WAN_LOG" --port-file "$ports" \
    >>"$SCRATCH/logs/wan_server.log" 2>&1 &
  WAN_PID=$!
  for ((i = 0; i < 200; i++)); do
    [[ -s $ports ]] && break
    pid_alive "$WAN_PID" || { cat "$SCRATCH/logs/wan_server.log" >&2; die "wan_server.py exited"; }
    sleep 0.05
  done
  [[ -s $ports ]] || die "wan_server.py wrote no port file within 10 s"
  read -r WAN_FILES_PORT WAN_S3_PORT WAN_HUB_PORT < <("$PY" -c \
    'import json, sys; p = json.load(open(sys.argv[1])); print(p["files"], p["s3"], p["hub"])' "$ports")
  # The hub hashes each LFS file (its sha256) when first listed: before any sample.
  curl -sS --fail -o /dev/null "http://127.0.0.1:$WAN_HUB_PORT/api/models/bench/wan/tree/main?recursive=true" ||
    die "wan_server.py's hub does not list bench/wan"
  WURL=http://127.0.0.1:$WAN_FILES_PORT/${WDATA##*/}/
  log "wan_server.py: $1 ms to the first byte, $2 MB/s a connection; files on :$WAN_FILES_PORT, s3 on :$WAN_S3_PORT"
}

# Stop our server (if any): it exits at once on TERM.
wan_stop() {
  [[ -n $WAN_PID ]] || return 0
  kill -TERM "$WAN_PID" 2>/dev/null || true
  wait "$WAN_PID" 2>/dev/null || true
  WAN_PID=''
}

# wan_mark: the log's line count once no line has come for 0.3 s (a line is written as
# each reply ends), at most 15 s
wan_mark() {
  local n last=-1 i
  for ((i = 0; i < 50; i++)); do
    n=$(wc -l <"$WAN_LOG")
    [[ $n == "$last" ]] && break
    last=$n
    sleep 0.3
  done
  echo "$n"
}

# wan_sent FROM TO: "bytes requests dup_bytes errors" of log lines FROM+1..TO: body
# bytes sent, requests, bytes of an object sent more than once (the sum of what each
# request sent minus the union of the byte ranges, per object), and answers >= 400
# but for 404s to HEADs and GETs of a directory (a mount probes optional names).
wan_sent() {
  "$PY" - "$WAN_LOG" "$1" "$2" <<'EOF'
import json, re, sys
lines = open(sys.argv[1]).read().splitlines()[int(sys.argv[2]):int(sys.argv[3])]
sent = requests = errors = 0
spans = {}
for line in lines:
    r = json.loads(line)
    requests += 1
    sent += r["bytes"]
    if r["status"] >= 400 and not (r["status"] == 404 and (r["method"] == "HEAD" or r["path"].endswith("/"))):
        errors += 1
    if r["method"] == "GET" and r["status"] in (200, 206) and r["bytes"]:
        m = re.match(r"bytes=(\d+)-", r["range"])
        start = int(m.group(1)) if m and r["status"] == 206 else 0
        spans.setdefault(r["listener"] + r["path"], []).append((start, start + r["bytes"]))
union = 0
for ranges in spans.values():
    end = -1
    for a, b in sorted(ranges):
        if b > end:
            union += b - max(a, end)
            end = b
print(sent, requests, sum(b - a for rs in spans.values() for a, b in rs) - union, errors)
EOF
}

# wan_account ID: after a contender's read: the server's bytes since WMARK0 (set by its
# setup, after any mount) per byte the read returned, and the server's CPU seconds
wan_account() {
  local id=$1 m out sent n dup err read_bytes files
  m=$(wan_mark)
  out=$(wan_sent "$WMARK0" "$m"); read -r sent n dup err <<<"$out"
  mapfile -t files < <("c_${id}_files")
  read_bytes=$(sum_sizes "${files[@]}")
  WFETCH[$WPROF,$id]="${WFETCH[$WPROF,$id]:-} $(awk -v s="$sent" -v b="$read_bytes" 'BEGIN{printf "%.3f", s/b}')"
  WERRS=$((WERRS + err))
  log "    $id: server sent $(mib "$sent") MiB in $n requests ($(mib "$dup") MiB twice, $err errors);" \
      "server CPU $(awk -v a="$WCPU0" -v b="$(proc_cpu "$WAN_PID")" 'BEGIN{printf "%.2f", b - a}') s"
}
wan_begin() { WMARK0=$(wan_mark); WCPU0=$(proc_cpu "$WAN_PID"); }

# ------------------------------------------------------------- contenders
# Mode fresh: each sample on a new mount (ckptfs, rclone) or a new process (curl,
# aria2c); the server's files stay in the page cache.
c_wan_ckptfs_label() { echo "ckptfs: cat MNT/model.safetensors (http source, fresh mount, not timed)"; }
c_wan_ckptfs_setup() { ckptfs_mount "$WURL" "$SCRATCH/mnt/wan"; wan_begin; }
c_wan_ckptfs_files() { echo "$SCRATCH/mnt/wan/model.safetensors"; }
c_wan_ckptfs_teardown() { wan_account wan_ckptfs; unmount_one "$SCRATCH/mnt/wan" || die "could not unmount ckptfs"; }

c_wan_hf_label() { echo "ckptfs: cat MNT/model.safetensors (hf:// source: the hub's API, shards from its CDN; fresh mount)"; }
c_wan_hf_setup() {
  ckptfs_mount hf://bench/wan "$SCRATCH/mnt/wan" --endpoint "http://127.0.0.1:$WAN_HUB_PORT"
  wan_begin
}
c_wan_hf_files() { c_wan_ckptfs_files; }
c_wan_hf_teardown() { wan_account wan_hf; unmount_one "$SCRATCH/mnt/wan" || die "could not unmount ckptfs"; }

c_wan_mmap_label() { echo "ckptfs: mmap loader, each tensor copied out in file order (scripts/bench/mmap_read.py --tensors)"; }
c_wan_mmap_setup() { c_wan_ckptfs_setup; }
c_wan_mmap_files() { c_wan_ckptfs_files; }
# prints "BYTES SECONDS": the tensors' bytes, and its own time (Python's start-up left out)
c_wan_mmap_read() {
  local rc=0
  timeout --kill-after=10 "$READ_TIMEOUT" "$PY" "$REPO/scripts/bench/mmap_read.py" --tensors "$@" || rc=$?
  ((rc == 0)) || die "mmap_read.py --tensors $* failed (exit $rc)"
}
c_wan_mmap_teardown() { wan_account wan_mmap; unmount_one "$SCRATCH/mnt/wan" || die "could not unmount ckptfs"; }

c_wan_curl_label() { echo "curl: the 4 shards one after another, one process (one connection), to /dev/null"; }
c_wan_curl_setup() { wan_begin; }
c_wan_curl_files() { printf '%s\n' "${WSHARD_FILES[@]}"; }
c_wan_curl_read() {
  local f args=() rc=0 out
  for f in "$@"; do args+=("$WURL${f##*/}" -o /dev/null); done
  out=$(timeout --kill-after=10 "$READ_TIMEOUT" curl -sS --fail -w '%{size_download}\n' "${args[@]}") || rc=$?
  ((rc == 0)) || die "curl failed (exit $rc): ${args[*]}"
  awk '{s += $1} END {printf "%.0f\n", s}' <<<"$out"
}
c_wan_curl_teardown() { wan_account wan_curl; }

c_wan_aria2_label() { echo "aria2c ${ARIA2_OPTS[*]}: the 4 shards (input list), to files in the workdir"; }
c_wan_aria2_setup() {
  local f
  rm -rf --one-file-system -- "$SCRATCH/wan/dl"; mkdir -p -- "$SCRATCH/wan/dl"
  for f in "${WSHARD_FILES[@]}"; do echo "$WURL${f##*/}"; done >"$SCRATCH/wan/aria2.list"
  wan_begin
}
c_wan_aria2_files() { c_wan_curl_files; }
c_wan_aria2_read() {
  local rc=0
  timeout --kill-after=10 "$READ_TIMEOUT" aria2c "${ARIA2_OPTS[@]}" -i "$SCRATCH/wan/aria2.list" \
    -d "$SCRATCH/wan/dl" --file-allocation=none --allow-overwrite=true --auto-file-renaming=false \
    --console-log-level=error --summary-interval=0 -q >>"$SCRATCH/logs/aria2c.log" 2>&1 || rc=$?
  ((rc == 0)) || { tail -n 20 "$SCRATCH/logs/aria2c.log" >&2; die "aria2c failed (exit $rc)"; }
}
c_wan_aria2_teardown() {
  local f
  for f in "${WSHARD_FILES[@]}"; do
    cmp -s -- "$f" "$SCRATCH/wan/dl/${f##*/}" || die "aria2c's ${f##*/} differs from the source"
  done
  wan_account wan_aria2
  rm -rf --one-file-system -- "$SCRATCH/wan/dl"
}

# rclone's s3 backend against the server's S3 listener, anonymous. AWS_CA_BUNDLE is unset
# for it: with one set, rclone 1.60's S3 client refuses to start (LoadCustomCABundleError).
c_wan_rclone_label() { echo "rclone mount (s3 backend, defaults): cat of the 4 shards (fresh mount, not timed)"; }
c_wan_rclone_setup() {
  printf '[wan]\ntype = s3\nprovider = Other\nenv_auth = false\nendpoint = http://127.0.0.1:%s\n' \
    "$WAN_S3_PORT" >"$SCRATCH/wan/rclone.conf"
  fg_mount rclone "$SCRATCH/mnt/rclone" env -u AWS_CA_BUNDLE rclone mount "wan:wan" \
    "$SCRATCH/mnt/rclone" --config "$SCRATCH/wan/rclone.conf" --read-only
  wan_begin
}
c_wan_rclone_files() { local f; for f in "${WSHARD_FILES[@]}"; do echo "$SCRATCH/mnt/rclone/${f##*/}"; done; }
c_wan_rclone_teardown() { wan_account wan_rclone; unmount_one "$SCRATCH/mnt/rclone" || die "could not unmount rclone"; }

# ------------------------------------------------------------ one tensor
# What a loader does first, timed from open: MNT/model.safetensors opened, its header read
# and parsed (ckptfs makes the header, but the kernel's read-ahead of those first pages
# already asks for tensor bytes), then a pread of the first tensor in file order, compared
# with the source shard's bytes. Prints "seconds nbytes same".
WAN_TENSOR_PY='
import json, os, sys, time
mnt_file, src = sys.argv[1], sys.argv[2]
def header(fd):
    n = int.from_bytes(os.pread(fd, 8, 0), "little")
    h = json.loads(os.pread(fd, n, 8)); h.pop("__metadata__", None)
    return 8 + n, h
t0 = time.perf_counter()
fd = os.open(mnt_file, os.O_RDONLY)
base, h = header(fd)
name, e = min(h.items(), key=lambda kv: kv[1]["data_offsets"][0])
b, end = e["data_offsets"]
data = os.pread(fd, end - b, base + b)
secs = time.perf_counter() - t0
shard = json.load(open(os.path.join(src, "model.safetensors.index.json")))["weight_map"][name]
sfd = os.open(os.path.join(src, shard), os.O_RDONLY)
sbase, sh = header(sfd)
sb, se = sh[name]["data_offsets"]
print(f"{secs:.3f} {len(data)} {int(data == os.pread(sfd, se - sb, sbase + sb))}")
'

wan_tensor_sample() {
  local mnt=$SCRATCH/mnt/wan out secs nbytes same sent n dup err
  ckptfs_mount "$WURL" "$mnt"
  wan_begin
  out=$(timeout --kill-after=10 "$READ_TIMEOUT" "$PY" -c "$WAN_TENSOR_PY" "$mnt/model.safetensors" "$WDATA") ||
    die "reading the first tensor of $mnt/model.safetensors failed"
  read -r secs nbytes same <<<"$out"
  [[ $same == 1 ]] || die "the first tensor of $mnt/model.safetensors differs from the source"
  out=$(wan_sent "$WMARK0" "$(wan_mark)"); read -r sent n dup err <<<"$out"
  unmount_one "$mnt" || die "could not unmount ckptfs"
  WT_MOUNT[$WPROF]="${WT_MOUNT[$WPROF]:-} $CKPTFS_MOUNT_SECS"
  WT_READ[$WPROF]="${WT_READ[$WPROF]:-} $secs"
  WT_FETCH[$WPROF]="${WT_FETCH[$WPROF]:-} $(awk -v s="$sent" -v b="$nbytes" 'BEGIN{printf "%.3f", s/b}')"
  WT_BYTES=$nbytes
  log "  first tensor: mount ${CKPTFS_MOUNT_SECS}s, read of $nbytes B ${secs}s; server sent $sent B in $n requests"
}

# ------------------------------------------------------------- --cache-dir
# (object store only) a fresh --cache-dir filled by one mount's read, then a second
# mount with it; then two mounts at once sharing another fresh dir, both read at once.
wan_cache_dir() {
  local cdir=$SCRATCH/wan/cache-dir mnt=$SCRATCH/mnt/wan m0 m1 m2 out size a b sa sb
  size=$((WBYTES * 2 / 1048576 + 64))M
  rm -rf --one-file-system -- "$cdir"; mkdir -p -- "$cdir"
  ckptfs_mount "$WURL" "$mnt" --cache-dir "$cdir" --cache-dir-size "$size"
  read_files "$mnt/model.safetensors"
  unmount_one "$mnt" || die "could not unmount ckptfs"
  m0=$(wan_mark)
  ckptfs_mount "$WURL" "$mnt" --cache-dir "$cdir" --cache-dir-size "$size"
  m1=$(wan_mark)
  read_files "$mnt/model.safetensors"
  m2=$(wan_mark)
  unmount_one "$mnt" || die "could not unmount ckptfs"
  out=$(wan_sent "$m0" "$m1"); read -r "WC[msent]" "WC[mreqs]" _ _ <<<"$out"
  out=$(wan_sent "$m1" "$m2"); read -r "WC[sent]" "WC[reqs]" _ _ <<<"$out"
  log "  2nd mount with the same --cache-dir: ${WC[msent]} B at mount, ${WC[sent]} B during the read"

  rm -rf --one-file-system -- "$cdir"; mkdir -p -- "$cdir"
  ckptfs_mount "$WURL" "$mnt.a" --cache-dir "$cdir" --cache-dir-size "$size"
  ckptfs_mount "$WURL" "$mnt.b" --cache-dir "$cdir" --cache-dir-size "$size"
  m0=$(wan_mark)
  a=$SCRATCH/wan/a.md5 b=$SCRATCH/wan/b.md5
  timeout "$READ_TIMEOUT" md5sum <"$mnt.a/model.safetensors" >"$a" & sa=$!
  timeout "$READ_TIMEOUT" md5sum <"$mnt.b/model.safetensors" >"$b" & sb=$!
  wait "$sa" || die "reading $mnt.a/model.safetensors failed"
  wait "$sb" || die "reading $mnt.b/model.safetensors failed"
  m1=$(wan_mark)
  unmount_one "$mnt.a" || die "could not unmount ckptfs"
  unmount_one "$mnt.b" || die "could not unmount ckptfs"
  WC[md5a]=$(cut -d' ' -f1 "$a") WC[md5b]=$(cut -d' ' -f1 "$b")
  out=$(wan_sent "$m0" "$m1"); read -r "WC[ssent]" "WC[sreqs]" "WC[sdup]" _ <<<"$out"
  log "  two mounts sharing a fresh --cache-dir: server sent $(mib "${WC[ssent]}") MiB," \
      "$(mib "${WC[sdup]}") MiB of it twice; md5 ${WC[md5a]} / ${WC[md5b]} (source ${WC[md5ref]})"
  rm -rf --one-file-system -- "$cdir"
}

# ------------------------------------------------------------------ section
wan_section() {
  local p name lat rate r t0 id mnt=$SCRATCH/mnt/wan
  WBYTES=$(($(size_to_bytes "$SIZE") / 8))   # 256 MiB at the default 2G
  local tensors=$((WBYTES / WAN_TENSOR_BYTES))
  ((tensors >= 4)) || tensors=4
  WDATA=$WORKDIR/bench-wan-f32-${SIZE}-4shards
  gen_data "$WDATA" --kind bench --total-bytes "$WBYTES" --dtype F32 --shards 4 --tensors "$tensors"
  mapfile -t WSHARD_FILES < <(shard_files "$WDATA")
  ((${#WSHARD_FILES[@]} == 4)) || die "expected 4 shards in $WDATA"
  WAN_ROOT=$WORKDIR WAN_S3ROOT=$SCRATCH/wan/s3
  mkdir -p -- "$WAN_S3ROOT"; ln -sfn -- "$WDATA" "$WAN_S3ROOT/wan"   # the bucket "wan"
  WAN_HUB=$SCRATCH/wan/hub   # the repo bench/wan: its main is a commit holding the shards
  mkdir -p -- "$WAN_HUB/bench/wan/refs" "$WAN_HUB/bench/wan/commits"
  ln -sfn -- "$WDATA" "$WAN_HUB/bench/wan/commits/$WAN_HUB_COMMIT"
  echo "$WAN_HUB_COMMIT" >"$WAN_HUB/bench/wan/refs/main"
  read_files "${WSHARD_FILES[@]}"   # the server's page cache
  declare -gA WFETCH=() WT_MOUNT=() WT_READ=() WT_FETCH=() WC=() WSAVED=() WBYTES_OF=()
  WERRS=0 WLOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
  # the reference: the merged file of a local mount of the same shards
  ckptfs_mount "$WDATA" "$mnt"
  WC[md5ref]=$(md5sum <"$mnt/model.safetensors" | cut -d' ' -f1)
  unmount_one "$mnt" || die "could not unmount ckptfs"

  for p in "${WAN_PROFILES[@]}"; do
    read -r name lat rate <<<"$p"
    WPROF=$name
    wan_start "$lat" "$rate"
    log "$name: first tensor, $REPS reps"
    for ((r = 1; r <= REPS; r++)); do wan_tensor_sample; done
    log "$name: ${#WCONTENDERS[@]} contenders x $REPS reps, interleaved"
    t0=$(now_ns)
    sample_rounds fresh "${WCONTENDERS[@]}"
    log "$name: took $(elapsed "$t0" "$(now_ns)") s"
    if [[ $name == "${WAN_PROFILES[0]%% *}" ]]; then
      log "$name: --cache-dir reuse and sharing"
      wan_cache_dir
    fi
    # run_sample keeps one list per (contender, mode): set this profile's aside
    for id in "${WCONTENDERS[@]}"; do
      WSAVED[$name,$id]=${SAMPLES[$id,fresh]:-}; unset "SAMPLES[$id,fresh]"
      WBYTES_OF[$id]=${BYTES[$id]}
    done
    gzip -c -- "$WAN_LOG" >"$WORKDIR/results/wan-requests-$name-$(date -u +%Y%m%d-%H%M%S).jsonl.gz" || true
    wan_stop
  done
  WLOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
}

# ------------------------------------------------------------------ report
# wan_targets: the issue's targets, object-store profile
wan_targets() {
  local p=${WAN_PROFILES[0]} name lat rate bound v
  read -r name lat rate <<<"$p"
  bound=$(awk -v l="$lat" -v b="$WT_BYTES" -v r="$rate" 'BEGIN{printf "%.3f", 2 * (l / 1000 + b / 1e6 / r)}')
  echo "| target ($name profile) | value | target | result |"
  echo "|---|---:|---|---|"
  v=$(wan_ratio wan_ckptfs wan_aria2)
  echo "| sequential read: ckptfs cat / aria2c | ${v}x | >= 0.9x | $(verdict "$v" '>=' 0.9) |"
  v=$(wan_ratio wan_ckptfs wan_curl)
  echo "| sequential read: ckptfs cat / curl | ${v}x | >= 8x | $(verdict "$v" '>=' 8) |"
  v=$(wan_ratio wan_mmap wan_ckptfs)
  echo "| mmap loader / ckptfs cat | ${v}x | >= 0.8x | $(verdict "$v" '>=' 0.8) |"
  # shellcheck disable=SC2086
  v=$(median ${WT_READ[$name]})
  echo "| first $(mib "$WT_BYTES") MiB tensor: open + header + pread after the mount (median s) | $v | <= 2 x ($lat ms + size / $rate MB/s) = $bound | $(verdict "$v" '<=' "$bound") |"
  for id in wan_tensor wan_ckptfs wan_hf wan_mmap; do
    # shellcheck disable=SC2086
    if [[ $id == wan_tensor ]]; then v=$(max_of ${WT_FETCH[$name]}); else v=$(max_of ${WFETCH[$name,$id]}); fi
    echo "| bytes fetched / bytes read, $(wan_what "$id") (max of $REPS) | $v | <= 1.1 | $(verdict "$v" '<=' 1.1) |"
  done
  echo "| 2nd mount, same --cache-dir: bytes the server sent during the read (mount: ${WC[msent]} B in ${WC[mreqs]} requests) | ${WC[sent]} B | 0 | $(verdict "${WC[sent]}" '<=' 0) |"
  local same=0
  [[ ${WC[md5a]} == "${WC[md5ref]}" && ${WC[md5b]} == "${WC[md5ref]}" ]] && same=1
  echo "| two mounts at once, one fresh --cache-dir: both read the source's bytes (md5) | $([[ $same == 1 ]] && echo yes || echo no) | yes | $( ((same)) && echo PASS || echo MISS) |"
  echo "| the same: bytes the server sent twice between them (of $(mib "${WC[ssent]}") MiB sent) | ${WC[sdup]} B | 0 | $(verdict "${WC[sdup]}" '<=' 0) |"
  ((WERRS == 0)) || echo "| requests answered >= 400 (all profiles) | $WERRS | 0 | MISS |"
}

# slashes WORDS...: the words joined by '/' (a table's samples column)
slashes() { local -a a; read -ra a <<<"$*"; local IFS=/; echo "${a[*]}"; }

wan_what() {
  case $1 in
    wan_tensor) echo "one tensor" ;; wan_ckptfs) echo "whole-file cat" ;; wan_mmap) echo "mmap loader" ;;
    wan_hf) echo "whole-file cat over hf://" ;;
  esac
}

# wan_ratio NUM DEN: ratio of the median MB/s of the profile whose samples are in SAMPLES
wan_ratio() {
  awk -v a="${MED[$1,fresh]}" -v b="${MED[$2,fresh]}" 'BEGIN{if (b > 0) printf "%.2f", a/b; else print "nan"}'
}

wan_report() {
  local p name lat rate id row
  echo
  echo "### wan: remote reads over a loopback link with latency and a rate per connection"
  echo
  echo "- data: $(gib "$(sum_sizes "${WSHARD_FILES[@]}")") GiB F32 in 4 shards, tensors of $(mib "$WAN_TENSOR_BYTES") MiB ($WDATA)"
  echo "- server: scripts/wan_server.py (python3 stdlib, a thread per connection): every reply waits the latency" \
       "before its first byte, then a token bucket per connection (64 KiB burst) on every byte; ckptfs reads" \
       "its files listener (http://) and, over hf://, its hub and CDN listeners; rclone its S3 listener; bytes fetched = the body bytes its --log records" \
       "between the mount (or process start) and the end of the read"
  echo "- ckptfs: defaults; aria2c $(aria2c --version | awk 'NR==1 {print $3}') ${ARIA2_OPTS[*]} -i LIST (the 4 shard URLs; -j4: all at once, 16 connections each)," \
       "--file-allocation=none, to files in the workdir; curl $(curl --version | awk 'NR==1 {print $2}');" \
       "rclone $(rclone version 2>/dev/null | awk 'NR==1 {print $2}') mount, s3 backend, defaults but --read-only"
  echo "- load average (1/5/15 min) at the section's start / end: $WLOAD_START / $WLOAD_END"
  for p in "${WAN_PROFILES[@]}"; do
    read -r name lat rate <<<"$p"
    for id in "${WCONTENDERS[@]}"; do
      # shellcheck disable=SC2004  # associative arrays
      SAMPLES[$id,fresh]=${WSAVED[$name,$id]} BYTES[$id]=${WBYTES_OF[$id]}
    done
    medians fresh "${WCONTENDERS[@]}"
    echo
    echo "#### $name: $lat ms to the first byte, $rate MB/s a connection"
    echo
    if [[ $name == "${WAN_PROFILES[0]%% *}" ]]; then wan_targets; echo; fi
    echo "| ratio (MB/s, median) | value |"
    echo "|---|---:|"
    for row in "wan_ckptfs wan_curl" "wan_ckptfs wan_aria2" "wan_ckptfs wan_rclone" "wan_hf wan_ckptfs" \
      "wan_hf wan_aria2" "wan_mmap wan_ckptfs"; do
      # shellcheck disable=SC2086
      echo "| ${row% *} / ${row#* } | $(wan_ratio $row)x |"
    done
    echo
    echo "| contender (fresh mount or process, median of $REPS) | MB | MB/s | samples | fetched / read |"
    echo "|---|---:|---:|---|---|"
    for id in "${WCONTENDERS[@]}"; do
      echo "| $("c_${id}_label") | $(awk -v b="${BYTES[$id]}" 'BEGIN{printf "%.0f", b/1e6}') | ${MED[$id,fresh]} |" \
           "$(slashes "${SAMPLES[$id,fresh]}") | $(slashes "${WFETCH[$name,$id]:-}") |"
    done
    # shellcheck disable=SC2086
    echo "| ckptfs: first tensor ($(mib "$WT_BYTES") MiB; after a fresh mount: open, header, pread): mount s / read s (median), read samples | - |" \
         "$(median ${WT_MOUNT[$name]}) / $(median ${WT_READ[$name]}) | $(slashes "${WT_READ[$name]}") |" \
         "$(slashes "${WT_FETCH[$name]}") |"
  done
}
