#!/usr/bin/python3
"""A reverse proxy in front of s3rver that checks AWS Signature Version 4 the way S3 does.

s3rver 3.x accepts any well-formed SigV4 request whose access key id it knows, whatever
the signature (its authentication.js: "Signature version 4 calculation is
unimplemented"). The S3 mount tests put this proxy between ckptfs and s3rver so that
every request ckptfs signs (HEAD, range GET, ListObjectsV2 with its query) is checked
against the signature S3 itself would compute, and a wrong secret is refused with 403
SignatureDoesNotMatch, as S3 refuses it.

What it checks on a request with an Authorization header: the scope's access key,
region and service, the x-amz-date is within 15 minutes and matches the scope's date,
host, x-amz-date and x-amz-content-sha256 are signed (and x-amz-security-token, when
--token is given, is present, signed and equal), and the signature over the canonical
request built from the request as received (path and query decoded and re-encoded the
RFC 3986 way, sorted query, trimmed header values). A request without one is forwarded
unless --require-auth. Anything else (a 403, a 400) is answered here with S3's XML
error, and the request never reaches s3rver. Requests that pass go on without their
Authorization header (s3rver knows only its own key, and serves unsigned requests).

--max-keys N forces ListObjectsV2 pages of at most N keys (after the signature is
checked), so the client's continuation-token loop is exercised.

The signing code is checked at start against the two worked examples of the S3 SigV4
documentation (GET Object with Range, and ListObjects); the proxy refuses to start if
either differs.

usage: s3_sigv4_proxy.py --listen PORT --backend PORT [--key K] [--secret S]
                         [--region R] [--token T] [--require-auth] [--max-keys N]
"""

import argparse
import datetime
import hashlib
import hmac
import http.client
import http.server
import socketserver
import sys
import urllib.parse

UNRESERVED = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~"


def UriEncode(data: bytes, keep_slash: bool) -> str:
    out = []
    for b in data:
        c = chr(b)
        if c in UNRESERVED or (keep_slash and c == "/"):
            out.append(c)
        else:
            out.append("%%%02X" % b)
    return "".join(out)


def CanonicalUri(raw_path: str) -> str:
    return UriEncode(urllib.parse.unquote_to_bytes(raw_path), keep_slash=True) or "/"


def CanonicalQuery(raw_query: str) -> str:
    pairs = []
    for part in raw_query.split("&") if raw_query else []:
        name, _, value = part.partition("=")
        # '+' in a query is a literal plus to S3 (signers encode spaces as %20).
        pairs.append((UriEncode(urllib.parse.unquote_to_bytes(name), False),
                      UriEncode(urllib.parse.unquote_to_bytes(value), False)))
    pairs.sort()
    return "&".join(f"{n}={v}" for n, v in pairs)


def CanonicalRequest(method, raw_path, raw_query, headers, signed, payload_hash) -> str:
    lines = [method, CanonicalUri(raw_path), CanonicalQuery(raw_query)]
    for name in signed:
        value = " ".join(headers.get(name, "").split())
        lines.append(f"{name}:{value}")
    lines.append("")
    lines.append(";".join(signed))
    lines.append(payload_hash)
    return "\n".join(lines)


def Signature(secret, amz_date, scope, canonical_request) -> str:
    string_to_sign = "\n".join([
        "AWS4-HMAC-SHA256", amz_date, scope,
        hashlib.sha256(canonical_request.encode()).hexdigest()])
    key = ("AWS4" + secret).encode()
    for part in scope.split("/")[:4]:
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()


def SelfTest() -> None:
    """The worked examples of AWS's "Signature Calculations for the Authorization Header"
    page for S3 (bucket examplebucket, 24 May 2013)."""
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    scope = "20130524/us-east-1/s3/aws4_request"
    empty = hashlib.sha256(b"").hexdigest()
    headers = {"host": "examplebucket.s3.amazonaws.com", "range": "bytes=0-9",
               "x-amz-content-sha256": empty, "x-amz-date": "20130524T000000Z"}
    got = Signature(secret, "20130524T000000Z", scope, CanonicalRequest(
        "GET", "/test.txt", "", headers, sorted(headers), empty))
    assert got == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41", got
    del headers["range"]
    got = Signature(secret, "20130524T000000Z", scope, CanonicalRequest(
        "GET", "/", "max-keys=2&prefix=J", headers, sorted(headers), empty))
    assert got == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7", got


