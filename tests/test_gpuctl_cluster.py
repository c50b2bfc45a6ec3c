"""``gpuctl run --cluster``: the portal makes a gated Job in a mapped namespace for the
caller (clusters/submit.py, ``POST /api/v1/clusters/{cluster}/jobs/``) and gpuctl follows it.
The real command (a child process) against a live portal with a real API token, and
tests/kube_api.py as the cluster, playing the Job controller; the test runs the gate pass
and sets the Job's status as the controller would. Every object written to the cluster is
checked against Kubernetes 1.37's schema."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import kubernetes_validate
import pytest
import requests

from clusters import gates, jobspec, workloads
from clusters.choices import HAMI_DEVICE_CLASS, NVIDIA_DEVICE_CLASS, Enforcement
from clusters.jobspec import JobAsk
from clusters.models import ClusterWorkload, WorkloadState
from clusters.services import map_namespace, register_cluster
from clusters.submit import submit_job
from quotas.choices import RequestState
from quotas.models import GpuRequest
from quotas.requests.services import decide
from tests import procs
from tests.factories import gpu_team
from tests.kube_world import NS, TOKEN, make_cluster
from tokens.interface import issue

pytestmark = pytest.mark.django_db(transaction=True)
SLICE = ["--gpus", "1", "--compute", "25", "--memory", "8G", "--hours", "2"]
IMAGE = "registry.example.com/vision/train:1.2"


@pytest.fixture
def cluster(team, api):
    return make_cluster(team, api)


def _cli_env(live_server, user, tmp_path) -> dict[str, str]:
    _, key = issue(user, name="ci")
    return procs.child_env(GPUCTL_URL=live_server.url, GPUCTL_TOKEN=key,
                           GPUCTL_CONFIG=str(tmp_path / "gpuctl.conf"),
                           GPUCTL_TENANT=None, GPUCTL_POOL=None)  # fmt: skip


@pytest.fixture
def env(live_server, team, tmp_path):
    return _cli_env(live_server, team.dev, tmp_path)


def gpuctl(*args: str) -> list[str]:
    return [procs.PYTHON, "-m", "gpuctl", *args]


def start(env, *args: str) -> subprocess.Popen:
    return subprocess.Popen(gpuctl(*args), env=env, cwd=procs.REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def run_args(*extra: str, cluster: str = "prod") -> list[str]:
    return ["run", "--cluster", cluster, "--namespace", NS, "--image", IMAGE, *extra]


def _valid(api) -> None:
    for obj in api.written:
        kubernetes_validate.validate(obj, "1.37.0", strict=True)


def _link(proc: subprocess.Popen) -> ClusterWorkload:
    """The Job's link once the portal made it (gpuctl still running)."""
    deadline = time.monotonic() + 60
    while not (link := ClusterWorkload.objects.select_related("request").first()):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    return link


def _finish(api, link: ClusterWorkload, condition: str) -> None:
    """The Job controller's last word: the Pod ended, the Job's condition set."""

    def change(obj: dict) -> None:
        obj["status"] = {"active": 0, "succeeded": int(condition == "Complete"),
                         "failed": int(condition == "Failed"),
                         "conditions": [{"type": condition, "status": "True"}]}  # fmt: skip

    api.edit("jobs", link.name, change, namespace=NS)


def _running(api, link: ClusterWorkload, proc: subprocess.Popen) -> str:
    """Its Pod runs; once gpuctl has said so, what it said up to then."""
    api.edit("jobs", link.name, lambda o: o.update(status={"active": 1}), namespace=NS)
    said, deadline = "", time.monotonic() + 60
    while "running" not in (line := proc.stderr.readline()):
        assert line and time.monotonic() < deadline, said + proc.communicate()[1]
        said += line
    return said + line


