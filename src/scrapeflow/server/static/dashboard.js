// The scrapeflow dashboard: one ES module, no framework, no build step.
//
// The page holds no data. Everything comes from the JSON API, sent with the API key the user
// pastes (kept in sessionStorage: this tab only, never in a URL). Data reaches the page as
// text nodes only (textContent / append of strings), never as HTML. Money is shown exactly
// as the API writes it (a decimal string); it is never turned into a number.

const KEY_STORAGE = "scrapeflow.api-key";
const MOVEMENTS_PAGE = 25;
const JOBS_SHOWN = 10;
const POLL_MS = 15000;
const STREAM_SILENCE_MS = 45000; // the API pings every 15 s: three missed pings, reconnect
const RECONNECT_MS = [1000, 2000, 5000, 10000, 15000];
const ACTIVE_JOB_STATES = new Set(["queued", "running"]);

const BADGES = {
  all_updated: "ok", succeeded: "ok", success: "ok", enabled: "ok",
  running: "running", in_progress: "running", queued: "waiting",
  two_factor_required: "waiting", partially_updated: "waiting", timeout: "bad",
  failed: "bad", error: "bad", cancelled: "neutral", idle: "neutral", disabled: "neutral",
};

const session = { key: null, pollTimer: null };
let view = null; // the selected customer: { customer, status, cursor, stream, awaiting, live }

const $ = (id) => document.getElementById(id);

// ---------------------------------------------------------------------------------- the API

class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
    this.detail = detail;
  }
}

function authHeaders(extra = {}) {
  return { Accept: "application/json", Authorization: `Bearer ${session.key}`, ...extra };
}

async function problemOf(response) {
  let detail = `${response.status} ${response.statusText}`.trim();
  try {
    const body = await response.json();
    if (body && typeof body.detail === "string") detail = body.detail;
  } catch {
    // not problem+json: keep the status line
  }
  return new ApiError(response.status, detail);
}

async function api(path, { method = "GET", signal } = {}) {
  const response = await fetch(path, {
    method, headers: authHeaders(), signal, cache: "no-store", credentials: "omit",
  });
  if (!response.ok) {
    const error = await problemOf(response);
    if (error.status === 401 && session.key !== null && !$("dashboard-view").hidden) {
      signOut(error.detail); // the key was revoked or is no longer valid
    }
    throw error;
  }
  return response.json();
}

const path = (...parts) => parts.map(encodeURIComponent).join("/");

// --------------------------------------------------------------------------- DOM helpers

function el(tag, options = {}, ...children) {
  const node = document.createElement(tag);
  if (options.className) node.className = options.className;
  if (options.title) node.title = options.title;
  if (options.text !== undefined) node.textContent = String(options.text);
  node.append(...children.filter((child) => child !== null && child !== undefined));
  return node;
}

function badge(state, text = null) {
  const label = text ?? String(state ?? "").replaceAll("_", " ");
  return el("span", { className: `badge ${BADGES[state] ?? "neutral"}`, text: label });
}

function money(amount, currency) {
  if (amount === null || amount === undefined) return el("span", { className: "muted", text: "—" });
  const text = String(amount);
  const sign = text.startsWith("-") ? " negative" : "";
  return el("span", { className: `money${sign}`, text: `${text} ${currency ?? ""}`.trim() });
}

function when(iso) {
  if (!iso) return "—";
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return String(iso);
  const two = (n) => String(n).padStart(2, "0");
  return `${at.getFullYear()}-${two(at.getMonth() + 1)}-${two(at.getDate())} `
    + `${two(at.getHours())}:${two(at.getMinutes())}:${two(at.getSeconds())}`;
}

function cell(content, className = "") {
  const td = el("td", { className });
  td.append(content ?? "—");
  return td;
}

function fillRows(table, rows, emptyText) {
  const body = $(table).tBodies[0];
  if (rows.length === 0) {
    const td = el("td", { text: emptyText });
    td.colSpan = $(table).tHead.rows[0].cells.length;
    body.replaceChildren(el("tr", { className: "empty" }, td));
  } else {
    body.replaceChildren(...rows);
  }
}

// ------------------------------------------------------------- panels that degrade alone

