#!/usr/bin/python3
"""Inspect: `ckptfs inspect SRC` exits 0 and names every tensor; `--json` prints valid
JSON giving every tensor's dtype and shape, and no tensor the source lacks.

The JSON schema is ckptfs's to choose; tensors are found as objects with
name/dtype/shape keys, or as {name: {dtype, shape, ...}} members, anywhere in it.

usage: check_inspect.py CKPTFS SRC [TARGET [OPTION...]]

TARGET (default SRC) is what `ckptfs inspect` is given: a URL serving SRC's files, say;
the OPTIONs go before it (--endpoint URL, say).
"""

import json
import subprocess

from checklib import Checker, LoadSource, RunMain

TIMEOUT_S = 60


def FindTensors(node, found: list) -> None:
    if isinstance(node, dict):
        if isinstance(node.get("name"), str) and {"dtype", "shape"} <= set(node):
            found.append((node["name"], node["dtype"], node["shape"]))
        for key, value in node.items():
            if isinstance(value, dict) and {"dtype", "shape"} <= set(value) \
                    and "name" not in value:
                found.append((key, value["dtype"], value["shape"]))
            FindTensors(value, found)
    elif isinstance(node, list):
        for value in node:
            FindTensors(value, found)


def Run(ck: Checker, argv: list):
    result = subprocess.run(argv, capture_output=True, timeout=TIMEOUT_S)
    ok = ck.Equal(result.returncode, 0,
                  f"{' '.join(argv[1:])} exit code (stderr {result.stderr[-500:]!r})")
    return result.stdout.decode("utf-8", errors="replace") if ok else None


def CheckInspect(ck: Checker, ckptfs: str, src: str, source, normalize=lambda d: d,
                 options=()) -> None:
    """Both inspect outputs against `source`; `normalize` maps inspect's dtype spelling
    to the source's; `options` go on inspect's command line."""
    text = Run(ck, [ckptfs, "inspect", *options, src])
    if text is not None:
        for name in source.tensors:
            ck.Expect(name in text, f"inspect output does not name {name!r}")
    text = Run(ck, [ckptfs, "inspect", *options, src, "--json"])
    if text is None:
        return
    try:
        found = []
        FindTensors(json.loads(text), found)
    except ValueError as e:
        ck.Fail(f"inspect --json is not valid JSON ({e}): {text[:300]!r}")
        return
    got = sorted((n, normalize(d), list(s)) for n, d, s in found)
    want = sorted((t.name, t.dtype, list(t.shape)) for t in source.tensors.values())
    ck.Equal(got, want, "inspect --json tensors (name, dtype, shape)")


def Main(args) -> int:
    ckptfs, src, *rest = args
    ck = Checker("inspect")
    source = LoadSource(src)
    CheckInspect(ck, ckptfs, rest[0] if rest else src, source, options=rest[1:])
    return ck.Finish(f"{len(source.tensors)} tensors")


if __name__ == "__main__":
    RunMain(Main, "CKPTFS SRC [TARGET [OPTION...]]")
