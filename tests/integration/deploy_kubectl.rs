//! `deploy/` and `crds/` apply cleanly with kubectl (kustomize built in) and read back from testkit.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde::Deserialize;

use crate::common::tools;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

async fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    tools::kubectl(kubeconfig, args, stdin).await
}

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_and_deploy_apply_with_kubectl_and_read_back() {
    if !tools::kubectl_or_skip("crds_and_deploy_apply_with_kubectl_and_read_back") {
        return;
    }
    let api = testkit::ApiServer::start().await.unwrap();
    let kc = api.kubeconfig_path().to_path_buf();

    let out = kubectl(
        &kc,
        &[
            "apply",
            "--server-side",
            "--field-manager=kok-install",
            "-f",
            "crds/",
        ],
        None,
    )
    .await;
    ok(&out, "kubectl apply -f crds/");

    // The kustomization renders everything (kustomize is built into kubectl) and testkit serves
    // every kind in it. The CRDs come from crds/.
    let rendered = ok(
        &kubectl(&kc, &["kustomize", "deploy/"], None).await,
        "kubectl kustomize deploy/",
    );
    for kind in [
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
    ] {
        assert!(
            rendered.contains(&format!("\nkind: {kind}\n")),
            "kustomize output lacks a {kind}:\n{rendered}"
        );
    }
    let out = kubectl(&kc, &["apply", "-k", "deploy/"], None).await;
    let applied = ok(&out, "kubectl apply -k deploy/");
    assert!(applied.contains("deployment.apps/kok"), "{applied}");
    assert!(applied.contains("service/kok"), "{applied}");
    for reviewer in [
        "clusterrole.rbac.authorization.k8s.io/kok-token-reviewer",
        "clusterrolebinding.rbac.authorization.k8s.io/kok-token-reviewer",
    ] {
        assert!(applied.contains(reviewer), "{applied}");
    }

    let got = ok(
        &kubectl(
            &kc,
            &[
                "-n",
                "kok-system",
                "get",
                "serviceaccount/kok",
                "role/kok",
                "rolebinding/kok",
                "configmap/kok-config",
                "deployment/kok",
                "service/kok",
                "-o",
                "name",
            ],
            None,
        )
        .await,
        "kubectl get",
    );
    for name in [
        "serviceaccount/kok",
        "role.rbac.authorization.k8s.io/kok",
        "rolebinding.rbac.authorization.k8s.io/kok",
        "configmap/kok-config",
        "deployment.apps/kok",
        "service/kok",
    ] {
        assert!(got.lines().any(|l| l == name), "{name} missing from:\n{got}");
    }
    let crds = ok(
        &kubectl(&kc, &["get", "crd", "-o", "name"], None).await,
        "kubectl get crd",
    );
    assert!(crds.contains("clusteroperations.kok.dev"), "{crds}");
    // kubectl validates against the served schema: a misspelt field is refused, not dropped.
    let typo = "apiVersion: kok.dev/v1alpha1\nkind: ClusterOperation\nmetadata:\n  name: typo\n  namespace: kok-system\nspec:\n  clsuter: prod\n";
    let out = kubectl(&kc, &["create", "-f", "-"], Some(typo)).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("strict decoding error: unknown field \"spec.clsuter\""),
        "{err}"
    );
    // The CRDs' schemas reach kubectl through OpenAPI v3.
    let explained = ok(
        &kubectl(&kc, &["explain", "clusteroperations.spec.extraArgs"], None).await,
        "kubectl explain",
    );
    assert!(
        explained.contains("KIND:       ClusterOperation")
            && explained.contains("FIELD: extraArgs <[]string>")
            && explained.contains("Arguments appended to the command line, never interpreted by a shell."),
        "{explained}"
    );

    // What was applied is what the files say: the Deployment is hardened and probed.
    let deployment = api
        .object(("apps", "v1", "deployments"), "kok-system", "kok")
        .expect("deployment stored");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(container["securityContext"]["capabilities"]["drop"][0], "ALL");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(pod["serviceAccountName"], "kok");

    // The Service selects the Deployment's pods on their named port, with the server's defaults.
    let service = api
        .object("services", "kok-system", "kok")
        .expect("service stored");
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["template"]["metadata"]["labels"]
    );
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    assert_eq!(service["spec"]["type"], "ClusterIP");
    assert!(
        service["spec"]["clusterIP"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("10.96.")),
        "{service}"
    );

    // The Role grants only namespaced verbs kok uses: nothing cluster-wide, no wildcard, no Pod writes (pods
    // are read for the termination message of a finished Job), no Secret updates or deletes (kok creates
    // each cluster's credentials Secrets empty and patches nothing else into them).
    let role = api
        .object(("rbac.authorization.k8s.io", "v1", "roles"), "kok-system", "kok")
        .expect("role stored");
    let rules = role["rules"].as_array().unwrap();
    assert!(
        rules
            .iter()
            .any(|r| r["resources"] == serde_json::json!(["pods"])),
        "kok reads the pods of its Jobs: {rules:?}"
    );
    for rule in rules {
        let verbs: Vec<&str> = rule["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(!verbs.contains(&"*"), "wildcard verb in {rule}");
        if rule["resources"].as_array().unwrap().iter().any(|r| r == "pods") {
            assert_eq!(verbs, ["get", "list", "watch"], "{rule}");
        }
        if rule["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r == "pods/log")
        {
            assert_eq!(verbs, ["get"], "the web view only reads run logs: {rule}");
        }
        if rule["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r == "secrets")
        {
            assert_eq!(verbs, ["get", "list", "watch", "create", "patch"], "{rule}");
        }
    }
}

#[test]
fn the_workload_reader_only_gets_and_lists_what_verification_reads() {
    let text = std::fs::read_to_string(repo().join("deploy/workload-reader.yaml")).unwrap();
    let mut grants = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let doc = serde_json::to_value(serde_yaml::Value::deserialize(doc).unwrap()).unwrap();
        let kind = doc["kind"].as_str().unwrap().to_string();
        for rule in doc["rules"].as_array().into_iter().flatten() {
            let what = rule.get("resources").or(rule.get("nonResourceURLs")).unwrap();
            grants.push(format!("{kind} {what} {}", rule["verbs"]));
        }
    }
    assert_eq!(
        grants,
        [
            r#"ClusterRole ["nodes"] ["get","list"]"#,
            r#"ClusterRole ["/readyz","/version"] ["get"]"#,
            r#"Role ["deployments","daemonsets"] ["get","list"]"#,
        ]
    );
    let kustomization = std::fs::read_to_string(repo().join("deploy/kustomization.yaml")).unwrap();
    assert!(
        !kustomization.contains("workload-reader"),
        "it is for workload clusters, not kok's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workload_reader_applies_with_kubectl() {
    if !tools::kubectl_or_skip("the_workload_reader_applies_with_kubectl") {
        return;
    }
    let api = testkit::ApiServer::start().await.unwrap();
    let out = kubectl(
        api.kubeconfig_path(),
        &["apply", "-f", "deploy/workload-reader.yaml"],
        None,
    )
    .await;
    let applied = ok(&out, "kubectl apply -f deploy/workload-reader.yaml");
    for name in [
        "serviceaccount/kok-reader",
        "clusterrole.rbac.authorization.k8s.io/kok-reader",
        "role.rbac.authorization.k8s.io/kok-reader",
    ] {
        assert!(applied.contains(name), "{applied}");
    }
}

/// The `images:` entries of deploy/kustomization.yaml: (name, newName, newTag).
fn kustomize_images() -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(repo().join("deploy/kustomization.yaml")).unwrap();
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let field = |image: &serde_yaml::Value, key: &str| image[key].as_str().unwrap_or_default().to_string();
    doc["images"]
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|i| (field(i, "name"), field(i, "newName"), field(i, "newTag")))
        .collect()
}

