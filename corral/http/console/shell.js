// The console's shell: sign-in, the hash router (#/sandboxes/{id} ...) and the header.
// The operator page (#/operator) needs no tenant session: it takes the admin key itself.
// Each view renders into <main> and returns a function that releases what it opened
// (streams, sockets, timers) when the user navigates away.

import {current, onSession, signOut} from "./api.js";
import {replace, h} from "./dom.js";
import {signInView} from "./views/signin.js";
import {sandboxesView, sandboxView} from "./views/sandboxes.js";
import {computersView, computerView} from "./views/computers.js";
import {deploymentsView} from "./views/deployments.js";
import {creditsView} from "./views/credits.js";
import {templatesView} from "./views/templates.js";
import {operatorView} from "./views/operator.js";

const ROUTES = [
  [/^#\/sandboxes\/([\w-]+)$/, sandboxView, "sandboxes"],
  [/^#\/sandboxes$/, sandboxesView, "sandboxes"],
  [/^#\/computers\/([\w-]+)$/, computerView, "computers"],
  [/^#\/computers$/, computersView, "computers"],
  [/^#\/deployments$/, deploymentsView, "deployments"],
  [/^#\/credits$/, creditsView, "credits"],
  [/^#\/templates$/, templatesView, "templates"],
];

let release = () => {};

function render() {
  release();
  release = () => {};
  const main = document.getElementById("main");
  const session = current();
  document.getElementById("nav").hidden = !session;
  document.getElementById("sign-out").hidden = !session;
  document.getElementById("who").textContent = session ? [session.label, session.tenant].filter(Boolean).join(" · ") : "";
  if (location.hash === "#/operator") {
    for (const link of document.querySelectorAll("#nav a")) link.classList.remove("active");
    const root = h("div", {class: "view", dataset: {view: "operator"}});
    replace(main, root);
    release = operatorView(root) || (() => {});
    return;
  }
  if (!session) {
    replace(main, signInView(render));  // then the page asked for (a deep link), else sandboxes
    return;
  }
  const hash = location.hash || "#/sandboxes";
  for (const [pattern, view, section] of ROUTES) {
    const match = hash.match(pattern);
    if (!match) continue;
    for (const link of document.querySelectorAll("#nav a")) link.classList.toggle("active", link.dataset.section === section);
    const root = h("div", {class: "view", dataset: {view: section}});
    replace(main, root);
    release = view(root, ...match.slice(1)) || (() => {});
    return;
  }
  location.hash = "#/sandboxes";
}

window.addEventListener("hashchange", render);
document.getElementById("sign-out").addEventListener("click", () => signOut());
onSession((session) => { if (!session) render(); });
render();
