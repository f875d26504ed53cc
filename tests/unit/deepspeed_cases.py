#!/usr/bin/python3
"""Writes the DeepSpeed tags tests/unit/deepspeed_test.cc reads, with their ground truth.

    deepspeed_cases.py ROOT [CASE ...]
    deepspeed_cases.py ROOT --mutate KIND

For each case of CASES (all without arguments), runs tests/deepspeed/make_deepspeed_checkpoint.py
into ROOT/<case>/ (one python process, torch imported once) and dumps the generator's
expected.pt as raw little-endian bytes the C++ test compares with what the Checkpoint's
ranges hold: ROOT/<case>/raw/<n>.bin and ROOT/<case>/raw/manifest.json, a list of
[name, dtype, shape, n] for model.<name> (model_native: the zero-copy dtypes),
module.<name> (stage 1/2) and optimizer.exp_avg[_sq].<name>; ROOT/<case>/tag names the tag (`latest`).
Exits 77 without torch (the test skips).
"""

import json
import os
import sys

try:
    import torch
except ImportError:
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "deepspeed"))
import make_deepspeed_checkpoint as gen  # noqa: E402  pylint: disable=wrong-import-position

# The generator's matrix: stages 1-3, 1-4 ranks, bf16/fp16, round-robin, sub-groups, frozen
# and tied params, exclude_frozen, two param groups, dirty padding, enum by getattr.
CASES = {
    "s1_r1_bf16": ["--stage", "1", "--ranks", "1"],
    "s1_r3_fp16": ["--stage", "1", "--ranks", "3", "--dtype", "fp16"],
    "s1_r4_rr_groups": ["--stage", "1", "--ranks", "4", "--round-robin", "--groups", "2"],
    "s2_r2_bf16": ["--stage", "2", "--ranks", "2"],
    "s2_r2_fp16_frozen_tied": ["--stage", "2", "--ranks", "2", "--dtype", "fp16", "--frozen",
                               "--tied"],
    "s2_r3_rr_dirty": ["--stage", "2", "--ranks", "3", "--round-robin", "--dirty-padding"],
    "s2_r4_groups_frozen": ["--stage", "2", "--ranks", "4", "--groups", "2", "--frozen"],
    "s2_r2_exclude_frozen": ["--stage", "2", "--ranks", "2", "--frozen", "--exclude-frozen"],
    "s2_r1_getattr": ["--stage", "2", "--ranks", "1", "--enum-getattr", "--step", "5"],
    "s3_r1_bf16": ["--stage", "3", "--ranks", "1"],
    "s3_r2_fp16_tied": ["--stage", "3", "--ranks", "2", "--dtype", "fp16", "--tied"],
    "s3_r3_subgroups_dirty": ["--stage", "3", "--ranks", "3", "--sub-group-size", "200",
                              "--dirty-padding"],
    "s3_r4_frozen_groups": ["--stage", "3", "--ranks", "4", "--frozen", "--groups", "2",
                            "--sub-group-size", "500"],
    "s3_r2_getattr_frozen": ["--stage", "3", "--ranks", "2", "--enum-getattr", "--frozen"],
    "pipe_r2_bf16": ["--pipeline", "--stage", "1", "--ranks", "2"],
    "pipe_r3_fp16_tp2": ["--pipeline", "--stage", "1", "--ranks", "3", "--dtype", "fp16",
                         "--tp", "2"],
    # Pipelines saved without optimizer state (module and param_shapes None, no optim files):
    # layer files named with a model axis, without one (PipelineModule's default topology),
    # and two TP ranks.
    "pipe0_r2_fp16": ["--pipeline", "--stage", "0", "--ranks", "2", "--dtype", "fp16"],
    "pipe0_r1_bf16_noaxis": ["--pipeline", "--stage", "0", "--ranks", "1", "--no-model-axis"],
    "pipe0_r2_bf16_tp2": ["--pipeline", "--stage", "0", "--ranks", "2", "--tp", "2"],
    # For the refusals: another tag of s2_r2_bf16 and of s3_r1_bf16's run, hostile files.
    "s2_r2_bf16_step3": ["--stage", "2", "--ranks", "2", "--step", "3"],
    "s3_r2_bf16_step3": ["--stage", "3", "--ranks", "2", "--step", "3"],
    "s3_r2_bf16": ["--stage", "3", "--ranks", "2"],
    "legacy": ["--stage", "2", "--ranks", "2", "--legacy"],
    "hostile": ["--stage", "2", "--ranks", "2", "--hostile-global"],
}
# The generator's --break kinds (each one inconsistency in the last rank's files), stages 2, 3.
BREAKS = ["missing-rank", "mixed-world", "mixed-tag", "short-partition", "param-past-group"]
for _kind in BREAKS:
    for _stage in ("2", "3"):
        CASES[f"break-{_kind}-s{_stage}"] = ["--stage", _stage, "--ranks", "3", "--break", _kind]
