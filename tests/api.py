"""Generic REST API tests, written once and declared per endpoint.

A test class mixes in what the endpoint offers and declares who may do what::

    class TestNodeAPI(api.ReadTests, api.WriteTests):
        url = "/api/v1/nodes/"
        model = Node
        writers = ("alice", "carol")
        create_data = {...}
        ...

        @pytest.fixture
        def instance(self) -> Node:
            return NodeFactory()

Every operation is then tried by every named actor (tests/conftest.py) and by an anonymous
caller: an actor in the allowed group gets the answer and the change, anyone else is
refused and nothing changes. Bad input is a 400 that changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any

import pytest
from django.db.models import Model
from rest_framework.response import Response
from rest_framework.test import APIClient

from tests import clients

# Who tries each operation: the named actors of tests/conftest.py and an anonymous caller.
ACTORS = ("anonymous", "alice", "bob", "carol", "dave")
SIGNED_IN = tuple(name for name in ACTORS if name != "anonymous")

# What an anonymous caller gets. DRF answers 403 while session authentication comes first,
# 401 (with WWW-Authenticate) once token authentication does; a class may declare either.
ANONYMOUS_REFUSED: Collection[int] = (401, 403)


def each_actor(test: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``test`` once per actor of the class (``actors``), given as the ``actor`` fixture."""
    test.each_actor = True
    return test


class EndpointTests:
    """What every endpoint declares; the mixins below hold the tests."""

    url: str  # the list URL, with its trailing slash
    model: type[Model]
    actors: tuple[str, ...] = ACTORS
    readers: tuple[str, ...] = SIGNED_IN
    anonymous_refused: Collection[int] = ANONYMOUS_REFUSED
    refused: int = 403

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if getattr(metafunc.function, "each_actor", False):
            metafunc.parametrize("actor", self.actors, indirect=True)

    @pytest.fixture
    def instance(self) -> Model:
        """The object the detail tests read, change and delete; each class builds its own."""
        raise NotImplementedError

    @pytest.fixture
    def reader(self, request: pytest.FixtureRequest) -> Model:
        """The first declared reader, for the tests that need one who may read."""
        return request.getfixturevalue(self.readers[0])

    def detail_url(self, instance: Model) -> str:
        return f"{self.url}{instance.pk}/"

    def secrets(self, instance: Model) -> Iterable[str]:
        """Values no answer may contain, whoever asks (tokens, passwords)."""
        return ()

    # Fields that only some readers get (addresses, hints, raw errors): the others get each
    # item without those keys. Empty: every reader sees every field.
    restricted_fields: tuple[str, ...] = ()
    restricted_readers: tuple[str, ...] = ()

    def restricted_values(self, instance: Model) -> Iterable[str]:
        """What the restricted fields hold for ``instance``: absent from the others' answers."""
        return ()

    # --- helpers -----------------------------------------------------------------------

    def client(self, actor: Model | None) -> APIClient:
        return clients.api(actor)

    def allowed(self, actor: Model | None, group: tuple[str, ...]) -> bool:
        return actor is not None and actor.get_username() in group

    def assert_refused(self, response: Response, actor: Model | None) -> None:
        if actor is None:
            assert response.status_code in self.anonymous_refused, response.content
            if response.status_code == 401:
                assert response.has_header("WWW-Authenticate")
        else:
            assert response.status_code == self.refused, response.content

    def assert_no_secrets(self, response: Response, instance: Model) -> None:
        body = response.content.decode()
        for secret in self.secrets(instance):
            assert secret not in body

    def assert_restricted(self, response: Response, actor: Model | None, instance: Model) -> None:
        if not self.restricted_fields:
            return
        data = response.json()
        items = _items(data) if "id" not in data else [data]
        if self.allowed(actor, self.restricted_readers):
            assert all(set(self.restricted_fields) <= set(item) for item in items), items
        else:
            assert not [set(self.restricted_fields) & set(item) for item in items if
                        set(self.restricted_fields) & set(item)], items  # fmt: skip
            body = response.content.decode()
            assert not [value for value in self.restricted_values(instance) if value in body]

    def row(self, instance: Model) -> dict[str, Any] | None:
        """The instance's row as stored now, to tell whether a request changed it."""
        return self.model.objects.filter(pk=instance.pk).values().first()


def _items(data: Any) -> list[dict[str, Any]]:
    return data["results"] if isinstance(data, dict) and "results" in data else data


