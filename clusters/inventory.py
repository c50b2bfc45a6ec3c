"""A cluster's nodes and cards, read from the cluster itself: its Nodes and, on a DRA
cluster, the ``resource.k8s.io/v1`` ResourceSlices of its driver; on a HAMi cluster, the
annotation HAMi's device plugin writes on each node, ``hami.io/node-nvidia-register``.

Each node with GPUs becomes a portal node of source Kubernetes (read-only: never polled,
never sent a desired state), its cards GPU rows by UUID in the cluster's pool, so placement
and the fleet pages see them (agents.interface records them). A node whose annotation or
slices are malformed is refused alone: logged, its error kept for the cluster's page, its
cards as they were; the other nodes are recorded.

Reading (``read_nodes``, ``hami_cards``, ``dra_cards``) is plain functions over the API's
JSON; recording (``record``) goes through agents' and pools' interfaces.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext as _
from kubernetes import client as k8s
from kubernetes.utils import parse_quantity

from agents.choices import NodeSource
from agents.interface import SeenCard, record_read_only_node
from clusters.choices import DEVICE_CLASSES
from clusters.models import Cluster, ClusterNode
from pools.interface import add_cards

logger = logging.getLogger(__name__)

HAMI_REGISTER = "hami.io/node-nvidia-register"
CLUSTER_LABEL = "gpu-portal.io/cluster"
NODE_LIST, SLICE_LIST = "/api/v1/nodes", "/apis/resource.k8s.io/v1/resourceslices"
PAGE = 500  # objects a list call asks for at once (limit / continue)
MAX_NODES, MAX_SLICES = 5000, 20000  # read per cluster and pass; beyond: reported, not read
MAX_ANNOTATION = 64 * 1024  # characters of HAMi's annotation
MAX_MEMORY_MIB = 16 * 1024 * 1024  # 16 TiB: no card has more
MAX_INDEX = 1023
# A card's UUID as the drivers write it (GPU-..., MIG-...): what a card's row can hold.
_UUID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")
# A node's name (RFC 1123 subdomain).
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_INTEGER = re.compile(r"^[0-9]{1,9}$")
# DRA devices that are whole cards: NVIDIA's driver's "gpu" (its "mig" devices are parts of
# a card, listed beside it), HAMi's driver's "hami-gpu".
CARD_TYPES = {"gpu", "hami-gpu"}


class Refused(ValueError):
    """A node's cards that cannot be read: the message says why, to the log and the page."""


@dataclass
class KubeNode:
    name: str
    online: bool
    why_offline: str = ""
    cards: list[SeenCard] = field(default_factory=list)


def _text(value, what: str, size: int = 128) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > size:
        raise Refused(_("%(what)s must be text of 1 to %(size)s characters, not %(value)s.")
                      % {"what": what, "size": size, "value": repr(value)[:40]})  # fmt: skip
    if not value.isprintable():
        raise Refused(_("%(what)s has characters that cannot be shown.") % {"what": what})
    return value.strip()


def _uuid(value) -> str:
    if not isinstance(value, str) or not _UUID.match(value):
        raise Refused(_("Not a card UUID: %(value)s.") % {"value": repr(value)[:40]})
    return value