function note(panel, text) {
  const box = $(panel).querySelector(".note");
  box.textContent = text ?? "";
  box.hidden = !text;
}

// 404: the service has no such resource (yet): hide the panel. 403: say which scope is
// missing. Anything else: say what went wrong, in the panel, and leave the rest alone.
function degrade(panel, error, scope) {
  if (error instanceof ApiError && error.status === 404) {
    $(panel).hidden = true;
    return;
  }
  $(panel).hidden = false;
  if (error instanceof ApiError && error.status === 403) {
    note(panel, `this key lacks the ${scope} scope`);
  } else if (error instanceof ApiError) {
    note(panel, error.detail);
  } else {
    note(panel, `could not reach the service (${error.message})`);
  }
}

async function load(panel, scope, loader) {
  try {
    await loader();
    $(panel).hidden = false;
    note(panel, null);
  } catch (error) {
    if (error.name === "AbortError") return;
    degrade(panel, error, scope);
  }
}

// --------------------------------------------------------------------------- customers

async function loadCustomers() {
  await load("customers-panel", "read", async () => {
    const customers = await api("/v1/customers");
    $("customers-count").textContent = `${customers.length}`;
    const items = customers.map((customer) => el("li", {}, customerButton(customer)));
    if (items.length === 0) items.push(el("li", { className: "muted", text: "No customers yet." }));
    $("customers").replaceChildren(...items);
  });
}

function customerButton(customer) {
  const button = el(
    "button",
    {},
    el("span", { className: "who" }, el("span", { text: customer.name || customer.id }),
      el("span", { text: customer.id })),
    badge(customer.state),
  );
  button.type = "button";
  button.dataset.customer = customer.id;
  button.setAttribute("aria-current", String(view?.customer === customer.id));
  button.addEventListener("click", () => selectCustomer(customer.id, customer.name));
  return button;
}

function markSelected() {
  for (const button of $("customers").querySelectorAll("button")) {
    button.setAttribute("aria-current", String(button.dataset.customer === view?.customer));
  }
}

async function selectCustomer(customer, name) {
  view?.stream?.abort();
  const selected = {
    customer, status: null, cursor: null, stream: new AbortController(), awaiting: false,
    live: { jobId: null, accesses: new Map() }, timers: {},
  };
  view = selected;
  markSelected();
  $("pick-customer").hidden = true;
  $("customer-name").textContent = name || customer;
  $("customer-id").textContent = customer;
  for (const table of ["accesses", "accounts", "movements"]) fillRows(table, [], "Loading…");
  for (const panel of ["customer-panel", "accounts-panel", "movements-panel"]) {
    $(panel).hidden = false;
    note(panel, null);
  }
  await Promise.all([loadStatus(), loadAccounts(), loadMovements()]);
  if (isCurrent(selected)) followEvents(selected);
}

const isCurrent = (selected) => view === selected;

// ------------------------------------------------------------------ status and refresh

async function loadStatus() {
  const selected = view;
  await load("customer-panel", "read", async () => {
    const status = await api(`/v1/customers/${path(selected.customer)}/status`);
    if (!isCurrent(selected)) return;
    selected.status = status;
    if (status.refresh_job) selected.awaiting = true;
    renderProgress();
    if (selected.awaiting && !status.refresh_job && !anyInProgress(status)) {
      selected.awaiting = false; // the refresh has ended: show what it stored
      await Promise.all([loadAccounts(), loadMovements(), loadCustomers(), loadJobs()]);
    }
  });
}

const anyInProgress = (status) => status.accesses.some((a) => a.state === "in_progress");

function refreshLabel(status) {
  const job = status.refresh_job;
  if (job) {
    const done = job.progress?.accesses_done ?? 0;
    return [job.state, `${job.state === "queued" ? "queued" : "updating"} · ${done}/${status.accesses.length} banks`];
  }
  if (status.all_updated) return ["all_updated", "all updated"];
  return [status.state, status.state.replaceAll("_", " ")];
}

