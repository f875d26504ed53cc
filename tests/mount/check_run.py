#!/usr/bin/python3
"""Checks of a mounted training run (tests/mount/run_mount_test.cc), as a user's tools see it.

  check_run.py hf MNT                 the HF-shaped run of make_run.py hf SRC 3 --bad
                                      checkpoint-broken: names, latest/best symlinks,
                                      latest/model.safetensors loaded with numpy,
                                      best/pytorch_model.bin with torch, the ERROR file
  check_run.py live SRC MNT SECONDS   a training loop saving ckpt_NNNN.pt with torch.save
                                      (renamed into place, every third written in place)
                                      and deleting all but the newest 3, while readers read
                                      through the mount: every file read is exactly one
                                      checkpoint's bytes, latest moves, deleted ones go
  check_run.py pin SRC MNT            MNT is `--checkpoint latest` of SRC: a new save moves
                                      the root for new opens; a file open before keeps its
                                      checkpoint's bytes
  check_run.py idle MNT               MNT is an HF run mounted with --idle-close 1: an
                                      unused checkpoint is closed (stats.json), an open
                                      file keeps its checkpoint open, and one reopened
                                      shows the same inodes and bytes
  check_run.py remote SRC MNT         MNT is the HF run of make_run.py hf SRC 3 served over
                                      HTTP: ls, latest loaded; then a new checkpoint
                                      written to SRC shows up on ls and becomes latest
  check_run.py latest MNT NAME STEP   MNT lists NAME within 15 s, latest names it and its
                                      model.safetensors holds STEP (a run over S3, NAME
                                      uploaded by the test)
  check_run.py lightning MNT          the Lightning run of make_run.py lightning: latest ->
                                      last-v1.ckpt, best -> epoch=0-step=10.ckpt, each
                                      entry's pytorch_model.bin loaded with torch.load
                                      holding its step
  check_run.py wild-lightning SRC MNT the run Lightning itself wrote (../shared/fixtures/wild,
                                      hyper_parameters holding an argparse.Namespace):
                                      latest -> last.ckpt, best -> the file named by
                                      lightning_best.json's best_model_path, and each
                                      entry's pytorch_model.bin loaded with torch.load
                                      equal to SRC's state_dict
Every wait is bounded; the last line says what was checked.
"""
import errno
import json
import os
import re
import struct
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_run  # noqa: E402

VISIBLE_WITHIN = 15.0  # seconds: a save must show up (and a deletion go) within this


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def safetensors_values(data, what):
    """Every tensor of safetensors bytes `data` as a flat float32 array, by name."""
    if len(data) < 8:
        fail("%s: %d bytes, not a safetensors file" % (what, len(data)))
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + begin:8 + n + end], np.float32)
    return out


def single_value(data, what):
    """The one value every tensor of `data` holds; fails on mixed bytes."""
    values = set()
    for name, arr in safetensors_values(data, what).items():
        values.update(np.unique(arr).tolist())
    if len(values) != 1:
        fail("%s: tensors hold %d distinct values (%s): bytes of several checkpoints"
             % (what, len(values), sorted(values)[:5]))
    return values.pop()


def wait_for(predicate, what, timeout=VISIBLE_WITHIN):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return time.monotonic() - (deadline - timeout)
        except OSError:  # not there yet, or gone meanwhile
            pass
        time.sleep(0.05)
    fail("%s: not within %.0f s" % (what, timeout))


