"""The tenant's service-account pages: its members see the list, its admins make accounts,
issue (the key shown once) and revoke tokens and disable accounts; another tenant's
people get 404."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests import clients
from tests.tenants import ACTORS, MANAGE_ACME_MEMBERS, SEE_ACME, teams_fixture  # noqa: F401 (teams)
from tokens import services
from tokens.models import ApiToken, ServiceAccount

pytestmark = pytest.mark.django_db

TOKEN_FORM = {"name": "t", "scope": "read", "expires_in_days": 1}


@pytest.fixture
def robot(teams) -> ServiceAccount:
    return services.create_service_account(teams.user("erin"), tenant=teams.acme, name="acme-ci")


def _urls(teams, robot) -> dict[str, str]:
    slug, pk = teams.acme.slug, robot.pk
    token = ApiToken.objects.filter(user=robot.user).first()
    return {
        "list": reverse("tokens:service_account_list", args=[slug]),
        "detail": reverse("tokens:service_account_detail", args=[slug, pk]),
        "disable": reverse("tokens:service_account_disable", args=[slug, pk]),
        "revoke": reverse("tokens:service_token_revoke", args=[slug, pk, token.pk]),
    }


def test_the_tenant_page_links_to_its_service_accounts(teams):
    body = clients.page(teams.user("bob")).get(teams.acme.get_absolute_url()).content.decode()
    assert reverse("tokens:service_account_list", args=[teams.acme.slug]) in body


def test_an_admin_makes_an_account_issues_a_key_shown_once_and_revokes_it(teams):
    client = clients.page(teams.user("erin"))
    url = reverse("tokens:service_account_list", args=[teams.acme.slug])
    response = client.post(url, {"name": "nightly", "description": "GitLab"})
    account = ServiceAccount.objects.get(name="nightly")
    detail = reverse("tokens:service_account_detail", args=[teams.acme.slug, account.pk])
    assert response.status_code == 302 and response["Location"] == detail
    assert client.post(detail, {"name": "x", "scope": "write",
                                "expires_in_days": 400}).status_code == 200  # fmt: skip
    assert not ApiToken.objects.exists()
    response = client.post(detail, {"name": "gitlab", "scope": "write", "expires_in_days": 30})
    assert response.status_code == 302
    token = ApiToken.objects.get(user=account.user)
    first = client.get(detail).content.decode()
    assert 'id="new-api-token"' in first and token.hint.rstrip("…") in first
    assert 'id="new-api-token"' not in client.get(detail).content.decode()
    revoke = reverse("tokens:service_token_revoke", args=[teams.acme.slug, account.pk, token.pk])
    assert client.post(revoke).status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    disable = reverse("tokens:service_account_disable", args=[teams.acme.slug, account.pk])
    assert client.post(disable).status_code == 302
    account.refresh_from_db()
    assert account.disabled_at is not None


@pytest.mark.parametrize("name", ACTORS)
def test_each_user_gets_what_their_role_allows(teams, robot, name):
    services.issue_service_token(teams.user("erin"), robot, name="pipeline")
    urls, client = _urls(teams, robot), clients.page(teams.user(name))
    answers = {
        "list": client.get(urls["list"]).status_code,
        "create": client.post(urls["list"], {"name": "sneaky"}).status_code,
        "detail": client.get(urls["detail"]).status_code,
        "issue": client.post(urls["detail"], TOKEN_FORM).status_code,
        "revoke": client.post(urls["revoke"]).status_code,
        "disable": client.post(urls["disable"]).status_code,
    }
    if name in MANAGE_ACME_MEMBERS:
        assert answers["list"] == 200 and answers["detail"] == 200
        return
    if name in SEE_ACME:
        assert answers == {"list": 200, "create": 403, "detail": 403, "issue": 403,
                           "revoke": 403, "disable": 403}  # fmt: skip
    else:
        assert set(answers.values()) == {404}
    assert list(ServiceAccount.objects.values_list("name", flat=True)) == ["acme-ci"]
    robot.refresh_from_db()
    assert robot.disabled_at is None
    assert ApiToken.objects.filter(user=robot.user, revoked_at__isnull=True).count() == 1
