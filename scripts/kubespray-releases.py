#!/usr/bin/env python3
"""Writes src/preflight/releases.json: what kok knows of each kubespray release, read from kubespray's git tags.

Usage:
    .venv/bin/python scripts/kubespray-releases.py KUBESPRAY_GIT_DIR [--from v2.24.0] [--out PATH]

KUBESPRAY_GIT_DIR is a clone of https://github.com/kubernetes-sigs/kubespray (bare is fine) with its tags
fetched. Every tag `vMAJOR.MINOR.PATCH` (no pre-releases) from `--from` on is read with `git show TAG:PATH`
and `git ls-tree`; nothing is checked out. The output is sorted and formatted stably, so running the
script twice on the same repository gives the same bytes, and a new release shows as one added entry.

Per release it records:
  - kube_versions: the Kubernetes versions with a non-zero amd64 `kubeadm` checksum in the release's
    checksums file, normalised to `v1.31.4` and sorted oldest first; `kube_version_prefix` tells how the
    release itself writes them (`v` up to v2.27, empty from v2.28, where checksums also gain `sha256:`);
  - kube_version / kube_version_min_required: the role defaults; a default templated from the checksums
    (`{{ (kubelet_checksums['amd64'] | dict2items)[0].key }}`, from v2.28) is evaluated here the way
    ansible would: the key at that index of the mapping in file order;
  - playbooks: the files at the root and under `playbooks/` that are ansible playbooks;
  - settings: the values the release's assertions accept for kube_network_plugin, container_manager,
    etcd_deployment_type, kube_proxy_mode and dns_mode (a setting without an assertion is left out: the
    release accepts anything) with the setting's default, and the assertions that only hold under a
    condition on another setting;
  - checks: where the assertions kok repeats live (the even etcd count, empty groups, the fact cache for
    `--limit`, the Kubernetes version and its form, `node` for remove_node.yml), what kok needs to repeat
    them (the groups, the group counted when etcd is absent);
  - docs: the two documentation sentences kok quotes (upgrade one tag at a time, the first node);
  - commit: the commit the tag points to.

The script fails loudly when a release moves something it does not know how to read: extend it then,
rather than letting the data go quietly wrong.
"""

import argparse
import json
import re
import subprocess
import sys

import yaml

SETTINGS = ["kube_network_plugin", "container_manager", "etcd_deployment_type", "kube_proxy_mode", "dns_mode"]

CHECKSUMS_PATHS = [
    "roles/kubespray-defaults/defaults/main/checksums.yml",
    "roles/kubespray_defaults/vars/main/checksums.yml",
]
DEFAULTS_PATHS = [
    "roles/kubespray-defaults/defaults/main/main.yml",
    "roles/kubespray_defaults/defaults/main/main.yml",
]
# Where kubespray keeps the assertions about the inventory and the settings.
ASSERT_DIRS = [
    "roles/kubernetes/preinstall/tasks",
    "roles/validate_inventory/tasks",
]
DOCS = {
    "upgrade_one_tag": (["docs/operations/upgrades.md", "docs/upgrades.md"], re.compile(r"by one tag at a")),
    "remove_first_node": (["docs/operations/nodes.md", "docs/nodes.md"], re.compile(r"can't remove the first")),
}
# Task names (as kubespray writes them) of the assertions kok repeats, by kok's name for them.
CHECKS = {
    "control_plane_not_empty": re.compile(r"^Stop if (either )?kube_control_plane (or kube_node )?group is empty$"),
    "etcd_not_empty": re.compile(r"^Stop if etcd group is empty in external etcd mode$"),
    "etcd_odd": re.compile(r"^Stop if even number of etcd hosts$"),
    "limit_fact_cache": re.compile(r"^Stop if any host not in '--limit' does not have a fact cache$"),
    "kube_version_min": re.compile(r"^Stop if unsupported version of Kubernetes$"),
    "kube_version_checksums": re.compile(r"Check if requested Kubernetes are supported$"),
}
TEMPLATED_KEY = re.compile(
    r"^\{\{\s*\((\w+)\['amd64'\]\s*\|\s*dict2items\)\[(-?\d+)\]\.key\s*\}\}$"
)
IN_LIST = re.compile(r"^(\w+) in (\[[^\]]*\])$")
IN_LIST_OR = re.compile(r"^(\w+) in (\[[^\]]*\]) or (\w+) == '([^']*)'$")
WHEN_NOT = re.compile(r"""^(\w+) != ['"]([^'"]*)['"]$""")
RELEASE_TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")


class Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading ansible's `!unsafe` and `!vault` tags as plain strings."""


Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))
Loader.add_constructor("!vault", lambda loader, node: loader.construct_scalar(node))


def load(text):
    return yaml.load(text, Loader=Loader)


class Git:
    def __init__(self, git_dir):
        self.git_dir = git_dir

    def run(self, *args):
        out = subprocess.run(["git", "--git-dir", self.git_dir, *args], capture_output=True, check=True)
        return out.stdout.decode()

    def show(self, tag, path):
        """The file's text at `tag`, or None when the release has no such file."""
        try:
            return self.run("show", f"{tag}:{path}")
        except subprocess.CalledProcessError:
            return None

    def names(self, tag, folder=""):
        """File names (not directories) directly in `folder` at `tag`."""
        out = self.run("ls-tree", f"{tag}:{folder}" if folder else tag)
        names = []
        for line in out.splitlines():
            meta, name = line.split("\t", 1)
            if meta.split()[1] == "blob":
                names.append(name)
        return sorted(names)


def version_key(v):
    return tuple(int(x) for x in v.lstrip("v").split("."))


def normalise(v):
    v = str(v)
    return v if v.startswith("v") else "v" + v


def line_of(text, pattern):
    """1-based line of the first line matching `pattern`, or None."""
    for i, line in enumerate(text.splitlines(), 1):
        if pattern.search(line):
            return i
    return None


def amd64(checksums, name, path):
    table = checksums.get(name, {}).get("amd64")
    if not isinstance(table, dict):
        sys.exit(f"{path}: no {name}.amd64 mapping: extend scripts/kubespray-releases.py")
    return table


def nonzero(value):
    return value not in (0, "0", None, "")


def read_versions(git, tag):
    for path in CHECKSUMS_PATHS:
        text = git.show(tag, path)
        if text is not None:
            checksums = load(text)
            kubeadm = amd64(checksums, "kubeadm_checksums", path)
            keys = [str(k) for k, v in kubeadm.items() if nonzero(v)]
            prefix = "v" if all(k.startswith("v") for k in keys) else ""
            if any(k.startswith("v") for k in keys) and prefix == "":
                sys.exit(f"{tag}:{path}: versions with and without a v: extend scripts/kubespray-releases.py")
            versions = sorted({normalise(k) for k in keys}, key=version_key)
            where = {"path": path, "line": line_of(text, re.compile(r"^kubeadm_checksums:"))}
            return where, prefix, versions, checksums
    sys.exit(f"{tag}: no checksums file in {CHECKSUMS_PATHS}: extend scripts/kubespray-releases.py")


def read_default(git, tag, name, checksums, normalised=True):
    """The default of `name` (literal or templated from the checksums), with where it is written."""
    pattern = re.compile(rf"^{name}:")
    for path in DEFAULTS_PATHS:
        text = git.show(tag, path)
        if text is None:
            continue
        line = line_of(text, pattern)
        if line is None:
            continue
        raw = load(text)[name]
        value = str(raw)
        templated = TEMPLATED_KEY.match(value)
        if templated:
            table, index = templated.group(1), int(templated.group(2))
            keys = list(amd64(checksums, table, "checksums").keys())
            value = str(keys[index])
        elif "{{" in value:
            sys.exit(f"{tag}:{path}:{line}: {name} is a template kok cannot evaluate: {value}")
        entry = {"value": normalise(value) if normalised else value, "path": path, "line": line}
        if templated:
            entry["template"] = str(raw)
        return entry
    sys.exit(f"{tag}: no default for {name} in {DEFAULTS_PATHS}: extend scripts/kubespray-releases.py")


