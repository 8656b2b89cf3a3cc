// The scrapeflow dashboard: plain ES modules, no framework, no build step.
//
// The page holds no data. Everything comes from the JSON API (api.js), sent with the API key
// the user pastes. Each panel loads and fails alone: customers.js (the list, a page at a time),
// customer.js (the selected customer, its banks in accesses.js, live progress in live.js),
// ledger.js (its accounts and movements), jobs.js, service.js (the service's numbers and
// daily schedule), admin.js (keys and webhooks); dialog.js asks before a change. This module
// signs in and out and keeps the panels fresh.

import { initAdmin } from "./admin.js";
import { ApiError, KEY_STORAGE, api, onKeyRefused, session } from "./api.js";
import { forgetSelection, initCustomer, pollSelection, selectCustomer } from "./customer.js";
import { initCustomers, loadCustomers } from "./customers.js";
import { initDialog } from "./dialog.js";
import { $ } from "./dom.js";
import { initJobs, loadJobs } from "./jobs.js";
import { initLedger } from "./ledger.js";
import { loadSchedule, loadStats } from "./service.js";

const POLL_MS = 15000;
let pollTimer = null;

async function signIn(key) {
  session.key = key;
  $("login-submit").disabled = true;
  try {
    await api("/v1/customers?limit=1");
  } catch (error) {
    // A valid key without the read scope still signs in: its panels say what it lacks.
    if (!(error instanceof ApiError) || error.status === 401 || error.status === 429) {
      session.key = null;
      sessionStorage.removeItem(KEY_STORAGE);
      const unreachable = `could not reach the service (${error.message})`;
      showLogin(error instanceof ApiError ? error.detail : unreachable);
      return;
    }
  } finally {
    $("login-submit").disabled = false;
  }
  sessionStorage.setItem(KEY_STORAGE, key);
  showDashboard();
}

function signOut(message = null) {
  sessionStorage.removeItem(KEY_STORAGE);
  session.key = null;
  forgetSelection();
  clearInterval(pollTimer);
  if (message) sessionStorage.setItem(`${KEY_STORAGE}.message`, message);
  // A fresh page: nothing of the previous key's data stays in memory or in the DOM.
  window.location.replace("/");
}

function showLogin(message = null) {
  $("dashboard-view").hidden = true;
  $("session").hidden = true;
  $("login-view").hidden = false;
  $("login-error").textContent = message ?? "";
  $("login-error").hidden = !message;
  $("api-key").value = "";
  $("api-key").focus();
}

function showDashboard() {
  $("login-view").hidden = true;
  $("session").hidden = false;
  $("dashboard-view").hidden = false;
  loadCustomers();
  loadJobs();
  loadSchedule();
  loadStats();
  pollTimer = setInterval(poll, POLL_MS);
}

function poll() {
  if (document.hidden) return;
  loadJobs();
  loadStats();
  loadSchedule();
  loadCustomers();
  pollSelection();
}

function start() {
  // Signing in, a 401 is the login form's message; once in, it means the key was revoked.
  onKeyRefused((detail) => {
    if (!$("dashboard-view").hidden) signOut(detail);
  });
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (key) signIn(key);
  });
  // Disabled in the page until now: a form sent before this script ran would reload the page
  // and lose what was typed (the key has no name, so it never goes into a URL).
  $("login-submit").disabled = false;
  $("logout").addEventListener("click", () => signOut());
  initDialog();
  initCustomers({ onPick: selectCustomer });
  initCustomer();
  initLedger();
  initAdmin();
  initJobs();

  const message = sessionStorage.getItem(`${KEY_STORAGE}.message`);
  sessionStorage.removeItem(`${KEY_STORAGE}.message`);
  const key = sessionStorage.getItem(KEY_STORAGE);
  if (key) signIn(key);
  else showLogin(message);
}

start();
