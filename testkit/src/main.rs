//! `kok-testkit serve [--port P] [--kubeconfig-out FILE] [--data-dir DIR]`: runs the API server until
//! Ctrl-C, in memory or persisted to DIR.

use anyhow::{bail, Context};

fn usage() -> &'static str {
    "usage: kok-testkit serve [--port P] [--kubeconfig-out FILE] [--data-dir DIR]"
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some("serve") {
        bail!("{}", usage());
    }
    let mut port = 0u16;
    let mut out: Option<String> = None;
    let mut data_dir: Option<std::path::PathBuf> = None;
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--port" => {
                let p = it
                    .next()
                    .with_context(|| format!("--port needs a value; {}", usage()))?;
                port = p
                    .parse()
                    .with_context(|| format!("--port {p:?} is not a port number"))?;
            }
            "--kubeconfig-out" => {
                out = Some(
                    it.next()
                        .with_context(|| format!("--kubeconfig-out needs a file; {}", usage()))?
                        .clone(),
                )
            }
            "--data-dir" => {
                data_dir = Some(
                    it.next()
                        .with_context(|| format!("--data-dir needs a directory; {}", usage()))?
                        .into(),
                )
            }
            "-h" | "--help" => {
                println!("{}", usage());
                return Ok(());
            }
            other => bail!("unknown argument {other:?}; {}", usage()),
        }
    }
    let server = testkit::ApiServer::start_with(testkit::Options {
        port,
        data_dir,
        ..testkit::Options::default()
    })
    .await?;
    if let Some(path) = &out {
        std::fs::write(path, testkit::kubeconfig_yaml(&server.url()))
            .with_context(|| format!("writing the kubeconfig to {path}"))?;
        println!("kubeconfig written to {path}");
    }
    println!("serving the Kubernetes API on {}", server.url());
    tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
    Ok(())
}
