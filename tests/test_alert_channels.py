"""Alert channels through the API and the pages: everyone manages their own, tenant admins
their tenant's, the platform admin all; secrets never come back; bad settings change
nothing; messages are written in the channel's language."""

from __future__ import annotations

import pytest
from django.utils import timezone

from alerts.choices import ChannelKind
from alerts.messages import render
from alerts.models import Channel, Delivery
from audit.interface import AuditEntry
from quotas.choices import Role
from tests import clients
from tests.api import error_fields
from tests.factories import ChannelFactory, MembershipFactory, TenantFactory

URL = "/api/v1/alert-channels/"
ROBOT = "https://oapi.dingtalk.com/robot/send?access_token=abcdef0123456789"
SECRET = "SEC0123456789abcdef"


def rows() -> list[dict]:
    return list(Channel.objects.order_by("pk").values())


def test_a_user_creates_a_channel_and_its_secrets_never_come_back(bob):
    data = {"name": "team robot", "kind": "dingtalk", "settings": {"url": ROBOT, "secret": SECRET}}
    response = clients.api(bob).post(URL, data, format="json")
    assert response.status_code == 201, response.content
    body = response.content.decode()
    assert ROBOT not in body and SECRET not in body and "abcdef0123456789" not in body
    channel = Channel.objects.get()
    assert channel.owner == bob and channel.tenant is None
    assert channel.secrets == {"url": ROBOT, "secret": SECRET}
    assert SECRET not in channel.secrets_encrypted and response.json()["secret_hint"]
    assert clients.api(bob).get(f"{URL}{channel.pk}/").json()["settings"] == {}
    entry = AuditEntry.objects.get(action="alerts.channel.create")
    assert SECRET not in str(entry.after) and ROBOT not in str(entry.after)


@pytest.mark.parametrize(
    "data",
    [
        {"name": "x", "kind": "dingtalk", "settings": {"url": "http://oapi.dingtalk.com/robot/send?access_token=a"}},
        {"name": "x", "kind": "dingtalk", "settings": {"url": "https://oapi.dingtalk.com/robot/send"}},
        {"name": "x", "kind": "wecom", "settings": {"url": "https://qyapi.weixin.qq.com/cgi-bin/webhook/send"}},
        {"name": "x", "kind": "email", "settings": {"address": "not an address"}},
        {"name": "x", "kind": "email", "settings": {"address": 12}},
        {"name": "x", "kind": "email", "settings": {"address": "a@example.com", "cc": "b"}},
        {"name": "x", "kind": "slack", "settings": {"url": "https://u:p@hooks.slack.com/x"}},
        {"name": "x", "kind": "webhook", "settings": {"url": "https://e.com", "secret": "short"}},
        {"name": "x", "kind": "webhook", "settings": "https://example.com"},
        {"name": "x" * 101, "kind": "email", "settings": {"address": "a@example.com"}},
        {"name": "x", "kind": "pager", "settings": {}},
    ],
)  # fmt: skip
def test_bad_settings_are_400_naming_the_field_and_change_nothing(bob, data):
    ChannelFactory(owner=bob)
    before = rows()
    response = clients.api(bob).post(URL, data, format="json")
    assert response.status_code == 400, response.content
    assert set(error_fields(response)) <= {"name", "kind", "settings"}
    assert rows() == before


def test_a_bad_update_is_400_and_keeps_the_channel_as_it_was(bob):
    channel = ChannelFactory(owner=bob)
    before = rows()
    response = clients.api(bob).patch(f"{URL}{channel.pk}/", {"settings": {"url": "ftp://x"}},
                              format="json")  # fmt: skip
    assert response.status_code == 400
    assert "url" in error_fields(response)["settings"]
    assert rows() == before


def test_an_update_without_the_secrets_keeps_them(bob):
    channel = ChannelFactory(owner=bob, secrets={"url": "https://hooks.example.com/abc"})
    response = clients.api(bob).patch(f"{URL}{channel.pk}/", {"name": "renamed", "settings": {}},
                              format="json")  # fmt: skip
    assert response.status_code == 200, response.content
    channel.refresh_from_db()
    assert channel.name == "renamed" and channel.secrets["url"] == "https://hooks.example.com/abc"


def test_a_user_cannot_see_or_use_another_users_channel(bob, carol):
    channel = ChannelFactory(owner=bob)
    client = clients.api(carol)
    assert client.get(URL).json()["results"] == []
    detail = f"{URL}{channel.pk}/"
    assert client.get(detail).status_code == 404
    assert client.patch(detail, {"name": "mine"}, format="json").status_code == 404
    assert client.post(f"{detail}test/").status_code == 404
    assert client.get(f"{detail}deliveries/").status_code == 404
    assert client.delete(detail).status_code == 404
    assert Channel.objects.get(pk=channel.pk).name == channel.name
    assert not Delivery.objects.exists()


