// Sandboxes: the list (create, start, stop, delete) and one sandbox with its terminal,
// processes (live logs), the sandbox's live log stream and its preview links.

import {api, follow} from "../api.js";
import {action, describe, h, replace, safeHref, status, toast, when} from "../dom.js";
import {later} from "./later.js";
import {tabs} from "./tabs.js";

const SIZES = ["small", "medium", "large"];
const BUSY = new Set(["creating", "stopping"]);

function lifecycle(sandbox, reload, {onDelete} = {}) {
  const id = sandbox.id;
  const buttons = [];
  if (sandbox.status === "running") buttons.push(action("Stop", async () => { await api("POST", `/sandboxes/${id}/stop`); await reload(); }));
  if (["stopped", "suspended"].includes(sandbox.status)) {
    buttons.push(action("Start", async () => { await api("POST", `/sandboxes/${id}/start`); await reload(); }));
  }
  buttons.push(action("Delete", async () => {
    if (!confirm(`Delete sandbox ${sandbox.name || id} and everything in it?`)) return;
    await api("DELETE", `/sandboxes/${id}`);
    toast("Sandbox deleted");
    if (onDelete) onDelete(); else await reload();
  }, {class: "danger"}));
  return buttons;
}

export function sandboxesView(root) {
  const rows = h("tbody");
  const note = h("p", {class: "muted"});
  let timer = null;
  let gone = false;

  async function reload() {
    clearTimeout(timer);
    try {
      const {data, total} = await api("GET", "/sandboxes");
      note.textContent = total ? `${total} sandbox${total === 1 ? "" : "es"}` : "No sandboxes yet.";
      replace(rows, data.map((sandbox) => h("tr", {dataset: {id: sandbox.id, name: sandbox.name || ""}},
        h("td", {}, h("a", {href: `#/sandboxes/${sandbox.id}`}, sandbox.name || sandbox.id)),
        h("td", {}, status(sandbox.status)), h("td", {}, sandbox.size), h("td", {}, sandbox.template_id),
        h("td", {}, when(sandbox.created_at)), h("td", {class: "actions"}, lifecycle(sandbox, reload)))));
      if (!gone && data.some((sandbox) => BUSY.has(sandbox.status))) timer = setTimeout(reload, 1500);
    } catch (error) {
      note.textContent = describe(error);
    }
  }

  const templates = h("select", {id: "sandbox-template", name: "template"}, h("option", {value: "default"}, "default"));
  const form = h("form", {class: "inline", id: "new-sandbox"},
    h("div", {}, h("label", {for: "sandbox-name"}, "Name"), h("input", {id: "sandbox-name", name: "name", placeholder: "my-app", maxlength: 100})),
    h("div", {}, h("label", {for: "sandbox-size"}, "Size"), h("select", {id: "sandbox-size", name: "size"}, SIZES.map((s) => h("option", {}, s)))),
    h("div", {}, h("label", {for: "sandbox-template"}, "Template"), templates),
    h("button", {type: "submit", class: "primary"}, "Create sandbox"));
  api("GET", "/sandbox-templates").then(({data}) => {  // ready ones; a server without templates keeps "default"
    replace(templates, data.filter((t) => t.status === "ready").map((t) => h("option", {value: t.name}, t.name)));
  }).catch(() => {});
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = form.querySelector("button");
    button.disabled = true;
    button.textContent = "Creating…";
    try {
      const body = {size: form.size.value, template_id: form.template.value || "default"};
      if (form.name.value.trim()) body.name = form.name.value.trim();
      const {data} = await api("POST", "/sandboxes", body);
      toast(`Sandbox ${data.name || data.id} is ${data.status}`);
      form.reset();
      await reload();
    } catch (error) {
      toast(describe(error), true);
    } finally {
      button.disabled = false;
      button.textContent = "Create sandbox";
    }
  });

  replace(root, h("h1", {}, "Sandboxes"), h("div", {class: "card"}, form), note,
    h("table", {}, h("thead", {}, h("tr", {}, ["Name", "Status", "Size", "Template", "Created", ""].map((t) => h("th", {}, t)))), rows));
  reload();
  return () => { gone = true; clearTimeout(timer); };
}

