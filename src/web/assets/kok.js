// kok's web view: live log lines by Server-Sent Events. The pages work without this script.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const log = document.querySelector("pre[data-stream]");
  if (!log || !window.EventSource) return;
  const source = new EventSource(log.dataset.stream);
  source.addEventListener("message", (event) => {
    const atEnd = window.innerHeight + window.scrollY >= document.body.offsetHeight - 4;
    log.append(event.data + "\n");
    if (atEnd) window.scrollTo(0, document.body.scrollHeight);
  });
  // The run finished: reload once for its per-host table and whole log.
  source.addEventListener("end", () => {
    source.close();
    window.location.reload();
  });
});
