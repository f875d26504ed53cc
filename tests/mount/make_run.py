#!/usr/bin/python3
"""Writes training runs for the run mount tests (tests/mount/run_mount_test.cc).

  make_run.py hf OUT N [--bad NAME]   HF Trainer-shaped: OUT/checkpoint-{100*k}/ with
                                      model.safetensors (every tensor holds its step),
                                      config.json, trainer_state.json naming the best
                                      (the middle one); --bad NAME adds an entry
                                      directory whose safetensors header is broken.
  make_run.py many OUT N              N small checkpoint-K/ directories.
  make_run.py hf-sharded OUT N        as hf, each checkpoint-{100*k}/ sharded in two
                                      (model-0000K-of-00002.safetensors and the index),
                                      with optimizer.pt beside it and a final sharded model
                                      at the top, as trainer.save_model leaves it.
  make_run.py save FILE STEP          one torch.save training dict {"model_state_dict":
                                      {...}, "step": STEP}, written to a temporary name
                                      then renamed, every tensor holding STEP.
  make_run.py trainer-deepspeed OUT TRUTH STEP BEST [--gathered]
                                      OUT/checkpoint-STEP/ as HF Trainer with DeepSpeed
                                      (ZeRO-2, 2 ranks) saves it; the tag's ground truth
                                      (make_deepspeed_checkpoint.py's expected.pt) in TRUTH/.
                                      --gathered: the model gathered to model.safetensors
                                      too (stage3_gather_16bit_weights_on_model_save).
  make_run.py lightning OUT           a Lightning dirpath after two fit() runs, as
                                      ModelCheckpoint(monitor="val_loss") first and
                                      ModelCheckpoint(monitor="train_loss") second leave
                                      it: epoch=E-step=S.ckpt (every tensor holds S),
                                      last.ckpt (first fit), last-v1.ckpt (second fit,
                                      its callbacks state naming epoch=0-step=10.ckpt best
                                      for val_loss, then epoch=1-step=30.ckpt for
                                      train_loss: the first saved decides).
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import time

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


def write_sharded(d, step):
    os.makedirs(d, exist_ok=True)
    tensors = model(step)
    names = sorted(tensors)
    parts = [names[:1], names[1:]]
    weight_map = {}
    for k, part in enumerate(parts):
        shard = "model-%05d-of-%05d.safetensors" % (k + 1, len(parts))
        with open(os.path.join(d, shard), "wb") as f:
            f.write(safetensors_bytes({n: tensors[n] for n in part}))
        weight_map.update({n: shard for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(t.nbytes for t in tensors.values())},
                   "weight_map": weight_map}, f)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "toy", "step": step}, f)
    return d


def hf_sharded(out, n):
    steps = [100 * (k + 1) for k in range(n)]
    for step in steps:
        d = write_sharded(os.path.join(out, "checkpoint-%d" % step), step)
        with open(os.path.join(d, "optimizer.pt"), "wb") as f:
            f.write(b"not read: an optimizer state beside the weights")
        write_trainer_state(d, step, steps[0])
    write_sharded(out, 999)


def save(path, step):
    import torch
    state = {"model_state_dict": {k: torch.from_numpy(v) for k, v in model(step).items()},
             "step": step}
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


class TrainingArguments:
    """Stands in for transformers.TrainingArguments: pickled by torch.save as a class
    instance (a global of its module), as Trainer's training_args.bin is."""

    def __init__(self, output_dir):
        self.output_dir = output_dir
        self.deepspeed = "ds_config.json"
        self.learning_rate = 1e-3


def torch_safetensors_bytes(tensors):
    import torch
    names = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
             torch.int64: "I64"}
    header, data = {}, b""
    for name, t in sorted(tensors.items()):
        raw = t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def trainer_deepspeed(out, truth, step, best, gathered):
    """Trainer._save_checkpoint with DeepSpeed, in its order: save_model (config.json,
    tokenizer, training_args.bin; model.safetensors only when gathered), the engine's
    save_checkpoint (global_stepN/, latest, zero_to_fp32.py), scheduler.pt, one
    rng_state_R.pth per process, trainer_state.json last."""
    import numpy
    import torch
    d = os.path.join(out, "checkpoint-%d" % step)
    os.makedirs(d, exist_ok=True)
    writer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deepspeed",
                          "make_deepspeed_checkpoint.py")
    subprocess.run([sys.executable, writer, truth, "--stage", "2", "--ranks", "2",
                    "--step", str(step), "--seed", str(step)], check=True)
    expected = torch.load(os.path.join(truth, "expected.pt"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "toy", "architectures": ["Toy"]}, f)
    if gathered:
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(torch_safetensors_bytes(expected["model_native"]))
    for name, body in (("tokenizer_config.json", {"model_max_length": 8}),
                       ("special_tokens_map.json", {"eos_token": "</s>"}),
                       ("tokenizer.json", {"version": "1.0", "model": {"vocab": {"a": 0}}}),
                       ("vocab.json", {"a": 0, "</s>": 1})):
        with open(os.path.join(d, name), "w") as f:
            json.dump(body, f)
    with open(os.path.join(d, "merges.txt"), "w") as f:
        f.write("#version: 0.2\na b\n")
    torch.save(TrainingArguments(out), os.path.join(d, "training_args.bin"))
    tag = "global_step%d" % step
    shutil.move(os.path.join(truth, tag), os.path.join(d, tag))
    shutil.move(os.path.join(truth, "latest"), os.path.join(d, "latest"))
    shutil.move(os.path.join(truth, "zero_to_fp32.py"), os.path.join(d, "zero_to_fp32.py"))
    torch.save({"base_lrs": [1e-3], "last_epoch": step, "_step_count": step + 1,
                "verbose": False, "_last_lr": [1e-3], "lr_lambdas": [None]},
               os.path.join(d, "scheduler.pt"))
    for rank in range(2):
        torch.save({"python": random.getstate(), "numpy": numpy.random.get_state(),
                    "cpu": torch.random.get_rng_state()},
                   os.path.join(d, "rng_state_%d.pth" % rank))
    with open(os.path.join(d, "trainer_state.json"), "w") as f:
        json.dump({"global_step": step,
                   "best_model_checkpoint": os.path.join(out, "checkpoint-%d" % best),
                   "log_history": []}, f)


