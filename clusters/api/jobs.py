"""Jobs the portal makes in a cluster for its caller (``/api/v1/clusters/{cluster}/jobs/``):
create one, read one back with what the cluster says of it now (clusters.submit).

Members of the tenant a namespace is mapped to (and platform admins) may submit there; a
cluster with no namespace of the caller's tenants is 404, a namespace of another tenant
403, bad input 400 naming the field with nothing written, a cluster that does not answer
503 with ``Retry-After``.
"""

from __future__ import annotations

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from audit.interface import request_address
from clusters import submit
from clusters.api.docs import JOB_CREATE_EXAMPLES, JOB_OPERATIONS, JOB_READ_EXAMPLES
from clusters.jobspec import MAX_ARG, MAX_ARGS, MAX_ENV_VALUE, MAX_IMAGE, JobAsk
from clusters.models import Cluster, ClusterWorkload
from clusters.workloads import MAX_HOURS, MAX_MEMORY_MIB, MAX_VGPUS
from portal.api_errors import error_response
from portal.api_schema import ERROR
from portal.api_views import ApiGenericViewSet
from quotas.interface import visible_requests


def _text(max_length: int) -> serializers.CharField:
    return serializers.CharField(max_length=max_length, allow_blank=True, trim_whitespace=False)


class ClusterJobCreateSerializer(serializers.Serializer):
    namespace = serializers.CharField(max_length=63, help_text=_("A mapped namespace."))
    image = serializers.CharField(max_length=MAX_IMAGE, help_text=_("The container image."))
    command = serializers.ListField(child=_text(MAX_ARG), max_length=MAX_ARGS, default=list)
    args = serializers.ListField(child=_text(MAX_ARG), max_length=MAX_ARGS, default=list)
    env = serializers.DictField(child=_text(MAX_ENV_VALUE), default=dict)
    gpus = serializers.IntegerField(min_value=1, max_value=MAX_VGPUS, default=1)
    compute_pct = serializers.IntegerField(min_value=1, max_value=100, required=False,
                                           allow_null=True)  # fmt: skip
    memory_mib = serializers.IntegerField(min_value=1, max_value=MAX_MEMORY_MIB, required=False,
                                          allow_null=True)  # fmt: skip
    duration_hours = serializers.IntegerField(min_value=1, max_value=MAX_HOURS, required=False,
                                              allow_null=True)  # fmt: skip
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class ClusterJobSerializer(serializers.ModelSerializer):
    request_state = serializers.CharField(source="request.state", read_only=True, default=None)
    job = serializers.SerializerMethodField(help_text=_(
        "What the cluster says of the Job now: outcome (waiting, running, succeeded, failed, "
        "gone; unknown, with error, when the cluster does not answer) and the counts of its "
        "Pods (active, succeeded, failed)."))  # fmt: skip

    class Meta:
        model = ClusterWorkload
        fields = ["id", "cluster", "namespace", "kind", "name", "uid", "state", "request",
                  "request_state", "error", "job", "created"]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_job(self, link: ClusterWorkload) -> dict | None:
        # Read from the cluster by the view, on a read of one Job (and "waiting" once made).
        return self.context.get("job")


CLUSTER_REF = OpenApiParameter("cluster_ref", str, OpenApiParameter.PATH,
                               description=_("The cluster's id or name."))  # fmt: skip
JOB_ID = OpenApiParameter("id", int, OpenApiParameter.PATH,
                          description=_("The Job's id, as its create answered."))  # fmt: skip


@extend_schema(parameters=[CLUSTER_REF])
@extend_schema_view(
    **{name: extend_schema(description=text) for name, text in JOB_OPERATIONS.items()}
)
class ClusterJobViewSet(mixins.RetrieveModelMixin, ApiGenericViewSet):
    serializer_class = ClusterJobSerializer

    def cluster(self) -> Cluster:
        ref = self.kwargs["cluster_ref"]
        rows = submit.usable_clusters(self.request.user)
        return (
            get_object_or_404(rows, pk=int(ref))
            if ref.isascii() and ref.isdigit()
            else get_object_or_404(rows, name=ref)
        )

    def get_queryset(self) -> QuerySet[ClusterWorkload]:
        return ClusterWorkload.objects.select_related("cluster", "request").filter(
            cluster=self.cluster(), request__in=visible_requests(self.request.user)
        )

    @extend_schema(summary=_("Read a Job made in a cluster"), examples=JOB_READ_EXAMPLES,
                   parameters=[JOB_ID])  # fmt: skip
    def retrieve(self, request: Request, *args, **kwargs) -> Response:
        link = self.get_object()
        context = {**self.get_serializer_context(), "job": submit.job_state(link)}
        return Response(ClusterJobSerializer(link, context=context).data)

    @extend_schema(summary=_("Make a Job in a cluster"), request=ClusterJobCreateSerializer,
                   responses={201: ClusterJobSerializer, 502: ERROR, 503: ERROR},
                   examples=JOB_CREATE_EXAMPLES)  # fmt: skip
    def create(self, request: Request, *args, **kwargs) -> Response:
        cluster = self.cluster()
        body = ClusterJobCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        ask = JobAsk(**{**data, "reason": data.get("reason") or ""})
        try:
            link = submit.submit_job(cluster, request.user, ask, address=request_address(request))
        except submit.Invalid as exc:
            raise exceptions.ValidationError(exc.errors) from exc
        except submit.NotYours as exc:
            raise exceptions.PermissionDenied(
                _("The namespace belongs to a tenant you are not a member of.")
            ) from exc
        except submit.Unavailable as exc:
            text = (
                str(exc)
                if exc.busy
                else _("The cluster did not answer: %(error)s") % {"error": str(exc)[:300]}
            )
            return error_response(
                "cluster_unavailable",
                text,
                status.HTTP_503_SERVICE_UNAVAILABLE,
                headers={"Retry-After": str(exc.retry_after)},
            )
        except submit.ClusterRefused as exc:
            return error_response(
                "cluster_refused",
                _("The cluster refused the Job: %(error)s") % {"error": str(exc)[:300]},
                status.HTTP_502_BAD_GATEWAY,
            )
        context = {**self.get_serializer_context(), "job": {"outcome": "waiting"}}
        return Response(ClusterJobSerializer(link, context=context).data,
                        status=status.HTTP_201_CREATED)  # fmt: skip
