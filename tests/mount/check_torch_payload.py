#!/usr/bin/python3
"""TorchPayloadIsLive: the positive control of the hostile torch cases. A refusal that
leaves no marker file proves nothing if the payload could never have run; this loads
FILE's data.pkl with python's own (unrestricted) pickle, which must run the payload and
create MARKER, and then removes MARKER again. The payload only touches MARKER.

The tensors are kept out: persistent ids (storages) load as None, and torch._utils.*
(the tensor rebuilders) and torch's storage classes as a stand-in that accepts
anything, so the tensors before the payload cannot stop the unpickling early. Every
other global is the real one (torch.storage._load_from_bytes included).

usage: check_torch_payload.py FILE MARKER
"""

import io
import os
import pickle
import zipfile

from checklib import Checker, RunMain


def StandIn(*args, **kwargs):  # pylint: disable=unused-argument
    return None


class PlainUnpickler(pickle.Unpickler):
    def persistent_load(self, pid):
        return None

    def find_class(self, module, name):
        if module == "torch._utils" or (module == "torch" and name.endswith("Storage")):
            return StandIn
        return super().find_class(module, name)


def Main(args) -> int:
    path, marker = args
    ck = Checker("torch payload")
    if not ck.Expect(not os.path.exists(marker), f"{marker} exists before the control ran"):
        return ck.Finish("")
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith("/data.pkl"))
        data = z.read(name)
    try:
        PlainUnpickler(io.BytesIO(data)).load()
    except Exception:  # pylint: disable=broad-except
        pass  # after the payload ran (or not: then the check below fails)
    ran = os.path.exists(marker)
    ck.Expect(ran, f"python's pickle did not run the payload of {path}: {marker} not created")
    if ran:
        os.remove(marker)
    return ck.Finish(f"unpickling {os.path.basename(path)} created {os.path.basename(marker)}")


if __name__ == "__main__":
    RunMain(Main, "FILE MARKER")