def _count(value, what: str, low: int, high: int) -> int:
    """A whole number (JSON number or its digits as text) within bounds; never a bool."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _INTEGER.match(value.strip()):
        number = int(value)
    else:
        number = None
    if number is None or not low <= number <= high:
        raise Refused(
            _("%(what)s must be a whole number from %(low)s to %(high)s, not %(value)s.")
            % {"what": what, "low": low, "high": high, "value": repr(value)[:40]}
        )
    return number


def _flag(value, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise Refused(_("%(what)s must be true or false, not %(value)s.")
                  % {"what": what, "value": repr(value)[:40]})  # fmt: skip


def _hami_model(kind: str) -> str:
    # HAMi writes "NVIDIA-" before NVML's name ("NVIDIA-NVIDIA A100-SXM4-80GB"): without
    # it, the model reads as the agents' (NVML's), so pools by model match either.
    return kind.removeprefix("NVIDIA-") or kind


def _hami_card(entry: dict, position: int) -> SeenCard:
    uuid = _uuid(entry.get("id"))
    memory = _count(entry.get("devmem"), f"{uuid} devmem", 1, MAX_MEMORY_MIB)
    model = _hami_model(_text(entry.get("type"), f"{uuid} type"))
    index = entry.get("index")
    index = position if index is None else _count(index, f"{uuid} index", 0, MAX_INDEX)
    healthy = _flag(entry.get("health", True), f"{uuid} health")
    return SeenCard(uuid=uuid, index=index, model=model, memory_mib=memory, healthy=healthy,
                    detail="" if healthy else _("HAMi reports the card unhealthy"))  # fmt: skip


_LEGACY_KEYS = ("id", "count", "devmem", "devcore", "type", "numa", "health")


def hami_cards(value) -> list[SeenCard]:
    """HAMi's ``hami.io/node-nvidia-register``: the JSON list HAMi writes since v2.5
    (``[{"id", "count", "devmem", "devcore", "type", "numa", "health", "index", "mode"}]``)
    or the older colon-separated form ``uuid,count,devmem,devcore,type,numa,health[,index,
    mode]:``. Memory is MiB; a card listed twice, or more cards than a node may hold, is a
    refusal."""
    if not isinstance(value, str):
        raise Refused(_("The annotation %(key)s is not text.") % {"key": HAMI_REGISTER})
    if len(value) > MAX_ANNOTATION:
        raise Refused(_("The annotation %(key)s is longer than %(max)s characters.")
                      % {"key": HAMI_REGISTER, "max": MAX_ANNOTATION})  # fmt: skip
    text = value.strip()
    if text.startswith(("[", "{")):
        try:
            entries = json.loads(text)
        except ValueError:
            raise Refused(_("The annotation %(key)s is not valid JSON.")
                          % {"key": HAMI_REGISTER}) from None  # fmt: skip
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise Refused(_("The annotation %(key)s is not a list of devices.")
                          % {"key": HAMI_REGISTER})  # fmt: skip
    else:
        entries = []
        for part in (p for p in text.split(":") if p.strip()):
            fields = part.split(",")
            if len(fields) not in (7, 9):
                raise Refused(_("A device of %(key)s has %(n)s fields, not 7 or 9.")
                              % {"key": HAMI_REGISTER, "n": len(fields)})  # fmt: skip
            entry = dict(zip(_LEGACY_KEYS, fields, strict=False))
            if len(fields) == 9:
                entry["index"] = fields[7]
            entries.append(entry)
    _check_count(len(entries))
    cards = [_hami_card(entry, position) for position, entry in enumerate(entries)]
    return _distinct(cards)


def _check_count(n: int) -> None:
    if n > settings.GPU_MAX_CARDS_PER_NODE:
        raise Refused(_("%(n)s cards on one node: at most %(max)s.")
                      % {"n": n, "max": settings.GPU_MAX_CARDS_PER_NODE})  # fmt: skip


def _distinct(cards: list[SeenCard]) -> list[SeenCard]:
    uuids = [c.uuid for c in cards]
    if len(set(uuids)) != len(uuids):
        raise Refused(_("A card is listed twice on the node."))
    return cards


def _memory_mib(value, what: str) -> int:
    """A DRA capacity quantity ('80Gi', '81559Mi', bytes) as whole MiB (bytes past the last
    MiB dropped), from 1 MiB to 16 TiB; '1e30', '-1Gi', 'lots' and fractions of a byte are
    refused, never guessed."""
    quantity = value.get("value") if isinstance(value, dict) else None
    try:
        parsed = (
            parse_quantity(quantity)
            if isinstance(quantity, str) and len(quantity) <= 64 else None
        )  # fmt: skip
    except (ValueError, InvalidOperation):
        parsed = None
    if parsed is not None and (not parsed.is_finite() or parsed != parsed.to_integral_value()):
        parsed = None
    mib = None if parsed is None else int(parsed // Decimal(1024 * 1024))
    if mib is None or not 1 <= mib <= MAX_MEMORY_MIB:
        raise Refused(_("%(what)s must be a quantity from 1Mi to 16Ti, not %(value)s.")
                      % {"what": what, "value": repr(quantity)[:40]})  # fmt: skip
    return mib


def _attribute(attributes: dict, driver: str, name: str):
    """An attribute by its plain name or qualified by the driver's domain; its one value."""
    found = attributes.get(name, attributes.get(f"{driver}/{name}"))
    if not isinstance(found, dict):
        return None
    values = [v for k, v in found.items() if k in ("string", "int", "bool", "version")]
    return values[0] if len(values) == 1 else None


