// A GPU page: its card's readings and health, kept current over its node's socket
// (/ws/nodes/<id>/), which carries every card of the node.
import { connect, keepAgesFresh, setReadings } from "./live.js";

const section = document.getElementById("gpu");

function draw(gpu, node) {
  setReadings(section, gpu);
  section.querySelector('time[data-field="last_seen"]').dateTime = node.last_seen ?? "";
}

keepAgesFresh(section);
connect(`/ws/nodes/${section.dataset.nodeId}/`, (message) => {
  if (message.type !== "node.detail") return;
  const gpu = message.node.gpus.find((g) => g.uuid === section.dataset.gpuUuid);
  if (gpu) draw(gpu, message.node);
});
