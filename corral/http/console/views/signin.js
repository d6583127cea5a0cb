// Sign in with an e-mail and password (a JWT session) or with an API key.

import {signInKey, signInPassword} from "../api.js";
import {describe, h} from "../dom.js";

export function signInView(done) {
  const message = h("p", {class: "error-text", id: "signin-error", role: "alert"});
  const busy = (form, run) => async (event) => {
    event.preventDefault();
    message.textContent = "";
    const button = form.querySelector("button");
    button.disabled = true;
    try { await run(); done(); } catch (error) { message.textContent = describe(error); } finally { button.disabled = false; }
  };
  const password = h("form", {id: "signin-password"},
    h("label", {for: "email"}, "E-mail"), h("input", {id: "email", name: "email", type: "email", autocomplete: "username", required: true}),
    h("label", {for: "password"}, "Password"),
    h("input", {id: "password", name: "password", type: "password", autocomplete: "current-password", required: true}),
    h("p", {}, h("button", {type: "submit", class: "primary"}, "Sign in")));
  password.addEventListener("submit", busy(password, () => signInPassword(password.email.value, password.password.value)));
  const key = h("form", {id: "signin-key"},
    h("label", {for: "api-key"}, "API key"),
    h("input", {id: "api-key", name: "key", type: "password", placeholder: "msk_u_…", autocomplete: "off", required: true}),
    h("p", {}, h("button", {type: "submit"}, "Sign in with a key")));
  key.addEventListener("submit", busy(key, () => signInKey(key.key.value)));
  return h("div", {class: "signin"},
    h("div", {class: "card"}, h("h1", {}, "Sign in to Corral"), password, message),
    h("div", {class: "card"}, h("p", {class: "muted"}, "Or use an API key (kept in this tab only)."), key));
}
