#!/usr/bin/python3
"""Tensors of dtypes numpy lacks, widened to float32 .npy files (tensors/, issue 38).

write-safetensors DIR: DIR/model.safetensors, built here byte by byte: BF16 tensors (one
  at an odd offset, so its elements sit off the file's 2-byte grid; one of 300k elements,
  past several reads and the widening's chunks), and every one of the 256 values of
  F8_E4M3 (float8_e4m3fn) and of F8_E5M2, behind a 1-byte U8 tensor.
write-torch DIR: DIR/pytorch_model.bin, torch.save of bfloat16 tensors (torch 1.13 has
  no float8), one strided (a transpose).
check-safetensors DIR MNT / check-torch DIR MNT: every widened tensor's
  MNT/tensors/NAME.npy loads (numpy.load, plain and mmap_mode='r') as float32 of the
  source's shape holding exactly the values the dtype's definition gives (NaN where it
  has NaN), and known values (max, smallest subnormal, -0, inf) land where they must;
  NAME.safetensors beside it still holds the stored bytes; the xattrs of both name the
  stored dtype (so does `ckptfs inspect --json`: widened_mount_test.cc).
"""

import json
import os
import struct
import sys

import numpy as np

from checklib import Checker, ParseSafetensors, ReadFile, RunMain, WidenToF32

# Known values, from the definitions (ml_dtypes' float8_e4m3fn and float8_e5m2; bfloat16 is
# float32's top half): byte or bits -> value.
E4M3_KNOWN = {0x7E: 448.0, 0xFE: -448.0, 0x01: 2.0**-9, 0x81: -(2.0**-9), 0x07: 7 * 2.0**-9,
              0x08: 2.0**-6, 0x38: 1.0, 0x80: -0.0}
E5M2_KNOWN = {0x7B: 57344.0, 0xFB: -57344.0, 0x01: 2.0**-16, 0x03: 3 * 2.0**-16,
              0x04: 2.0**-14, 0x3C: 1.0, 0x7C: float("inf"), 0xFC: -float("inf")}
E4M3_NAN = (0x7F, 0xFF)
E5M2_NAN = (0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF)
BF16_KNOWN = {0x3F80: 1.0, 0xBF80: -1.0, 0x4049: 3.140625, 0xC2F7: -123.5, 0x8000: -0.0,
              0x0001: 2.0**-133, 0x7F7F: 3.3895313892515355e38, 0xFF80: -float("inf")}


def Bf16Bits(n: int, seed: int) -> np.ndarray:
    bits = np.random.default_rng(seed).integers(0, 1 << 16, n, dtype=np.uint32).astype("<u2")
    bits[:len(BF16_KNOWN)] = list(BF16_KNOWN)
    bits[len(BF16_KNOWN)] = 0x7FC0  # a NaN
    return bits


def SafetensorsTensors():
    """name -> (dtype, shape, stored bytes), in file order."""
    return {
        "pad": ("U8", [1], b"\x07"),
        "bf16.odd": ("BF16", [3, 7], Bf16Bits(21, 1).tobytes()),
        "bf16.big": ("BF16", [300, 1000], Bf16Bits(300_000, 2).tobytes()),
        "f8.e4m3": ("F8_E4M3", [16, 16], bytes(range(256))),
        "f8.e5m2": ("F8_E5M2", [2, 8, 16], bytes(range(256))),
        "f32.plain": ("F32", [4], np.arange(4, dtype="<f4").tobytes()),
    }


