// The selected customer: its banks (accesses.js), an update ("refresh") and a one-time code
// followed live over the customer's event stream (live.js), renaming and erasing it; its
// accounts and movements are ledger.js's.

import { api, customerPath, path } from "./api.js";
import { accessRows, addAccess } from "./accesses.js";
import { OUTCOMES, loadCustomers, markSelected } from "./customers.js";
import { openDialog } from "./dialog.js";
import { $, badge, degrade, el, fillRows, load, note } from "./dom.js";
import { counted } from "./format.js";
import { loadJobs } from "./jobs.js";
import { clearLedger, loadAccounts, loadMovements } from "./ledger.js";
import { CODE, REFRESH, apply, counter, isFinal, newJob } from "./live.js";
import { loadStats } from "./service.js";
import { follow } from "./sse.js";

const CODE_POLL_MS = 500;
const IDLE_TEXT = "no customer picked: no live stream";

// The selected customer: { customer, name, status, job, stream, timers, cursor, filters }.
let view = null;

const isCurrent = (selected) => view === selected;

/** Read the selected customer's status again (the page's poll: a change by someone else). */
export function pollSelection() {
  if (view?.status) loadStatus(view);
}

/** Stop following the selected customer (signing out, or it was erased). */
export function forgetSelection() {
  view?.stream?.abort();
  view = null;
  markSelected(null);
  setLive("idle", IDLE_TEXT);
}

export function initCustomer() {
  setLive("idle", IDLE_TEXT);
  $("refresh").addEventListener("click", startRefresh);
  $("access-add").addEventListener("click", () => view?.status && addAccess(view, hooksFor(view)));
  $("customer-rename").addEventListener("click", () => view && rename(view));
  $("customer-delete").addEventListener("click", () => view?.status && eraseCustomer(view));
}

export async function selectCustomer(customer, name) {
  view?.stream?.abort();
  const selected = {
    customer, name, status: null, job: null, stream: new AbortController(), timers: {},
    cursor: null, filters: { account: "", since: "", until: "" }, codeErrors: {}, codeDrafts: {}, shown: null, openedAt: null, opened: null,
  };
  view = selected;
  markSelected(customer);
  $("pick-customer").hidden = true;
  $("customer-name").textContent = name || customer;
  $("customer-id").textContent = customer;
  clearLedger();
  fillRows("accesses", [], "Loading…");
  $("customer-panel").hidden = false;
  note("customer-panel", null);
  setLive("connecting", "connecting…");
  await Promise.all([loadStatus(selected), ...loadLedger(selected)]);
  if (isCurrent(selected)) followEvents(selected);
}

function loadLedger(selected, { movements = true } = {}) {
  const current = () => isCurrent(selected);
  return [loadAccounts(selected, current), movements ? loadMovements(selected, current) : null];
}

/** Everything of the customer again, once a job of it ended or it was changed. */
async function reloadAll(selected) {
  await Promise.all([loadStatus(selected), ...loadLedger(selected), loadCustomers(), loadJobs()]);
}

// ------------------------------------------------------------------- status

async function loadStatus(selected) {
  selected.asked = (selected.asked ?? 0) + 1;
  const asked = selected.asked;
  await load("customer-panel", async () => {
    const [status, at] = await api(customerPath(selected.customer, "status"), { dated: true });
    // Answers may cross: only the last one asked is shown.
    if (!isCurrent(selected) || asked !== selected.asked) return;
    selected.openedAt ??= at;
    selected.opened ??= status;
    selected.status = status;
    const running = status.refresh_job;
    if (running && !isFinal(running.state) && selected.job?.id !== running.id) {
      // a refresh the stream has not told of yet (or that began before the page opened)
      track(selected, newJob(running.id, REFRESH, { phase: running.state === "queued" ? "queued" : "running" }));
    } else if (!running && selected.job?.kind === REFRESH && selected.job.phase !== "ended"
      && asked > selected.job.since && !status.accesses.some((a) => a.state === "in_progress")) {
      selected.job.phase = "ended"; // it ended while the stream was away: read what it stored
      later(selected, "ledger", 0, () => Promise.all([...loadLedger(selected), loadCustomers(), loadJobs()]));
    }
    render(selected);
  });
}

