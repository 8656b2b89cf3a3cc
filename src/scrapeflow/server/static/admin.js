// The service's keys (scope admin, over every customer) and webhooks (a key's own; an admin's:
// everyone's), each read when its tab is opened: a key that may not see them is told so there.
// A new key's token and a new webhook's secret are shown once, as the API gives them once.

import { api, path } from "./api.js";
import { openDialog } from "./dialog.js";
import { $, badge, button, cell, el, fillRows, load, note, whenCell } from "./dom.js";
import { count } from "./format.js";

const SCOPES = [
  ["read", "read"], ["refresh", "refresh"], ["jobs", "jobs"], ["metrics", "metrics"],
  ["admin", "admin"],
];

export function initAdmin() {
  $("tab-keys").addEventListener("click", () => openTab("keys"));
  $("tab-webhooks").addEventListener("click", () => openTab("webhooks"));
  $("key-new").addEventListener("click", newKey);
  $("webhook-new").addEventListener("click", newWebhook);
}

function openTab(tab) {
  for (const name of ["keys", "webhooks"]) {
    $(`tab-${name}`).setAttribute("aria-pressed", String(name === tab));
    $(`${name}-view`).hidden = name !== tab;
  }
  note("admin-panel", null);
  return tab === "keys" ? loadKeys() : loadWebhooks();
}

// ------------------------------------------------------------------- keys

async function loadKeys() {
  await load("admin-panel", async () => {
    const { keys } = await api("/v1/keys");
    fillRows("keys", keys.map(keyRow), "No keys.");
  });
}

function keyState(key) {
  if (key.revoked) return badge("failed", "revoked");
  if (key.expires_at && Date.parse(key.expires_at) <= Date.now()) return badge("cancelled", "expired");
  return badge("succeeded", "active");
}

function keyRow(key) {
  const active = !key.revoked && !(key.expires_at && Date.parse(key.expires_at) <= Date.now());
  const row = el(
    "tr",
    {},
    cell(el("span", { className: "mono", text: key.id })),
    cell(key.name || "—"),
    cell(key.scopes.join(", ")),
    cell(key.customers.length ? key.customers.join(", ") : "all"),
    whenCell(key.created_at),
    whenCell(key.last_used_at),
    key.expires_at ? whenCell(key.expires_at) : cell("never"),
    cell(keyState(key)),
    el("td", { className: "row-actions" }, ...(active ? [
      button("Rotate", () => rotateKey(key)),
      button("Revoke", () => revokeKey(key), "button small danger"),
    ] : [])),
  );
  row.dataset.key = key.id;
  return row;
}

function showSecret(title, message, label, secret) {
  return () => openDialog({
    title, message, submit: "Done", cancel: null,
    fields: [{ name: "secret", label, value: secret, readonly: true }],
    action: async () => {},
  });
}

function newKey() {
  openDialog({
    title: "New API key",
    message: "Restricted to some customers, it sees and touches only those, whatever its scopes.",
    fields: [
      { name: "name", label: "Name", placeholder: "accounting", optional: true },
      { name: "scopes", label: "Scopes", type: "checkboxes", options: SCOPES, value: ["read"] },
      { name: "customers", label: "Customers (ids, comma-separated; empty: all)", optional: true },
      { name: "expires", label: "Expires (30d, 12h, an ISO time; empty: never)", optional: true },
    ],
    submit: "Create key",
    action: async ({ name, scopes, customers, expires }) => {
      const made = await api("/v1/keys", {
        method: "POST",
        body: {
          name: name.trim(), scopes,
          customers: customers.split(",").map((c) => c.trim()).filter(Boolean),
          expires: expires.trim() || null,
        },
      });
      await loadKeys();
      return showSecret(`Key ${made.key.id} created`,
        "Copy the key now: it is shown this once, and only its hash is kept.", "API key", made.token);
    },
  });
}

