"""A small Kubernetes API server for the clusters' sync tests: real HTTP on loopback, spoken
to by the official ``kubernetes`` client, with the parts of the API's contract the sync
relies on. Objects are kept per (collection, namespace, name); every write gives a new
``metadata.resourceVersion``; a PUT whose resourceVersion is not the stored one answers
409 Conflict, as the API server's optimistic concurrency does; POST of an existing name
409 AlreadyExists; GET of a missing one 404 NotFound, each as a ``Status`` object; a GET of
a collection lists it (all namespaces without one) by an equality ``labelSelector``. A bearer
token is required. kmock 0.8 was tried first: it keeps no resourceVersion, answers no
409 on a stale one and merges a PUT instead of replacing, so it could not test the sync's
conflict handling; its pytest plugin also needs pytest-asyncio, which this project lacks.

Pods and Events too, for the gate pass (clusters.gates): PATCH takes an RFC 6902 JSON patch
(test, remove, replace, add; a failed test of the resourceVersion is a 409), ``add`` makes a
Pod as kubectl would, ``fail_lists`` makes the next lists answer 500, and ``written`` keeps
every object written, for the schema checks.

Jobs too: ``play_job_controller`` makes a Job's Pods from its template as the Job controller
would (gates, owner reference and all), and a DELETE with ``propagationPolicy`` Background or
Foreground deletes what the object owns, as the garbage collector would.

``before_put`` lets a test play another writer: called with the stored object before a PUT
is judged, it may change it and return True (a new resourceVersion: the PUT is then stale).
"""

from __future__ import annotations

import copy
import datetime
import ipaddress
import itertools
import json
import re
import ssl
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

# The collections the sync writes: /api/v1/... for core, /apis/<group>/<version>/... else.
PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<namespace>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[^/?]+))?/?$"
)
COLLECTIONS = {"resourcequotas", "clusterqueues", "localqueues", "resourceflavors", "pods",
               "events", "jobs", "resourceclaimtemplates", "resourceclaims"}  # fmt: skip
# Cluster-scoped, read by the inventory (clusters.inventory) and the read-back
# (clusters.readback): /api/v1/nodes and /apis/resource.k8s.io/v1/resourceslices.
COLLECTIONS |= {"nodes", "resourceslices"}


class PatchFailed(Exception):
    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def json_patch(obj: dict, ops: list[dict]) -> dict:
    """RFC 6902's test, remove, replace and add, enough for the gate's patch. A failed test
    of ``/metadata/resourceVersion`` is a 409 Conflict (the API server's precondition);
    any other failed test or a missing path a 422, as the API server answers."""
    obj = copy.deepcopy(obj)
    for op in ops:
        *parents, last = _pointer(op["path"])
        node = obj
        try:
            for part in parents:
                node = node[int(part)] if isinstance(node, list) else node[part]
            key = int(last) if isinstance(node, list) else last
            if op["op"] == "test":
                if node[key] != op["value"]:
                    if op["path"] == "/metadata/resourceVersion":
                        raise PatchFailed(409, "Conflict", "the object has been modified")
                    raise PatchFailed(422, "Invalid", f"test failed at {op['path']}")
            elif op["op"] == "remove":
                del node[key]
            elif op["op"] == "replace":
                node[key]  # must exist: a KeyError is the 422
                node[key] = op["value"]
            elif op["op"] == "add":
                if isinstance(node, list):
                    node.insert(key, op["value"])
                else:
                    node[key] = op["value"]
        except (KeyError, IndexError, ValueError, TypeError):
            raise PatchFailed(422, "Invalid", f"no such path {op['path']}") from None
    return obj


def _query(path: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(path).query).items()}


def status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}  # fmt: skip


