"""The small world the API role matrix (tests/test_api_role_matrix.py) runs against, built
once per module through the services, and who calls it with which token.

- tenant A: ``tadmin`` (admin), ``approver``, ``member``; tenant B: ``outsider`` (a member);
  tenant C: A's three people in the same roles and nothing else, so that deleting a
  tenant can succeed for the platform admin and be refused to the others as it would be
  for A (which has requests, kept for their history).
- ``admin``: a superuser, the platform admin; ``read``: the same user with a read token.
- ``padmin``: a platform admin by permission alone (``quotas.change_tenant``), not a
  superuser: the admin's answers wherever tenancy decides, a member's where another
  permission does (nodes, pools, the audit log). ``staff``: staff without a permission,
  in no tenant: being staff grants nothing outside Django's admin.
- pool P (three cards on one online node), open to A and B; pool S (one card, never held a
  vGPU) that may be deleted; a free card; a spare node without cards.
- member's requests in P: one pending, one allocated, one allocated with an extension
  waiting; the idle scan's rows, a warning on the allocated lease, an appealed one on
  the extended lease, an exemption.
- member's released request (placed, then released).
- A's alert rule, channel, subscription, firing event and a closed one; member's own
  channel and subscription; A's service account and token.
- each caller plays a part of tests/cast.py under a name of its own (``rm-admin`` is alice's
  part, ``rm-outsider`` bella's...: ``PARTS``).
- two users in no tenant: ``spare_user`` (active, no password chosen) and
  ``inactive_user`` (deactivated), for the Users operations.

Everything comes from the factories and the services, but for the two reclaim warnings:
only a scan over hours of idle readings makes those, so they are written directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from agents.choices import NodeState
from alerts import config, events, rules
from alerts import services as alert_services
from alerts.choices import ChannelKind, Severity
from alerts.models import Rule
from audit.models import AuditEntry
from clusters.models import Cluster, ClusterWorkload, NamespaceMapping
from pools import failover
from pools.models import PoolCard
from quotas.choices import Role
from quotas.requests import lifecycle
from quotas.requests.services import create_request, decide, end_request, place_request
from reports import scan
from reports import services as report_services
from reports.choices import WarningState
from reports.models import IdleCard, ReclaimWarning
from tests import cast
from tests.factories import (
    GPUFactory,
    MembershipFactory,
    NodeFactory,
    PoolFactory,
    QuotaFactory,
    TenantFactory,
    UserFactory,
    online_cards,
)
from tokens import interface
from tokens import services as token_services
from tokens.choices import Scope

# Every caller of the matrix, in the order of the table's columns.
CALLERS = ("anon", "read", "admin", "padmin", "tadmin", "approver", "member", "outsider", "staff")
# Who plays each caller: the part of tests/cast.py's actor (tenant A in the role of acme).
PARTS = {
    "tadmin": "erin", "approver": "andy", "member": "bob", "outsider": "bella",
    "admin": "alice", "padmin": "oscar", "staff": "dave",
}  # fmt: skip


@dataclass
class World:
    """Primary keys of what the table's rows act on, and each caller's API key."""

    keys: dict[str, str] = field(default_factory=dict)  # caller -> its token's key
    users: dict[str, AbstractBaseUser] = field(default_factory=dict)
    tenant_a: int = 0
    tenant_b: int = 0
    tenant_c: int = 0
    pool: int = 0
    spare_pool: int = 0
    cluster: int = 0  # a Kubernetes cluster of the pool
    spare_pool_card: int = 0  # the PoolCard's id (pool-cards/...)
    spare_pool_gpu: int = 0  # its GPU's id (cards/remove takes card ids: GPUs)
    free_gpu: int = 0
    gpu: int = 0
    node: int = 0  # the pool's node
    spare_node: int = 0
    cordoned_card: int = 0
    quota_a: int = 0
    membership: int = 0  # member's membership of A
    pending: int = 0
    allocated: int = 0
    cluster_job: int = 0  # a Job made through the API, linked to the pending request
    spare_namespace: str = "rm-spare"  # a mapped namespace of the cluster that no Job uses
    extending: int = 0
    allocation: int = 0
    extending_lease: int = 0
    released: int = 0  # a request placed and released
    resolved_event: int = 0
    idle_card: int = 0  # an IdleCard's gpu_id
    warning: int = 0
    appealed: int = 0
    exemption: int = 0
    rule: int = 0
    channel: int = 0
    subscription: int = 0
    event: int = 0
    audit_entry: int = 0
    service_account: int = 0
    service_token: int = 0
    spare_token: int = 0  # a second token of member's: theirs alone to read and revoke
    spare_user: int = 0  # in no tenant, no password chosen: to deactivate, to send a link
    inactive_user: int = 0  # deactivated: to reactivate


def build_world() -> World:
    w = World()
    # The cast's parts under the matrix's names; no password, as no caller logs in.
    users = {
        caller: cast.person(part, username=f"rm-{caller}", password=None)
        for caller, part in PARTS.items()
    }
    w.users = users
    w.spare_user = UserFactory(username="rm-spare", password=None).pk
    w.inactive_user = UserFactory(username="rm-gone", password=None, is_active=False).pk
    tenant_a, tenant_b, tenant_c = (TenantFactory(name=f"rm-{n}", slug=f"rm-{n}") for n in "abc")
    w.tenant_a, w.tenant_b, w.tenant_c = tenant_a.pk, tenant_b.pk, tenant_c.pk
    roles = {"tadmin": Role.ADMIN, "approver": Role.APPROVER, "member": Role.MEMBER}
    for name, role in roles.items():
        membership = MembershipFactory(user=users[name], tenant=tenant_a, role=role)
        MembershipFactory(user=users[name], tenant=tenant_c, role=role)
    w.membership = membership.pk  # the member's
    MembershipFactory(user=users["outsider"], tenant=tenant_b, role=Role.MEMBER)

    # Pools and cards.
    cards = online_cards(3)
    pool = PoolFactory(name="rm-pool", slug="rm-pool", cards=cards)
    w.pool, w.gpu, w.node = pool.pk, cards[0].pk, cards[0].node_id
    spare_gpu = GPUFactory(node=NodeFactory(state=NodeState.ONLINE))
    spare = PoolFactory(name="rm-spare", slug="rm-spare", cards=[spare_gpu])
    w.spare_pool, w.spare_pool_gpu = spare.pk, spare_gpu.pk
    w.spare_pool_card = PoolCard.objects.get(gpu=spare_gpu).pk
    w.free_gpu = GPUFactory(node=spare_gpu.node).pk
    w.spare_node = NodeFactory().pk
    w.quota_a = QuotaFactory(tenant=tenant_a, pool=pool).pk
    w.cluster = Cluster.objects.create(name="rm-cluster", api_url="https://k8s.example",
                                       token="rm-cluster-token", pool=pool).pk  # fmt: skip
    QuotaFactory(tenant=tenant_b, pool=pool)

    # The member's requests: pending, allocated, allocated with an extension waiting.
    member, approver = users["member"], users["approver"]
    ask = {"tenant": tenant_a, "pool": pool, "count": 1, "compute_pct": 25, "memory_mib": 8192,
           "duration_hours": 4, "reason": "training run"}  # fmt: skip
    w.pending = create_request(member, **ask).pk
    NamespaceMapping.objects.create(cluster_id=w.cluster, namespace="rm-jobs", tenant=tenant_a)
    # One that no workload uses: it may be unmapped.
    NamespaceMapping.objects.create(cluster_id=w.cluster, namespace="rm-spare", tenant=tenant_a)
    w.cluster_job = ClusterWorkload.objects.create(
        cluster_id=w.cluster, namespace="rm-jobs", kind="Job", name="rm-job", uid="rm-job-uid",
        request_id=w.pending,
    ).pk  # fmt: skip
    placed = []
    for _ in range(2):
        req = create_request(member, **ask)
        decide(req.pk, approver, approve=True)
        assert place_request(req.pk), "the world's requests fit the pool"
        placed.append(req)
    w.allocated, w.extending = placed[0].pk, placed[1].pk
    # And one that ran and ended: a released request, lease and allocation in the lists.
    done = create_request(member, **ask)
    decide(done.pk, approver, approve=True)
    assert place_request(done.pk)
    w.released = end_request(done.pk, member).pk
    lifecycle.extend_request(w.extending, member, 2)
    placed = [type(req).objects.get(pk=req.pk) for req in placed]
    w.allocation = placed[0].lease.allocations.get().pk
    w.extending_lease = placed[1].lease_id
    used = set(placed[0].lease.allocations.values_list("gpu_id", flat=True))
    used |= set(placed[1].lease.allocations.values_list("gpu_id", flat=True))
    unused = PoolCard.objects.filter(pool=pool).exclude(gpu_id__in=used).order_by("pk").first()
    failover.cordon_card(unused.pk, "matrix")
    w.cordoned_card = unused.pk

    # Reports: the scan's rows, an exemption, a warning and an appealed one.
    now = timezone.now()
    scan.scan(now, p95=False)
    w.idle_card = IdleCard.objects.order_by("gpu_id").values_list("gpu_id", flat=True)[0]
    w.exemption = report_services.add_exemption(
        placed[0].lease_id, approver, reason="month end", ends_at=now + timedelta(days=7)
    ).pk
    warned = {"tenant_id": w.tenant_a, "warned_at": now, "release_after": now + timedelta(days=1)}
    w.warning = ReclaimWarning.objects.create(lease_id=placed[0].lease_id, **warned).pk
    w.appealed = ReclaimWarning.objects.create(lease_id=placed[1].lease_id, **warned).pk
    report_services.appeal(w.appealed, member, reason="still needed")
    assert ReclaimWarning.objects.get(pk=w.appealed).state == WarningState.APPEALED

    # Alerts of tenant A.
    tadmin, admin = users["tadmin"], users["admin"]
    w.rule = config.save_rule(
        None, {"name": "rm quota", "condition": "quota_used_pct", "threshold": 50,
               "scope_kind": "tenant", "scope_id": w.tenant_a},
        actor=admin, address=None,
    )  # fmt: skip
    # Fired as the rules fire (before the subscription, so that nothing is sent out).
    w.event, _check_again = events.fire(
        rules.spec_of(Rule.objects.get(pk=w.rule)),
        events.Occurrence(fingerprint="rm.quota", scope=f"tenant:{tenant_a.slug}",
                          summary="A is at 60 %", tenant_id=w.tenant_a),
    )  # fmt: skip
    # An event that fired and was closed, beside the firing one.
    closed, _check_again = events.fire(
        rules.spec_of(Rule.objects.get(pk=w.rule)),
        events.Occurrence(fingerprint="rm.quota.closed", scope=f"tenant:{tenant_a.slug}",
                          summary="A was at 70 %", tenant_id=w.tenant_a),
    )  # fmt: skip
    assert events.resolve_by_hand(closed, actor=admin, address=None)
    w.resolved_event = closed
    # A user's own channel and subscription (no tenant), beside the tenant's.
    own = alert_services.create_channel(
        actor=member, address=None, name="rm mine", kind=ChannelKind.SLACK,
        settings_values={"url": "https://hooks.slack.com/services/rm-mine"}, owner_id=member.pk,
    )  # fmt: skip
    config.save_subscription(None, {"channel": own}, actor=member, address=None, owner_id=member.pk)
    w.channel = alert_services.create_channel(
        actor=tadmin, address=None, name="rm ops", kind=ChannelKind.SLACK,
        settings_values={"url": "https://hooks.slack.com/services/rm"}, tenant_id=w.tenant_a,
    )  # fmt: skip
    w.subscription = config.save_subscription(
        None, {"channel": w.channel, "min_severity": Severity.WARNING},
        actor=tadmin, address=None, tenant_id=w.tenant_a,
    )  # fmt: skip

    # Tokens: each caller's, the admin's read token, member's spare, A's service account.
    for name in CALLERS[2:]:
        w.keys[name] = interface.issue(users[name], name="matrix")[1]
    w.keys["read"] = interface.issue(admin, name="matrix-read", scope=Scope.READ)[1]
    w.spare_token = interface.issue(member, name="spare")[0].pk
    account = token_services.create_service_account(tadmin, tenant=tenant_a, name="rm-ci")
    w.service_account = account.pk
    w.service_token = token_services.issue_service_token(tadmin, account, name="ci")[0].pk
    w.audit_entry = AuditEntry.objects.order_by("pk").values_list("pk", flat=True).first()
    return w
