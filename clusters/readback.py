"""What runs is what the portal shows: the gate pass reads back where the cluster runs an
admitted workload (clusters.devices) and moves the request's allocations onto those cards
(``pools.interface.move_allocation``), so usage, accounting, the idle report and alerts,
which all go by allocation and card, count the cards the workload really holds.

Kubernetes schedules on its own (HAMi's scheduler, the DRA scheduler): the portal placed
the request on cards of its pool when it was approved, the cluster may have chosen others.
A chosen card the pool holds is followed when it has room in the portal's books; one full
there, or a uuid the portal does not know (no card of the pool), is recorded on the
workload (``mismatch``) and shown on the cluster's page. A read-back that cannot be read
(hostile or malformed annotations, claims, a device in no ResourceSlice) is refused alone:
logged, kept on the workload (``readback_error``), and the pass goes on.
"""

from __future__ import annotations

import logging

from django.utils.translation import gettext as _
from kubernetes import client as k8s

from clusters.choices import DEVICE_CLASSES
from clusters.devices import (
    Placement,
    claim_names,
    dra_placement,
    hami_placement,
    plan,
    slice_uuids,
    standalone_claims,
)  # fmt: skip
from clusters.models import Cluster, ClusterWorkload
from clusters.sync import error_text
from clusters.workloads import JOB, Refused, finished, is_gated
from pools.choices import AllocationState
from pools.interface import move_allocation
from pools.models import Allocation, PoolCard
from quotas.models import GpuRequest

logger = logging.getLogger(__name__)

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
MAX_LISTED = 5000  # claims of a namespace, slices of a cluster, read per pass


class Reader:
    """The pass's reads for read-back, each list made at most once a pass and only when a
    workload needs it (a HAMi cluster lists nothing more)."""

    def __init__(self, kube):
        self.kube = kube
        self._claims: dict[str, dict[str, dict]] = {}
        self._slices: dict | None = None
        self._failed: dict[str, Exception] = {}  # a list that failed fails once a pass

    def _items(self, path: str) -> list[dict]:
        if path in self._failed:
            raise self._failed[path]
        try:
            items = self.kube.call("GET", path).get("items", [])
        except Exception as exc:
            self._failed[path] = exc
            raise
        return [i for i in items[:MAX_LISTED] if isinstance(i, dict)] if isinstance(
            items, list) else []  # fmt: skip

    def claims(self, namespace: str) -> dict[str, dict]:
        if namespace not in self._claims:
            named = {}
            for claim in self._items(CLAIMS.format(namespace=namespace)):
                name = (claim.get("metadata") or {}).get("name")
                if isinstance(name, str):
                    named[name] = claim
            self._claims[namespace] = named
        return self._claims[namespace]

    def slices(self) -> dict:
        if self._slices is None:
            self._slices = slice_uuids(self._items(SLICES))
        return self._slices


def _placement(reader: Reader, cluster: Cluster, pod: dict) -> Placement | None:
    device_class = DEVICE_CLASSES.get(cluster.enforcement)
    if not device_class:
        return hami_placement(pod)
    if not claim_names(pod):
        return None
    namespace = pod["metadata"]["namespace"]
    return dra_placement(pod, reader.claims(namespace), reader.slices(), device_class)


def _running(link: ClusterWorkload, obj: dict, pods) -> list[dict]:
    """The Pods holding the request's GPUs: the Pod, or the Job's Pods let run."""
    if link.kind != JOB:
        return [obj]
    return [p for p in pods if not is_gated(p, False) and not finished(p)]


