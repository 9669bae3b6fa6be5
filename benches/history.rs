//! Benchmark of `kok history`: the real `kok` binary reading the changelog of one cluster in a
//! generated repository (default 1,000 clusters and 10,000 commits, every commit changing one cluster
//! and carrying a `refs/notes/kok` note, as a long-lived fleet repository does). It measures the first
//! call (which clones the repository into the cache), the next ones (fetch nothing, walk, join the
//! notes), and the same with `--output json`, prints them beside the target (≤ 2 s), and asserts
//! nothing about time.
//!
//! Environment: `KOK_HISTORY_CLUSTERS` (default 1000), `KOK_HISTORY_COMMITS` (default 10000),
//! `KOK_HISTORY_DIR` (where the repository is generated and kept for the next run; default a
//! temporary directory). The binary measured is the one built with the bench: `cargo test --bench
//! history` measures the debug build, `cargo bench --bench history` the release one.

#[allow(dead_code)]
#[path = "../tests/integration/common/kok.rs"]
mod kok_cli;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

const HOSTS: &str = "all:\n  hosts:\n    node1:\n      ansible_host: 10.0.0.1\n  children:\n    kube_control_plane:\n      hosts:\n        node1:\n";
/// The target of issue 30: history of one cluster at this size answers within it.
const TARGET: Duration = Duration::from_secs(2);
/// Rounds of each warm measurement; the fastest is printed with the median.
const ROUNDS: usize = 5;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cluster(i: usize) -> String {
    format!("c{i:05}")
}

/// `data` command of a fast-import stream.
fn data(out: &mut impl Write, text: &str) -> std::io::Result<()> {
    write!(out, "data {}\n{text}\n", text.len())
}

/// A bare repository of `clusters` clusters (commit 1) and `commits - 1` more commits, commit `i`
/// changing cluster `i % clusters` (its vars, and every third round its operations), each commit with
/// a note holding `kok/sync` and the run of the changed cluster's operation; written in one pack by
/// `git fast-import`.
fn generate(path: &Path, clusters: usize, commits: usize) -> BenchResult<()> {
    let status = Command::new("git")
        .args(["init", "-q", "--bare", "-b", "main"])
        .arg(path)
        .status()?;
    if !status.success() {
        return Err("git init failed".into());
    }
    let mut child = Command::new("git")
        .args(["fast-import", "--quiet"])
        .current_dir(path)
        .stdin(Stdio::piped())
        .spawn()?;
    let mut out = std::io::BufWriter::new(child.stdin.take().ok_or("no stdin")?);
    writeln!(out, "blob\nmark :1")?;
    data(&mut out, HOSTS)?;
    let base = 1_700_000_000u64;
    for c in 1..=commits {
        writeln!(out, "commit refs/heads/main\nmark :{}", c + 1)?;
        writeln!(
            out,
            "committer bench <bench@example.com> {} +0000",
            base + c as u64 * 60
        )?;
        let changed = cluster(c % clusters);
        if c == 1 {
            data(&mut out, "generated")?;
            for i in 0..clusters {
                let name = cluster(i);
                writeln!(out, "M 100644 :1 clusters/{name}/hosts.yml")?;
                writeln!(out, "M 100644 inline clusters/{name}/vars.yml")?;
                data(&mut out, &format!("cluster_name: {name}\ngeneration: 0\n"))?;
                writeln!(out, "M 100644 inline clusters/{name}/operations.yml")?;
                data(&mut out, "- id: install\n  action: cluster.yml\n")?;
            }
        } else {
            data(&mut out, &format!("{changed}: change {c}"))?;
            writeln!(out, "from :{c}")?;
            writeln!(out, "M 100644 inline clusters/{changed}/vars.yml")?;
            data(&mut out, &format!("cluster_name: {changed}\ngeneration: {c}\n"))?;
            if (c / clusters.max(1)).is_multiple_of(3) {
                writeln!(out, "M 100644 inline clusters/{changed}/operations.yml")?;
                data(
                    &mut out,
                    &format!("- id: install\n  action: cluster.yml\n  rerun: {c}\n"),
                )?;
            }
        }
    }
    writeln!(out, "commit refs/notes/kok")?;
    writeln!(
        out,
        "committer kok <kok@localhost> {} +0000",
        base + commits as u64 * 60 + 60
    )?;
    data(&mut out, "kok: commit statuses")?;
    for c in 1..=commits {
        let changed = cluster(c % clusters);
        writeln!(out, "N inline :{}", c + 1)?;
        data(
            &mut out,
            &format!(
                "kok/sync: success 2026-11-22T00:00:00Z - materialized 1 cluster\n\
                 kok/{changed}/install: success 2026-11-22T00:01:00Z - succeeded in 1m: 1 host, 2 changed\n"
            ),
        )?;
    }
    out.flush()?;
    drop(out);
    if !child.wait()?.success() {
        return Err("git fast-import failed".into());
    }
    Ok(())
}

/// Runs `kok history <cluster>` on `repo` with `cache`; returns its time and output size.
fn history(repo: &Path, cache: &Path, cluster: &str, extra: &[&str]) -> BenchResult<(Duration, usize)> {
    let repo = repo.to_string_lossy();
    let args: Vec<&str> = ["history", cluster, "--repo", &repo]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    let started = Instant::now();
    let (ok, stdout, stderr) = kok_cli::kok(&args, cache);
    let took = started.elapsed();
    if !ok {
        return Err(format!("kok history failed: {stderr}").into());
    }
    Ok((took, stdout.len()))
}

fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

fn main() -> BenchResult<()> {
    let clusters = env_usize("KOK_HISTORY_CLUSTERS", 1000);
    let commits = env_usize("KOK_HISTORY_COMMITS", 10_000);
    let temp = tempfile::tempdir()?;
    let dir = std::env::var_os("KOK_HISTORY_DIR").map_or_else(|| temp.path().to_path_buf(), PathBuf::from);
    let repo = dir.join(format!("repo-{clusters}x{commits}.git"));
    if !repo.exists() {
        let started = Instant::now();
        generate(&repo, clusters, commits)?;
        eprintln!(
            "generated {clusters} clusters × {commits} commits with notes in {}",
            secs(started.elapsed())
        );
    }
    // The cluster changed longest ago: its last change is the furthest walk from the tip.
    let name = cluster((commits + 1) % clusters);
    let cache = tempfile::tempdir_in(&dir)?;
    let cache = cache.path();
    let (cold, size) = history(&repo, cache, &name, &[])?;
    println!("binary: {}", env!("CARGO_BIN_EXE_kok"));
    println!(
        "kok history {name}, {clusters} clusters × {commits} commits (target ≤ {}):",
        secs(TARGET)
    );
    println!(
        "  first call (clones into the cache): {} ({size} bytes)",
        secs(cold)
    );
    for (label, extra) in [("text", &[][..]), ("--output json", &["--output", "json"][..])] {
        let mut times = Vec::new();
        for _ in 0..ROUNDS {
            times.push(history(&repo, cache, &name, extra)?.0);
        }
        times.sort();
        let verdict = if times[ROUNDS / 2] <= TARGET {
            "within"
        } else {
            "ABOVE"
        };
        println!(
            "  {label}: fastest {}, median {} ({verdict} the target)",
            secs(times[0]),
            secs(times[ROUNDS / 2])
        );
    }
    Ok(())
}
