// The selected customer's accounts (balances totalled per currency) and movements (filtered
// by account and dates, exported as CSV, OFX or JSON), as the API stores them.

import { api, customerPath, download } from "./api.js";
import { $, badge, cell, degrade, el, fillRows, load, money, note, whenCell } from "./dom.js";
import { count, moneyText, totalsByCurrency } from "./format.js";

const MOVEMENTS_PAGE = 25;

let active = null; // the selected customer whose ledger is shown ({ customer, cursor, filters })

export function initLedger() {
  $("movement-filters").addEventListener("submit", (event) => {
    event.preventDefault();
    if (!active) return;
    active.filters = {
      account: $("filter-account").value, since: $("filter-since").value, until: $("filter-until").value,
    };
    const selected = active;
    loadMovements(selected, () => active === selected);
  });
  for (const id of ["filter-account", "filter-since", "filter-until"]) {
    $(id).addEventListener("change", () => $("movement-filters").requestSubmit());
  }
  $("filter-clear").addEventListener("click", () => {
    for (const id of ["filter-account", "filter-since", "filter-until"]) $(id).value = "";
    $("movement-filters").requestSubmit();
  });
  $("movements-more").addEventListener("click", () => {
    const selected = active;
    if (selected) loadMovements(selected, () => active === selected, { more: true });
  });
  $("export-csv").addEventListener("click", () => exportMovements("csv"));
  $("export-ofx").addEventListener("click", () => exportMovements("ofx"));
  $("export-json").addEventListener("click", () => exportMovements("json"));
}

/** Empty tables and filters for a customer just picked. */
export function clearLedger() {
  for (const table of ["accounts", "movements"]) fillRows(table, [], "Loading…");
  for (const id of ["filter-account", "filter-since", "filter-until"]) $(id).value = "";
  $("filter-account").replaceChildren(new Option("every account", ""));
  $("totals").replaceChildren();
  for (const panel of ["accounts-panel", "movements-panel"]) {
    $(panel).hidden = false;
    note(panel, null);
  }
}

/** Fill the accounts table for `selected`, unless `current()` says the user moved on. */
export async function loadAccounts(selected, current) {
  await load("accounts-panel", async () => {
    const accounts = await api(customerPath(selected.customer, "accounts"));
    if (!current()) return;
    $("accounts-count").textContent = count(accounts.length);
    fillRows("accounts", accounts.map(accountRow), "No accounts yet: update to read them.");
    $("totals").replaceChildren(...totalsByCurrency(accounts).map(([currency, total, n]) =>
      el("div", { className: "total", title: `${n} account${n === 1 ? "" : "s"}` },
        el("span", { className: "label", text: `Total ${currency}` }),
        el("span", { className: `value${total.startsWith("-") ? " negative" : ""}`, text: moneyText(total, currency) }))));
    accountOptions(accounts);
  });
}

function accountOptions(accounts) {
  const chosen = $("filter-account").value;
  // The API filters by IBAN or by the bank's reference; a reference may be another bank's too
  // (the API's filter then keeps both: the option says so).
  const options = accounts.map((account) => {
    const id = account.iban || account.bank_ref;
    const shown = account.iban || account.number || account.bank_ref;
    const alike = account.iban ? [] : accounts.filter((other) => other !== account
      && (other.bank_ref === account.bank_ref || other.iban === account.bank_ref));
    const also = alike.length ? ` (also ${alike.map((o) => `${o.bank}'s ${o.bank_ref}`).join(", ")})` : "";
    return new Option(`${account.bank} · ${account.alias || account.bank_ref} · ${shown}${also}`, id);
  });
  $("filter-account").replaceChildren(new Option("every account", ""), ...options);
  $("filter-account").value = options.some((o) => o.value === chosen) ? chosen : "";
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
    whenCell(account.updated_at),
  );
}

function filterQuery(filters) {
  const query = new URLSearchParams();
  if (filters.account) query.append("account", filters.account);
  if (filters.since) query.set("since", filters.since);
  if (filters.until) query.set("until", filters.until);
  return query;
}

/** The newest page of movements; with `more`, the next page (by `selected.cursor`) appended. */
export async function loadMovements(selected, current, { more = false } = {}) {
  active = selected;
  selected.movementsAsked = (selected.movementsAsked ?? 0) + 1;
  const asked = selected.movementsAsked;
  await load("movements-panel", async () => {
    const query = filterQuery(selected.filters);
    query.set("limit", String(MOVEMENTS_PAGE));
    if (more && selected.cursor) query.set("cursor", selected.cursor);
    const page = await api(`${customerPath(selected.customer, "movements")}?${query}`);
    // Filters changed quickly: only the answer to the last ask is shown.
    if (!current() || asked !== selected.movementsAsked) return;
    selected.cursor = page.next_cursor;
    const rows = page.movements.map(movementRow);
    const body = $("movements").tBodies[0];
    const filtered = [...filterQuery(selected.filters).keys()].length > 0;
    if (more) body.append(...rows);
    else fillRows("movements", rows, filtered ? "No movement matches these filters." : "No movements yet: update to read them.");
    const shown = body.querySelectorAll("tr:not(.empty)").length;
    $("movements-count").textContent = `${count(shown)}${page.next_cursor ? "+" : ""}`;
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

// The file the API makes, with the filters shown (not the page: every movement that matches).
async function exportMovements(format) {
  if (!active) return;
  const query = filterQuery(active.filters);
  query.set("format", format);
  try {
    await download(`${customerPath(active.customer, "movements", "export")}?${query}`,
      `${active.customer}-movements.${format}`);
    note("movements-panel", null);
  } catch (error) {
    degrade("movements-panel", error);
  }
}
