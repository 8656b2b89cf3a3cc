// The customer list and the selected customer: its banks, an update ("refresh") and its
// progress, live over the customer's event stream.

import { api, path } from "./api.js";
import { $, badge, cell, degrade, el, fillRows, load, note, when } from "./dom.js";
import { loadJobs } from "./jobs.js";
import { loadAccounts, loadMovements } from "./ledger.js";
import { loadStats } from "./service.js";
import { follow } from "./sse.js";

// The selected customer: { customer, status, cursor, stream, awaiting, live, timers }.
let view = null;

const isCurrent = (selected) => view === selected;

export const hasSelection = () => view !== null;

/** Stop following the selected customer (signing out). */
export function forgetSelection() {
  view?.stream?.abort();
  view = null;
}

export async function loadCustomers() {
  await load("customers-panel", async () => {
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
    customerBadge(customer),
  );
  button.type = "button";
  button.dataset.customer = customer.id;
  button.setAttribute("aria-current", String(view?.customer === customer.id));
  button.addEventListener("click", () => selectCustomer(customer.id, customer.name));
  return button;
}

// A finished refresh says how it went (green only when every access was read); one under way
// says so.
const OUTCOMES = {
  succeeded: "all updated", partial: "partly updated", needs_action: "needs action",
  failed: "failed",
};

function customerBadge(customer) {
  if (customer.state === "all_updated" && customer.outcome) {
    return badge(customer.outcome, OUTCOMES[customer.outcome]);
  }
  return badge(customer.state);
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
  await Promise.all([loadStatus(selected), ...loadLedger(selected)]);
  if (isCurrent(selected)) followEvents(selected);
}

const loadLedger = (selected) => {
  const current = () => isCurrent(selected);
  return [loadAccounts(selected, current), loadMovements(selected, current)];
};

/** The next page of the selected customer's movements. */
export function loadMoreMovements() {
  const selected = view;
  if (selected) loadMovements(selected, () => isCurrent(selected), { more: true });
}

// ------------------------------------------------------------------- status and refresh

async function loadStatus(selected) {
  await load("customer-panel", async () => {
    const status = await api(`/v1/customers/${path(selected.customer)}/status`);
    if (!isCurrent(selected)) return;
    selected.status = status;
    if (status.refresh_job) selected.awaiting = true;
    renderProgress(selected);
    if (selected.awaiting && !status.refresh_job && !anyInProgress(status)) {
      selected.awaiting = false; // the refresh has ended: show what it stored
      await Promise.all([...loadLedger(selected), loadCustomers(), loadJobs()]);
    }
  });
}

const anyInProgress = (status) => status.accesses.some((a) => a.state === "in_progress");

function refreshLabel(status) {
  const job = status.refresh_job;
  if (job) {
    const done = job.progress?.accesses_done ?? 0;
    const doing = job.state === "queued" ? "queued" : "updating";
    return [job.state, `${doing} · ${done}/${status.accesses.length} banks`];
  }
  if (status.outcome && (status.all_updated || status.outcome === "failed")) {
    return [status.outcome, OUTCOMES[status.outcome]];
  }
  if (status.all_updated) return ["all_updated", "all updated"];
  return [status.state, status.state.replaceAll("_", " ")];
}

function renderProgress(selected) {
  const status = selected.status;
  const [state, text] = refreshLabel(status);
  $("refresh-state").replaceWith(Object.assign(badge(state, text), { id: "refresh-state" }));
  $("refresh").disabled = Boolean(status.refresh_job);
  // While a refresh runs, its events say more than the stored counts: batches as they land.
  const live = (access) => (status.refresh_job ? selected.live.accesses.get(access.access_id) : null);
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

/** Ask the API to update the selected customer (its "Update" button). */
export async function startRefresh() {
  const selected = view;
  if (!selected) return;
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
    degrade("customer-panel", error);
    return;
  }
  await Promise.all([loadStatus(selected), loadJobs()]);
}

function trackJob(selected, jobId) {
  if (selected.live.jobId !== jobId) {
    selected.live = { jobId, accesses: new Map() };
  }
}

// ------------------------------------------------------------------- live progress

function followEvents(selected) {
  return follow(`/v1/customers/${path(selected.customer)}/events`, {
    signal: selected.stream.signal,
    onEvent: (event) => onEvent(selected, event),
    onState: (state, text) => setLive(state, text),
    onRefused: (error) => setLive("off", `live updates unavailable: ${error.detail}`),
  });
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
      if (ofThisJob && data.access_id != null) {
        access(data.access_id).result = data.result_code ?? "done";
      }
      break;
    default:
      break;
  }
  if (selected.status && isCurrent(selected)) renderProgress(selected);
  // The stored status is the truth: read it again once the burst of events settles.
  later(selected, "status", 250, () => loadStatus(selected));
  if (message.type.startsWith("job.")) {
    later(selected, "jobs", 250, () => Promise.all([loadJobs(), loadStats()]));
  }
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
