"""Test data, built one way: factory_boy factories with sensible defaults.

Give only what a test is about (``NodeFactory(state="draining")``); the rest is filled in.
The named actors (alice, bob, ...) are tests/cast.py's, built from ``UserFactory``; each
is a fixture in tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.utils import timezone

from agents.choices import GpuHealth, NodeState
from agents.models import GPU, Node
from alerts.choices import ChannelKind, Severity
from alerts.models import Channel, Event, Subscription
from pools import services as pool_services
from pools.models import Lease, Pool
from pools.placement import Ask
from quotas.choices import Role
from quotas.models import Membership, Quota, Tenant
from telemetry.models import GpuMinute, OwnerMinute


def permission(name: str) -> Permission:
    """``"app_label.codename"``, as ``user.has_perm`` spells it, to the Permission row."""
    app_label, codename = name.split(".", 1)
    return Permission.objects.get(content_type__app_label=app_label, codename=codename)


class UserFactory(factory.django.DjangoModelFactory):
    """A signed-in member with no permissions; ``permissions=[...]`` grants some.

    The password is the user name followed by ``-pw-1``, so a test can log in through the
    login page too.
    """

    class Meta:
        model = get_user_model()
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda user: f"{user.username}@example.com")
    password = factory.LazyAttribute(lambda user: f"{user.username}-pw-1")

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        # create_user hashes the password; a plain create would store it as given.
        manager = cls._get_manager(model_class)
        if kwargs.get("is_superuser"):
            return manager.create_superuser(*args, **kwargs)
        return manager.create_user(*args, **kwargs)

    @factory.post_generation
    def permissions(user, create: bool, extracted: Iterable[str] | None, **kwargs) -> None:
        if create and extracted:
            user.user_permissions.add(*(permission(name) for name in extracted))


class NodeFactory(factory.django.DjangoModelFactory):
    """A node registered with an agent URL and a token, not polled yet (offline).

    Its agent URL is on 127.0.0.1's port 1, where nothing listens: a test that polls it by
    accident gets a refused connection at once, never a DNS lookup or a timeout.
    """

    class Meta:
        model = Node

    name = factory.Sequence(lambda n: f"gpu-node-{n:02d}")
    hostname = factory.LazyAttribute(lambda node: node.name)
    agent_url = factory.LazyAttribute(lambda node: f"http://127.0.0.1:1/{node.name}")
    agent_token = factory.Sequence(lambda n: f"agent-token-{n:04d}-secret")


class GPUFactory(factory.django.DjangoModelFactory):
    """A healthy card, the next index on its node (a new node unless one is given)."""

    class Meta:
        model = GPU

    node = factory.SubFactory(NodeFactory)
    index = factory.LazyAttribute(lambda gpu: gpu.node.gpus.count())
    uuid = factory.Sequence(lambda n: f"GPU-{n:08x}-0000-0000-0000-000000000000")
    model = "NVIDIA A100-SXM4-80GB"
    memory_total_mib = 81920
    health = GpuHealth.OK


def _last_minute() -> datetime:
    # The minute before this one: inside every history range that ends now.
    return timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=1)


class GpuMinuteFactory(factory.django.DjangoModelFactory):
    """One minute of a card's history, the last minute by default; readings as keywords."""

    class Meta:
        model = GpuMinute

    gpu = factory.SubFactory(GPUFactory)
    bucket = factory.LazyFunction(_last_minute)
    samples = 12


class OwnerMinuteFactory(factory.django.DjangoModelFactory):
    """One minute of what one process owner used of a card."""

    class Meta:
        model = OwnerMinute

    gpu = factory.SubFactory(GPUFactory)
    owner = factory.Sequence(lambda n: f"user{n}")
    bucket = factory.LazyFunction(_last_minute)
    samples = 12
    memory_used_avg_mib = 1024.0
    memory_used_max_mib = 2048.0


# --- pools and tenancy ---------------------------------------------------------------------


