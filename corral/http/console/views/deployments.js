// Deployments and their versions (promote a ready or archived one), and publishing a
// sandbox with its progress followed live. A server without deployments (the route
// answers 404) says so instead of failing.

import {api, follow} from "../api.js";
import {action, describe, h, replace, status, toast, when} from "../dom.js";

export function deploymentsView(root) {
  const list = h("div", {id: "deployments"}, h("p", {class: "muted"}, "Loading…"));
  const publishing = h("div");
  const releases = [];
  let publisher = null;
  replace(root, h("h1", {}, "Deployments"), publishing, list);

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
    publisher ??= publishForm(load, releases);
    if (!publishing.childElementCount) publishing.append(publisher.element);
    publisher.update(data);
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
  return () => { for (const release of releases) release(); };
}

const STEPS = {
  "deployment.publish.queued": () => "queued",
  "deployment.publish.building": (data) => `building: ${data.stage}`,
  "deployment.publish.uploading": (data) => `storing the artifact (${data.size_bytes} bytes)`,
  "deployment.publish.promoting": () => "promoting to production",
  "deployment.publish.completed": (data) => `completed: ${data.url}`,
  "deployment.publish.failed": (data) => `failed: ${data.error_code}: ${data.message}`,
};

// Publishes a running sandbox into an existing deployment or a new one (created in the
// sandbox's project first, so that its events can be followed from the start).
function publishForm(reload, releases) {
  const progress = h("ol", {id: "publish-progress"});
  const result = h("p", {id: "publish-result"});
  const sandboxes = h("select", {id: "publish-sandbox", name: "sandbox", required: true});
  const target = h("select", {id: "publish-deployment", name: "deployment"});
  const update = (deployments) => {
    const chosen = target.value;
    replace(target, h("option", {value: ""}, "a new deployment"), deployments.map((d) => h("option", {value: d.id}, d.name)));
    target.value = deployments.some((d) => d.id === chosen) ? chosen : "";
  };
  const form = h("form", {class: "inline", id: "publish"},
    h("div", {}, h("label", {for: "publish-sandbox"}, "Sandbox"), sandboxes),
    h("div", {}, h("label", {for: "publish-deployment"}, "Into"), target),
    h("div", {}, h("label", {for: "publish-name"}, "New deployment's name"), h("input", {id: "publish-name", name: "name", placeholder: "my-site"})),
    h("div", {}, h("label", {for: "publish-output"}, "Output path"), h("input", {id: "publish-output", name: "output", placeholder: "/workspace"})),
    h("div", {}, h("label", {for: "publish-build"}, "Build command"), h("input", {id: "publish-build", name: "build", placeholder: "optional"})),
    h("button", {type: "submit", class: "primary"}, "Publish"));
  api("GET", "/sandboxes?status=running").then(({data}) => {
    replace(sandboxes, data.map((sandbox) => h("option", {value: sandbox.id}, sandbox.name || sandbox.id)));
  }).catch(() => {});
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = form.querySelector("button");
    button.disabled = true;
    progress.replaceChildren();
    result.textContent = "";
    result.className = "";
    const started = Date.now();
    const step = (text) => progress.append(h("li", {}, `${((Date.now() - started) / 1000).toFixed(1)} s  ${text}`));
    let stop = () => {};
    try {
      let deploymentId = target.value;
      if (!deploymentId) {
        const sandbox = (await api("GET", `/sandboxes/${sandboxes.value}`)).data;
        const name = form.name.value.trim() || sandbox.name || "site";
        deploymentId = (await api("POST", `/projects/${sandbox.project_id}/deployments`, {name})).data.id;
        step(`created deployment ${name}`);
      }
      await new Promise((resolve) => {
        const handlers = Object.fromEntries(Object.entries(STEPS).map(([type, text]) => [type, (data) => step(text(data))]));
        stop = follow(`/deployments/${deploymentId}/events`, handlers, (state) => { if (state === "open") resolve(); });
        releases.push(stop);
        setTimeout(resolve, 3000);  // publish anyway; the steps would then be missing, not the result
      });
      const body = {source_sandbox_id: sandboxes.value};
      if (form.output.value.trim()) body.output_path = form.output.value.trim();
      if (form.build.value.trim()) body.build_command = form.build.value.trim();
      const {data} = await api("POST", `/deployments/${deploymentId}/publish`, body);
      result.textContent = `v${data.version.version_number ?? ""} is ${data.version.state}${data.promoted ? " and serves production" : ""}.`;
      await reload();
      target.value = deploymentId;  // the next publish goes to the same deployment
    } catch (error) {
      result.textContent = describe(error);
      result.className = "error-text";
    } finally {
      setTimeout(stop, 1000);  // the last events may still be on their way
      button.disabled = false;
    }
  });
  return {element: h("div", {class: "card"}, h("h2", {}, "Publish a sandbox"), form, progress, result), update};
}
