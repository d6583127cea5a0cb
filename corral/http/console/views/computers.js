// Computers: the list (create, start, stop, delete) and one computer: provisioning
// progress until it runs, then its desktop (noVNC) and terminal (xterm.js), and its logs.

import {api, follow} from "../api.js";
import {action, describe, h, replace, safeHref, status, toast, when} from "../dom.js";
import {later} from "./later.js";
import {tabs} from "./tabs.js";

const SIZES = ["small", "medium", "large"];
const BUSY = new Set(["provisioning", "stopping", "starting"]);

function lifecycle(computer, reload, {onDelete} = {}) {
  const id = computer.id;
  const call = (verb) => async () => { await api("POST", `/computers/${id}/${verb}`); await reload(); };
  const buttons = [];
  if (computer.status === "running") buttons.push(action("Stop", call("stop")), action("Restart", call("restart")));
  if (["stopped", "paused"].includes(computer.status)) buttons.push(action("Start", call("start")));
  buttons.push(action("Delete", async () => {
    if (!confirm(`Delete computer ${computer.name} and its files?`)) return;
    await api("DELETE", `/computers/${id}`);
    toast("Computer deleted");
    if (onDelete) onDelete(); else await reload();
  }, {class: "danger"}));
  return buttons;
}

export function computersView(root) {
  const rows = h("tbody");
  const note = h("p", {class: "muted"});
  let timer = null;
  let gone = false;

  async function reload() {
    clearTimeout(timer);
    try {
      const {computers, total} = await api("GET", "/computers");
      note.textContent = total ? `${total} computer${total === 1 ? "" : "s"}` : "No computers yet.";
      replace(rows, computers.map((computer) => h("tr", {dataset: {id: computer.id}},
        h("td", {}, h("a", {href: `#/computers/${computer.id}`}, computer.name)), h("td", {}, status(computer.status)),
        h("td", {}, computer.size), h("td", {}, when(computer.created_at)), h("td", {class: "actions"}, lifecycle(computer, reload)))));
      if (!gone && computers.some((computer) => BUSY.has(computer.status))) timer = setTimeout(reload, 1500);
    } catch (error) {
      note.textContent = describe(error);
    }
  }

  const form = h("form", {class: "inline", id: "new-computer"},
    h("div", {}, h("label", {for: "computer-name"}, "Name"), h("input", {id: "computer-name", name: "name", required: true, maxlength: 100, placeholder: "My Computer"})),
    h("div", {}, h("label", {for: "computer-size"}, "Size"), h("select", {id: "computer-size", name: "size"}, SIZES.map((s) => h("option", {}, s)))),
    h("div", {}, h("label", {for: "computer-resolution"}, "Resolution"), h("input", {id: "computer-resolution", name: "resolution", value: "1280x800", size: 10, pattern: "\\d+x\\d+"})),
    h("button", {type: "submit", class: "primary"}, "Create computer"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const computer = await api("POST", "/computers", {name: form.name.value, template_type: "svc-desktop", size: form.size.value, resolution: form.resolution.value});
      location.hash = `#/computers/${computer.id}`;  // its page shows provisioning as it goes
    } catch (error) {
      toast(describe(error), true);
    }
  });
  replace(root, h("h1", {}, "Computers"), h("div", {class: "card"}, form), note,
    h("table", {}, h("thead", {}, h("tr", {}, ["Name", "Status", "Size", "Created", ""].map((t) => h("th", {}, t)))), rows));
  reload();
  return () => { gone = true; clearTimeout(timer); };
}

