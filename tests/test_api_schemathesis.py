"""schemathesis against /api/schema/ on a live portal, as a platform admin: no operation
answers 5xx, and every answer (status code, media type, body) is one the schema documents;
then random sequences of calls along the links it infers between the operations.

Bounded for the suite: a fixed seed, MAX_EXAMPLES cases per operation, the example and
fuzzing phases only (about two and a half minutes on the 2-core machine); the stateful
phase STATEFUL_EXAMPLES scenarios.
"""

from __future__ import annotations

import subprocess
import urllib.request

import pytest

from quotas.choices import Role
from quotas.requests.services import create_request
from tests import procs
from tests.factories import (
    ChannelFactory,
    MembershipFactory,
    PoolFactory,
    QuotaFactory,
    TenantFactory,
    UserFactory,
    gpu_team,
    online_cards,
)
from tests.live_api import token

MAX_EXAMPLES = 5
CHECKS = (
    "not_a_server_error,status_code_conformance,content_type_conformance,"
    "response_schema_conformance"
)

# The stateful phase's checks: beside the above, a created object can be read back. Not
# use_after_free: a token's and an exemption's DELETE revoke and end them, and the row stays
# readable for the audit (docs/api.md), which that check counts as a deleted object seen.
STATEFUL_CHECKS = CHECKS + ",ensure_resource_availability"
STATEFUL_EXAMPLES = 150

pytestmark = pytest.mark.stack


def _a_team(alice) -> None:
    team = gpu_team("vision")  # something to find: a tenant, a pool, cards, a request
    create_request(
        team.dev, tenant=team.tenant, pool=team.pool, count=1, compute_pct=25,
        memory_mib=8192, duration_hours=4, reason="schemathesis",
    )  # fmt: skip


def _the_examples_world(alice) -> None:
    """What the schema's request examples name, under the ids they give (the sequences
    start at 1, alice is user 1): tenant 1 with alice its admin and a quota in pool 1 (two
    A100s on node 1), tenant 2 without one, cards 3 and 4 in no pool, user lee in no
    tenant, alice's channel 1, and GPU request 1 placed (lease 1). So each create's
    example is a valid create, and the stateful phase walks on from it."""
    a100s = online_cards(2, model="NVIDIA A100-SXM4-80GB")
    online_cards(2)
    vision, _nlp = TenantFactory(name="vision"), TenantFactory(name="nlp")
    pool = PoolFactory(name="vision-a100", cards=a100s)
    MembershipFactory(user=alice, tenant=vision, role=Role.ADMIN)
    QuotaFactory(tenant=vision, pool=pool, limit_vgpus=100, auto_approve_vgpus=2,
                 auto_approve_compute_pct=50, auto_approve_hours=8)  # fmt: skip
    UserFactory(username="lee")
    ChannelFactory(owner=alice)
    req = create_request(
        alice, tenant=vision, pool=pool, count=1, compute_pct=25, memory_mib=8192,
        duration_hours=4, reason="schemathesis",
    )  # fmt: skip
    assert (vision.pk, pool.pk, alice.pk, req.pk, req.lease_id) == (
        1, 1, 1, 1, 1)  # fmt: skip


def _schemathesis(alice, env: dict, tmp_path, *phase_args: str, world=_a_team
                  ) -> subprocess.CompletedProcess:  # fmt: skip
    """``st run`` with ``phase_args`` against a live portal holding ``world``, as the
    platform admin."""
    world(alice)
    auth = token(alice)
    with procs.daphne(env) as (url, proc):
        # The schema fetched here, given time: schemathesis allows its loading 10 s, which
        # generating it can take on a machine busy with other tests.
        schema_url = f"{url}/api/schema/?format=json"
        request = urllib.request.Request(schema_url, headers={"Authorization": auth})  # noqa: S310
        with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 (loopback)
            (tmp_path / "schema.json").write_bytes(response.read())
        run = subprocess.run(
            [
                str(procs.BIN / "st"), "run", str(tmp_path / "schema.json"), "--url", url,
                "-H", f"Authorization: {auth}", *phase_args, "--seed", "1", "--no-color",
                "--generation-database", "none", "--request-timeout", "30",
                # Alertmanager's webhook takes its own token, not an API token: 401 is right.
                "--exclude-path", "/api/v1/alertmanager/",
            ],
            cwd=tmp_path, capture_output=True, text=True, timeout=480, check=False,
        )  # fmt: skip
        if run.returncode:  # a 500's traceback is in the portal's log: shown with the report
            starts = [i for i, line in enumerate(proc.lines) if "Traceback" in line]
            run.stderr += "".join(line for i in starts[:3] for line in proc.lines[i : i + 60])
        return run


@pytest.mark.django_db(transaction=True)
def test_every_operation_answers_as_its_schema_says(alice, child_env_for_test_db, tmp_path):
    run = _schemathesis(
        alice, child_env_for_test_db, tmp_path, "--checks", CHECKS,
        "--max-examples", str(MAX_EXAMPLES), "--phases", "examples,fuzzing", "--workers", "2",
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-4000:]


@pytest.mark.django_db(transaction=True, reset_sequences=True)
def test_sequences_of_calls_answer_as_the_schema_says(alice, child_env_for_test_db, tmp_path):
    # The stateful phase: schemathesis links the operations by their schema (what a create
    # answers feeds a read, a change, a delete) and runs random sequences of them. It
    # starts from the creates, a fifth of their bodies the schema's request examples,
    # valid in this world. Valid bodies only (--mode positive): the invalid ones are the
    # other test's, and here each ends its sequence at its first step. (In the default
    # mixed mode, once the GPU request's example was valid, the phase ended after 71-88
    # scenarios and 3-5 links, for a reason not found.)
    run = _schemathesis(
        alice, child_env_for_test_db, tmp_path, "--checks", STATEFUL_CHECKS,
        "--max-examples", str(STATEFUL_EXAMPLES), "--phases", "stateful", "--mode", "positive",
        world=_the_examples_world,
    )  # fmt: skip
    # How many of the inferred links it walked ("API Links: N covered / 399 ..."): shown
    # with -s, recorded in docs/reliability.md.
    print(next((line.strip() for line in run.stdout.splitlines() if "API Links" in line), ""))
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-4000:]
    assert "Stateful" in run.stdout, run.stdout[-4000:]