@pytest.mark.parametrize(("condition", "code"), [("Complete", 0), ("Failed", 7)])
def test_a_job_within_policy_is_gated_ungated_and_its_end_is_the_exit_code(
    env, team, api, cluster, condition, code
):
    proc = start(env, *run_args(*SLICE, "--env", "EPOCHS=3", "--", "python", "train.py", "-v"))
    try:
        link = _link(proc)
        # Linked at once, asked as the developer, within policy: placed by the create.
        assert link.kind == "Job" and link.request.requester == team.dev
        assert link.request.state == RequestState.ALLOCATED
        assert (link.request.count, link.request.compute_pct, link.request.memory_mib,
                link.request.duration_hours) == (1, 25, 8192, 2)  # fmt: skip
        the_job = api.get("jobs", link.name, NS)
        pod = the_job["spec"]["template"]["spec"]
        assert pod["schedulingGates"] == [{"name": workloads.GATE}]
        [container] = pod["containers"]
        assert container["image"] == IMAGE
        assert container["command"] == ["python", "train.py", "-v"]
        assert container["env"] == [{"name": "EPOCHS", "value": "3"}]
        assert container["resources"]["limits"] == {
            "nvidia.com/gpu": "1",
            "nvidia.com/gpumem": "8192",
            "nvidia.com/gpucores": "25",
        }
        assert container["securityContext"] == {
            "privileged": False, "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
        }  # fmt: skip
        assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
        assert pod["enableServiceLinks"] is False
        assert "volumes" not in pod and "serviceAccountName" not in pod
        assert the_job["spec"]["backoffLimit"] == 0
        assert the_job["metadata"]["annotations"][jobspec.CREATED_FOR] == team.dev.username
        assert the_job["metadata"]["labels"][jobspec.USER_ID] == str(team.dev.pk)
        # The normal pass: the controller's Pod loses its gate; the Job is never patched.
        [made] = api.play_job_controller()
        assert workloads.is_gated(made, False)
        gates.pass_cluster(cluster)
        assert not workloads.is_gated(api.get("pods", made["metadata"]["name"], NS), False)
        link.refresh_from_db()
        assert link.state == WorkloadState.ADMITTED
        said = _running(api, link, proc)
        _finish(api, link, condition)
        _out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    assert f"request {link.request_id}: allocated" in said
    assert ("succeeded" if code == 0 else "failed") in err
    _valid(api)
    gates.pass_cluster(cluster)  # the pass sees the Job finished: the link ends, Job kept
    link.refresh_from_db()
    assert link.state == WorkloadState.ENDED
    assert GpuRequest.objects.get(pk=link.request_id).state == RequestState.RELEASED
    assert api.get("jobs", link.name, NS) is not None


def test_beyond_policy_it_waits_for_the_approver_and_a_rejection_exits_6(env, team, api, cluster):
    proc = start(env, *run_args("--compute", "80", "--memory", "1024", "--hours", "1",
                                "--wait", "120", "--", "true"))  # fmt: skip
    try:
        link = _link(proc)
        assert link.request.state == RequestState.PENDING
        api.play_job_controller()
        gates.pass_cluster(cluster)  # still pending: every Pod keeps its gate
        assert all(
            workloads.is_gated(p, False) for p in api.pods_of(api.get("jobs", link.name, NS))
        )
        decide(link.request_id, team.approver, approve=False, comment="not today")
        _out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 6, err
    assert "rejected" in err


def test_an_approval_while_gpuctl_waits_lets_the_job_run(env, team, api, cluster):
    proc = start(env, *run_args("--compute", "80", "--memory", "1024", "--hours", "1",
                                "--wait", "120", "--", "true"))  # fmt: skip
    try:
        link = _link(proc)
        decide(link.request_id, team.approver, approve=True, comment="go")
        api.play_job_controller()
        gates.pass_cluster(cluster)
        assert not any(workloads.is_gated(p, False)
                       for p in api.pods_of(api.get("jobs", link.name, NS)))  # fmt: skip
        _finish(api, link, "Complete")
        _out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_releases_the_request_and_the_pass_deletes_the_job(env, team, api, cluster, sig):
    proc = start(env, *run_args(*SLICE, "--", "sleep", "3600"))
    try:
        link = _link(proc)
        api.play_job_controller()
        gates.pass_cluster(cluster)
        _running(api, link, proc)
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig
    assert GpuRequest.objects.get(pk=link.request_id).state == RequestState.RELEASED
    gates.pass_cluster(cluster)
    assert api.get("jobs", link.name, NS) is None and not api.pods_of(
        {"metadata": {"uid": link.uid}}
    )


