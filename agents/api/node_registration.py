"""The write side of /api/v1/nodes/: add, change, delete, import and test nodes.

Members keep read access; writes take the node permissions (agents.permissions). The rules
are agents.registration's; this module only maps HTTP onto it: a CSV or YAML body by
content type (or JSON/form ``format`` + ``content``), all-or-nothing imports answered 400
with row errors (``update`` lets rows change registered nodes), connection tests that save
nothing.
"""

from __future__ import annotations

from dataclasses import asdict

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser, FormParser, JSONParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from agents import connection_test, node_audit, node_files, permissions, registration
from agents.api.docs import IMPORT_EXAMPLES, TEST_CONNECTION_EXAMPLES
from portal.api_errors import error_response

MAX_IMPORT_BYTES = 2 * 1024 * 1024


def _rows_refused(rows: list[dict]) -> Response:
    """400 in the API's error shape, each row at fault (row, field, message) in fields.rows;
    built here because DRF would turn the row numbers into strings."""
    return error_response(
        "invalid", _("The import has errors; nothing was written."),
        status.HTTP_400_BAD_REQUEST, fields={"rows": rows},
    )  # fmt: skip


class _TextParser(BaseParser):
    """The raw body as text, bounded: the import validates every row in memory."""

    def parse(self, stream, media_type=None, parser_context=None) -> str:
        raw = stream.read(MAX_IMPORT_BYTES + 1) if stream is not None else b""
        if len(raw) > MAX_IMPORT_BYTES:
            raise ParseError("The body is larger than 2 MiB.")
        try:
            return raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ParseError("The body is not UTF-8 text.") from None


class CSVParser(_TextParser):
    media_type = "text/csv"


class YAMLParser(_TextParser):
    media_type = "*/yaml"  # application/yaml and text/yaml alike


class XYAMLParser(_TextParser):
    media_type = "*/x-yaml"


YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")


class TestConnectionSerializer(serializers.Serializer):
    __test__ = False  # a pytest-looking name, not a test

    agent_url = serializers.CharField(max_length=200)
    token = serializers.CharField(required=False, allow_blank=True, default="")


class ImportSerializer(serializers.Serializer):
    format = serializers.ChoiceField(choices=["csv", "yaml"])
    content = serializers.CharField(max_length=MAX_IMPORT_BYTES, trim_whitespace=False)
    update = serializers.BooleanField(required=False, default=False)


DRY_RUN = OpenApiParameter(
    "dry_run", OpenApiTypes.BOOL, default=False,
    description="Validate every row and report, but write nothing.",
)  # fmt: skip
UPDATE = OpenApiParameter(
    "update", OpenApiTypes.BOOL, default=False,
    description="A row naming a registered node updates it instead of being an error "
    "(also a JSON body field).",
)  # fmt: skip


def _flag(request: Request, name: str) -> bool:
    """A boolean query parameter: absent or empty is false, anything unreadable a 400."""
    raw = request.query_params.get(name, "")
    if not raw.strip():
        return False
    try:
        return serializers.BooleanField().to_internal_value(raw.strip().lower())
    except serializers.ValidationError as exc:
        raise serializers.ValidationError({name: exc.detail}) from None


# Added to NodeViewSet: writes for staff, plus the import and the connection test. (A
# comment, not a docstring: drf-spectacular would publish a class docstring to API users.)
class NodeRegistrationMixin:
    """Added to NodeViewSet: the import and the connection test."""

    @extend_schema(summary=gettext_lazy("Test a connection to an agent"),
                   request=TestConnectionSerializer, responses=OpenApiTypes.OBJECT,
                   examples=TEST_CONNECTION_EXAMPLES)  # fmt: skip
    @action(detail=False, methods=["post"], url_path="test-connection")
    def test_connection(self, request: Request) -> Response:
        """Fetch one snapshot from the agent as the poller would; nothing is saved."""
        data = TestConnectionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        result = connection_test.test_connection(
            data.validated_data["agent_url"], data.validated_data["token"]
        )
        return Response(asdict(result))

    @extend_schema(
        summary=gettext_lazy("Import nodes from a file"),
        request={
            "text/csv": OpenApiTypes.STR,
            "application/yaml": OpenApiTypes.STR,
            "application/json": ImportSerializer,
        },
        parameters=[DRY_RUN, UPDATE],
        responses={201: OpenApiTypes.OBJECT, 200: OpenApiTypes.OBJECT, 400: OpenApiTypes.OBJECT},
        examples=IMPORT_EXAMPLES,
    )
    @action(
        detail=False,
        methods=["post"],
        url_path="import",
        parser_classes=[
            CSVParser,
            YAMLParser,
            XYAMLParser,
            JSONParser,
            FormParser,
            MultiPartParser,
        ],
    )
    def import_nodes(self, request: Request) -> Response:
        """Add many nodes from CSV or YAML, or with ``update`` also change registered ones;
        all or nothing, row errors answered with 400."""
        dry_run, update = _flag(request, "dry_run"), _flag(request, "update")
        if isinstance(request.data, str):
            media = (request.content_type or "").split(";")[0].strip().lower()
            fmt, text = ("yaml" if media in YAML_TYPES else "csv"), request.data
        else:
            data = ImportSerializer(data=request.data)
            data.is_valid(raise_exception=True)
            fmt, text = data.validated_data["format"], data.validated_data["content"]
            update = update or data.validated_data["update"]
        if update and not permissions.can_change_nodes(request.user):
            # The import itself takes add_node (NodePermissions); changing nodes takes more.
            self.permission_denied(request, _("Updating nodes needs the change permission."))
        try:
            rows = node_files.parse(text, fmt, update=update)
        except node_files.ParseError as exc:
            error = {"row": exc.row, "field": exc.field, "message": str(exc)}
            return _rows_refused([error])
        report = registration.import_nodes(
            rows, dry_run=dry_run, update=update, **node_audit.who(request)
        )
        body = {
            "created": report.created,
            "updated": report.updated,
            "unchanged": report.unchanged,
            "dry_run": report.dry_run,
            "errors": [asdict(error) for error in report.errors],
        }
        if not report.ok:  # all or nothing: each row at fault, under fields.rows
            return _rows_refused(body["errors"])
        wrote_new = report.created and not dry_run
        return Response(body, status.HTTP_201_CREATED if wrote_new else status.HTTP_200_OK)
