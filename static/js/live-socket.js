// The one self-reconnecting websocket behind every live page (telemetry/live.js, the
// requests pages, the firing-alerts strip). It reconnects after 1, 2, 4 … 30 s; a close
// with 4401 (signed out) calls onSignedOut, by default a reload that lands on the login
// page; 4404 (the object, or the path, is gone) ends it: trying again would not help.
const CLOSE_SIGNED_OUT = 4401;
const CLOSE_NOT_FOUND = 4404;

// onOpen(reconnected): reconnected is true when an earlier socket closed, so the page can
// fetch once what it missed. onMessage gets the text of each message, onClose the event.
export function connect(path, { onOpen, onMessage, onClose, onSignedOut = () => location.reload() } = {}) {
  const open = (attempt) => {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${location.host}${path}`);
    socket.addEventListener("open", () => {
      onOpen?.(attempt > 0);
      attempt = 0;
    });
    socket.addEventListener("message", (event) => onMessage?.(event.data));
    socket.addEventListener("close", (event) => {
      onClose?.(event);
      if (event.code === CLOSE_SIGNED_OUT) { onSignedOut(); return; }
      if (event.code === CLOSE_NOT_FOUND) return;
      setTimeout(() => open(attempt + 1), Math.min(30000, 1000 * 2 ** attempt));
    });
  };
  open(0);
}

// The page's "Live" / "Reconnecting…" badge (#live-status), where it has one. The words are
// translated by the page: given here, or in the badge's data-live / data-reconnecting.
export function setLiveStatus(state, text) {
  const status = document.getElementById("live-status");
  if (!status) return;
  status.dataset.state = state;
  status.textContent = text ?? (status.dataset[state] || state);
}
