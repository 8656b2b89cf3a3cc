// The JSON API, called with the key the user pasted: the one place that sends it.
//
// The key is kept in sessionStorage (this tab only, never in a URL). A non-2xx answer becomes
// an ApiError carrying the problem's `detail`, which the panels show as the API wrote it.

export const KEY_STORAGE = "scrapeflow.api-key";

export const session = { key: null };

let keyRefused = () => {};

/** Call `handler(detail)` when the API answers 401 to a signed-in page (a revoked key). */
export function onKeyRefused(handler) {
  keyRefused = handler;
}

/** A 401 to a key in use: the key was revoked or is no longer valid. */
export function noteRefusal(error) {
  if (error instanceof ApiError && error.status === 401 && session.key !== null) {
    keyRefused(error.detail);
  }
}

export class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
    this.detail = detail;
  }
}

export function authHeaders(extra = {}) {
  return { Accept: "application/json", Authorization: `Bearer ${session.key}`, ...extra };
}

/** The ApiError for a non-2xx response: its problem+json `detail`, else its status line. */
export async function problemOf(response) {
  let detail = `${response.status} ${response.statusText}`.trim();
  try {
    const body = await response.json();
    if (body && typeof body.detail === "string") detail = body.detail;
  } catch {
    // not problem+json: keep the status line
  }
  return new ApiError(response.status, detail);
}

/**
 * The JSON body of `path` (null for a 204), or an ApiError. `body` is sent as JSON. With
 * `dated`, [body, the service's clock when it answered (ms, its Date header)].
 */
export async function api(path, { method = "GET", body, signal, dated = false } = {}) {
  const headers = authHeaders(body === undefined ? {} : { "Content-Type": "application/json" });
  const response = await fetch(path, {
    method, headers, signal, cache: "no-store", credentials: "omit",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) {
    const error = await problemOf(response);
    noteRefusal(error);
    throw error;
  }
  const answer = response.status === 204 ? null : await response.json();
  return dated ? [answer, Date.parse(response.headers.get("Date") ?? "")] : answer;
}

/**
 * Download `path` (a file the API answers as an attachment) and hand it to the browser to
 * save, under the name the API gives. The key travels in a header, so a plain link cannot do.
 */
export async function download(path, fallbackName) {
  const response = await fetch(path, {
    headers: authHeaders({ Accept: "*/*" }), cache: "no-store", credentials: "omit",
  });
  if (!response.ok) {
    const error = await problemOf(response);
    noteRefusal(error);
    throw error;
  }
  const disposition = response.headers.get("Content-Disposition") ?? "";
  const named = /filename="([^"]+)"/.exec(disposition);
  const url = URL.createObjectURL(await response.blob());
  const link = Object.assign(document.createElement("a"), {
    href: url, download: named ? named[1] : fallbackName,
  });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

/** URL path segments, each percent-encoded: an id never changes the path's shape. */
export const path = (...parts) => parts.map(encodeURIComponent).join("/");

/** A customer's path, and below it: customerPath("ana", "accesses", 3) → /v1/customers/ana/accesses/3 */
export const customerPath = (id, ...rest) => `/v1/customers/${path(id, ...rest.map(String))}`;
