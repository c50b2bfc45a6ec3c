// A page's live part (#live-part, its URL in data-part-url) kept current over one socket:
// the home's and the requests pages'. refresh() fetches the part again (through the page's
// own permission check) and swaps it in; a refresh asked for while one is loading, or while
// busy() says to wait, runs once afterwards. Anything missed while the socket was away is
// fetched once when it is back; then only when onMessage asks.
import { connect, setLiveStatus } from "./live-socket.js";

// onMessage(data, refresh, part) gets each message's text; afterSwap(part) runs after each swap.
// With busy, a refresh held back runs when the focus leaves the part.
export function followPart(path, options = {}) {
  const { onMessage, busy = () => false, afterSwap } = options;
  const part = document.getElementById("live-part");
  if (!part) return null;
  let loading = false;
  let pending = false;

  async function refresh() {
    if (loading || busy(part)) { pending = true; return; }
    loading = true;
    pending = false;
    try {
      const response = await fetch(part.dataset.partUrl, { credentials: "same-origin",
        headers: { "X-Requested-With": "fetch" } });
      if (response.redirected || !response.ok) return;
      part.innerHTML = await response.text();
      afterSwap?.(part);
      part.dataset.refreshed = String(Number(part.dataset.refreshed || 0) + 1);
    } finally {
      loading = false;
      if (pending) refresh();
    }
  }

  if (options.busy) {
    part.addEventListener("focusout", () => { if (pending) setTimeout(refresh, 0); });
  }
  connect(path, {
    onOpen: (reconnected) => {
      if (reconnected) refresh();
      setLiveStatus("live");
    },
    onMessage: (data) => onMessage(data, refresh, part),
    onClose: () => setLiveStatus("reconnecting"),
  });
  return part;
}