def test_the_platform_admin_sees_every_channel(alice, bob):
    channel = ChannelFactory(owner=bob)
    assert [c["id"] for c in clients.api(alice).get(URL).json()["results"]] == [channel.pk]


def test_anonymous_callers_are_refused(db):
    channel = ChannelFactory()
    assert clients.api(None).get(URL).status_code in (401, 403)
    assert clients.api(None).post(f"{URL}{channel.pk}/test/").status_code in (401, 403)


def test_a_tenant_admin_manages_the_tenants_channels_and_a_member_does_not(bob, carol):
    tenant = TenantFactory()
    MembershipFactory(user=bob, tenant=tenant, role=Role.ADMIN)
    MembershipFactory(user=carol, tenant=tenant, role=Role.MEMBER)
    data = {"name": "team mail", "kind": "email", "tenant": tenant.pk,
            "settings": {"address": "team@example.com"}}  # fmt: skip
    refused = clients.api(carol).post(URL, data, format="json")
    assert refused.status_code == 400 and "tenant" in error_fields(refused)
    created = clients.api(bob).post(URL, data, format="json")
    assert created.status_code == 201, created.content
    assert Channel.objects.get().tenant == tenant
    assert clients.api(carol).get(f"{URL}{created.json()['id']}/").status_code == 404


def test_send_test_queues_a_delivery_and_deliveries_lists_it(bob):
    channel = ChannelFactory(owner=bob)
    response = clients.api(bob).post(f"{URL}{channel.pk}/test/")
    assert response.status_code == 202, response.content
    [delivery] = clients.api(bob).get(f"{URL}{channel.pk}/deliveries/").json()
    assert delivery["test"] and delivery["status"] == "pending"
    assert AuditEntry.objects.filter(action="alerts.channel.test").exists()


def test_deleting_a_channel_is_audited(bob):
    channel = ChannelFactory(owner=bob)
    assert clients.api(bob).delete(f"{URL}{channel.pk}/").status_code == 204
    assert not Channel.objects.exists()
    assert AuditEntry.objects.filter(action="alerts.channel.delete").exists()


# --- pages ---------------------------------------------------------------------------------


def test_the_pages_add_show_and_test_a_channel(client, bob):
    client.force_login(bob)
    assert 'href="/alerts/channels/"' in client.get("/alerts/channels/").content.decode()
    response = client.post("/alerts/channels/add/", {
        "name": "my robot", "kind": "wecom", "enabled": "on", "language": "",
        "url": "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k-0123456789",
    })  # fmt: skip
    channel = Channel.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/alerts/channels/{channel.pk}/"
    page = client.get(f"/alerts/channels/{channel.pk}/").content.decode()
    assert "my robot" in page and "k-0123456789" not in page and "…6789" in page
    client.post(f"/alerts/channels/{channel.pk}/test/")
    assert Delivery.objects.filter(channel=channel, test=True).count() == 1
    edit = client.get(f"/alerts/channels/{channel.pk}/edit/").content.decode()
    assert "k-0123456789" not in edit


def test_a_bad_form_shows_the_error_and_saves_nothing(client, bob):
    client.force_login(bob)
    response = client.post("/alerts/channels/add/", {
        "name": "x", "kind": "dingtalk", "url": "http://example.com/robot/send",
    })  # fmt: skip
    assert response.status_code == 200
    assert "Only https:// URLs are accepted." in response.content.decode()
    assert not Channel.objects.exists()


def test_another_users_channel_page_is_404(client, bob, carol):
    channel = ChannelFactory(owner=bob)
    client.force_login(carol)
    for suffix in ("", "edit/"):
        assert client.get(f"/alerts/channels/{channel.pk}/{suffix}").status_code == 404
    assert client.post(f"/alerts/channels/{channel.pk}/delete/").status_code == 404
    assert Channel.objects.filter(pk=channel.pk).exists()


def test_messages_are_written_in_the_channels_language(bob):
    channel = ChannelFactory(owner=bob, kind=ChannelKind.WEBHOOK, language="zh-hans")
    delivery = Delivery.objects.create(channel=channel, test=True, next_attempt_at=timezone.now())
    assert render(delivery).title == "来自 GPU Portal 的测试消息"
    channel.language = "en"
    channel.save()
    delivery.refresh_from_db()
    assert render(delivery).title == "Test message from GPU Portal"
