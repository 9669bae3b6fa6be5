# kok_credentials: saves what a run left in its writable inventory to the cluster's Secrets.
#
# Run by kok's entry script when the pod ends, whatever the run's outcome. Files the run created or changed
# in <inventory>/credentials (compared with the copy restored from the Secret before the run) are merged
# into Secret $KOK_CREDENTIALS_SECRET, one key per file; <inventory>/artifacts/admin.conf, when the run left
# one that differs from what Secret $KOK_KUBECONFIG_SECRET holds, becomes that Secret's key "value" and is
# noted in the run's summary. It talks to the API server with the pod's service account (or to
# $KOK_API_URL, which the local runner sets) and prints file and Secret names, never their content.
import base64
import json
import os
import re
import ssl
import sys
import urllib.error
import urllib.request

SA = "/var/run/secrets/kubernetes.io/serviceaccount"
KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def endpoint():
    url = os.environ.get("KOK_API_URL")
    if not url:
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        if not host:
            raise RuntimeError("no API server: neither KOK_API_URL nor KUBERNETES_SERVICE_HOST is set")
        if ":" in host:
            host = "[%s]" % host
        url = "https://%s:%s" % (host, os.environ.get("KUBERNETES_SERVICE_PORT", "443"))
    headers = {"Accept": "application/json"}
    token = os.environ.get("KOK_API_TOKEN_FILE", SA + "/token")
    if os.path.exists(token):
        with open(token, encoding="utf-8") as f:
            headers["Authorization"] = "Bearer " + f.read().strip()
    context = None
    if url.startswith("https://"):
        ca = os.environ.get("KOK_API_CA_FILE", SA + "/ca.crt")
        context = ssl.create_default_context(cafile=ca if os.path.exists(ca) else None)
    return url.rstrip("/"), headers, context


def call(method, path, body=None):
    url, headers, context = endpoint()
    data = None
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        headers["Content-Type"] = "application/merge-patch+json"
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, context=context, timeout=30) as resp:
            return json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        raise RuntimeError("%s %s answered %s %s" % (method, path, e.code, e.reason)) from None
    except urllib.error.URLError as e:
        raise RuntimeError("%s %s failed: %s" % (method, path, e.reason)) from None


def files(directory):
    out = {}
    if not directory or not os.path.isdir(directory):
        return out
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.startswith(".") or not os.path.isfile(path):
            continue
        if not KEY.match(name):
            print("kok: credentials/%r is not saved: a Secret key takes letters, digits, '-', '_' and '.'" % name,
                  file=sys.stderr)
            continue
        with open(path, "rb") as f:
            out[name] = f.read()
    return out


def secret_path(namespace, name):
    return "/api/v1/namespaces/%s/secrets/%s" % (namespace, name)


def encode(data):
    return base64.b64encode(data).decode("ascii")


def note_kubeconfig(name):
    path = os.environ.get("KOK_SUMMARY_FILE")
    if not path:
        return
    try:
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
    except (OSError, ValueError):
        summary = {}
    summary["kubeconfig"] = name
    with open(path, "w", encoding="utf-8") as f:
        json.dump(summary, f, separators=(",", ":"), sort_keys=True)


def main():
    namespace = os.environ["KOK_NAMESPACE"]
    inventory = os.environ["KOK_INVENTORY"]
    credentials = os.environ.get("KOK_CREDENTIALS_SECRET")
    if credentials:
        before = files(os.environ.get("KOK_CREDENTIALS_DIR"))
        after = files(os.path.join(inventory, "credentials"))
        changed = {k: v for k, v in after.items() if before.get(k) != v}
        if changed:
            call("PATCH", secret_path(namespace, credentials),
                 {"data": {k: encode(v) for k, v in changed.items()}})
            print("kok: saved credentials/%s to Secret %s" % (", credentials/".join(sorted(changed)), credentials),
                  file=sys.stderr)
    kubeconfig = os.environ.get("KOK_KUBECONFIG_SECRET")
    admin = os.path.join(inventory, "artifacts", "admin.conf")
    if kubeconfig and os.path.isfile(admin):
        with open(admin, "rb") as f:
            content = f.read()
        current = call("GET", secret_path(namespace, kubeconfig)).get("data") or {}
        if current.get("value") != encode(content):
            call("PATCH", secret_path(namespace, kubeconfig), {"data": {"value": encode(content)}})
            note_kubeconfig(kubeconfig)
            print("kok: saved artifacts/admin.conf to Secret %s (key value)" % kubeconfig, file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, KeyError, OSError) as e:
        print("saving the run's credentials failed: %s" % e, file=sys.stderr)
        sys.exit(1)
