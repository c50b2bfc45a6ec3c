"""The API's own documentation: served from the installation, written for its readers."""

from __future__ import annotations

import re

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

# src= and href= values of a page: what a browser would fetch to render it.
ASSET = re.compile(r"""(?:src|href)=["']([^"']+)["']""")


def _assets(body: str) -> list[str]:
    return [url for url in ASSET.findall(body) if not url.startswith(("#", "data:"))]


@pytest.mark.parametrize("url", ["/api/docs/", "/api/redoc/"])
def test_docs_pages_load_only_local_assets_and_those_are_served(client: Client, url: str):
    response = client.get(url)
    assert response.status_code == 200
    body = response.content.decode()
    assets = _assets(body)
    assert assets, body
    # No CDN and no web fonts: the page must render on a network without internet.
    assert "//" not in "".join(assets), assets
    assert "googleapis" not in body and "jsdelivr" not in body
    for asset in assets:
        assert client.get(asset).status_code == 200, asset


def test_swagger_ui_does_not_call_the_online_validator(client: Client):
    # Swagger UI asks validator.swagger.io for a badge unless told not to. Its settings are
    # in its start-up script, served from a URL of its own (no inline script: see CSP).
    script = client.get("/api/docs/", {"script": ""}).content.decode()
    assert '"validatorUrl": null' in script


def _schema(client: Client) -> dict:
    return client.get("/api/schema/", {"format": "json"}).json()


def _descriptions(node: object) -> list[str]:
    """Every description in the schema: operations, parameters, fields, components."""
    if isinstance(node, dict):
        found = [node["description"]] if isinstance(node.get("description"), str) else []
        return found + [d for value in node.values() for d in _descriptions(value)]
    if isinstance(node, list):
        return [d for value in node for d in _descriptions(value)]
    return []


# What a developer's docstring says and an API user has no use for: our module, class and
# function names, the implementation's vocabulary, reStructuredText markup.
INTERNALS = re.compile(
    r"viewset|mixin|serializer|queryset|poller|\bagents\.|\bportal\.|registration\.|``",
    re.IGNORECASE,
)


def test_no_schema_description_speaks_of_the_implementation(client: Client):
    descriptions = _descriptions(_schema(client))
    assert len(descriptions) > 20
    leaks = [text for text in descriptions if INTERNALS.search(text)]
    assert leaks == []


def test_every_node_operation_is_described_for_its_users(client: Client):
    from agents.api.docs import NODE_OPERATIONS

    paths = _schema(client)["paths"]
    described = {
        ("list", "/api/v1/nodes/", "get"),
        ("create", "/api/v1/nodes/", "post"),
        ("retrieve", "/api/v1/nodes/{id}/", "get"),
        ("update", "/api/v1/nodes/{id}/", "put"),
        ("partial_update", "/api/v1/nodes/{id}/", "patch"),
        ("destroy", "/api/v1/nodes/{id}/", "delete"),
        ("test_connection", "/api/v1/nodes/test-connection/", "post"),
        ("import_nodes", "/api/v1/nodes/import/", "post"),
    }
    for name, path, method in described:
        assert paths[path][method]["description"] == str(NODE_OPERATIONS[name]), name
    assert len({str(text) for text in NODE_OPERATIONS.values()}) == len(NODE_OPERATIONS)


def test_node_descriptions_are_served_in_chinese_too(client: Client):
    schema = client.get("/api/schema/", {"format": "json", "lang": "zh-hans"}).json()
    assert "节点" in schema["paths"]["/api/v1/nodes/"]["get"]["description"]
    assert "配额" in schema["paths"]["/api/v1/quotas/{id}/"]["put"]["description"]
    assert "显存" in schema["paths"]["/api/v1/gpus/"]["get"]["description"]


def _operations(schema: dict):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method in {"get", "post", "put", "patch", "delete"}:
                yield f"{method.upper()} {path}", operation


def _has_example(operation: dict) -> bool:
    bodies = [operation.get("requestBody", {}), *operation.get("responses", {}).values()]
    return any(
        "example" in media or "examples" in media
        for body in bodies
        for media in body.get("content", {}).values()
    )


def test_every_operation_is_described_and_shows_an_example(client: Client):
    operations = dict(_operations(_schema(client)))
    assert len(operations) > 100
    undescribed = [name for name, op in operations.items() if not op.get("description")]
    assert undescribed == []
    assert [name for name, op in operations.items() if not _has_example(op)] == []