def is_playbook(text):
    try:
        doc = load(text)
    except yaml.YAMLError:
        return False
    if not isinstance(doc, list) or not doc:
        return False
    keys = ("hosts", "import_playbook", "ansible.builtin.import_playbook")
    return all(isinstance(play, dict) and any(k in play for k in keys) for play in doc)


def read_playbooks(git, tag):
    found = []
    for folder in ["", "playbooks"]:
        for name in git.names(tag, folder):
            if not name.endswith((".yml", ".yaml")):
                continue
            path = f"{folder}/{name}" if folder else name
            if is_playbook(git.show(tag, path) or ""):
                found.append(path)
    return sorted(found)


def child(node, *keys):
    """The value node under the first of `keys` in a mapping node, or None."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value in keys:
                return value
    return None


def that_lines(task):
    """The 1-based line of each expression of an assert task's `that`, keyed by the expression."""
    that = child(child(task, "assert", "ansible.builtin.assert"), "that")
    items = that.value if isinstance(that, yaml.SequenceNode) else [that] if that is not None else []
    return {" ".join(str(n.value).split()): n.start_mark.line + 1 for n in items if isinstance(n, yaml.ScalarNode)}


def tasks_with_lines(text):
    """Each task of a tasks file as (line of its `- name`, task mapping, line of each `that` expression),
    blocks flattened."""
    node = yaml.compose(text, Loader=Loader)
    out = []

    def walk(seq):
        if not isinstance(seq, yaml.SequenceNode):
            return
        for item in seq.value:
            if not isinstance(item, yaml.MappingNode):
                continue
            task = Loader("").construct_document(item)
            out.append((item.start_mark.line + 1, task, that_lines(item)))
            for key, value in item.value:
                if key.value in ("block", "rescue", "always"):
                    walk(value)

    walk(node)
    return out


def as_list(value):
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


GROUPS_GET = re.compile(r"groups\.get\(\s*'(\w+)'\s*\)")
GROUPS_GET_ELSE = re.compile(r"groups\.get\('(\w+)', groups\.(\w+)\)")


def located_check(check, task, assertion, where):
    """One of CHECKS as found: where, its `that` and `when`, and what kok needs to repeat it."""
    that = " and ".join(" ".join(str(t).split()) for t in as_list(assertion.get("that")))
    found = {**where, "that": that, "when": [str(w).strip() for w in as_list(task.get("when"))]}
    if check == "control_plane_not_empty":
        groups = [str(g) for g in as_list(task.get("with_items", task.get("loop")))] or GROUPS_GET.findall(that)
        if not groups:
            sys.exit(f"{where['path']}:{where['line']}: no group in {that!r}: extend the script")
        found["groups"] = groups
    if check == "etcd_odd":
        fallback = GROUPS_GET_ELSE.search(that)
        if fallback and fallback.group(1) != "etcd":
            sys.exit(f"{where['path']}:{where['line']}: unknown form {that!r}: extend the script")
        found["fallback_group"] = fallback.group(2) if fallback else None
    return found


def read_assertions(git, tag):
    """Accepted setting values and the located checks, from every tasks file of ASSERT_DIRS."""
    settings, conditional, checks = {}, [], {}
    for folder in ASSERT_DIRS:
        try:
            names = git.names(tag, folder)
        except subprocess.CalledProcessError:
            continue
        for name in names:
            path = f"{folder}/{name}"
            for line, task, lines in tasks_with_lines(git.show(tag, path)):
                assertion = task.get("assert", task.get("ansible.builtin.assert"))
                if not isinstance(assertion, dict):
                    continue
                title = str(task.get("name", ""))
                where = {"task": title, "path": path, "line": line}
                for check, pattern in CHECKS.items():
                    if pattern.search(title):
                        if check in checks:
                            sys.exit(f"{tag}: two tasks match {check}: extend scripts/kubespray-releases.py")
                        checks[check] = located_check(check, task, assertion, where)
                when = [str(w).strip() for w in as_list(task.get("when"))]
                unless = [WHEN_NOT.match(w) for w in when]
                unless = [m for m in unless if m and m.group(1) in SETTINGS]
                for that in as_list(assertion.get("that")):
                    that = " ".join(str(that).split())
                    where = {**where, "line": lines.get(that, line)}
                    if that == "not kube_version.startswith('v')":
                        checks["kube_version_without_v"] = {**where, "that": that}
                    plain, either = IN_LIST.match(that), IN_LIST_OR.match(that)
                    if plain and plain.group(1) in SETTINGS:
                        values = sorted(load(plain.group(2)))
                        if unless:
                            for m in unless:
                                conditional.append(
                                    {"setting": plain.group(1), "values": values,
                                     "unless": {"setting": m.group(1), "value": m.group(2)}, **where})
                        elif plain.group(1) in settings:
                            sys.exit(f"{tag}: two assertions on {plain.group(1)}: extend the script")
                        else:
                            settings[plain.group(1)] = {"values": values, **where}
                    elif either and either.group(1) in SETTINGS and either.group(3) in SETTINGS:
                        conditional.append(
                            {"setting": either.group(1), "values": sorted(load(either.group(2))),
                             "unless": {"setting": either.group(3), "value": either.group(4)}, **where})
    conditional.sort(key=lambda c: (c["setting"], c["path"], c["line"]))
    return settings, conditional, checks