# --- the API: refused input, who may, a cluster away ---------------------------------------


def _post(live_server, key: str, cluster: str, body: dict, **headers: str) -> requests.Response:
    return requests.post(f"{live_server.url}/api/v1/clusters/{cluster}/jobs/", json=body,
                         headers={"Authorization": f"Bearer {key}", **headers},
                         timeout=60)  # fmt: skip


def _body(**changes) -> dict:
    body = {"namespace": NS, "image": IMAGE, "command": ["python", "train.py"], "gpus": 1,
            "compute_pct": 25, "memory_mib": 8192, "duration_hours": 2}  # fmt: skip
    body.update(changes)
    return {k: v for k, v in body.items() if v is not None}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"image": "Not An Image!"}, "image"),
        ({"image": "a" * 600}, "image"),
        ({"command": [], "args": []}, "command"),
        ({"command": ["x"] * 65}, "command"),
        ({"command": ["x" * 5000]}, "command"),
        ({"env": {"CUDA_DEVICE_MEMORY_LIMIT": "80g"}}, "env"),
        ({"env": {"LD_PRELOAD": "/var/x.so"}}, "env"),
        ({"env": {"1BAD": "x"}}, "env"),
        ({"env": {f"V{i}": "x" for i in range(40)}}, "env"),
        ({"gpus": 0}, "gpus"),
        ({"gpus": 65}, "gpus"),
        ({"compute_pct": 150}, "compute_pct"),
        ({"memory_mib": None}, "memory_mib"),  # a compute share without memory
        ({"duration_hours": 0}, "duration_hours"),
        ({"namespace": "not-mapped"}, "namespace"),
        ({"gpus": 9}, "count"),  # over the tenant's quota (8 vGPUs)
        ({"privileged": True, "hostPath": "/"}, None),  # unknown fields: ignored, not obeyed
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_nothing_reaches_the_cluster(
    live_server, team, api, cluster, changes, field
):
    _, key = issue(team.dev, name="ci")
    answer = _post(live_server, key, "prod", _body(**changes))
    if field is None:  # the Job is made as always: one container, none of what was asked
        assert answer.status_code == 201, answer.text
        [job] = [o for o in api.written if o["kind"] == "Job"]
        assert "hostPath" not in json.dumps(job) and 'privileged": true' not in json.dumps(job)
        return
    assert answer.status_code == 400, answer.text
    assert field in answer.json()["error"]["fields"], answer.json()
    assert api.written == [] and not api.objects
    assert not GpuRequest.objects.exists() and not ClusterWorkload.objects.exists()