export function sandboxView(root, id) {
  const head = h("div", {class: "card"});
  const cleanups = [];
  let timer = null;
  let gone = false;
  let sandbox = null;

  async function reload() {
    clearTimeout(timer);
    try {
      sandbox = (await api("GET", `/sandboxes/${id}`)).data;
    } catch (error) {
      replace(root, h("h1", {}, "Sandbox"), h("p", {class: "error-text"}, describe(error)), h("a", {href: "#/sandboxes"}, "All sandboxes"));
      return;
    }
    replace(head, h("div", {class: "row"}, h("h1", {}, sandbox.name || sandbox.id), status(sandbox.status),
      h("span", {class: "muted"}, `${sandbox.size} · ${sandbox.template_id} · ${sandbox.slug}`),
      h("span", {class: "actions"}, lifecycle(sandbox, reload, {onDelete: () => { location.hash = "#/sandboxes"; }}))),
      h("p", {class: "muted"}, "id ", h("code", {}, sandbox.id), ` · created ${when(sandbox.created_at)}`));
    if (!gone) timer = setTimeout(reload, BUSY.has(sandbox.status) ? 1500 : 10000);
  }

  const panels = tabs({
    Terminal: (panel) => {
      const box = h("div", {class: "terminal", id: "sandbox-terminal"});
      replace(panel, box);
      const live = liveExec(id);
      const release = later(import("../terminal.js"), ({execTerminal}) => execTerminal(box, live.run).close);
      return () => { release(); live.close(); };
    },
    Processes: (panel) => processes(panel, id),
    Logs: (panel) => liveLogs(panel, id),
    Previews: (panel) => previews(panel, id),
  });
  replace(root, h("p", {}, h("a", {href: "#/sandboxes"}, "← Sandboxes")), head, panels.element);
  cleanups.push(panels.close);
  reload();
  return () => { gone = true; clearTimeout(timer); for (const cleanup of cleanups) cleanup(); };
}

// Runs a command through exec, and hands its output lines over as they are written:
// the sandbox's event stream says which exec_id a command got (`sandbox.exec.started`
// carries the command, where a unique comment line finds it), then carries its lines.
function liveExec(id) {
  const waiting = new Map();  // nonce -> line handler, until the command has started
  const running = new Map();  // exec_id -> line handler
  let ready = false;
  const close = follow(`/sandboxes/${id}/events`, {
    "sandbox.exec.started": (event) => {
      for (const [nonce, handler] of waiting) {
        if (event.command?.startsWith(`# ${nonce}\n`)) { running.set(event.exec_id, handler); waiting.delete(nonce); }
      }
    },
    "sandbox.exec.stdout": (event) => running.get(event.exec_id)?.("stdout", event.line),
    "sandbox.exec.stderr": (event) => running.get(event.exec_id)?.("stderr", event.line),
    "sandbox.exec.completed": (event) => running.delete(event.exec_id),
  }, (state) => { ready = state === "open"; });
  async function run(body, onLine) {
    const nonce = `console-${[...crypto.getRandomValues(new Uint8Array(12))].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
    let done = false;
    if (ready) waiting.set(nonce, (stream, line) => { if (!done) onLine(stream, line); });
    try {
      return await api("POST", `/sandboxes/${id}/exec`, {...body, command: `# ${nonce}\n${body.command}`, timeout: 300});
    } finally {
      done = true;  // lines still on their way are in the answer already
      waiting.delete(nonce);
    }
  }
  return {run, close};
}

function logLine(text, stream) {
  return h("div", {class: stream === "stderr" ? "stderr" : ""}, text);
}

function appendLine(pre, text, stream) {
  const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  pre.append(logLine(text, stream));
  while (pre.childElementCount > 5000) pre.firstElementChild.remove();
  if (atEnd) pre.scrollTop = pre.scrollHeight;
}

function processes(panel, id) {
  const rows = h("tbody");
  const title = h("h2", {}, "Output");
  const output = h("pre", {class: "log", id: "process-log"});
  let stopStream = () => {};
  let timer = null;
  let gone = false;

  function watch(process) {
    stopStream();
    output.replaceChildren();
    title.textContent = `Output of ${process.name} (${process.pid})`;
    let stop = null;
    stop = follow(`/sandboxes/${id}/processes/${process.pid}/stream`, {
      log: (line) => appendLine(output, line.line, line.stream),
      exit: (end) => {
        appendLine(output, `[${end.status}${end.exit_code === null || end.exit_code === undefined ? "" : `, exit ${end.exit_code}`}]`, "stdout");
        stop();
        reload();
      },
    });
    stopStream = stop;
  }

  async function reload() {
    clearTimeout(timer);
    try {
      const {data} = await api("GET", `/sandboxes/${id}/processes`);
      replace(rows, data.length ? data.map((process) => h("tr", {dataset: {pid: process.pid}},
        h("td", {}, process.name), h("td", {}, h("code", {}, process.cmd)), h("td", {}, status(process.status)),
        h("td", {}, process.exit_code ?? ""), h("td", {}, when(process.started_at)),
        h("td", {class: "actions"}, h("button", {type: "button", onclick: () => watch(process)}, "Logs"),
          process.status === "running" ? action("Kill", async () => { await api("DELETE", `/sandboxes/${id}/processes/${process.pid}`); await reload(); }, {class: "danger"}) : null)))
        : [h("tr", {}, h("td", {colspan: 6, class: "muted"}, "No processes."))]);
      if (!gone) timer = setTimeout(reload, 5000);
    } catch (error) {
      replace(rows, h("tr", {}, h("td", {colspan: 6, class: "error-text"}, describe(error))));
    }
  }

  const form = h("form", {class: "inline", id: "new-process"},
    h("div", {}, h("label", {for: "process-cmd"}, "Command"), h("input", {id: "process-cmd", name: "cmd", size: 40, required: true, placeholder: "python3 -m http.server 8000"})),
    h("div", {}, h("label", {for: "process-name"}, "Name"), h("input", {id: "process-name", name: "name", placeholder: "optional"})),
    h("button", {type: "submit", class: "primary"}, "Start process"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const body = {cmd: form.cmd.value};
      if (form.name.value.trim()) body.name = form.name.value.trim();
      const {data} = await api("POST", `/sandboxes/${id}/processes`, body);
      form.reset();
      await reload();
      watch(data);
    } catch (error) {
      toast(describe(error), true);
    }
  });
  replace(panel, h("div", {class: "card"}, form),
    h("table", {}, h("thead", {}, h("tr", {}, ["Name", "Command", "Status", "Exit", "Started", ""].map((t) => h("th", {}, t)))), rows),
    title, output);
  reload();
  return () => { gone = true; clearTimeout(timer); stopStream(); };
}

