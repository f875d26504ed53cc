#!/usr/bin/python3
"""A loopback "WAN": HTTP servers with a first-byte latency and a per-connection rate.

    /usr/bin/python3 scripts/wan_server.py [--latency-ms L] [--rate MBPS] [--log FILE]
        [--port-file FILE] [--files DIR] [--s3 DIR] [--hub DIR [--tokens a,b]
        [--page-size N] [--lfs-min-bytes N] [--sign-ttl S]]
        [--files-port P] [--s3-port P] [--hub-port P] [--cdn-port P]

Used by scripts/bench.sh (section `wan`) and the mount tests (tests/mount/wan_harness.h).
It stands in for a real network: every reply, status line, headers and errors included,
waits --latency-ms before its first byte and then goes through a token bucket of --rate
MB/s (1e6 bytes/s) per connection with a 64 KiB burst. (nginx's limit_rate lets short
replies through unthrottled, so it cannot stand in.) Python stdlib only.

Listeners, each optional, each on 127.0.0.1 and a port the kernel picks:
  files  --files DIR: plain HTTP like nginx (Range, strong ETag, If-Match, and nginx's
         `autoindex_format json` listing for a URL ending in '/').
  s3     --s3 DIR: S3 path style, anonymous (signatures ignored), one bucket per
         subdirectory: ListObjectsV2 (and v1), HEAD/GET of objects with Range.
  hub    --hub DIR: the Hugging Face Hub API and resolve endpoints, as huggingface_hub's
  cdn    file_download.py / hf_api.py expect them; LFS files redirect to "cdn", which
         checks the signed query as a presigned S3 URL is checked.
The contract (layout of DIR, headers, error codes) is the module docstring of each
listener's handler class below. --port-file gets {"files": P, ...} once all listen;
--log gets one JSON line per request. SIGTERM or SIGINT: exits at once.
"""

import argparse
import base64
import email.utils
import hashlib
import hmac
import html
import json
import os
import re
import signal
import threading
import time
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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


# ---------------------------------------------------------------------------
# files: plain HTTP


class FilesHandler(WanHandler):
    """--files DIR, like nginx with autoindex_format json.

    GET/HEAD /PATH of a file: 200, or 206 for one Range (416 if unsatisfiable), strong
    ETag "<mtime hex>-<size hex>" (nginx's), Last-Modified, Accept-Ranges: bytes; If-Match
    honoured (412). A directory: /PATH/ answers a JSON array of {"name", "type":
    "directory"|"file", "mtime", "size" (files)}; /PATH without the '/' is a 301 to it.
    Missing: 404."""

    LISTENER = "files"

    def route(self, head):
        path = safe_join(self.server.root, urllib.parse.unquote(self.raw_path))
        if path is None or not os.path.exists(path):
            return self.reply(404, [("Content-Type", "text/plain")], "Not Found\n")
        if os.path.isdir(path):
            if not self.raw_path.endswith("/"):
                return self.reply(301, [("Location", self.raw_path + "/")])
            return self.reply(200, [("Content-Type", "application/json")], self._listing(path))
        st = os.stat(path)
        etag = '"%x-%x"' % (int(st.st_mtime), st.st_size)
        self.serve_file(path, etag, last_modified=http_date(st.st_mtime))

    @staticmethod
    def _listing(path):
        entries = []
        for e in sorted(os.scandir(path), key=lambda e: e.name):
            st = e.stat()
            item = {"name": e.name, "type": "directory" if e.is_dir() else "file",
                    "mtime": http_date(st.st_mtime)}
            if not e.is_dir():
                item["size"] = st.st_size
            entries.append(item)
        return json.dumps(entries, indent=1)


# ---------------------------------------------------------------------------
# s3: path-style S3, anonymous


def iso8601(mtime):
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(mtime))


