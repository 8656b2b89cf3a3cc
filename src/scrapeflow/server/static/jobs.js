// The most recent jobs, with a Cancel button on those still queued or running.

import { api, path } from "./api.js";
import { badge, cell, degrade, el, fillRows, load, note, when } from "./dom.js";

const JOBS_SHOWN = 10;
const ACTIVE_JOB_STATES = new Set(["queued", "running"]);

export async function loadJobs() {
  await load("jobs-panel", async () => {
    const page = await api(`/v1/jobs?limit=${JOBS_SHOWN}`);
    fillRows("jobs", page.jobs.map(jobRow), "No jobs yet.");
  });
}

function jobRow(job) {
  const progress = Object.entries(job.progress ?? {})
    .map(([name, count]) => `${count} ${name.replaceAll("_", " ")}`);
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
    cell(job.customer ?? "—"),
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
    degrade("jobs-panel", error);
    return;
  }
  await loadJobs();
}
