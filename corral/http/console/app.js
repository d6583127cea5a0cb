// The console's entry point: loads the shell. A module graph with one file that failed
// to download runs nothing at all (browsers abort requests in flight when the
// machine's network changes), so the page reloads itself once, and if that fails
// too, says so with a Reload button instead of staying blank.

const RELOADED = "corral.console.reloaded";

import("./shell.js").catch((error) => {
  const last = Number(sessionStorage.getItem(RELOADED) || 0);
  if (Date.now() - last > 60_000) {
    sessionStorage.setItem(RELOADED, String(Date.now()));
    location.reload();
    return;
  }
  const main = document.getElementById("main");
  main.replaceChildren();
  const message = document.createElement("p");
  message.className = "error-text";
  message.id = "load-error";
  message.textContent = `The console could not load (${error.message || error}). `;
  const reload = document.createElement("button");
  reload.type = "button";
  reload.textContent = "Reload";
  reload.addEventListener("click", () => location.reload());
  message.append(reload);
  main.append(message);
});
