// The fleet page: one tile per node, kept current over /ws/fleet/.
import {
  connect, fmt, fromTemplate, initialData, keepAgesFresh, labels, memoryText, setField, setMeter,
  setState, showAgentError, takeAgentErrors,
} from "./live.js";

const fleet = document.getElementById("fleet");
const filter = document.getElementById("node-filter");
const lostLabel = document.getElementById("lost-label").textContent;

function tileFor(node) {
  let tile = fleet.querySelector(`[data-node-id="${node.id}"]`);
  if (!tile) {
    tile = fromTemplate("tile-template", node.id);
    tile.dataset.nodeId = node.id;
    fleet.querySelector(".empty")?.remove();
    fleet.append(tile);
  }
  return tile;
}

function draw(node) {
  const tile = tileFor(node);
  tile.dataset.state = node.state;
  const vendors = Object.values(node.vendors ?? {}).map((v) => `${v} ${labels.vendors[v] ?? ""}`);
  tile.dataset.search = `${node.name} ${Object.keys(node.models ?? {}).join(" ")} ${vendors.join(" ")}`.toLowerCase();
  setField(tile, "name", node.name);
  setState(tile.querySelector('[data-field="state"]'), node.state);
  setField(tile, "gpu_count", node.gpu_count);
  setField(tile, "gpus_lost", node.gpus_lost ? `${node.gpus_lost} ${lostLabel}` : "");
  setField(tile, "util_avg", fmt(node.util_avg));
  setMeter(tile, "util_avg", node.util_avg);
  setField(tile, "memory", memoryText(node.memory_used_mib, node.memory_total_mib));
  setMeter(tile, "memory", node.memory_total_mib ? node.memory_used_mib / node.memory_total_mib : 0);
  setField(tile, "temperature_max_c", fmt(node.temperature_max_c));
  setField(tile, "power_w", fmt(node.power_w));
  tile.querySelector('[data-field="last_seen"]').dateTime = node.last_seen ?? "";
  showAgentError(tile, node);
  applyFilter(tile);
}

// The heatmap's cells are the server's; a frame only swaps each cell's colour class and
// title (utilization in tenths), so no cell changes size.
const heatNodes = new Map(
  [...document.querySelectorAll("#heatmap .hm-node")].map((el) => [el.dataset.node, el]),
);

function bucket(util) {
  return util == null ? "un" : `u${Math.min(10, Math.max(0, Math.floor(util / 10)))}`;
}

function drawHeat(node) {
  const row = heatNodes.get(String(node.id));
  if (!row || !node.cards_util) return;
  const ui = labels.ui;
  for (const [index, util] of node.cards_util) {
    const cell = row.querySelector(`a[data-i="${index}"]`);
    if (!cell) continue;
    const value = util == null ? ui.no_reading : ui.percent.replace("%(value)s", Number.isInteger(util) ? String(util) : util.toFixed(1)).replace("%%", "%");
    cell.className = bucket(util);
    cell.title = ui.heat_cell.replace("%(node)s", node.name).replace("%(index)s", index)
      .replace("%(value)s", value);
  }
}

function applyFilter(tile) {
  const needle = filter.value.trim().toLowerCase();
  tile.hidden = needle !== "" && !tile.dataset.search.includes(needle);
}

filter.addEventListener("input", () => fleet.querySelectorAll(".tile").forEach(applyFilter));
for (const node of initialData()) draw(node);
keepAgesFresh(fleet);
connect("/ws/fleet/", (message) => {
  if (message.type === "fleet.nodes") {
    for (const node of message.nodes) { draw(node); drawHeat(node); }
    // How many frames were drawn: the browser tests wait on it.
    fleet.dataset.frames = String(Number(fleet.dataset.frames || 0) + 1);
  }
  else if (message.type === "fleet.errors") takeAgentErrors(message.errors);
});
