// The most recent jobs, with a Cancel button on those still queued or running and their
// per-item results; new fetch and run jobs (scope jobs), as POST /v1/jobs takes them.

import { api, path } from "./api.js";
import { openDialog } from "./dialog.js";
import { $, badge, button, cell, degrade, el, fillRows, load, note, when } from "./dom.js";
import { count } from "./format.js";

const JOBS_SHOWN = 10;
const RESULTS_SHOWN = 50;
const FOLLOW_MS = 1000;
const ACTIVE_JOB_STATES = new Set(["queued", "running"]);

export function initJobs() {
  $("jobs-reload").addEventListener("click", loadJobs);
  $("job-new").addEventListener("click", newJob);
}

export async function loadJobs() {
  await load("jobs-panel", async () => {
    const page = await api(`/v1/jobs?limit=${JOBS_SHOWN}`);
    fillRows("jobs", page.jobs.map(jobRow), "No jobs yet.");
  });
}

function jobRow(job) {
  const progress = Object.entries(job.progress ?? {})
    .map(([name, n]) => `${count(n)} ${name.replaceAll("_", " ")}`);
  const action = el("td", { className: "row-actions" }, button("Results", () => loadResults(job)));
  if (ACTIVE_JOB_STATES.has(job.state) && !job.cancel_requested) {
    const cancel = button("Cancel", () => cancelJob(job.id, cancel), "button small danger");
    action.append(cancel);
  } else if (job.cancel_requested && ACTIVE_JOB_STATES.has(job.state)) {
    action.append(el("span", { className: "muted small", text: " cancelling…" }));
  }
  const row = el(
    "tr",
    {},
    cell(el("span", { className: "mono", title: job.id, text: job.id.slice(-10) })),
    cell(job.kind),
    cell(job.customer ?? "—"),
    cell(badge(job.state)),
    cell(progress.length ? progress.join(" · ") : "—", "small"),
    cell(when(job.created_at), "nowrap"),
    cell(when(job.finished_at), "nowrap"),
    action,
  );
  row.dataset.job = job.id;
  return row;
}

async function cancelJob(jobId, button) {
  button.disabled = true;
  try {
    await api(`/v1/jobs/${path(jobId)}/cancel`, { method: "POST" });
    note("jobs-panel", null);
  } catch (error) {
    button.disabled = false;
    degrade("jobs-panel", error);
    return;
  }
  await loadJobs();
}

// Each kind's items as the API gives them: URLs (fetch), tasks (run), accesses (bank jobs).
const RESULT_COLUMNS = {
  fetch: [["URL", (i) => i.url], ["Outcome", (i) => badge(i.outcome === "stored" ? "succeeded" : i.outcome === "failed" ? "failed" : "idle", i.outcome)],
    ["Status", (i) => (i.status === null ? "—" : String(i.status))], ["Size", (i) => (i.size === null ? "—" : count(i.size))],
    ["Error", (i) => i.error ?? "—"]],
  run: [["Task", (i) => i.key], ["URL", (i) => i.url ?? "—"], ["State", (i) => badge(i.state)],
    ["Executors", (i) => Object.entries(i.executors ?? {}).map(([name, o]) => `${name}: ${o.status ?? o.state ?? "?"}`).join(" · ") || "—"]],
  access: [["Bank", (i) => i.bank], ["Result", (i) => badge(i.result)],
    ["Accounts", (i) => count(i.accounts)], ["Movements", (i) => count(i.movements)]],
};

async function loadResults(job) {
  await load("jobs-panel", async () => {
    const page = await api(`/v1/jobs/${path(job.id)}/results?limit=${RESULTS_SHOWN}`);
    const columns = RESULT_COLUMNS[job.kind] ?? RESULT_COLUMNS.access;
    $("job-results-view").hidden = false;
    $("job-results-of").textContent = `${job.kind} ${job.id.slice(-10)}`;
    $("job-results").tHead.rows[0].replaceChildren(...columns.map(([name]) => el("th", { text: name })));
    const rows = page.items.map((item) => el("tr", {}, ...columns.map(([, shown]) => cell(shown(item)))));
    fillRows("job-results", rows, "No results yet.");
    $("job-results-more").hidden = !page.next_cursor;
  });
}

function newJob() {
  openDialog({
    title: "New job",
    message: "fetch: stores each URL's page. run: runs each task (a URL) through the executors "
      + "registered by name. Both need the jobs scope.",
    fields: [
      { name: "kind", label: "Kind (fetch or run)", value: "fetch", list: ["fetch", "run"] },
      { name: "items", label: "URLs or tasks, one a line", type: "textarea", placeholder: "https://example.org/" },
      { name: "executors", label: "Executors (run; comma-separated, empty: the default)", optional: true },
    ],
    submit: "Start job",
    action: async ({ kind, items, executors }) => {
      const lines = items.split("\n").map((line) => line.trim()).filter(Boolean);
      const chosen = executors.split(",").map((e) => e.trim()).filter(Boolean);
      const params = kind.trim() === "run"
        ? { tasks: lines, ...(chosen.length ? { executors: chosen } : {}) }
        : { urls: lines };
      const job = await api("/v1/jobs", { method: "POST", body: { kind: kind.trim(), params } });
      await loadJobs();
      followJob(job.id);
    },
  });
}

// A job started here is followed until it ends (the table shows its progress meanwhile).
async function followJob(jobId) {
  for (;;) {
    await new Promise((resolve) => { setTimeout(resolve, FOLLOW_MS); });
    let job;
    try {
      job = await api(`/v1/jobs/${path(jobId)}`);
    } catch {
      return; // the table says what it can on the next poll
    }
    await loadJobs();
    if (!ACTIVE_JOB_STATES.has(job.state)) return;
  }
}
