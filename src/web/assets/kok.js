// kok's web view: live updates by Server-Sent Events. The pages work without this script.
"use strict";

// A running operation's log: new lines are appended; when the run ends the page is fetched again.
function followLog(log) {
  const source = new EventSource(log.dataset.stream);
  window.addEventListener("pagehide", () => source.close());
  source.addEventListener("message", (event) => {
    const atEnd = window.innerHeight + window.scrollY >= document.body.offsetHeight - 4;
    log.append(event.data + "\n");
    if (atEnd) window.scrollTo(0, document.body.scrollHeight);
  });
  source.addEventListener("end", () => {
    source.close();
    window.location.reload();
  });
}

// Any other page: when what it shows changes, its <main> is replaced by a fresh copy, in place.
function followChanges(version) {
  const source = new EventSource("/events?v=" + encodeURIComponent(version));
  window.addEventListener("pagehide", () => source.close());
  let fetching = false;
  source.addEventListener("changed", async () => {
    if (fetching) return;
    fetching = true;
    try {
      const response = await fetch(window.location.href, { headers: { Accept: "text/html" } });
      if (!response.ok) return;
      const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
      const main = document.querySelector("main");
      const next = fresh.querySelector("main");
      const focused = document.activeElement && document.activeElement.closest("form");
      if (main && next && !focused) main.replaceChildren(...next.childNodes);
    } finally {
      fetching = false;
    }
  });
}

// Elapsed times of running operations (`data-t`: the start, in seconds since 1970) count on between
// updates: 3m12s, 1h4m, 2d3h.
function duration(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const [d, h, m] = [Math.floor(s / 86400), Math.floor((s % 86400) / 3600), Math.floor((s % 3600) / 60)];
  if (d > 0) return d + "d" + h + "h";
  if (h > 0) return h + "h" + m + "m";
  if (m > 0) return m + "m" + (s % 60) + "s";
  return s + "s";
}

function tickElapsed() {
  for (const el of document.querySelectorAll("[data-t]")) {
    const since = Number(el.dataset.t);
    if (since > 0) el.textContent = duration(Date.now() / 1000 - since);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  window.setInterval(tickElapsed, 1000);
  if (!window.EventSource) return;
  const log = document.querySelector("pre[data-stream]");
  if (log) {
    followLog(log);
  } else if (document.body.dataset.version) {
    followChanges(document.body.dataset.version);
  }
});