REMOVE_NODE_NEEDS_NODE = re.compile(r"name: Assert that nodes are specified for removal")


def read_remove_node(git, tag):
    """Where remove_node.yml refuses to run without `-e node=` (from v2.28), or None (it then runs on every
    host of etcd:k8s_cluster:calico_rr)."""
    path = "playbooks/remove_node.yml"
    text = git.show(tag, path) or ""
    line = line_of(text, REMOVE_NODE_NEEDS_NODE)
    if line is None:
        return None
    return {"path": path, "line": line, "task": "Assert that nodes are specified for removal"}


def read_docs(git, tag):
    docs = {}
    for key, (paths, pattern) in DOCS.items():
        for path in paths:
            text = git.show(tag, path)
            line = line_of(text, pattern) if text is not None else None
            if line is not None:
                docs[key] = {"path": path, "line": line, "text": text.splitlines()[line - 1].strip()}
                break
    return docs


def release(git, tag):
    checksums_at, prefix, versions, checksums = read_versions(git, tag)
    if not versions:
        sys.exit(f"{tag}: no Kubernetes version with an amd64 kubeadm checksum")
    settings, conditional, checks = read_assertions(git, tag)
    for name, accepted in settings.items():
        accepted["default"] = read_default(git, tag, name, checksums, normalised=False)
    remove_node = read_remove_node(git, tag)
    if remove_node:
        checks["remove_node_needs_node"] = remove_node
    return {
        "commit": git.run("rev-parse", f"{tag}^{{commit}}").strip(),
        "checksums": checksums_at,
        "kube_version_prefix": prefix,
        "kube_versions": versions,
        "kube_version": read_default(git, tag, "kube_version", checksums),
        "kube_version_min_required": read_default(git, tag, "kube_version_min_required", checksums),
        "playbooks": read_playbooks(git, tag),
        "settings": settings,
        "conditional_settings": conditional,
        "checks": checks,
        "docs": read_docs(git, tag),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("git_dir", help="a clone of kubespray (bare is fine) with its tags")
    parser.add_argument("--from", dest="first", default="v2.24.0", help="oldest release to read")
    parser.add_argument("--out", default="src/preflight/releases.json")
    args = parser.parse_args()
    git = Git(args.git_dir)
    tags = [t for t in git.run("tag", "--list").split() if RELEASE_TAG.match(t)]
    tags = sorted((t for t in tags if version_key(t) >= version_key(args.first)), key=version_key)
    data = {
        "generated_by": "scripts/kubespray-releases.py from kubespray's git tags; do not edit by hand",
        "regenerate": ".venv/bin/python scripts/kubespray-releases.py PATH/TO/kubespray.git",
        "releases": {tag: release(git, tag) for tag in tags},
    }
    with open(args.out, "w") as out:
        json.dump(data, out, indent=1, sort_keys=True)
        out.write("\n")
    print(f"{args.out}: {len(tags)} releases, {tags[0]} … {tags[-1]}", file=sys.stderr)


if __name__ == "__main__":
    main()