#[test]
fn deploy_names_its_image_in_one_place_the_kustomization() {
    // deployment.yaml names the image by a bare name; the kustomization's `images:` says which image it is.
    let text = std::fs::read_to_string(repo().join("deploy/deployment.yaml")).unwrap();
    let deployment: serde_json::Value =
        serde_json::to_value(serde_yaml::from_str::<serde_yaml::Value>(&text).unwrap()).unwrap();
    let image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !image.contains(['/', ':', '@']),
        "deployment.yaml names the image only by name ({image}); the registry and tag are set in \
         kustomization.yaml's `images:`"
    );
    let images = kustomize_images();
    assert_eq!(images.len(), 1, "one image, set in one place: {images:?}");
    let (name, new_name, new_tag) = &images[0];
    assert_eq!(name, &image, "the `images:` entry is the Deployment's image");
    // As checked in, the image is the one `docker build -t kok:<version> .` of this source makes.
    assert_eq!(
        (new_name.as_str(), new_tag.as_str()),
        ("kok", env!("CARGO_PKG_VERSION")),
        "as checked in, deploy/ runs the image built from this source, tagged with its version"
    );
    // The docs name the image the build makes with this version.
    let version = env!("CARGO_PKG_VERSION");
    let mut pages = vec![repo().join("README.md"), repo().join("deploy/README.md")];
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        pages.push(entry.unwrap().path());
    }
    for page in pages.iter().filter(|p| p.extension().is_some_and(|e| e == "md")) {
        let text = std::fs::read_to_string(page).unwrap();
        for (at, _) in text.match_indices("kok:") {
            let tag: String = text[at + 4..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            if tag.starts_with(|c: char| c.is_ascii_digit()) {
                assert_eq!(tag, version, "{} names the image kok:{tag}", page.display());
            }
        }
    }
    // No other file of deploy/ names an image.
    for entry in std::fs::read_dir(repo().join("deploy")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") && !path.ends_with("kustomization.yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let named: Vec<&str> = text
                .lines()
                .filter(|l| l.trim_start().starts_with("image:"))
                .collect();
            let expected: &[&str] = if path.ends_with("deployment.yaml") {
                &["kok"]
            } else {
                &[]
            };
            let named: Vec<&str> = named
                .iter()
                .map(|l| l.trim_start().trim_start_matches("image:").trim())
                .collect();
            assert_eq!(named, expected, "{}", path.display());
        }
    }
}