def _dra_card(device: dict, driver: str, position: int) -> SeenCard | None:
    """A whole card from a ResourceSlice's device; None for a device that is not one (a MIG
    part, a VFIO passthrough, another driver's kind)."""
    if not isinstance(device, dict):
        raise Refused(_("A device of the ResourceSlice is not an object."))
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    if not isinstance(attributes, dict) or not isinstance(capacity, dict):
        raise Refused(_("A device's attributes or capacity is not an object."))
    kind = _attribute(attributes, driver, "type")
    if kind is not None and kind not in CARD_TYPES:
        return None
    uuid = _attribute(attributes, driver, "uuid")
    if uuid is None:  # both drivers publish one: a device's name is only its node's
        raise Refused(_("A device (%(name)s) has no uuid attribute.")
                      % {"name": repr(device.get("name"))[:40]})  # fmt: skip
    uuid = _uuid(uuid)
    memory = _memory_mib(capacity.get("memory", capacity.get(f"{driver}/memory")),
                         f"{uuid} capacity memory")  # fmt: skip
    model = _text(_attribute(attributes, driver, "productName") or "unknown", f"{uuid} productName")
    index = _attribute(attributes, driver, "index")
    index = position if index is None else _count(index, f"{uuid} index", 0, MAX_INDEX)
    return SeenCard(uuid=uuid, index=index, model=model, memory_mib=memory)


def _current(slices: list[dict], driver: str) -> list[dict]:
    """The driver's slices of the newest generation of each of its pools (a driver
    republishing a pool leaves the older generation's slices for a while)."""
    newest: dict[str, int] = {}
    mine = []
    for obj in slices:
        spec = obj.get("spec") if isinstance(obj, dict) else None
        if not isinstance(spec, dict) or spec.get("driver") != driver:
            continue
        pool = spec.get("pool") if isinstance(spec.get("pool"), dict) else {}
        generation = pool.get("generation", 0)
        generation = generation if isinstance(generation, int) else -1
        key = str(pool.get("name", ""))
        newest[key] = max(newest.get(key, -1), generation)
        mine.append((key, generation, spec))
    return [spec for key, generation, spec in mine if generation == newest[key]]


def dra_cards(slices: list[dict], driver: str) -> tuple[dict[str, list[SeenCard]], dict[str, str]]:
    """The whole cards of the driver's ResourceSlices, by node: ({node: cards}, {node: why
    refused}). A slice without a ``nodeName`` (devices reached over the network) is no
    node's. One malformed device refuses its node's cards, no other node's."""
    cards: dict[str, list[SeenCard]] = {}
    refused: dict[str, str] = {}
    for spec in _current(slices, driver):
        node = spec.get("nodeName")
        if not isinstance(node, str) or not node or node in refused:
            continue
        devices = spec.get("devices") or []
        try:
            if not isinstance(devices, list):
                raise Refused(_("The ResourceSlice's devices is not a list."))
            _check_count(len(devices) + len(cards.get(node, [])))
            for device in devices:
                card = _dra_card(device, driver, len(cards.get(node, [])))
                if card is not None:
                    cards.setdefault(node, []).append(card)
            _distinct(cards.get(node, []))
        except Refused as exc:
            refused[node] = str(exc)
            cards.pop(node, None)
    return cards, refused


def _ready(node: dict) -> tuple[bool, str]:
    spec = node.get("spec") if isinstance(node.get("spec"), dict) else {}
    status = node.get("status") if isinstance(node.get("status"), dict) else {}
    if spec.get("unschedulable") is True:
        return False, _("cordoned in the cluster (unschedulable)")
    conditions = status.get("conditions") if isinstance(status.get("conditions"), list) else []
    ready = any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
                for c in conditions)  # fmt: skip
    return ready, "" if ready else _("not Ready in the cluster")


