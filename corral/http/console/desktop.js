// A computer's desktop drawn by noVNC's RFB client, connected straight to the RFB
// WebSocket of the preview router with a stream token in its URL (see the module
// docstring of corral/http/routes/console.py for why not an iframe).

import RFB from "./vendor/novnc/core/rfb.js";

// `credentials()` resolves to `GET /computers/{id}/vnc-credentials`; a dropped
// connection is retried with a fresh token (tokens live 10 minutes).
export function desktop(container, credentials, onState = () => {}) {
  let rfb = null;
  let closed = false;
  let timer = null;
  async function connect() {
    if (closed) return;
    let creds;
    try {
      creds = await credentials();
    } catch (error) {
      onState("failed", error);
      return;
    }
    onState("connecting", creds);
    rfb = new RFB(container, creds.ws_url);
    rfb.scaleViewport = true;
    rfb.background = "#222";
    rfb.addEventListener("connect", () => onState("connected", creds));
    rfb.addEventListener("disconnect", (event) => {
      onState(event.detail.clean ? "disconnected" : "lost", creds);
      rfb = null;
      if (!closed) timer = setTimeout(connect, 3000);
    });
  }
  connect();
  return {
    get rfb() { return rfb; },
    close() { closed = true; clearTimeout(timer); if (rfb) rfb.disconnect(); },
  };
}
