"""The API's own documentation: served from the installation, written for its readers."""

from __future__ import annotations

import re
from collections.abc import Iterator

import jsonschema
import pytest
from django.test import Client
from playwright.sync_api import Browser, expect

from tests import procs
from tests.test_browser_csp import RECORD_VIOLATIONS

pytestmark = pytest.mark.django_db

FORMAT_CHECKER = jsonschema.Draft7Validator.FORMAT_CHECKER

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


# --- sections and titles ---------------------------------------------------------------------


def test_every_operation_is_in_its_resource_section_with_a_title_of_its_own(client: Client):
    from portal.api_docs import TAGS

    sections = {str(tag.name) for tag in TAGS}
    operations = dict(_operations(_schema(client)))
    assert len(operations) > 100
    untagged = [name for name, op in operations.items() if len(op["tags"]) != 1
                or op["tags"][0] not in sections]  # fmt: skip
    assert untagged == []
    untitled = [name for name, op in operations.items()
                if not op.get("summary") or op["summary"] == op["operationId"]]  # fmt: skip
    assert untitled == []
    # Two operations of one title would be one entry twice in ReDoc's menu.
    titles = [op["summary"] for op in operations.values()]
    assert sorted({t for t in titles if titles.count(t) > 1}) == []


def test_the_model_actions_are_titled_from_their_resource(client: Client):
    paths = _schema(client)["paths"]
    assert paths["/api/v1/pools/"]["get"]["summary"] == "List pools"
    assert paths["/api/v1/gpu-requests/"]["post"]["summary"] == "Create a GPU request"
    assert paths["/api/v1/allocations/{id}/"]["get"]["summary"] == "Retrieve an allocation"
    assert paths["/api/v1/quotas/{id}/"]["patch"]["summary"] == "Partially update a quota"
    assert paths["/api/v1/alert-rules/{id}/"]["delete"]["summary"] == "Delete an alert rule"
    # What is not a delete does not say so.
    assert paths["/api/v1/tokens/{id}/"]["delete"]["summary"] == "Revoke an API token"
    assert paths["/api/v1/gpus/{id}/history/"]["get"]["tags"] == ["History"]


def test_the_sections_are_the_resources_in_their_order_with_descriptions(client: Client):
    from portal.api_docs import TAGS

    tags = _schema(client)["tags"]
    assert [tag["name"] for tag in tags] == [str(tag.name) for tag in TAGS]
    assert tags[0]["name"] == "GPU requests" and tags[-1]["name"] == "Audit log"
    assert all(tag["description"] for tag in tags)
    used = {op["tags"][0] for _name, op in _operations(_schema(client))}
    assert used == {tag["name"] for tag in tags}


def test_the_operation_ids_stay_those_clients_know(client: Client):
    # Titles and sections changed nothing of the ids generated clients are named after.
    operations = dict(_operations(_schema(client)))
    assert operations["GET /api/v1/accounting/"]["operationId"] == "v1_accounting_retrieve"
    assert operations["POST /api/v1/gpu-requests/{id}/release/"]["operationId"] == (
        "v1_gpu_requests_release_create"
    )
    assert operations["GET /api/v1/nodes/{id}/history/"]["operationId"] == "nodes_history_retrieve"
    ids = [op["operationId"] for op in operations.values()]
    assert len(set(ids)) == len(ids)


def test_sections_and_titles_are_served_in_chinese_too(client: Client):
    schema = client.get("/api/schema/", {"format": "json", "lang": "zh-hans"}).json()
    pools = schema["paths"]["/api/v1/pools/"]
    assert pools["get"]["summary"] == "列出资源池"
    assert pools["get"]["tags"] == ["资源池"]
    release = schema["paths"]["/api/v1/gpu-requests/{id}/release/"]["post"]
    assert release["summary"] == "释放 GPU 申请"
    assert schema["paths"]["/api/v1/gpu-requests/"]["post"]["summary"] == "创建 GPU 申请"
    assert schema["tags"][0]["name"] == "GPU 申请"
    assert "配额" in schema["tags"][0]["description"]


# --- examples --------------------------------------------------------------------------------


def _made_up_keys(schema: dict, components: dict, where: str, seen: frozenset = frozenset()):
    """Where ReDoc's sampler would invent keys (property1, property2) for a body without an
    example: a map (additionalProperties) with no example of its own, however deep."""
    if not isinstance(schema, dict) or "example" in schema:
        return []
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        if name in seen:
            return []
        return _made_up_keys(components[name], components, f"{where}>{name}", seen | {name})
    found = [where] if isinstance(schema.get("additionalProperties"), dict) else []
    for key in ("allOf", "oneOf", "anyOf"):
        for part in schema.get(key, []):
            found += _made_up_keys(part, components, where, seen)
    if "items" in schema:
        found += _made_up_keys(schema["items"], components, f"{where}[]", seen)
    for name, field in (schema.get("properties") or {}).items():
        found += _made_up_keys(field, components, f"{where}.{name}", seen)
    return found


def test_no_sample_shows_made_up_keys(client: Client):
    schema = _schema(client)
    components = schema["components"]["schemas"]
    invented = []
    for name, operation in _operations(schema):
        bodies = {"request": operation.get("requestBody", {}), **operation["responses"]}
        for status_code, body in bodies.items():
            for media_type, media in body.get("content", {}).items():
                if "example" in media or "examples" in media:
                    continue
                where = f"{name} {status_code} {media_type} "
                invented += _made_up_keys(media.get("schema", {}), components, where)
    assert invented == []
    assert "property1" not in str(schema)


