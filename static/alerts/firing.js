// The dashboard's strip of firing alerts: /ws/alerts/ says an event the viewer may see
// changed; the strip's HTML is fetched again (through the page's permission check, in
// the reader's language) and swapped in, without reloading.
import { connect } from "../js/live-socket.js";

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

if (section) {
  connect("/ws/alerts/", {
    onOpen: (reconnected) => {
      section.dataset.live = "true";
      if (reconnected) refresh();  // anything missed while away
    },
    onMessage: () => refresh(),
    onClose: () => { section.dataset.live = "false"; },
    onSignedOut: () => {},  // the fleet socket on the same page reloads it
  });
}
