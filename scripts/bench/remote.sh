# shellcheck shell=bash disable=SC2153  # SIZE, DATA, SHARD_FILES, BYTES: the driver's and lib.sh's
# The remote section of scripts/bench.sh: an HTTP source on a loopback nginx: time to first
# tensor, sequential read vs curl, --cache-dir.
# Sourced by bench.sh (never run on its own): it defines remote_section (runs the
# measurements, fills globals) and remote_report (prints its tables), with lib.sh's
# helpers and the driver's settings (SIZE, REPS, WORKDIR, SCRATCH, CKPTFS...) in scope.

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
  local r key value t0 ts
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
  sample_rounds fresh "${RCONTENDERS[@]}"
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

remote_report() {
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
}
