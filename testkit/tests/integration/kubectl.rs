//! Smoke test with the real kubectl: CRDs, server-side apply, get (yaml and tables), get -w, patch,
//! and cascading deletes. kubectl 1.26 or newer must be installed (`scripts/setup.sh` puts one into
//! `.venv` when PATH has none); `KOK_SKIP_KUBECTL=1` skips explicitly.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use testkit::ApiServer;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use crate::tools;

const LIMIT: Duration = Duration::from_secs(60);

struct Kubectl {
    kubeconfig: PathBuf,
    cache: tempfile::TempDir,
}

impl Kubectl {
    /// kubectl with the server's kubeconfig and a cache of its own.
    fn for_server(server: &ApiServer) -> Kubectl {
        Kubectl {
            kubeconfig: server.kubeconfig_path().to_path_buf(),
            cache: tempfile::tempdir().unwrap(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::from(tools::command("kubectl"));
        c.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.cache.path())
            .args(args);
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        c
    }

    /// Runs kubectl, failing the test with its output when it fails.
    async fn ok(&self, args: &[&str]) -> String {
        self.run(args, None)
            .await
            .unwrap_or_else(|e| panic!("kubectl {args:?} failed: {e}"))
    }

    async fn run(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        let mut cmd = self.command(args);
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().map_err(|e| format!("spawning kubectl: {e}"))?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes()).await.map_err(|e| e.to_string())?;
        }
        let out = tokio::time::timeout(LIMIT, child.wait_with_output())
            .await
            .map_err(|_| format!("kubectl {args:?} did not finish within {LIMIT:?}"))?
            .map_err(|e| e.to_string())?;
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        if out.status.success() {
            Ok(stdout)
        } else {
            Err(format!(
                "{}\nstdout: {stdout}\nstderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Runs kubectl to its end: whether it succeeded, its stdout and its stderr.
    async fn output(&self, args: &[&str]) -> (bool, String, String) {
        let child = self.command(args).spawn().expect("spawning kubectl");
        let out = tokio::time::timeout(LIMIT, child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish within {LIMIT:?}"))
            .expect("kubectl ran");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    async fn apply_stdin(&self, args: &[&str], yaml: &str) -> String {
        self.run(args, Some(yaml))
            .await
            .unwrap_or_else(|e| panic!("kubectl {args:?} failed: {e}"))
    }

    fn watch(&self, args: &[&str]) -> Child {
        self.command(args)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning kubectl {args:?}: {e}"))
    }
}

/// Reads lines until one satisfies `pred`.
async fn wait_line(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    pred: impl Fn(&str) -> bool,
) -> String {
    let read = async {
        while let Some(line) = lines.next_line().await.expect("reading kubectl output") {
            if pred(&line) {
                return line;
            }
        }
        panic!("kubectl get -w ended before the expected line");
    };
    tokio::time::timeout(LIMIT, read)
        .await
        .expect("kubectl get -w printed the expected line")
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

fn owned_configmap(name: &str, owner: &str, uid: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  ownerReferences:\n  - apiVersion: v1\n    kind: ConfigMap\n    name: {owner}\n    uid: {uid}\n    blockOwnerDeletion: true\ndata:\n  k: v\n"
    )
}

#[tokio::test]
async fn kubectl_applies_gets_watches_patches_and_deletes_with_cascade() {
    if !tools::kubectl_or_skip("kubectl_applies_gets_watches_patches_and_deletes_with_cascade") {
        return;
    }
    let server = ApiServer::start().await.unwrap();
    let k = Kubectl::for_server(&server);

    let out = k.ok(&["apply", "-f", &fixture("widget-crd.yaml")]).await;
    assert!(
        out.contains("customresourcedefinition.apiextensions.k8s.io/widgets.example.test created"),
        "{out}"
    );
    let project_crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds");
    let has_project_crds = std::fs::read_dir(&project_crds)
        .map(|d| {
            d.flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == "yaml"))
        })
        .unwrap_or(false);
    if has_project_crds {
        let out = k.ok(&["apply", "-f", &project_crds.display().to_string()]).await;
        assert!(out.contains("customresourcedefinition"), "{out}");
    } else {
        eprintln!(
            "no project CRDs in {} yet; applying only the fixture CRD",
            project_crds.display()
        );
    }

    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: smoke\ndata:\n  key: value1\n";
    let out = k.apply_stdin(&["apply", "--server-side", "-f", "-"], cm).await;
    assert!(out.contains("configmap/smoke serverside-applied"), "{out}");
    let yaml = k.ok(&["get", "configmap", "smoke", "-o", "yaml"]).await;
    assert!(
        yaml.contains("key: value1") && yaml.contains("name: smoke"),
        "{yaml}"
    );

    let out = k
        .ok(&["apply", "--server-side", "-f", &fixture("widget.yaml")])
        .await;
    assert!(out.contains("widget.example.test/w1 serverside-applied"), "{out}");
    let status = r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#;
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--subresource=status",
        "--type=merge",
        "-p",
        status,
    ])
    .await;
    let table = k.ok(&["get", "wd"]).await;
    let lines: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0], vec!["NAME", "READY", "SIZE", "AGE"], "{table}");
    assert_eq!(&lines[1][..3], &["w1", "True", "3"], "{table}");

    let mut table_watch = k.watch(&["get", "configmap", "smoke", "-w"]);
    let mut value_watch = k.watch(&[
        "get",
        "configmap",
        "smoke",
        "-w",
        "-o",
        "jsonpath={.data.key}{\"\\n\"}",
    ]);
    let mut table_lines = BufReader::new(table_watch.stdout.take().unwrap()).lines();
    let mut value_lines = BufReader::new(value_watch.stdout.take().unwrap()).lines();
    wait_line(&mut table_lines, |l| l.starts_with("smoke")).await;
    wait_line(&mut value_lines, |l| l == "value1").await;
    let out = k
        .ok(&[
            "patch",
            "configmap",
            "smoke",
            "-p",
            r#"{"data":{"key":"value2"}}"#,
        ])
        .await;
    assert!(out.contains("configmap/smoke patched"), "{out}");
    wait_line(&mut value_lines, |l| l == "value2").await;
    wait_line(&mut table_lines, |l| l.starts_with("smoke")).await;
    drop(table_watch);
    drop(value_watch);

    for (cascade, parent) in [("foreground", "parent-fg"), ("background", "parent-bg")] {
        let out = k
            .apply_stdin(
                &["create", "-f", "-"],
                &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {parent}\n"),
            )
            .await;
        assert!(out.contains("created"), "{out}");
        let uid = k
            .ok(&["get", "configmap", parent, "-o", "jsonpath={.metadata.uid}"])
            .await;
        let child = format!("{parent}-child");
        k.apply_stdin(
            &["apply", "-f", "-"],
            &owned_configmap(&child, parent, uid.trim()),
        )
        .await;
        let out = k
            .ok(&["delete", "configmap", parent, &format!("--cascade={cascade}")])
            .await;
        assert!(out.contains("deleted"), "{out}");
        let left = k.ok(&["get", "configmaps", "-o", "name"]).await;
        assert!(
            !left.contains(&child) && !left.contains(&format!("configmap/{parent}\n")),
            "{cascade}: {left}"
        );
    }

    let out = k.ok(&["delete", "-f", &fixture("widget-crd.yaml")]).await;
    assert!(out.contains("deleted"), "{out}");
    let err = k.run(&["get", "widgets"], None).await.unwrap_err();
    assert!(
        err.contains("the server doesn't have a resource type")
            || err.contains("could not find the requested resource"),
        "{err}"
    );
}

