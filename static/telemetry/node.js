// A node page: its cards, kept current over /ws/nodes/<id>/.
import {
  connect, fromTemplate, initialData, keepAgesFresh, setField, setReadings, setState,
  showAgentError, takeAgentErrors,
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
  setField(card, "vendor", gpu.vendor_label ?? "");
  setReadings(card, gpu);
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
