#!/usr/bin/python3
"""A run survives its bad and flaky entries (tests/mount/run_mount_test.cc, issue 22).

  check_run_faults.py add-outside SRC OUTSIDE NAME STEP weights|config
                                      writes entry SRC/NAME (make_run.py's files for STEP)
                                      whose model.safetensors, or config.json, is a symlink
                                      to a file in OUTSIDE (weights of step 999, a secret)
  check_run_faults.py outside MNT     MNT is make_run.py hf SRC 3 plus checkpoint-400
                                      (weights out) and checkpoint-250 (config out): all
                                      listed, checkpoint-400 is one ERROR naming the link,
                                      checkpoint-250 serves without its config.json,
                                      latest -> checkpoint-300, nothing of OUTSIDE read
  check_run_faults.py follows SRC MNT OUTSIDE
                                      a live run: checkpoint-300 appears with its weights
                                      linking out (shown, as ERROR), then checkpoint-400 is
                                      saved and becomes latest: the run keeps following
  check_run_faults.py error MNT NAME TEXT
                                      MNT/NAME holds one file, ERROR, one line holding TEXT
  check_run_faults.py recovers MNT NAME STEP
                                      within 15 s MNT/NAME holds the checkpoint (no ERROR)
                                      and its model.safetensors holds STEP
Every wait is bounded; the last line says what was checked.
"""
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_run  # noqa: E402
import make_run  # noqa: E402
from check_run import fail, single_value, wait_for  # noqa: E402

SECRET_STEP = 999


def add_outside(src, outside, name, step, what):
    os.makedirs(outside, exist_ok=True)
    d = make_run.write_entry(src + ".staging", name, step)
    # A Trainer checkpoint, whole: the run's others have their trainer_state.json too.
    make_run.write_trainer_state(d, step, step)
    if what == "weights":
        secret = os.path.join(outside, "secret.safetensors")
        with open(secret, "wb") as f:
            f.write(make_run.safetensors_bytes(make_run.model(SECRET_STEP)))
        os.remove(os.path.join(d, "model.safetensors"))
        os.symlink(secret, os.path.join(d, "model.safetensors"))
    elif what == "config":
        secret = os.path.join(outside, "secret.json")
        with open(secret, "w") as f:
            json.dump({"secret": SECRET_STEP}, f)
        os.remove(os.path.join(d, "config.json"))
        os.symlink(secret, os.path.join(d, "config.json"))
    else:
        fail("add-outside: unknown kind " + what)
    # Renamed into place whole, as HF Trainer does with tmp-checkpoint-N.
    os.rename(d, os.path.join(src, name))
    shutil.rmtree(src + ".staging")


def error_of(mnt, name):
    d = os.path.join(mnt, "views", name)
    kids = os.listdir(d)
    if kids != ["ERROR"]:
        return None
    return open(os.path.join(d, "ERROR")).read()


def check_error(mnt, name, text):
    error = error_of(mnt, name)
    if error is None:
        fail("views/%s holds %s, expected only ERROR"
             % (name, os.listdir(os.path.join(mnt, "views", name))))
    if error.count("\n") != 1 or text not in error or name not in error:
        fail("%s/ERROR is not one line naming it and %r: %r" % (name, text, error))
    return error.strip()


def check_outside(mnt):
    names = sorted(n for n in os.listdir(mnt) if n.startswith("checkpoint-"))
    want = ["checkpoint-100", "checkpoint-200", "checkpoint-250", "checkpoint-300",
            "checkpoint-400"]
    if names != want:
        fail("ls %s: %s, expected %s" % (mnt, names, want))
    error = check_error(mnt, "checkpoint-400", "leads outside")
    kids = sorted(os.listdir(os.path.join(mnt, "views", "checkpoint-250")))
    if "config.json" in kids or "model.safetensors" not in kids:
        fail("checkpoint-250 holds %s: its config.json links out" % kids)
    path = os.path.join(mnt, "views", "checkpoint-250", "model.safetensors")
    if single_value(open(path, "rb").read(), path) != 250:
        fail("checkpoint-250/model.safetensors is not its own")
    if os.readlink(os.path.join(mnt, "latest")) != "checkpoint-300":
        fail("latest -> %s, expected checkpoint-300 (checkpoint-400 fails to open)"
             % os.readlink(os.path.join(mnt, "latest")))
    path = os.path.join(mnt, "views", "latest", "model.safetensors")
    if single_value(open(path, "rb").read(), path) != 300:
        fail("latest/model.safetensors is not checkpoint-300's")
    print("run with entries linking out: 5 listed, latest -> checkpoint-300, "
          "checkpoint-250 serves without config.json, ERROR: %s" % error)


def check_follows(src, mnt, outside):
    check_run.check_latest(mnt, "checkpoint-200", 200)
    add_outside(src, outside, "checkpoint-300", 300, "weights")
    took = wait_for(lambda: error_of(mnt, "checkpoint-300") is not None,
                    "checkpoint-300 (weights linking out) shown as ERROR")
    error = check_error(mnt, "checkpoint-300", "leads outside")
    if os.readlink(os.path.join(mnt, "latest")) != "checkpoint-200":
        fail("latest -> %s while checkpoint-300 cannot open"
             % os.readlink(os.path.join(mnt, "latest")))
    d = make_run.write_entry(src + ".staging", "checkpoint-400", 400)
    make_run.write_trainer_state(d, 400, 400)
    os.rename(d, os.path.join(src, "checkpoint-400"))
    shutil.rmtree(src + ".staging")
    check_run.check_latest(mnt, "checkpoint-400", 400)
    print("live run: checkpoint-300 linking out shown as ERROR %.1f s after it appeared (%s); "
          "checkpoint-400 followed and latest" % (took, error))


def check_recovers(mnt, name, step):
    d = os.path.join(mnt, "views", name)
    took = wait_for(lambda: "model.safetensors" in os.listdir(d), name + " opens again")
    if "ERROR" in os.listdir(d):
        fail("%s still holds ERROR beside its files: %s" % (name, os.listdir(d)))
    path = os.path.join(d, "model.safetensors")
    if single_value(open(path, "rb").read(), path) != step:
        fail("%s/model.safetensors is not its own" % name)
    print("%s opened again %.1f s after the check started, its bytes its own" % (name, took))


def main():
    kind = sys.argv[1]
    if kind == "add-outside":
        add_outside(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6])
    elif kind == "outside":
        check_outside(sys.argv[2])
    elif kind == "follows":
        check_follows(sys.argv[2], sys.argv[3], sys.argv[4])
    elif kind == "error":
        print("%s: %s" % (sys.argv[3], check_error(sys.argv[2], sys.argv[3], sys.argv[4])))
    elif kind == "recovers":
        check_recovers(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        fail("unknown check " + kind)


if __name__ == "__main__":
    main()
