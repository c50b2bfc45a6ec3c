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
    # Swagger UI asks validator.swagger.io for a badge unless told not to.
    body = client.get("/api/docs/").content.decode()
    assert '"validatorUrl": null' in body
