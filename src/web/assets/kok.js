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

document.addEventListener("DOMContentLoaded", () => {
  if (!window.EventSource) return;
  const log = document.querySelector("pre[data-stream]");
  if (log) {
    followLog(log);
  } else if (document.body.dataset.version) {
    followChanges(document.body.dataset.version);
  }
});