def read_nodes(
    nodes: list[dict], slices: list[dict] | None, enforcement: str
) -> tuple[dict[str, KubeNode], dict[str, str]]:
    """The cluster's nodes with their cards ({name: node}, every node with a fit name, its
    cards none where it has none) and the nodes refused ({name: why}); ``slices`` in the DRA
    modes, None with HAMi."""
    found: dict[str, KubeNode] = {}
    refused: dict[str, str] = {}
    by_slices: dict[str, list[SeenCard]] = {}
    if slices is not None:
        by_slices, refused = dra_cards(slices, DEVICE_CLASSES[enforcement])
    for obj in nodes:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or len(name) > 253 or not _NODE_NAME.match(name):
            logger.warning("cluster inventory: a node with an unfit name skipped: %r",
                           repr(name)[:100])  # fmt: skip
            continue
        online, why = _ready(obj)
        node = found[name] = KubeNode(name, online, why)
        if slices is not None:
            node.cards = by_slices.get(name, [])
            continue
        notes = meta.get("annotations")
        value = notes.get(HAMI_REGISTER) if isinstance(notes, dict) else None
        if value is not None:
            try:
                node.cards = hami_cards(value)
            except Refused as exc:
                refused[name] = str(exc)
    refused = {n: why for n, why in refused.items() if n in found}  # a slice's node gone
    for name in refused:
        del found[name]
    return found, refused


