// The requests pages (mine, approvals, a request's own page): one socket; when it says something changed, the
// page fetches its live part again (through the page's own permission check) and swaps it
// in, without reloading. A part being typed into waits until the field is left.
import { connect, setLiveStatus } from "./live-socket.js";

const part = document.getElementById("live-part");
let pending = false;
let loading = false;

function typing() {
  const el = document.activeElement;
  return el && part.contains(el) && (el.tagName === "INPUT" || el.tagName === "TEXTAREA");
}

async function refresh() {
  if (loading || typing()) { pending = true; return; }
  loading = true;
  pending = false;
  try {
    const response = await fetch(part.dataset.partUrl, { credentials: "same-origin",
      headers: { "X-Requested-With": "fetch" } });
    if (response.redirected || !response.ok) return;
    part.innerHTML = await response.text();
    // The sidebar's badge follows the notices the part now lists as unread.
    const badge = document.getElementById("notice-badge");
    const count = part.querySelector("#notice-count");
    if (badge && part.querySelector("#notices")) {
      badge.textContent = count ? count.textContent : "0";
      badge.classList.toggle("d-none", !count);
    }
    part.dataset.refreshed = String(Number(part.dataset.refreshed || 0) + 1);
  } finally {
    loading = false;
    if (pending) refresh();
  }
}

// A request's own page (data-request) follows its request and its pool's queue only.
function concerns(data) {
  if (!part.dataset.request) return true;
  try {
    const event = JSON.parse(data);
    return String(event.request) === part.dataset.request
      || (event.kind === "queue" && String(event.pool) === part.dataset.pool);
  } catch {
    return true;
  }
}

part?.addEventListener("focusout", () => { if (pending) setTimeout(refresh, 0); });

if (part) {
  connect("/ws/requests/", {
    onOpen: (reconnected) => {
      // Anything missed while away is fetched once; then only on events.
      if (reconnected) refresh();
      setLiveStatus("live");
    },
    onMessage: (data) => { if (concerns(data)) refresh(); },
    onClose: () => setLiveStatus("reconnecting"),
  });
}
