// The dashboard's strip of firing alerts: /ws/alerts/ says an event the viewer may see
// changed; the strip's HTML is fetched again (through the page's permission check, in
// the reader's language) and swapped in, without reloading.
const section = document.getElementById("firing-events");
const part = document.getElementById("firing-part");
let loading = false;
let pending = false;

async function refresh() {
  if (loading) { pending = true; return; }
  loading = true;
  pending = false;
  try {
    const response = await fetch(section.dataset.partUrl, { credentials: "same-origin" });
    if (response.ok && !response.redirected) {
      part.innerHTML = await response.text();
      section.dataset.refreshed = String(Number(section.dataset.refreshed || 0) + 1);
    }
  } finally {
    loading = false;
    if (pending) refresh();
  }
}

function open(attempt) {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${location.host}/ws/alerts/`);
  socket.addEventListener("open", () => {
    section.dataset.live = "true";
    if (attempt > 0) refresh();  // anything missed while away
    attempt = 0;
  });
  socket.addEventListener("message", () => refresh());
  socket.addEventListener("close", (event) => {
    section.dataset.live = "false";
    if (event.code === 4401) return;  // logged out: the fleet socket reloads the page
    setTimeout(() => open(attempt + 1), Math.min(30000, 1000 * 2 ** attempt));
  });
}

if (section) open(0);
