# kok_summary: records what ansible did in a kok Job, for its termination message.
#
# Written into the pod by kok's entry script and found through ANSIBLE_CALLBACK_PLUGINS; it needs no
# enabling (CALLBACK_NEEDS_ENABLED is False) and leaves the output of ansible as it is. Each
# ansible-playbook run of the pod (hooks and action) adds its counts to the JSON file named by
# KOK_SUMMARY_FILE; the first failed task or unreachable host is kept with the step (KOK_STEP) it
# happened in, and a file beside it (".failed") marks that a failure was recorded; the whole record is kept
# in a third (".state") between runs. The file is kept
# under 4000 bytes: messages are cut, then per-host counts are left out (the totals stay).
from __future__ import annotations

import json
import os

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: kok_summary
type: aggregate
short_description: records per-host counts and the first failure of a kok Job
description: Writes a JSON summary to the file named by KOK_SUMMARY_FILE.
"""

LIMIT = 4000
MESSAGE_LIMIT = 1000
COUNTS = ("ok", "changed", "failed", "unreachable", "skipped")


def _cut(text, limit):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "kok_summary"
    CALLBACK_NEEDS_ENABLED = False
    CALLBACK_NEEDS_WHITELIST = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._path = os.environ.get("KOK_SUMMARY_FILE")
        self._play = None
        self._failure = None

    def v2_playbook_on_play_start(self, play):
        self._play = play.get_name()

    def _first(self, result, unreachable):
        if self._failure is not None:
            return
        res = result._result if isinstance(result._result, dict) else {}
        message = res.get("msg") or res.get("stderr") or res.get("message") or ""
        if not message and res.get("rc") is not None:
            message = "exit code %s" % res.get("rc")
        self._failure = {
            "step": os.environ.get("KOK_STEP") or None,
            "play": self._play or None,
            "task": result._task.get_name() if result._task is not None else None,
            "host": result._host.get_name() if result._host is not None else None,
            "unreachable": unreachable,
            "message": _cut(message, MESSAGE_LIMIT),
        }

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if not ignore_errors:
            self._first(result, False)

    def v2_runner_on_unreachable(self, result):
        self._first(result, True)

    def v2_playbook_on_stats(self, stats):
        if not self._path:
            return
        # The whole record lives in a state file; the summary file gets the part that fits.
        try:
            with open(self._path + ".state", encoding="utf-8") as f:
                summary = json.load(f)
        except (OSError, ValueError):
            summary = {}
        hosts = summary.get("hosts") or {}
        for host in sorted(stats.processed.keys()):
            s = stats.summarize(host)
            counts = hosts.setdefault(host, dict.fromkeys(COUNTS, 0))
            counts["ok"] += s.get("ok", 0)
            counts["changed"] += s.get("changed", 0)
            counts["failed"] += s.get("failures", 0)
            counts["unreachable"] += s.get("unreachable", 0)
            counts["skipped"] += s.get("skipped", 0)
        total = dict.fromkeys(COUNTS, 0)
        for counts in hosts.values():
            for key in COUNTS:
                total[key] += counts.get(key, 0)
        summary["hosts"] = hosts
        summary["total"] = total
        summary["hostCount"] = len(hosts)
        if self._failure is not None and not summary.get("failure"):
            summary["failure"] = {k: v for k, v in self._failure.items() if v not in (None, False)}
            open(self._path + ".failed", "w").close()
        with open(self._path + ".state", "w", encoding="utf-8") as f:
            json.dump(summary, f)
        summary = json.loads(json.dumps(summary))
        text = json.dumps(summary, separators=(",", ":"), sort_keys=True)
        if len(text.encode("utf-8")) > LIMIT and summary.get("failure"):
            summary["failure"]["message"] = _cut(summary["failure"]["message"], 300)
            text = json.dumps(summary, separators=(",", ":"), sort_keys=True)
        if len(text.encode("utf-8")) > LIMIT:
            # Keep the totals and as many hosts as fit, failed and unreachable ones first.
            ranked = sorted(hosts.items(), key=lambda kv: (-(kv[1]["failed"] + kv[1]["unreachable"]), kv[0]))
            kept = {}
            summary["hosts"] = kept
            for name, counts in ranked:
                kept[name] = counts
                if len(json.dumps(summary, separators=(",", ":")).encode("utf-8")) > LIMIT:
                    del kept[name]
                    break
            text = json.dumps(summary, separators=(",", ":"), sort_keys=True)
        with open(self._path, "w", encoding="utf-8") as f:
            f.write(text)