function refreshLabel(selected) {
  const { status, job } = selected;
  if (job && job.phase !== "ended") {
    const [ended, of] = counter(job, status.accesses);
    if (job.kind === CODE) return ["running", `checking the code · ${ended}/${of} bank`];
    const doing = job.phase === "queued" ? "queued" : "updating";
    return [job.phase === "queued" ? "queued" : "running", `${doing} · ${ended}/${of} banks`];
  }
  if (status.outcome && (status.all_updated || status.outcome === "failed")) {
    return [status.outcome, OUTCOMES[status.outcome]];
  }
  if (status.all_updated) return ["all_updated", "all updated"];
  if (status.state === "in_progress") return ["running", "updating"];
  return [status.state, status.state.replaceAll("_", " ")];
}

// A status asked before a job was known to the page cannot say that the job ended.
function track(selected, job) {
  job.since = selected.asked ?? 0;
  selected.job = job;
}

function render(selected) {
  if (!isCurrent(selected) || !selected.status) return;
  const [state, text] = refreshLabel(selected);
  $("refresh-state").replaceWith(Object.assign(badge(state, text), { id: "refresh-state" }));
  const busy = selected.job && selected.job.phase !== "ended";
  $("refresh").disabled = Boolean(busy || selected.status.refresh_job);
  // Drawn again only when something shown changed: a code being typed keeps its form.
  const working = selected.job && selected.job.phase !== "ended" ? selected.job : null;
  const shown = JSON.stringify([selected.status.accesses, working && {
    ...working, accesses: [...working.accesses],
  }, selected.codeErrors]);
  if (shown === selected.shown) return;
  selected.shown = shown;
  fillRows("accesses", accessRows(selected, hooksFor(selected)), "This customer has no bank access.");
}

function hooksFor(selected) {
  return {
    changed: async (text) => {
      if (!isCurrent(selected)) return;
      await reloadAll(selected);
      note("customer-panel", null);
      flash(text);
    },
    refused: (error) => degrade("customer-panel", error),
    codeRefused: (access, text) => {
      if (!isCurrent(selected)) return;
      selected.codeErrors[access.access_id] = text;
      render(selected);
    },
    codeSent: (access, job) => {
      if (!isCurrent(selected)) return;
      delete selected.codeErrors[access.access_id];
      track(selected, newJob(job.id, CODE, { accessId: access.access_id, phase: job.state === "running" ? "running" : "queued" }));
      render(selected);
      followCode(selected, job.id);
    },
  };
}

function flash(text) {
  const line = $("customer-panel").querySelector(".flash") ?? el("p", { className: "flash" });
  line.textContent = text;
  line.setAttribute("role", "status");
  $("customer-panel").querySelector(".note").after(line);
}

// ------------------------------------------------------------------- refresh and codes

/** Ask the API to update the selected customer (its "Update" button). */
export async function startRefresh() {
  const selected = view;
  if (!selected) return;
  $("refresh").disabled = true;
  try {
    const job = await api(customerPath(selected.customer, "refresh"), { method: "POST" });
    if (!isCurrent(selected)) return;
    if (selected.job?.id !== job.id) track(selected, newJob(job.id, REFRESH, { phase: job.state === "queued" ? "queued" : "running" }));
    note("customer-panel", null);
    render(selected);
  } catch (error) {
    if (!isCurrent(selected)) return;
    $("refresh").disabled = false;
    degrade("customer-panel", error);
    return;
  }
  await loadJobs();
}

// A code's job tells its state on its own stream: polled here, as its bank.* events (the
// access's counts and result) come on the customer's stream.
async function followCode(selected, jobId) {
  for (;;) {
    await new Promise((resolve) => { setTimeout(resolve, CODE_POLL_MS); });
    if (!isCurrent(selected) || selected.job?.id !== jobId) return;
    let job;
    try {
      job = await api(`/v1/jobs/${path(jobId)}`);
    } catch (error) {
      degrade("customer-panel", error);
      return;
    }
    if (!isCurrent(selected) || selected.job?.id !== jobId) return;
    if (job.state === "running" && selected.job.phase === "queued") selected.job.phase = "running";
    if (isFinal(job.state)) {
      selected.job.phase = "ended";
      const said = job.result?.result ? ` ${job.result.result.replaceAll("_", " ")}` : "";
      await reloadAll(selected);
      flash(job.state === "succeeded"
        ? `The code was given to the bank:${said}.`
        : `The code's job ${job.state}${job.error ? `: ${job.error}` : ""}.`);
      loadStats();
      return;
    }
    render(selected);
  }
}

// ------------------------------------------------------------------- the customer itself

