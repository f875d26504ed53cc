#!/usr/bin/python3
"""WeightsOnlyVerdict (issue 37, items 2 and 3): what ckptfs writes loads with
torch.load(weights_only=True), and its verdict on SRC agrees with torch.

  - every file ckptfs makes (MNT/pytorch_model.bin, MNT/pytorch_model/**/*.pt where
    present) loads with torch.load(weights_only=True), whatever SRC names;
  - torch.load(SRC, weights_only=True) in this python loads iff WANT is "loads" (the
    oracle: the verdict must say the same);
  - MNT/.ckptfs/metadata.json has "__weights_only__": {"loads", "globals", "opcodes"},
    loads as WANT, and globals holding each of NAMES;
  - `CKPTFS inspect SRC` prints "torch.load(weights_only=True): would load" or
    "... would refuse: " naming each of NAMES; `inspect --json` has "weights_only" equal
    to metadata.json's.

usage: check_weights_only.py CKPTFS SRC MNT loads|refuses [NAME...]
"""

import glob
import json
import os
import subprocess

import torch

from checklib import Checker, ReadFile, RunMain, Short


def Loads(path: str):
    try:
        torch.load(path, map_location="cpu", weights_only=True)
        return None
    except Exception as e:  # torch raises UnpicklingError, RuntimeError...
        return f"{type(e).__name__}: {str(e)[:200]}"


def Main(args) -> int:
    ckptfs, src, mnt, want, *names = args
    ck = Checker("weights_only verdict")
    made = [os.path.join(mnt, "pytorch_model.bin")]
    made += sorted(glob.glob(os.path.join(mnt, "pytorch_model", "**", "*.pt"), recursive=True))
    for path in made:
        error = Loads(path)
        ck.Expect(error is None, f"{path}: torch.load(weights_only=True) failed: {error}")
    source_error = Loads(src)
    ck.Equal(source_error is None, want == "loads",
             f"torch.load(SRC, weights_only=True) loads ({source_error})")

    meta = json.loads(ReadFile(os.path.join(mnt, ".ckptfs", "metadata.json")))
    verdict = meta.get("__weights_only__")
    if ck.Expect(isinstance(verdict, dict), f"metadata.json has no __weights_only__: {Short(meta)}"):
        ck.Equal(sorted(verdict), ["globals", "loads", "opcodes"], "__weights_only__ keys")
        ck.Equal(verdict.get("loads"), want == "loads", "__weights_only__.loads")
        for name in names:
            ck.Expect(name in verdict.get("globals", []), f"{name} not in {verdict}")

    text = subprocess.run([ckptfs, "inspect", src], capture_output=True, text=True, timeout=120)
    ck.Equal(text.returncode, 0, f"inspect exit status ({text.stderr})")
    lines = [l for l in text.stdout.splitlines() if l.startswith("torch.load(weights_only=True): ")]
    if ck.Expect(len(lines) == 1, f"inspect prints no verdict line:\n{text.stdout[:2000]}"):
        line = lines[0]
        if want == "loads":
            ck.Equal(line, "torch.load(weights_only=True): would load", "inspect line")
        else:
            ck.Expect(line.startswith("torch.load(weights_only=True): would refuse: "), line)
            for name in names:
                ck.Expect(name in line, f"inspect line lacks {name}: {line}")
    js = subprocess.run([ckptfs, "inspect", src, "--json"], capture_output=True, text=True,
                        timeout=120)
    ck.Equal(js.returncode, 0, f"inspect --json exit status ({js.stderr})")
    if js.returncode == 0:
        ck.Equal(json.loads(js.stdout).get("weights_only"), verdict, "inspect --json weights_only")
    return ck.Finish(f"{len(made)} made files load; SRC {want}: {Short(verdict, 300)}")


if __name__ == "__main__":
    RunMain(Main, "CKPTFS SRC MNT loads|refuses [NAME...]")