#[test]
fn the_rendered_deployment_runs_the_image_of_the_kustomization() {
    if !tools::kubectl_or_skip("the_rendered_deployment_runs_the_image_of_the_kustomization") {
        return;
    }
    let out = tools::command("kubectl")
        .args(["kustomize", "deploy/"])
        .current_dir(repo())
        .output()
        .unwrap();
    let rendered = ok(&out, "kubectl kustomize deploy/");
    let (_, new_name, new_tag) = &kustomize_images()[0];
    let images: Vec<&str> = rendered
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("image: "))
        .collect();
    assert_eq!(images, [format!("{new_name}:{new_tag}")], "{rendered}");
}

/// The flags of `kok run` (and the global ones) with their environment twin and default, from clap.
fn run_flags() -> Vec<(String, Option<String>)> {
    use clap::CommandFactory;
    let mut cli = kok::cli::Cli::command();
    cli.build();
    let global: Vec<clap::Arg> = cli.get_arguments().cloned().collect();
    let run = cli.find_subcommand("run").expect("kok run").clone();
    global
        .iter()
        .chain(run.get_arguments())
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| {
            let env = a.get_env()?.to_string_lossy().into_owned();
            let defaults: Vec<String> = a
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            let default = (!defaults.is_empty() && a.get_action().takes_values()).then(|| defaults.join(","));
            Some((env, default))
        })
        .collect()
}

