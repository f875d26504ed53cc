#!/usr/bin/python3
"""Readers of a live training run never break (issue 22; tests/mount/run_mount_test.cc).

  check_live_run.py retention torch SRC MNT SECONDS
  check_live_run.py retention hf SRC MNT SECONDS
      A training loop writes SRC while MNT (SRC mounted) is read: every 0.4 s a new
      checkpoint (torch: model_NNNNN.pt by torch.save, in place; hf: checkpoint-N/ with
      config.json, model.safetensors, trainer_state.json), then all but the newest 3 are
      deleted (os.unlink / shutil.rmtree, as save_total_limit and max_to_keep do). Two
      mmap readers and two read() readers open latest/model.safetensors and read it slowly,
      so that retention deletes what they hold open. Every read must be exactly one saved
      step's model: no SIGBUS, no EIO, no mixed bytes; `latest` never moves back.
  check_live_run.py seed torch|hf SRC
      The first 3 checkpoints of the loop below, written before SRC is mounted.
  check_live_run.py slowsave SRC MNT
      Saves that pause between files as big ones do (HF save_pretrained: config.json, shard
      1, shard 2, index; then Trainer's optimizer.pt and trainer_state.json; and one
      torch.save file written in two halves), while a watcher lists MNT every 20 ms: no
      entry appears before its last file is written, and `latest` never moves back.
Every wait is bounded; the last line says what was checked.
"""
import errno
import io
import json
import mmap
import os
import re
import shutil
import struct
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_run  # noqa: E402

WIDTH = 256  # 256 KiB per step's largest tensor: a read spans many pages and requests
KEEP = 3
SAVE_EVERY = 0.4
VISIBLE_WITHIN = 15.0


def fail(msg):
    print("FAIL: " + msg, flush=True)
    os._exit(1)  # from any thread


def step_of(name):
    m = re.fullmatch(r"(?:model_(\d+)\.pt|checkpoint-(\d+))", name)
    return int(m.group(1) or m.group(2)) if m else None


def check_model(header_and_data, what):
    """The step whose model `header_and_data` (a whole safetensors file) is; fails otherwise."""
    data = header_and_data
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(bytes(data[8:8 + n]))
    arrays = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        arrays[name] = np.frombuffer(data[8 + n + begin:8 + n + end], np.float32)
    steps = {float(a[0]) for a in arrays.values() if a.size}
    if len(steps) != 1:
        fail("%s: bytes of several checkpoints (%s)" % (what, sorted(steps)[:5]))
    step = int(steps.pop())
    want = make_run.model(step, WIDTH)
    if sorted(arrays) != sorted(want):
        fail("%s: tensors %s, expected %s" % (what, sorted(arrays), sorted(want)))
    for name, arr in want.items():
        if not np.array_equal(arrays[name], arr.ravel()):
            fail("%s: %s is not step %d's" % (what, name, step))
    return step


class Training(threading.Thread):
    """Saves a checkpoint every SAVE_EVERY seconds, keeping the newest KEEP."""

    def __init__(self, kind, src, first):
        super().__init__(daemon=True)
        self.kind, self.src, self.step = kind, src, first
        self.stop = threading.Event()
        self.error = None

    def save(self, step):
        if self.kind == "torch":
            import torch
            state = {"model_state_dict": {k: torch.from_numpy(v)
                                          for k, v in make_run.model(step, WIDTH).items()},
                     "step": step}
            torch.save(state, os.path.join(self.src, "model_%05d.pt" % step))
        else:
            d = make_run.write_entry(self.src, "checkpoint-%d" % step, step, WIDTH)
            with open(os.path.join(d, "trainer_state.json"), "w") as f:
                json.dump({"global_step": step}, f)

    def prune(self):
        for name in os.listdir(self.src):
            s = step_of(name)
            if s is not None and s <= self.step - KEEP:
                path = os.path.join(self.src, name)
                shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)

    def run(self):
        try:
            while not self.stop.is_set():
                self.step += 1
                self.save(self.step)
                self.prune()
                time.sleep(SAVE_EVERY)
        except Exception as e:  # the writer failing is a broken test, not a finding
            self.error = repr(e)


