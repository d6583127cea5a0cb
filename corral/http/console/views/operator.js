// The operator page (#/operator): the node's capacity and load, the cluster's nodes, its
// live actors, and sparklines of request rate, latency, instances and mailbox depth
// over the last minutes, from GET /admin/node, /admin/nodes and /admin/actors polled
// every 2 s. It takes the admin
// key, kept in this tab's sessionStorage only (never in the URL), apart from any tenant
// session: an operator need not be signed in as a tenant.

import {callWith, ApiError} from "../api.js";
import {describe, h, replace, status} from "../dom.js";
import {sparkline} from "./sparkline.js";

const KEY = "corral.console.admin";
const POLL_MS = 2000;
const ACTORS_SHOWN = 200;

export const adminKey = {
  get: () => sessionStorage.getItem(KEY),
  set: (key) => sessionStorage.setItem(KEY, key),
  forget: () => sessionStorage.removeItem(KEY),
};

export function operatorView(root) {
  let stop = () => {};
  const show = (message = "") => {
    stop();
    const key = adminKey.get();
    stop = key ? dashboard(root, key, () => { adminKey.forget(); show(); }, (error) => { adminKey.forget(); show(describe(error)); })
               : keyForm(root, message, show);
  };
  show();
  return () => stop();
}

function keyForm(root, message, done) {
  const error = h("p", {class: "error-text", id: "operator-error", role: "alert"}, message);
  const form = h("form", {id: "admin-key-form"},
    h("label", {for: "admin-key"}, "Admin key"),
    h("input", {id: "admin-key", name: "key", type: "password", placeholder: "msk_a_…", autocomplete: "off", required: true}),
    h("p", {}, h("button", {type: "submit", class: "primary"}, "Open the operator view")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = form.key.value.trim();
    const button = form.querySelector("button");
    button.disabled = true;
    error.textContent = "";
    try {
      await callWith(key, "GET", "/admin/node");
      adminKey.set(key);
      done();
    } catch (failure) {
      error.textContent = describe(failure);
    } finally {
      button.disabled = false;
    }
  });
  replace(root, h("div", {class: "signin"}, h("div", {class: "card"}, h("h1", {}, "Operator"),
    h("p", {class: "muted"}, "The node's live picture needs the admin key (kept in this tab only)."), form, error)));
  return () => {};
}

function mib(value) { return value === null || value === undefined ? "?" : value >= 10240 ? `${(value / 1024).toFixed(1)} GiB` : `${value} MiB`; }

function duration(seconds) {
  const s = Math.floor(seconds || 0);
  const [d, hr, m] = [Math.floor(s / 86400), Math.floor(s / 3600) % 24, Math.floor(s / 60) % 60];
  return d ? `${d}d ${hr}h` : hr ? `${hr}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s}s`;
}

function figure(label, value, id) {
  return h("div", {class: "figure", dataset: {figure: id}}, h("span", {class: "muted"}, label), h("strong", {}, value));
}

function nodePanel(node) {
  const {capacity: cap, load, actors, warm_pool: pool, requests} = node;
  const kinds = Object.entries(load.instances_by_kind || {}).map(([kind, counts]) =>
    `${kind} ${counts.running || 0} running / ${Object.values(counts).reduce((a, b) => a + b, 0)}`).join(" · ");
  return [
    h("div", {class: "row"}, h("h2", {id: "node-name"}, node.node.name),
      h("span", {class: "muted"}, `up ${duration(node.node.uptime_seconds)} (since ${new Date(node.node.started_at).toLocaleString()})`)),
    h("div", {class: "figures"},
      figure("Cores", cap.cpu_cores, "cores"),
      figure("Load", (load.load_average || []).join(" ") || "?", "load"),
      figure("Memory available", `${mib(cap.memory_available_mb)} of ${mib(cap.memory_total_mb)}`, "memory"),
      figure("Disk free", `${cap.disk_free_gb ?? "?"} of ${cap.disk_total_gb ?? "?"} GiB (reserve ${cap.disk_reserve_gb})`, "disk"),
      figure("Instances running here", load.instances_running, "instances"),
      figure("Actors live", `${actors.live} (${actors.busy} busy, ${actors.failed} failed)`, "actors"),
      figure("Mailboxes", `${actors.mailbox_depth} queued (max ${actors.max_mailbox_depth})`, "mailbox"),
      figure("Restarts · crashes", `${actors.restarts} · ${actors.recent_crashes}`, "restarts"),
      figure("Requests", `${requests.per_second}/s, ${requests.errors} errors (last ${requests.window_seconds}s)`, "requests"),
      pool ? figure("Warm pool", `${pool.ready_total} ready of ${pool.target}, ${pool.default_small.booting} booting`, "warm-pool") : null),
    h("p", {class: "muted"}, `Records: ${kinds}`),
    h("p", {class: "muted"}, "Actors by kind: ", Object.entries(actors.by_kind).map(([k, n]) => `${k} ${n}`).join(" · ") || "none"),
  ];
}

function ago(iso) {
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  return seconds < 60 ? `${seconds.toFixed(0)} s ago` : `${duration(seconds)} ago`;
}

