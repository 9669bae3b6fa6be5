//! Benchmark of the git source on generated repositories (default 1,000 and 10,000 clusters; set
//! `KOK_BENCH_SIZES=100,1000` to choose): cold clone + full parse, no-op poll, one-cluster-changed
//! diff + parse, its attribution, the three together as a pass reads them (first pass, and after a
//! pass that read the previous commit; fastest of 25 rounds), and the same change handled by re-reading the whole tree, as
//! a ratio.

use std::time::{Duration, Instant};

use git2::{Oid, Repository, Signature};
use kok::layout;
use kok::source::{GitTree, Poll, Source, SourceConfig};

const HOSTS: &str = "all:\n  hosts:\n    node1:\n      ansible_host: 10.0.0.1\n  children:\n    kube_control_plane:\n      hosts:\n        node1:\n";

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Builds a cluster tree: hosts.yml (shared blob), vars.yml and operations.yml (unique).
fn cluster_tree(repo: &Repository, hosts: Oid, name: &str, generation: u32) -> BenchResult<Oid> {
    let vars = repo.blob(format!("cluster_name: {name}\ngeneration: {generation}\n").as_bytes())?;
    let ops = repo.blob(
        format!(
            "- id: install\n  action: cluster.yml\n- id: gen{generation}\n  action: upgrade-cluster.yml\n"
        )
        .as_bytes(),
    )?;
    let mut tb = repo.treebuilder(None)?;
    tb.insert("hosts.yml", hosts, 0o100644)?;
    tb.insert("vars.yml", vars, 0o100644)?;
    tb.insert("operations.yml", ops, 0o100644)?;
    Ok(tb.write()?)
}

