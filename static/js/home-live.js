// A developer's home: one socket (/ws/home/). Its "home.use" messages carry the use of the
// user's vGPUs, written into their rows in place; any other message is a request event,
// on which the page fetches its live part again (static/js/live-part.js).
import { followPart } from "./live-part.js";

function gib(mib) {
  return mib === null || mib === undefined ? "\u2013" : (mib / 1024).toFixed(1);
}

function field(row, name) {
  return row.querySelector(`[data-field="${name}"]`);
}

function applyUse(part, vgpus) {
  for (const use of vgpus) {
    const row = part.querySelector(`.vgpu[data-vgpu-id="${use.id}"]`);
    if (!row) continue;
    const util = use.card_util_pct;
    field(row, "card_util_pct").textContent = util === null ? "\u2013" : String(util);
    field(row, "card_util_meter").value = util ?? 0;
    field(row, "memory_used_gib").textContent = gib(use.memory_used_mib);
    field(row, "memory_meter").value = use.memory_used_mib ?? 0;
    field(row, "process_count").textContent = use.process_count ?? "\u2013";
    row.classList.toggle("text-danger", Boolean(use.over_memory));
  }
  part.dataset.updated = String(Number(part.dataset.updated || 0) + 1);
}

followPart("/ws/home/", {
  onMessage: (data, refresh, part) => {
    let message;
    try { message = JSON.parse(data); } catch { return; }
    if (message.type === "home.use") {
      applyUse(part, message.vgpus);
    } else {
      refresh();
    }
  },
});
