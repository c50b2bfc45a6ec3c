"""The API's base views: DRF's, with an ``Idempotency-Key`` honoured on every POST
(``portal.idempotency``, docs/api.md "Idempotency").

Each app's API views derive from these, so a new POST runs once per key without anyone
remembering to mix it in; a view that must not take a key derives from DRF's directly and
says why. The classes have no docstrings: drf-spectacular publishes the first docstring up a
view's classes as the description of its operations that have none.
"""

from __future__ import annotations

from rest_framework import viewsets
from rest_framework.views import APIView

from portal.idempotency import IdempotentMixin


class ApiView(IdempotentMixin, APIView):
    pass


class ApiGenericViewSet(IdempotentMixin, viewsets.GenericViewSet):
    pass


class ApiReadOnlyModelViewSet(IdempotentMixin, viewsets.ReadOnlyModelViewSet):
    pass


class ApiModelViewSet(IdempotentMixin, viewsets.ModelViewSet):
    pass
