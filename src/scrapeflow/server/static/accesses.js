// The selected customer's bank accesses: one row each, live while a job works on it, with
// what an operator does to an access (its one-time code, its password, disable or enable it,
// erase it) and adding one. Every change is the API's: a refusal is shown where it was asked.

import { api, customerPath } from "./api.js";
import { openDialog } from "./dialog.js";
import { badge, button, cell, el, reason, whenCell } from "./dom.js";
import { count, counted } from "./format.js";
import { progressOf } from "./live.js";

const named = (access) => `${access.bank} · ${access.login}`;

/**
 * The rows of `selected`'s accesses. `hooks`: { changed(text), refused(error),
 * codeSent(access, job), codeRefused(access, text) }, called once the API answered.
 */
export function accessRows(selected, hooks) {
  const rows = [];
  for (const access of selected.status.accesses) {
    const live = progressOf(selected.job, access);
    rows.push(live ? liveRow(selected, access, live) : restingRow(selected, access, hooks));
    if (!live && access.enabled && access.result === "two_factor_required") {
      rows.push(codeRow(selected, access, hooks));
    }
  }
  return rows;
}

// One column says where an access stands: queued, in progress, then its result with the
// bank's words; at rest, its last result (or that it is disabled).
function bankCell(access) {
  return el("td", {}, el("span", { className: "bank", text: access.bank }),
    el("span", { className: "sub mono", text: access.login }));
}

function liveRow(selected, access, live) {
  const stored = access.result === live.result && !access.state.includes("progress");
  let status;
  if (live.result) status = result(live.result, stored ? access.detail : null);
  else status = badge(selected.job.phase === "queued" ? "queued" : "in_progress");
  const row = el(
    "tr",
    { className: "live-row" },
    bankCell(access),
    cell(status),
    cell(count(live.accounts), "num"),
    cell(count(live.movements), "num"),
    live.result && stored ? whenCell(access.finished_at) : cell("—"),
    el("td"),
  );
  row.dataset.access = String(access.access_id);
  return row;
}

function restingRow(selected, access, hooks) {
  // Read while a job works on it (its events not seen): the last result is not this one's.
  const working = access.state === "in_progress";
  let status;
  if (!access.enabled) {
    status = el("span", {}, badge("disabled"), el("span", {
      className: "sub detail", text: "left out of refreshes",
    }));
  } else if (working) status = badge("in_progress");
  else if (access.result) status = result(access.result, access.detail);
  else status = el("span", { className: "muted", text: "not read yet" });
  const row = el(
    "tr",
    { className: access.enabled ? "" : "disabled" },
    bankCell(access),
    cell(status),
    cell(count(access.accounts), "num"),
    cell(count(access.movements), "num"),
    working ? cell("—") : whenCell(access.finished_at),
    el("td", { className: "row-actions" },
      button("Password", () => changePassword(selected, access, hooks)),
      access.enabled
        ? button("Disable", () => enable(selected, access, false, hooks))
        : button("Enable", () => enable(selected, access, true, hooks)),
      button("Delete", () => erase(selected, access, hooks), "button small danger")),
  );
  row.dataset.access = String(access.access_id);
  return row;
}

function result(code, detail) {
  const shown = el("span", {}, badge(code));
  if (detail) shown.append(el("span", { className: "sub detail", text: detail }));
  return shown;
}

// ------------------------------------------------------------------- the one-time code

