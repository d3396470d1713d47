// syncd dashboard. Plain JS, no dependencies, no inline code (strict Content-Security-Policy).
//
// Data: the control API under the page's parent URL (the page is served at <api>/ui/), every
// call with `Authorization: Bearer <token>` when a token was given. Live updates: the
// Server-Sent Events of GET /events, read with fetch() (EventSource cannot send a header) and
// resumed with Last-Event-ID; while /events answers 404 the page polls every 2 s instead.
// Everything shown is built with textContent: no data is ever parsed as HTML.
"use strict";

(() => {
  const BASE = new URL("../", location.href);
  const POLL_MS = 2000;
  const PROBE_EVERY = 15; // polls between two probes of /events while it answers 404
  const SILENCE_MS = 60000; // a stream that sends nothing (not even a ping) is reconnected
  const TICK_MS = 5000; // relative times ("3 s ago") are redrawn this often
  const TOKEN_KEY = "syncd.token";
  const RUNS_LIMIT = 20;
  const FAILED_LIMIT = 50;
  const DOC_STATUSES = ["pending", "running", "indexed", "failed"];
  const RUNTIME_KEYS = new Set([
    "id", "name", "status", "sync_status", "last_error", "run_id", "sync_started_at", "sync_queued_at",
    "last_synced_at", "next_run_at", "created_at", "updated_at", "progress", "waiting",
    "sync_owner", "sync_heartbeat_at", "documents",
  ]);

  const $ = (id) => document.getElementById(id);
  // The elements that hold data outside the list (emptied when the token is refused).
  const DATA_ELEMENTS = [
    "connectors", "list-count", "c-name", "c-error", "c-pages", "c-docs-seen", "c-waiting", "c-started", "c-owner",
    "c-heartbeat", "c-last", "c-next", "c-schedule", "c-counts", "c-runs", "c-failed",
    "c-mark", "c-mark-set", "c-crawl", "c-next-crawl", "c-last-full",
    "c-config", "del-name", "d-version", "d-started", "d-memory", "d-ready", "d-queue",
    "d-documents", "d-runs", "d-instances", "d-queues",
  ];

  const state = {
    token: sessionStorage.getItem(TOKEN_KEY),
    gen: 0, // bumped to stop the live loop of a previous sign-in
    stream: null,
    lastEventId: null,
    mode: "connecting",
    pollFailed: false,
    loaded: false,
    connectors: new Map(),
    runs: new Map(), // connector id → {data, more}
    failed: new Map(), // connector id → {data, more}
    crawls: new Map(), // connector id → its crawl state (GET /connectors/{id}/state)
    daemon: null,
    version: null,
    view: { name: "list", id: null },
    rows: new Map(), // connector id → <tr> of the list
    // Events are numbered as they arrive; a reload started before an event does not undo it.
    seq: 0,
    touched: new Map(), // connector id → seq of its last event
    recentRuns: [], // [{seq, run}] of the last run events
  };

  class AuthError extends Error {}
  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  // --- the API ---------------------------------------------------------------------------

  function authHeaders(extra) {
    const headers = { ...extra };
    if (state.token) headers.Authorization = `Bearer ${state.token}`;
    return headers;
  }

  async function api(path, { method = "GET", body, allow = [] } = {}) {
    const init = { method, headers: authHeaders({ Accept: "application/json" }), cache: "no-store" };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const res = await fetch(new URL(path, BASE), init);
    if (res.status === 401) throw new AuthError("Unauthorized");
    const type = res.headers.get("Content-Type") || "";
    const data = type.includes("json") ? await res.json() : await res.text();
    if (!res.ok && !allow.includes(res.status)) throw new ApiError(res.status, detail(data, res.status));
    return data;
  }

  function detail(data, status) {
    if (data && typeof data.detail === "string") return data.detail;
    if (data && Array.isArray(data.detail)) {
      return data.detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ");
    }
    return `HTTP ${status}`;
  }

  const enc = encodeURIComponent;

  async function loadConnectors() {
    const mark = state.seq;
    const all = [];
    let cursor = null;
    do {
      const query = new URLSearchParams({ limit: "1000" });
      if (cursor) query.set("cursor", cursor);
      const page = await api(`connectors?${query}`);
      all.push(...page.data);
      cursor = page.next_cursor;
    } while (cursor && all.length < 20000);
    const fresh = new Map();
    for (const c of all) {
      if (!newer(c.id, mark)) fresh.set(c.id, c);
      else if (state.connectors.has(c.id)) fresh.set(c.id, state.connectors.get(c.id));
    }
    for (const [id, c] of state.connectors) {
      if (!fresh.has(id) && newer(id, mark)) fresh.set(id, c); // created since
    }
    state.connectors = fresh;
    state.loaded = true;
  }

  // Whether an event about the connector arrived after `mark` (then it is fresher than
  // what a request started at `mark` answers).
  function newer(id, mark) {
    return (state.touched.get(id) || 0) > mark;
  }

  async function loadConnector(id) {
    const mark = state.seq;
    const c = await api(`connectors/${enc(id)}`, { allow: [404] });
    if (newer(id, mark)) return state.connectors.get(id) || null;
    if (c && c.id) state.connectors.set(id, c);
    else forget(id);
    return c && c.id ? c : null;
  }

  async function loadRuns(id) {
    const mark = state.seq;
    const page = await api(`connectors/${enc(id)}/runs?limit=${RUNS_LIMIT}`, { allow: [404] });
    if (!page.data) return;
    state.runs.set(id, { data: page.data, more: Boolean(page.next_cursor) });
    for (const { seq, run } of state.recentRuns) {
      if (seq > mark && run.connector_id === id) upsertRun(run);
    }
  }

  function upsertRun(run) {
    const runs = state.runs.get(run.connector_id);
    if (!runs) return;
    const rest = runs.data.filter((r) => r.id !== run.id);
    runs.data = [run, ...rest].sort((a, b) => (a.id < b.id ? 1 : -1)).slice(0, RUNS_LIMIT);
  }

  async function loadFailed(id) {
    const query = `status=failed&limit=${FAILED_LIMIT}`;
    const page = await api(`connectors/${enc(id)}/documents?${query}`, { allow: [404] });
    if (page.data) state.failed.set(id, { data: page.data, more: Boolean(page.next_cursor) });
  }

  async function loadCrawlState(id) {
    // 404: gone, or a daemon older than the crawl state.
    const crawl = await api(`connectors/${enc(id)}/state`, { allow: [404] });
    if (crawl && crawl.connector_id) state.crawls.set(id, crawl);
  }

  async function loadDetail(id) {
    if (await loadConnector(id)) await Promise.all([loadRuns(id), loadFailed(id), loadCrawlState(id)]);
  }

  async function loadDaemon() {
    const [ready, metrics, doc, status] = await Promise.all([
      api("readyz", { allow: [503] }),
      api("metrics"),
      state.version ? null : api("openapi.json"),
      api("status", { allow: [404] }), // 404: a daemon older than GET /status
    ]);
    if (doc && doc.info) state.version = doc.info.version;
    const instances = status && Array.isArray(status.instances) ? status.instances : null;
    state.daemon = { ready, metrics: parseMetrics(String(metrics)), instances };
  }

  async function loadView() {
    if (state.view.name === "connector") await loadDetail(state.view.id);
    else if (state.view.name === "daemon") await loadDaemon();
  }

  async function refreshAll() {
    await loadConnectors();
    await loadView();
  }

  function forget(id) {
    state.connectors.delete(id);
    state.runs.delete(id);
    state.failed.delete(id);
    state.crawls.delete(id);
  }

  // Prometheus text exposition → [{name, labels, value}].
  function parseMetrics(text) {
    const samples = [];
    for (const line of text.split("\n")) {
      if (!line || line.startsWith("#")) continue;
      const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
      if (!m) continue;
      const labels = {};
      for (const l of (m[2] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
        labels[l[1]] = l[2].replace(/\\(.)/g, (_, ch) => (ch === "n" ? "\n" : ch));
      }
      samples.push({ name: m[1], labels, value: Number(m[3]) });
    }
    return samples;
  }

  // --- live updates ----------------------------------------------------------------------

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  async function liveLoop(gen) {
    let failures = 0;
    while (gen === state.gen) {
      let outcome;
      try {
        outcome = await streamEvents(gen);
      } catch (err) {
        if (err instanceof AuthError) return requireToken();
        outcome = "failed";
      }
      if (gen !== state.gen) return;
      if (outcome === "absent") {
        // No /events on this daemon (yet): poll, and look for it again now and then.
        setMode("polling");
        for (let i = 0; i < PROBE_EVERY && gen === state.gen; i++) {
          await sleep(POLL_MS);
          await poll(gen);
        }
      } else {
        failures = outcome === "closed" ? 0 : failures + 1;
        if (failures) setMode("offline");
        await sleep(Math.min(500 * 2 ** failures, 15000));
        if (failures) await poll(gen);
      }
    }
  }

  async function poll(gen) {
    if (gen !== state.gen) return;
    try {
      await refreshAll();
      if (gen !== state.gen) return;
      if (state.mode === "offline") setMode("polling");
      if (state.pollFailed) notice(null); // the daemon answers again
      state.pollFailed = false;
      render();
    } catch (err) {
      if (gen !== state.gen) return;
      state.pollFailed = true;
      handleError(err);
    }
  }

  // One connection to GET /events: "absent" on 404, "closed" when it ends after opening.
  async function streamEvents(gen) {
    const ctrl = new AbortController();
    state.stream = ctrl;
    const headers = authHeaders({ Accept: "text/event-stream" });
    if (state.lastEventId) headers["Last-Event-ID"] = state.lastEventId;
    const res = await fetch(new URL("events", BASE), { headers, signal: ctrl.signal, cache: "no-store" });
    if (res.status === 404) return "absent";
    if (res.status === 401) throw new AuthError("Unauthorized");
    if (!res.ok || !res.body) throw new Error(`events: HTTP ${res.status}`);
    setMode("live");
    // A fresh stream (no id to resume from): reload, so that nothing changed before it opened
    // is missed.
    if (!state.lastEventId) await poll(gen);
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let watchdog = 0;
    const arm = () => {
      clearTimeout(watchdog);
      watchdog = setTimeout(() => ctrl.abort(), SILENCE_MS);
    };
    let buffer = "";
    let event = "";
    let data = [];
    arm();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done || gen !== state.gen) break;
        arm();
        buffer += value;
        const lines = buffer.split(/\r\n|\r|\n/);
        buffer = lines.pop();
        for (const line of lines) {
          if (line === "") {
            if (data.length || event) dispatch(event || "message", data.join("\n"));
            event = "";
            data = [];
            continue;
          }
          if (line.startsWith(":")) continue; // a comment: the server's heartbeat
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let val = colon < 0 ? "" : line.slice(colon + 1);
          if (val.startsWith(" ")) val = val.slice(1);
          if (field === "event") event = val;
          else if (field === "data") data.push(val);
          else if (field === "id" && !val.includes("\0")) state.lastEventId = val;
        }
      }
    } catch (err) {
      if (err.name !== "AbortError") throw err;
    } finally {
      clearTimeout(watchdog);
      ctrl.abort();
    }
    return "closed";
  }

  function dispatch(type, text) {
    if (type === "reset") {
      // Our Last-Event-ID is unknown there: a snapshot follows; reload what it does not
      // carry (deleted connectors, runs, failed documents).
      refreshSoon();
      return;
    }
    let data;
    try {
      data = JSON.parse(text);
    } catch {
      return;
    }
    const seq = ++state.seq;
    if (type !== "run" && data.id) state.touched.set(data.id, seq);
    if (type === "connector" && data.id) {
      const before = state.connectors.get(data.id);
      state.connectors.set(data.id, data);
      const viewed = state.view.name === "connector" && state.view.id === data.id;
      if (viewed && (!before || before.documents.failed !== data.documents.failed)) {
        loadFailed(data.id).then(renderSoon, handleError);
      }
      // The crawl state changes when a run starts or ends, and with a crawl's first page.
      const crawlMoved = !before || before.sync_status !== data.sync_status
        || before.last_synced_at !== data.last_synced_at
        || (before.progress.pages !== data.progress.pages && data.progress.pages === 1);
      if (viewed && crawlMoved) loadCrawlState(data.id).then(renderSoon, handleError);
    } else if (type === "run" && data.connector_id) {
      state.recentRuns = [...state.recentRuns.slice(-49), { seq, run: data }];
      upsertRun(data);
    } else if (type === "deleted" && data.id) {
      forget(data.id);
    }
    renderSoon();
  }

  let refreshTimer = 0;
  function refreshSoon() {
    clearTimeout(refreshTimer);
    const gen = state.gen;
    refreshTimer = setTimeout(() => poll(gen), 50);
  }

  let renderTimer = 0;
  function renderSoon() {
    if (!renderTimer) {
      renderTimer = setTimeout(() => {
        renderTimer = 0;
        render();
      }, 0);
    }
  }

  function setMode(mode) {
    state.mode = mode;
    const el = $("live");
    el.dataset.mode = mode;
    el.textContent = { live: "live", polling: "polling every 2 s", offline: "reconnecting…",
      connecting: "connecting…", "signed out": "signed out" }[mode] || mode;
  }

  // --- sign-in ---------------------------------------------------------------------------

  async function start() {
    const gen = ++state.gen;
    try {
      await refreshAll();
    } catch (err) {
      if (err instanceof AuthError) return requireToken();
      setMode("offline");
      notice(`Cannot reach the daemon: ${err.message}`, "error");
      await sleep(POLL_MS);
      if (gen === state.gen) start();
      return;
    }
    if (gen !== state.gen) return;
    $("login").hidden = true;
    $("main").hidden = false;
    $("signout").hidden = !state.token;
    render();
    liveLoop(gen);
  }

  function stopLive() {
    state.gen++;
    if (state.stream) state.stream.abort();
    state.stream = null;
    state.lastEventId = null;
  }

  // The API refused us: drop every piece of data and ask for a token.
  function requireToken() {
    const refused = Boolean(state.token);
    stopLive();
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    state.connectors.clear();
    state.runs.clear();
    state.failed.clear();
    state.crawls.clear();
    state.daemon = null;
    state.version = null;
    state.loaded = false;
    render();
    // Hidden is not enough: what the views showed leaves the page.
    for (const id of DATA_ELEMENTS) $(id).replaceChildren();
    state.rows.clear();
    $("main").hidden = true;
    $("signout").hidden = true;
    $("login").hidden = false;
    $("login-error").hidden = !refused;
    $("login-error").textContent = refused ? "Token refused" : "";
    setMode("signed out");
    notice(null);
    $("token").focus();
  }

  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const token = $("token").value.trim();
    if (!token) return;
    $("token").value = "";
    state.token = token;
    sessionStorage.setItem(TOKEN_KEY, token);
    setMode("connecting");
    start();
  });

  $("signout").addEventListener("click", () => {
    state.token = "";
    requireToken();
    $("login-error").hidden = true;
  });

  // --- notices and errors ----------------------------------------------------------------

  let noticeTimer = 0;
  function notice(text, kind = "info") {
    const el = $("notice");
    clearTimeout(noticeTimer);
    el.hidden = !text;
    el.textContent = text || "";
    el.dataset.kind = kind;
    if (text && kind === "info") noticeTimer = setTimeout(() => notice(null), 6000);
  }

  function handleError(err) {
    if (err instanceof AuthError) return requireToken();
    if (err instanceof ApiError) return notice(err.message, "error");
    setMode("offline");
    notice(`Cannot reach the daemon: ${err.message}`, "error");
  }

  // --- formatting ------------------------------------------------------------------------

  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") el.className = value;
      else el.setAttribute(key, value);
    }
    for (const child of children.flat()) {
      if (child !== null && child !== undefined) el.append(child);
    }
    return el;
  }

  function setText(el, text) {
    if (el.textContent !== text) el.textContent = text;
  }

  function span(duration) {
    const s = Math.abs(duration) / 1000;
    if (s < 1) return `${Math.round(s * 1000)} ms`;
    if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
    return `${Math.floor(s / 86400)} d ${Math.round((s % 86400) / 3600)} h`;
  }

  function relative(iso) {
    if (!iso) return "—";
    const delta = Date.parse(iso) - Date.now();
    if (Math.abs(delta) < 1000) return "now";
    return delta > 0 ? `in ${span(delta)}` : `${span(delta)} ago`;
  }

  function time(iso) {
    return h("time", { datetime: iso || null, title: iso ? new Date(iso).toLocaleString() : null },
      relative(iso));
  }

  function setTime(el, iso) {
    setText(el, relative(iso));
    el.title = iso ? new Date(iso).toLocaleString() : "";
  }

  function badge(value, label) {
    return h("span", { class: "badge", "data-v": value }, label || value);
  }

  function setBadge(el, value, label) {
    el.dataset.v = value;
    setText(el, label || value);
  }

  function syncLabel(c) {
    if (c.sync_status === "queued") return ["queued", "queued"];
    if (c.sync_status !== "running") return ["idle", "idle"];
    if (c.waiting) return ["waiting", `waiting: ${c.waiting.reason}`];
    return ["running", "running"];
  }

  function progress(c) {
    return h("span", { class: "progress" },
      h("span", { "data-k": "pages" }, String(c.progress.pages)), " pages · ",
      h("span", { "data-k": "documents" }, String(c.progress.documents)), " docs");
  }

  // The non-zero document counts, in the order of a document's life.
  function counts(docs) {
    const keys = [...DOC_STATUSES, ...Object.keys(docs).filter((k) => !DOC_STATUSES.includes(k))];
    const shown = keys.filter((k) => docs[k]);
    if (!shown.length) return h("span", { class: "muted" }, "none");
    return h("span", { class: "counts" }, shown.map((k) =>
      h("span", { "data-status": k }, `${docs[k]} ${k}`)));
  }

  function byName(a, b) {
    return a.name.localeCompare(b.name) || (a.id < b.id ? -1 : 1);
  }

  // --- views -----------------------------------------------------------------------------

  function decodeId(text) {
    try {
      return decodeURIComponent(text);
    } catch {
      return text; // a malformed escape: no connector has that id, the view says so
    }
  }

  function route() {
    const hash = location.hash;
    const m = /^#\/c\/(.+)$/.exec(hash);
    if (m) state.view = { name: "connector", id: decodeId(m[1]) };
    else if (hash === "#/daemon") state.view = { name: "daemon", id: null };
    else state.view = { name: "list", id: null };
    for (const a of document.querySelectorAll("[data-nav]")) {
      const current = a.dataset.nav === (state.view.name === "daemon" ? "daemon" : "list");
      if (current) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    render();
    if (!$("main").hidden) loadView().then(render, handleError);
  }

  function render() {
    const name = state.view.name;
    $("view-list").hidden = name !== "list";
    $("view-connector").hidden = name !== "connector";
    $("view-daemon").hidden = name !== "daemon";
    if (name === "list") renderList();
    else if (name === "connector") renderConnector();
    else renderDaemon();
  }

  // Only cells whose markup changed are replaced: a row redrawn whole on every tick would
  // swallow a click whose press and release straddle the redraw.
  function patchCells(tr, cells) {
    cells.forEach((td, i) => {
      const old = tr.children[i];
      if (!old) tr.appendChild(td);
      else if (old.outerHTML !== td.outerHTML) old.replaceWith(td);
    });
    while (tr.children.length > cells.length) tr.lastElementChild.remove();
  }

  function renderList() {
    const body = $("connectors");
    const list = [...state.connectors.values()].sort(byName);
    for (const [id, tr] of state.rows) {
      if (!state.connectors.has(id)) {
        tr.remove();
        state.rows.delete(id);
      }
    }
    list.forEach((c, i) => {
      let tr = state.rows.get(c.id);
      if (!tr) {
        tr = h("tr", { class: "link", "data-id": c.id });
        tr.addEventListener("click", (ev) => {
          if (!ev.target.closest("a")) location.hash = `#/c/${enc(c.id)}`;
        });
        state.rows.set(c.id, tr);
      }
      if (body.children[i] !== tr) body.insertBefore(tr, body.children[i] || null);
      const [syncValue, syncText] = syncLabel(c);
      patchCells(tr, [
        h("td", { "data-k": "name" }, h("a", { href: `#/c/${enc(c.id)}` }, c.name)),
        h("td", { "data-k": "status" }, badge(c.status)),
        h("td", { "data-k": "sync" }, badge(syncValue, syncText),
          c.waiting ? h("div", { class: "muted" }, "until ", time(c.waiting.until)) : null),
        h("td", { "data-k": "progress", class: "num nowrap" }, progress(c)),
        h("td", { "data-k": "last-synced" }, time(c.last_synced_at)),
        h("td", { "data-k": "next-run", title: c.sync_schedule || "no schedule" },
          c.next_run_at ? time(c.next_run_at) : "—"),
        h("td", { "data-k": "documents" }, counts(c.documents)),
        h("td", { "data-k": "last-error", class: "err" }, c.last_error || ""),
      ]);
    });
    setText($("list-count"), state.loaded ? `(${list.length})` : "");
    $("list-empty").hidden = !state.loaded || list.length > 0;
  }

  function renderConnector() {
    const id = state.view.id;
    const c = state.connectors.get(id);
    $("c-missing").hidden = Boolean(c) || !state.loaded;
    $("c-body").hidden = !c;
    if (!c) return;
    const running = c.sync_status === "running";
    const queued = c.sync_status === "queued";
    const paused = c.status === "paused";
    const deleting = c.status === "deleting";
    setText($("c-name"), c.name);
    setBadge($("c-status"), c.status);
    setBadge($("c-sync"), ...syncLabel(c));
    $("act-sync").disabled = running || queued || paused || deleting;
    $("act-full").disabled = running || queued || paused || deleting;
    $("act-abort").disabled = !running && !queued;
    setText($("act-pause"), paused ? "Resume" : "Pause");
    $("act-pause").disabled = deleting;
    setText($("act-retry"), `Retry failed (${c.documents.failed || 0})`);
    $("act-retry").disabled = !c.documents.failed || deleting;
    $("act-delete").disabled = running || deleting;
    $("act-delete").title = running ? "Abort the sync first" : "";
    $("c-error").hidden = !c.last_error;
    // A failed run's automatic retry: how many failed in a row, and when the next one runs.
    const retry = c.retry_at ? ` (failed runs in a row: ${c.failures}; next retry ${relative(c.retry_at)})` : "";
    setText($("c-error"), c.last_error ? `Last error: ${c.last_error}${retry}` : "");

    setText($("c-run-title"), running ? "Current run" : "Last run");
    setText($("c-pages"), String(c.progress.pages));
    setText($("c-docs-seen"), String(c.progress.documents));
    setText($("c-waiting"), c.waiting ? `${c.waiting.reason} until ${relative(c.waiting.until)}` : "—");
    setTime($("c-started"), c.sync_started_at);
    setText($("c-owner"), c.sync_owner || "—");
    setTime($("c-heartbeat"), c.sync_heartbeat_at);
    setTime($("c-last"), c.last_synced_at);
    setTime($("c-next"), c.next_run_at);
    const tz = c.sync_timezone ? ` (${c.sync_timezone})` : "";
    setText($("c-schedule"), c.sync_schedule ? `${c.sync_schedule}${tz}` : "none");
    $("c-counts").replaceChildren(...Object.entries(c.documents).flatMap(([k, n]) => [
      h("dt", null, k), h("dd", { "data-status": k }, String(n)),
    ]));

    renderCrawlState(state.crawls.get(id));

    const runs = state.runs.get(id) || { data: [], more: false };
    $("c-runs").replaceChildren(...runs.data.map((r) => runRow(r, c)));
    if (!runs.data.length) $("c-runs").append(emptyRow(10, "No runs yet"));
    $("c-runs-more").hidden = !runs.more;
    setText($("c-runs-more"), `Showing the ${RUNS_LIMIT} newest runs.`);

    const failed = state.failed.get(id) || { data: [], more: false };
    $("c-failed").replaceChildren(...failed.data.map((d) => h("tr", { "data-id": d.external_id },
      h("td", null, h("code", null, d.external_id)),
      h("td", { class: "num" }, String(d.attempts)),
      h("td", null, time(d.updated_at)),
      h("td", { class: "err" }, d.error || ""))));
    if (!failed.data.length) $("c-failed").append(emptyRow(4, "No failed documents"));
    $("c-failed-more").hidden = !failed.more;
    setText($("c-failed-more"), `Showing the first ${FAILED_LIMIT}; ${c.documents.failed} failed in all.`);

    const config = Object.fromEntries(Object.entries(c).filter(([k]) => !RUNTIME_KEYS.has(k)));
    setText($("c-config"), JSON.stringify(config, null, 2));
  }

  // A crawl's mode and window: "full", "backfill from A to B".
  function crawlText(crawl) {
    if (crawl.mode !== "backfill") return crawl.mode;
    const until = crawl.until === null ? "" : ` to ${crawl.until}`;
    return `backfill from ${crawl.since}${until}`;
  }

  function renderCrawlState(crawl) {
    if (!crawl) {
      for (const id of ["c-mark", "c-mark-set", "c-crawl", "c-next-crawl", "c-last-full"]) setText($(id), "—");
      return;
    }
    if (!crawl.incremental) setText($("c-mark"), "none: every crawl is full");
    else setText($("c-mark"), crawl.mark === null ? "none" : String(crawl.mark));
    const by = { crawl: "by a crawl", user: "by hand" }[crawl.mark_set_by];
    setText($("c-mark-set"), by ? `${relative(crawl.mark_set_at)} ${by}` : "—");
    $("c-mark-set").title = crawl.mark_run_id ? `run ${crawl.mark_run_id}` : "";
    const now = crawl.crawl;
    setText($("c-crawl"), now
      ? `${crawlText(now)}, started ${relative(now.started_at)}${now.resume_cursor_held ? ", resume cursor held" : ""}`
      : "none");
    const next = crawl.next_crawl;
    setText($("c-next-crawl"), `${crawlText(next)}${next.resumes ? " (resumes the crawl in progress)" : ""}`);
    setTime($("c-last-full"), crawl.last_full_crawl_at);
  }

  function runRow(r, c) {
    // The connector's progress is live; the run row is written at its start and end.
    const live = r.outcome === "running" && r.id === c.run_id;
    const end = r.finished_at ? Date.parse(r.finished_at) : Date.now();
    const took = r.started_at ? span(end - Date.parse(r.started_at)) : "—";
    return h("tr", { "data-id": r.id, "data-outcome": r.outcome },
      h("td", null, time(r.started_at)),
      h("td", null, r.attempt > 1 ? `${r.trigger} #${r.attempt}` : r.trigger),
      h("td", { "data-k": "outcome" }, badge(r.outcome)),
      h("td", { class: "num" }, took),
      h("td", { class: "num" }, String(live ? c.progress.pages : r.pages)),
      h("td", { class: "num" }, String(live ? c.progress.documents : r.documents_seen)),
      h("td", { class: "num" }, String(r.documents_enqueued)),
      h("td", { class: "num" }, String(r.documents_rejected ?? 0)),
      // How the crawl ended, and what looks wrong about it (a misspelt path).
      h("td", { "data-k": "end" }, h("span", { "data-k": "end-reason" }, r.end_reason || ""),
        (r.warnings || []).map((w) => h("div", { class: "warn", "data-k": "warning" }, `⚠ ${w}`))),
      h("td", { class: "err" }, r.error || ""));
  }

  function emptyRow(columns, text) {
    return h("tr", null, h("td", { colspan: String(columns), class: "muted" }, text));
  }

  function renderDaemon() {
    const d = state.daemon;
    setText($("d-version"), state.version || "—");
    const samples = d ? d.metrics : [];
    const one = (name) => samples.find((s) => s.name === name);
    const start = one("process_start_time_seconds");
    setTime($("d-started"), start ? new Date(start.value * 1000).toISOString() : null);
    const rss = one("process_resident_memory_bytes");
    setText($("d-memory"), rss ? `${(rss.value / 1048576).toFixed(1)} MiB resident` : "—");
    $("d-ready").replaceChildren(...Object.entries(d ? d.ready : {}).flatMap(([k, v]) => [
      h("dt", null, k), h("dd", { "data-k": k }, badge(v === "ok" ? "active" : "error", v)),
    ]));

    const depth = samples.filter((s) => s.name === "syncd_queue_depth");
    setText($("d-queue"), d ? String(depth.reduce((n, s) => n + s.value, 0)) : "—");
    const totals = {};
    for (const c of state.connectors.values()) {
      for (const [k, n] of Object.entries(c.documents)) totals[k] = (totals[k] || 0) + n;
    }
    $("d-documents").replaceChildren(...Object.entries(totals).flatMap(([k, n]) => [
      h("dt", null, `Documents ${k}`), h("dd", null, String(n)),
    ]));
    const outcomes = {};
    for (const s of samples.filter((x) => x.name === "syncd_runs_total")) {
      outcomes[s.labels.outcome] = (outcomes[s.labels.outcome] || 0) + s.value;
    }
    $("d-runs").replaceChildren(...Object.entries(outcomes).flatMap(([k, n]) => [
      h("dt", null, k), h("dd", null, String(n)),
    ]));

    const nodes = d && d.instances;
    $("d-nodes").replaceChildren(...(nodes || []).map((i) => h("tr", { "data-owner": i.owner },
      h("td", null, h("code", { title: i.owner }, i.instance_id)),
      h("td", null, i.version || "—"),
      h("td", null, time(i.started_at)),
      h("td", null, time(i.heartbeat_at)),
      h("td", { class: "num" }, String(i.running_syncs)),
      h("td", { class: "num" }, i.workers ? `${i.workers.busy} of ${i.workers.concurrency}` : "—"),
      h("td", { class: "num" }, typeof i.loop_lag_seconds === "number"
        ? `${(i.loop_lag_seconds * 1000).toFixed(1)} ms` : "—"))));
    if (!nodes) $("d-nodes").append(emptyRow(7, "This daemon does not report its instances"));

    const running = [...state.connectors.values()].filter((c) => c.sync_status === "running");
    $("d-instances").replaceChildren(...running.sort(byName).map((c) => h("tr", null,
      h("td", null, h("code", null, c.sync_owner || "unknown")),
      h("td", null, h("a", { href: `#/c/${enc(c.id)}` }, c.name)),
      h("td", null, time(c.sync_heartbeat_at)))));
    if (!running.length) $("d-instances").append(emptyRow(3, "No sync is running"));

    const names = (id) => (state.connectors.get(id) || { name: id }).name;
    $("d-queues").replaceChildren(...depth.filter((s) => s.value > 0).map((s) => h("tr", null,
      h("td", null, names(s.labels.connector_id)), h("td", { class: "num" }, String(s.value)))));
    if (!depth.some((s) => s.value > 0)) $("d-queues").append(emptyRow(2, "The queue is empty"));
  }

  // --- actions ---------------------------------------------------------------------------

  function current() {
    return state.view.name === "connector" ? state.connectors.get(state.view.id) : null;
  }

  async function act(button, run) {
    const c = current();
    if (!c) return;
    button.disabled = true;
    try {
      const message = await run(c);
      notice(message || null);
    } catch (err) {
      handleError(err);
    }
    try {
      if (state.connectors.has(c.id)) await loadDetail(c.id);
    } catch (err) {
      handleError(err);
    }
    render();
  }

  const post = (c, path) => api(`connectors/${enc(c.id)}/${path}`, { method: "POST" });

  $("act-sync").addEventListener("click", (ev) => act(ev.currentTarget, async (c) => {
    const reply = await post(c, "sync");
    if (reply.sync_status === "queued") return `Sync of ${c.name} queued (no free run slot)`;
    return `Sync of ${c.name} started`;
  }));
  $("act-full").addEventListener("click", (ev) => act(ev.currentTarget, async (c) => {
    const body = { mode: "full" };
    const reply = await api(`connectors/${enc(c.id)}/sync`, { method: "POST", body });
    if (reply.sync_status === "queued") return `Full crawl of ${c.name} queued (no free run slot)`;
    return `Full crawl of ${c.name} started`;
  }));
  $("act-abort").addEventListener("click", (ev) => act(ev.currentTarget, async (c) => {
    await post(c, "sync/abort");
    return `Sync of ${c.name} aborted`;
  }));
  $("act-pause").addEventListener("click", (ev) => act(ev.currentTarget, async (c) => {
    const status = c.status === "paused" ? "active" : "paused";
    await api(`connectors/${enc(c.id)}`, { method: "PATCH", body: { status } });
    return `${c.name} ${status === "paused" ? "paused" : "resumed"}`;
  }));
  $("act-retry").addEventListener("click", (ev) => act(ev.currentTarget, async (c) => {
    const reply = await post(c, "retry-failed");
    return `${reply.requeued} failed documents re-queued`;
  }));
  $("act-delete").addEventListener("click", () => {
    const c = current();
    if (!c) return;
    $("del-name").textContent = c.name;
    $("confirm-delete").dataset.id = c.id;
    $("confirm-delete").showModal();
  });
  $("del-cancel").addEventListener("click", () => $("confirm-delete").close());
  $("del-ok").addEventListener("click", async () => {
    const dialog = $("confirm-delete");
    dialog.close();
    const c = state.connectors.get(dialog.dataset.id);
    if (!c) return;
    try {
      await api(`connectors/${enc(c.id)}`, { method: "DELETE" });
      notice(`Deleting ${c.name}…`);
      location.hash = "#/";
      await loadConnectors();
      render();
    } catch (err) {
      handleError(err);
    }
  });

  // --- start -----------------------------------------------------------------------------

  window.addEventListener("hashchange", route);
  setInterval(() => {
    if (!$("main").hidden) renderSoon();
  }, TICK_MS);
  // Readiness and metrics have no events: the daemon view polls them even when live.
  setInterval(() => {
    if (!$("main").hidden && state.mode === "live" && state.view.name === "daemon") {
      loadDaemon().then(render, handleError);
    }
  }, POLL_MS);
  route();
  start();
})();