#[test]
fn deploy_config_has_every_kok_run_flag_at_its_default_or_says_why_not() {
    let text = std::fs::read_to_string(repo().join("deploy/config.yaml")).unwrap();
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let data: std::collections::BTreeMap<String, String> =
        serde_yaml::from_value(doc["data"].clone()).unwrap();
    // `  # KOK_X: "value"`: a setting shown commented out, with an example value.
    let commented: Vec<String> = text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("# "))
        .filter_map(|l| l.split_once(": \"").map(|(k, _)| k.to_string()))
        .filter(|k| k.starts_with("KOK_"))
        .collect();
    // The last comment: the settings deliberately not set here.
    let absent = text
        .split("# Deliberately not set here:")
        .nth(1)
        .unwrap_or_default();
    let mut failures = Vec::new();
    let flags = run_flags();
    assert!(flags.len() > 30, "{flags:?}");
    for (env, default) in &flags {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{env}:")));
        match (data.get(env), default) {
            (Some(value), Some(default)) if value != default => {
                // A value other than the default says so on its line.
                if !line.is_some_and(|l| l.contains("# not the default")) {
                    failures.push(format!(
                        "{env} is {value:?} but the flag's default is {default:?}"
                    ));
                }
            }
            (Some(_), _) => {}
            (None, _) if commented.contains(env) => {}
            (None, _) if absent.contains(env.as_str()) => {}
            (None, _) => failures.push(format!(
                "{env} is neither set, nor commented out with an example, nor named as left out"
            )),
        }
    }
    let known: Vec<&String> = flags.iter().map(|(e, _)| e).collect();
    for key in data.keys().chain(&commented) {
        if !known.contains(&key) {
            failures.push(format!("{key} is no flag of `kok run`"));
        }
    }
    assert!(
        failures.is_empty(),
        "deploy/config.yaml:\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_dockerfile_passes_hadolint() {
    if !tools::hadolint_or_skip("the_dockerfile_passes_hadolint") {
        return;
    }
    // .hadolint.yaml at the top holds the rules left out, each with its reason.
    let out = tools::command("hadolint")
        .args(["--config", ".hadolint.yaml", "--no-color", "Dockerfile"])
        .current_dir(repo())
        .output()
        .unwrap();
    ok(&out, "hadolint Dockerfile");
}

#[test]
fn the_dockerfile_builds_kok_as_ci_and_the_docs_do() {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    // The RUN instruction that builds kok, its continuation lines joined.
    let joined = text.replace("\\\n", " ");
    let build = joined
        .lines()
        .find(|l| l.starts_with("RUN cargo build"))
        .expect("a RUN cargo build");
    let words: Vec<&str> = build.split_whitespace().collect();
    for flag in ["--release", "--locked"] {
        assert!(
            words.contains(&flag),
            "the image builds with {flag}, as CI's cargo commands: {build}"
        );
    }
    assert!(
        words.windows(2).any(|w| w == ["--bin", "kok"]),
        "the image builds the kok binary: {build}"
    );
    assert!(
        !words
            .iter()
            .any(|w| w.starts_with("--features") || *w == "--no-default-features"),
        "the image builds the default features, as CI and `cargo install --path .` do: {build}"
    );
    let ci = std::fs::read_to_string(repo().join(".ci/run")).unwrap();
    assert!(ci.contains("--locked"), "CI builds the locked dependencies too");
    let deploying = std::fs::read_to_string(repo().join("docs/deploying.md")).unwrap();
    assert!(
        deploying.contains("cargo install --locked --path .")
            && deploying.contains(&format!(
                "`{}`",
                build
                    .trim_start_matches("RUN ")
                    .split(" &&")
                    .next()
                    .unwrap()
                    .trim()
            )),
        "docs/deploying.md says how kok is installed and how the image builds it"
    );
}