function liveLogs(panel, id) {
  const state = h("span", {class: "muted"}, "connecting…");
  const output = h("pre", {class: "log", id: "sandbox-log"});
  const line = (stream) => (event) => appendLine(output, event.line, stream);
  const stop = follow(`/sandboxes/${id}/logs/stream`, {
    "sandbox.exec.stdout": line("stdout"), "sandbox.exec.stderr": line("stderr"),
    "sandbox.process.stdout": line("stdout"), "sandbox.process.stderr": line("stderr"),
  }, (value) => { state.textContent = value === "open" ? "live" : value; });
  replace(panel, h("p", {}, "Every output line of the sandbox's execs and processes, as it is written: ", state), output);
  return stop;
}

function previews(panel, id) {
  const exposed = h("ul", {id: "exposed"});
  const shares = h("tbody");

  async function openLink(url) {
    const {data} = await api("POST", `/sandboxes/${id}/preview-token`, {expires_in: 3600});
    const link = new URL(url);
    link.searchParams.set("preview_token", data.token);
    window.open(safeHref(link.toString()), "_blank", "noopener");
  }

  function showExposed(preview) {
    exposed.querySelector(`[data-port="${preview.port}"]`)?.remove();
    exposed.append(h("li", {dataset: {port: preview.port}}, `port ${preview.port}: `, h("code", {}, preview.url), " ",
      action("Open (1 h token)", () => openLink(preview.url), {class: "link"})));
  }

  async function reloadShares() {
    try {
      const {data} = await api("GET", `/sandboxes/${id}/shares`);
      replace(shares, data.length ? data.map((share) => h("tr", {},
        h("td", {}, share.url ? h("code", {}, share.url) : h("span", {class: "muted"}, "no exposed port")),
        h("td", {}, share.token_prefix ? h("code", {}, `${share.token_prefix}…`) : ""),
        h("td", {}, share.expires_at ? when(share.expires_at) : "never"), h("td", {}, when(share.created_at)),
        h("td", {class: "actions"}, action("Revoke", async () => { await api("DELETE", `/sandboxes/${id}/shares/${share.id}`); await reloadShares(); }, {class: "danger"}))))
        : [h("tr", {}, h("td", {colspan: 5, class: "muted"}, "No share links."))]);
    } catch (error) {
      replace(shares, h("tr", {}, h("td", {colspan: 5, class: "error-text"}, describe(error))));
    }
  }

  const expose = h("form", {class: "inline", id: "expose-port"},
    h("div", {}, h("label", {for: "expose-port-number"}, "Port"), h("input", {id: "expose-port-number", name: "port", type: "number", min: 1, max: 65535, required: true})),
    h("button", {type: "submit", class: "primary"}, "Expose"));
  expose.addEventListener("submit", async (event) => {
    event.preventDefault();
    try { showExposed(await api("POST", `/sandboxes/${id}/expose`, {port: Number(expose.port.value)})); } catch (error) { toast(describe(error), true); }
  });
  const fresh = h("p", {id: "new-share"});
  const share = h("form", {class: "inline", id: "create-share"},
    h("div", {}, h("label", {for: "share-port"}, "Port (optional)"), h("input", {id: "share-port", name: "port", type: "number", min: 1, max: 65535})),
    h("div", {}, h("label", {for: "share-expiry"}, "Expires in seconds (optional)"), h("input", {id: "share-expiry", name: "expires", type: "number", min: 1})),
    h("button", {type: "submit"}, "Create share link"));
  share.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = {};
    if (share.port.value) body.port = Number(share.port.value);
    if (share.expires.value) body.expires_in = Number(share.expires.value);
    try {
      const {data} = await api("POST", `/sandboxes/${id}/shares`, body);
      replace(fresh, "New link (shown once): ", data.url ? h("a", {href: data.url, target: "_blank", rel: "noopener noreferrer"}, data.url) : h("code", {}, data.token));
      await reloadShares();
    } catch (error) { toast(describe(error), true); }
  });
  replace(panel,
    h("h2", {}, "Exposed ports"), h("div", {class: "card"}, expose, exposed),
    h("h2", {}, "Share links"), h("div", {class: "card"}, share, fresh),
    h("table", {}, h("thead", {}, h("tr", {}, ["URL", "Token", "Expires", "Created", ""].map((t) => h("th", {}, t)))), shares));
  reloadShares();
  return () => {};
}
