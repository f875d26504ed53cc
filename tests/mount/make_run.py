#!/usr/bin/python3
"""Writes training runs for the run mount tests (tests/mount/run_mount_test.cc).

  make_run.py hf OUT N [--bad NAME]   HF Trainer-shaped: OUT/checkpoint-{100*k}/ with
                                      model.safetensors (every tensor holds its step),
                                      config.json, trainer_state.json naming the best
                                      (the middle one); --bad NAME adds an entry
                                      directory whose safetensors header is broken.
  make_run.py many OUT N              N small checkpoint-K/ directories.
  make_run.py save FILE STEP          one torch.save training dict {"model_state_dict":
                                      {...}, "step": STEP}, written to a temporary name
                                      then renamed, every tensor holding STEP.
"""
import json
import os
import struct
import sys

import numpy as np


def safetensors_bytes(tensors):
    header, data = {}, b""
    for name, arr in tensors.items():
        raw = arr.tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def model(step, width=64):
    return {"embed.weight": np.full((width, 8), step, np.float32),
            "layers.0.weight": np.full((width, width), step, np.float32),
            "layers.0.bias": np.full((width,), step, np.float32)}


def write_entry(out, name, step, width=64):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(safetensors_bytes(model(step, width)))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "toy", "step": step}, f)
    return d


def write_trainer_state(d, step, best):
    """trainer_state.json, the file HF Trainer writes last into checkpoint-N/."""
    with open(os.path.join(d, "trainer_state.json"), "w") as f:
        json.dump({"global_step": step,
                   "best_model_checkpoint": "output/run/checkpoint-%d" % best,
                   "log_history": []}, f)


def hf(out, n, bad=None):
    steps = [100 * (k + 1) for k in range(n)]
    best = steps[len(steps) // 2]
    for step in steps:
        write_trainer_state(write_entry(out, "checkpoint-%d" % step, step), step, best)
    if bad:
        d = os.path.join(out, bad)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", 16) + b"{not json at all")
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"model_type": "toy"}, f)


def save(path, step):
    import torch
    state = {"model_state_dict": {k: torch.from_numpy(v) for k, v in model(step).items()},
             "step": step}
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def main():
    kind, out = sys.argv[1], sys.argv[2]
    if kind == "hf":
        bad = sys.argv[sys.argv.index("--bad") + 1] if "--bad" in sys.argv else None
        hf(out, int(sys.argv[3]), bad)
    elif kind == "many":
        for k in range(int(sys.argv[3])):
            write_entry(out, "checkpoint-%d" % (k + 1), k + 1, width=4)
    elif kind == "save":
        save(out, int(sys.argv[3]))
    else:
        sys.exit("make_run.py: unknown kind " + kind)


if __name__ == "__main__":
    main()
