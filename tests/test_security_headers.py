"""Headers and settings: the content security policy, HTTPS behind a TLS proxy, and
``check --deploy`` clean with the production settings docs/security.md documents."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from cryptography.fernet import Fernet
from django.test import Client

from agents.models import GPU
from tests import clients, procs
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db


def _policy(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {
        name: values
        for name, *values in (part.split() for part in header.split(";") if part.strip())
    }


@pytest.fixture
def pages(alice) -> tuple[Client, list[str]]:
    node = NodeFactory(name="csp-01")
    gpu = GPU.objects.create(node=node, index=0, uuid="GPU-csp-0", model="NVIDIA A100")
    client = clients.page(alice)
    urls = ["/", f"/nodes/{node.pk}/", f"/gpus/{gpu.pk}/", "/nodes/", "/nodes/add/",
            f"/nodes/{node.pk}/edit/", "/nodes/import/", "/account/", "/api/docs/"]  # fmt: skip
    return client, urls


def test_every_page_carries_the_strict_policy(pages):
    client, urls = pages
    for url in [*urls, "/accounts/login/"]:
        response = client.get(url)
        assert response.status_code == 200, url
        policy = _policy(response)
        assert policy["default-src"] == ["'self'"], url
        assert policy["script-src"] == ["'self'"], url
        assert policy["style-src"] == ["'self'"], url
        assert policy["object-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
        assert policy["base-uri"] == ["'self'"] and policy["form-action"] == ["'self'"]


# What the strict policy would block: inline scripts (JSON data blocks are not run), event
# handler attributes, javascript: URLs, inline styles.
INLINE_SCRIPT = re.compile(
    r"<script(?![^>]*\bsrc=)(?![^>]*type=\"(?:application/json|text/plain)\")"
)
HANDLER = re.compile(r"<[^>]+\son[a-z]+\s*=", re.IGNORECASE)
INLINE_STYLE = re.compile(r"<style|<[^>]+\sstyle\s*=|javascript:", re.IGNORECASE)


def test_no_page_needs_an_inline_script_or_style(pages):
    client, urls = pages
    anonymous = clients.page()
    bodies = [(url, client.get(url).content.decode()) for url in urls]
    bodies.append(("/accounts/login/", anonymous.get("/accounts/login/").content.decode()))
    for url, body in bodies:
        assert not INLINE_SCRIPT.search(body), (url, INLINE_SCRIPT.search(body))
        assert not HANDLER.search(body), (url, HANDLER.search(body))
        assert not INLINE_STYLE.search(body), (url, INLINE_STYLE.search(body))


def test_redoc_alone_may_write_styles_and_start_a_worker(client):
    redoc = _policy(client.get("/api/redoc/"))
    assert "'unsafe-inline'" in redoc["style-src"] and "blob:" in redoc["worker-src"]
    assert redoc["script-src"] == ["'self'"]
    swagger = _policy(client.get("/api/docs/"))
    assert swagger["style-src"] == ["'self'"] and "worker-src" not in swagger


def test_swagger_ui_starts_from_a_script_of_its_own(client):
    body = client.get("/api/docs/").content.decode()
    [script] = re.findall(r'<script src="([^"]*script=[^"]*)"', body)
    response = client.get(script.replace("&amp;", "&"))
    assert response.status_code == 200
    assert "SwaggerUIBundle" in response.content.decode()


# --- HTTPS behind a TLS proxy ----------------------------------------------------------------


def test_behind_a_tls_proxy_plain_http_is_redirected_but_probes_are_not(settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.ALLOWED_HOSTS = ["gpu-portal.example.com"]
    client = Client(HTTP_HOST="gpu-portal.example.com")
    plain = client.get("/accounts/login/", HTTP_X_FORWARDED_PROTO="http")
    assert plain.status_code == 301
    assert plain["Location"] == "https://gpu-portal.example.com/accounts/login/"
    secure = client.get("/accounts/login/", HTTP_X_FORWARDED_PROTO="https")
    assert secure.status_code == 200
    assert secure["Strict-Transport-Security"] == "max-age=31536000"
    # Health checks and Prometheus reach the process itself, over plain HTTP.
    assert client.get("/healthz").status_code == 200
    assert client.get("/metrics").status_code == 200


PROBE = """
import json, django
from django.conf import settings
django.setup()
print(json.dumps({name: getattr(settings, name) for name in [
    "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_HSTS_PRELOAD", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE",
    "SECURE_PROXY_SSL_HEADER"]}))
"""


def _run(args: list[str], tmp_path, **env: str | None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [procs.PYTHON, *args],
        cwd=procs.REPO,
        env=procs.child_env(DJANGO_SETTINGS_MODULE="portal.settings", PORTAL_VAR_DIR=str(tmp_path),
                            DEBUG=None, **env),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_https_settings_come_from_the_environment(tmp_path):
    default = _run(["-c", PROBE], tmp_path, DATABASE_URL=None, REDIS_URL=None, SECRET_KEY=None,
                   BEHIND_TLS_PROXY=None, SECURE_HSTS_SECONDS=None)  # fmt: skip
    assert default.returncode == 0, default.stderr
    assert json.loads(default.stdout) == {
        "SECURE_SSL_REDIRECT": False, "SECURE_HSTS_SECONDS": 0,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": False, "SECURE_HSTS_PRELOAD": False,
        "SESSION_COOKIE_SECURE": False, "CSRF_COOKIE_SECURE": False,
        "SECURE_PROXY_SSL_HEADER": None,
    }  # fmt: skip
    proxied = _run(["-c", PROBE], tmp_path, **PRODUCTION)
    assert proxied.returncode == 0, proxied.stderr
    assert json.loads(proxied.stdout) == {
        "SECURE_SSL_REDIRECT": True, "SECURE_HSTS_SECONDS": 31536000,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True, "SECURE_HSTS_PRELOAD": True,
        "SESSION_COOKIE_SECURE": True, "CSRF_COOKIE_SECURE": True,
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],
    }  # fmt: skip


# The production environment of docs/security.md ("What an operator must configure").
PRODUCTION = {
    "DATABASE_URL": "postgres://portal:secret@db.internal:5432/portal",
    "REDIS_URL": "redis://redis.internal:6379/0",
    "SECRET_KEY": "Yq8v1m0hJX3kR9wP2cT5nL7bF4dG6sA0zE1uI3oK5jH7gQ9xV2yN4",
    "FIELD_ENCRYPTION_KEY": Fernet.generate_key().decode(),
    "ALLOWED_HOSTS": "gpu-portal.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://gpu-portal.example.com",
    "BEHIND_TLS_PROXY": "1",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "1",
    "SECURE_HSTS_PRELOAD": "1",
}


def test_check_deploy_is_clean_with_the_documented_production_settings(tmp_path):
    result = _run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], tmp_path,
                  **PRODUCTION)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_the_production_settings_are_the_documented_ones():
    docs = (procs.REPO / "docs" / "security.md").read_text()
    checklist = docs.split("## What an operator must configure", 1)[1]
    for name in PRODUCTION:
        assert f"`{name}" in checklist, name