def lightning_ckpt(path, epoch, step, callbacks):
    """A checkpoint as Trainer.save_checkpoint writes it (no Namespace in hyper_parameters:
    torch's pickle of one is covered elsewhere); callbacks: (monitor, best file) pairs in
    trainer.callbacks order, keyed by ModelCheckpoint.state_key."""
    import torch
    state = {}
    for monitor, best in callbacks:
        key = ("ModelCheckpoint{'monitor': '%s', 'mode': 'min', 'every_n_train_steps': 0,"
               " 'every_n_epochs': 1, 'train_time_interval': None}" % monitor)
        best_path = "/data/lightning_logs/version_0/checkpoints/" + best
        state[key] = {"monitor": monitor, "best_model_score": torch.tensor(0.25),
                      "best_model_path": best_path, "current_score": torch.tensor(0.5),
                      "dirpath": "/data/lightning_logs/version_0/checkpoints",
                      "best_k_models": {best_path: torch.tensor(0.25)},
                      "kth_best_model_path": best_path, "kth_value": torch.tensor(0.25),
                      "last_model_path": "/data/lightning_logs/version_0/checkpoints/last.ckpt"}
    torch.save({"epoch": epoch, "global_step": step, "pytorch-lightning_version": "2.1.0",
                "state_dict": {"model.weight": torch.full((4, 4), float(step)),
                               "model.bias": torch.full((4,), float(step))},
                "loops": {"fit_loop": {"epoch_progress": {"current": {"completed": epoch}}}},
                "callbacks": state,
                "optimizer_states": [{"state": {}, "param_groups": [{"lr": 1e-3, "params": [0, 1]}]}],
                "lr_schedulers": [], "hparams_name": "kwargs",
                "hyper_parameters": {"lr": 1e-3, "hidden": 4}}, path)


def lightning(out):
    os.makedirs(out, exist_ok=True)
    first = [("val_loss", "epoch=0-step=20.ckpt")]
    lightning_ckpt(os.path.join(out, "epoch=0-step=10.ckpt"), 0, 10, first)
    lightning_ckpt(os.path.join(out, "epoch=0-step=20.ckpt"), 0, 20, first)
    lightning_ckpt(os.path.join(out, "last.ckpt"), 0, 20, first)
    second = [("val_loss", "epoch=0-step=10.ckpt"), ("train_loss", "epoch=1-step=30.ckpt")]
    lightning_ckpt(os.path.join(out, "epoch=1-step=30.ckpt"), 1, 30, second)
    lightning_ckpt(os.path.join(out, "last-v1.ckpt"), 1, 30, second)
    # A copy or sync gives last.ckpt the newest time: versions decide, never times.
    now = time.time()
    os.utime(os.path.join(out, "last.ckpt"), (now + 60, now + 60))


def main():
    kind, out = sys.argv[1], sys.argv[2]
    if kind == "hf":
        bad = sys.argv[sys.argv.index("--bad") + 1] if "--bad" in sys.argv else None
        hf(out, int(sys.argv[3]), bad)
    elif kind == "hf-sharded":
        hf_sharded(out, int(sys.argv[3]))
    elif kind == "many":
        for k in range(int(sys.argv[3])):
            write_entry(out, "checkpoint-%d" % (k + 1), k + 1, width=4)
    elif kind == "trainer-deepspeed":
        trainer_deepspeed(out, sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
                          "--gathered" in sys.argv)
    elif kind == "lightning":
        lightning(out)
    elif kind == "save":
        save(out, int(sys.argv[3]))
    else:
        sys.exit("make_run.py: unknown kind " + kind)


if __name__ == "__main__":
    main()
