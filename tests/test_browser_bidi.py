"""Text from agents with bidirectional control characters stays inside its own box.

An agent can report a host name, a model or an error holding U+202E (RIGHT-TO-LEFT
OVERRIDE); unisolated, it reverses the rest of the line around it (the labels after it, the
badge beside it). The pages put such text in <bdi> or dir="auto", so only the agent's own
text is reordered. Checked where Chromium draws each character.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from playwright.sync_api import Page, expect

from agents.models import GPU, Node
from tests import clients

pytestmark = [pytest.mark.browser]

RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE, never closed by a PDF

# The left edges of each character of the first occurrence of `word` in `selector`'s text.
CHAR_EDGES = """([selector, word]) => {
    const root = document.querySelector(selector);
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        const at = node.data.indexOf(word);
        if (at < 0) continue;
        return [...word].map((_, i) => {
            const range = document.createRange();
            range.setStart(node, at + i);
            range.setEnd(node, at + i + 1);
            return range.getBoundingClientRect().left;
        });
    }
    return null;
}"""


@pytest.fixture
def spoofed_node(transactional_db) -> tuple[int, int]:
    """The node's and its card's ids (the ORM is off limits once the browser runs)."""
    # A node manager, who sees agent error texts (members see "Agent error" instead).
    fay = get_user_model().objects.create_user("fay", password="fay-pw-1")
    fay.user_permissions.add(
        Permission.objects.get(content_type__app_label="agents", codename="view_node")
    )
    node = Node.objects.create(
        name="bidi-01",
        hostname=f"gpu{RLO}evil",
        driver_version=f"535{RLO}.104",
        cuda_version="12.2",
        agent_version="0.1.0",
        last_error=f"HTTP 500: {RLO}broken",
    )
    gpu = GPU.objects.create(node=node, index=0, uuid="GPU-bidi-0", model=f"NVIDIA {RLO}A100")
    return node.pk, gpu.pk


def _edges(page: Page, selector: str, word: str) -> list[float]:
    edges = page.evaluate(CHAR_EDGES, [selector, word])
    assert edges is not None, f"{word!r} not in {selector}"
    return edges


def test_an_agents_right_to_left_override_does_not_reorder_the_text_around_it(
    spoofed_node, live_server, browser
):
    node_pk, gpu_pk = spoofed_node
    page = browser.new_page()
    try:
        clients.sign_in(page, "fay", at=f"{live_server.url}/accounts/login/")
        page.goto(f"{live_server.url}/nodes/{node_pk}/")
        expect(page.locator(".gpu-card")).to_have_count(1)
        # The words after the host name and the driver version read left to right, in the
        # order written, after every character of the host name.
        driver = _edges(page, ".page-header", "driver")
        cuda = _edges(page, ".page-header", "CUDA")
        for edges in (driver, cuda):
            assert edges == sorted(edges) and len(set(edges)) == len(edges), edges
        assert max(_edges(page, ".page-header", "evil")) < driver[0] < cuda[0]
        # The agent's own text is still shown as sent, reordered inside its box only.
        expect(page.locator(".page-header bdi").first).to_have_text(f"gpu{RLO}evil")
        expect(page.locator('[data-field="last_error"]')).to_have_text(f"HTTP 500: {RLO}broken")

        # A GPU page: the health badge stays after the model, not before it.
        page.goto(f"{live_server.url}/gpus/{gpu_pk}/")
        model = _edges(page, ".page-title", "A100") + _edges(page, ".page-title", "NVIDIA")
        badge = page.locator(".page-title .badge").bounding_box()
        assert badge is not None and badge["x"] > max(model), (model, badge)
        assert _edges(page, ".page-title", "GPU 0")[0] < min(model)
    finally:
        page.close()