#[tokio::test]
async fn kubectl_applies_deployment_manifests_client_and_server_side() {
    if !tools::kubectl_or_skip("kubectl_applies_deployment_manifests_client_and_server_side") {
        return;
    }
    let server = ApiServer::start().await.unwrap();
    let k = Kubectl::for_server(&server);
    let manifests = fixture("deploy.yaml");
    let out = k.ok(&["apply", "-f", &manifests]).await;
    for created in [
        "namespace/kok-test created",
        "serviceaccount/kok created",
        "role.rbac.authorization.k8s.io/kok created",
        "rolebinding.rbac.authorization.k8s.io/kok created",
        "clusterrole.rbac.authorization.k8s.io/kok:reader created",
        "configmap/kok-config created",
        "deployment.apps/kok created",
    ] {
        assert!(out.contains(created), "{created} missing from:\n{out}");
    }
    let changed = std::fs::read_to_string(&manifests)
        .unwrap()
        .replace("value: b", "value: c");
    let out = k.apply_stdin(&["apply", "-f", "-"], &changed).await;
    assert!(
        out.contains("deployment.apps/kok configured") && out.contains("configmap/kok-config unchanged"),
        "{out}"
    );
    let out = k
        .apply_stdin(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            &changed,
        )
        .await;
    assert!(out.contains("deployment.apps/kok serverside-applied"), "{out}");
    let env = k
        .ok(&[
            "get",
            "deployment",
            "kok",
            "-n",
            "kok-test",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].env[0].value}",
        ])
        .await;
    assert_eq!(env, "c");
    let out = k.ok(&["delete", "namespace", "kok-test"]).await;
    assert!(out.contains("deleted"), "{out}");
    assert!(
        server.object("v1/configmaps", "kok-test", "kok-config").is_none(),
        "namespace contents go with it"
    );
}