class PoolFactory(factory.django.DjangoModelFactory):
    """A binpack pool without oversubscription and with no matching rules: it holds only
    the cards given (``PoolFactory(cards=[gpu, ...])``) or added later."""

    class Meta:
        model = Pool
        skip_postgeneration_save = True

    name = factory.Sequence(lambda n: f"pool-{n}")
    slug = factory.LazyAttribute(lambda pool: pool.name)
    match_by_rules = False

    @factory.post_generation
    def cards(pool, create: bool, extracted: Iterable[GPU] | None, **kwargs) -> None:
        if create and extracted:
            pool_services.add_cards(pool, [gpu.pk for gpu in extracted])


def online_cards(count: int, *, node: Node | None = None, **gpu) -> list[GPU]:
    """``count`` healthy 80 GiB cards on one online node (a new one unless given)."""
    node = node or NodeFactory(state=NodeState.ONLINE)
    gpu.setdefault("memory_total_mib", 81920)
    gpu.setdefault("model", "NVIDIA H100 80GB HBM3")
    return [GPUFactory(node=node, **gpu) for _ in range(count)]


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant

    name = factory.Sequence(lambda n: f"team-{n}")
    slug = factory.LazyAttribute(lambda tenant: tenant.name)


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    tenant = factory.SubFactory(TenantFactory)
    role = Role.MEMBER


class QuotaFactory(factory.django.DjangoModelFactory):
    """A quota that opens the pool to the tenant with room for 8 whole cards, half of it
    guaranteed, and no auto-approval."""

    class Meta:
        model = Quota

    tenant = factory.SubFactory(TenantFactory)
    pool = factory.SubFactory(PoolFactory)
    guaranteed_vgpus = 4
    limit_vgpus = 8
    guaranteed_compute_pct = 400
    limit_compute_pct = 800
    guaranteed_memory_mib = 4 * 81920
    limit_memory_mib = 8 * 81920
    guaranteed_gpu_hours = 0
    limit_gpu_hours = 1000


# --- alerts: channels, events, deliveries ---------------------------------------------------


class ChannelFactory(factory.django.DjangoModelFactory):
    """A user's webhook channel; ``ChannelFactory(secrets={"url": ...})`` stores secrets as
    the services do (encrypted, with a hint)."""

    class Meta:
        model = Channel
        skip_postgeneration_save = True

    name = factory.Sequence(lambda n: f"channel-{n}")
    kind = ChannelKind.WEBHOOK
    owner = factory.SubFactory(UserFactory)
    settings = factory.LazyFunction(dict)

    @factory.post_generation
    def secrets(channel: Channel, create: bool, extracted: dict | None, **kwargs) -> None:
        values = extracted if extracted is not None else {"url": "https://hooks.example.com/x"}
        channel.set_secrets(values)
        channel.secret_hint = " ".join(f"…{v[-4:]}" for v in values.values())
        if create:
            channel.save()


class EventFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Event

    rule_key = "gpu.temperature"
    rule_name = "GPU too hot"
    severity = Severity.CRITICAL
    scope = factory.Sequence(lambda n: f"node:gpu-{n:02d}")
    fingerprint = factory.Sequence(lambda n: f"fp-{n}")
    labels = factory.LazyFunction(lambda: {"gpu": "0"})
    summary = "GPU 0 is at 91 °C"
    started_at = factory.LazyFunction(timezone.now)
    last_seen_at = factory.LazyFunction(timezone.now)


# --- GPU requests (issue #10: requests, approvals, queueing) ------------------------------


@dataclass
class Team:
    """A tenant with a pool of cards open to it and one member of each role."""

    tenant: Tenant
    pool: Pool
    quota: Quota
    cards: list[GPU]
    admin: object
    approver: object
    dev: object

    def ask(self, user=None, **ask) -> dict:
        """Keyword arguments for ``services.create_request``: one 25 % / 8 GiB slice for
        4 hours in this team's pool, unless told otherwise."""
        defaults = {
            "tenant": self.tenant, "pool": self.pool, "count": 1, "compute_pct": 25,
            "memory_mib": 8192, "duration_hours": 4, "reason": "training run",
        }  # fmt: skip
        return {**defaults, **ask}


