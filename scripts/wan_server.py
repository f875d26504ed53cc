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
The contract (layout of DIR, headers, error codes) is the docstring of each listener's
handler class: FilesHandler and S3Handler below, HubHandler and CdnHandler in
wan_hub.py; the network (latency, token bucket, log) is wan_net.py's.
--port-file gets {"files": P, ...} once all listen;
--log gets one JSON line per request. SIGTERM or SIGINT: exits at once.
"""

import argparse
import base64
import html
import json
import os
import signal
import threading
import time
import urllib.parse
from http.server import ThreadingHTTPServer

from wan_hub import CdnHandler, HubHandler
from wan_net import DIGESTS, NetworkShape, WanHandler, http_date, safe_join

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
                prefix_xml = html.escape(enc(k))
                out.append(f"<CommonPrefixes><Prefix>{prefix_xml}</Prefix></CommonPrefixes>")
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
# main


class WanServer(ThreadingHTTPServer):
    daemon_threads = True  # SIGTERM ends the process at once, connections or not
    allow_reuse_address = True
    request_queue_size = 128


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--latency-ms", type=float, default=0, help="first-byte latency of every reply")
    p.add_argument("--rate", type=float, default=0,
                   help="MB/s (1e6 B/s) per connection; 0 = unlimited")
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