export function computerView(root, id) {
  const head = h("div", {class: "card"});
  const body = h("div");
  let timer = null;
  let gone = false;
  let shown = null;  // "progress" | "running" | "other"
  let release = () => {};
  const started = Date.now();

  function progress(computer) {
    const elapsed = h("span", {class: "muted"});
    const output = h("pre", {class: "log", id: "computer-progress-log"});
    const tick = setInterval(() => { elapsed.textContent = `${Math.round((Date.now() - started) / 1000)} s`; }, 500);
    const stop = follow(`/computers/${id}/logs/stream`, {log: (line) => {
      output.append(h("div", {}, `[${line.source}] ${line.line}`));
      output.scrollTop = output.scrollHeight;
    }});
    replace(body, h("div", {class: "card", id: "computer-progress"},
      h("div", {class: "progress"}, status(computer.status), h("span", {}, "Setting up the computer: booting its instance, starting the desktop, installing apps."), elapsed),
      h("p", {class: "muted"}, "Desktop services' output as it happens:"), output));
    return () => { clearInterval(tick); stop(); };
  }

  function running(computer) {
    const panels = tabs({
      Desktop: (panel) => {
        const state = h("span", {class: "muted", id: "desktop-state"}, "connecting…");
        const newTab = h("a", {target: "_blank", rel: "noopener noreferrer", hidden: true}, "open in a new tab");
        const screen = h("div", {class: "desktop", id: "desktop-screen"});
        replace(panel, h("p", {class: "row"}, "Desktop: ", state, newTab), screen);
        return later(import("../desktop.js"), ({desktop}) => {
          const view = desktop(screen, () => api("GET", `/computers/${id}/vnc-credentials`), (value, creds) => {
            state.textContent = value;
            state.dataset.state = value;
            if (creds) { newTab.href = safeHref(`${creds.desktop_url}?auth=${encodeURIComponent(creds.token)}`); newTab.hidden = false; }
          });
          return () => view.close();
        });
      },
      Terminal: (panel) => {
        const box = h("div", {class: "terminal", id: "computer-terminal"});
        replace(panel, box);
        let session = null;
        const open = async ({cols, rows}) => {
          session = (await api("POST", `/computers/${id}/terminal`, {cols, rows})).data;
          box.dataset.session = session.session_id;
          return session.ws_url;
        };
        const reopen = async () => {  // the same session with a fresh stream token
          const {token} = await api("POST", `/computers/${id}/stream-token`);
          const url = new URL(session.ws_url);
          url.searchParams.set("auth", token);
          return url.toString();
        };
        return later(import("../terminal.js"), ({ptyTerminal}) =>
          ptyTerminal(box, {open, reopen}, (value) => { box.dataset.state = value; }).close);
      },
      Logs: (panel) => {
        const output = h("pre", {class: "log", id: "computer-log"});
        replace(panel, h("p", {}, "The desktop services' and app installs' log, live."), output);
        return follow(`/computers/${id}/logs/stream`, {log: (line) => {
          output.append(h("div", {}, `${line.ts} [${line.source}] ${line.line}`));
          output.scrollTop = output.scrollHeight;
        }});
      },
    });
    replace(body, panels.element);
    return panels.close;
  }

  async function reload() {
    clearTimeout(timer);
    let computer;
    try {
      computer = await api("GET", `/computers/${id}`);
    } catch (error) {
      release();
      release = () => {};
      replace(root, h("h1", {}, "Computer"), h("p", {class: "error-text"}, describe(error)), h("a", {href: "#/computers"}, "All computers"));
      return;
    }
    replace(head, h("div", {class: "row"}, h("h1", {}, computer.name), status(computer.status),
      h("span", {class: "muted"}, `${computer.size} · ${computer.resolution || ""} · ${computer.region || ""}`),
      h("span", {class: "actions"}, lifecycle(computer, reload, {onDelete: () => { location.hash = "#/computers"; }}))),
      h("p", {class: "muted"}, "id ", h("code", {}, computer.id), ` · created ${when(computer.created_at)}`),
      computer.error ? h("p", {class: "error-text"}, computer.error) : null);
    const kind = computer.status === "running" ? "running" : BUSY.has(computer.status) ? "progress" : "other";
    if (kind !== shown) {
      release();
      shown = kind;
      if (kind === "running") release = running(computer);
      else if (kind === "progress") release = progress(computer);
      else { release = () => {}; replace(body, h("p", {class: "muted"}, `The computer is ${computer.status}.`)); }
    }
    if (!gone) timer = setTimeout(reload, BUSY.has(computer.status) ? 1000 : 10000);
  }

  replace(root, h("p", {}, h("a", {href: "#/computers"}, "← Computers")), head, body);
  reload();
  return () => { gone = true; clearTimeout(timer); release(); };
}
