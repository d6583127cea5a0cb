// The console's one way to the API: the session (a JWT pair or an API key, kept in this
// tab's sessionStorage), JSON calls with the error envelope turned into ApiError,
// refresh of access tokens, and SSE streams opened with single-use tickets.

const STORE = "corral.console.session";
const BASE = "/api/v1";

export class ApiError extends Error {
  constructor(status, code, message, requestId, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.requestId = requestId;
    this.details = details;
  }
}

let session = load();
const listeners = new Set();

function load() {
  try { return JSON.parse(sessionStorage.getItem(STORE)) || null; } catch { return null; }
}

function save(value) {
  session = value;
  if (value) sessionStorage.setItem(STORE, JSON.stringify(value));
  else sessionStorage.removeItem(STORE);
  for (const listener of listeners) listener(value);
}

export function onSession(listener) { listeners.add(listener); }
export function current() { return session; }
export function signOut() { save(null); }

export async function signInPassword(email, password) {
  const reply = await send("POST", "/auth/login", {email, password}, null);
  if (!reply.tenant_id) throw new ApiError(422, "TENANT_RESOLUTION_FAILED", "this user is not a member of any tenant yet");
  save({kind: "jwt", token: reply.token, refresh: reply.refresh_token, expires: Date.now() + reply.expires_in * 1000,
        label: reply.user.email});
  await nameTenant();
}

export async function signInKey(key) {
  const trimmed = key.trim();
  try {
    await send("GET", "/tenant", undefined, trimmed);
  } catch (error) {
    if (error.status !== 403) throw error;  // a valid key without org:read still signs in
  }
  save({kind: "key", key: trimmed, label: `key ${trimmed.slice(0, 10)}…`});
  await nameTenant();
}

async function nameTenant() {
  try {
    const tenant = (await api("GET", "/tenant")).data;
    save({...session, tenant: tenant.name || tenant.tenant?.name || ""});
  } catch { /* the tenant's name is a nicety */ }
}

async function credential() {
  if (!session) throw new ApiError(401, "UNAUTHORIZED", "signed out");
  if (session.kind === "key") return session.key;
  if (Date.now() > session.expires - 60_000) await refresh();
  return session.token;
}

let refreshing = null;
async function refresh() {
  refreshing ??= (async () => {
    try {
      const reply = await send("POST", "/auth/refresh", {refresh_token: session.refresh}, null);
      save({...session, token: reply.token, refresh: reply.refresh_token, expires: Date.now() + reply.expires_in * 1000});
    } catch (error) {
      if (error.status === 401) save(null);
      throw error;
    } finally {
      refreshing = null;
    }
  })();
  return refreshing;
}

async function send(method, path, body, bearer) {
  const headers = {};
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const init = {method, headers, body: body === undefined ? undefined : JSON.stringify(body)};
  let response;
  try {
    response = await fetch(BASE + path, init);
  } catch (error) {
    // A network failure (the browser aborts requests when the machine's network
    // changes): a read is tried once more; a change is not, as it may have happened.
    if (method !== "GET") throw new ApiError(0, "NETWORK_ERROR", `${error.message}: check the result before retrying`);
    await new Promise((resolve) => setTimeout(resolve, 300));
    response = await fetch(BASE + path, init);
  }
  const text = await response.text();
  let parsed = null;
  try { parsed = text ? JSON.parse(text) : null; } catch { parsed = null; }
  if (!response.ok) {
    const error = parsed && parsed.error;
    throw new ApiError(response.status, error?.code || `HTTP_${response.status}`, error?.message || response.statusText,
                       error?.request_id || response.headers.get("X-Request-Id"), error?.details);
  }
  return parsed;
}

// `api("GET", "/sandboxes")`: the parsed body; an error envelope throws ApiError. A JWT
// refused as expired is refreshed once and the call repeated.
export async function api(method, path, body) {
  try {
    return await send(method, path, body, await credential());
  } catch (error) {
    if (error.status !== 401 || !session) throw error;
    if (session.kind === "jwt") {
      await refresh();  // signs out when the refresh token is refused too
      return await send(method, path, body, await credential());
    }
    save(null);  // a revoked or expired key
    throw error;
  }
}

// Follows an SSE stream: `handlers[type](data, event)` per event. A ticket is single use,
// so every (re)connection mints a new one and resumes after the last event seen.
export function follow(path, handlers, onState = () => {}) {
  let source = null;
  let closed = false;
  let lastId = null;
  let timer = null;
  async function open() {
    if (closed) return;
    try {
      const {ticket} = await api("POST", "/auth/sse-ticket");
      const query = new URLSearchParams({ticket});
      if (lastId) query.set("last_event_id", lastId);
      source = new EventSource(`${BASE}${path}?${query}`);
      source.onopen = () => onState("open");
      for (const type of Object.keys(handlers)) {
        source.addEventListener(type, (event) => {
          if (event.lastEventId) lastId = event.lastEventId;
          let data = event.data;
          try { data = JSON.parse(event.data); } catch { /* plain text */ }
          handlers[type](data, event);
        });
      }
      source.onerror = () => {
        source.close();
        onState("reconnecting");
        if (!closed) timer = setTimeout(open, 2000);
      };
    } catch (error) {
      onState("failed", error);
      if (!closed && error.status !== 404 && error.status !== 403) timer = setTimeout(open, 5000);
    }
  }
  open();
  return () => { closed = true; clearTimeout(timer); if (source) source.close(); };
}

// A call with a credential of its own, apart from the session: the operator page's
// admin key (an expired or refused key is the caller's to forget).
export function callWith(key, method, path, body) {
  return send(method, path, body, key);
}
