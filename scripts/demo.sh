#!/usr/bin/env bash
# The demo: installs what is missing, builds, makes a small llama-like sharded checkpoint,
# mounts it and uses it with real clients, then unmounts.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/packages.sh
# What the demo's clients need: numpy and torch to load from the mount, nginx to serve.
ensure_packages python3-numpy python3-torch nginx-light
scripts/setup.sh build
ckptfs=$PWD/build/fs/ckptfs
work=$(mktemp -d /tmp/ckptfs-demo.XXXXXX)
mnt=$work/mnt
mkdir -p "$mnt"
cleanup() {
  mountpoint -q "$mnt" && { "$ckptfs" umount "$mnt" || fusermount3 -uz "$mnt"; }
  [ -f "$work/nginx/nginx.pid" ] && /usr/sbin/nginx -c "$work/nginx/nginx.conf" -s stop 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

run() { printf '\n$ %s\n' "$*"; "$@"; }

/usr/bin/python3 scripts/make_checkpoint.py "$work/llama" --kind llama --dtype F16
run ls "$work/llama"
run "$ckptfs" inspect "$work/llama"
run "$ckptfs" mount -v "$work/llama" "$mnt"   # -v: say what was mounted (a plain mount prints nothing)
run ls -la "$mnt"
run ls "$mnt/tensors/model/layers/0/self_attn"
run /usr/bin/python3 -c "
import os
p = '$mnt/tensors/model/embed_tokens/weight.npy'
print({a: os.getxattr(p, a).decode() for a in os.listxattr(p)})"
run /usr/bin/python3 -c "
import numpy as np
w = np.load('$mnt/tensors/model/embed_tokens/weight.npy', mmap_mode='r')
print('embed_tokens', w.dtype, w.shape, 'first row sum %.4f' % float(w[0].sum()))"
run /usr/bin/python3 -c "
import json, struct
f = open('$mnt/model.safetensors', 'rb')
n = struct.unpack('<Q', f.read(8))[0]
h = json.loads(f.read(n))
print('model.safetensors:', len([k for k in h if k != '__metadata__']), 'tensors in one file')"
run /usr/bin/python3 -c "
import torch
sd = torch.load('$mnt/pytorch_model.bin', weights_only=True)
print('pytorch_model.bin:', type(sd).__name__, 'of', len(sd), 'tensors; lm_head', sd['lm_head.weight'].dtype, tuple(sd['lm_head.weight'].shape))"
run cat "$mnt/.ckptfs/stats.json"
run "$ckptfs" umount "$mnt"

# A training checkpoint written by torch.save is a source too: the merged files hold the
# model (the prefix `model_state_dict.` cut), tensors/ everything, metadata.json the rest.
model_py="
import torch
torch.manual_seed(0)
def make():
    m = torch.nn.Sequential()
    m.add_module('fc', torch.nn.Linear(64, 32))
    m.add_module('out', torch.nn.Linear(32, 8))
    return m
"
/usr/bin/python3 -c "$model_py
m = make()
opt = torch.optim.Adam(m.parameters(), lr=1e-3)
m(torch.randn(4, 64)).sum().backward()
opt.step()
torch.save({'epoch': 10, 'loss': 0.25, 'model_state_dict': m.state_dict(),
            'optimizer_state_dict': opt.state_dict()}, '$work/train_state.pt')"
run "$ckptfs" inspect "$work/train_state.pt"
run "$ckptfs" mount "$work/train_state.pt" "$mnt"
run ls "$mnt" "$mnt/tensors/model_state_dict/fc" "$mnt/tensors/optimizer_state_dict/state/0"
run head -4 "$mnt/.ckptfs/metadata.json"
run /usr/bin/python3 -c "$model_py
m = make()
print('load_state_dict(pytorch_model.bin), strict:', m.load_state_dict(torch.load('$mnt/pytorch_model.bin')))"
run "$ckptfs" umount "$mnt"

# A training run: every file where SOURCE has it (model_00300.pt is a file torch.load
# opens), `latest` and `best`, each checkpoint's views in views/; a checkpoint saved while
# mounted appears, and `latest` moves.
mkdir -p "$work/run"
save_step() {
  /usr/bin/python3 -c "$model_py
m = make()
torch.save({'global_step': $1, 'model_state_dict': m.state_dict()}, '$work/run/saving.tmp')"  # renamed when whole, as trainers do
  mv "$work/run/saving.tmp" "$work/run/model_$(printf %05d "$1").pt"
}
for step in 100 200 300; do save_step $step; done
run "$ckptfs" inspect "$work/run"
run "$ckptfs" mount "$work/run" "$mnt"
run ls "$mnt" "$mnt/views/latest/"
run readlink "$mnt/latest"
save_step 400
printf '\n$ # saved model_00400.pt while mounted; waiting for latest to name it\n'
for _ in $(seq 100); do [ "$(readlink "$mnt/latest")" = model_00400.pt ] && break; sleep 0.1; done
run readlink "$mnt/latest"
[ "$(readlink "$mnt/latest")" = model_00400.pt ] || { echo "demo: latest did not move" >&2; exit 1; }
run /usr/bin/python3 -c "$model_py
m = make()
print('torch.load(latest):', sorted(torch.load('$mnt/latest')))
print('views/latest/pytorch_model.bin into the model:', m.load_state_dict(torch.load('$mnt/views/latest/pytorch_model.bin')))"
run "$ckptfs" umount "$mnt"

# A TensorFlow checkpoint (TensorBundle; written here by the tests' byte-level writer, since
# TensorFlow is not installed): a partitioned variable reads as one whole tensor.
/usr/bin/python3 scripts/make_tf_checkpoint.py standard "$work/tf_ckpts" >/dev/null
run ls "$work/tf_ckpts"
run "$ckptfs" mount "$work/tf_ckpts" "$mnt"
run ls "$mnt" "$mnt/tensors/model/dense/kernel/OPTIMIZER_SLOT/optimizer"
run /usr/bin/python3 -c "
import json, os, numpy as np
p = '$mnt/tensors/part/axis1.npy'
w = np.load(p)
want = json.load(open('$work/tf_ckpts/expected.json'))['part/axis1']['hex']
print('part/axis1', w.dtype, w.shape, 'stored as slices, read whole; equal to the bytes written:', w.tobytes().hex() == want)
print('tf key:', os.getxattr('$mnt/tensors/model/dense/kernel/OPTIMIZER_SLOT/optimizer/m.npy', 'user.ckptfs.tf_key').decode())"
run "$ckptfs" umount "$mnt"

# The same checkpoint stored as seekable zstd: mounts the same, decodes on read.
run "$ckptfs" pack --frame-size 256K "$work/llama" "$work/llama.zst"
run ls -la "$work/llama.zst"
run "$ckptfs" verify "$work/llama.zst"
run "$ckptfs" mount --cache-size 64M "$work/llama.zst" "$mnt"
run /usr/bin/python3 -c "
import json, numpy as np
w = np.load('$mnt/tensors/lm_head/weight.npy')
print('lm_head', w.dtype, w.shape, 'from zstd')
s = json.load(open('$mnt/.ckptfs/stats.json'))
print('decoded', s['bytes_decompressed'], 'bytes in', s['frames_decoded'], 'frames; cache', s['cache'])"
run cmp "$mnt/shards/model-00001-of-00002.safetensors" "$work/llama/model-00001-of-00002.safetensors"
run "$ckptfs" umount "$mnt"

# The same checkpoint served over HTTP (nginx on loopback): the mount fetches headers, a
# read fetches about what it reads, and --cache-dir keeps fetched bytes for the next mount.
port=$(/usr/bin/python3 -c "
import socket
s = socket.socket()
s.bind(('127.0.0.1', 0))
print(s.getsockname()[1])")
mkdir -p "$work/nginx"
printf '%s\n' "user root;" "pid $work/nginx/nginx.pid;" "error_log $work/nginx/error.log;" \
  "events {}" "http {" "  access_log off;" "  client_body_temp_path $work/nginx;" \
  "  proxy_temp_path $work/nginx;" "  fastcgi_temp_path $work/nginx;" \
  "  uwsgi_temp_path $work/nginx;" "  scgi_temp_path $work/nginx;" \
  "  server { listen 127.0.0.1:$port; root $work; }" "}" >"$work/nginx/nginx.conf"
/usr/sbin/nginx -c "$work/nginx/nginx.conf"
url=http://127.0.0.1:$port/llama/
remote_stats() {
  /usr/bin/python3 -c "
import json
r = json.load(open('$mnt/.ckptfs/stats.json'))['remote']
print('$1: fetched', r['bytes_fetched'], 'bytes from the server in', r['requests'],
      'requests,', r['disk_cache_bytes'], 'bytes from --cache-dir')"
}
run "$ckptfs" mount --cache-dir "$work/cache" "$url" "$mnt"
remote_stats "after mount (headers only)"
run /usr/bin/python3 -c "
import numpy as np
w = np.load('$mnt/tensors/model/embed_tokens/weight.npy')
print('embed_tokens', w.dtype, w.shape, w.nbytes, 'bytes, over HTTP')"
remote_stats "after one tensor"
run cmp "$mnt/shards/model-00001-of-00002.safetensors" "$work/llama/model-00001-of-00002.safetensors"
run cmp "$mnt/shards/model-00002-of-00002.safetensors" "$work/llama/model-00002-of-00002.safetensors"
remote_stats "after both shards"
run "$ckptfs" umount "$mnt"
run "$ckptfs" mount --cache-dir "$work/cache" "$url" "$mnt"
run cmp "$mnt/shards/model-00001-of-00002.safetensors" "$work/llama/model-00001-of-00002.safetensors"
remote_stats "second mount, warm --cache-dir"
run "$ckptfs" umount "$mnt"
echo; echo "demo: ok"
