// Terminals drawn with xterm.js: a computer's PTY over its WebSocket, and a sandbox's
// line prompt whose commands run through exec (sandboxes have no PTY route).

import {Terminal} from "./vendor/xterm/xterm.mjs";
import {FitAddon} from "./vendor/xterm-addon-fit/addon-fit.mjs";

function draw(container) {
  const term = new Terminal({cursorBlink: true, fontSize: 13, convertEol: false, scrollback: 5000});
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(container);
  container.terminalText = () => {  // the whole buffer as text, for automation (tests read it)
    const buffer = term.buffer.active;
    const lines = [];
    for (let i = 0; i < buffer.length; i++) lines.push(buffer.getLine(i).translateToString(true));
    return lines.join("\n");
  };
  const refit = () => { try { fit.fit(); } catch { /* hidden */ } };
  refit();
  const observer = new ResizeObserver(refit);
  observer.observe(container);
  return {term, dispose: () => { observer.disconnect(); term.dispose(); }};
}

// `open(size)` resolves to the WebSocket URL of a new PTY session (`POST
// /computers/{id}/terminal`), `reopen()` to a URL of the same session with a fresh
// token. Bytes go both ways; a resize is the text frame {"type":"resize","cols","rows"}.
// A dropped connection is reopened (the session keeps its shell 60 s and replays its
// recent output, so the screen is redrawn from it); a shell that exited, or a session
// another window took over (close code 4000), ends it.
export function ptyTerminal(container, {open, reopen}, onState = () => {}) {
  const {term, dispose} = draw(container);
  const encoder = new TextEncoder();
  let socket = null;
  let closed = false;
  let attempts = 0;
  const size = () => ({cols: term.cols, rows: term.rows});
  const note = (text, colour = 33) => term.write(`\r\n\x1b[${colour}m${text}\x1b[0m\r\n`);

  function connect(url, again) {
    const ws = new WebSocket(url);
    let opened = false;
    socket = ws;
    ws.binaryType = "arraybuffer";
    ws.onopen = () => {
      opened = true;
      attempts = 0;
      if (again) term.reset();  // the replay redraws the screen
      onState("open");
      ws.send(JSON.stringify({type: "resize", ...size()}));
      term.focus();
    };
    ws.onmessage = (event) => term.write(typeof event.data === "string" ? event.data : new Uint8Array(event.data));
    ws.onclose = async (event) => {
      if (closed || socket !== ws) return;
      if (event.code === 4000) { note("[this terminal was opened in another window]"); onState("closed"); return; }
      if (!opened || attempts >= 3) { note("[connection closed]"); onState("closed"); return; }
      attempts += 1;
      onState("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, 1000 * attempts));
      try { if (!closed) connect(await reopen(), true); } catch (error) { note(`[${error.message || error}]`, 31); onState("closed"); }
    };
  }

  (async () => {
    try {
      connect(await open(size()), false);
    } catch (error) {
      note(`${error.message || error}`, 31);
      onState("failed");
    }
  })();
  term.onData((data) => { if (socket?.readyState === WebSocket.OPEN) socket.send(encoder.encode(data)); });
  term.onResize(({cols, rows}) => {
    if (socket?.readyState === WebSocket.OPEN) socket.send(JSON.stringify({type: "resize", cols, rows}));
  });
  return {term, close: () => { closed = true; socket?.close(); dispose(); }};
}

const MARK = "\x1e";
const red = (text) => `\x1b[31m${text}\x1b[0m`;
const crlf = (text) => text.replace(/\r?\n/g, "\r\n");

// A prompt with line editing and history; `run({command, cwd}, onLine)` is the exec call
// and answers {stdout, stderr, exit_code, timed_out}; it may call `onLine(stream, line)`
// with output lines as they are written (the sandbox's event stream), which are then
// shown live and not again at the end. The working directory is carried from one
// command to the next (each exec is a new shell), as `cd` would in a real one.
export function execTerminal(container, run) {
  const {term, dispose} = draw(container);
  let line = "";
  let cwd = "/workspace";
  let busy = false;
  let fresh = true;  // the cursor is at the start of a line
  const history = [];
  let back = 0;
  // stdout and stderr are two pipes: a stderr line that arrives while a stdout line is
  // still open (a prompt, a `printf` without newline) starts a line of its own.
  const out = (text, colour = false) => {
    if (!text) return;
    if (colour && !fresh) term.write("\r\n");
    term.write(colour ? red(crlf(text)) : crlf(text));
    fresh = text.endsWith("\n");
  };
  const prompt = () => { term.write(`\x1b[32m${cwd}\x1b[0m$ `); fresh = false; };
  const setLine = (text) => { term.write("\b \b".repeat(line.length)); line = text; term.write(text); };
  term.writeln("Commands run in the sandbox through exec (one shell per command; the directory is kept).");
  prompt();

  async function execute(command) {
    const shown = {stdout: 0, stderr: 0};
    let marked = false;  // the stdout line with the directory mark was shown
    const onLine = (stream, text) => {
      shown[stream] += 1;
      if (stream === "stderr") { out(`${text}\n`, true); return; }
      const mark = text.indexOf(MARK);
      if (mark >= 0) { marked = true; out(text.slice(0, mark)); return; }
      if (!marked) out(`${text}\n`);
    };
    const script = `${command}\n__corral_status=$?; printf '${MARK}%s' "$PWD"; exit $__corral_status`;
    const result = await run({command: script, cwd}, onLine);
    const stdout = result.stdout || "";
    const mark = stdout.lastIndexOf(MARK);
    if (mark >= 0) cwd = stdout.slice(mark + 1) || cwd;
    const rest = (text, count) => text.split("\n").slice(count).join("\n");
    let tail = rest(stdout, shown.stdout);
    const tailMark = tail.lastIndexOf(MARK);
    if (tailMark >= 0) tail = tail.slice(0, tailMark);
    out(tail);
    out(rest(result.stderr || "", shown.stderr), true);
    if (!fresh) term.write("\r\n");
    if (result.timed_out) term.write(red("[timed out]\r\n"));
    else if (result.exit_code) term.write(red(`[exit ${result.exit_code}]\r\n`));
  }

  term.onData(async (data) => {
    if (busy) return;
    if (data.startsWith("\x1b")) {  // arrows: history; other escape sequences are ignored
      if (data === "\x1b[A" && history.length) { back = Math.min(back + 1, history.length); setLine(history[history.length - back]); }
      if (data === "\x1b[B") { back = Math.max(back - 1, 0); setLine(back ? history[history.length - back] : ""); }
      return;
    }
    for (const char of data) {
      if (char === "\r") {
        const command = line.trim();
        line = "";
        term.write("\r\n");
        fresh = true;
        if (!command) { prompt(); continue; }
        history.push(command);
        back = 0;
        busy = true;
        try {
          await execute(command);
        } catch (error) {
          if (!fresh) term.write("\r\n");
          term.write(red(`${error.message || error}${error.code ? ` (${error.code})` : ""}\r\n`));
        } finally {
          busy = false;
          prompt();
        }
        return;
      }
      if (char === "\x7f" || char === "\b") { if (line) { line = line.slice(0, -1); term.write("\b \b"); } continue; }
      if (char === "\x03") { term.write("^C\r\n"); line = ""; prompt(); continue; }
      if (char === "\x15") { setLine(""); continue; }
      if (char < " ") continue;
      line += char;
      term.write(char);
    }
  });
  term.focus();
  return {term, close: dispose};
}
