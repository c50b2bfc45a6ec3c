#!/usr/bin/env bash
# On a GPU node: compare the NVML backend with nvidia-smi, then run the real agent
# and fetch its endpoints. Writes under $OUT (default ./gpu-node-check).
OUT=${OUT:-./gpu-node-check}; mkdir -p "$OUT"
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
nvidia-smi > $OUT/nvidia-smi.txt 2>&1
python3 -m bench.agent.compare_smi --json $OUT/compare.json > $OUT/compare.md 2>&1; echo "compare rc=$?"
cat $OUT/compare.md
python3 -m agents.gpu_agent --backend nvml --no-auth --listen 127.0.0.1:9400 --interval 1 > $OUT/agent.out 2> $OUT/agent.err &
AGENT=$!
sleep 6
python3 - <<'PY'
import urllib.request, json, os, time
out = os.environ["OUT"]
for path in ["/v1/snapshot", "/metrics", "/healthz"]:
    with urllib.request.urlopen("http://127.0.0.1:9400" + path, timeout=5) as r:
        body = r.read()
        open(out + "/agent" + path.replace("/", "_") + ".txt", "wb").write(body)
        print(path, r.status, len(body))
snap = json.load(open(out + "/agent_v1_snapshot.txt"))
g = snap["gpus"][0]
print({k: g.get(k) for k in ("name", "utilization_gpu_pct", "memory_used_mib", "power_w", "temperature_c", "health")})
PY
kill -TERM $AGENT; wait $AGENT; echo "agent exit $?"
grep -c "^DCGM_FI" $OUT/agent_metrics.txt
ps -o rss= -p $$ >/dev/null
