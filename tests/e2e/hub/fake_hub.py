"""A Hugging Face-style model hub on loopback, for the tests of `kvstash pull` and of huggingface_hub against it.

It answers in the hub's URL and header layout (as huggingface_hub 2.x reads it):
  GET  /api/models/{repo}/revision/{rev}[?blobs=true]  {"id", "sha", "siblings": [{"rfilename", "size", "blobId",
                                                        "lfs": {"sha256", "size", "pointerSize"}}]}
  GET  /api/models/{repo}/tree/{rev}[/{path}]           [{"type": "file", "path", "size", "oid", "lfs"}] (snapshot_download)
  HEAD|GET /{repo}/resolve/{rev}/{path}                 a Git file: 200, ETag = its Git blob sha1, X-Repo-Commit;
                                                        an LFS file (.gguf, .safetensors): 302 to the storage server
                                                        (another origin, like a CDN) with X-Linked-Etag = its sha256,
                                                        X-Linked-Size, X-Repo-Commit
  HEAD|GET /blobs/{sha256}   (storage server)           the bytes, with Range (206 + Content-Range) and ETag
A repository in `renamed` answers with a relative 307 to its new name. Errors as the hub sends them: 404 with X-Error-Code RepoNotFound / EntryNotFound / RevisionNotFound, 401 for a
private repository without the right "Authorization: Bearer" token. Faults for the tests: `cut` (blob sha256s
whose next GET stops halfway and closes the connection) and `corrupt` (blobs served with one byte changed).
Every request is logged in `requests` (method, path, Range and Authorization headers).
"""

import hashlib
import http.server
import json
import threading
import urllib.parse

LFS_SUFFIXES = (".gguf", ".safetensors")


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, name, files, private_token=None):
        self.name = name
        self.files = dict(files)  # path -> bytes
        self.private_token = private_token
        self.commit = hashlib.sha1(("commit of " + name).encode() +
                                   b"".join(hashlib.sha256(d).digest() for d in self.files.values())).hexdigest()

    def entry(self, path):
        data = self.files[path]
        lfs = path.endswith(LFS_SUFFIXES)
        return {
            "path": path,
            "size": len(data),
            "blob_id": git_blob_sha1(data) if not lfs else hashlib.sha1(b"pointer " + data[:64]).hexdigest(),
            "sha256": hashlib.sha256(data).hexdigest() if lfs else None,
        }


