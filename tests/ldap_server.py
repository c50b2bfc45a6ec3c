"""A real OpenLDAP server for the directory tests: Debian's ``slapd`` on a free loopback
port, its own slapd.conf and mdb database in a temporary folder, seeded with people and
groups (``SEED``); ``reset()`` puts the seed back between tests.

Without slapd or python-ldap (the ``ldap`` extra) the tests are skipped with the reason on
a developer's machine; with ``CI`` set that is a failure (.ci/run installs both).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests import procs

SLAPD = os.environ.get("SLAPD_PATH", "/usr/sbin/slapd")
SCHEMA = Path("/etc/ldap/schema")
SUFFIX = "dc=corp,dc=example"
ADMIN_DN = f"cn=admin,{SUFFIX}"
ADMIN_PW = "directory-admin-pw"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"


def person(uid: str) -> str:
    return f"uid={uid},{PEOPLE}"


def group(cn: str) -> str:
    return f"cn={cn},{GROUPS}"


# uid: (given name, surname, department, password, extra attributes)
PEOPLE_SEED = {
    "dana": ("Dana", "Li", "Risk", "dana-secret", {}),
    "erik": ("Erik", "Wang", "Quant Research", "erik-secret", {}),
    "gus": ("Gus", "Chen", "Trading", "gus-secret", {"employeeType": ["disabled"]}),
    # The same name as the suite's local superuser (tests/cast.py): never taken over.
    "alice": ("Alice", "Intruder", "Nowhere", "alice-ldap-pw", {}),
}
GROUPS_SEED = {
    "gpu-quant-users": ["dana", "erik", "gus"],
    "gpu-quant-admins": ["erik"],
    "gpu-quant-approvers": ["erik"],
    "portal-admins": ["erik"],
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Slapd:
    uri: str
    process: subprocess.Popen
    ca_file: Path  # the CA slapd's certificate (for 127.0.0.1, StartTLS) is signed by

    def connect(self) -> Any:
        import ldap

        conn = ldap.initialize(self.uri)
        conn.simple_bind_s(ADMIN_DN, ADMIN_PW)
        return conn

    def reset(self) -> None:
        """The seed again: both subtrees emptied and refilled."""
        import ldap

        conn = self.connect()
        try:
            for base in (GROUPS, PEOPLE):
                try:
                    found = conn.search_s(base, ldap.SCOPE_ONELEVEL, "(objectClass=*)", ["1.1"])
                except ldap.NO_SUCH_OBJECT:
                    found = []
                for dn, _attrs in found:
                    conn.delete_s(dn)
            for uid, (given, sn, department, password, extra) in PEOPLE_SEED.items():
                attrs = {
                    "objectClass": [b"inetOrgPerson"], "uid": [uid.encode()],
                    "cn": [f"{given} {sn}".encode()], "givenName": [given.encode()],
                    "sn": [sn.encode()], "mail": [f"{uid}@corp.example".encode()],
                    "departmentNumber": [department.encode()],
                    "userPassword": [password.encode()],
                    **{k: [v.encode() for v in vs] for k, vs in extra.items()},
                }  # fmt: skip
                conn.add_s(person(uid), list(attrs.items()))
            for cn, members in GROUPS_SEED.items():
                self.set_members(cn, members, conn=conn, add=True)
        finally:
            conn.unbind_s()

    def set_members(self, cn: str, members: list[str], *, conn: Any = None, add: bool = False):
        """Group ``cn`` holds exactly ``members`` (groupOfNames needs one: the admin stands
        in for an empty group)."""
        import ldap

        own = conn is None
        conn = conn or self.connect()
        values = [person(uid).encode() for uid in members] or [ADMIN_DN.encode()]
        try:
            if add:
                attrs = [("objectClass", [b"groupOfNames"]), ("cn", [cn.encode()]),
                         ("member", values)]  # fmt: skip
                conn.add_s(group(cn), attrs)
            else:
                conn.modify_s(group(cn), [(ldap.MOD_REPLACE, "member", values)])
        finally:
            if own:
                conn.unbind_s()

    def set_attribute(self, uid: str, name: str, values: list[str]) -> None:
        import ldap

        conn = self.connect()
        try:
            conn.modify_s(person(uid), [(ldap.MOD_REPLACE, name, [v.encode() for v in values])])
        finally:
            conn.unbind_s()

    def delete_person(self, uid: str) -> None:
        conn = self.connect()
        try:
            conn.delete_s(person(uid))
        finally:
            conn.unbind_s()


def make_ca(folder: Path, name: str) -> tuple[Path, Any, Any]:
    """A certificate authority of the tests' own: its certificate's file, key and cert."""
    from datetime import UTC, datetime, timedelta

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    path = folder / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, key, cert


def _server_certificate(folder: Path) -> tuple[Path, Path, Path]:
    """The CA file clients trust, and slapd's certificate for 127.0.0.1 and its key."""
    import ipaddress
    from datetime import UTC, datetime, timedelta

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    ca_file, ca_key, ca_cert = make_ca(folder, "directory-ca")
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    cert_file, key_file = folder / "slapd-cert.pem", folder / "slapd-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ))  # fmt: skip
    key_file.chmod(0o600)
    return ca_file, cert_file, key_file


def start(folder: Path) -> Slapd:
    if not Path(SLAPD).is_file():
        procs.unavailable(
            f"slapd not found at {SLAPD}: apt-get install slapd ldap-utils (or set SLAPD_PATH)"
        )
    try:
        import django_auth_ldap  # noqa: F401
        import ldap
    except ImportError:
        procs.unavailable("python-ldap / django-auth-ldap not installed: pip install -e '.[ldap]'")
    data = folder / "data"
    data.mkdir(parents=True)
    ca_file, cert_file, key_file = _server_certificate(folder)
    schemas = "\n".join(
        f"include {SCHEMA / name}.schema" for name in ("core", "cosine", "inetorgperson")
    )
    (folder / "slapd.conf").write_text(f"""{schemas}
TLSCACertificateFile {ca_file}
TLSCertificateFile {cert_file}
TLSCertificateKeyFile {key_file}
modulepath /usr/lib/ldap
moduleload back_mdb
pidfile {folder / "slapd.pid"}
database mdb
maxsize 67108864
suffix "{SUFFIX}"
rootdn "{ADMIN_DN}"
rootpw {ADMIN_PW}
directory {data}
""")
    port = _free_port()
    uri = f"ldap://127.0.0.1:{port}"
    # -d 0: in the foreground, so that the fixture owns the process and its end.
    log = folder / "slapd.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [SLAPD, "-f", str(folder / "slapd.conf"), "-h", f"{uri}/", "-d", "0"],
            stdout=subprocess.DEVNULL, stderr=out,
        )  # fmt: skip
    server = Slapd(uri, process, ca_file)
    deadline = time.monotonic() + 20
    while True:
        try:
            conn = server.connect()
            break
        except ldap.SERVER_DOWN:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                err = log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"slapd did not start: {err}") from None
            time.sleep(0.1)
    try:
        conn.add_s(SUFFIX, [("objectClass", [b"dcObject", b"organization"]),
                            ("dc", [b"corp"]), ("o", [b"Corp"])])  # fmt: skip
        for ou in ("people", "groups"):
            conn.add_s(f"ou={ou},{SUFFIX}", [("objectClass", [b"organizationalUnit"]),
                                             ("ou", [ou.encode()])])  # fmt: skip
    finally:
        conn.unbind_s()
    server.reset()
    return server


def stop(server: Slapd, folder: Path) -> None:
    server.process.terminate()
    try:
        server.process.wait(10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
    shutil.rmtree(folder, ignore_errors=True)
