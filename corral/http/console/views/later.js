// Heavy modules (xterm.js, noVNC: about 1 MB) load only when a terminal or a desktop is
// first shown, so that signing in and the lists stay light.

import {toast} from "../dom.js";

// Runs `start(module)` once `loading` resolves, unless released first; answers the
// release function, which also releases what `start` returned.
export function later(loading, start) {
  let release = null;
  let gone = false;
  loading.then((module) => { if (!gone) release = start(module); })
    .catch((error) => toast(`could not load the page's module: ${error.message || error}`, true));
  return () => { gone = true; if (release) release(); };
}
