"""A newcomer's first hour, as README command 1 serves it: `manage.py demo` on the embedded
default (its own PostgreSQL from the wheel, no Redis), driven in headless Chromium.

The platform admin makes a tenant, two users and a quota; the developer asks for a slice and
a whole card; the approver approves in a browser of their own and the developer's page
shows the placement without a reload; the developer reads the launch settings, extends,
resizes and releases; the admin drains and undrains a node and reads accounting, the idle
report and the audit log. Every page's status is checked, and no answer may be a 5xx, no
console may show an error, and the portal's log may hold no traceback."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Response, expect

from tests import clients, procs

pytestmark = [pytest.mark.browser, pytest.mark.stack]
PASSWORDS = {"dana": "Walnut-harbour-4417", "avery": "Copper-meadow-2983"}
TIMEOUT = 20_000


@dataclass
class Watch:
    """Everything the browser saw go wrong, across every page of every person."""

    url: str
    documents: list[tuple[int, str]] = field(default_factory=list)
    failures: list[tuple[int, str]] = field(default_factory=list)
    console: list[str] = field(default_factory=list)

    def attach(self, page: Page) -> Page:
        def answered(response: Response) -> None:
            if response.request.resource_type == "document":
                self.documents.append((response.status, response.url))
            if response.status >= 500 or (
                response.status >= 400 and response.request.resource_type != "document"
            ):
                self.failures.append((response.status, response.url))

        page.on("response", answered)
        page.on("console", lambda m: m.type == "error" and self.console.append(m.text))
        page.on("pageerror", lambda exc: self.console.append(str(exc)))
        # The pages ask before drain, release...: a person says yes.
        page.on("dialog", lambda dialog: dialog.accept())
        page.set_default_timeout(TIMEOUT)
        return page

    def open(self, page: Page, path: str) -> Page:
        response = page.goto(self.url + path)
        assert response is not None and response.status == 200, (path, response and response.status)
        return page


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Iterator[tuple[str, dict[str, str], procs.Proc]]:
    """`./dev up`'s last step on the embedded default: the URL and the printed logins."""
    port, agent_port = procs.free_port(), procs.free_ports(3)
    proc = procs.start(
        "demo",
        [procs.PYTHON, "manage.py", "demo", "--port", str(port), "--agent-port", str(agent_port),
         "--nodes", "2", "--gpus", "4", "--history-hours", "2"],
        procs.embedded_env(
            tmp_path_factory.mktemp("var"), GPU_POLL_INTERVAL="1", REQUESTS_PLACE_EVERY_S="2"
        ),
    )  # fmt: skip
    try:
        proc.wait_for("Press Ctrl+C to stop", timeout=180)
        logins = dict(re.findall(r"(?:Log in|or) as (\S+) / (\S+)", "".join(proc.lines)))
        yield f"http://127.0.0.1:{port}", logins, proc
    finally:
        assert proc.stop(timeout=30) in (0, -15), "".join(proc.lines[-30:])


def _log_in(watch: Watch, context: BrowserContext, user: str, password: str) -> Page:
    page = watch.attach(context.new_page())
    watch.open(page, "/accounts/login/")
    clients.sign_in(page, user, password, lands_on=r"/$")
    return page


def _make_user(watch: Watch, admin: Page, username: str, first_name: str) -> str:
    """A user from the Users page; the set-password link it shows once."""
    watch.open(admin, "/users/")
    admin.get_by_role("link", name="Add user").click()
    admin.fill("#id_username", username)
    admin.fill("#id_first_name", first_name)
    admin.fill("#id_email", f"{username}@example.com")
    admin.get_by_role("button", name="Save").click()
    link = admin.locator("#password-link").inner_text().strip()
    assert link.startswith(f"{watch.url}/accounts/set-password/"), link
    return link


def _choose_password(watch: Watch, browser: Browser, link: str, user: str) -> Page:
    """The new user, in a browser of their own: the link, a password, then signing in."""
    context = browser.new_context()
    page = watch.attach(context.new_page())
    response = page.goto(link)
    assert response is not None and response.status in (200, 302)
    page.fill("#id_new_password1", PASSWORDS[user])
    page.fill("#id_new_password2", PASSWORDS[user])
    page.get_by_role("button", name="Set password").click()
    expect(page.get_by_role("heading", name="Password set")).to_be_visible()
    page.close()
    return _log_in(watch, context, user, PASSWORDS[user])