/// docs/runner-image.md's example: the Dockerfile lints, starts from kok's default image, and its collection
/// install, run as written with the real ansible-galaxy (into a scratch directory standing for the image's
/// path), installs a collection whose role a playbook then runs; the image's path is one ansible searches
/// without any setting.
#[test]
fn the_runner_image_example_lints_and_installs_its_collection_where_ansible_looks() {
    let dir = repo().join("examples/runner-image");
    let text = std::fs::read_to_string(dir.join("Dockerfile")).unwrap();
    let joined = text.replace("\\\n", " ");
    let from = joined
        .lines()
        .find_map(|l| l.strip_prefix("FROM "))
        .expect("a FROM line");
    assert_eq!(
        from.trim(),
        kok::api::DEFAULT_IMAGE,
        "the example extends the image kok runs by default"
    );
    if tools::hadolint_or_skip(
        "the_runner_image_example_lints_and_installs_its_collection_where_ansible_looks",
    ) {
        let out = tools::command("hadolint")
            .args([
                "--config",
                ".hadolint.yaml",
                "--no-color",
                "examples/runner-image/Dockerfile",
            ])
            .current_dir(repo())
            .output()
            .unwrap();
        ok(&out, "hadolint examples/runner-image/Dockerfile");
    }
    if !tools::ansible_or_skip(
        "the_runner_image_example_lints_and_installs_its_collection_where_ansible_looks",
    ) {
        return;
    }
    // COPY <source> <copy>, then RUN ansible-galaxy collection install <copy> -p <path>.
    let copy: Vec<&str> = joined
        .lines()
        .find_map(|l| l.strip_prefix("COPY "))
        .expect("a COPY line")
        .split_whitespace()
        .collect();
    let install: Vec<&str> = joined
        .lines()
        .find_map(|l| l.strip_prefix("RUN "))
        .expect("a RUN line")
        .split("&&")
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        install[..3],
        ["ansible-galaxy", "collection", "install"],
        "{install:?}"
    );
    assert_eq!(install[3], copy[1], "the RUN installs what the COPY copied");
    let path = install
        .iter()
        .position(|w| *w == "-p")
        .map(|i| install[i + 1])
        .expect("-p <path>");
    let config = tools::command("ansible-config").args(["dump"]).output().unwrap();
    let defaults = String::from_utf8_lossy(&config.stdout);
    let searched = defaults
        .lines()
        .find(|l| l.starts_with("COLLECTIONS_PATHS"))
        .unwrap_or_else(|| panic!("ansible-config dump names no COLLECTIONS_PATHS:\n{defaults}"));
    assert!(
        searched.contains(&format!("'{path}'")),
        "ansible does not search {path}: {searched}"
    );

    let scratch = tempfile::tempdir().unwrap();
    let installed = scratch.path().join("collections");
    let out = tools::command("ansible-galaxy")
        .args(["collection", "install"])
        .arg(dir.join(copy[0]))
        .arg("-p")
        .arg(&installed)
        .output()
        .unwrap();
    ok(&out, "ansible-galaxy collection install");
    let play = scratch.path().join("play.yml");
    std::fs::write(
        &play,
        "- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: acme.hardening.banner\n",
    )
    .unwrap();
    let banner = scratch.path().join("banner");
    let out = tools::command("ansible-playbook")
        .args(["-i", "localhost,", "-c", "local"])
        .arg(&play)
        .arg("-e")
        .arg(format!("banner_path={}", banner.display()))
        .args(["-e", "ansible_python_interpreter={{ ansible_playbook_python }}"])
        .env("ANSIBLE_COLLECTIONS_PATH", &installed)
        .env("ANSIBLE_LOCAL_TEMP", scratch.path().join("tmp"))
        .env("ANSIBLE_HOME", scratch.path().join("home"))
        .output()
        .unwrap();
    ok(&out, "ansible-playbook with acme.hardening.banner");
    assert_eq!(
        std::fs::read_to_string(&banner).unwrap(),
        "Authorized use only.\n"
    );
}