def check_hf(mnt):
    names = sorted(os.listdir(mnt))
    want = sorted([".ckptfs", "best", "checkpoint-100", "checkpoint-200", "checkpoint-300",
                   "checkpoint-broken", "latest", "views"])
    if names != want:
        fail("ls %s: %s, expected %s" % (mnt, names, want))
    if os.readlink(os.path.join(mnt, "latest")) != "checkpoint-300":
        fail("latest -> %s" % os.readlink(os.path.join(mnt, "latest")))
    if os.readlink(os.path.join(mnt, "best")) != "checkpoint-200":
        fail("best -> %s" % os.readlink(os.path.join(mnt, "best")))
    with open(os.path.join(mnt, "views", "latest", "model.safetensors"), "rb") as f:
        if single_value(f.read(), "latest/model.safetensors") != 300:
            fail("latest/model.safetensors is not checkpoint-300's")
    import torch
    sd = torch.load(os.path.join(mnt, "views", "best", "pytorch_model.bin"), weights_only=True)
    if sorted(sd) != ["embed.weight", "layers.0.bias", "layers.0.weight"]:
        fail("best/pytorch_model.bin keys %s" % sorted(sd))
    if any(float(t.min()) != 200 or float(t.max()) != 200 for t in sd.values()):
        fail("best/pytorch_model.bin is not checkpoint-200's")
    for step in (100, 200, 300):
        state = json.load(open(os.path.join(mnt, "checkpoint-%d" % step, "trainer_state.json")))
        if state["global_step"] != step:
            fail("checkpoint-%d/trainer_state.json says step %s" % (step, state["global_step"]))
    broken = os.path.join(mnt, "views", "checkpoint-broken")
    if os.listdir(broken) != ["ERROR"]:
        fail("checkpoint-broken holds %s, expected only ERROR" % os.listdir(broken))
    error = open(os.path.join(broken, "ERROR")).read()
    if error.count("\n") != 1 or not error.endswith("\n") or "checkpoint-broken" not in error:
        fail("ERROR is not one line naming the entry: %r" % error)
    stats = json.load(open(os.path.join(mnt, ".ckptfs", "stats.json")))
    if stats["checkpoints"] != 4 or stats["latest"] != "checkpoint-300":
        fail(".ckptfs/stats.json: %s" % stats)
    print("hf run: ls, latest -> checkpoint-300, best -> checkpoint-200, numpy and torch "
          "loads, ERROR: %s" % error.strip())


def step_of(name):
    m = re.fullmatch(r"ckpt_(\d+)\.pt", name)
    return int(m.group(1)) if m else None


class Readers:
    """Threads reading whatever the mount shows, checking each file is one checkpoint."""

    def __init__(self, mnt, count):
        self.mnt = mnt
        self.stop = threading.Event()
        self.errors = []
        self.reads = 0
        self.gone = 0  # entry deleted between listing and reading: ENOENT or EIO
        self.latest_seen = set()
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(count)]

    def read_one(self, name, view):
        path = os.path.join(self.mnt, name, view)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.EIO, errno.ESTALE):
                self.gone += 1
                return
            raise
        value = single_value(data, path)
        if value != step_of(name):
            self.errors.append("%s holds step %s" % (path, value))
        self.reads += 1

    def run(self, i):
        try:
            while not self.stop.is_set():
                try:
                    names = [n for n in os.listdir(self.mnt) if step_of(n) is not None]
                    self.latest_seen.add(os.readlink(os.path.join(self.mnt, "latest")))
                except OSError:
                    continue
                for name in sorted(names, reverse=bool(i % 2)):
                    self.read_one(name, "model.safetensors")
        except SystemExit:
            self.errors.append("mixed bytes (see above)")
        except Exception as e:  # any other failure is a finding
            self.errors.append("reader %d: %r" % (i, e))

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(60)
            if t.is_alive():
                self.errors.append("a reader hung")


def save(src, step):
    path = os.path.join(src, "ckpt_%04d.pt" % step)
    if step % 3 == 0:  # written in place: half-written files must stay invisible
        import torch
        state = {"model_state_dict": {k: torch.from_numpy(v)
                                      for k, v in make_run.model(step).items()},
                 "step": step}
        torch.save(state, path)
    else:
        make_run.save(path, step)