def _invite(watch: Watch, admin: Page, username: str, role: str) -> None:
    watch.open(admin, "/tenants/walk/members/")
    admin.fill("#id_username", username)
    admin.select_option("#id_role", role)
    admin.get_by_role("button", name="Add").click()
    expect(admin.locator(f'tr[data-member="{username}"]')).to_be_visible()


def _ask(watch: Watch, dev: Page, *, whole: bool, reason: str) -> None:
    watch.open(dev, "/requests/new/")
    dev.select_option("#id_tenant", label="Walk Team")
    dev.select_option("#id_pool", label="Demo (NVIDIA)")  # the pool names its vendors
    dev.fill("#id_count", "1")
    dev.check(f"input[name=size][value={'whole' if whole else 'slice'}]")
    if not whole:
        dev.fill("#id_compute_pct", "25")
        dev.fill("#id_memory_mib", "4")  # GiB
    dev.fill("#id_duration_hours", "4")
    dev.fill("#id_reason", reason)
    dev.get_by_role("button", name="Submit request").click()
    expect(dev).to_have_url(re.compile(r"/requests/$"))


def test_a_newcomer_walks_every_flow_on_the_embedded_default(demo, browser: Browser):
    url, logins, proc = demo
    watch = Watch(url)
    admin_context = browser.new_context()
    admin = _log_in(watch, admin_context, "admin", logins["admin"])

    # The admin: two users, a tenant (its first admin is the admin), both invited, a quota.
    dana_link = _make_user(watch, admin, "dana", "Dana")
    avery_link = _make_user(watch, admin, "avery", "Avery")
    watch.open(admin, "/tenants/add/")
    admin.fill("#id_name", "Walk Team")
    admin.fill("#id_slug", "walk")
    admin.fill("#id_admin", "admin")
    admin.get_by_role("button", name="Save").click()
    expect(admin).to_have_url(re.compile(r"/tenants/walk/$"))
    _invite(watch, admin, "dana", "member")
    _invite(watch, admin, "avery", "approver")
    watch.open(admin, "/tenants/walk/quotas/add/")
    admin.select_option("#id_pool", label="Demo")
    admin.fill("#id_limit_vgpus", "4")
    admin.fill("#id_limit_compute_pct", "400")
    admin.fill("#id_limit_memory_mib", "200")  # GiB
    admin.get_by_role("button", name="Save").click()
    expect(admin).to_have_url(re.compile(r"/tenants/walk/$"))
    expect(admin.locator("body")).to_contain_text("Demo")

    # The developer asks for a slice and a whole card; both wait for approval.
    dev = _choose_password(watch, browser, dana_link, "dana")
    _ask(watch, dev, whole=False, reason="fine-tune the detector")
    _ask(watch, dev, whole=True, reason="benchmark a full card")
    rows = dev.locator(".request-row")
    expect(rows).to_have_count(2)
    for i in range(2):
        expect(rows.nth(i)).to_have_attribute("data-state", "pending")
    expect(dev.locator("#live-status")).to_have_attribute("data-state", "live")
    dev.evaluate("() => { window.__notReloaded = true; }")

    # The approver, in a browser of their own, approves both.
    approver = _choose_password(watch, browser, avery_link, "avery")
    watch.open(approver, "/approvals/")
    queued = approver.locator(".approval-row")
    expect(queued).to_have_count(2)
    for remaining in (1, 0):
        queued.first.locator(".approve-button").click()
        expect(queued).to_have_count(remaining)

    # Placed, and the developer's page says so without a reload.
    for i in range(2):
        expect(rows.nth(i)).to_have_attribute("data-state", "allocated", timeout=30_000)
    assert dev.evaluate("() => window.__notReloaded === true"), "the page reloaded"

    # The slice: its launch settings, then extend, resize and release.
    # The slice's row is the one offering Resize (a whole card has no size to change).
    slice_row = dev.locator(".request-row", has=dev.get_by_role("link", name="Resize"))
    slice_row.locator("a").first.click()
    expect(dev).to_have_url(re.compile(r"/requests/\d+/$"))
    request_path = dev.url.removeprefix(url)
    dev.locator(".allocation-link").first.click()
    expect(dev).to_have_url(re.compile(r"/allocations/\d+/$"))
    expect(dev.locator("body")).to_contain_text("export ")
    watch.open(dev, request_path)
    dev.fill("#extend input[name=hours]", "2")
    dev.locator("#extend button[type=submit]").click()
    # Beyond auto-approval, an extension waits for the approver like a request.
    expect(dev.locator("#live-part")).to_contain_text("+2 hours waiting")
    dev.fill("#resize input[name=compute_pct]", "30")
    dev.fill("#resize input[name=memory_mib]", "8")  # GiB
    dev.locator("#resize button[type=submit]").click()
    expect(dev.locator("#live-part")).to_contain_text("1 \u00d7 30% \u00b7 8.0 GiB")
    dev.locator(f"form[action='{request_path}release/'] button[type=submit]").click()
    expect(dev.locator("#live-part")).to_contain_text(re.compile("Released|released"))

    # The admin drains and undrains a node of the pool, then reads the reports.
    watch.open(admin, "/pools/demo/")
    node_row = admin.locator("#manage-nodes tr[data-node-id]").first
    node_id = node_row.get_attribute("data-node-id")
    node_row.get_by_role("button", name="Drain").click()
    draining = admin.locator(f"#manage-nodes tr[data-node-id='{node_id}']")
    expect(draining.get_by_role("button", name="Undrain")).to_be_visible()
    draining.get_by_role("button", name="Undrain").click()
    expect(
        admin.locator(f"#manage-nodes tr[data-node-id='{node_id}']").get_by_role(
            "button", name="Drain"
        )
    ).to_be_visible()
    watch.open(admin, "/accounting/")
    expect(admin.locator("body")).to_contain_text("Walk Team")
    watch.open(admin, "/idle/")
    watch.open(admin, "/audit/")
    expect(admin.locator("body")).to_contain_text("dana")

    for context in browser.contexts:
        context.close()
    assert watch.failures == [], watch.failures
    assert all(status in (200, 302) for status, _ in watch.documents), watch.documents
    assert watch.console == [], watch.console
    assert "Traceback" not in "".join(proc.lines), "".join(proc.lines[-40:])


