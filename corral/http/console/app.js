// The console's entry point: loads the shell, and says so plainly when a file of it
// could not be downloaded (a module graph that fails to load runs nothing at all).

import("./shell.js").catch((error) => {
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
