"""Each person's language and time zone: kept on the Account page, the API and the sidebar's
switch; every signed-in page in them; their own channels' messages in them; bad input a 400
that changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from alerts.choices import ChannelKind
from alerts.messages import render
from alerts.models import Delivery
from quotas.models import UserPreference
from quotas.tenancy.preferences import preferences_of, set_preferences
from tests import clients
from tests.api import error_fields
from tests.factories import ChannelFactory, TenantFactory
from tokens.models import ApiToken
from tokens.services import create_token

pytestmark = pytest.mark.django_db

ACCOUNT = reverse("tokens:account")
SAVE = reverse("tokens:account_preferences")
SWITCH = reverse("quotas:set_language")
API = "/api/v1/me/preferences/"
# Words of the sidebar in each language: which one a page was written in.
ENGLISH, CHINESE = ">Fleet<", ">集群总览<"


def _chosen(user) -> tuple[str, str] | None:
    row = UserPreference.objects.filter(user=user).values_list("language", "time_zone").first()
    return tuple(row) if row else None


def _lang(response) -> str:
    body = response.content.decode()
    return "zh" if CHINESE in body else "en" if ENGLISH in body else "?"


# --- the service ---------------------------------------------------------------------------


def test_preferences_default_to_the_browser_and_the_site(bob, settings):
    settings.TIME_ZONE = "Europe/Berlin"
    found = preferences_of(bob)
    assert (found.language, found.time_zone, found.effective_time_zone) == ("", "", "Europe/Berlin")


def test_set_preferences_changes_only_what_is_given(bob):
    set_preferences(bob, language="zh-hans", time_zone="Asia/Shanghai")
    set_preferences(bob, time_zone="")
    assert _chosen(bob) == ("zh-hans", "")


@pytest.mark.parametrize(
    ("changes", "field"),
    [({"language": "fr"}, "language"), ({"time_zone": "Mars/Olympus"}, "time_zone"),
     ({"language": "en", "time_zone": "asia/shanghai"}, "time_zone")],
)  # fmt: skip
def test_bad_preferences_are_refused_per_field_and_change_nothing(bob, changes, field):
    set_preferences(bob, language="zh-hans", time_zone="Asia/Tokyo")
    with pytest.raises(ValidationError) as refused:
        set_preferences(bob, **changes)
    assert list(refused.value.message_dict) == [field]
    assert _chosen(bob) == ("zh-hans", "Asia/Tokyo")


# --- the middleware ------------------------------------------------------------------------


def test_a_users_language_wins_over_the_browsers(bob):
    client = clients.page(bob, HTTP_ACCEPT_LANGUAGE="en")
    assert _lang(client.get(ACCOUNT)) == "en"
    set_preferences(bob, language="zh-hans")
    response = client.get(ACCOUNT)
    assert _lang(response) == "zh" and response["Content-Language"] == "zh-hans"


def test_without_a_choice_the_browsers_language_is_used(bob):
    assert _lang(clients.page(bob, HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9").get(ACCOUNT)) == "zh"
    assert _lang(clients.page(bob, HTTP_ACCEPT_LANGUAGE="en-US").get(ACCOUNT)) == "en"


def test_anonymous_pages_follow_the_browser(db):
    login = reverse("login")
    assert "登录" in clients.page(HTTP_ACCEPT_LANGUAGE="zh-Hans").get(login).content.decode()
    assert "登录" not in clients.page(HTTP_ACCEPT_LANGUAGE="en").get(login).content.decode()


def test_dates_are_shown_in_the_users_time_zone(bob, settings):
    settings.TIME_ZONE = "UTC"
    token, _key = create_token(bob, name="ci", scope="read", expires_at=None)
    ApiToken.objects.filter(pk=token.pk).update(created=datetime(2026, 12, 2, 17, 1, tzinfo=UTC))
    client = clients.page(bob)
    body = client.get(ACCOUNT).content.decode()
    assert "2026-12-02 17:01" in body and '<meta name="time-zone" content="UTC">' in body
    set_preferences(bob, time_zone="Asia/Shanghai")
    body = client.get(ACCOUNT).content.decode()
    assert "2026-12-03 01:01" in body and '<meta name="time-zone" content="Asia/Shanghai">' in body
    # The activation ends with the request: nothing after it runs in Shanghai time.
    assert timezone.get_current_timezone_name() == "UTC"


# --- the Account page's form ---------------------------------------------------------------


def test_the_account_page_saves_language_and_time_zone(bob):
    client = clients.page(bob)
    form = client.get(ACCOUNT).context["preference_form"]
    languages = dict(form.fields["language"].choices)
    assert languages["zh-hans"] == "简体中文" and languages[""] == "Browser default"
    assert "Asia/Shanghai" in dict(form.fields["time_zone"].choices)
    response = client.post(SAVE, {"language": "zh-hans", "time_zone": "Asia/Shanghai"})
    assert response.status_code == 302 and response["Location"] == ACCOUNT
    assert _chosen(bob) == ("zh-hans", "Asia/Shanghai")
    page = client.get(ACCOUNT)
    assert _lang(page) == "zh" and page.context["preference_form"].initial == {
        "language": "zh-hans", "time_zone": "Asia/Shanghai"}  # fmt: skip


def test_browser_default_drops_the_switchs_cookie(bob, settings):
    client = clients.page(bob)
    client.post(SWITCH, {"language": "zh-hans", "next": ACCOUNT})
    response = client.post(SAVE, {"language": "", "time_zone": ""})
    assert response.status_code == 302 and _chosen(bob) == ("", "")
    assert response.cookies[settings.LANGUAGE_COOKIE_NAME].value == ""
    assert _lang(client.get(ACCOUNT, HTTP_ACCEPT_LANGUAGE="en")) == "en"


@pytest.mark.parametrize(
    "data", [{"language": "fr", "time_zone": ""}, {"language": "en", "time_zone": "Nowhere/City"}]
)
def test_a_bad_form_is_400_with_its_error_and_changes_nothing(bob, data):
    set_preferences(bob, language="en", time_zone="Asia/Tokyo")
    response = clients.page(bob).post(SAVE, data)
    assert response.status_code == 400
    assert response.context["preference_form"].errors
    assert _chosen(bob) == ("en", "Asia/Tokyo")


def test_the_form_needs_a_signed_in_post(bob):
    assert clients.page().post(SAVE, {"language": "en"}).status_code == 302  # to the login
    assert clients.page(bob).get(SAVE).status_code == 405
    assert _chosen(bob) is None


# --- the sidebar's switch ------------------------------------------------------------------


def test_the_switch_keeps_a_signed_in_users_choice(bob):
    response = clients.page(bob).post(SWITCH, {"language": "zh-hans", "next": ACCOUNT})
    assert response.status_code == 302 and response["Location"] == ACCOUNT
    assert _chosen(bob) == ("zh-hans", "")
    # Another browser of theirs, asking for English, gets their choice.
    assert _lang(clients.page(bob, HTTP_ACCEPT_LANGUAGE="en").get(ACCOUNT)) == "zh"


def test_the_switch_for_anonymous_or_a_bad_language_keeps_nothing(bob):
    response = clients.page().post(SWITCH, {"language": "zh-hans", "next": "/"})
    assert response.status_code == 302 and response.cookies["django_language"].value == "zh-hans"
    clients.page(bob).post(SWITCH, {"language": "fr", "next": "/"})
    assert not UserPreference.objects.exists()


# --- the API -------------------------------------------------------------------------------


def test_the_api_reads_and_changes_your_preferences(bob, settings):
    settings.TIME_ZONE = "UTC"
    client = clients.api(bob)
    assert client.get(API).json() == {"language": "", "time_zone": "", "effective_time_zone": "UTC"}
    response = client.patch(API, {"time_zone": "Asia/Shanghai"}, format="json")
    assert response.status_code == 200
    shanghai = {"language": "", "time_zone": "Asia/Shanghai"}
    assert response.json() == {**shanghai, "effective_time_zone": "Asia/Shanghai"}
    client.patch(API, {"language": "zh-hans"}, format="json")
    assert _chosen(bob) == ("zh-hans", "Asia/Shanghai")


@pytest.mark.parametrize(
    ("data", "field"),
    [({"language": "fr"}, "language"), ({"time_zone": "Nowhere/City"}, "time_zone"),
     ({"time_zone": "x" * 65}, "time_zone")],
)  # fmt: skip
def test_bad_api_input_is_400_naming_the_field_and_changes_nothing(bob, data, field):
    set_preferences(bob, language="en", time_zone="Asia/Tokyo")
    response = clients.api(bob).patch(API, data, format="json")
    assert response.status_code == 400 and list(error_fields(response)) == [field]
    assert _chosen(bob) == ("en", "Asia/Tokyo")


def test_a_read_token_reads_them_and_changes_nothing(bob):
    _token, key = create_token(bob, name="ro", scope="read")
    assert clients.bearer(key).get(API).status_code == 200
    assert clients.bearer(key).patch(API, {"language": "en"}, format="json").status_code == 403
    assert _chosen(bob) is None


def test_anonymous_callers_are_refused(db):
    assert clients.api().get(API).status_code in (401, 403)
    assert clients.api().patch(API, {"language": "en"}, format="json").status_code in (401, 403)


def test_the_schema_documents_the_operations(client):
    paths = client.get("/api/schema/", {"format": "json"}).json()["paths"]
    assert paths[API]["get"]["tags"] == ["Your preferences"]
    assert paths[API]["patch"]["summary"] == "Change your preferences"


# --- messages --------------------------------------------------------------------------------


def _test_delivery(channel) -> Delivery:
    return Delivery.objects.create(channel=channel, test=True, next_attempt_at=timezone.now())


def _notice_at(channel, at: datetime) -> Delivery:
    delivery = Delivery.objects.create(
        channel=channel, notice={"kind": "approved", "request": 7}, next_attempt_at=at
    )
    Delivery.objects.filter(pk=delivery.pk).update(created=at)
    delivery.refresh_from_db()
    return delivery


def test_a_users_channel_writes_in_their_language_and_time_zone(bob, settings):
    settings.TIME_ZONE = "UTC"
    at = datetime(2026, 12, 2, 17, 1, tzinfo=UTC)
    channel = ChannelFactory(owner=bob, kind=ChannelKind.WEBHOOK, language="")
    message = render(_notice_at(channel, at))
    assert dict(message.facts)["Sent"] == "2026-12-02 17:01"
    set_preferences(bob, language="zh-hans", time_zone="Asia/Shanghai")
    assert render(_test_delivery(channel)).title == "来自 GPU Portal 的测试消息"
    assert dict(render(_notice_at(channel, at)).facts)["发送时间"] == "2026-12-03 01:01"
    # The channel's own language wins over its owner's.
    channel.language = "en"
    channel.save()
    assert render(_test_delivery(channel)).title == "Test message from GPU Portal"


def test_a_tenants_channel_keeps_the_sites_language(bob):
    set_preferences(bob, language="zh-hans")
    channel = ChannelFactory(owner=None, tenant=TenantFactory(), kind=ChannelKind.WEBHOOK)
    assert render(_test_delivery(channel)).title == "Test message from GPU Portal"
