// Building the page. Data reaches the DOM as text only (textContent, or strings passed to
// append(), which makes text nodes), never as HTML. Money is shown with the API's decimals
// (a decimal string, grouped by format.js); it is never turned into a float.

import { ApiError } from "./api.js";
import { moneyText, when } from "./format.js";

export { when };

const BADGES = {
  all_updated: "ok", succeeded: "ok", success: "ok", enabled: "ok",
  running: "running", in_progress: "running", queued: "waiting",
  two_factor_required: "waiting", not_approved: "waiting", consent_expired: "waiting",
  partially_updated: "waiting", partial: "waiting",
  needs_action: "waiting", wrong_credentials: "bad", user_locked: "bad",
  bank_unavailable: "bad", blocked: "bad", site_changed: "bad", unknown: "bad", timeout: "bad",
  not_stored: "bad",
  failed: "bad", error: "bad", cancelled: "neutral", idle: "neutral", disabled: "neutral",
};

export const $ = (id) => document.getElementById(id);

export function el(tag, options = {}, ...children) {
  const node = document.createElement(tag);
  if (options.className) node.className = options.className;
  if (options.title) node.title = options.title;
  if (options.text !== undefined) node.textContent = String(options.text);
  node.append(...children.filter((child) => child !== null && child !== undefined));
  return node;
}

export function badge(state, text = null) {
  const label = text ?? String(state ?? "").replaceAll("_", " ");
  return el("span", { className: `badge ${BADGES[state] ?? "neutral"}`, text: label });
}

export function money(amount, currency) {
  if (amount === null || amount === undefined) return el("span", { className: "muted", text: "—" });
  const sign = String(amount).startsWith("-") ? " negative" : "";
  return el("span", { className: `money${sign}`, text: moneyText(amount, currency) });
}

export function button(text, onClick, className = "button small") {
  const node = el("button", { className, text });
  node.type = "button";
  node.addEventListener("click", onClick);
  return node;
}

/** An instant in two lines: its date, then its time with the zone. */
export function whenCell(iso) {
  const shown = when(iso);
  const split = shown.indexOf(" ");
  const td = el("td", { className: "when", title: shown });
  if (!iso || split < 0) td.append(shown);
  else td.append(el("span", { text: shown.slice(0, split) }), el("span", { className: "sub", text: shown.slice(split + 1) }));
  return td;
}

export function cell(content, className = "") {
  const td = el("td", { className });
  td.append(content ?? "—");
  return td;
}

export function fillRows(table, rows, emptyText) {
  const body = $(table).tBodies[0];
  if (rows.length === 0) {
    const td = el("td", { text: emptyText });
    td.colSpan = $(table).tHead.rows[0].cells.length;
    body.replaceChildren(el("tr", { className: "empty" }, td));
  } else {
    body.replaceChildren(...rows);
  }
}

// -------------------------------------------------------------- panels that degrade alone

export function note(panel, text) {
  const box = $(panel).querySelector(".note");
  box.textContent = text ?? "";
  box.hidden = !text;
}

// The API's own words in the panel (a missing scope, a key limited to some customers, …), or
// that the service could not be reached; the other panels carry on.
export function degrade(panel, error) {
  $(panel).hidden = false;
  note(panel, reason(error));
}

/** What went wrong, for the user: the API's own words, or that it could not be reached. */
export function reason(error) {
  if (error instanceof ApiError) return error.detail;
  return `could not reach the service (${error.message})`;
}

/** Show `text` in the error line `id` (hidden when null). */
export function say(id, text) {
  $(id).textContent = text ?? "";
  $(id).hidden = !text;
}

/** Run `loader`, which fills `panel`; on failure the panel says why. */
export async function load(panel, loader) {
  try {
    await loader();
    $(panel).hidden = false;
    note(panel, null);
  } catch (error) {
    if (error.name === "AbortError") return;
    degrade(panel, error);
  }
}
