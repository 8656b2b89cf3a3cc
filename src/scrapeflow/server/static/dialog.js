// One modal dialog for every form and confirmation of the page (add, rename, change a
// password, erase). It stays open until the API accepts: a refusal is shown in it, in the
// API's words, and the user may correct or cancel.

import { $, el, reason, say } from "./dom.js";

let current = null;

/**
 * Open the dialog. `fields`: [{ name, label, type, value, autocomplete, placeholder, list }];
 * `action(values)` is awaited on submit, and closes the dialog once it resolves. A password
 * field is cleared whatever happens: what was typed never stays in the page.
 */
export function openDialog({ title, message = "", fields = [], submit, danger = false, action }) {
  const dialog = $("dialog");
  current = { action };
  $("dialog-title").textContent = title;
  $("dialog-message").textContent = message;
  $("dialog-message").hidden = !message;
  $("dialog-fields").replaceChildren(...fields.map(field));
  $("dialog-submit").textContent = submit;
  $("dialog-submit").className = `button ${danger ? "danger-solid" : "primary"}`;
  $("dialog-submit").disabled = false;
  say("dialog-error", null);
  dialog.showModal();
  const first = $("dialog-fields").querySelector("input");
  (first ?? $("dialog-cancel")).focus();
}

function field({ name, label, type = "text", value = "", autocomplete = "off", placeholder = "", list }) {
  const input = el("input");
  Object.assign(input, { name, type, value, autocomplete, placeholder, required: true });
  input.id = `dialog-${name}`;
  input.spellcheck = false;
  if (list) {
    const options = el("datalist", {}, ...list.map((option) => Object.assign(el("option"), { value: option })));
    options.id = `dialog-${name}-list`;
    input.setAttribute("list", options.id);
    return el("label", {}, el("span", { text: label }), input, options);
  }
  return el("label", {}, el("span", { text: label }), input);
}

function close() {
  for (const input of $("dialog-fields").querySelectorAll("input")) input.value = "";
  current = null;
  $("dialog").close();
}

async function submitted(event) {
  event.preventDefault();
  if (!current) return;
  const values = {};
  for (const input of $("dialog-fields").querySelectorAll("input")) values[input.name] = input.value;
  const { action } = current;
  $("dialog-submit").disabled = true;
  try {
    await action(values);
    close();
  } catch (error) {
    say("dialog-error", reason(error));
    for (const input of $("dialog-fields").querySelectorAll("input[type=password]")) input.value = "";
  } finally {
    $("dialog-submit").disabled = false;
  }
}

export function initDialog() {
  $("dialog-form").addEventListener("submit", submitted);
  $("dialog-cancel").addEventListener("click", close);
  $("dialog").addEventListener("cancel", (event) => {
    event.preventDefault(); // Escape: the same as Cancel (the fields are cleared)
    close();
  });
}
