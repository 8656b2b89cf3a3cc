// One modal dialog for every form and confirmation of the page (add, rename, change a
// password, erase). It stays open until the API accepts: a refusal is shown in it, in the
// API's words, and the user may correct or cancel.

import { $, el, reason, say } from "./dom.js";

let current = null;

/**
 * Open the dialog. `fields`: [{ name, label, type, value, autocomplete, placeholder, list,
 * optional, options, readonly }] (`type` "checkboxes" with `options`: the values checked;
 * "textarea": several lines). `action(values)` is awaited on submit and closes the dialog once
 * it resolves; a function it returns is called after (to show what was made, once). A password
 * field is cleared whatever happens: what was typed never stays in the page.
 */
export function openDialog({
  title, message = "", fields = [], submit, danger = false, cancel = "Cancel", action,
}) {
  const dialog = $("dialog");
  current = { action, fields };
  $("dialog-title").textContent = title;
  $("dialog-message").textContent = message;
  $("dialog-message").hidden = !message;
  $("dialog-fields").replaceChildren(...fields.map(field));
  $("dialog-submit").textContent = submit;
  $("dialog-submit").className = `button ${danger ? "danger-solid" : "primary"}`;
  $("dialog-submit").disabled = false;
  $("dialog-cancel").textContent = cancel;
  $("dialog-cancel").hidden = cancel === null;
  say("dialog-error", null);
  dialog.showModal();
  const first = $("dialog-fields").querySelector("input:not([readonly]), textarea");
  (first ?? $("dialog-submit")).focus();
}

function field(spec) {
  const { name, label, type = "text", value = "", autocomplete = "off", placeholder = "" } = spec;
  if (type === "checkboxes") {
    const boxes = spec.options.map(([option, text]) => {
      const box = Object.assign(el("input"), { type: "checkbox", name, value: option });
      box.checked = (spec.value ?? []).includes(option);
      return el("label", { className: "check" }, box, el("span", { text }));
    });
    return el("fieldset", { className: "checks" }, el("legend", { text: label }), ...boxes);
  }
  const input = el(type === "textarea" ? "textarea" : "input");
  if (type !== "textarea") input.type = type;
  Object.assign(input, { name, value, autocomplete, placeholder, required: !spec.optional });
  input.id = `dialog-${name}`;
  input.spellcheck = false;
  input.readOnly = Boolean(spec.readonly);
  if (spec.list) {
    const options = el("datalist", {}, ...spec.list.map((option) => Object.assign(el("option"), { value: option })));
    options.id = `dialog-${name}-list`;
    input.setAttribute("list", options.id);
    return el("label", {}, el("span", { text: label }), input, options);
  }
  return el("label", {}, el("span", { text: label }), input);
}

function valuesOf(fields) {
  const values = {};
  for (const spec of fields) {
    const inputs = [...$("dialog-fields").querySelectorAll(`[name="${CSS.escape(spec.name)}"]`)];
    values[spec.name] = spec.type === "checkboxes"
      ? inputs.filter((box) => box.checked).map((box) => box.value)
      : inputs[0]?.value ?? "";
  }
  return values;
}

function close() {
  for (const input of $("dialog-fields").querySelectorAll("input, textarea")) input.value = "";
  current = null;
  $("dialog").close();
}

async function submitted(event) {
  event.preventDefault();
  if (!current) return;
  const { action, fields } = current;
  $("dialog-submit").disabled = true;
  let after = null;
  try {
    after = await action(valuesOf(fields));
  } catch (error) {
    say("dialog-error", reason(error));
    for (const input of $("dialog-fields").querySelectorAll("input[type=password]")) input.value = "";
    $("dialog-submit").disabled = false;
    return;
  }
  close();
  if (typeof after === "function") after();
}

export function initDialog() {
  $("dialog-form").addEventListener("submit", submitted);
  $("dialog-cancel").addEventListener("click", close);
  $("dialog").addEventListener("cancel", (event) => {
    event.preventDefault(); // Escape: the same as Cancel (the fields are cleared)
    close();
  });
}