def WriteSafetensors(directory: str) -> None:
    tensors = SafetensorsTensors()
    header, at = {}, 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(data)]}
        at += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # bf16.odd still starts at an odd offset: after "pad"
    with open(os.path.join(directory, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, _, data in tensors.values():
            f.write(data)


def WriteTorch(directory: str) -> None:
    import torch
    g = torch.Generator().manual_seed(3)
    state = {
        "w": torch.randn(64, 33, generator=g).to(torch.bfloat16),
        "b": torch.tensor([1.0, -2.5, 3.140625, 65280.0, -0.0], dtype=torch.bfloat16),
        "t": torch.randn(8, 5, generator=g).to(torch.bfloat16).t(),  # strided: left out
        "f": torch.arange(6, dtype=torch.float32),
    }
    torch.save(state, os.path.join(directory, "pytorch_model.bin"))


def CheckWidened(ck: Checker, mnt: str, name: str, dtype: str, shape, stored: bytes,
                 expected: np.ndarray) -> None:
    path = os.path.join(mnt, "tensors", *name.split(".")) + ".npy"
    if not ck.Expect(os.path.isfile(path), f"{name}: no {path}"):
        return
    for mode in (None, "r"):
        what = f"{name} np.load(mmap_mode={mode!r})"
        arr = np.load(path, mmap_mode=mode, allow_pickle=False)
        ck.Equal((arr.dtype, list(arr.shape)), (np.dtype("<f4"), shape), f"{what} dtype, shape")
        got = np.asarray(arr).reshape(-1)
        ck.Expect(np.array_equal(got, expected, equal_nan=True), f"{what}: values differ")
        # -0.0 == 0.0: the sign bits too.
        ck.Expect(np.array_equal(np.signbit(got), np.signbit(expected)), f"{what}: signs differ")
        del arr, got
    with open(path, "rb") as f:
        prefix = f.read(10)  # magic, version 1.0, header length
    header = 10 + struct.unpack("<H", prefix[8:10])[0]
    ck.Equal(os.stat(path).st_size, header + 4 * int(np.prod(shape)),
             f"{name}: .npy size (header + 4 * numel)")
    for shown in (path, path[:-len(".npy")] + ".safetensors"):
        ck.Equal(os.getxattr(shown, "user.ckptfs.dtype").decode(), dtype,
                 f"{shown}: user.ckptfs.dtype (the stored dtype)")
    # The stored bytes, beside it.
    st_path = path[:-len(".npy")] + ".safetensors"
    data = ReadFile(st_path)
    st = ParseSafetensors(data, st_path)
    e = st.entries.get(name)
    if ck.Expect(e is not None, f"{st_path}: no tensor {name}"):
        ck.Equal(e.dtype, dtype, f"{st_path} dtype")
        ck.Expect(data[st.data_start + e.begin:st.data_start + e.end] == stored,
                  f"{st_path}: stored bytes differ")


def CheckSafetensors(src: str, mnt: str) -> int:
    ck = Checker("widened safetensors")
    for name, (dtype, shape, data) in SafetensorsTensors().items():
        if dtype not in ("BF16", "F8_E4M3", "F8_E5M2"):
            continue
        expected = WidenToF32(dtype, data)
        CheckWidened(ck, mnt, name, dtype, shape, data, expected)
    # The definitions' landmarks, at their bytes (the tensors hold bytes 0..255 in order).
    e4m3 = np.load(os.path.join(mnt, "tensors/f8/e4m3.npy")).reshape(-1)
    e5m2 = np.load(os.path.join(mnt, "tensors/f8/e5m2.npy")).reshape(-1)
    bf16 = np.load(os.path.join(mnt, "tensors/bf16/big.npy")).reshape(-1)
    for table, known, nans, what in ((e4m3, E4M3_KNOWN, E4M3_NAN, "F8_E4M3"),
                                     (e5m2, E5M2_KNOWN, E5M2_NAN, "F8_E5M2")):
        for byte, value in known.items():
            ck.Expect(table[byte] == value and np.signbit(table[byte]) == np.signbit(value),
                      f"{what} 0x{byte:02x}: got {table[byte]!r}, expected {value!r}")
        for byte in nans:
            ck.Expect(np.isnan(table[byte]), f"{what} 0x{byte:02x}: got {table[byte]!r}, expected NaN")
        ck.Equal(int(np.isnan(table).sum()), len(nans), f"{what}: NaN count")
    for i, value in enumerate(BF16_KNOWN.values()):
        ck.Expect(bf16[i] == value and np.signbit(bf16[i]) == np.signbit(value),
                  f"BF16 #{i}: got {bf16[i]!r}, expected {value!r}")
    ck.Expect(np.isnan(bf16[len(BF16_KNOWN)]), "BF16 0x7fc0: not NaN")
    return ck.Finish("BF16 (odd offset, 300k elements), F8_E4M3 and F8_E5M2 widened exactly")


def CheckTorch(src: str, mnt: str) -> int:
    import torch
    ck = Checker("widened torch")
    state = torch.load(os.path.join(src, "pytorch_model.bin"))
    for name in ("w", "b"):
        t = state[name]
        stored = t.view(torch.int16).numpy().tobytes()
        CheckWidened(ck, mnt, name, "BF16", list(t.shape), stored, t.float().numpy().reshape(-1))
    ck.Expect(not os.path.exists(os.path.join(mnt, "tensors", "t.npy")),
              "tensors/t.npy: a strided tensor is left out of tensors/, as for every dtype")
    return ck.Finish("torch bfloat16 widened exactly (torch's own .float() as the oracle)")


def Main(args) -> int:
    mode = args[0]
    if mode == "write-safetensors":
        WriteSafetensors(args[1])
        return 0
    if mode == "write-torch":
        WriteTorch(args[1])
        return 0
    if mode == "check-safetensors":
        return CheckSafetensors(args[1], args[2])
    if mode == "check-torch":
        return CheckTorch(args[1], args[2])
    print(f"unknown mode {mode}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    RunMain(Main, "write-safetensors DIR | write-torch DIR | check-safetensors DIR MNT | check-torch DIR MNT")
