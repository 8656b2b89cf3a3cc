// A server-sent event stream read with fetch(): EventSource cannot send an Authorization
// header. After a dropped connection it reconnects with Last-Event-ID, and the API then sends
// exactly what was missed.

import { ApiError, authHeaders, noteRefusal, problemOf } from "./api.js";

const STREAM_SILENCE_MS = 45000; // the API pings every 15 s: three missed pings, reconnect
const RECONNECT_MS = [1000, 2000, 5000, 10000, 15000];

/**
 * Follow `url` until `signal` aborts, calling `onEvent({id, type, data})` for each event and
 * `onState(state, text)` as the connection goes "live" or "reconnecting". A 4xx answer (but
 * 429) ends it, with `onRefused(error)`; anything else is retried, backing off.
 */
export async function follow(url, { signal, onEvent, onState, onRefused }) {
  let lastId = null;
  let attempt = 0;
  while (!signal.aborted) {
    try {
      await readStream(url, lastId, signal, onState, (event) => {
        lastId = event.id ?? lastId;
        attempt = 0;
        onEvent(event);
      });
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof ApiError && error.status !== 429 && error.status < 500) {
        noteRefusal(error); // a 401: the key was revoked while the page was open
        onRefused(error);
        return;
      }
    }
    if (signal.aborted) return;
    onState("reconnecting", "reconnecting…");
    await sleep(RECONNECT_MS[Math.min(attempt, RECONNECT_MS.length - 1)], signal);
    attempt += 1;
  }
}

async function readStream(url, lastId, signal, onState, onMessage) {
  const connection = new AbortController();
  const stop = () => connection.abort();
  signal.addEventListener("abort", stop, { once: true });
  let silence = setTimeout(stop, STREAM_SILENCE_MS);
  try {
    const headers = authHeaders({ Accept: "text/event-stream" });
    if (lastId !== null) headers["Last-Event-ID"] = lastId;
    const response = await fetch(url, {
      headers, signal: connection.signal, cache: "no-store", credentials: "omit",
    });
    if (!response.ok) throw await problemOf(response);
    onState("live", "live");
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    const parser = sseParser(onMessage);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      clearTimeout(silence);
      silence = setTimeout(stop, STREAM_SILENCE_MS);
      parser(value);
    }
  } finally {
    clearTimeout(silence);
    signal.removeEventListener("abort", stop);
  }
}

// A text/event-stream parser (the WHATWG rules): lines end with CRLF, LF or CR; a blank line
// dispatches the event; ":" starts a comment (the API's keep-alive pings).
export function sseParser(onMessage) {
  let buffer = "";
  let event = { id: null, type: "message", data: [] };
  const dispatch = () => {
    if (event.data.length > 0) {
      onMessage({ id: event.id, type: event.type, data: event.data.join("\n") });
    }
    event = { id: event.id, type: "message", data: [] };
  };
  const field = (line) => {
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (name === "event") event.type = value;
    else if (name === "data") event.data.push(value);
    else if (name === "id" && !value.includes("\0")) event.id = value;
  };
  return (chunk) => {
    buffer += chunk;
    // A CR at the very end may be the first half of a CRLF: wait for the next chunk.
    const lines = buffer.split(/\r\n|\r(?!$)|\n/);
    buffer = lines.pop();
    for (const line of lines) {
      if (line === "") dispatch();
      else if (!line.startsWith(":")) field(line);
    }
  };
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}