function codeRow(selected, access, hooks) {
  const input = el("input");
  Object.assign(input, {
    type: "text", inputMode: "numeric", autocomplete: "one-time-code", required: true,
    placeholder: "code", maxLength: 12, name: "code",
  });
  input.setAttribute("aria-label", `one-time code for ${named(access)}`);
  // What is being typed survives the table being drawn again (a status that changed).
  input.value = selected.codeDrafts[access.access_id] ?? "";
  input.addEventListener("input", () => { selected.codeDrafts[access.access_id] = input.value; });
  const refused = selected.codeErrors[access.access_id];
  const error = el("p", { className: "error", text: refused ?? "" });
  error.setAttribute("role", "alert");
  error.hidden = !refused;
  const form = el(
    "form",
    { className: "code-form" },
    el("span", { className: "asks" },
      el("strong", { text: `${access.bank} asks for a one-time code` }),
      el("span", { className: "bank-says", text: access.detail || "the bank sent a code" })),
    input,
    Object.assign(el("button", { className: "button small primary", text: "Send code" }), { type: "submit" }),
    error,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const code = input.value.trim();
    input.value = ""; // a code is used once: it never stays in the page
    delete selected.codeDrafts[access.access_id];
    if (!code) return;
    try {
      const path = customerPath(selected.customer, "accesses", access.access_id, "otp");
      const job = await api(path, { method: "POST", body: { code } });
      hooks.codeSent(access, job);
    } catch (failure) {
      hooks.codeRefused(access, reason(failure));
    }
  });
  const td = el("td", {}, form);
  td.colSpan = 6;
  const row = el("tr", { className: "code-row" }, td);
  row.dataset.codeFor = String(access.access_id);
  return row;
}

// ------------------------------------------------------------------- changes

function changePassword(selected, access, hooks) {
  openDialog({
    title: `Change the password of ${named(access)}`,
    message: "The new password is encrypted at once and never shown again. What the bank "
      + "kept of the old login (a session waiting for a code) is dropped.",
    fields: [{ name: "password", label: "New password", type: "password", autocomplete: "new-password" }],
    submit: "Change password",
    action: async ({ password }) => {
      await api(customerPath(selected.customer, "accesses", access.access_id), {
        method: "PATCH", body: { password },
      });
      hooks.changed(`Password changed for ${named(access)}.`);
    },
  });
}

async function enable(selected, access, enabled, hooks) {
  try {
    await api(customerPath(selected.customer, "accesses", access.access_id), {
      method: "PATCH", body: { enabled },
    });
  } catch (error) {
    hooks.refused(error);
    return;
  }
  hooks.changed(enabled
    ? `${named(access)} is enabled: the next refresh reads it.`
    : `${named(access)} is disabled: kept with its data, left out of refreshes.`);
}

function erase(selected, access, hooks) {
  openDialog({
    title: `Erase the access ${named(access)}?`,
    message: `This erases access ${access.access_id} of customer ${selected.customer}: `
      + `${access.bank}, login ${access.login}, its stored password, `
      + `${counted(access.accounts, "account")} and ${counted(access.movements, "movement")}, `
      + "and the events that name it. The customer's other banks stay. It cannot be undone.",
    submit: `Erase ${named(access)}`,
    danger: true,
    action: async () => {
      const erased = await api(customerPath(selected.customer, "accesses", access.access_id), {
        method: "DELETE",
      });
      const counts = erased?.counts ?? {};
      hooks.changed(`Erased ${named(access)}: ${counted(counts.accounts ?? 0, "account")}, `
        + `${counted(counts.movements ?? 0, "movement")}.`);
    },
  });
}

/** The "Add bank access" dialog for `selected`, offering the banks the service reads (GET
 * /v1/banks; any may be typed: the API's refusal of an unknown bank lists the banks it knows). */
export async function addAccess(selected, hooks) {
  let known = [];
  try {
    known = (await api("/v1/banks")).map((bank) => bank.code);
  } catch {
    known = []; // the list is a help: the form works without it
  }
  const banks = [...new Set([...known, ...selected.status.accesses.map((a) => a.bank)])];
  openDialog({
    title: `Add a bank access to ${selected.customer}`,
    message: "The customer's login at the bank. The password is encrypted at once and never shown.",
    fields: [
      { name: "bank", label: "Bank", list: banks.sort(), placeholder: "formbank" },
      { name: "login", label: "Login" },
      { name: "password", label: "Password", type: "password", autocomplete: "new-password" },
    ],
    submit: "Add access",
    action: async ({ bank, login, password }) => {
      const made = await api(customerPath(selected.customer, "accesses"), {
        method: "POST", body: { bank: bank.trim(), login: login.trim(), password },
      });
      hooks.changed(`Added ${named(made)}: update the customer to read it.`);
    },
  });
}