def ErrorXml(code: str, message: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{message}</Message></Error>").encode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: with Nagle's algorithm the body would wait
    # for the client's delayed ACK of the headers, ~40 ms per request.
    disable_nagle_algorithm = True
    opts = None

    def log_message(self, fmt, *args):  # quiet: the tests read stderr of ckptfs only
        pass

    def Check(self, raw_path, raw_query):
        """None if the request may pass, else (status, code, message)."""
        o = self.opts
        auth = self.headers.get("Authorization")
        if auth is None:
            return (403, "AccessDenied", "Anonymous access denied") if o.require_auth else None
        algorithm, _, rest = auth.partition(" ")
        if algorithm != "AWS4-HMAC-SHA256":
            return 400, "InvalidArgument", "Unsupported Authorization Type"
        parts = {}
        for item in rest.split(","):
            name, _, value = item.strip().partition("=")
            parts[name] = value
        if set(parts) != {"Credential", "SignedHeaders", "Signature"}:
            return 400, "AuthorizationHeaderMalformed", "need Credential, SignedHeaders, Signature"
        credential = parts["Credential"].split("/")
        if len(credential) != 5 or credential[3:] != ["s3", "aws4_request"]:
            return 400, "AuthorizationHeaderMalformed", "bad credential scope"
        key, date, region = credential[:3]
        if key != o.key:
            return 403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist"
        if region != o.region:
            return 400, "AuthorizationHeaderMalformed", f"region {region} is wrong; expecting {o.region}"
        headers = {k.lower(): v for k, v in self.headers.items()}
        amz_date = headers.get("x-amz-date", "")
        try:
            when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(
                tzinfo=datetime.timezone.utc)
        except ValueError:
            return 403, "AccessDenied", "AWS authentication requires a valid x-amz-date"
        if amz_date[:8] != date or abs(
                (datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) > 900:
            return 403, "RequestTimeTooSkewed", "request time too far from server time"
        signed = parts["SignedHeaders"].split(";")
        if signed != sorted(signed) or any(h not in headers for h in signed):
            return 400, "AuthorizationHeaderMalformed", "SignedHeaders unsorted or absent"
        required = ["host", "x-amz-date", "x-amz-content-sha256"]
        if o.token is not None:
            if headers.get("x-amz-security-token") != o.token:
                return 403, "InvalidToken", "The provided token is malformed or otherwise invalid"
            required.append("x-amz-security-token")
        if any(h not in signed for h in required):
            return 403, "AccessDenied", "host, x-amz-date, x-amz-content-sha256 must be signed"
        payload = headers["x-amz-content-sha256"]
        canonical = CanonicalRequest(self.command, raw_path, raw_query, headers, signed, payload)
        want = Signature(o.secret, amz_date, "/".join(credential[1:]), canonical)
        if not hmac.compare_digest(want, parts["Signature"]):
            return 403, "SignatureDoesNotMatch", "The request signature we calculated does not match"
        return None

    def Reply(self, status, headers, body, send_body=True):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if send_body and body:
            self.wfile.write(body)

    def Handle(self):
        raw_path, _, raw_query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        refusal = self.Check(raw_path, raw_query)
        if refusal is not None:
            status, code, message = refusal
            xml = ErrorXml(code, message)
            self.Reply(status, [("Content-Type", "application/xml"),
                                ("Content-Length", str(len(xml)))], xml, self.command != "HEAD")
            return
        query = raw_query
        if self.opts.max_keys and "list-type=2" in raw_query.split("&"):
            query += f"&max-keys={self.opts.max_keys}"
        backend = http.client.HTTPConnection("127.0.0.1", self.opts.backend, timeout=30)
        try:
            # s3rver knows only its own key: what passed here goes on unsigned, which it
            # serves as it serves any anonymous request.
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("connection", "authorization", "x-amz-security-token")}
            backend.request(self.command, raw_path + ("?" + query if query else ""), body, headers)
            response = backend.getresponse()
            data = response.read()
        except OSError:
            xml = ErrorXml("ServiceUnavailable", "backend unreachable")
            self.Reply(503, [("Content-Length", str(len(xml)))], xml, self.command != "HEAD")
            return
        finally:
            backend.close()
        out = [(k, v) for k, v in response.getheaders()
               if k.lower() not in ("connection", "keep-alive", "transfer-encoding",
                                    "content-length")]
        if self.command == "HEAD":
            out.append(("Content-Length", response.getheader("Content-Length", "0")))
        else:
            out.append(("Content-Length", str(len(data))))
        self.Reply(response.status, out, data, self.command != "HEAD")

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = Handle


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--listen", type=int, required=True)
    p.add_argument("--backend", type=int, required=True)
    p.add_argument("--key", default="S3RVER")
    p.add_argument("--secret", default="S3RVER")
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--token")
    p.add_argument("--require-auth", action="store_true")
    p.add_argument("--max-keys", type=int, default=0)
    Handler.opts = p.parse_args()
    SelfTest()
    server = Server(("127.0.0.1", Handler.opts.listen), Handler)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