def check_live(src, mnt, seconds):
    first = max(step_of(n) for n in os.listdir(src) if step_of(n) is not None)
    step = first
    # A file opened now and read after its checkpoint is deleted: its bytes (issue 22).
    held_name = "ckpt_%04d.pt" % first
    held = open(os.path.join(mnt, "views", held_name, "model.safetensors"), "rb")
    head = held.read(64)
    with Readers(os.path.join(mnt, "views"), 3) as readers:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not readers.errors:
            step += 1
            save(src, step)
            for name in os.listdir(src):
                s = step_of(name)
                if s is not None and s <= step - 3:
                    os.unlink(os.path.join(src, name))
            time.sleep(0.4)
        last = "ckpt_%04d.pt" % step
        wait_for(lambda: os.readlink(os.path.join(mnt, "latest")) == last,
                 "latest -> %s after the last save" % last)
        wait_for(lambda: held_name not in os.listdir(mnt), "%s gone once deleted" % held_name)
    if readers.errors:
        fail("; ".join(readers.errors[:5]))
    try:
        rest = held.read()
    except OSError as e:
        fail("a file open before its checkpoint was deleted: %s" % e)
    if single_value(head + rest, "the file open before its deletion") != first:
        fail("a file open before its checkpoint was deleted changed its bytes")
    held_result = "kept its bytes"
    held.close()
    shown = sorted(n for n in os.listdir(mnt) if step_of(n) is not None)
    if shown != ["ckpt_%04d.pt" % s for s in range(step - 2, step + 1)]:
        fail("after the loop the mount shows %s" % shown)
    if len(readers.latest_seen) < 2:
        fail("latest never moved: %s" % readers.latest_seen)
    if readers.reads < 10:
        fail("only %d reads" % readers.reads)
    print("live run: %d saves (every third in place), %d whole-file reads all of one "
          "checkpoint, %d vanished mid-read, latest took %d values, open file of a deleted "
          "checkpoint %s" % (step - first, readers.reads, readers.gone,
                             len(readers.latest_seen), held_result))


def check_pin(src, mnt):
    steps = sorted(step_of(n) for n in os.listdir(src) if step_of(n) is not None)
    path = os.path.join(mnt, "model.safetensors")
    before = single_value(open(path, "rb").read(), path)
    if before != steps[-1]:
        fail("the root holds step %s, latest is %s" % (before, steps[-1]))
    held = open(path, "rb")
    head = held.read(100)
    nxt = steps[-1] + 1
    make_run.save(os.path.join(src, "ckpt_%04d.pt" % nxt), nxt)
    took = wait_for(lambda: single_value(open(path, "rb").read(), path) == nxt,
                    "the pinned root following the new save")
    rest = held.read()
    held.close()
    if single_value(head + rest, "the file open before the save") != before:
        fail("a file open before the save changed its bytes")
    print("--checkpoint latest: new opens saw step %d %.1f s after the save; the file open "
          "before kept step %d" % (nxt, took, before))


def open_count(mnt):
    return json.load(open(os.path.join(mnt, ".ckptfs", "stats.json")))["checkpoints_open"]


def check_idle(mnt):
    path = os.path.join(mnt, "views", "checkpoint-100", "model.safetensors")
    held_path = os.path.join(mnt, "views", "checkpoint-200", "model.safetensors")
    # The mount opened what latest and best name, to check them; unused, they close too.
    wait_for(lambda: open_count(mnt) == 0, "the checkpoints latest and best name closed")
    data = open(path, "rb").read()
    inode = os.stat(path).st_ino
    held = open(held_path, "rb")
    if open_count(mnt) != 2:
        fail("%d checkpoints open after reading two" % open_count(mnt))
    took = wait_for(lambda: open_count(mnt) == 1, "the unused checkpoint closed")
    time.sleep(2.5)  # several idle periods: the open file's checkpoint must stay open
    if open_count(mnt) != 1:
        fail("the checkpoint of an open file was closed")
    if single_value(held.read(), held_path) != 200:
        fail("the open file's bytes changed")
    held.close()
    again = open(path, "rb").read()
    if os.stat(path).st_ino != inode or again != data:
        fail("the reopened checkpoint shows other inodes or bytes")
    print("idle close: an unused checkpoint closed %.1f s after its last use, one with an "
          "open file stayed open, reopened with the same inode and bytes" % took)