class S3Handler(WanHandler):
    """--s3 DIR: each subdirectory of DIR is a bucket, each file under it an object (key =
    its path below the bucket). Signatures and credentials are ignored.

    GET /BUCKET?list-type=2&prefix=&delimiter=&continuation-token=&start-after=&max-keys=
    (&encoding-type=url): ListObjectsV2; without list-type: ListObjects (v1, marker).
    HEAD/GET /BUCKET/KEY: the object (Range, If-Match as files); ETag is the quoted md5
    hex of the bytes, as S3 gives for a single-part upload. HEAD /BUCKET, GET / (the
    bucket list) and GET /BUCKET?location too. S3's XML errors: NoSuchBucket, NoSuchKey."""

    LISTENER = "s3"
    XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"

    def route(self, head):
        path = urllib.parse.unquote(self.raw_path)
        bucket, _, key = path.lstrip("/").partition("/")
        if not bucket:
            return self._list_buckets()
        bucket_dir = safe_join(self.server.root, bucket)
        if bucket_dir is None or "/" in bucket or not os.path.isdir(bucket_dir):
            return self._error(404, "NoSuchBucket", "The specified bucket does not exist")
        if not key:
            if head:
                return self.reply(200)
            if "location" in self.query:
                return self._xml(f'<LocationConstraint xmlns="{self.XMLNS}"></LocationConstraint>')
            return self._list(bucket, bucket_dir)
        obj = safe_join(bucket_dir, key)
        if obj is None or not os.path.isfile(obj):
            return self._error(404, "NoSuchKey", "The specified key does not exist.")
        st = os.stat(obj)
        etag = '"%s"' % DIGESTS.get(obj, "md5")
        self.serve_file(obj, etag, last_modified=http_date(st.st_mtime))

    def _xml(self, body, status=200):
        text = '<?xml version="1.0" encoding="UTF-8"?>\n' + body
        self.reply(status, [("Content-Type", "application/xml")], text)

    def _error(self, status, code, message):
        self._xml(f"<Error><Code>{code}</Code><Message>{message}</Message></Error>", status)

    def _list_buckets(self):
        names = sorted(e.name for e in os.scandir(self.server.root) if e.is_dir())
        items = "".join(f"<Bucket><Name>{html.escape(n)}</Name>"
                        f"<CreationDate>{iso8601(0)}</CreationDate></Bucket>" for n in names)
        self._xml(f'<ListAllMyBucketsResult xmlns="{self.XMLNS}"><Owner><ID>wan</ID></Owner>'
                  f"<Buckets>{items}</Buckets></ListAllMyBucketsResult>")

    def _list(self, bucket, bucket_dir):
        q = self.query
        v2 = q.get("list-type") == "2"
        prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
        max_keys = max(0, min(1000, int(q.get("max-keys") or 1000)))
        url_encode = q.get("encoding-type") == "url"
        enc = (lambda s: urllib.parse.quote(s, safe="/")) if url_encode else (lambda s: s)

        # Every key and common prefix in order; a page starts after the token's item.
        items = {}
        for dirpath, _, files in os.walk(bucket_dir):
            for name in files:
                full = os.path.join(dirpath, name)
                key = os.path.relpath(full, bucket_dir).replace(os.sep, "/")
                if not key.startswith(prefix):
                    continue
                cut = key.find(delimiter, len(prefix)) if delimiter else -1
                if cut >= 0:
                    items[key[: cut + len(delimiter)]] = None  # a common prefix
                else:
                    items[key] = full
        if v2:
            token = q.get("continuation-token")
            after = base64.urlsafe_b64decode(token).decode() if token else q.get("start-after", "")
        else:
            after = q.get("marker", "")
        ordered = [k for k in sorted(items) if k > after]
        page, truncated = ordered[:max_keys], len(ordered) > max_keys

        out = [f'<ListBucketResult xmlns="{self.XMLNS}"><Name>{html.escape(bucket)}</Name>',
               f"<Prefix>{html.escape(enc(prefix))}</Prefix><MaxKeys>{max_keys}</MaxKeys>",
               f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"]
        if delimiter:
            out.append(f"<Delimiter>{html.escape(enc(delimiter))}</Delimiter>")
        if url_encode:
            out.append("<EncodingType>url</EncodingType>")
        if v2:
            out.append(f"<KeyCount>{len(page)}</KeyCount>")
            if q.get("continuation-token"):
                out.append(f"<ContinuationToken>{html.escape(q['continuation-token'])}"
                           "</ContinuationToken>")
            if truncated:
                next_token = base64.urlsafe_b64encode(page[-1].encode()).decode()
                out.append(f"<NextContinuationToken>{next_token}</NextContinuationToken>")
        else:
            out.append(f"<Marker>{html.escape(enc(after))}</Marker>")
            if truncated:
                out.append(f"<NextMarker>{html.escape(enc(page[-1]))}</NextMarker>")
        for k in page:
            if items[k] is None:
                out.append(f"<CommonPrefixes><Prefix>{html.escape(enc(k))}</Prefix></CommonPrefixes>")
                continue
            st = os.stat(items[k])
            md5 = DIGESTS.get(items[k], "md5")
            out.append(f"<Contents><Key>{html.escape(enc(k))}</Key>"
                       f"<LastModified>{iso8601(st.st_mtime)}</LastModified>"
                       f"<ETag>&quot;{md5}&quot;</ETag><Size>{st.st_size}</Size>"
                       "<StorageClass>STANDARD</StorageClass></Contents>")
        out.append("</ListBucketResult>")
        self._xml("".join(out))


# ---------------------------------------------------------------------------
# hub and cdn: the Hugging Face Hub

LFS_EXTENSIONS = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5",
                  ".msgpack", ".zst", ".npy", ".distcp")
