"""What the clusters' gate tests share: a team whose policy approves small asks at once,
the Kubernetes API of tests/kube_api.py, and a cluster of the team's pool on it with one
namespace mapped to the team (tests/test_cluster_gates.py, _jobs.py, _claims.py, ...)."""

from __future__ import annotations

import pytest

from clusters.choices import Enforcement
from clusters.services import map_namespace, register_cluster
from tests.factories import gpu_team
from tests.kube_api import serving

TOKEN = "sa-token-0123456789"
NS = "acme-train"


@pytest.fixture
def team():
    # Within policy: up to 2 vGPUs of 50 % for 8 hours are approved at once.
    return gpu_team("acme", cards=10, auto_approve_vgpus=2, auto_approve_compute_pct=50,
                    auto_approve_hours=8)  # fmt: skip


@pytest.fixture
def api():
    with serving(TOKEN) as server:
        yield server


def make_cluster(team, api, kueue: bool = False, enforcement: str = Enforcement.HAMI):
    cluster = register_cluster(actor=None, token=TOKEN, name="prod", api_url=api.url,
                               pool=team.pool, kueue=kueue, enforcement=enforcement)  # fmt: skip
    map_namespace(cluster, actor=None, namespace=NS, tenant=team.tenant)
    return cluster