/// A self-signed certificate and key for `kubectl create secret tls`, or None (with the reason printed)
/// when openssl is not installed.
fn tls_pair(dir: &Path) -> Option<(String, String)> {
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=testkit",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output();
    match made {
        Ok(o) if o.status.success() => Some((cert.display().to_string(), key.display().to_string())),
        other => {
            eprintln!("skipping kubectl create secret tls: openssl could not make a certificate: {other:?}");
            None
        }
    }
}

#[tokio::test]
async fn kubectl_generator_commands_send_protobuf_and_are_stored() {
    if !tools::kubectl_or_skip("kubectl_generator_commands_send_protobuf_and_are_stored") {
        return;
    }
    let server = ApiServer::start().await.unwrap();
    let k = Kubectl::for_server(&server);
    let files = tempfile::tempdir().unwrap();
    let key_file = files.path().join("id_ed25519");
    std::fs::write(&key_file, "not a real key\n").unwrap();
    let settings = files.path().join("settings.ini");
    std::fs::write(&settings, "[a]\nb = c\n").unwrap();
    let from_key = format!("--from-file=ssh-privatekey={}", key_file.display());
    let from_settings = format!("--from-file={}", settings.display());

    k.ok(&["create", "namespace", "gen"]).await;
    let n = ["-n", "gen"];
    for args in [
        vec![
            "create",
            "secret",
            "generic",
            "ssh",
            "--type=kubernetes.io/ssh-auth",
            &from_key,
        ],
        vec![
            "create",
            "secret",
            "docker-registry",
            "pull",
            "--docker-server=registry.test",
            "--docker-username=u",
            "--docker-password=p",
        ],
        vec![
            "create",
            "configmap",
            "cfg",
            "--from-literal=mode=fast",
            &from_settings,
        ],
        vec!["create", "serviceaccount", "runner"],
        vec![
            "run",
            "probe",
            "--image=busybox:1",
            "--restart=Never",
            "--labels=app=probe",
            "--env=MODE=fast",
            "--port=8080",
            "--",
            "sleep",
            "1",
        ],
        vec!["create", "job", "once", "--image=busybox:1", "--", "echo", "hi"],
        vec![
            "create",
            "role",
            "reader",
            "--verb=get,list",
            "--resource=pods,configmaps",
        ],
        vec![
            "create",
            "rolebinding",
            "reader",
            "--role=reader",
            "--serviceaccount=gen:runner",
        ],
        vec![
            "create",
            "deployment",
            "web",
            "--image=nginx:1",
            "--port=80",
            "--replicas=2",
        ],
        vec!["create", "service", "clusterip", "web", "--tcp=80:8080"],
        vec![
            "create",
            "clusterrole",
            "nodes",
            "--verb=get",
            "--resource=namespaces",
        ],
        vec![
            "create",
            "clusterrolebinding",
            "nodes",
            "--clusterrole=nodes",
            "--user=alice",
        ],
    ] {
        let args: Vec<&str> = n.iter().copied().chain(args).collect();
        let out = k.ok(&args).await;
        assert!(out.contains("created"), "kubectl {args:?}: {out}");
    }

    let ns = server.object("namespaces", "", "gen").expect("namespace stored");
    assert_eq!(ns["status"]["phase"], "Active");
    let ssh = server.object("secrets", "gen", "ssh").expect("secret stored");
    assert_eq!(ssh["type"], "kubernetes.io/ssh-auth");
    assert_eq!(ssh["data"]["ssh-privatekey"], "bm90IGEgcmVhbCBrZXkK");
    assert!(
        ssh["metadata"]["uid"].as_str().is_some_and(|u| !u.is_empty()),
        "{ssh}"
    );
    let pull = server.object("secrets", "gen", "pull").expect("secret stored");
    assert_eq!(pull["type"], "kubernetes.io/dockerconfigjson");
    let cfg = server
        .object("configmaps", "gen", "cfg")
        .expect("configmap stored");
    assert_eq!(cfg["data"]["mode"], "fast");
    assert_eq!(cfg["data"]["settings.ini"], "[a]\nb = c\n");
    assert!(server.object("serviceaccounts", "gen", "runner").is_some());
    let pod = server.object("pods", "gen", "probe").expect("pod stored");
    assert_eq!(pod["metadata"]["labels"]["app"], "probe");
    let c = &pod["spec"]["containers"][0];
    assert_eq!(c["env"][0], serde_json::json!({"name": "MODE", "value": "fast"}));
    assert_eq!(c["ports"][0]["containerPort"], 8080);
    assert_eq!(c["args"], serde_json::json!(["sleep", "1"]));
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    let job = server.object("batch/v1/jobs", "gen", "once").expect("job stored");
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "busybox:1");
    assert_eq!(container["command"], serde_json::json!(["echo", "hi"]));
    assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
    let role = server
        .object(("rbac.authorization.k8s.io", "v1", "roles"), "gen", "reader")
        .expect("role stored");
    assert_eq!(role["rules"][0]["verbs"], serde_json::json!(["get", "list"]));
    let binding = server
        .object(
            ("rbac.authorization.k8s.io", "v1", "rolebindings"),
            "gen",
            "reader",
        )
        .expect("rolebinding stored");
    assert_eq!(binding["roleRef"]["name"], "reader");
    assert_eq!(binding["subjects"][0]["namespace"], "gen");
    let web = server
        .object(("apps", "v1", "deployments"), "gen", "web")
        .expect("deployment stored");
    assert_eq!(web["spec"]["replicas"], 2);
    assert_eq!(
        web["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"],
        80
    );
    let svc = server.object("services", "gen", "web").expect("service stored");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080);
    let crb = server
        .object(
            ("rbac.authorization.k8s.io", "v1", "clusterrolebindings"),
            "",
            "nodes",
        )
        .expect("clusterrolebinding stored");
    assert_eq!(crb["subjects"][0]["name"], "alice");

    if let Some((cert, key)) = tls_pair(files.path()) {
        let (cert, key) = (format!("--cert={cert}"), format!("--key={key}"));
        k.ok(&["-n", "gen", "create", "secret", "tls", "web-tls", &cert, &key])
            .await;
        let tls = server.object("secrets", "gen", "web-tls").expect("secret stored");
        assert_eq!(tls["type"], "kubernetes.io/tls");
        assert!(
            tls["data"]["tls.crt"].as_str().is_some_and(|c| c.len() > 100),
            "{}",
            tls["type"]
        );
    }

    // What was stored reads back through kubectl as JSON.
    let got = k
        .ok(&[
            "-n",
            "gen",
            "get",
            "secret",
            "ssh",
            "-o",
            "jsonpath={.data.ssh-privatekey}",
        ])
        .await;
    assert_eq!(got, "bm90IGEgcmVhbCBrZXkK");
}