def list_all(api: k8s.ApiClient, path: str, cap: int) -> tuple[list[dict], bool]:
    """Every object of a cluster-scoped collection, a page at a time: (objects, whether
    more than ``cap`` were there, the rest left unread). A cluster that answers an empty
    page with a token, the same token twice, or more pages than ``cap`` needs is read as
    cut at its cap (the rest left unread), so no answer keeps the loop going."""
    items: list[dict] = []
    token = ""
    seen: set[str] = set()
    for _page in range(cap // PAGE + 2):
        query = [("limit", str(PAGE))] + ([("continue", token)] if token else [])
        answer = api.call_api(
            path, "GET", query_params=query, header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"], _preload_content=False,
            _request_timeout=settings.CLUSTER_TIMEOUT_S, _return_http_data_only=True,
        )  # fmt: skip
        page = json.loads(answer.data)
        page_items = page.get("items") if isinstance(page, dict) else None
        if not isinstance(page_items, list):
            raise ValueError(f"{path}: the answer is not a list")
        items += page_items
        if len(items) > cap:
            return items[:cap], True
        meta = page.get("metadata") if isinstance(page.get("metadata"), dict) else {}
        token = meta.get("continue") or ""
        if not isinstance(token, str) or not token:
            return items, False
        if not page_items or token in seen:
            return items, True
        seen.add(token)
    return items, True


@dataclass
class Outcome:
    nodes: int = 0  # nodes with cards recorded
    cards: int = 0
    created: int = 0
    changed: int = 0
    lost: int = 0
    refused: dict[str, str] = field(default_factory=dict)


@transaction.atomic
def _record_one(cluster: Cluster, row: ClusterNode, node: KubeNode | None, outcome: Outcome):
    # Two passes of one cluster at once (the periodic one and one queued after an edit):
    # the row locked and read again, so the second sees the node the first made.
    row = ClusterNode.objects.select_for_update().filter(pk=row.pk).first()
    if row is None:
        return
    gone = node is None
    recorded = record_read_only_node(
        source=NodeSource.KUBERNETES, node_id=row.node_id, name=row.name,
        name_suffix=f"@{cluster.name}", hostname=row.name,
        labels={CLUSTER_LABEL: cluster.name[:63]},
        online=not gone and node.online,
        error=_("no longer in the cluster") if gone else node.why_offline,
        cards=[] if gone else node.cards,
    )  # fmt: skip
    error = _("no longer in the cluster") if gone else ""
    if recorded.elsewhere:
        held = ", ".join(f"{u} ({n})" for u, n in sorted(recorded.elsewhere.items()))
        error = _("Cards another source reports stay with it: %(held)s.") % {"held": held}
    if row.node_id != recorded.node_id or row.error != error:
        ClusterNode.objects.filter(pk=row.pk).update(node_id=recorded.node_id, error=error)
    if recorded.created:
        add_cards(cluster.pool, recorded.created, by_hand=True)
    outcome.created += len(recorded.created)
    outcome.changed += recorded.changed
    outcome.lost += recorded.lost


def forget(cluster: Cluster) -> None:
    """The cluster deleted: each of its nodes offline, its cards lost (placement places
    nothing more on them), in the caller's transaction."""
    for row in ClusterNode.objects.filter(cluster=cluster, node_id__isnull=False):
        record_read_only_node(
            source=NodeSource.KUBERNETES, node_id=row.node_id, name=row.name,
            name_suffix=f"@{cluster.name}", hostname=row.name,
            labels={CLUSTER_LABEL: cluster.name[:63]}, online=False,
            error=_("its cluster was deleted from the portal"), cards=[],
        )  # fmt: skip


def record(
    cluster: Cluster, found: dict[str, KubeNode], refused: dict[str, str], *, complete: bool = True
) -> Outcome:
    """Write what was read: each node with cards (a row made on first sight), each refused
    (its error kept, its cards as they were), each recorded before and now without cards
    (its cards lost) or gone from the cluster (offline, its cards lost). Not ``complete``
    (the list was cut at its cap): a node not read is not taken for gone."""
    outcome = Outcome(refused=dict(refused))
    rows = {r.name: r for r in ClusterNode.objects.filter(cluster=cluster)}
    with_cards = {n for n, node in found.items() if node.cards}
    for name in sorted((with_cards | refused.keys()) - rows.keys()):
        rows[name] = ClusterNode.objects.create(cluster=cluster, name=name)
    for name, why in sorted(refused.items()):
        logger.warning("cluster %s: node %s refused: %s", cluster.name, name, why)
        if rows[name].error != why:
            ClusterNode.objects.filter(pk=rows[name].pk).update(error=why)
    for name, row in sorted(rows.items()):
        if name in refused or (name not in found and not complete):
            continue
        node = found.get(name)
        if row.node_id is None and (node is None or not node.cards):
            # Refused before and never recorded, now gone or without cards: nothing to show.
            ClusterNode.objects.filter(pk=row.pk).delete()
            continue
        try:
            _record_one(cluster, row, node, outcome)
        except Exception as exc:  # one node's failure (a name taken) stops no other
            logger.warning("cluster %s: node %s not recorded: %s", cluster.name, name, exc)
            outcome.refused[name] = str(exc)[:500]
            continue
        if node is not None and node.cards:
            outcome.nodes += 1
            outcome.cards += len(node.cards)
    return outcome


def sync_inventory(
    cluster: Cluster, api: k8s.ApiClient, describe: Callable[[BaseException], str]
) -> Outcome | None:
    """Read the cluster's nodes (and slices) and record them; the failure of the whole
    reading is kept on the cluster (``inventory_error``, worded by ``describe``: the sync's
    ``error_text``), nothing recorded. Never raises."""
    error, outcome = "", None
    try:
        nodes, more = list_all(api, NODE_LIST, MAX_NODES)
        slices = None
        if cluster.enforcement in DEVICE_CLASSES:
            slices, more_slices = list_all(api, SLICE_LIST, MAX_SLICES)
            more = more or more_slices
        found, refused = read_nodes(nodes, slices, cluster.enforcement)
        if more:
            error = _("More than %(nodes)s nodes or %(slices)s ResourceSlices: the rest were "
                      "not read.") % {"nodes": MAX_NODES, "slices": MAX_SLICES}  # fmt: skip
        outcome = record(cluster, found, refused, complete=not more)
    except Exception as exc:
        logger.warning("cluster %s: reading its nodes failed: %s", cluster.name, exc)
        error = describe(exc)
    if cluster.inventory_error != error:
        Cluster.objects.filter(pk=cluster.pk).update(inventory_error=error)
        cluster.inventory_error = error
    return outcome
