#!/usr/bin/python3
"""Checks HF Trainer outputs mounted as runs (issue 23), with numpy and torch.

    check_trainer.py final SRC STATE_DICT MNT
        SRC: a Trainer output dir (../shared/fixtures/wild/hf_trainer_output: checkpoint-N/
        and the final model at its top); STATE_DICT: torch.save(model.state_dict()) of that
        final model; MNT: the mount of SRC. The final model is entry `final`, loadable as
        from_pretrained loads a directory (config.json, then model.safetensors, mapped and
        its header parsed by hand: transformers is not installed here), byte-identical to
        SRC's, its tensors those of STATE_DICT; torch.load of its pytorch_model.bin too;
        `latest` is still the newest checkpoint-N and `best` the trainer_state.json's.
    check_trainer.py deepspeed RUN MNT
        RUN: checkpoint-10/ (ZeRO only) and checkpoint-20/ (gathered model.safetensors too)
        as tests/mount/make_run.py trainer-deepspeed writes them; MNT: the mount of RUN.
        Trainer's files, `latest`, zero_to_fp32.py, config and tokenizer files are at each
        checkpoint's root as stored; none of Trainer's files is a tensor; checkpoint-20's
        model.safetensors is the gathered one. (check_deepspeed.py checks checkpoint-10's
        consolidated views against the generator's ground truth.)
Exits 1 listing every mismatch, else prints one OK line.
"""

import json
import os
import sys

import numpy as np
import torch

from checklib import MappedTensors as Tensors

DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "BF16": np.uint16}




def CheckFinal(src, state_dict, mnt, errors):
    # The final model stays at the root as SOURCE has it; its views are views/final.
    for name in ("config.json", "model.safetensors", "training_args.bin"):
        if open(os.path.join(mnt, name), "rb").read() != open(os.path.join(src, name), "rb").read():
            errors.append("%s at the root is not SOURCE's bytes" % name)
    final = os.path.join(mnt, "views", "final")
    for link, want in (("latest", "checkpoint-12"), ("best", "checkpoint-4")):
        got = os.readlink(os.path.join(mnt, link))
        if got != want:
            errors.append("%s -> %s, want %s" % (link, got, want))
    config = json.load(open(os.path.join(final, "config.json")))
    if config != json.load(open(os.path.join(src, "config.json"))):
        errors.append("final/config.json differs from SOURCE's")
    if open(os.path.join(final, "model.safetensors"), "rb").read() != \
            open(os.path.join(src, "model.safetensors"), "rb").read():
        errors.append("final/model.safetensors is not SOURCE's bytes")
    mounted = Tensors(os.path.join(final, "model.safetensors"))
    want = torch.load(state_dict)
    if sorted(mounted) != sorted(want):
        errors.append("final/model.safetensors names %s, the state dict %s"
                      % (sorted(mounted)[:3], sorted(want)[:3]))
    for name, t in want.items():
        if name not in mounted:
            continue
        dtype, shape, raw = mounted[name]
        got = np.frombuffer(raw, DTYPES[dtype]).reshape(shape)
        if dtype == "BF16":
            expect = t.contiguous().view(torch.int16).numpy().view(np.uint16)
        else:
            expect = t.numpy()
        if not np.array_equal(got, expect):
            errors.append("final/model.safetensors: %s differs from the state dict" % name)
    legacy = torch.load(os.path.join(final, "pytorch_model.bin"), weights_only=True)
    for name, t in want.items():
        if name not in legacy or not torch.equal(legacy[name], t):
            errors.append("final/pytorch_model.bin: %s differs from the state dict" % name)
    return len(want)


# Files Trainer and DeepSpeed leave at a checkpoint's root, shown as stored.
PLAIN = ["config.json", "latest", "zero_to_fp32.py", "rng_state_0.pth", "rng_state_1.pth",
         "training_args.bin", "scheduler.pt", "trainer_state.json", "tokenizer.json",
         "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"]
TRAINER = ["rng_state_0", "rng_state_1", "training_args", "scheduler"]


def CheckDeepSpeed(run, mnt, errors):
    for link, want in (("latest", "checkpoint-20"), ("best", "checkpoint-10")):
        got = os.readlink(os.path.join(mnt, link))
        if got != want:
            errors.append("%s -> %s, want %s" % (link, got, want))
    for entry in ("checkpoint-10", "checkpoint-20"):
        for name in PLAIN:
            got = open(os.path.join(mnt, entry, name), "rb").read()
            if got != open(os.path.join(run, entry, name), "rb").read():
                errors.append("%s/%s is not the stored file" % (entry, name))
        tensors = os.listdir(os.path.join(mnt, "views", entry, "tensors"))
        for name in TRAINER:
            if name in tensors:
                errors.append("%s/tensors/%s: Trainer's file served as weights" % (entry, name))
        # The model is its own (zero_to_fp32's or the gathered one), with config beside it.
        if "model.safetensors" not in os.listdir(os.path.join(mnt, "views", entry)):
            errors.append("%s has no model.safetensors" % entry)
    gathered = Tensors(os.path.join(run, "checkpoint-20", "model.safetensors"))
    if Tensors(os.path.join(mnt, "views", "checkpoint-20", "model.safetensors")) != gathered:
        errors.append("checkpoint-20/model.safetensors is not the gathered model")
    zero = Tensors(os.path.join(mnt, "views", "checkpoint-10", "model.safetensors"))
    if sorted(zero) != sorted(Tensors(os.path.join(run, "checkpoint-20", "model.safetensors"))):
        errors.append("checkpoint-10's ZeRO model names %s, the gathered one %s"
                      % (sorted(zero)[:3], sorted(gathered)[:3]))
    return len(zero)


def main(argv):
    errors = []
    if len(argv) == 5 and argv[1] == "final":
        count = CheckFinal(argv[2], argv[3], argv[4], errors)
    elif len(argv) == 4 and argv[1] == "deepspeed":
        count = CheckDeepSpeed(argv[2], argv[3], errors)
    else:
        sys.exit(__doc__)
    for e in errors:
        print("MISMATCH " + e)
    if errors:
        sys.exit(1)
    print("OK %s: %d tensors" % (argv[1], count))


if __name__ == "__main__":
    main(sys.argv)
