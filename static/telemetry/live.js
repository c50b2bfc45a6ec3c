// Shared by the live pages: translated labels, small DOM helpers, and one
// self-reconnecting websocket per page (js/live-socket.js), its messages JSON.
import { connect as openSocket, setLiveStatus } from "../js/live-socket.js";

const readJson = (id) => JSON.parse(document.getElementById(id).textContent);

export const labels = readJson("labels");
export const initialData = () => readJson("initial-data");

export const GiB = 1024;
export const fmt = (value, digits = 0) =>
  value === undefined || value === null ? "–" : Number(value).toFixed(digits);

export function setField(root, name, text) {
  const el = root.querySelector(`[data-field="${name}"]`);
  if (el && el.textContent !== String(text)) el.textContent = text;
  return el;
}

// A progress bar: value out of its data-max (100 for percentages, 1 for fractions).
export function setMeter(root, name, value) {
  const el = root.querySelector(`[data-meter="${name}"]`);
  if (!el) return;
  const pct = Math.min(100, Math.max(0, (100 * (value ?? 0)) / Number(el.dataset.max || 100)));
  el.style.width = `${pct}%`;
  el.setAttribute("aria-valuenow", Math.round(pct));
}

export function memoryText(used, total) {
  const usedGiB = used === undefined || used === null ? undefined : used / GiB;
  return `${fmt(usedGiB, 1)} / ${fmt(total / GiB, 1)} GiB`;
}

// An agent's error text reaches only node managers: an "agent-errors" element on the page
// and "*.errors" messages. Tiles and cards say only that there is one (agent_error), which
// everyone else sees as a generic label.
const errorsElement = document.getElementById("agent-errors");
const agentErrors = errorsElement ? JSON.parse(errorsElement.textContent) : {};
const errorSlots = new Map();  // node id -> where its error shows, and its last state

function drawError(id) {
  const slot = errorSlots.get(id);
  if (!slot) return;
  // An online node can carry an error too: a card another node claims (telemetry.card_claims).
  const shown = slot.flagged;
  setField(slot.root, "last_error", shown ? agentErrors[id] || labels.ui.agent_error : "");
}

export function showAgentError(root, node) {
  const id = String(node.id);
  errorSlots.set(id, { root, state: node.state, flagged: Boolean(node.agent_error) });
  drawError(id);
}

export function takeAgentErrors(errors) {
  for (const [id, text] of Object.entries(errors)) {
    agentErrors[id] = text;
    drawError(id);
  }
}

// A card's latest reading into its fields (and meters, where the root has them): the node
// page's cards and the GPU page alike.
export function setReadings(root, gpu) {
  setHealth(root.querySelector('[data-field="health"]'), gpu.health);
  // The vendor tool's words: textContent, so markup in them stays text.
  setField(root, "health_detail", gpu.health === "ok" ? "" : gpu.health_detail ?? "");
  setField(root, "utilization_gpu_pct", fmt(gpu.utilization_gpu_pct));
  setMeter(root, "utilization_gpu_pct", gpu.utilization_gpu_pct);
  setField(root, "memory", memoryText(gpu.memory_used_mib, gpu.memory_total_mib));
  setMeter(root, "memory", gpu.memory_total_mib ? (gpu.memory_used_mib ?? 0) / gpu.memory_total_mib : 0);
  setField(root, "temperature_c", fmt(gpu.temperature_c));
  setField(root, "power", `${fmt(gpu.power_w)} / ${fmt(gpu.power_limit_w)} W`);
}

export function setState(el, state) {
  el.textContent = labels.states[state] ?? state;
  el.dataset.state = state;
}

export function setHealth(el, health) {
  el.textContent = labels.health[health] ?? health;
  el.dataset.health = health;
}

// "12 s ago" for every <time data-field="last_seen"> below root, refreshed each second.
export function keepAgesFresh(root) {
  const refresh = () => {
    const now = Date.now();
    for (const el of root.querySelectorAll('time[data-field="last_seen"]')) {
      if (!el.dateTime) { el.textContent = labels.ui.never; continue; }
      const seconds = Math.max(0, Math.round((now - Date.parse(el.dateTime)) / 1000));
      el.textContent = labels.ui.seconds_ago.replace("%(seconds)s", seconds);
    }
  };
  refresh();
  setInterval(refresh, 1000);
}

// Clone a <template>'s first element, pointing its link at the object's URL.
export function fromTemplate(id, objectId) {
  const el = document.getElementById(id).content.firstElementChild.cloneNode(true);
  if (el.href) el.href = el.getAttribute("href").replace(/\/0\/$/, `/${objectId}/`);
  return el;
}

export function connect(path, onMessage) {
  openSocket(path, {
    onOpen: () => setLiveStatus("live", labels.ui.live),
    onMessage: (data) => onMessage(JSON.parse(data)),
    onClose: () => setLiveStatus("reconnecting", labels.ui.reconnecting),
  });
}
