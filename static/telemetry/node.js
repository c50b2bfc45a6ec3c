// A node page: its cards, kept current over /ws/nodes/<id>/.
import {
  connect, fmt, fromTemplate, initialData, keepAgesFresh, memoryText, setField, setHealth,
  setMeter, setState, showAgentError, takeAgentErrors,
} from "./live.js";

const section = document.getElementById("node");
const gpus = section.querySelector(".gpus");

function cardFor(gpu) {
  let card = gpus.querySelector(`[data-gpu-uuid="${gpu.uuid}"]`);
  if (!card) {
    card = fromTemplate("gpu-template", gpu.id);
    card.dataset.gpuUuid = gpu.uuid;
    gpus.append(card);
  }
  return card;
}

function drawGpu(gpu) {
  const card = cardFor(gpu);
  card.dataset.health = gpu.health;
  setField(card, "index", `#${gpu.index}`);
  setField(card, "model", gpu.model);
  setHealth(card.querySelector('[data-field="health"]'), gpu.health);
  setField(card, "utilization_gpu_pct", fmt(gpu.utilization_gpu_pct));
  setMeter(card, "utilization_gpu_pct", gpu.utilization_gpu_pct);
  setField(card, "memory", memoryText(gpu.memory_used_mib, gpu.memory_total_mib));
  setMeter(card, "memory", gpu.memory_total_mib ? (gpu.memory_used_mib ?? 0) / gpu.memory_total_mib : 0);
  setField(card, "temperature_c", fmt(gpu.temperature_c));
  setField(card, "power", `${fmt(gpu.power_w)} / ${fmt(gpu.power_limit_w)} W`);
}

function draw(node) {
  setState(section.querySelector('[data-field="state"]'), node.state);
  section.querySelector('[data-field="last_seen"]').dateTime = node.last_seen ?? "";
  showAgentError(section, node);
  for (const gpu of node.gpus) drawGpu(gpu);
}

draw(initialData());
keepAgesFresh(section);
connect(`/ws/nodes/${section.dataset.nodeId}/`, (message) => {
  if (message.type === "node.detail") draw(message.node);
  else if (message.type === "node.errors") takeAgentErrors(message.errors);
});