#[tokio::test]
async fn kubectl_explain_reads_built_in_and_crd_schemas_from_openapi_v3_and_v2() {
    if !tools::kubectl_or_skip("kubectl_explain_reads_built_in_and_crd_schemas_from_openapi_v3_and_v2") {
        return;
    }
    let server = ApiServer::start().await.unwrap();
    let k = Kubectl::for_server(&server);
    let out = k.ok(&["explain", "configmap.data"]).await;
    assert!(
        out.contains("KIND:       ConfigMap") && out.contains("FIELD: data <map[string]string>"),
        "{out}"
    );
    let out = k
        .ok(&["explain", "jobs.spec.template.spec.containers.image"])
        .await;
    assert!(out.contains("Container image name."), "{out}");
    k.ok(&["apply", "-f", &fixture("widget-crd.yaml")]).await;
    let out = k.ok(&["explain", "widgets"]).await;
    assert!(
        out.contains("KIND:       Widget") && out.contains("VERSION:    v1"),
        "{out}"
    );
    let err = k.run(&["explain", "configmap.nothere"], None).await.unwrap_err();
    assert!(err.contains("nothere"), "{err}");

    // The same from OpenAPI v2, which kubectl reads in its protobuf form.
    let v2 = "--output=plaintext-openapiv2";
    let out = k.ok(&["explain", "configmap.data", v2]).await;
    assert!(out.contains("FIELD:    data <map[string]string>"), "{out}");
    let out = k
        .ok(&["explain", "jobs.spec.template.spec.containers.image", v2])
        .await;
    assert!(
        out.contains("FIELD:    image <string>") && out.contains("Container image name."),
        "{out}"
    );
    let out = k.ok(&["explain", "widgets", v2]).await;
    assert!(out.contains("KIND:     Widget"), "{out}");
}

