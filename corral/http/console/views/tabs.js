// Tabs whose panels are built when first shown and released when the view goes.

import {h} from "../dom.js";

export function tabs(builders) {
  const bar = h("div", {class: "tabs", role: "tablist"});
  const body = h("div", {class: "tab-panels"});
  const built = new Map();
  const buttons = new Map();
  function show(name) {
    for (const [other, button] of buttons) button.classList.toggle("active", other === name);
    for (const [other, entry] of built) entry.panel.hidden = other !== name;
    if (!built.has(name)) {
      const panel = h("div", {class: "tab-panel", dataset: {tab: name.toLowerCase()}});
      body.append(panel);
      built.set(name, {panel, release: builders[name](panel) || (() => {})});
    }
  }
  for (const name of Object.keys(builders)) {
    const button = h("button", {type: "button", role: "tab", dataset: {tab: name.toLowerCase()}, onclick: () => show(name)}, name);
    buttons.set(name, button);
    bar.append(button);
  }
  const element = h("div", {}, bar, body);
  queueMicrotask(() => show(Object.keys(builders)[0]));
  return {element, show, close: () => { for (const entry of built.values()) entry.release(); }};
}
