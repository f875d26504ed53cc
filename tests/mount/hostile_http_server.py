#!/usr/bin/python3
"""A small HTTP server that misbehaves on purpose, for tests/mount/hostile_http_mount_test.cc.

It serves ROOT the way nginx does (the path percent-decoded, then normalised, so
`/ckpt/..%2Fx` is `/x`), with a strong ETag from each file's content, and it ignores
If-Match, as s3rver does. How it misbehaves is read from MODE_FILE at each request, so
a test can mount against a sound server and then turn it hostile:

  plain         serve correctly (the default, and while MODE_FILE is missing)
  wrong-offset  answer a range with 206 and the right length, but bytes 4096 further on,
                with a Content-Range saying so
  wrong-total   answer a range with the right bytes and a Content-Range whose total is
                one more than the file's size
  stall-shards  never answer a GET of a .safetensors file (HEADs are answered)
  stall-get     never answer any GET
  stall-ranges:NAME
                never answer a range GET of a file whose path ends with NAME (HEADs, whole
                GETs and other files are answered); stalled requests stay stalled after
                the mode changes, as a hung connection does
  redirect      answer everything with 307 to the same path on --redirect-port
  auth          serve correctly, but only requests with basic auth someone:hunter2
                (401 to the rest)
  no-validators serve correctly, but with neither ETag nor Last-Modified
  weak-etag     serve correctly, with a weak ETag from each file's content and a
                Last-Modified that never changes (so only the ETag tells a new file)

The --redirect-port listener (same process) answers 404 to everything. Every request on
either port is appended to LOG as one JSON object a line: port, method, raw path, the
path as resolved against ROOT, and every header.

usage: hostile_http_server.py --port P --root DIR --log FILE --mode-file FILE
                              [--redirect-port Q]
"""

import argparse
import base64
import hashlib
import http.server
import json
import os
import posixpath
import re
import socketserver
import threading
import time
import urllib.parse

ARGS = None
LOG_LOCK = threading.Lock()
STALL_SECONDS = 3600
SHIFT = 4096


def Mode():
    try:
        with open(ARGS.mode_file) as f:
            return f.read().strip() or "plain"
    except OSError:
        return "plain"


DIGESTS = {}
DIGESTS_LOCK = threading.Lock()


def Digest(file_path):
    """(size, md5 hex) of a file, computed once per version of it: hashing a large shard
    on every request would make the server too slow for a mount's --timeout."""
    st = os.stat(file_path)
    key = (file_path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    with DIGESTS_LOCK:
        if key in DIGESTS:
            return st.st_size, DIGESTS[key]
    md5 = hashlib.md5()
    with open(file_path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            md5.update(chunk)
    with DIGESTS_LOCK:
        DIGESTS[key] = md5.hexdigest()
    return st.st_size, DIGESTS[key]


def ReadBytes(file_path, offset, length):
    """Bytes [offset, offset + length) of a file, fewer past its end (as a slice)."""
    if length <= 0 or offset < 0:
        return b""
    with open(file_path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def Resolve(raw_path):
    path = urllib.parse.urlsplit(raw_path).path
    # "/" once: normpath keeps a leading "//", which would hide where a path leads.
    return posixpath.normpath("/" + urllib.parse.unquote(path).lstrip("/"))


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def Log(self):
        entry = {"port": self.server.server_address[1], "method": self.command,
                 "path": self.path, "resolved": Resolve(self.path),
                 "headers": {k: v for k, v in self.headers.items()}}
        with LOG_LOCK, open(ARGS.log, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def Answer(self, status, headers=(), body=b""):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if not any(name.lower() == "content-length" for name, _ in headers):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def do_HEAD(self):
        self.Serve()

    def do_GET(self):
        self.Serve()

    def Serve(self):
        self.Log()
        if self.server.server_address[1] == ARGS.redirect_port:
            self.Answer(404)
            return
        mode = Mode()
        if mode == "redirect":
            location = "http://127.0.0.1:%d%s" % (ARGS.redirect_port, self.path)
            self.Answer(307, [("Location", location)])
            return
        wanted = "Basic " + base64.b64encode(b"someone:hunter2").decode()
        if mode == "auth" and self.headers.get("Authorization") != wanted:
            self.Answer(401, [("WWW-Authenticate", 'Basic realm="ckptfs"')])
            return
        resolved = Resolve(self.path)
        file_path = os.path.join(ARGS.root, resolved.lstrip("/"))
        if not os.path.isfile(file_path):
            self.Answer(404)
            return
        ranged = "Range" in self.headers
        if self.command == "GET" and (mode == "stall-get" or (
                mode == "stall-shards" and resolved.endswith(".safetensors")) or (
                mode.startswith("stall-ranges:") and ranged and
                resolved.endswith(mode[len("stall-ranges:"):]))):
            time.sleep(STALL_SECONDS)
            return
        size, digest = Digest(file_path)
        etag = '"%s"' % digest
        headers = [("ETag", "W/" + etag if mode == "weak-etag" else etag),
                   ("Last-Modified", "Thu, 01 Jan 2015 00:00:00 GMT"),
                   ("Accept-Ranges", "bytes")]
        if mode == "no-validators":
            headers = headers[2:]
        match = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if not match or self.command == "HEAD":
            data = ReadBytes(file_path, 0, size) if self.command == "GET" else b""
            self.Answer(200, headers + [("Content-Length", str(size))], data)
            return
        first, last = int(match.group(1)), min(int(match.group(2)), size - 1)
        total = size
        if mode == "wrong-offset":
            first, last = first + SHIFT, last + SHIFT
            if last >= size and first >= 2 * SHIFT:  # stay inside the file: go back instead
                first, last = first - 2 * SHIFT, last - 2 * SHIFT
        elif mode == "wrong-total":
            total = size + 1
        body = ReadBytes(file_path, first, last + 1 - first)
        self.Answer(206, headers + [("Content-Range", "bytes %d-%d/%d" % (first, last, total))],
                    body)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--redirect-port", type=int, default=0)
    p.add_argument("--root", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--mode-file", required=True)
    ARGS = p.parse_args()
    servers = [Server(("127.0.0.1", ARGS.port), Handler)]
    if ARGS.redirect_port:
        servers.append(Server(("127.0.0.1", ARGS.redirect_port), Handler))
    for s in servers[1:]:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    servers[0].serve_forever()


if __name__ == "__main__":
    main()
