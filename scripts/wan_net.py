"""The network of scripts/wan_server.py: the latency and token bucket every reply goes
through (ThrottledWriter), the handler every listener derives from (WanHandler: replies,
ranges, If-Match, the request log), and the helpers the listeners share. Python stdlib.
"""

import email.utils
import hashlib
import json
import os
import re
import threading
import time
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler

BURST = 64 * 1024  # the token bucket's depth, and the largest piece sent at once
LOG_LOCK = threading.Lock()


# ---------------------------------------------------------------------------
# The network: every byte of every reply goes through ThrottledWriter.


class NetworkShape:
    """What every connection of every listener gets: latency and rate, and the log."""

    def __init__(self, latency_ms, rate_mbps, log_path):
        self.latency = latency_ms / 1000.0
        self.rate = rate_mbps * 1e6  # bytes/s; 0 = unlimited
        self.log_fd = None
        if log_path:
            self.log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._next_conn = 0
        self._lock = threading.Lock()

    def new_connection_id(self):
        with self._lock:
            self._next_conn += 1
            return self._next_conn

    def log(self, record):
        # One write of one line on an O_APPEND descriptor: lines never interleave, and
        # nothing is lost to buffering when SIGTERM ends the process at once.
        if self.log_fd is not None:
            with LOG_LOCK:
                os.write(self.log_fd, (json.dumps(record) + "\n").encode())


class ThrottledWriter:
    """The socket's write side, as BaseHTTPRequestHandler's wfile: the one place every
    reply goes through. arm() marks a request's arrival; the reply's first byte waits
    until latency after it. Then each piece (at most BURST bytes) takes its bytes from
    the connection's token bucket (rate bytes/s, BURST deep) before it is sent."""

    def __init__(self, sock, shape):
        self._sock = sock
        self._shape = shape
        self._first_byte_at = None
        self._tokens = float(BURST)
        self._filled_at = time.monotonic()

    def arm(self):
        self._first_byte_at = time.monotonic() + self._shape.latency

    def _wait_first_byte(self):
        if self._first_byte_at is not None:
            delay = self._first_byte_at - time.monotonic()
            self._first_byte_at = None
            if delay > 0:
                time.sleep(delay)

    def _take(self, n):
        """Takes n bytes from the bucket, sleeping off any debt. The bucket may go below
        zero: a sleep that overshoots is paid back by the next refill, so the long-run
        rate is the rate however late the scheduler wakes us (a bucket that had to fill
        to n first would lose every overshoot)."""
        rate = self._shape.rate
        now = time.monotonic()
        self._tokens = min(float(BURST), self._tokens + (now - self._filled_at) * rate)
        self._filled_at = now
        self._tokens -= n
        if self._tokens < 0:
            time.sleep(-self._tokens / rate)

    def _piece(self):
        return BURST if self._shape.rate else 1 << 30

    def write(self, data):
        self._wait_first_byte()
        view = memoryview(data)
        for start in range(0, len(view), self._piece()):
            piece = view[start : start + self._piece()]
            if self._shape.rate:
                self._take(len(piece))
            self._sock.sendall(piece)
        return len(data)

    def send_file(self, f, offset, length):
        """Sends length bytes of the open file f from offset (sendfile: no copies through
        Python); returns how many went out before an error, raising it after counting."""
        self._wait_first_byte()
        sent = 0
        try:
            while sent < length:
                piece = min(self._piece(), length - sent)
                if self._shape.rate:
                    self._take(piece)
                n = self._sock.sendfile(f, offset + sent, piece)
                if n == 0:  # the file shrank under us: the client sees a short body
                    break
                sent += n
        finally:
            self.sent_body = sent
        return sent

    closed = False  # socketserver's finish() asks

    def flush(self):
        pass

    def close(self):
        pass


# ---------------------------------------------------------------------------
# Helpers shared by the listeners


def http_date(mtime):
    return email.utils.formatdate(mtime, usegmt=True)


def parse_range(header, size):
    """One `bytes=a-b`, `bytes=a-` or `bytes=-n`: (start, end) inclusive, "unsatisfiable",
    or None (no header, or one we ignore as servers may: several ranges, bad syntax)."""
    m = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header or "")
    if not m or (not m.group(1) and not m.group(2)):
        return None
    if not m.group(1):  # the last n bytes
        n = int(m.group(2))
        return (max(0, size - n), size - 1) if n > 0 and size > 0 else "unsatisfiable"
    start = int(m.group(1))
    end = int(m.group(2)) if m.group(2) else size - 1
    if end < start:
        return None
    if start >= size:
        return "unsatisfiable"
    return start, min(end, size - 1)


def etag_matches(if_match, etag):
    """If-Match: "*" or a list of entity tags, compared strongly."""
    tags = [t.strip() for t in if_match.split(",")]
    return "*" in tags or (not etag.startswith("W/") and etag in tags)


