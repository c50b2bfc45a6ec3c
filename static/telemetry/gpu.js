// A GPU page: its card's readings and health, kept current over its node's socket
// (/ws/nodes/<id>/), which carries every card of the node.
import { connect, fmt, keepAgesFresh, memoryText, setField, setHealth } from "./live.js";

const section = document.getElementById("gpu");

function draw(gpu, node) {
  setHealth(section.querySelector('[data-field="health"]'), gpu.health);
  setField(section, "utilization_gpu_pct", fmt(gpu.utilization_gpu_pct));
  setField(section, "memory", memoryText(gpu.memory_used_mib, gpu.memory_total_mib));
  setField(section, "temperature_c", fmt(gpu.temperature_c));
  setField(section, "power", `${fmt(gpu.power_w)} / ${fmt(gpu.power_limit_w)} W`);
  section.querySelector('time[data-field="last_seen"]').dateTime = node.last_seen ?? "";
}

keepAgesFresh(section);
connect(`/ws/nodes/${section.dataset.nodeId}/`, (message) => {
  if (message.type !== "node.detail") return;
  const gpu = message.node.gpus.find((g) => g.uuid === section.dataset.gpuUuid);
  if (gpu) draw(gpu, message.node);
});