#[tokio::test]
async fn kubectl_validate_strict_refuses_unknown_fields_and_warn_prunes_them() {
    if !tools::kubectl_or_skip("kubectl_validate_strict_refuses_unknown_fields_and_warn_prunes_them") {
        return;
    }
    let server = ApiServer::start().await.unwrap();
    let k = Kubectl::for_server(&server);
    let gadgets = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: gadgets.example.test\nspec:\n  group: example.test\n  scope: Namespaced\n  names: {plural: gadgets, singular: gadget, kind: Gadget}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec: {type: object, properties: {size: {type: integer}}}\n";
    k.apply_stdin(&["apply", "-f", "-"], gadgets).await;
    let typo_cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: typo\ndat:\n  k: v\n";
    let typo_widget =
        "apiVersion: example.test/v1\nkind: Gadget\nmetadata:\n  name: typo\nspec:\n  size: 1\n  sise: 2\n";
    for (yaml, field) in [(typo_cm, "dat"), (typo_widget, "spec.sise")] {
        let err = k
            .run(&["apply", "--validate=strict", "-f", "-"], Some(yaml))
            .await
            .unwrap_err();
        assert!(
            err.contains(&format!("strict decoding error: unknown field \"{field}\"")),
            "{err}"
        );
    }
    assert!(server.object("configmaps", "default", "typo").is_none());

    // Under warn the object is stored without the unknown field, and kubectl prints the warning.
    let mut cmd = k.command(&["apply", "--validate=warn", "-f", "-"]);
    cmd.stdin(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(typo_cm.as_bytes())
        .await
        .unwrap();
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown field \"dat\""), "{stderr}");
    let cm = server.object("configmaps", "default", "typo").expect("stored");
    assert!(cm.get("dat").is_none(), "{cm}");
}

#[tokio::test]
async fn kubectl_logs_prints_what_the_pod_printed_and_follows_it_until_it_ends() {
    if !tools::kubectl_or_skip("kubectl_logs_prints_what_the_pod_printed_and_follows_it_until_it_ends") {
        return;
    }
    let server = ApiServer::start().await.unwrap();
    let k = Kubectl::for_server(&server);
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: run-1\nspec:\n  containers:\n  - name: ansible\n    image: kubespray\n";
    k.apply_stdin(&["apply", "-f", "-"], pod).await;
    server.append_pod_log("default", "run-1", "PLAY [all]\n");
    assert_eq!(k.ok(&["logs", "run-1"]).await, "PLAY [all]\n");

    let mut follow = k.watch(&["logs", "-f", "run-1"]);
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    wait_line(&mut lines, |l| l == "PLAY [all]").await;
    server.append_pod_log("default", "run-1", "TASK [ping]\n");
    wait_line(&mut lines, |l| l == "TASK [ping]").await;
    server.end_pod_log("default", "run-1");
    let status = tokio::time::timeout(LIMIT, follow.wait())
        .await
        .expect("kubectl logs -f ends with the log")
        .unwrap();
    assert!(status.success(), "{status}");
}

/// Publishes an Event about a pod through `events.k8s.io/v1`, as kok's controller publishes its own.
async fn publish(server: &ApiServer, name: &str, pod: &str, uid: &str, reason: &str, note: &str) {
    let api: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(server.client(), "default");
    let event: k8s_openapi::api::events::v1::Event = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "eventTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
        "reportingController": "kok", "reportingInstance": "kok-0", "action": "Run",
        "reason": reason, "type": "Normal", "note": note,
        "regarding": {"kind": "Pod", "apiVersion": "v1", "namespace": "default", "name": pod, "uid": uid},
    }))
    .unwrap();
    api.create(&Default::default(), &event).await.unwrap();
}