function nodeRows(nodes) {
  if (!nodes.length) return [h("tr", {}, h("td", {colspan: 8, class: "muted"}, "No node has registered."))];
  return nodes.map((node) => h("tr", {dataset: {node: node.name}},
    h("td", {}, node.name), h("td", {}, status(node.state)), h("td", {}, node.region),
    h("td", {}, h("code", {}, node.advertise_url)), h("td", {}, ago(node.heartbeat_at)),
    h("td", {}, `${node.capacity.cores} cores, ${mib(node.load.memory_mb_used)} of ${mib(node.capacity.memory_mb)}`),
    h("td", {}, `${node.capacity.disk_free_gb} GiB`),
    h("td", {}, `${node.resources} (${node.load.instances} with the pool)`)));
}

function actorRows(actors) {
  const sorted = [...actors].sort((a, b) => (b.mailbox_depth - a.mailbox_depth) || (b.restarts - a.restarts)
    || a.kind.localeCompare(b.kind) || a.id.localeCompare(b.id)).slice(0, ACTORS_SHOWN);
  if (!sorted.length) return [h("tr", {}, h("td", {colspan: 8, class: "muted"}, "No live actors: idle ones passivate."))];
  return sorted.map((actor) => h("tr", {dataset: {kind: actor.kind, id: actor.id}},
    h("td", {}, actor.kind), h("td", {}, h("code", {}, actor.id)),
    h("td", {}, status(actor.status === "alive" ? actor.state || actor.status : actor.status)),
    h("td", {}, `${actor.mailbox_depth}${actor.mailbox_capacity ? " / " + actor.mailbox_capacity : ""}${actor.busy ? " · busy" : ""}`),
    h("td", {}, actor.restarts), h("td", {}, actor.recent_crashes ?? 0),
    h("td", {class: actor.last_error ? "error-text" : "muted"}, actor.last_error || "—"),
    h("td", {}, duration(actor.age_seconds))));
}

// The rate chart's first five minutes, from the server's ten-second buckets (a missing
// bucket had no request), as samples POLL_MS apart like the ones polled after.
function seedRate(chart, requests) {
  const {buckets, bucket_seconds: span} = requests;
  if (buckets.length < 2) return;
  const counts = new Map(buckets.map((bucket) => [bucket.at, bucket.requests]));
  const perBucket = Math.round(span * 1000 / POLL_MS);
  for (let at = buckets[0].at; at < buckets[buckets.length - 1].at; at += span) {
    for (let i = 0; i < perBucket; i++) chart.push((counts.get(at) || 0) / span);
  }
}

function dashboard(root, key, signOut, refused) {
  const panel = h("div", {class: "card", id: "node-panel"}, h("p", {class: "muted"}, "Loading…"));
  const charts = {
    rate: sparkline("Requests/s", (v) => v.toFixed(1)),
    latency: sparkline("Mean latency", (v) => `${v.toFixed(1)} ms`),
    instances: sparkline("Instances", (v) => String(Math.round(v))),
    mailbox: sparkline("Mailbox depth", (v) => String(Math.round(v))),
  };
  for (const [name, chart] of Object.entries(charts)) chart.element.id = `chart-${name}`;
  const rows = h("tbody", {id: "actors"});
  const nodeList = h("tbody", {id: "nodes"});
  const state = h("span", {class: "muted", id: "operator-state"});
  replace(root,
    h("div", {class: "row"}, h("h1", {}, "Operator"), state,
      h("button", {type: "button", class: "link", id: "forget-admin-key", onclick: signOut}, "Forget the admin key")),
    panel,
    h("div", {class: "card charts"}, Object.values(charts).map((c) => c.element)),
    h("h2", {}, "Nodes"),
    h("table", {id: "nodes-table"},
      h("thead", {}, h("tr", {}, ["Name", "State", "Region", "Address", "Heartbeat", "Cores, memory", "Disk free", "Instances"].map((t) => h("th", {}, t)))),
      nodeList),
    h("h2", {}, "Live actors"),
    h("table", {id: "actors-table"},
      h("thead", {}, h("tr", {}, ["Kind", "Id", "State", "Mailbox", "Restarts", "Crashes", "Last error", "Age"].map((t) => h("th", {}, t)))),
      rows));

  let timer = null;
  let stopped = false;
  let last = null;  // the previous sample: {at, total}
  async function poll() {
    try {
      const [{data: node}, {data: actors}, {data: nodes}] = await Promise.all(
        [callWith(key, "GET", "/admin/node"), callWith(key, "GET", "/admin/actors"), callWith(key, "GET", "/admin/nodes")]);
      if (stopped) return;
      const at = Date.now();
      if (last === null) {
        seedRate(charts.rate, node.requests);
      } else {
        charts.rate.push(Math.max(0, node.requests.total - last.total) / Math.max(0.001, (at - last.at) / 1000));
      }
      last = {at, total: node.requests.total};
      charts.latency.push(node.requests.mean_ms);
      charts.instances.push(node.load.instances_running);
      charts.mailbox.push(node.actors.mailbox_depth);
      replace(panel, nodePanel(node));
      replace(rows, actorRows(actors));
      replace(nodeList, nodeRows(nodes));
      state.textContent = `updated ${new Date(at).toLocaleTimeString()}`;
    } catch (error) {
      if (stopped) return;
      if (error instanceof ApiError && (error.status === 401 || error.status === 403)) { refused(error); return; }
      state.textContent = `update failed: ${describe(error)}`;
    }
    if (!stopped) timer = setTimeout(poll, POLL_MS);
  }
  poll();
  return () => { stopped = true; clearTimeout(timer); };
}
