// The fleet page: one tile per node, kept current over /ws/fleet/.
import {
  connect, fmt, fromTemplate, initialData, keepAgesFresh, memoryText, setField, setMeter,
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
  tile.dataset.search = `${node.name} ${Object.keys(node.models ?? {}).join(" ")}`.toLowerCase();
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

function applyFilter(tile) {
  const needle = filter.value.trim().toLowerCase();
  tile.hidden = needle !== "" && !tile.dataset.search.includes(needle);
}

filter.addEventListener("input", () => fleet.querySelectorAll(".tile").forEach(applyFilter));
for (const node of initialData()) draw(node);
keepAgesFresh(fleet);
connect("/ws/fleet/", (message) => {
  if (message.type === "fleet.nodes") for (const node of message.nodes) draw(node);
  else if (message.type === "fleet.errors") takeAgentErrors(message.errors);
});
