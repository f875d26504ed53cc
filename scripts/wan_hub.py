"""The "hub" and "cdn" listeners of scripts/wan_server.py: the Hugging Face Hub as
huggingface_hub's hf_api.py and file_download.py expect it, and the CDN its LFS files
redirect to, which checks a signed, expiring URL. Python stdlib.
"""

import base64
import hashlib
import hmac
import json
import os
import re
import time
import urllib.parse

from wan_net import DIGESTS, WanHandler, safe_join

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
        commits = os.path.join(self.dir, "commits")
        if SHA_RE.fullmatch(revision) and os.path.isdir(os.path.join(commits, revision)):
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
            api = len(parts) >= 5 and parts[:2] == ["api", "models"]
            if api and parts[4] in ("revision", "tree"):
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
                    rel = os.path.relpath(os.path.join(dirpath, n), root)
                    rels.append(rel.replace(os.sep, "/"))
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