SHA_RE = re.compile(r"[0-9a-f]{40}")
CDN_LAST_MODIFIED = "Thu, 01 Jan 2026 00:00:00 GMT"


class HubError(Exception):
    def __init__(self, status, code, message):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class HubRepo:
    """One repo of the --hub DIR, read from disk on each request (a test moves a branch
    by rewriting refs/BRANCH): DIR/ORG/NAME/refs/REF (a 40-hex sha; REF may hold '/'),
    DIR/ORG/NAME/commits/SHA/... (that commit's files), DIR/ORG/NAME/access.json
    (optional {"private": bool, "gated": bool, "tokens": [...]})."""

    def __init__(self, root, org, name, token, server_tokens):
        self.id = f"{org}/{name}"
        self.dir = safe_join(root, self.id)
        self.access = {}
        if self.dir is None or not os.path.isdir(self.dir):
            raise HubError(404 if token else 401, "RepoNotFound",
                           f"Repository Not Found for url: {self.id}.")
        access_path = os.path.join(self.dir, "access.json")
        if os.path.exists(access_path):
            with open(access_path) as f:
                self.access = json.load(f)
        allowed = token is not None and token in self.access.get("tokens", [])
        if self.access.get("private") and not allowed:
            raise HubError(401, "RepoNotFound", f"Repository Not Found for url: {self.id}.")
        if self.access.get("gated") and not allowed:
            raise HubError(401 if token is None else 403, "GatedRepo",
                           f"Access to model {self.id} is restricted. You must have access "
                           "to it and be authenticated to access it. Please log in.")

    def resolve(self, revision):
        """The commit sha a branch, tag or sha names."""
        if SHA_RE.fullmatch(revision) and os.path.isdir(os.path.join(self.dir, "commits", revision)):
            return revision
        ref = safe_join(os.path.join(self.dir, "refs"), revision)
        if ref is not None and os.path.isfile(ref):
            with open(ref) as f:
                sha = f.read().strip()
            if SHA_RE.fullmatch(sha) and os.path.isdir(os.path.join(self.dir, "commits", sha)):
                return sha
        raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")

    def commit_dir(self, sha):
        return os.path.join(self.dir, "commits", sha)

    def files(self, sha):
        """Every file of the commit, as repo paths, sorted."""
        root = self.commit_dir(sha)
        out = []
        for dirpath, _, names in os.walk(root):
            for n in names:
                out.append(os.path.relpath(os.path.join(dirpath, n), root).replace(os.sep, "/"))
        return sorted(out)


