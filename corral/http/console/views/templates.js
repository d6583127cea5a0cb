// Sandbox templates: the list, a new template (base, Debian packages, setup commands),
// rebuilds and deletes, and a build's progress: its status and log lines live until it
// ends. A server without templates (the route answers 404) says so.

import {api, follow} from "../api.js";
import {action, describe, h, replace, status, toast, when} from "../dom.js";

const DONE = new Set(["ready", "failed", "cancelled"]);

export function templatesView(root) {
  const rows = h("tbody");
  const note = h("p", {class: "muted"});
  const progress = h("div", {id: "build-progress"});
  let stopBuild = () => {};

  function watch(build, name) {
    stopBuild();
    const state = h("span", {id: "build-status"}, status(build.status));
    const log = h("pre", {class: "log", id: "build-log"});
    const started = Date.now();
    const elapsed = h("span", {class: "muted"});
    const tick = setInterval(() => { elapsed.textContent = `${Math.round((Date.now() - started) / 1000)} s`; }, 500);
    let stop = () => {};
    const end = () => { clearInterval(tick); stop(); };
    stop = follow(`/sandbox-template-builds/${build.id}/logs/stream`, {
      log: (line) => { log.append(h("div", {}, line.line)); log.scrollTop = log.scrollHeight; },
      status: (value) => {
        replace(state, status(value.status));
        if (DONE.has(value.status)) { cancel.hidden = true; end(); reload(); }
      },
    });
    stopBuild = end;
    const cancel = action("Cancel", async () => { await api("POST", `/sandbox-template-builds/${build.id}/cancel`); });
    cancel.hidden = DONE.has(build.status);
    replace(progress, h("div", {class: "card"},
      h("div", {class: "progress"}, h("strong", {}, `Build of ${name}`), state, elapsed, cancel), log));
  }

  async function reload() {
    try {
      const {data} = await api("GET", "/sandbox-templates");
      note.textContent = "";
      replace(rows, data.map((template) => h("tr", {dataset: {name: template.name}},
        h("td", {}, template.name), h("td", {}, status(template.status)), h("td", {}, template.builtin ? "built in" : template.base),
        h("td", {}, (template.packages || []).join(" ")), h("td", {}, when(template.updated_at || template.created_at)),
        h("td", {class: "actions"}, template.builtin ? null : [
          template.latest_build_id ? h("button", {type: "button", onclick: async () => {
            try { watch((await api("GET", `/sandbox-template-builds/${template.latest_build_id}`)).data, template.name); } catch (error) { toast(describe(error), true); }
          }}, "Build log") : null,
          action("Rebuild", async () => watch((await api("POST", `/sandbox-templates/${template.id}/builds`)).data, template.name)),
          action("Delete", async () => {
            if (!confirm(`Delete template ${template.name}?`)) return;
            await api("DELETE", `/sandbox-templates/${template.id}`);
            await reload();
          }, {class: "danger"}),
        ]))));
    } catch (error) {
      note.textContent = error.status === 404 && error.code === "NOT_FOUND" ? "Templates are not available on this server." : describe(error);
    }
  }

  const form = h("form", {id: "new-template"},
    h("div", {class: "row"},
      h("div", {}, h("label", {for: "template-name"}, "Name"), h("input", {id: "template-name", name: "name", required: true, placeholder: "my-stack"})),
      h("div", {}, h("label", {for: "template-base"}, "Base"), h("select", {id: "template-base", name: "base"}, h("option", {}, "default"), h("option", {}, "svc-desktop"))),
      h("div", {}, h("label", {for: "template-packages"}, "Debian packages"), h("input", {id: "template-packages", name: "packages", size: 40, placeholder: "nodejs npm"}))),
    h("label", {for: "template-setup"}, "Setup commands, one a line (run as root in /root)"),
    h("textarea", {id: "template-setup", name: "setup", rows: 3, cols: 80}),
    h("p", {}, h("button", {type: "submit", class: "primary"}, "Create and build")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = {name: form.name.value.trim(), base: form.base.value};
    const packages = form.packages.value.split(/\s+/).filter(Boolean);
    const setup = form.setup.value.split("\n").map((line) => line.trim()).filter(Boolean);
    if (packages.length) body.packages = packages;
    if (setup.length) body.setup = setup;
    try {
      const {data} = await api("POST", "/sandbox-templates", body);
      form.reset();
      await reload();
      watch(data.build, data.template.name);
    } catch (error) {
      toast(describe(error), true);
    }
  });
  replace(root, h("h1", {}, "Templates"), h("div", {class: "card"}, form), progress, note,
    h("table", {}, h("thead", {}, h("tr", {}, ["Name", "Status", "Base", "Packages", "Updated", ""].map((t) => h("th", {}, t)))), rows));
  reload();
  return () => stopBuild();
}