function rotateKey(key) {
  openDialog({
    title: `Rotate key ${key.id}${key.name ? ` (${key.name})` : ""}`,
    message: "A new secret for the same key (same id, scopes and customers). The old one keeps "
      + "working for the overlap, then not.",
    fields: [{ name: "overlap", label: "Overlap (1h, 30m, 0)", value: "0" }],
    submit: "Rotate",
    action: async ({ overlap }) => {
      const made = await api(`/v1/keys/${path(key.id)}/rotate`, {
        method: "POST", body: { overlap: overlap.trim() || "0" },
      });
      await loadKeys();
      return showSecret(`Key ${key.id} rotated`, "Copy the new key now: it is shown this once.",
        "API key", made.token);
    },
  });
}

function revokeKey(key) {
  openDialog({
    title: `Revoke key ${key.id}?`,
    message: `Key ${key.id}${key.name ? ` (${key.name})` : ""}, scopes ${key.scopes.join(", ")}, `
      + "stops working within a second: its requests get 401, its event streams close, its "
      + "webhooks get nothing more. It cannot be undone.",
    submit: `Revoke ${key.id}`,
    danger: true,
    action: async () => {
      await api(`/v1/keys/${path(key.id)}`, { method: "DELETE" });
      await loadKeys();
    },
  });
}

// ------------------------------------------------------------------- webhooks

async function loadWebhooks() {
  await load("admin-panel", async () => {
    const hooks = await api("/v1/webhooks");
    fillRows("webhooks", hooks.map(webhookRow), "No webhooks.");
  });
}

function webhookRow(hook) {
  const row = el(
    "tr",
    {},
    cell(el("span", { className: "mono", text: hook.url })),
    cell(hook.events ? hook.events.join(", ") : "every event"),
    cell(el("span", { className: "mono", text: hook.key_id })),
    whenCell(hook.created_at),
    el("td", { className: "row-actions" },
      button("Deliveries", () => loadDeliveries(hook)),
      button("Delete", () => deleteWebhook(hook), "button small danger")),
  );
  row.dataset.webhook = hook.id;
  return row;
}

function newWebhook() {
  openDialog({
    title: "New webhook",
    message: "Every event this key may see is POSTed to the URL, signed with the secret.",
    fields: [
      { name: "url", label: "URL", placeholder: "https://example.org/hooks/scrapeflow" },
      { name: "events", label: "Events (kinds or prefixes, comma-separated; empty: every event)",
        placeholder: "job., bank.all_updated", optional: true },
    ],
    submit: "Create webhook",
    action: async ({ url, events }) => {
      const kinds = events.split(",").map((e) => e.trim()).filter(Boolean);
      const made = await api("/v1/webhooks", {
        method: "POST", body: { url: url.trim(), ...(kinds.length ? { events: kinds } : {}) },
      });
      await loadWebhooks();
      return showSecret("Webhook created",
        "Copy the signing secret now: it is shown this once. Check each delivery's "
        + "Scrapeflow-Signature with it.", "Signing secret", made.secret);
    },
  });
}

function deleteWebhook(hook) {
  openDialog({
    title: "Delete this webhook?",
    message: `Nothing more is sent to ${hook.url}; its delivery log is deleted with it.`,
    submit: "Delete webhook",
    danger: true,
    action: async () => {
      await api(`/v1/webhooks/${path(hook.id)}`, { method: "DELETE" });
      $("deliveries-view").hidden = true;
      await loadWebhooks();
    },
  });
}

async function loadDeliveries(hook) {
  await load("admin-panel", async () => {
    const page = await api(`/v1/webhooks/${path(hook.id)}/deliveries?limit=20`);
    $("deliveries-view").hidden = false;
    $("deliveries-of").textContent = hook.url;
    fillRows("deliveries", page.deliveries.map((d) => el(
      "tr",
      {},
      cell(d.kind),
      whenCell(d.event_at),
      cell(badge(d.state === "delivered" ? "succeeded" : d.state === "failed" ? "failed" : "queued", d.state)),
      cell(count(d.attempts), "num"),
      cell(d.last_status === null ? (d.last_error ?? "—") : String(d.last_status)),
      d.state === "pending" ? whenCell(d.next_attempt_at) : whenCell(d.delivered_at),
    )), "Nothing delivered yet.");
  });
}
