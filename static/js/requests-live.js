// The requests pages (mine, approvals, a request's own page): one socket; when it says
// something changed, the page fetches its live part again and swaps it in, without
// reloading (static/js/live-part.js). A part being typed into waits until the field is left.
import { followPart } from "./live-part.js";

function typing(part) {
  const el = document.activeElement;
  return el && part.contains(el) && (el.tagName === "INPUT" || el.tagName === "TEXTAREA");
}

// The sidebar's badge follows the notices the part now lists as unread.
function followBadge(part) {
  const badge = document.getElementById("notice-badge");
  const count = part.querySelector("#notice-count");
  if (badge && part.querySelector("#notices")) {
    badge.textContent = count ? count.textContent : "0";
    badge.classList.toggle("d-none", !count);
  }
}

// A request's own page (data-request) follows its request and its pool's queue only.
function concerns(part, data) {
  if (!part.dataset.request) return true;
  try {
    const event = JSON.parse(data);
    return String(event.request) === part.dataset.request
      || (event.kind === "queue" && String(event.pool) === part.dataset.pool);
  } catch {
    return true;
  }
}

followPart("/ws/requests/", {
  busy: typing,
  afterSwap: followBadge,
  onMessage: (data, refresh, part) => { if (concerns(part, data)) refresh(); },
});
