// What a running job of the selected customer is doing, access by access, as its events tell:
// a refresh (every enabled access at once) or a one-time code (one access). The customer's
// event stream carries a refresh's job.* events and the bank.* events of both; a code's job is
// polled for its state (its job.* events are on the job's own stream only).
//
// A tracked job: { id, kind, phase: "queued" | "running" | "ended", accessId (a code's),
// accesses: Map(access_id → { accounts, movements, result, at (when it ended) }) }.

export const REFRESH = "bank.refresh";
export const CODE = "bank.otp";
const FINAL = new Set(["succeeded", "failed", "cancelled"]);

export const isFinal = (state) => FINAL.has(state);

export function newJob(id, kind, { phase = "queued", accessId = null } = {}) {
  return { id, kind, phase, accessId, accesses: new Map() };
}

/** Whether `job` is under way and works on `access`. */
export function covers(job, access) {
  if (!job || job.phase === "ended") return false;
  return job.kind === CODE ? access.access_id === job.accessId : access.enabled !== false;
}

/** What `job` has done for `access` so far (null when it does not cover it). */
export function progressOf(job, access) {
  if (!covers(job, access)) return null;
  return job.accesses.get(access.access_id) ?? { accounts: 0, movements: 0, result: null };
}

/** [accesses ended, accesses it works on] for the counter ("1/3 banks"). */
export function counter(job, accesses) {
  const covered = accesses.filter((access) => covers(job, access));
  const ended = covered.filter((access) => job.accesses.get(access.access_id)?.result).length;
  return [ended, covered.length];
}

/**
 * Apply one event of the customer's stream to `current` (the tracked job or null): the job to
 * track next, and what changed ("job" when a job started or ended, "access" when an access
 * ended, "count" for a batch, null for nothing of ours).
 */
export function apply(current, type, data) {
  const jobId = data.job_id ?? null;
  if (type.startsWith("job.")) {
    if (data.kind !== REFRESH || !jobId) return [current, null];
    const state = type.slice(4);
    let job = current?.id === jobId ? current : newJob(jobId, REFRESH);
    if (state === "running" && job.phase === "queued") job = { ...job, phase: "running" };
    if (isFinal(state)) job = { ...job, phase: "ended" };
    return [job, "job"];
  }
  if (type === "bank.refresh_started" && jobId) {
    const job = current?.id === jobId ? current : newJob(jobId, REFRESH);
    return [{ ...job, phase: job.phase === "ended" ? "ended" : "running" }, "job"];
  }
  if (!current || jobId !== current.id || data.access_id == null) return [current, null];
  const entry = current.accesses.get(data.access_id) ?? { accounts: 0, movements: 0, result: null };
  if (current.phase === "queued") current.phase = "running";
  switch (type) {
    case "bank.accounts":
      entry.accounts += data.count ?? 0;
      break;
    case "bank.movements":
      entry.movements += data.count ?? 0;
      break;
    case "bank.access_finished":
      entry.result = data.result_code ?? "unknown";
      entry.at = data.at;
      break;
    default:
      return [current, null];
  }
  current.accesses.set(data.access_id, entry);
  return [current, type === "bank.access_finished" ? "access" : "count"];
}