class ReadTests(EndpointTests):
    """List and retrieve: ``readers`` see the instance, anyone else is refused."""

    @each_actor
    def test_list_answers_each_actor(self, actor, instance) -> None:
        response = self.client(actor).get(self.url)
        if self.allowed(actor, self.readers):
            assert response.status_code == 200, response.content
            assert instance.pk in [item["id"] for item in _items(response.json())]
            self.assert_no_secrets(response, instance)
            self.assert_restricted(response, actor, instance)
        else:
            self.assert_refused(response, actor)

    @each_actor
    def test_retrieve_answers_each_actor(self, actor, instance) -> None:
        response = self.client(actor).get(self.detail_url(instance))
        if self.allowed(actor, self.readers):
            assert response.status_code == 200, response.content
            assert response.json()["id"] == instance.pk
            self.assert_no_secrets(response, instance)
            self.assert_restricted(response, actor, instance)
        else:
            self.assert_refused(response, actor)

    def test_retrieve_of_an_unknown_id_is_404(self, reader, instance) -> None:
        assert self.client(reader).get(f"{self.url}999999999/").status_code == 404


class WriteTests(EndpointTests):
    """Create, update and delete: ``writers`` change the data, anyone else is refused and
    changes nothing; bad input from a writer is a 400 that changes nothing."""

    writers: tuple[str, ...] = ("alice",)
    create_data: dict[str, Any]
    bad_create_data: dict[str, Any]
    update_data: dict[str, Any]
    bad_update_data: dict[str, Any]

    @pytest.fixture
    def writer(self, request: pytest.FixtureRequest) -> Model:
        """The first declared writer, for the tests that need one who may write."""
        return request.getfixturevalue(self.writers[0])

    def assert_echoes(self, response: Response, sent: dict[str, Any]) -> None:
        data = response.json()
        shown = {key: value for key, value in sent.items() if key in data}
        assert shown == {key: data[key] for key in shown}

    @each_actor
    def test_create_answers_each_actor(self, actor, instance) -> None:
        before = self.model.objects.count()
        response = self.client(actor).post(self.url, self.create_data, format="json")
        if self.allowed(actor, self.writers):
            assert response.status_code == 201, response.content
            assert self.model.objects.count() == before + 1
            assert self.model.objects.filter(pk=response.json()["id"]).exists()
            self.assert_echoes(response, self.create_data)
        else:
            self.assert_refused(response, actor)
            assert self.model.objects.count() == before

    @each_actor
    def test_update_answers_each_actor(self, actor, instance) -> None:
        before = self.row(instance)
        client = self.client(actor)
        response = client.patch(self.detail_url(instance), self.update_data, format="json")
        if self.allowed(actor, self.writers):
            assert response.status_code == 200, response.content
            self.assert_echoes(response, self.update_data)
            assert self.row(instance) != before
            self.assert_no_secrets(response, instance)
        else:
            self.assert_refused(response, actor)
            assert self.row(instance) == before

    @each_actor
    def test_delete_answers_each_actor(self, actor, instance) -> None:
        response = self.client(actor).delete(self.detail_url(instance))
        if self.allowed(actor, self.writers):
            assert response.status_code == 204, response.content
            assert self.row(instance) is None
        else:
            self.assert_refused(response, actor)
            assert self.row(instance) is not None

    def test_create_with_bad_input_is_400_and_changes_nothing(self, writer, instance) -> None:
        before = self.model.objects.count()
        response = self.client(writer).post(self.url, self.bad_create_data, format="json")
        assert response.status_code == 400, response.content
        assert set(error_fields(response)) <= set(self.bad_create_data) | {"non_field_errors"}
        assert self.model.objects.count() == before

    def test_update_with_bad_input_is_400_and_changes_nothing(self, writer, instance) -> None:
        before = self.row(instance)
        response = self.client(writer).patch(
            self.detail_url(instance), self.bad_update_data, format="json"
        )
        assert response.status_code == 400, response.content
        assert set(error_fields(response)) <= set(self.bad_update_data) | {"non_field_errors"}
        assert self.row(instance) == before


class ReadOnlyTests(EndpointTests):
    """An endpoint that only reads: every write is 405 to those who may read, refused to
    anyone else, and changes nothing."""

    @each_actor
    def test_writes_answer_each_actor_and_change_nothing(self, actor, instance) -> None:
        client, url = self.client(actor), self.detail_url(instance)
        before, count = self.row(instance), self.model.objects.count()
        responses = [
            client.post(self.url, {}, format="json"),
            client.put(url, {}, format="json"),
            client.patch(url, {}, format="json"),
            client.delete(url),
        ]
        for response in responses:
            if self.allowed(actor, self.readers):
                assert response.status_code == 405, response.content
            else:
                self.assert_refused(response, actor)
        assert self.row(instance) == before and self.model.objects.count() == count


def error_fields(response: Response) -> dict[str, Any]:
    """The field errors of a 400, in DRF's plain shape or the API's ``{"error": {...}}`` one."""
    body = response.json()
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body["error"].get("fields") or {}
    return body if isinstance(body, dict) else {}