def is_lfs(path, size, min_bytes):
    return size >= min_bytes or path.endswith(LFS_EXTENSIONS)


def lfs_pointer(sha256, size):
    return b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (
        sha256.encode(), size)


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubHandler(WanHandler):
    """--hub DIR, the "hub" listener (huggingface_hub's hf_api.py and file_download.py).

    Authorization: `Bearer TOKEN`; a token not in --tokens: 401 ("Invalid credentials in
    Authorization header"). Errors as the Hub gives them: JSON {"error": ...} with
    X-Error-Code and X-Error-Message: RepoNotFound (401 without a token, 404 with one; 401
    for a private repo the token may not see), GatedRepo (401 without a token, 403 with
    one not in access.json), RevisionNotFound, EntryNotFound (404).
    GET /api/models/ORG/NAME/revision/REV: {"id", "sha", "private", "gated", "siblings"}.
    GET /api/models/ORG/NAME/tree/REV[/PATH]?recursive=&cursor=: entries sorted by path,
    --page-size a page, `Link: <next>; rel="next"` while more remain.
    HEAD/GET /ORG/NAME/resolve/REV/PATH: an LFS file (--lfs-min-bytes or an LFS
    extension) is a 302 to the cdn listener's signed URL with X-Repo-Commit,
    X-Linked-Etag, X-Linked-Size and the pointer's ETag; any other file is its bytes
    (Range honoured), ETag = its git blob id."""

    LISTENER = "hub"

    def route(self, head):
        parts = self.raw_path.split("/")[1:]  # still percent-encoded
        try:
            token = self._token()
            if len(parts) >= 5 and parts[:2] == ["api", "models"] and parts[4] in ("revision", "tree"):
                repo = HubRepo(self.server.root, unq(parts[2]), unq(parts[3]), token,
                               self.server.tokens)
                if parts[4] == "revision" and len(parts) >= 6:
                    return self._revision(repo, unq("/".join(parts[5:])))
                if parts[4] == "tree" and len(parts) >= 6:
                    return self._tree(repo, unq(parts[5]), unq("/".join(parts[6:])))
            if len(parts) >= 5 and parts[2] == "resolve":
                repo = HubRepo(self.server.root, unq(parts[0]), unq(parts[1]), token,
                               self.server.tokens)
                return self._resolve(repo, unq(parts[3]), unq("/".join(parts[4:])))
            raise HubError(404, "EntryNotFound", f"Not found: {self.raw_path}")
        except HubError as e:
            self._error(e)

    def _token(self):
        auth = self.headers.get("Authorization")
        if auth is None:
            return None
        token = auth[len("Bearer "):] if auth.startswith("Bearer ") else auth
        if token not in self.server.tokens:
            raise HubError(401, None, "Invalid credentials in Authorization header")
        return token

    def _error(self, e):
        headers = [("Content-Type", "application/json"), ("X-Error-Message", e.message)]
        if e.code:
            headers.append(("X-Error-Code", e.code))
        self.reply(e.status, headers, json.dumps({"error": e.message}))

    def _json(self, value, headers=()):
        self.reply(200, [("Content-Type", "application/json")] + list(headers), json.dumps(value))

    def _revision(self, repo, revision):
        sha = repo.resolve(revision)
        self._json({"id": repo.id, "modelId": repo.id, "sha": sha,
                    "private": bool(repo.access.get("private")),
                    "gated": "auto" if repo.access.get("gated") else False,
                    "siblings": [{"rfilename": p} for p in repo.files(sha)]})

    def _tree_entry(self, root, rel):
        full = os.path.join(root, rel)
        if os.path.isdir(full):
            oid = hashlib.sha1(("tree " + rel).encode()).hexdigest()
            return {"type": "directory", "oid": oid, "size": 0, "path": rel}
        size = os.path.getsize(full)
        if is_lfs(rel, size, self.server.lfs_min_bytes):
            sha256 = DIGESTS.get(full, "sha256")
            pointer = lfs_pointer(sha256, size)
            return {"type": "file", "oid": git_blob_id(pointer), "size": size, "path": rel,
                    "lfs": {"oid": sha256, "size": size, "pointerSize": len(pointer)}}
        return {"type": "file", "oid": DIGESTS.get(full, "git"), "size": size, "path": rel}

    def _tree(self, repo, revision, path):
        sha = repo.resolve(revision)
        root = repo.commit_dir(sha)
        base = safe_join(root, path)
        if base is None or not os.path.isdir(base):
            raise HubError(404, "EntryNotFound", f"{path} does not exist on {revision}")
        prefix = path.strip("/") + "/" if path.strip("/") else ""
        if self.query.get("recursive", "false").lower() in ("true", "1"):
            rels = []
            for dirpath, dirs, names in os.walk(base):
                for n in dirs + names:
                    rels.append(os.path.relpath(os.path.join(dirpath, n), root).replace(os.sep, "/"))
        else:
            rels = [prefix + e.name for e in os.scandir(base)]
        rels.sort()
        # The cursor is the last path of the previous page.
        cursor = self.query.get("cursor")
        if cursor:
            after = base64.urlsafe_b64decode(cursor).decode()
            rels = [r for r in rels if r > after]
        page = rels[: self.server.page_size]
        headers = []
        if len(rels) > len(page):
            query = dict(self.query)
            query["cursor"] = base64.urlsafe_b64encode(page[-1].encode()).decode()
            host = self.headers.get("Host") or "127.0.0.1:%d" % self.server.server_address[1]
            url = "http://%s%s?%s" % (host, self.raw_path, urllib.parse.urlencode(query))
            headers.append(("Link", f'<{url}>; rel="next"'))
        self._json([self._tree_entry(root, r) for r in page], headers)

    def _resolve(self, repo, revision, path):
        sha = repo.resolve(revision)
        full = safe_join(repo.commit_dir(sha), path)
        if full is None or not path or not os.path.isfile(full):
            raise HubError(404, "EntryNotFound", f"{path} does not exist on {revision}")
        size = os.path.getsize(full)
        headers = [("X-Repo-Commit", sha)]
        if not is_lfs(path, size, self.server.lfs_min_bytes):
            return self.serve_file(full, '"%s"' % DIGESTS.get(full, "git"), headers)
        sha256 = DIGESTS.get(full, "sha256")
        self.server.blobs[sha256] = full
        expires = int(time.time()) + self.server.sign_ttl
        sig = sign(self.server.secret, sha256, path, expires)
        location = "http://127.0.0.1:%d/blobs/%s?%s" % (
            self.server.cdn_port, sha256,
            urllib.parse.urlencode({"path": path, "expires": expires, "sig": sig}))
        headers += [("Location", location), ("X-Linked-Etag", '"%s"' % sha256),
                    ("X-Linked-Size", str(size)),
                    ("ETag", '"%s"' % git_blob_id(lfs_pointer(sha256, size)))]
        self.reply(302, headers)