def read_back(
    reader: Reader, cluster: Cluster, link: ClusterWorkload, req: GpuRequest, obj: dict, pods=()
) -> None:
    """Read where the cluster runs the admitted workload and make the portal's books
    follow; a refused read-back is recorded on the link, never raised."""
    nodes, uuids, errors = [], [], []
    for pod in _running(link, obj, pods):
        meta = pod.get("metadata") or {}
        try:
            placement = _placement(reader, cluster, pod)
        except Refused as exc:
            logger.warning("cluster %s: read-back of Pod %s/%s refused: %s", cluster.name,
                           meta.get("namespace"), meta.get("name"), exc)  # fmt: skip
            errors.append(f"{meta.get('name', '')[:63]}: {exc}")
            continue
        except Exception as exc:  # the API away, a 403 on the lists: the next pass
            logger.warning("cluster %s: read-back of %s/%s failed: %s", cluster.name,
                           meta.get("namespace"), meta.get("name"), exc)  # fmt: skip
            errors.append(error_text(exc))
            continue
        if placement is not None:
            nodes += [n for n in placement.nodes if n not in nodes]
            uuids += placement.uuids
    fields = {"readback_error": " ".join(errors)[:2000]}
    if uuids:
        fields |= {"node": ", ".join(nodes)[:255], "devices": uuids[:64],
                   "mismatch": follow(cluster, req, uuids)}  # fmt: skip
    changed = {k: v for k, v in fields.items() if getattr(link, k) != v}
    if changed:
        for key, value in changed.items():
            setattr(link, key, value)
        link.save(update_fields=[*changed, "updated"])


def follow(cluster: Cluster, req: GpuRequest, uuids: list[str]) -> str:
    """Move the request's allocations to the cluster's cards where the pool holds them and
    has room; what cannot follow, said in words (empty: the books match)."""
    held = list(
        Allocation.objects.filter(lease_id=req.lease_id, state=AllocationState.ACTIVE)
        .order_by("pk")
        .values_list("pk", "gpu__uuid")
    )
    in_pool = PoolCard.objects.filter(pool_id=cluster.pool_id, gpu__uuid__in=set(uuids))
    cards = dict(in_pool.values_list("gpu__uuid", "gpu_id"))
    steps = plan(held, uuids, cards.keys())
    said = []
    refused: dict[str, list[str]] = {}  # why -> cards
    for allocation_id, uuid in steps.moves:
        reason = _("read back from cluster %(name)s") % {"name": cluster.name}
        why: list[str] = []
        if move_allocation(allocation_id, cards[uuid], reason, why=why) is None:
            refused.setdefault(why[0] if why else _("full in the portal's books"), []).append(uuid)
    for why, full in refused.items():
        said.append(_("Runs on %(cards)s, %(why)s: the allocation stays where it is.")
                    % {"cards": ", ".join(full), "why": why})  # fmt: skip
    if steps.unknown:
        said.append(_("Runs on %(cards)s, not a card of pool %(pool)s.")
                    % {"cards": ", ".join(steps.unknown)[:500],
                       "pool": cluster.pool.name})  # fmt: skip
    if steps.doubled:
        said.append(_("Runs several vGPUs on %(cards)s: the portal holds one per card.")
                    % {"cards": ", ".join(steps.doubled)[:500]})  # fmt: skip
    if steps.extra:
        said.append(_("Runs %(n)s vGPUs more than its request holds.") % {"n": steps.extra})
    return " ".join(said)[:2000]


def delete_claims(kube, cluster: Cluster, link: ClusterWorkload, obj: dict | None) -> None:
    """Delete the standalone ResourceClaims of a workload whose request was released, on a
    DRA cluster: only those it named itself, not owned by anyone and used by no other
    consumer (claims made from a template go with their Pod). An error is raised: the
    next pass tries again."""
    if cluster.enforcement not in DEVICE_CLASSES:
        return  # a HAMi cluster's claims are none of the portal's business
    uid = link.uid
    for name in link.claims or (standalone_claims(obj) if obj else []):
        path = CLAIMS.format(namespace=link.namespace) + f"/{name}"
        claim = kube.get(path)
        if claim is None:
            continue
        meta = claim.get("metadata") or {}
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        others = [r for r in reserved if isinstance(r, dict) and r.get("uid") != uid]
        if meta.get("ownerReferences") or others:
            logger.warning("cluster %s: ResourceClaim %s/%s is owned or used by another: "
                           "kept", link.cluster_id, link.namespace, name)  # fmt: skip
            continue
        body = {"kind": "DeleteOptions", "apiVersion": "v1",
                "preconditions": {"uid": meta.get("uid")}}  # fmt: skip
        try:
            kube.call("DELETE", path, body)
        except k8s.ApiException as exc:
            if exc.status not in (404, 409):  # gone already, or another claim by that name
                raise