# Pages a crawl must not follow: they act, sign out, download or leave the portal's pages.
NOT_FOLLOWED = re.compile(r"/accounts/logout|/i18n/|format=csv|export\.csv|/admin/|/api/")


@pytest.mark.parametrize("user", ["admin", "mei", "ana"])
def test_every_page_the_demo_links_to_answers_for_each_of_its_people(demo, browser, user):
    """From the sidebar and one step beyond it (a tenant, a pool, a request, a node, an
    event...), every page the demo's content links to opens, for the admin, the approver
    and a developer alike: no error status, no console error."""
    url, logins, proc = demo
    watch = Watch(url)
    context = browser.new_context()
    page = _log_in(watch, context, user, logins[user])
    sidebar = page.eval_on_selector_all(
        "aside a.nav-link[href^='/']", "links => links.map(a => a.getAttribute('href'))"
    )
    assert len(sidebar) >= 6, sidebar
    seen: set[str] = set()
    for path in dict.fromkeys(sidebar):
        watch.open(page, path)
        seen.add(path)
        links = page.eval_on_selector_all(
            "main a[href^='/'], .page-body a[href^='/']",
            "links => links.map(a => a.getAttribute('href'))",
        )
        # One of each kind of page this one links to (the first tenant, pool, request...).
        kinds = {}
        for link in links:
            link = link.split("#")[0]
            kind = re.sub(r"\d+|[?].*", "", link)
            if link and link not in seen and not NOT_FOLLOWED.search(link):
                kinds.setdefault(kind, link)
        for link in kinds.values():
            if link not in seen:
                watch.open(page, link)
                seen.add(link)
    context.close()
    assert len(seen) > len(sidebar), seen
    assert watch.failures == [], watch.failures
    assert all(status in (200, 302) for status, _ in watch.documents), watch.documents
    assert watch.console == [], watch.console
    assert "Traceback" not in "".join(proc.lines), "".join(proc.lines[-40:])