def unq(segment):
    return urllib.parse.unquote(segment)


def sign(secret, sha256, path, expires):
    return hmac.new(secret, f"{sha256}|{path}|{expires}".encode(), hashlib.sha256).hexdigest()


class CdnHandler(WanHandler):
    """The "cdn" listener the hub redirects LFS files to, checking the signed query as S3
    checks a presigned URL. HEAD/GET /blobs/SHA256?path=&expires=&sig=: an Authorization
    header: 400 ("Only one auth mechanism allowed"); a bad sig: 403; expired: 403 ("Request
    has expired"); an unknown blob: 404. Else the bytes (Range, If-Match), ETag
    "cdn-" + 32 hex of the sha256 (not the hub's X-Linked-Etag), a fixed Last-Modified."""

    LISTENER = "cdn"

    def route(self, head):
        m = re.fullmatch(r"/blobs/([0-9a-f]{64})", self.raw_path)
        if self.headers.get("Authorization"):
            return self._error(400, "InvalidArgument", "Only one auth mechanism allowed; only "
                               "the X-Amz-Algorithm query parameter, Signature query string "
                               "parameter or the Authorization header should be specified")
        if not m:
            return self._error(404, "NoSuchKey", "The specified key does not exist.")
        sha256 = m.group(1)
        path, expires = self.query.get("path", ""), self.query.get("expires", "")
        want = sign(self.server.secret, sha256, path, expires)
        if not hmac.compare_digest(want, self.query.get("sig", "")):
            return self._error(403, "SignatureDoesNotMatch", "The request signature we "
                               "calculated does not match the signature you provided.")
        if not expires.isdigit() or int(expires) < time.time():
            return self._error(403, "AccessDenied", "Request has expired")
        full = self.server.blobs.get(sha256)
        if full is None or not os.path.isfile(full):
            return self._error(404, "NoSuchKey", "The specified key does not exist.")
        self.serve_file(full, '"cdn-%s"' % sha256[:32], last_modified=CDN_LAST_MODIFIED)

    def _error(self, status, code, message):
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Error><Code>{code}</Code><Message>{message}</Message></Error>")
        self.reply(status, [("Content-Type", "application/xml")], body)