# Copies of s2_r2_bf16 with param_shapes edited (MUTATIONS[kind] applied to group 0).
MUTATIONS = {
    "short": lambda shapes: shapes.__setitem__("fc1.bias", torch.Size([40])),
    "past": lambda shapes: shapes.__setitem__("fc1.bias", torch.Size([100000])),
}

TORCH_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8"}


def Dump(case_dir: str) -> None:
    expected = torch.load(os.path.join(case_dir, "expected.pt"))
    raw = os.path.join(case_dir, "raw")
    os.makedirs(raw, exist_ok=True)
    manifest = []

    def Put(name: str, t: torch.Tensor) -> None:
        t = t.contiguous()
        n = len(manifest)
        with open(os.path.join(raw, f"{n}.bin"), "wb") as f:
            if t.numel():
                f.write(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        manifest.append([name, TORCH_DTYPES[t.dtype], list(t.shape), n])

    config = expected["config"]
    if config["pipeline"] and config["tp"] > 1:  # TP ranks as sub-trees, masters not merged
        for rank, layers in expected["pipeline"].items():
            for name, t in layers.items():
                Put(f"{rank}.{name}", t)
        Finish(raw, manifest)
        return
    for name, t in expected["model_native"].items():
        Put("model." + name, t)
    if config["pipeline"]:  # the layer files are the model, the ZeRO-1 masters model_fp32
        for name, t in expected["model_fp32"].items():
            Put("model_fp32." + name, t)
    elif config["stage"] < 3:
        for name, t in expected["module"].items():
            Put("module." + name, t)
    for moment in ("exp_avg", "exp_avg_sq"):
        for name, t in expected[moment].items():
            Put(f"optimizer.{moment}.{name}", t)
    Finish(raw, manifest)


def Finish(raw: str, manifest: list) -> None:
    with open(os.path.join(raw, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f)


def Mutate(root: str, kind: str) -> None:
    """ROOT/<kind>: s2_r2_bf16's tag with its model states' param_shapes edited."""
    import shutil  # pylint: disable=import-outside-toplevel
    src = os.path.join(root, "s2_r2_bf16", "global_step2")
    dst = os.path.join(root, kind, "global_step2")
    shutil.rmtree(os.path.join(root, kind), ignore_errors=True)
    shutil.copytree(src, dst)
    path = os.path.join(dst, "mp_rank_00_model_states.pt")
    state = torch.load(path)  # our own file, with the stand-in deepspeed on the path
    MUTATIONS[kind](state["param_shapes"][0])
    torch.save(state, path)


def Main(argv) -> int:
    root = argv[0]
    if len(argv) == 3 and argv[1] == "--mutate":
        Mutate(root, argv[2])
        return 0
    for case in argv[1:] or list(CASES):
        out = os.path.join(root, case)
        if gen.Main([out] + CASES[case]) != 0:
            return 1
        with open(os.path.join(out, "tag"), "w", encoding="utf-8") as f:
            f.write(open(os.path.join(out, "latest"), encoding="utf-8").read())
        if case not in ("legacy", "hostile") and not case.startswith("break-"):
            Dump(out)
    for kind in MUTATIONS if not argv[1:] else []:
        Mutate(root, kind)
    return 0


if __name__ == "__main__":
    sys.exit(Main(sys.argv[1:]))
