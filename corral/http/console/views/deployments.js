// Deployments and their versions (promote a ready or archived one). A server without
// deployments (the route answers 404) says so instead of failing.

import {api} from "../api.js";
import {action, describe, h, replace, status, toast, when} from "../dom.js";

export function deploymentsView(root) {
  const list = h("div", {id: "deployments"}, h("p", {class: "muted"}, "Loading…"));
  replace(root, h("h1", {}, "Deployments"), list);

  async function versions(deployment, box) {
    try {
      const {data, next_cursor: next} = await api("GET", `/deployments/${deployment.id}/versions?limit=20`);
      replace(box, h("table", {},
        h("thead", {}, h("tr", {}, ["Version", "State", "Kind", "URL", "Created", ""].map((t) => h("th", {}, t)))),
        h("tbody", {}, data.length ? data.map((version) => h("tr", {dataset: {id: version.id}},
          h("td", {}, `v${version.version_number ?? "?"}`, version.id === deployment.active_version_id ? h("strong", {}, " (active)") : null),
          h("td", {}, status(version.state)), h("td", {}, version.kind || ""),
          h("td", {}, version.url ? h("a", {href: version.url, target: "_blank", rel: "noopener noreferrer"}, version.url) : ""),
          h("td", {}, when(version.created_at)),
          h("td", {class: "actions"}, ["ready", "archived"].includes(version.state) && version.id !== deployment.active_version_id
            ? action("Promote", async () => {
              await api("POST", `/deployments/${deployment.id}/versions/${version.id}/promote`, {});
              toast(`v${version.version_number} promoted`);
              await load();
            }) : null)))
          : [h("tr", {}, h("td", {colspan: 6, class: "muted"}, "No versions yet: publish from a sandbox."))])),
        next ? h("p", {class: "muted"}, "Older versions: see the API (cursor pagination).") : null);
    } catch (error) {
      replace(box, h("p", {class: "error-text"}, describe(error)));
    }
  }

  async function load() {
    let data;
    try {
      ({data} = await api("GET", "/deployments"));
    } catch (error) {
      replace(list, h("p", {class: "muted", id: "deployments-unavailable"},
        error.status === 404 ? "Deployments are not available on this server." : describe(error)));
      return;
    }
    if (!data.length) {
      replace(list, h("p", {class: "muted", id: "deployments-empty"}, "No deployments yet: publish one from a sandbox."));
      return;
    }
    replace(list, data.map((deployment) => {
      const box = h("div", {}, h("p", {class: "muted"}, "Loading versions…"));
      versions(deployment, box);
      return h("div", {class: "card", dataset: {id: deployment.id}},
        h("div", {class: "row"}, h("h2", {}, deployment.name), status(deployment.state),
          deployment.public_url ? h("a", {href: deployment.public_url, target: "_blank", rel: "noopener noreferrer"}, deployment.public_url) : null),
        box);
    }));
  }
  load();
  return () => {};
}