class DigestCache:
    """Hashes of files, computed on first use and kept per (path, size, mtime, kind)."""

    def __init__(self):
        self._done = {}
        self._lock = threading.Lock()

    def get(self, path, kind):
        st = os.stat(path)
        key = (path, st.st_size, st.st_mtime_ns, kind)
        with self._lock:
            if key in self._done:
                return self._done[key]
        if kind == "git":  # a git blob id: sha1 of "blob N\0" + bytes
            h = hashlib.sha1(b"blob %d\0" % st.st_size)
        else:
            h = hashlib.new(kind)
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        digest = h.hexdigest()
        with self._lock:
            self._done[key] = digest
        return digest


DIGESTS = DigestCache()


def safe_join(root, rel):
    """root/rel, or None if rel leaves root (.., absolute) or names nothing usable."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if any(p == ".." or "\0" in p for p in parts):
        return None
    return os.path.join(root, *parts) if parts else root


# ---------------------------------------------------------------------------
# The handler every listener derives from: routing, replies, logging


class WanHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive; every reply through reply() (or serve_file()), which writes
    through the ThrottledWriter and logs one line when the reply ends. Subclasses set
    LISTENER and implement route(head)."""

    protocol_version = "HTTP/1.1"
    server_version = "wan_server"
    sys_version = ""
    timeout = 300  # an idle keep-alive connection ends after this
    LISTENER = "?"

    def setup(self):
        super().setup()
        self.shape = self.server.shape
        self.conn_id = self.shape.new_connection_id()
        self.wfile = ThrottledWriter(self.connection, self.shape)

    def parse_request(self):
        # The request line is in: the latency counts from here, for errors too.
        self.wfile.arm()
        return super().parse_request()

    def do_GET(self):
        self._dispatch(head=False)

    def do_HEAD(self):
        self._dispatch(head=True)

    def _dispatch(self, head):
        url = urllib.parse.urlsplit(self.path)
        self.raw_path, self.raw_query = url.path, url.query
        self.query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        self.is_head = head
        try:
            self.route(head)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:  # a bug or a malformed query: a 500 and a traceback, not a hang
            traceback.print_exc()
            self.close_connection = True
            self.reply(500, [("Content-Type", "text/plain"), ("Connection", "close")],
                       "Internal Server Error\n")

    def route(self, head):
        raise NotImplementedError

    # -- replies -------------------------------------------------------------

    def _start(self, status, headers, length):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def reply(self, status, headers=(), body=b""):
        """A reply with a body held in memory (no body sent for HEAD)."""
        if isinstance(body, str):
            body = body.encode()
        sent = 0
        try:
            self._start(status, headers, len(body))
            if not self.is_head and body:
                sent = self.wfile.write(body)
        finally:
            self._log(status, sent)

    def serve_file(self, path, etag, headers=(), last_modified=None):
        """The bytes of the file at path, as nginx serves one: 200, 206 for one Range, 416,
        412 for an If-Match that does not match etag; ETag and Accept-Ranges on each."""
        size = os.path.getsize(path)
        common = [("ETag", etag), ("Accept-Ranges", "bytes")] + list(headers)
        if last_modified:
            common.append(("Last-Modified", last_modified))
        if_match = self.headers.get("If-Match")
        if if_match is not None and not etag_matches(if_match, etag):
            return self.reply(412, common, "Precondition Failed\n")
        rng = parse_range(self.headers.get("Range"), size)
        if rng == "unsatisfiable":
            return self.reply(416, common + [("Content-Range", "bytes */%d" % size)])
        status, start, length = 200, 0, size
        if rng is not None:
            status, start, length = 206, rng[0], rng[1] - rng[0] + 1
            common.append(("Content-Range", "bytes %d-%d/%d" % (rng[0], rng[1], size)))
        common.append(("Content-Type", "application/octet-stream"))
        self.wfile.sent_body = 0
        try:
            with open(path, "rb") as f:
                self._start(status, common, length)
                if not self.is_head:
                    self.wfile.send_file(f, start, length)
        finally:
            self._log(status, self.wfile.sent_body)

    def send_error(self, code, message=None, explain=None):
        # The base class's errors (a bad request line, an unknown method) also go through
        # reply(): throttled, logged, with a body.
        self.is_head = getattr(self, "command", "") == "HEAD"
        if not hasattr(self, "raw_path"):
            self.raw_path, self.raw_query = (getattr(self, "path", "") or ""), ""
        self.close_connection = True
        text = "%d %s\n" % (code, message or self.responses.get(code, ("",))[0])
        self.reply(code, [("Content-Type", "text/plain"), ("Connection", "close")], text)

    def _log(self, status, body_bytes):
        self.shape.log(
            {
                "t": time.time(),
                "listener": self.LISTENER,
                "method": self.command,
                "path": self.raw_path,
                "query": self.raw_query,
                "range": self.headers.get("Range", "") if self.headers else "",
                "status": status,
                "bytes": body_bytes,
                "auth": bool(self.headers and self.headers.get("Authorization")),
                "conn": self.conn_id,
            }
        )

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass  # --log has every request; stderr stays for tracebacks
