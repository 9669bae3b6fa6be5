//! `deploy/` and `crds/` apply cleanly with kubectl (kustomize built in) and read back from testkit.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde::Deserialize;

#[path = "common/tools.rs"]
mod tools;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

async fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    use tokio::io::AsyncWriteExt;
    let mut cmd = tokio::process::Command::from(tools::command("kubectl"));
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .current_dir(repo());
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("kubectl starts");
    if let Some(mut pipe) = child.stdin.take() {
        if let Some(text) = stdin {
            pipe.write_all(text.as_bytes()).await.unwrap();
        }
    }
    child.wait_with_output().await.unwrap()
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