function renderProgress() {
  const status = view.status;
  const [state, text] = refreshLabel(status);
  $("refresh-state").replaceWith(Object.assign(badge(state, text), { id: "refresh-state" }));
  $("refresh").disabled = Boolean(status.refresh_job);
  // While a refresh runs, its events say more than the stored counts: batches as they land.
  const live = (access) => (status.refresh_job ? view.live.accesses.get(access.access_id) : null);
  const rows = status.accesses.map((access) => accessRow(access, live(access)));
  fillRows("accesses", rows, "This customer has no bank access.");
}

function accessRow(access, live) {
  const running = live && !live.result;
  const state = running ? "in_progress" : access.state;
  const result = live?.result ?? access.result;
  return el(
    "tr",
    {},
    cell(access.bank),
    cell(access.login, "mono"),
    cell(badge(state)),
    cell(String(live ? live.accounts : access.accounts), "num"),
    cell(String(live ? live.movements : access.movements), "num"),
    cell(result ? badge(result) : "—"),
    cell(when(access.finished_at), "nowrap"),
  );
}

async function startRefresh() {
  const selected = view;
  $("refresh").disabled = true;
  try {
    const job = await api(`/v1/customers/${path(selected.customer)}/refresh`, { method: "POST" });
    if (!isCurrent(selected)) return;
    selected.awaiting = true;
    trackJob(selected, job.id);
    note("customer-panel", null);
  } catch (error) {
    if (!isCurrent(selected)) return;
    $("refresh").disabled = false;
    degrade("customer-panel", error, "refresh");
    return;
  }
  await Promise.all([loadStatus(), loadJobs()]);
}

function trackJob(selected, jobId) {
  if (selected.live.jobId !== jobId) {
    selected.live = { jobId, accesses: new Map() };
  }
}

// ----------------------------------------------------------- live progress over SSE
//
// EventSource cannot send an Authorization header, so the stream is read with fetch() and
// parsed here. After a dropped connection it resumes with Last-Event-ID: the API then sends
// exactly what was missed.

async function followEvents(selected) {
  const url = `/v1/customers/${path(selected.customer)}/events`;
  let lastId = null;
  let attempt = 0;
  while (!selected.stream.signal.aborted) {
    try {
      await readStream(url, lastId, selected, (event) => {
        lastId = event.id ?? lastId;
        attempt = 0;
        onEvent(selected, event);
      });
    } catch (error) {
      if (selected.stream.signal.aborted) return;
      if (error instanceof ApiError && error.status === 401) {
        signOut(error.detail); // the key was revoked while the page was open
        return;
      }
      if (error instanceof ApiError && error.status !== 429 && error.status < 500) {
        setLive("off", `live updates unavailable: ${error.detail}`);
        return;
      }
    }
    if (selected.stream.signal.aborted) return;
    setLive("reconnecting", "reconnecting…");
    await sleep(RECONNECT_MS[Math.min(attempt, RECONNECT_MS.length - 1)], selected.stream.signal);
    attempt += 1;
  }
}

async function readStream(url, lastId, selected, onMessage) {
  const connection = new AbortController();
  const stop = () => connection.abort();
  selected.stream.signal.addEventListener("abort", stop, { once: true });
  let silence = setTimeout(stop, STREAM_SILENCE_MS);
  try {
    const headers = authHeaders({ Accept: "text/event-stream" });
    if (lastId !== null) headers["Last-Event-ID"] = lastId;
    const response = await fetch(url, {
      headers, signal: connection.signal, cache: "no-store", credentials: "omit",
    });
    if (!response.ok) throw await problemOf(response);
    setLive("live", "live");
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    const parser = sseParser(onMessage);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      clearTimeout(silence);
      silence = setTimeout(stop, STREAM_SILENCE_MS);
      parser(value);
    }
  } finally {
    clearTimeout(silence);
    selected.stream.signal.removeEventListener("abort", stop);
  }
}

// A text/event-stream parser (the WHATWG rules): lines end with CRLF, LF or CR; a blank line
// dispatches the event; ":" starts a comment (the API's keep-alive pings).
function sseParser(onMessage) {
  let buffer = "";
  let event = { id: null, type: "message", data: [] };
  const dispatch = () => {
    if (event.data.length > 0) {
      onMessage({ id: event.id, type: event.type, data: event.data.join("\n") });
    }
    event = { id: event.id, type: "message", data: [] };
  };
  const field = (line) => {
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (name === "event") event.type = value;
    else if (name === "data") event.data.push(value);
    else if (name === "id" && !value.includes("\0")) event.id = value;
  };
  return (chunk) => {
    buffer += chunk;
    // A CR at the very end may be the first half of a CRLF: wait for the next chunk.
    const lines = buffer.split(/\r\n|\r(?!$)|\n/);
    buffer = lines.pop();
    for (const line of lines) {
      if (line === "") dispatch();
      else if (!line.startsWith(":")) field(line);
    }
  };
}