class Reader(threading.Thread):
    """Opens latest/model.safetensors again and again, reading each slowly."""

    def __init__(self, src, mnt, use_mmap, training):
        super().__init__(daemon=True)
        self.src, self.mnt, self.use_mmap, self.training = src, mnt, use_mmap, training
        self.path = os.path.join(mnt, "views", "latest", "model.safetensors")
        self.stop = threading.Event()
        self.reads = self.outlived = self.raced = 0

    def read_slowly(self, f):
        """The whole file, a piece at a time with pauses, by read() or by mmap."""
        size = os.fstat(f.fileno()).st_size
        piece = max(4096, size // 8)
        if self.use_mmap:
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            try:
                out = bytearray()
                for at in range(0, size, piece):  # each slice faults its pages in
                    out += m[at:at + piece]
                    time.sleep(0.25)
                return bytes(out)
            finally:
                m.close()
        out = b""
        while True:
            chunk = f.read(piece)
            if not chunk:
                return out
            out += chunk
            time.sleep(0.25)

    def run(self):
        kind = "mmap" if self.use_mmap else "read"
        while not self.stop.is_set():
            try:
                f = open(self.path, "rb")
            except OSError as e:
                # latest named an entry hidden meanwhile: a lookup race, before any byte.
                if e.errno == errno.ENOENT:
                    self.raced += 1
                    time.sleep(0.05)
                    continue
                fail("%s reader: open %s: %s" % (kind, self.path, e))
            try:
                data = self.read_slowly(f)
            except OSError as e:
                fail("%s reader: reading an open %s: %s" % (kind, self.path, e))
            finally:
                f.close()
            step = check_model(data, "%s of %s" % (kind, self.path))
            self.reads += 1
            if step <= self.training.step - KEEP:  # deleted while this reader held it
                self.outlived += 1


class LatestWatcher(threading.Thread):
    """Polls `latest`: it only ever moves forward."""

    def __init__(self, mnt, every=0.05):
        super().__init__(daemon=True)
        self.mnt, self.every = mnt, every
        self.stop = threading.Event()
        self.values = []
        self.seen = []  # (time, sorted entry names)

    def run(self):
        while not self.stop.is_set():
            try:
                target = os.readlink(os.path.join(self.mnt, "latest"))
                names = sorted(n for n in os.listdir(self.mnt) if step_of(n) is not None)
            except OSError:
                time.sleep(self.every)
                continue
            step = step_of(target)
            if self.values and step < self.values[-1]:
                fail("latest moved back from step %d to %s" % (self.values[-1], target))
            if not self.values or step != self.values[-1]:
                self.values.append(step)
            self.seen.append((time.monotonic(), names))
            time.sleep(self.every)


def wait_for(predicate, what, timeout=VISIBLE_WITHIN):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.05)
    fail("%s: not within %.0f s" % (what, timeout))


def check_retention(kind, src, mnt, seconds):
    first = max(step_of(n) for n in os.listdir(src) if step_of(n) is not None)
    training = Training(kind, src, first)
    watcher = LatestWatcher(mnt)
    readers = [Reader(src, mnt, use_mmap, training) for use_mmap in (True, True, False, False)]
    watcher.start()
    training.start()
    for r in readers:
        r.start()
    time.sleep(seconds)
    training.stop.set()
    training.join(30)
    for r in readers:
        r.stop.set()
    for r in readers:
        r.join(30)
        if r.is_alive():
            fail("a reader hung")
    if training.error:
        fail("the training loop failed: " + training.error)
    last = "model_%05d.pt" % training.step if kind == "torch" else "checkpoint-%d" % training.step
    wait_for(lambda: os.readlink(os.path.join(mnt, "latest")) == last,
             "latest -> %s after the last save" % last)
    watcher.stop.set()
    watcher.join(10)
    reads = sum(r.reads for r in readers)
    outlived = sum(r.outlived for r in readers)
    mmap_reads = sum(r.reads for r in readers if r.use_mmap)
    if mmap_reads < 4 or reads - mmap_reads < 4:
        fail("too few reads: %d by mmap, %d by read()" % (mmap_reads, reads - mmap_reads))
    if outlived == 0:
        fail("no read outlived its checkpoint's deletion: the test did not test retention")
    if len(watcher.values) < 3:
        fail("latest took only %s" % watcher.values)
    print("retention (%s): %d saves in %.0f s keeping %d; %d whole-file reads (%d by mmap) "
          "each exactly one step's model, %d of them of a checkpoint deleted while open; "
          "latest moved forward through %d steps, never back; %d opens raced a hidden entry"
          % (kind, training.step - first, seconds, KEEP, reads, mmap_reads, outlived,
             len(watcher.values), sum(r.raced for r in readers)))


