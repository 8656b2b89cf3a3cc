// The service as a whole: its numbers (/v1/stats, scope metrics) and its daily schedule.
// Both cover every customer, so a key limited to some customers is refused them (403): the
// panel then shows the API's reason.

import { api } from "./api.js";
import { $, badge, el, load, when } from "./dom.js";
import { count } from "./format.js";

export async function loadSchedule() {
  await load("schedule-panel", async () => {
    const schedule = await api("/v1/schedule?runs=1"); // the panel shows the last run only
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

export async function loadStats() {
  await load("stats-panel", async () => {
    const stats = await api("/v1/stats");
    $("stats-uptime").textContent = `up ${duration(stats.uptime_seconds)}`;
    const jobs = stats.jobs ?? {};
    const machine = stats.machine ?? {};
    const loadAverage = (machine.load ?? []).map((n) => Number(n).toFixed(2)).join(" · ");
    const tiles = [
      ["Jobs running", jobs.running, `${jobs.queued ?? 0} queued`],
      ["Jobs done", jobs.succeeded, `${jobs.failed ?? 0} failed · ${jobs.cancelled ?? 0} cancelled`],
      ["Customers", stats.customers, `${stats.sse_clients ?? 0} live viewers`],
      ["HTTP requests", stats.http?.requests,
        `${stats.http?.retries ?? 0} retries · ${stats.http?.bans ?? 0} bans`],
      ["API requests", stats.api?.requests, `${stats.api?.errors ?? 0} errors`],
      ["Write queue", stats.write_queue_depth, `${stats.webhook_backlog ?? 0} webhooks to deliver`],
      ["CPU", percent(machine.cpu_percent), `load ${loadAverage}`],
      ["Memory", percent(machine.memory_percent), `${mebibytes(machine.rss_bytes)} resident`],
    ];
    $("stats-tiles").replaceChildren(...tiles.map(tile));
  });
}

function tile([label, value, detail]) {
  return el("div", { className: "tile" },
    el("div", { className: "label", text: label }),
    el("div", { className: "value", text: typeof value === "number" ? count(value) : value ?? "—" }),
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