function onEvent(selected, message) {
  let data;
  try {
    data = JSON.parse(message.data);
  } catch {
    return;
  }
  setLive("live", "live", message.id);
  const live = selected.live;
  const access = (id) => {
    if (!live.accesses.has(id)) live.accesses.set(id, { accounts: 0, movements: 0, result: null });
    return live.accesses.get(id);
  };
  const ofThisJob = data.job_id && data.job_id === live.jobId;
  switch (message.type) {
    case "job.queued":
    case "job.running":
    case "bank.refresh_started":
      if (data.kind === "bank.refresh" || message.type === "bank.refresh_started") {
        trackJob(selected, data.job_id);
        selected.awaiting = true;
      }
      break;
    case "bank.accounts":
      if (ofThisJob && data.access_id != null) access(data.access_id).accounts += data.count ?? 0;
      break;
    case "bank.movements":
      if (ofThisJob && data.access_id != null) access(data.access_id).movements += data.count ?? 0;
      break;
    case "bank.access_finished":
      if (ofThisJob && data.access_id != null) access(data.access_id).result = data.result_code ?? "done";
      break;
    default:
      break;
  }
  if (selected.status && isCurrent(selected)) renderProgress();
  // The stored status is the truth: read it again once the burst of events settles.
  later(selected, "status", 250, loadStatus);
  if (message.type.startsWith("job.")) later(selected, "jobs", 250, loadOperations);
}

function later(selected, name, ms, task) {
  clearTimeout(selected.timers[name]);
  selected.timers[name] = setTimeout(() => {
    if (isCurrent(selected)) task();
  }, ms);
}

