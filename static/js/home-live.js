// A developer's home: one socket (/ws/home/). Its "home.use" messages carry the use of the
// user's vGPUs, written into their rows in place; any other message is a request event,
// on which the page fetches its live part again (through the page's own permission check).
import { connect, setLiveStatus } from "./live-socket.js";

const part = document.getElementById("live-part");
let loading = false;
let pending = false;

function gib(mib) {
  return mib === null || mib === undefined ? "\u2013" : (mib / 1024).toFixed(1);
}

function field(row, name) {
  return row.querySelector(`[data-field="${name}"]`);
}

function applyUse(vgpus) {
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

async function refresh() {
  if (loading) { pending = true; return; }
  loading = true;
  pending = false;
  try {
    const response = await fetch(part.dataset.partUrl, { credentials: "same-origin",
      headers: { "X-Requested-With": "fetch" } });
    if (response.redirected || !response.ok) return;
    part.innerHTML = await response.text();
    part.dataset.refreshed = String(Number(part.dataset.refreshed || 0) + 1);
  } finally {
    loading = false;
    if (pending) refresh();
  }
}

if (part) {
  connect("/ws/home/", {
    onOpen: (reconnected) => {
      if (reconnected) refresh();
      setLiveStatus("live");
    },
    onMessage: (data) => {
      let message;
      try { message = JSON.parse(data); } catch { return; }
      if (message.type === "home.use") {
        applyUse(message.vgpus);
      } else {
        refresh();
      }
    },
    onClose: () => setLiveStatus("reconnecting"),
  });
}