#[tokio::test]
async fn kubectl_reads_the_events_written_through_events_k8s_io_through_v1() {
    if !tools::kubectl_or_skip("kubectl_reads_the_events_written_through_events_k8s_io_through_v1") {
        return;
    }
    let server = ApiServer::start().await.unwrap();
    let k = Kubectl::for_server(&server);
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: app\n    image: nginx\n";
    k.apply_stdin(&["apply", "-f", "-"], pod).await;
    let uid = k
        .ok(&["get", "pod", "web", "-o", "jsonpath={.metadata.uid}"])
        .await;
    publish(&server, "web.1", "web", &uid, "Started", "the run started").await;

    let table = tools::kubectl_table(&k.ok(&["get", "events"]).await);
    assert_eq!(
        table[0],
        ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{table:?}"
    );
    assert_eq!(
        &table[1][1..],
        ["Normal", "Started", "pod/web", "the run started"],
        "{table:?}"
    );
    let wide = k.ok(&["get", "events", "-o", "wide"]).await;
    assert!(wide.contains("kok, kok-0") && wide.contains("web.1"), "{wide}");
    let selected = k
        .ok(&["get", "events", "--field-selector", "involvedObject.name=web"])
        .await;
    assert!(selected.contains("the run started"), "{selected}");
    let (ok, out, err) = k
        .output(&["get", "events", "--field-selector", "involvedObject.name=other"])
        .await;
    assert!(ok && out.is_empty(), "{out}");
    assert_eq!(err.trim(), "No resources found in default namespace.");

    let events = tools::kubectl_table(&k.ok(&["events", "--for", "pod/web"]).await);
    assert_eq!(
        events[0],
        ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{events:?}"
    );
    assert_eq!(
        &events[1][1..],
        ["Normal", "Started", "Pod/web", "the run started"],
        "{events:?}"
    );
    let described = k.ok(&["describe", "pod", "web"]).await;
    let section = described
        .split_once("Events:")
        .map(|(_, s)| s)
        .unwrap_or_default();
    assert!(
        section.contains("Started") && section.contains("the run started") && section.contains("kok"),
        "describe lists the Event (found by involvedObject.uid): {described}"
    );

    let listed = server.requests().count("list", "events");
    let mut watch = k.watch(&["get", "events", "--watch-only"]);
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    // kubectl watches from the resourceVersion of its list: an Event published after the list shows up.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while server.requests().count("list", "events") == listed {
        assert!(
            std::time::Instant::now() < deadline,
            "kubectl never listed the Events"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    publish(&server, "web.2", "web", &uid, "Finished", "the run finished").await;
    let line = wait_line(&mut lines, |l| l.contains("Finished")).await;
    assert!(
        line.contains("pod/web") && line.contains("the run finished"),
        "{line}"
    );
}

#[tokio::test]
async fn kubectl_get_pods_and_jobs_prints_the_columns_of_a_real_server() {
    if !tools::kubectl_or_skip("kubectl_get_pods_and_jobs_prints_the_columns_of_a_real_server") {
        return;
    }
    let server = ApiServer::start().await.unwrap();
    let k = Kubectl::for_server(&server);
    let job = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: run\nspec:\n  backoffLimit: 0\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: ansible\n        image: kubespray\n";
    k.apply_stdin(&["apply", "-f", "-"], job).await;
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: run-local\nspec:\n  nodeName: localhost\n  restartPolicy: Never\n  containers:\n  - name: ansible\n    image: kubespray\n";
    k.apply_stdin(&["apply", "-f", "-"], pod).await;
    let running = r#"{"status":{"phase":"Running","podIP":"127.0.0.1","podIPs":[{"ip":"127.0.0.1"}],
        "conditions":[{"type":"Ready","status":"True"}],
        "containerStatuses":[{"name":"ansible","image":"kubespray","imageID":"","ready":true,"restartCount":0,
            "started":true,"state":{"running":{"startedAt":"2026-01-01T00:00:00Z"}}}]}}"#;
    k.ok(&[
        "patch",
        "pod",
        "run-local",
        "--subresource=status",
        "--type=merge",
        "-p",
        running,
    ])
    .await;
    server.start_job("default", "run").await.unwrap();

    let pods = tools::kubectl_table(&k.ok(&["get", "pods"]).await);
    assert_eq!(
        pods[0],
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{pods:?}"
    );
    assert_eq!(&pods[1][..4], ["run-local", "1/1", "Running", "0"], "{pods:?}");
    let wide = tools::kubectl_table(&k.ok(&["get", "pods", "-o", "wide"]).await);
    assert_eq!(
        &wide[0][5..],
        ["IP", "NODE", "NOMINATED NODE", "READINESS GATES"],
        "{wide:?}"
    );
    assert_eq!(
        &wide[1][5..],
        ["127.0.0.1", "localhost", "<none>", "<none>"],
        "{wide:?}"
    );
    let jobs = tools::kubectl_table(&k.ok(&["get", "jobs"]).await);
    assert_eq!(
        jobs[0],
        ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"],
        "{jobs:?}"
    );
    assert_eq!(&jobs[1][..3], ["run", "Running", "0/1"], "{jobs:?}");

    let exited = r#"{"status":{"phase":"Failed","conditions":[{"type":"Ready","status":"False","reason":"PodFailed"}],
        "containerStatuses":[{"name":"ansible","image":"kubespray","imageID":"","ready":false,"restartCount":0,
            "started":false,"state":{"terminated":{"exitCode":2,"reason":"Error"}}}]}}"#;
    k.ok(&[
        "patch",
        "pod",
        "run-local",
        "--subresource=status",
        "--type=merge",
        "-p",
        exited,
    ])
    .await;
    server
        .fail_job(
            "default",
            "run",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        )
        .await
        .unwrap();
    let pods = tools::kubectl_table(&k.ok(&["get", "pods"]).await);
    assert_eq!(&pods[1][..4], ["run-local", "0/1", "Error", "0"], "{pods:?}");
    let jobs = tools::kubectl_table(&k.ok(&["get", "jobs", "-o", "wide"]).await);
    assert_eq!(
        jobs[0],
        [
            "NAME",
            "STATUS",
            "COMPLETIONS",
            "DURATION",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ],
        "{jobs:?}"
    );
    assert_eq!(&jobs[1][..3], ["run", "Failed", "0/1"], "{jobs:?}");
    assert!(
        jobs[1][7].starts_with("batch.kubernetes.io/controller-uid="),
        "{jobs:?}"
    );
}

