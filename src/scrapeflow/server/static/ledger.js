// The selected customer's accounts and movements, as the API stores them.

import { api, path } from "./api.js";
import { $, badge, cell, el, fillRows, load, money, when } from "./dom.js";

const MOVEMENTS_PAGE = 25;

/** Fill the accounts table for `selected`, unless `current()` says the user moved on. */
export async function loadAccounts(selected, current) {
  await load("accounts-panel", async () => {
    const accounts = await api(`/v1/customers/${path(selected.customer)}/accounts`);
    if (!current()) return;
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

/** The newest page of movements; with `more`, the next page (by `selected.cursor`) appended. */
export async function loadMovements(selected, current, { more = false } = {}) {
  await load("movements-panel", async () => {
    const query = new URLSearchParams({ limit: String(MOVEMENTS_PAGE) });
    if (more && selected.cursor) query.set("cursor", selected.cursor);
    const page = await api(`/v1/customers/${path(selected.customer)}/movements?${query}`);
    if (!current()) return;
    selected.cursor = page.next_cursor;
    const rows = page.movements.map(movementRow);
    const body = $("movements").tBodies[0];
    if (more) body.append(...rows);
    else fillRows("movements", rows, "No movements yet: update to read them.");
    const shown = body.querySelectorAll("tr:not(.empty)").length;
    $("movements-count").textContent = `${shown}${page.next_cursor ? "+" : ""}`;
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