def gpu_team(name: str = "", *, cards: int = 2, **quota) -> Team:
    """``cards`` 80 GiB cards in a pool of their own, a tenant with a quota there (the
    QuotaFactory's, overridden by ``quota``), and an admin, an approver and a developer."""
    gpus = online_cards(cards)
    tenant = TenantFactory(**({"name": name, "slug": name} if name else {}))
    pool = PoolFactory(cards=gpus)
    members = {
        role: MembershipFactory(tenant=tenant, role=role).user
        for role in (Role.ADMIN, Role.APPROVER, Role.MEMBER)
    }
    return Team(
        tenant=tenant, pool=pool, quota=QuotaFactory(tenant=tenant, pool=pool, **quota),
        cards=gpus, admin=members[Role.ADMIN], approver=members[Role.APPROVER],
        dev=members[Role.MEMBER],
    )  # fmt: skip


# --- pools pages and API ------------------------------------------------------------------


def placed_lease(pool: Pool, holder, *, label: str = "", **ask) -> Lease:
    """A lease placed through the allocation service (``ask``: placement.Ask's fields)."""
    return pool_services.place_lease(
        pool, Ask(**ask), holder=holder, unix_user=holder.get_username(), label=label
    )


# --- tenancy: usage histories -------------------------------------------------------------


def held_allocation(
    tenant: Tenant,
    pool: Pool,
    requester,
    placed_at: datetime,
    released_at: datetime | None = None,
    *,
    compute_pct: int = 100,
    memory_mib: int = 1024,
    whole_card: bool = False,
    gpu: GPU | None = None,
):
    """One vGPU the tenant held in the pool over ``[placed_at, released_at)`` (still held
    when None), through a request and its lease, without placing it on a card: a usage
    history is built from these. Returns the Allocation."""
    from pools.choices import AllocationState, LeaseState
    from pools.models import Allocation, Lease
    from quotas.choices import RequestState
    from quotas.models import GpuRequest

    live = released_at is None
    lease = Lease.objects.create(
        pool=pool, holder=requester, unix_user=requester.get_username(),
        state=LeaseState.ACTIVE if live else LeaseState.RELEASED, count=1,
        compute_pct=compute_pct, memory_mib=memory_mib, whole_card=whole_card,
        released_at=released_at,
    )  # fmt: skip
    GpuRequest.objects.create(
        tenant=tenant, pool=pool, requester=requester, reason="test", lease=lease,
        compute_pct=compute_pct, memory_mib=memory_mib, whole_card=whole_card,
        state=RequestState.ALLOCATED if live else RequestState.RELEASED,
        placed_at=placed_at, ended_at=released_at,
    )  # fmt: skip
    return Allocation.objects.create(
        lease=lease, pool=pool, gpu=gpu, compute_pct=compute_pct, memory_mib=memory_mib,
        whole_card=whole_card, placed_at=placed_at, released_at=released_at,
        state=AllocationState.ACTIVE if live else AllocationState.RELEASED,
    )  # fmt: skip


# --- alerts: rules and subscriptions (issue #12, second part) ------------------------------


class SubscriptionFactory(factory.django.DjangoModelFactory):
    """A user's subscription of their own channel to every rule, warnings and up."""

    class Meta:
        model = Subscription

    owner = factory.SubFactory(UserFactory)
    tenant = None
    channel = factory.LazyAttribute(lambda sub: ChannelFactory(owner=sub.owner, tenant=sub.tenant))
    min_severity = Severity.WARNING


def directory_mapped_tenant(admin, group) -> Tenant:
    """Tenant Quant, its directory groups mapped (``group(cn)`` writes a group as the
    directory sends it: an LDAP DN or an OIDC claim's name) and ``portal-admins`` to
    platform admin; ``admin`` is its local admin (a tenant keeps one)."""
    from directory.models import GroupMapping, MappedRole

    tenant = Tenant.objects.create(name="Quant", slug="quant")
    Membership.objects.create(tenant=tenant, user=admin, role=Role.ADMIN)
    for cn, role in [("gpu-quant-users", MappedRole.MEMBER),
                     ("gpu-quant-approvers", MappedRole.APPROVER),
                     ("gpu-quant-admins", MappedRole.ADMIN)]:  # fmt: skip
        GroupMapping.objects.create(group_dn=group(cn), tenant=tenant, role=role)
    GroupMapping.objects.create(group_dn=group("portal-admins"), role=MappedRole.PLATFORM_ADMIN)
    return tenant