def check_slowsave(src, mnt):
    watcher = LatestWatcher(mnt, every=0.02)
    watcher.start()
    pause = 1.8  # longer than the mount's stability wait (1 s) plus its debounce
    shown_early = []

    def write(rel, data, mode="wb"):
        path = os.path.join(src, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, mode) as f:
            f.write(data)

    def step_slowly(entry, files):
        for i, (rel, data) in enumerate(files):
            write(rel, data)
            begin = time.monotonic()
            time.sleep(pause)
            if i + 1 < len(files):
                early = [t for t, names in watcher.seen if t >= begin and entry in names]
                if early:
                    shown_early.append("%s shown after only %s" % (entry, rel))
        wait_for(lambda: os.readlink(os.path.join(mnt, "latest")) == entry,
                 "latest -> %s once its last file is written" % entry)
        latest = os.path.join(mnt, "views", "latest", "model.safetensors")
        with open(latest, "rb") as f:
            if check_model(f.read(), latest) != step_of(entry):
                fail("latest/model.safetensors is not %s's" % entry)

    model = make_run.model
    for step in (300, 400):
        entry = "checkpoint-%d" % step
        tensors = model(step, WIDTH)
        names = sorted(tensors)
        shard1 = {k: tensors[k] for k in names[:1]}
        shard2 = {k: tensors[k] for k in names[1:]}
        index = {"metadata": {}, "weight_map": {k: ("model-00001-of-00002.safetensors"
                                                    if k in shard1 else
                                                    "model-00002-of-00002.safetensors")
                                                for k in names}}
        step_slowly(entry, [
            (entry + "/config.json", json.dumps({"model_type": "toy"}).encode()),
            (entry + "/model-00001-of-00002.safetensors", make_run.safetensors_bytes(shard1)),
            (entry + "/model-00002-of-00002.safetensors", make_run.safetensors_bytes(shard2)),
            (entry + "/model.safetensors.index.json", json.dumps(index).encode()),
            (entry + "/optimizer.pt", b"optimizer state"),
            (entry + "/trainer_state.json", json.dumps({"global_step": step}).encode()),
        ])
    # torch.save of a big model: the file grows for seconds before its zip end record.
    import torch
    entry = "model_00500.pt"
    buf = io.BytesIO()
    torch.save({"model_state_dict": {k: torch.from_numpy(v)
                                     for k, v in model(500, WIDTH).items()}, "step": 500}, buf)
    data = buf.getvalue()
    path = os.path.join(src, entry)
    with open(path, "wb") as f:
        f.write(data[:len(data) // 2])
        f.flush()
        begin = time.monotonic()
        time.sleep(pause)
        if any(t >= begin and entry in names for t, names in watcher.seen):
            shown_early.append("%s shown while half written" % entry)
        f.write(data[len(data) // 2:])
    wait_for(lambda: os.readlink(os.path.join(mnt, "latest")) == entry,
             "latest -> %s once written" % entry)
    watcher.stop.set()
    watcher.join(10)
    if shown_early:
        fail("; ".join(shown_early))
    print("slow saves: checkpoint-300 and -400 written a file every %.1f s (config, shard 1, "
          "shard 2, index, optimizer, trainer_state) and model_00500.pt in two halves: never "
          "listed before their last byte, latest moved forward only (%s)"
          % (pause, watcher.values))


def seed(kind, src):
    training = Training(kind, src, 0)
    for step in range(1, KEEP + 1):
        training.save(step)


def main():
    if sys.argv[1] == "seed":
        seed(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "retention":
        check_retention(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
    elif sys.argv[1] == "slowsave":
        check_slowsave(sys.argv[2], sys.argv[3])
    else:
        fail("unknown check " + sys.argv[1])


if __name__ == "__main__":
    main()