function rename(selected) {
  openDialog({
    title: `Rename ${selected.customer}`,
    message: "The name is for people; the id stays.",
    fields: [{ name: "name", label: "Name", value: selected.name ?? "" }],
    submit: "Rename",
    action: async ({ name }) => {
      const renamed = await api(customerPath(selected.customer), { method: "PATCH", body: { name: name.trim() } });
      if (!isCurrent(selected)) return;
      selected.name = renamed.name;
      $("customer-name").textContent = renamed.name || renamed.id;
      await loadCustomers();
    },
  });
}

function eraseCustomer(selected) {
  const accesses = selected.status.accesses;
  const sum = (field) => accesses.reduce((total, access) => total + access[field], 0);
  const who = selected.name && selected.name !== selected.customer
    ? `${selected.customer} (${selected.name})` : selected.customer;
  openDialog({
    title: `Erase customer ${who}?`,
    message: `This erases customer ${who} and everything of it: `
      + `${counted(accesses.length, "bank access")} with their stored passwords, `
      + `${counted(sum("accounts"), "account")}, ${counted(sum("movements"), "movement")}, `
      + "its events and its jobs. It cannot be undone.",
    submit: `Erase ${selected.customer}`,
    danger: true,
    action: async () => {
      const erased = await api(customerPath(selected.customer), { method: "DELETE" });
      if (!isCurrent(selected)) return;
      forgetSelection();
      for (const panel of ["customer-panel", "accounts-panel", "movements-panel"]) $(panel).hidden = true;
      const counts = erased?.counts ?? {};
      $("pick-customer").hidden = false;
      $("pick-customer").querySelector("p").textContent = `Customer ${selected.customer} was erased `
        + `(${counted(counts.accesses ?? 0, "access")}, ${counted(counts.accounts ?? 0, "account")}, `
        + `${counted(counts.movements ?? 0, "movement")}). Pick another customer.`;
      await Promise.all([loadCustomers(), loadJobs()]);
    },
  });
}

// ------------------------------------------------------------------- live progress

function followEvents(selected) {
  return follow(customerPath(selected.customer, "events"), {
    signal: selected.stream.signal,
    onEvent: (event) => onEvent(selected, event),
    onState: (state, text) => {
      if (isCurrent(selected)) setLive(state, state === "live" ? `live: ${selected.customer}` : text);
    },
    onRefused: (error) => {
      if (isCurrent(selected)) setLive("off", `live updates unavailable: ${error.detail}`);
    },
  });
}

function onEvent(selected, message) {
  if (!isCurrent(selected)) return;
  let data;
  try {
    data = JSON.parse(message.data);
  } catch {
    return;
  }
  if (message.id !== null) $("live").dataset.lastEventId = message.id;
  const before = selected.job;
  const [job, change] = apply(before, message.type, data);
  if (job && job.id !== before?.id) track(selected, job);
  else selected.job = job;
  if (change === null) return;
  later(selected, "render", 0, () => render(selected));
  const ended = job && job.phase === "ended" && (before?.id !== job.id || before.phase !== "ended");
  if (ended) {
    if (!shownWhenOpened(selected, job, data)) {
      later(selected, "status", 100, () => reloadAll(selected).then(() => loadStats()));
    }
    return;
  }
  if (Date.parse(data.at) < selected.openedAt - 1000) return; // history: see shownWhenOpened
  if (change === "access" || change === "job") {
    // the stored status holds what the events do not: the bank's message, the time it ended
    later(selected, "status", 150, () => Promise.all([loadStatus(selected), ...loadLedger(selected, { movements: false })]));
    if (change === "job") later(selected, "jobs", 250, () => Promise.all([loadJobs(), loadStats()]));
  }
}

// The stream starts at the customer's first event, so opening a customer replays its history:
// a job whose every access's end is in the status read when the customer was opened (or, with
// none, that ended well before, by the service's clock) stored nothing that is not shown.
function shownWhenOpened(selected, job, data) {
  const opened = selected.opened;
  if (!opened) return false;
  const ends = [...job.accesses.entries()].filter(([, entry]) => entry.at);
  if (ends.length === 0) return Date.parse(data.at) < selected.openedAt - 1000;
  return ends.every(([id, entry]) => {
    const access = opened.accesses.find((a) => a.access_id === id);
    return Boolean(access?.finished_at)
      && Date.parse(access.finished_at) >= Date.parse(entry.at) - 1000;
  });
}

function later(selected, name, ms, task) {
  clearTimeout(selected.timers[name]);
  selected.timers[name] = setTimeout(() => {
    if (isCurrent(selected)) task();
  }, ms);
}

function setLive(state, text) {
  const live = $("live");
  live.dataset.state = state;
  live.textContent = text;
  if (state === "idle") delete live.dataset.lastEventId;
}
