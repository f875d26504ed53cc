"""Measurements for wan_perf_mount_test.cc: reads through a mount, and its counters.
Each command prints one JSON object.

  read FILE...            reads each FILE whole (1 MiB reads), all at once if several:
                          {"bytes", "seconds", "mbps", "sha256": [one per FILE]}
  stats MNT               MNT/.ckptfs/stats.json's "remote" object
"""

import hashlib
import json
import sys
import threading
import time


def read(paths):
    shas = [None] * len(paths)
    total = [0] * len(paths)

    def one(i):
        h = hashlib.sha256()
        with open(paths[i], "rb", buffering=0) as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                h.update(b)
                total[i] += len(b)
        shas[i] = h.hexdigest()

    start = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(paths))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - start
    return {"bytes": sum(total), "seconds": seconds, "mbps": sum(total) / seconds / 1e6,
            "sha256": shas}


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "read":
        out = read(args)
    elif cmd == "stats":
        with open(args[0] + "/.ckptfs/stats.json") as f:
            out = json.load(f)["remote"]
    else:
        sys.exit("unknown command " + cmd)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
