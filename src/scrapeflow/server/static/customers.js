// The customer list: a page at a time, searched and filtered by the API (it may hold tens of
// thousands: the page never asks for more than one page), with how each customer's last
// refresh went, and the counts per outcome as tiles and filter chips.

import { api } from "./api.js";
import { openDialog } from "./dialog.js";
import { $, badge, el, load } from "./dom.js";
import { count, when } from "./format.js";

const PAGE = 50;
const SEARCH_DELAY_MS = 300;

/** How each outcome reads, in the order the tiles and chips show them. */
export const OUTCOMES = {
  needs_action: "needs action", failed: "failed", partial: "partly updated",
  succeeded: "all updated", none: "never refreshed",
};

// What is listed: the search, the outcomes kept, and the cursors of the pages seen so far
// (the API gives a "next" cursor only: Back goes down this stack).
const list = {
  q: "", outcomes: new Set(), cursors: [null], index: 0, selected: null,
  request: null, onPick: () => {},
};

/** Wire the list's controls; `onPick(id, name)` opens a customer. */
export function initCustomers({ onPick }) {
  list.onPick = onPick;
  let typing = null;
  $("customer-search").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      list.q = $("customer-search").value.trim();
      firstPage();
    }, SEARCH_DELAY_MS);
  });
  $("customers-next").addEventListener("click", () => {
    if (!list.cursors[list.index + 1]) return;
    list.index += 1;
    loadCustomers();
  });
  $("customers-back").addEventListener("click", () => {
    if (list.index === 0) return;
    list.index -= 1;
    loadCustomers();
  });
  $("customer-add").addEventListener("click", addCustomer);
}

function firstPage() {
  list.cursors = [null];
  list.index = 0;
  loadCustomers();
}

/** Keep only customers whose last refresh ended `outcome` (null: every customer). */
export function filterBy(outcome) {
  list.outcomes = new Set(outcome ? [outcome] : []);
  list.q = "";
  $("customer-search").value = "";
  firstPage();
}

function toggle(outcome) {
  if (list.outcomes.has(outcome)) list.outcomes.delete(outcome);
  else list.outcomes.add(outcome);
  firstPage();
}

/** The current page again (after a change), or the first page of the current filters. */
export async function loadCustomers() {
  list.request?.abort();
  const request = new AbortController();
  list.request = request;
  await load("customers-panel", async () => {
    const query = new URLSearchParams({ limit: String(PAGE) });
    if (list.q) query.set("q", list.q);
    for (const outcome of list.outcomes) query.append("outcome", outcome);
    const cursor = list.cursors[list.index];
    if (cursor) query.set("cursor", cursor);
    const page = await api(`/v1/customers?${query}`, { signal: request.signal });
    if (list.request !== request) return;
    list.cursors[list.index + 1] = page.next_cursor;
    list.cursors.length = list.index + 2;
    render(page);
  });
}

function render(page) {
  const first = list.index * PAGE;
  const shown = page.customers.length;
  $("customers-range").textContent = shown
    ? `${count(first + 1)}–${count(first + shown)} of ${count(page.total)}`
    : `0 of ${count(page.total)}`;
  $("customers-back").disabled = list.index === 0;
  $("customers-next").disabled = !page.next_cursor;
  const items = page.customers.map((customer) => el("li", {}, customerButton(customer)));
  if (items.length === 0) {
    const filtered = list.q || list.outcomes.size;
    items.push(el("li", { className: "muted empty", text: filtered ? "No customer matches." : "No customers yet." }));
  }
  $("customers").replaceChildren(...items);
  renderChips(page.outcomes);
  if (!list.q) renderTiles(page.outcomes);
}

function customerButton(customer) {
  const outcome = customer.outcome ?? "none";
  const state = customer.state === "in_progress"
    ? badge("in_progress", "updating")
    : badge(outcome, OUTCOMES[outcome]);
  const refreshed = customer.last_refresh_at
    ? `refreshed ${when(customer.last_refresh_at)}` : "never refreshed";
  const button = el(
    "button",
    { className: `outcome-${outcome}` },
    el("span", { className: "who" },
      el("span", { className: "name", text: customer.name || customer.id }),
      el("span", { className: "id", text: customer.id }),
      el("span", { className: "refreshed", text: refreshed })),
    state,
  );
  button.type = "button";
  button.dataset.customer = customer.id;
  button.dataset.outcome = outcome;
  button.setAttribute("aria-current", String(list.selected === customer.id));
  button.addEventListener("click", () => list.onPick(customer.id, customer.name));
  return button;
}

/** Mark `customer` as the one open (null: none). */
export function markSelected(customer) {
  list.selected = customer;
  for (const button of $("customers").querySelectorAll("button")) {
    button.setAttribute("aria-current", String(button.dataset.customer === customer));
  }
}

function renderChips(outcomes) {
  const all = Object.values(outcomes).reduce((a, b) => a + b, 0);
  const chip = (outcome, label, n, onClick) => {
    const node = el("button", { className: `chip outcome-${outcome ?? "all"}` },
      el("span", { text: label }), el("span", { className: "n", text: count(n) }));
    node.type = "button";
    node.dataset.outcome = outcome ?? "all";
    const pressed = outcome ? list.outcomes.has(outcome) : list.outcomes.size === 0;
    node.setAttribute("aria-pressed", String(pressed));
    node.addEventListener("click", onClick);
    return node;
  };
  $("outcome-chips").replaceChildren(
    chip(null, "all outcomes", all, () => { list.outcomes.clear(); firstPage(); }),
    ...Object.entries(OUTCOMES).map(([outcome, label]) =>
      chip(outcome, label, outcomes[outcome] ?? 0, () => toggle(outcome))),
  );
}

function renderTiles(outcomes) {
  const all = Object.values(outcomes).reduce((a, b) => a + b, 0);
  const tile = (outcome, label, n) => {
    const node = el("button", { className: `tile outcome-${outcome ?? "all"}` },
      el("div", { className: "label", text: label }),
      el("div", { className: "value", text: count(n) }));
    node.type = "button";
    node.dataset.outcome = outcome ?? "all";
    node.addEventListener("click", () => filterBy(outcome));
    return node;
  };
  $("outcome-tiles").replaceChildren(
    tile(null, "customers", all),
    ...Object.entries(OUTCOMES).map(([outcome, label]) => tile(outcome, label, outcomes[outcome] ?? 0)),
  );
  $("overview-panel").hidden = false;
}

function addCustomer() {
  openDialog({
    title: "Add a customer",
    message: "Its id is how the API names it (1 to 64 characters, no /); the name is for people.",
    fields: [
      { name: "id", label: "Id", placeholder: "ana" },
      { name: "name", label: "Name", placeholder: "Ana Pérez" },
    ],
    submit: "Add customer",
    action: async ({ id, name }) => {
      const made = await api("/v1/customers", { method: "POST", body: { id: id.trim(), name: name.trim() } });
      $("customer-search").value = made.id;
      list.q = made.id;
      firstPage();
      list.onPick(made.id, made.name);
    },
  });
}