def check_remote(src, mnt, save=True):
    names = sorted(n for n in os.listdir(mnt) if n.startswith("checkpoint-"))
    if names != ["checkpoint-100", "checkpoint-200", "checkpoint-300"]:
        fail("ls %s: %s" % (mnt, names))
    latest = os.path.join(mnt, "views", "latest", "model.safetensors")
    if single_value(open(latest, "rb").read(), latest) != 300:
        fail("latest/model.safetensors is not checkpoint-300's")
    if not save:
        print("remote run: 3 checkpoints, latest loaded")
        return
    d = make_run.write_entry(src, "checkpoint-400", 400)
    with open(os.path.join(d, "trainer_state.json"), "w") as f:
        json.dump({"global_step": 400, "best_model_checkpoint": "out/checkpoint-200"}, f)
    took = wait_for(lambda: "checkpoint-400" in os.listdir(mnt) and
                    os.readlink(os.path.join(mnt, "latest")) == "checkpoint-400",
                    "checkpoint-400 listed and latest")
    if single_value(open(latest, "rb").read(), latest) != 400:
        fail("latest/model.safetensors is not checkpoint-400's after the save")
    print("remote run: 3 checkpoints, latest loaded; a new one listed and latest %.1f s "
          "after it was written" % took)


def check_latest(mnt, name, step):
    took = wait_for(lambda: name in os.listdir(mnt) and
                    os.readlink(os.path.join(mnt, "latest")) == name, "%s listed and latest" % name)
    latest = os.path.join(mnt, "views", "latest", "model.safetensors")
    if single_value(open(latest, "rb").read(), latest) != step:
        fail("latest/model.safetensors is not %s's" % name)
    print("%s listed and latest %.1f s after the check started" % (name, took))


def check_lightning(mnt):
    import torch
    for link, want in (("latest", "last-v1.ckpt"), ("best", "epoch=0-step=10.ckpt")):
        got = os.readlink(os.path.join(mnt, link))
        if got != want:
            fail("%s -> %s, not %s" % (link, got, want))
    for entry, step in (("latest", 30), ("best", 10), ("last.ckpt", 20)):
        sd = torch.load(os.path.join(mnt, "views", entry, "pytorch_model.bin"), map_location="cpu")
        weights = [v for k, v in sd.items() if k.endswith("model.weight")]
        if len(weights) != 1 or not bool((weights[0] == float(step)).all()):
            fail("%s/pytorch_model.bin: keys %s, not step %d's" % (entry, sorted(sd), step))
    print("lightning run: latest -> last-v1.ckpt, best -> epoch=0-step=10.ckpt (first "
          "ModelCheckpoint of last-v1.ckpt's callbacks state), torch.load of each")


def check_wild_lightning(src, mnt):
    import torch
    with open(os.path.join(os.path.dirname(src), "lightning_best.json")) as f:
        best = os.path.basename(json.load(f)["best_model_path"])
    for link, want in (("latest", "last.ckpt"), ("best", best)):
        got = os.readlink(os.path.join(mnt, link))
        if got != want:
            fail("%s -> %s, not %s" % (link, got, want))
    names = sorted(n for n in os.listdir(src) if n.endswith(".ckpt"))
    for entry in names + ["latest", "best"]:
        want = torch.load(os.path.join(src, os.readlink(os.path.join(mnt, entry))
                                       if entry in ("latest", "best") else entry),
                          map_location="cpu")["state_dict"]
        got = torch.load(os.path.join(mnt, "views", entry, "pytorch_model.bin"), map_location="cpu")
        if sorted(got) != sorted(want) or any(not torch.equal(got[k], want[k]) for k in want):
            fail("%s/pytorch_model.bin: keys %s differ from SRC's state_dict %s"
                 % (entry, sorted(got), sorted(want)))
    print("wild lightning run: latest -> last.ckpt, best -> %s (last.ckpt's ModelCheckpoint "
          "callbacks state), torch.load of %d entries equal to SRC's state_dict"
          % (best, len(names)))


def main():
    kind = sys.argv[1]
    if kind == "lightning":
        check_lightning(sys.argv[2])
    elif kind == "wild-lightning":
        check_wild_lightning(sys.argv[2], sys.argv[3])
    elif kind == "hf":
        check_hf(sys.argv[2])
    elif kind == "live":
        check_live(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    elif kind == "remote":
        check_remote(sys.argv[2], sys.argv[3], "--no-save" not in sys.argv)
    elif kind == "latest":
        check_latest(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif kind == "idle":
        check_idle(sys.argv[2])
    elif kind == "pin":
        check_pin(sys.argv[2], sys.argv[3])
    else:
        fail("unknown check " + kind)


if __name__ == "__main__":
    main()
