"""schemathesis against /api/schema/ on a live portal, as a platform admin: no operation
answers 5xx, and every answer (status code, media type, body) is one the schema documents;
then random sequences of calls along the links it infers between the operations.

Bounded for the suite: a fixed seed, MAX_EXAMPLES cases per operation, the example and
fuzzing phases only (about two and a half minutes on the 2-core machine).
"""

from __future__ import annotations

import subprocess
import urllib.request

import pytest

from quotas.requests.services import create_request
from tests import procs
from tests.factories import gpu_team
from tests.live_api import token

MAX_EXAMPLES = 5
CHECKS = (
    "not_a_server_error,status_code_conformance,content_type_conformance,"
    "response_schema_conformance"
)

# The stateful phase's checks: beside the above, a deleted object is gone and a created one
# can be read back.
STATEFUL_CHECKS = CHECKS + ",use_after_free,ensure_resource_availability"
STATEFUL_EXAMPLES = 150

pytestmark = pytest.mark.stack


def _schemathesis(alice, env: dict, tmp_path, *phase_args: str) -> subprocess.CompletedProcess:
    """``st run`` with ``phase_args`` against a live portal holding a GPU team and a
    request, as the platform admin."""
    team = gpu_team("vision")  # something to find: a tenant, a pool, cards, a request
    create_request(
        team.dev, tenant=team.tenant, pool=team.pool, count=1, compute_pct=25,
        memory_mib=8192, duration_hours=4, reason="schemathesis",
    )  # fmt: skip
    auth = token(alice)
    with procs.daphne(env) as (url, _proc):
        # The schema fetched here, given time: schemathesis allows its loading 10 s, which
        # generating it can take on a machine busy with other tests.
        schema_url = f"{url}/api/schema/?format=json"
        request = urllib.request.Request(schema_url, headers={"Authorization": auth})  # noqa: S310
        with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 (loopback)
            (tmp_path / "schema.json").write_bytes(response.read())
        return subprocess.run(
            [
                str(procs.BIN / "st"), "run", str(tmp_path / "schema.json"), "--url", url,
                "-H", f"Authorization: {auth}", *phase_args, "--seed", "1", "--no-color",
                "--generation-database", "none", "--request-timeout", "30",
                # Alertmanager's webhook takes its own token, not an API token: 401 is right.
                "--exclude-path", "/api/v1/alertmanager/",
            ],
            cwd=tmp_path, capture_output=True, text=True, timeout=480, check=False,
        )  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_every_operation_answers_as_its_schema_says(alice, child_env_for_test_db, tmp_path):
    run = _schemathesis(
        alice, child_env_for_test_db, tmp_path, "--checks", CHECKS,
        "--max-examples", str(MAX_EXAMPLES), "--phases", "examples,fuzzing", "--workers", "2",
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-4000:]


@pytest.mark.django_db(transaction=True)
def test_sequences_of_calls_answer_as_the_schema_says(alice, child_env_for_test_db, tmp_path):
    # The stateful phase: schemathesis links the operations by their schema (what a create
    # answers feeds a read, a change, a delete) and runs random sequences of them.
    run = _schemathesis(
        alice, child_env_for_test_db, tmp_path, "--checks", STATEFUL_CHECKS,
        "--max-examples", str(STATEFUL_EXAMPLES), "--phases", "stateful",
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-4000:]
    assert "Stateful" in run.stdout, run.stdout[-4000:]