class FakeHub:
    def __init__(self):
        self.repos = {}
        self.renamed = {}  # old name -> new name: answered with a relative 307, as the hub does for a moved repo
        self.blobs = {}  # sha256 -> bytes
        self.cut = set()
        self.corrupt = set()
        self.requests = []
        self.lock = threading.Lock()
        self.hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler(storage=False))
        self.storage = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler(storage=True))
        self.threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (self.hub, self.storage)]
        for t in self.threads:
            t.start()

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.hub.server_address[1]

    @property
    def storage_origin(self):
        return "http://127.0.0.1:%d" % self.storage.server_address[1]

    def add_repo(self, name, files, private_token=None):
        repo = Repo(name, files, private_token)
        self.repos[name] = repo
        for path, data in repo.files.items():
            if path.endswith(LFS_SUFFIXES):
                self.blobs[hashlib.sha256(data).hexdigest()] = data
        return repo

    def close(self):
        for s in (self.hub, self.storage):
            s.shutdown()
            s.server_close()

    def _handler(self, storage):
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self._serve(head=True)

            def do_GET(self):
                self._serve(head=False)

            def _send(self, status, body=b"", headers=None, head=False):
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _error(self, status, code, message, head, extra=None):
                headers = {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"}
                headers.update(extra or {})
                self._send(status, json.dumps({"error": message}).encode(), headers, head)

            def _serve(self, head):
                url = urllib.parse.urlsplit(self.path)
                path = urllib.parse.unquote(url.path)
                with hub.lock:
                    hub.requests.append((self.command, path, self.headers.get("Range"), self.headers.get("Authorization")))
                if storage:
                    return self._blob(path, head)
                parts = path.strip("/").split("/")
                for at in (0, 2):
                    old = "/".join(parts[at:at + 2])
                    if len(parts) >= at + 2 and old in hub.renamed and (at == 2) == (parts[:2] == ["api", "models"]):
                        moved = "/" + "/".join(parts[:at] + hub.renamed[old].split("/") + parts[at + 2:])
                        return self._send(307, b"", {"Location": moved + ("?" + url.query if url.query else "")},
                                          head)
                if parts[:2] == ["api", "models"] and len(parts) >= 6:
                    return self._api(parts[2] + "/" + parts[3], parts[4], parts[5], "/".join(parts[6:]), head)
                if len(parts) >= 5 and parts[2] == "resolve":
                    return self._resolve(parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]), head)
                self._error(404, "EntryNotFound", "no route " + path, head)

            def _repo(self, name, head):
                repo = hub.repos.get(name)
                if repo is None:
                    self._error(404, "RepoNotFound", "Repository not found", head)
                    return None
                if repo.private_token and self.headers.get("Authorization") != "Bearer " + repo.private_token:
                    self._error(401, "RepoNotFound", "Invalid credentials in Authorization header", head)
                    return None
                return repo

            def _api(self, name, kind, rev, sub, head):
                repo = self._repo(name, head)
                if repo is None:
                    return
                if rev not in ("main", repo.commit):
                    return self._error(404, "RevisionNotFound", "Invalid rev id: " + rev, head)
                entries = [repo.entry(p) for p in sorted(repo.files)]
                if kind == "revision":
                    siblings = []
                    for e in entries:
                        s = {"rfilename": e["path"], "size": e["size"], "blobId": e["blob_id"]}
                        if e["sha256"]:
                            s["lfs"] = {"sha256": e["sha256"], "size": e["size"], "pointerSize": 134}
                        siblings.append(s)
                    body = {"id": name, "modelId": name, "sha": repo.commit, "private": bool(repo.private_token),
                            "siblings": siblings}
                elif kind == "tree":
                    body = []
                    for e in entries:
                        if sub and not e["path"].startswith(sub.rstrip("/") + "/"):
                            continue
                        item = {"type": "file", "path": e["path"], "size": e["size"],
                                "oid": e["blob_id"]}
                        if e["sha256"]:
                            item["lfs"] = {"oid": e["sha256"], "size": e["size"], "pointerSize": 134}
                        body.append(item)
                else:
                    return self._error(404, "EntryNotFound", "no route", head)
                self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"}, head)

            def _resolve(self, name, rev, file, head):
                repo = self._repo(name, head)
                if repo is None:
                    return
                if rev not in ("main", repo.commit):
                    return self._error(404, "RevisionNotFound", "Invalid rev id: " + rev, head)
                if file not in repo.files:
                    return self._error(404, "EntryNotFound", "Entry not found", head, {"X-Repo-Commit": repo.commit})
                e = repo.entry(file)
                if e["sha256"]:
                    location = "%s/blobs/%s?file=%s" % (hub.storage_origin, e["sha256"], urllib.parse.quote(file))
                    return self._send(302, b"", {"Location": location, "X-Repo-Commit": repo.commit,
                                                 "X-Linked-Etag": '"%s"' % e["sha256"],
                                                 "X-Linked-Size": str(e["size"]), "ETag": '"%s"' % e["blob_id"]},
                                      head)
                self._ranged(repo.files[file], '"%s"' % e["blob_id"], {"X-Repo-Commit": repo.commit}, head)

            def _blob(self, path, head):
                sha = path.rsplit("/", 1)[-1]
                data = hub.blobs.get(sha)
                if data is None:
                    return self._error(404, "EntryNotFound", "no blob", head)
                if sha in hub.corrupt:
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                cut = False
                with hub.lock:
                    if not head and sha in hub.cut:
                        hub.cut.discard(sha)
                        cut = True
                self._ranged(data, '"%s"' % sha, {}, head, cut)

            def _ranged(self, data, etag, headers, head, cut=False):
                headers = dict(headers, **{"ETag": etag, "Accept-Ranges": "bytes",
                                           "Content-Type": "application/octet-stream"})
                status, start = 200, 0
                spec = self.headers.get("Range")
                if spec and spec.startswith("bytes=") and spec[6:].endswith("-"):
                    start = int(spec[6:-1])
                    if start >= len(data):
                        return self._send(416, b"", {"Content-Range": "bytes */%d" % len(data)}, head)
                    status = 206
                    headers["Content-Range"] = "bytes %d-%d/%d" % (start, len(data) - 1, len(data))
                body = data[start:]
                if not cut:
                    return self._send(status, body, headers, head)
                # Announce the whole body, send half of it, drop the connection.
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)

        return Handler