function setLive(state, text, lastId = null) {
  const live = $("live");
  live.dataset.state = state;
  live.textContent = text;
  if (lastId !== null) live.dataset.lastEventId = lastId;
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

// ------------------------------------------------------------- accounts and movements

async function loadAccounts() {
  const selected = view;
  await load("accounts-panel", "read", async () => {
    const accounts = await api(`/v1/customers/${path(selected.customer)}/accounts`);
    if (!isCurrent(selected)) return;
    $("accounts-count").textContent = `${accounts.length}`;
    fillRows("accounts", accounts.map(accountRow), "No accounts yet: update to read them.");
  });
}

function accountRow(account) {
  const name = el("td", {}, el("span", { text: account.alias || account.bank_ref }),
    el("span", { className: "sub mono", text: account.iban || account.number || account.bank_ref }));
  return el(
    "tr",
    {},
    cell(account.bank),
    name,
    cell(account.type),
    cell(money(account.balance, account.currency), "num"),
    cell(when(account.updated_at), "nowrap"),
  );
}

// The newest page first; "More" appends the next one, by the page's cursor.
async function loadMovements({ more = false } = {}) {
  const selected = view;
  await load("movements-panel", "read", async () => {
    const query = new URLSearchParams({ limit: String(MOVEMENTS_PAGE) });
    if (more && selected.cursor) query.set("cursor", selected.cursor);
    const page = await api(`/v1/customers/${path(selected.customer)}/movements?${query}`);
    if (!isCurrent(selected)) return;
    selected.cursor = page.next_cursor;
    const rows = page.movements.map(movementRow);
    const body = $("movements").tBodies[0];
    if (more) body.append(...rows);
    else fillRows("movements", rows, "No movements yet: update to read them.");
    $("movements-count").textContent = `${body.querySelectorAll("tr:not(.empty)").length}${page.next_cursor ? "+" : ""}`;
    $("movements-more").hidden = !page.next_cursor;
  });
}

function movementRow(movement) {
  const description = el("td", { className: "description", title: movement.description },
    movement.description);
  if (movement.pending) description.prepend(badge("queued", "pending"), " ");
  return el(
    "tr",
    {},
    el("td", { className: "nowrap" }, el("span", { text: movement.operation_date }),
      el("span", { className: "sub", text: `value ${movement.value_date}` })),
    el("td", {}, el("span", { text: movement.bank }),
      el("span", { className: "sub mono", text: movement.account })),
    description,
    cell(money(movement.amount, movement.currency), "num"),
    cell(money(movement.balance_after, movement.currency), "num"),
  );
}

// -------------------------------------------------------------------------------- jobs

async function loadJobs() {
  await load("jobs-panel", "read", async () => {
    const page = await api(`/v1/jobs?limit=${JOBS_SHOWN}`);
    fillRows("jobs", page.jobs.map(jobRow), "No jobs yet.");
  });
}

function jobRow(job) {
  const progress = Object.entries(job.progress ?? {}).map(([name, count]) => `${count} ${name.replaceAll("_", " ")}`);
  const action = el("td", { className: "num" });
  if (ACTIVE_JOB_STATES.has(job.state) && !job.cancel_requested) {
    const cancel = el("button", { className: "button small danger", text: "Cancel" });
    cancel.type = "button";
    cancel.addEventListener("click", () => cancelJob(job.id, cancel));
    action.append(cancel);
  } else if (job.cancel_requested && ACTIVE_JOB_STATES.has(job.state)) {
    action.append(el("span", { className: "muted small", text: "cancelling…" }));
  }
  return el(
    "tr",
    {},
    cell(el("span", { className: "mono", title: job.id, text: job.id.slice(-10) })),
    cell(job.kind),
    cell(typeof job.params?.customer === "string" ? job.params.customer : "—"),
    cell(badge(job.state)),
    cell(progress.length ? progress.join(" · ") : "—", "small"),
    cell(when(job.created_at), "nowrap"),
    cell(when(job.finished_at), "nowrap"),
    action,
  );
}

async function cancelJob(jobId, button) {
  button.disabled = true;
  try {
    await api(`/v1/jobs/${path(jobId)}/cancel`, { method: "POST" });
    note("jobs-panel", null);
  } catch (error) {
    button.disabled = false;
    if (error instanceof ApiError && error.status === 403) note("jobs-panel", error.detail);
    else degrade("jobs-panel", error, "refresh");
    return;
  }
  await loadJobs();
}

// ---------------------------------------------------------------------------- schedule

async function loadSchedule() {
  await load("schedule-panel", "read", async () => {
    const schedule = await api("/v1/schedule");
    $("schedule-state").replaceChildren(badge(schedule.enabled ? "enabled" : "disabled"));
    $("schedule").replaceChildren(
      ...scheduleFacts(schedule).flatMap(([term, value]) => [
        el("dt", { text: term }), el("dd", { text: value }),
      ]),
    );
  });
}

function scheduleFacts(schedule) {
  const facts = [
    ["When", schedule.cron ? `${schedule.cron} (${schedule.timezone})` : "off"],
    ["Spread over", `${schedule.window_minutes} min`],
    ["Next run", when(schedule.next_run)],
  ];
  const last = schedule.last_run;
  if (!last) return [...facts, ["Last run", "none yet"]];
  const jobs = Object.entries(last.jobs ?? {}).map(([state, count]) => `${count} ${state}`);
  return [
    ...facts,
    ["Last run", last.date],
    ["Submitted", `${last.submitted} of ${last.planned} customers`],
    ["Refreshes", jobs.length ? jobs.join(" · ") : "—"],
    ["Started", when(last.planned_at ?? last.started_at)],
    ["Finished", last.finished_at ? when(last.finished_at) : "not yet"],
  ];
}

// ------------------------------------------------------------------------------- stats

async function loadStats() {
  await load("stats-panel", "metrics", async () => {
    const stats = await api("/v1/stats");
    $("stats-uptime").textContent = `up ${duration(stats.uptime_seconds)}`;
    const jobs = stats.jobs ?? {};
    const machine = stats.machine ?? {};
    const tiles = [
      ["Jobs running", jobs.running, `${jobs.queued ?? 0} queued`],
      ["Jobs done", jobs.succeeded, `${jobs.failed ?? 0} failed · ${jobs.cancelled ?? 0} cancelled`],
      ["Customers", stats.customers, `${stats.sse_clients ?? 0} live viewers`],
      ["HTTP requests", stats.http?.requests, `${stats.http?.retries ?? 0} retries · ${stats.http?.bans ?? 0} bans`],
      ["API requests", stats.api?.requests, `${stats.api?.errors ?? 0} errors`],
      ["Write queue", stats.write_queue_depth, `${stats.webhook_backlog ?? 0} webhooks to deliver`],
      ["CPU", percent(machine.cpu_percent), `load ${(machine.load ?? []).map((n) => Number(n).toFixed(2)).join(" · ")}`],
      ["Memory", percent(machine.memory_percent), `${mebibytes(machine.rss_bytes)} resident`],
    ];
    $("stats-tiles").replaceChildren(...tiles.map(tile));
  });
}

function tile([label, value, detail]) {
  return el("div", { className: "tile" },
    el("div", { className: "label", text: label }),
    el("div", { className: "value", text: value ?? "—" }),
    el("div", { className: "detail-line", text: detail }));
}

const percent = (n) => (typeof n === "number" ? `${n.toFixed(1)} %` : "—");
const mebibytes = (n) => (typeof n === "number" ? `${(n / 1048576).toFixed(0)} MiB` : "—");

function duration(seconds) {
  const s = Math.floor(Number(seconds) || 0);
  const [d, h, m] = [Math.floor(s / 86400), Math.floor((s % 86400) / 3600), Math.floor((s % 3600) / 60)];
  if (d) return `${d} d ${h} h`;
  if (h) return `${h} h ${m} min`;
  return `${m} min ${s % 60} s`;
}

// --------------------------------------------------------------------- sign in and out

async function signIn(key) {
  session.key = key;
  $("login-submit").disabled = true;
  try {
    await api("/v1/customers");
  } catch (error) {
    // A valid key without the read scope still signs in: its panels say what it lacks.
    if (!(error instanceof ApiError) || error.status === 401 || error.status === 429) {
      session.key = null;
      sessionStorage.removeItem(KEY_STORAGE);
      showLogin(error instanceof ApiError ? error.detail : `could not reach the service (${error.message})`);
      return;
    }
  } finally {
    $("login-submit").disabled = false;
  }
  sessionStorage.setItem(KEY_STORAGE, key);
  showDashboard();
}

function signOut(message = null) {
  sessionStorage.removeItem(KEY_STORAGE);
  session.key = null;
  view?.stream?.abort();
  view = null;
  clearInterval(session.pollTimer);
  if (message) sessionStorage.setItem(`${KEY_STORAGE}.message`, message);
  // A fresh page: nothing of the previous key's data stays in memory or in the DOM.
  window.location.replace("/");
}

function showLogin(message = null) {
  $("dashboard-view").hidden = true;
  $("session").hidden = true;
  $("login-view").hidden = false;
  $("login-error").textContent = message ?? "";
  $("login-error").hidden = !message;
  $("api-key").value = "";
  $("api-key").focus();
}

function showDashboard() {
  $("login-view").hidden = true;
  $("session").hidden = false;
  $("dashboard-view").hidden = false;
  loadCustomers();
  loadJobs();
  loadSchedule();
  loadStats();
  session.pollTimer = setInterval(poll, POLL_MS);
}

function loadOperations() {
  return Promise.all([loadJobs(), loadStats()]);
}

function poll() {
  if (document.hidden) return;
  loadOperations();
  loadSchedule();
  if (!view) loadCustomers();
}

function start() {
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (key) signIn(key);
  });
  $("logout").addEventListener("click", () => signOut());
  $("refresh").addEventListener("click", startRefresh);
  $("movements-more").addEventListener("click", () => loadMovements({ more: true }));
  $("jobs-reload").addEventListener("click", loadJobs);

  const message = sessionStorage.getItem(`${KEY_STORAGE}.message`);
  sessionStorage.removeItem(`${KEY_STORAGE}.message`);
  const key = sessionStorage.getItem(KEY_STORAGE);
  if (key) signIn(key);
  else showLogin(message);
}

start();
