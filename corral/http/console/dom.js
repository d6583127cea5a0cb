// Small DOM helpers: build elements without innerHTML (no markup from data is ever parsed).

export function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") element.addEventListener(name.slice(2), value);
    else if (name === "class") element.className = value;
    else if (name === "dataset") Object.assign(element.dataset, value);
    else if (name === "href") element.setAttribute("href", safeHref(value));
    else if (value === true) element.setAttribute(name, "");
    else element.setAttribute(name, String(value));
  }
  append(element, children);
  return element;
}

export function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

export function replace(element, ...children) {
  element.replaceChildren();
  return append(element, children);
}

const BUSY = new Set(["creating", "provisioning", "stopping", "starting", "deleting", "building", "publishing"]);

export function status(value) {
  const text = value ?? "unknown";
  return h("span", {class: `status ${text}${BUSY.has(text) ? " busy" : ""}`, dataset: {status: text}}, text);
}

export function when(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? String(iso) : date.toLocaleString();
}

export function toast(message, bad = false) {
  const box = document.getElementById("toast");
  const item = h("div", {class: bad ? "bad" : ""}, message);
  box.append(item);
  setTimeout(() => item.remove(), bad ? 8000 : 4000);
}

// A button that runs `action` once at a time, disabled meanwhile; errors become toasts.
export function action(label, run, attrs = {}) {
  const button = h("button", {type: "button", ...attrs}, label);
  button.addEventListener("click", async () => {
    button.disabled = true;
    try { await run(); } catch (error) { toast(describe(error), true); } finally { button.disabled = false; }
  });
  return button;
}

export function describe(error) {
  if (error && error.code) return `${error.message} (${error.code}${error.requestId ? ", " + error.requestId : ""})`;
  return String(error && error.message ? error.message : error);
}

// Links from API data (preview, share, deployment URLs) only ever open http(s) pages,
// or the console's own #/routes: never a javascript: or data: URL.
export function safeHref(value) {
  const text = String(value);
  if (text.startsWith("#/")) return text;
  try {
    const url = new URL(text, location.href);
    return ["http:", "https:"].includes(url.protocol) ? url.toString() : "#";
  } catch {
    return "#";
  }
}