def _as_json_schema(node: object) -> object:
    """OpenAPI 3.0's schema objects as JSON Schema: ``nullable`` allows null."""
    if isinstance(node, list):
        return [_as_json_schema(value) for value in node]
    if not isinstance(node, dict):
        return node
    out = {key: _as_json_schema(value) for key, value in node.items() if key != "nullable"}
    if node.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


def _request_examples(schema: dict):
    for name, operation in _operations(schema):
        for media_type, media in operation.get("requestBody", {}).get("content", {}).items():
            for title, example in media.get("examples", {}).items():
                yield name, media_type, title, example["value"], media.get("schema", {})


# Operations whose request bodies are still left to their readers: the clusters' (their
# app's helper documents them).
NO_REQUEST_EXAMPLE_YET = {
    "POST /api/v1/clusters/",
    "POST /api/v1/clusters/{id}/namespaces/",
    "PUT /api/v1/clusters/{id}/",
    "PATCH /api/v1/clusters/{id}/",
}


def test_every_write_shows_a_request_body_to_send(client: Client):
    # A CI engineer found "no example request body"; schemathesis' stateful phase walks
    # from the creates only when they are valid (tests/test_api_schemathesis.py).
    schema = _schema(client)
    with_body = {name for name, op in _operations(schema)
                 if "application/json" in op.get("requestBody", {}).get("content", {})}  # fmt: skip
    shown = {name for name, media_type, *_ in _request_examples(schema)
             if media_type == "application/json"}  # fmt: skip
    assert len(with_body) > 40
    assert sorted(with_body - shown) == sorted(NO_REQUEST_EXAMPLE_YET)


def test_every_request_example_is_valid_against_its_request_schema(client: Client):
    schema = _schema(client)
    components = _as_json_schema(schema["components"])
    checked, invalid = 0, []
    for name, media_type, title, value, body_schema in _request_examples(schema):
        if media_type != "application/json":
            continue
        resolver = {"components": components, **_as_json_schema(body_schema)}
        validator = jsonschema.Draft7Validator(resolver, format_checker=FORMAT_CHECKER)
        problems = [f"{'/'.join(map(str, e.path))}: {e.message}"
                    for e in validator.iter_errors(value)]  # fmt: skip
        # No key the request does not take (a made-up or a read-only one).
        target = body_schema
        if "$ref" in target:
            target = schema["components"]["schemas"][target["$ref"].rsplit("/", 1)[1]]
        if isinstance(value, dict) and "properties" in target:
            problems += [f"{key}: not a field of the request"
                         for key in set(value) - set(target["properties"])]  # fmt: skip
        invalid += [f"{name} {title!r}: {problem}" for problem in problems]
        checked += 1
    assert checked > 40
    assert invalid == []


def test_the_accounting_example_has_the_answers_shape(client: Client, admin_user):
    # The example is written by hand: it must have every key the real answer has.
    schema = _schema(client)
    media = schema["paths"]["/api/v1/accounting/"]["get"]["responses"]["200"]["content"]
    [example] = media["application/json"]["examples"].values()
    client.force_login(admin_user)
    answer = client.get("/api/v1/accounting/").json()
    assert set(example["value"]) == set(answer)
    assert set(example["value"]["total"]) == set(answer["total"])
    assert set(example["value"]["days"][0]) == set(answer["days"][0])


# --- ReDoc's logo --------------------------------------------------------------------------


def test_redoc_is_served_with_the_portals_logo_not_redoclys(client: Client):
    page = client.get("/api/redoc/").content.decode()
    [script] = [url for url in _assets(page) if url.endswith(".js")]
    bundle = client.get(script)
    assert bundle.status_code == 200
    assert bundle["Content-Type"].startswith("text/javascript")
    text = bundle.content.decode()
    assert "cdn.redoc.ly" not in text and "Redoc.init" not in page
    assert 'src:"/static/portal/redoc-logo.svg"' in text
    assert client.get("/static/portal/redoc-logo.svg").status_code == 200
    # Unchanged since: the browser keeps its copy.
    again = client.get(script, headers={"If-None-Match": bundle["ETag"]})
    assert again.status_code == 304


@pytest.fixture
def site(transactional_db, child_env_for_test_db) -> Iterator[str]:
    with procs.daphne(child_env_for_test_db) as (url, _):
        yield url


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_redoc_shows_sections_titles_and_examples_with_no_console_error(site, browser: Browser):
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("requestfailed", lambda r: errors.append(f"{r.url}: {r.failure}"))
    page.add_init_script(RECORD_VIOLATIONS)
    try:
        page.goto(f"{site}/api/redoc/")
        menu = page.locator(".menu-content")
        # ReDoc lays out all 100-odd operations before it shows anything: half a minute
        # on a busy two-core machine.
        expect(menu.get_by_text("GPU requests", exact=True)).to_be_visible(timeout=120_000)
        expect(menu.get_by_text("Audit log", exact=True)).to_be_visible()
        # Titles, not ids, in the menu and above each operation.
        expect(menu.get_by_text("Get a month's accounting", exact=True)).to_have_count(1)
        expect(page.get_by_role("heading", name="Create a GPU request")).to_be_visible()
        text = page.locator("body").inner_text()
        assert "v1_accounting_retrieve" not in text
        # The samples are the examples: real keys, none made up.
        assert "queue_waits" in text and "property1" not in text
        # The logo beside "API docs by Redocly" comes from the portal, and is drawn.
        logo = page.locator("img[alt='redocly logo']")
        expect(logo).to_have_attribute("src", re.compile(r"^/static/portal/redoc-logo"))
        assert page.evaluate("(img) => img.complete && img.naturalWidth > 0", logo.element_handle())
        assert page.evaluate("() => window.__violations") == []
    finally:
        page.close()
    assert errors == []