# ---------------------------------------------------------------------------
# main


class WanServer(ThreadingHTTPServer):
    daemon_threads = True  # SIGTERM ends the process at once, connections or not
    allow_reuse_address = True
    request_queue_size = 128


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--latency-ms", type=float, default=0, help="first-byte latency of every reply")
    p.add_argument("--rate", type=float, default=0, help="MB/s (1e6 B/s) per connection; 0 = unlimited")
    p.add_argument("--log", help="one JSON line per request")
    p.add_argument("--port-file", help='gets {"files": P, ...} once every listener listens')
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--files", metavar="DIR")
    p.add_argument("--s3", metavar="DIR")
    p.add_argument("--hub", metavar="DIR", help="starts the hub and cdn listeners")
    p.add_argument("--tokens", default="", help="valid hub tokens, comma-separated")
    p.add_argument("--page-size", type=int, default=1000, help="tree entries a page")
    p.add_argument("--lfs-min-bytes", type=int, default=1048576)
    p.add_argument("--sign-ttl", type=int, default=3600, help="seconds a cdn URL is valid")
    for name in ("files", "s3", "hub", "cdn"):
        p.add_argument(f"--{name}-port", type=int, default=0)
    args = p.parse_args()
    if not (args.files or args.s3 or args.hub):
        p.error("give at least one of --files, --s3, --hub")

    # Exit at once: no connection is waited for (the tests' teardown kills us).
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))

    shape = NetworkShape(args.latency_ms, args.rate, args.log)
    listeners = {}

    def listen(name, handler, root):
        server = WanServer((args.host, getattr(args, f"{name}_port")), handler)
        server.shape, server.root = shape, os.path.abspath(root) if root else None
        listeners[name] = server
        return server

    if args.files:
        listen("files", FilesHandler, args.files)
    if args.s3:
        listen("s3", S3Handler, args.s3)
    if args.hub:
        hub = listen("hub", HubHandler, args.hub)
        cdn = listen("cdn", CdnHandler, args.hub)
        secret = os.urandom(32)
        blobs = {}  # sha256 -> file, filled as the hub redirects to it
        for server in (hub, cdn):
            server.secret, server.blobs = secret, blobs
        hub.tokens = set(t for t in args.tokens.split(",") if t)
        hub.page_size = max(1, args.page_size)
        hub.lfs_min_bytes = args.lfs_min_bytes
        hub.sign_ttl = args.sign_ttl
        hub.cdn_port = cdn.server_address[1]

    for server in listeners.values():
        threading.Thread(target=server.serve_forever, daemon=True).start()
    if args.port_file:
        ports = {name: s.server_address[1] for name, s in listeners.items()}
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(ports, f)
        os.rename(tmp, args.port_file)
    while True:  # until SIGTERM or SIGINT
        signal.pause()


if __name__ == "__main__":
    main()