def test_gpuctl_says_the_field_and_exits_2(env, api, cluster):
    done = subprocess.run(gpuctl(*run_args("--env", "NVIDIA_VISIBLE_DEVICES=all", "--", "true")),
                          env=env, cwd=procs.REPO, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "  env: " in done.stderr and "NVIDIA_VISIBLE_DEVICES" in done.stderr
    assert api.written == []


def test_who_may_submit(live_server, team, api, cluster):
    outsider_team = gpu_team("other", cards=2)
    map_namespace(cluster, actor=None, namespace="other-ns", tenant=outsider_team.tenant)
    lonely = gpu_team("lonely", cards=1)  # a tenant with no namespace on this cluster
    _, lonely_key = issue(lonely.dev, name="ci")
    _, outsider_key = issue(outsider_team.dev, name="ci")
    # No namespace of one's tenants on the cluster: the cluster is not there, by id or name.
    assert _post(live_server, lonely_key, "prod", _body()).status_code == 404
    assert _post(live_server, lonely_key, str(cluster.pk), _body()).status_code == 404
    # Another tenant's namespace on a cluster one uses: not allowed.
    assert _post(live_server, outsider_key, "prod", _body()).status_code == 403
    assert api.written == [] and not GpuRequest.objects.exists()
    # The tenant's own member, by the cluster's id: made; its request the member's.
    _, key = issue(team.dev, name="ci")
    made = _post(live_server, key, str(cluster.pk), _body())
    assert made.status_code == 201, made.text
    link = made.json()
    assert link["request_state"] == "allocated" and link["job"] == {"outcome": "waiting"}
    # Read back by the member; 404 to the other tenant's member.
    path = f"{live_server.url}/api/v1/clusters/prod/jobs/{link['id']}/"
    read = requests.get(path, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    assert read.status_code == 200 and read.json()["job"]["outcome"] == "waiting"
    other = requests.get(
        path.replace("/prod/", f"/{cluster.pk}/"),
        headers={"Authorization": f"Bearer {outsider_key}"},
        timeout=60,
    )
    assert other.status_code == 404


def test_a_cluster_ref_of_unicode_digits_is_a_404_not_a_500(live_server, team, api, cluster):
    _, key = issue(team.dev, name="ci")
    base = f"{live_server.url}/api/v1/clusters/\u00b2/jobs/"  # "²": isdigit(), not int()
    auth = {"Authorization": f"Bearer {key}"}
    assert requests.get(f"{base}1/", headers=auth, timeout=60).status_code == 404
    assert requests.post(base, json=_body(), headers=auth, timeout=60).status_code == 404
    assert api.written == [] and not GpuRequest.objects.exists()


def test_a_platform_admin_outside_the_tenant_asks_as_the_namespaces_requester(
    live_server, team, api, cluster, django_user_model
):
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    _, key = issue(admin, name="ci")
    made = _post(live_server, key, "prod", _body())
    assert made.status_code == 201, made.text
    req = GpuRequest.objects.get(pk=made.json()["request"])
    assert req.requester.username == f"k8s-{cluster.pk}-{NS}"
    job = api.get("jobs", made.json()["name"], NS)
    assert job["metadata"]["annotations"][jobspec.CREATED_FOR] == "root"


def test_a_cluster_away_is_a_503_with_retry_after_and_nothing_kept(live_server, team):
    closed = register_cluster(actor=None, token=TOKEN, name="away",
                              api_url=f"http://127.0.0.1:{procs.free_port()}", pool=team.pool,
                              kueue=False)  # fmt: skip
    map_namespace(closed, actor=None, namespace=NS, tenant=team.tenant)
    _, key = issue(team.dev, name="ci")
    answer = _post(live_server, key, "away", _body())
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"].isdigit()
    assert answer.json()["error"]["code"] == "cluster_unavailable"
    assert not GpuRequest.objects.exists() and not ClusterWorkload.objects.exists()


def test_a_cluster_refusing_the_write_is_a_502_and_nothing_kept(live_server, team, api, cluster):
    api.forbidden.add("jobs")
    _, key = issue(team.dev, name="ci")
    answer = _post(live_server, key, "prod", _body())
    assert answer.status_code == 502 and answer.json()["error"]["code"] == "cluster_refused"
    assert "403" in answer.json()["error"]["message"]
    assert not GpuRequest.objects.exists() and not ClusterWorkload.objects.exists()


def test_a_retry_with_the_same_idempotency_key_makes_one_job(live_server, team, api, cluster):
    _, key = issue(team.dev, name="ci")
    first = _post(live_server, key, "prod", _body(), **{"Idempotency-Key": "ci-42"})
    again = _post(live_server, key, "prod", _body(), **{"Idempotency-Key": "ci-42"})
    assert first.status_code == again.status_code == 201
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert first.json()["id"] == again.json()["id"]
    assert len([o for o in api.written if o["kind"] == "Job"]) == 1


# --- every mode: the Job the pass reads is the Job written ----------------------------------


@pytest.mark.parametrize(
    ("enforcement", "kueue", "size"),
    [
        (Enforcement.HAMI, True, {"compute_pct": 25, "memory_mib": 8192}),
        (Enforcement.HAMI, False, {}),
        (Enforcement.DRA_HAMI, False, {"compute_pct": 25, "memory_mib": 8192}),
        (Enforcement.DRA_HAMI, True, {}),
        (Enforcement.DRA_NVIDIA, False, {"memory_mib": 20480}),
    ],
)
def test_each_mode_writes_a_job_the_pass_admits(enforcement, kueue, size):
    team = gpu_team("acme", cards=10, auto_approve_vgpus=2, auto_approve_compute_pct=100,
                    auto_approve_hours=8)  # fmt: skip
    from tests.kube_api import serving

    with serving(TOKEN) as api:
        cluster = make_cluster(team, api, kueue=kueue, enforcement=enforcement)
        ask = JobAsk(namespace=NS, image=IMAGE, command=["train"], gpus=2, duration_hours=1,
                     **size)  # fmt: skip
        link = submit_job(cluster, team.dev, ask)
        req = link.request
        assert req.count == 2 and req.state == RequestState.ALLOCATED
        assert req.whole_card == (not size)
        if size:
            assert req.memory_mib == size["memory_mib"]
            assert req.compute_pct == size.get("compute_pct", 100)
        _valid(api)
        written = {o["kind"]: o for o in api.written}
        the_job = written["Job"]
        if enforcement != Enforcement.HAMI:
            template = written["ResourceClaimTemplate"]
            device = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
            assert device["deviceClassName"] == (
                NVIDIA_DEVICE_CLASS if enforcement == Enforcement.DRA_NVIDIA else HAMI_DEVICE_CLASS
            )
            assert template["metadata"]["ownerReferences"][0]["uid"] == link.uid
        if kueue:
            assert (
                the_job["metadata"]["annotations"][workloads.KUEUE_GATED_BY]
                == "gpu-portal/approval"
            )
            assert the_job["metadata"]["labels"][jobspec.QUEUE_NAME] == f"gp-{team.pool.slug}-acme"
            assert the_job["spec"]["suspend"] is True
        # The pass finds it linked (no second request) and lifts the gate its way.
        api.play_job_controller()
        gates.pass_cluster(cluster)
        assert GpuRequest.objects.count() == 1
        if kueue:
            gated_by = api.get("jobs", link.name, NS)["metadata"]["annotations"]
            assert workloads.KUEUE_GATED_BY not in gated_by
        else:
            assert not any(workloads.is_gated(p, False) for p in api.pods_of(the_job))
        _valid(api)


@pytest.mark.parametrize(
    ("image", "good"),
    [
        ("ubuntu", True),
        ("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", True),
        ("localhost:5000/team/train@sha256:" + "a" * 64, True),
        ("registry.example.com/a/b:1.2@sha256:" + "0" * 64, True),
        ("Ubuntu", False),
        ("ubuntu:", False),
        ("ubuntu; rm -rf /", False),
        ("-ubuntu", False),
        ("", False),
    ],
)
@pytest.mark.django_db(transaction=False)
def test_image_references(image, good):
    try:
        jobspec.check(JobAsk(namespace=NS, image=image, command=["true"]), Enforcement.HAMI)
    except jobspec.Invalid as exc:
        assert not good and "image" in exc.errors
    else:
        assert good


def test_a_create_answered_without_a_uid_is_a_502_and_the_job_deleted(
    live_server, team, api, cluster
):
    real = api.handle

    def hostile(method, path, auth, body):  # the Job is made, the answer lies about it
        code, answer = real(method, path, auth, body)
        if method == "POST" and path.endswith("/jobs"):
            return code, {"kind": "Job", "metadata": {"name": answer["metadata"]["name"]}}
        return code, answer

    api.handle = hostile
    _, key = issue(team.dev, name="ci")
    answer = _post(live_server, key, "prod", _body())
    assert answer.status_code == 502 and "uid" in answer.json()["error"]["message"]
    assert not [k for k in api.objects if k[0] == "jobs"]
    assert not GpuRequest.objects.exists() and not ClusterWorkload.objects.exists()


def test_a_running_gate_pass_holds_the_create_then_it_is_a_503(
    live_server, team, api, cluster, monkeypatch
):
    from clusters import submit

    monkeypatch.setattr(submit, "LOCK_WAIT_S", 0.5)
    assert gates._lock(cluster.pk)  # a pass of the cluster is running
    try:
        _, key = issue(team.dev, name="ci")
        answer = _post(live_server, key, "prod", _body())
    finally:
        gates._unlock(cluster.pk)
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "2"
    assert answer.json()["error"]["message"] == (
        "A gate pass of this cluster is running; retry in a moment."
    )  # ours, not PostgreSQL's "canceling statement due to lock timeout"
    assert api.written == [] and not GpuRequest.objects.exists()
    assert _post(live_server, key, "prod", _body()).status_code == 201  # the pass is over