class KubeApi:
    def __init__(self, token: str):
        self.token = token
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.versions = itertools.count(1)
        self.lock = threading.Lock()
        self.before_put: Callable[[dict], None] | None = None
        # Like before_put, for a PATCH: may change the stored object (a new resourceVersion).
        self.before_patch: Callable[[dict], bool] | None = None
        self.fail_lists = 0  # the next this many lists answer 500, as an API server away
        self.forbidden: set[str] = set()  # collections the token may not touch: 403
        self.written: list[dict] = []  # every object POSTed, PUT or PATCHed, as stored
        self.deleted: list[tuple[str, str, str, str | None]] = []  # and the propagation asked
        self.url = ""

    def get(self, plural: str, name: str, namespace: str = "") -> dict | None:
        return self.objects.get((plural, namespace, name))

    def add(self, plural: str, obj: dict) -> dict:
        """An object made in the cluster by someone else (kubectl apply), with its uid."""
        with self.lock:
            obj = copy.deepcopy(obj)
            obj["metadata"].update(resourceVersion=str(next(self.versions)),
                                   uid=obj["metadata"].get("uid") or str(uuid.uuid4()))  # fmt: skip
            key = (plural, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
            self.objects[key] = obj
            return copy.deepcopy(obj)

    def edit(self, plural: str, name: str, change: Callable[[dict], None], namespace: str = ""):
        """Someone else's write in the cluster (kubectl edit): a new resourceVersion."""
        with self.lock:
            obj = self.objects[(plural, namespace, name)]
            change(obj)
            obj["metadata"]["resourceVersion"] = str(next(self.versions))

    def pods_of(self, job: dict) -> list[dict]:
        uid = job["metadata"]["uid"]
        pods = [o for (p, _ns, _n), o in sorted(self.objects.items()) if p == "pods"]
        owners = [{r.get("uid") for r in o["metadata"].get("ownerReferences", [])} for o in pods]
        return copy.deepcopy([o for o, uids in zip(pods, owners, strict=True) if uid in uids])

    def play_job_controller(self) -> list[dict]:
        """What the Job controller does in a pass: for each Job not finished, make Pods from
        its template until ``parallelism`` run (no more than the completions left), each
        with the template's gates and labels and the Job as its controlling owner."""
        made = []
        for job in [o for (p, _ns, _n), o in sorted(self.objects.items()) if p == "jobs"]:
            spec = job["spec"]
            pods = self.pods_of(job)
            done = sum(1 for p in pods if p.get("status", {}).get("phase") == "Succeeded")
            running = [p for p in pods if p.get("status", {}).get("phase") not in
                       ("Succeeded", "Failed")]  # fmt: skip
            # Without completions, a work queue: parallelism Pods until one succeeds.
            left = spec["completions"] - done if "completions" in spec else (not done) * 10**6
            for _i in range(min(spec.get("parallelism", 1), left) - len(running)):
                template = copy.deepcopy(spec["template"])
                meta = template.get("metadata", {})
                meta.update(name=f"{job['metadata']['name']}-{uuid.uuid4().hex[:5]}",
                            namespace=job["metadata"]["namespace"],
                            ownerReferences=[{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": job["metadata"]["name"],
                                              "uid": job["metadata"]["uid"],
                                              "controller": True,
                                              "blockOwnerDeletion": True}])  # fmt: skip
                made.append(self.add("pods", {"apiVersion": "v1", "kind": "Pod",
                                              "metadata": meta, "spec": template["spec"],
                                              "status": {"phase": "Pending"}}))  # fmt: skip
        return made

    def handle(self, method: str, path: str, auth: str, body: dict | None) -> tuple[int, dict]:
        self.requests.append((method, path))
        if auth != f"Bearer {self.token}":
            return 401, status(401, "Unauthorized", "Unauthorized")
        match = PATH.match(path.split("?")[0])
        if not match or match["plural"] not in COLLECTIONS:
            return 404, status(404, "NotFound", f"the server could not find {path}")
        plural, namespace, name = match["plural"], match["namespace"] or "", match["name"]
        if plural in self.forbidden:
            return 403, status(403, "Forbidden", f'{plural} is forbidden: User "sa" cannot '
                               f"{method.lower()} resource {plural!r}")  # fmt: skip
        with self.lock:
            if method == "GET" and name:
                obj = self.objects.get((plural, namespace, name))
                if obj is None:
                    return 404, status(404, "NotFound", f'{plural} "{name}" not found')
                return 200, copy.deepcopy(obj)
            if method == "GET" and not name:  # a list, in one namespace or all of them
                if self.fail_lists:
                    self.fail_lists -= 1
                    return 500, status(500, "InternalError", "etcdserver: request timed out")
                wanted = dict(
                    pair.split("=", 1)
                    for pair in _query(path).get("labelSelector", "").split(",")
                    if pair
                )
                items = [
                    copy.deepcopy(o)
                    for (p, ns, _n), o in sorted(self.objects.items())
                    if p == plural
                    and (not namespace or ns == namespace)
                    and wanted.items() <= (o["metadata"].get("labels") or {}).items()
                ]
                return 200, {
                    "kind": "List",
                    "apiVersion": "v1",
                    "items": items,
                    "metadata": {"resourceVersion": str(next(self.versions))},
                }
            if method == "DELETE" and name:
                gone = self.objects.pop((plural, namespace, name), None)
                if gone is None:
                    return 404, status(404, "NotFound", f'{plural} "{name}" not found')
                self.deleted.append(
                    (plural, namespace, name, (body or {}).get("propagationPolicy"))
                )
                if (body or {}).get("propagationPolicy") in ("Background", "Foreground"):
                    for key in [
                        k
                        for k, o in self.objects.items()
                        if gone["metadata"]["uid"]
                        in {r.get("uid") for r in o["metadata"].get("ownerReferences", [])}
                    ]:
                        del self.objects[key]  # fmt: skip
                return 200, status(200, "", "deleted") | {"status": "Success"}
            if method == "POST" and not name:
                name = body["metadata"]["name"]
                if (plural, namespace, name) in self.objects:
                    return 409, status(409, "AlreadyExists", f'{plural} "{name}" already exists')
                obj = copy.deepcopy(body)
                obj["metadata"].update(
                    resourceVersion=str(next(self.versions)), uid=str(uuid.uuid4()),
                    creationTimestamp="2026-12-04T00:00:00Z",
                )  # fmt: skip
                if namespace:
                    obj["metadata"]["namespace"] = namespace
                self.objects[(plural, namespace, name)] = obj
                self.written.append(copy.deepcopy(obj))
                return 201, copy.deepcopy(obj)
            if method == "PUT" and name:
                stored = self.objects.get((plural, namespace, name))
                if stored is None:
                    return 404, status(404, "NotFound", f'{plural} "{name}" not found')
                if self.before_put is not None and self.before_put(stored):
                    stored["metadata"]["resourceVersion"] = str(next(self.versions))
                sent = body["metadata"].get("resourceVersion")
                if sent != stored["metadata"]["resourceVersion"]:
                    return 409, status(409, "Conflict", (
                        f'Operation cannot be fulfilled on {plural} "{name}": the object has '
                        "been modified; please apply your changes to the latest version and "
                        "try again"))  # fmt: skip
                obj = copy.deepcopy(body)
                obj["metadata"]["resourceVersion"] = str(next(self.versions))
                obj["metadata"]["uid"] = stored["metadata"]["uid"]
                self.objects[(plural, namespace, name)] = obj
                self.written.append(copy.deepcopy(obj))
                return 200, copy.deepcopy(obj)
            if method == "PATCH" and name:
                stored = self.objects.get((plural, namespace, name))
                if stored is None:
                    return 404, status(404, "NotFound", f'{plural} "{name}" not found')
                if self.before_patch is not None and self.before_patch(stored):
                    stored["metadata"]["resourceVersion"] = str(next(self.versions))
                try:
                    obj = json_patch(stored, body)
                except PatchFailed as exc:
                    return exc.code, status(exc.code, exc.reason, exc.message)
                obj["metadata"]["resourceVersion"] = str(next(self.versions))
                self.objects[(plural, namespace, name)] = obj
                self.written.append(copy.deepcopy(obj))
                return 200, copy.deepcopy(obj)
        return 405, status(405, "MethodNotAllowed", f"{method} {path}")


def _handler(api: KubeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            code, answer = api.handle(self.command, self.path,
                                      self.headers.get("Authorization", ""), body)  # fmt: skip
            data = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        def log_message(self, *args) -> None:
            pass

    return Handler


def self_signed(directory) -> tuple[str, str, str]:
    """A certificate for 127.0.0.1 signed by itself: (its PEM, the cert file, the key file)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-api-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    cert_file, key_file = directory / "api.crt", directory / "api.key"
    cert_file.write_text(pem)
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))  # fmt: skip
    return pem, str(cert_file), str(key_file)


@contextmanager
def serving(token: str, tls: tuple[str, str] | None = None) -> Iterator[KubeApi]:
    """The server on a free port; with ``tls`` (cert file, key file) it speaks HTTPS."""
    api = KubeApi(token)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    scheme = "http"
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    api.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