#[tokio::test]
async fn kubectl_logs_of_a_job_finds_its_pod_and_follows_it() {
    if !tools::kubectl_or_skip("kubectl_logs_of_a_job_finds_its_pod_and_follows_it") {
        return;
    }
    let server = ApiServer::start().await.unwrap();
    let k = Kubectl::for_server(&server);
    let job = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: run\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: ansible\n        image: kubespray\n";
    k.apply_stdin(&["apply", "-f", "-"], job).await;
    let uid = k
        .ok(&["get", "job", "run", "-o", "jsonpath={.metadata.uid}"])
        .await;
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: run-local\n  labels:\n    batch.kubernetes.io/controller-uid: {uid}\n    batch.kubernetes.io/job-name: run\nspec:\n  nodeName: localhost\n  restartPolicy: Never\n  containers:\n  - name: ansible\n    image: kubespray\n"
    );
    k.apply_stdin(&["apply", "-f", "-"], &pod).await;
    server.append_pod_log("default", "run-local", "PLAY [all]\nTASK [ping]\n");

    assert_eq!(k.ok(&["logs", "job/run"]).await, "PLAY [all]\nTASK [ping]\n");
    assert_eq!(k.ok(&["logs", "job/run", "--tail=1"]).await, "TASK [ping]\n");
    assert_eq!(k.ok(&["logs", "pod/run-local", "--limit-bytes=4"]).await, "PLAY");
    let stamped = k.ok(&["logs", "run-local", "--timestamps", "--tail=1"]).await;
    let (stamp, line) = stamped.split_once(' ').unwrap();
    assert!(
        stamp.parse::<jiff::Timestamp>().is_ok() && line == "TASK [ping]\n",
        "{stamped}"
    );
    let (ok, _, err) = k.output(&["logs", "job/run", "--previous"]).await;
    assert!(
        !ok && err.contains("previous terminated container \"ansible\" in pod \"run-local\" not found"),
        "{err}"
    );

    let mut follow = k.watch(&["logs", "-f", "job/run"]);
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    wait_line(&mut lines, |l| l == "TASK [ping]").await;
    server.append_pod_log("default", "run-local", "PLAY RECAP\n");
    wait_line(&mut lines, |l| l == "PLAY RECAP").await;
    server.end_pod_log("default", "run-local");
    let status = tokio::time::timeout(LIMIT, follow.wait())
        .await
        .expect("kubectl logs -f ends with the run")
        .unwrap();
    assert!(status.success(), "{status}");
}