/// A bare repository with `n` clusters on `main` (commit 1) and a second commit changing one of them.
fn generate(path: &std::path::Path, n: usize) -> BenchResult<(Oid, Oid)> {
    let repo = Repository::init_bare(path)?;
    let hosts = repo.blob(HOSTS.as_bytes())?;
    let mut clusters = repo.treebuilder(None)?;
    for i in 0..n {
        let name = format!("c{i:05}");
        clusters.insert(&name, cluster_tree(&repo, hosts, &name, 0)?, 0o040000)?;
    }
    let kok_yml = repo.blob(b"historyLimit: 10\n")?;
    let top = |clusters_tree: Oid| -> BenchResult<Oid> {
        let mut tb = repo.treebuilder(None)?;
        tb.insert("clusters", clusters_tree, 0o040000)?;
        tb.insert("kok.yml", kok_yml, 0o100644)?;
        Ok(tb.write()?)
    };
    let sig = Signature::now("bench", "bench@example.com")?;
    let tree1 = repo.find_tree(top(clusters.write()?)?)?;
    let c1 = repo.commit(None, &sig, &sig, "generated", &tree1, &[])?;
    let changed = format!("c{:05}", n / 2);
    clusters.insert(&changed, cluster_tree(&repo, hosts, &changed, 1)?, 0o040000)?;
    let tree2 = repo.find_tree(top(clusters.write()?)?)?;
    let parent = repo.find_commit(c1)?;
    let c2 = repo.commit(None, &sig, &sig, "change one cluster", &tree2, &[&parent])?;
    repo.reference("refs/heads/main", c1, true, "bench")?;
    repo.set_head("refs/heads/main")?;
    Ok((c1, c2))
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

/// Rounds of each pass's read measured.
const PASS_ROUNDS: usize = 25;

/// Fastest and median time of `round`, which marks the start and end of what it measures: on a busy
/// machine the fastest round is the one that waited least for a core.
fn fastest_and_median(
    rounds: usize,
    mut round: impl FnMut(&mut dyn FnMut()) -> BenchResult<()>,
) -> BenchResult<(Duration, Duration)> {
    let mut marks = Vec::new();
    for _ in 0..rounds {
        round(&mut || marks.push(Instant::now()))?;
    }
    let mut times: Vec<Duration> = marks.chunks(2).map(|m| m[1] - m[0]).collect();
    times.sort();
    Ok((times[0], times[times.len() / 2]))
}

fn bench(n: usize) -> BenchResult<()> {
    let dir = tempfile::tempdir()?;
    let remote = dir.path().join("remote.git");
    let started = Instant::now();
    let (c1, c2) = generate(&remote, n)?;
    println!("\n== {n} clusters (generated in {})", ms(started.elapsed()));

    let cache = dir.path().join("cache");
    let url = format!("file://{}", remote.display());
    let started = Instant::now();
    let mut source = Source::open(SourceConfig::new(url, "main", &cache))?;
    let first = source.poll(None)?.commit();
    let fetched = started.elapsed();
    let parsed = layout::parse_repo(&GitTree::at_commit(source.repository(), first)?, "clusters");
    let cold = started.elapsed();
    assert_eq!(
        parsed.clusters.len(),
        n,
        "every generated cluster parses: {:?}",
        parsed.diagnostics.first()
    );
    println!(
        "cold clone + full parse:         {} (fetch {})",
        ms(cold),
        ms(fetched)
    );

    let rounds = 20;
    let started = Instant::now();
    for _ in 0..rounds {
        match source.poll(Some(c1))? {
            Poll::Unchanged { .. } => {}
            Poll::Changed { .. } => return Err("no-op poll saw a change".into()),
        }
    }
    println!(
        "no-op poll (mean of {rounds}):        {}",
        ms(started.elapsed() / rounds)
    );

    Repository::open_bare(&remote)?.reference("refs/heads/main", c2, true, "bench")?;
    let started = Instant::now();
    let new = source.poll(Some(c1))?.commit();
    println!("fetch of the one-cluster change: {}", ms(started.elapsed()));

    let started = Instant::now();
    let changes = source.diff(Some(c1), new, "clusters")?;
    let diff_time = started.elapsed();
    let touched = changes.touched();
    let incremental = layout::parse_clusters(&source.tree(new)?, "clusters", &touched);
    let incremental_time = started.elapsed();
    assert_eq!(incremental.clusters.len(), 1);
    println!(
        "one-cluster diff + parse:        {} ({} changed; diff alone {})",
        ms(incremental_time),
        touched.len(),
        ms(diff_time)
    );

    let started = Instant::now();
    let introduced = kok::source::attribute(source.repository(), Some(c1), new, "clusters", &touched)?;
    println!(
        "attribution of its operations:   {} ({} new)",
        ms(started.elapsed()),
        introduced.len()
    );

    // Several rounds: one round at 10,000 clusters lasts milliseconds, less than the noise of a shared
    // machine. In the service the previous pass read `c1`, so its cluster root is the one kept.
    let pass_read = |after_a_pass_at_c1: bool| {
        fastest_and_median(PASS_ROUNDS, |mark| {
            kok::source::forget_recent_trees();
            if after_a_pass_at_c1 {
                source.diff(None, c1, "clusters")?;
            }
            mark();
            let read = kok::source::read_commit(source.repository(), Some(c1), new, "clusters", false)?;
            mark();
            assert_eq!(read.parsed.clusters.len(), 1);
            Ok(())
        })
    };
    let (first, first_median) = pass_read(false)?;
    println!(
        "the pass's read, first one:      {} (median {}; both cluster roots read)",
        ms(first),
        ms(first_median)
    );
    let (next, next_median) = pass_read(true)?;
    println!(
        "the pass's read (all three):     {} (median {}; old cluster root kept from the last pass)",
        ms(next),
        ms(next_median)
    );

    let started = Instant::now();
    let whole = layout::parse_repo(&GitTree::at_commit(source.repository(), new)?, "clusters");
    let whole_time = started.elapsed();
    assert_eq!(whole.clusters.len(), n);
    println!("whole-tree re-read + parse:      {}", ms(whole_time));
    println!(
        "ratio whole / incremental:       {:.0}x",
        whole_time.as_secs_f64() / incremental_time.as_secs_f64().max(1e-9)
    );
    Ok(())
}

fn main() -> BenchResult<()> {
    let sizes = std::env::var("KOK_BENCH_SIZES").unwrap_or_else(|_| "1000,10000".to_string());
    for size in sizes.split(',').filter(|s| !s.trim().is_empty()) {
        bench(size.trim().parse()?)?;
    }
    Ok(())
}
