// Live fleet dashboard: draws nodes and GPU cards from the server's JSON and
// keeps them current over one websocket. Labels come translated from the page.

const fleet = document.getElementById("fleet");
const statusEl = document.getElementById("live-status");
const nodeTemplate = document.getElementById("node-template");
const gpuTemplate = document.getElementById("gpu-template");
const readJson = (id) => JSON.parse(document.getElementById(id).textContent);
const stateLabels = readJson("state-labels");
const healthLabels = readJson("health-labels");
const ui = readJson("ui-labels");

const GiB = 1024;
const fmt = (value, digits = 0) =>
  value === undefined || value === null ? "–" : Number(value).toFixed(digits);

function setField(root, name, text) {
  const el = root.querySelector(`[data-field="${name}"]`);
  if (el && el.textContent !== text) el.textContent = text;
}

function setMeter(root, name, value) {
  const el = root.querySelector(`[data-meter="${name}"]`);
  if (el) el.value = value ?? 0;
}

function nodeSection(node) {
  let section = fleet.querySelector(`section.node[data-node-id="${node.id}"]`);
  if (!section) {
    section = nodeTemplate.content.firstElementChild.cloneNode(true);
    section.dataset.nodeId = node.id;
    fleet.querySelector(".empty")?.remove();
    fleet.append(section);
  }
  return section;
}

function gpuCard(section, gpu) {
  let card = section.querySelector(`[data-gpu-uuid="${gpu.uuid}"]`);
  if (!card) {
    card = gpuTemplate.content.firstElementChild.cloneNode(true);
    card.dataset.gpuUuid = gpu.uuid;
    section.querySelector(".gpus").append(card);
  }
  return card;
}

function drawGpu(card, gpu) {
  setField(card, "index", `#${gpu.index}`);
  setField(card, "model", gpu.model);
  const health = card.querySelector('[data-field="health"]');
  setField(card, "health", healthLabels[gpu.health] ?? gpu.health);
  health.dataset.health = gpu.health;
  card.dataset.health = gpu.health;
  setField(card, "utilization_gpu_pct", fmt(gpu.utilization_gpu_pct));
  setMeter(card, "utilization_gpu_pct", gpu.utilization_gpu_pct);
  const total = gpu.memory_total_mib;
  setField(card, "memory",
    `${fmt(gpu.memory_used_mib === undefined ? undefined : gpu.memory_used_mib / GiB, 1)} / ${fmt(total / GiB, 1)} GiB`);
  setMeter(card, "memory", total ? (gpu.memory_used_mib ?? 0) / total : 0);
  setField(card, "temperature_c", fmt(gpu.temperature_c));
  setField(card, "power", `${fmt(gpu.power_w)} / ${fmt(gpu.power_limit_w)} W`);
}

function drawNode(node) {
  const section = nodeSection(node);
  section.dataset.state = node.state;
  setField(section, "name", node.name);
  const badge = section.querySelector('[data-field="state"]');
  setField(section, "state", stateLabels[node.state] ?? node.state);
  badge.dataset.state = node.state;
  const seen = section.querySelector('[data-field="last_seen"]');
  seen.dateTime = node.last_seen ?? "";
  setField(section, "last_error", node.last_error || "");
  for (const gpu of node.gpus) drawGpu(gpuCard(section, gpu), gpu);
  refreshAges();
}

function refreshAges() {
  const now = Date.now();
  for (const el of fleet.querySelectorAll('time[data-field="last_seen"]')) {
    if (!el.dateTime) { el.textContent = ui.never; continue; }
    const seconds = Math.max(0, Math.round((now - Date.parse(el.dateTime)) / 1000));
    el.textContent = ui.seconds_ago.replace("%(seconds)s", seconds);
  }
}

function setStatus(state, text) {
  statusEl.dataset.state = state;
  statusEl.textContent = text;
}

function connect(attempt = 0) {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${location.host}/ws/fleet/`);
  socket.addEventListener("open", () => { attempt = 0; setStatus("live", ui.live); });
  socket.addEventListener("message", (event) => {
    const message = JSON.parse(event.data);
    for (const node of message.nodes ?? []) drawNode(node);
  });
  socket.addEventListener("close", (event) => {
    setStatus("reconnecting", ui.reconnecting);
    if (event.code === 4401) { location.reload(); return; }  // session expired: log in again
    const delay = Math.min(30000, 1000 * 2 ** attempt);
    setTimeout(() => connect(attempt + 1), delay);
  });
}

for (const node of readJson("fleet-initial")) drawNode(node);
setInterval(refreshAges, 1000);
connect();
