//! Throughput of the testkit API server: creates, gets, lists and watch delivery with many objects.
//!
//! Run with `cargo bench -p testkit`; `KOK_BENCH_OBJECTS` sets the object count (default 100,000).

use std::time::Instant;

use futures::{stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, ObjectMeta, PostParams, WatchEvent, WatchParams};
use testkit::{ApiServer, Options};

const CONCURRENCY: usize = 32;

fn cm(i: usize) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("bench-{i:06}")),
            labels: Some([("shard".to_string(), (i % 10).to_string())].into()),
            ..Default::default()
        },
        data: Some([("value".to_string(), i.to_string())].into()),
        ..Default::default()
    }
}

fn rate(n: usize, secs: f64) -> String {
    format!("{n} in {secs:.2}s = {:.0}/s", n as f64 / secs)
}

fn main() -> anyhow::Result<()> {
    let n: usize = std::env::var("KOK_BENCH_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let server = ApiServer::start_with(Options {
            event_window: 200_000,
            ..Options::default()
        })
        .await?;
        let api: Api<ConfigMap> = Api::default_namespaced(server.client());

        let watch_api = api.clone();
        let rv = server.resource_version().to_string();
        let watcher = tokio::spawn(async move {
            let wp = WatchParams::default().disable_bookmarks().timeout(3600);
            let mut events = watch_api.watch(&wp, &rv).await?.boxed();
            let mut seen = 0usize;
            while let Some(ev) = events.try_next().await? {
                if matches!(ev, WatchEvent::Added(_)) {
                    seen += 1;
                    if seen == n {
                        break;
                    }
                }
            }
            anyhow::Ok(Instant::now())
        });

        let start = Instant::now();
        stream::iter(0..n)
            .map(|i| {
                let api = api.clone();
                async move { api.create(&PostParams::default(), &cm(i)).await }
            })
            .buffer_unordered(CONCURRENCY)
            .try_for_each(|_| async { Ok(()) })
            .await?;
        let created = start.elapsed().as_secs_f64();
        println!("create:        {}", rate(n, created));
        let watched_at = watcher.await??;
        println!(
            "watch events:  {} (ADDED delivered to one watcher)",
            rate(n, (watched_at - start).as_secs_f64())
        );

        let gets = n.min(20_000);
        let start = Instant::now();
        stream::iter(0..gets)
            .map(|i| {
                let api = api.clone();
                async move { api.get(&format!("bench-{:06}", (i * 7919) % n)).await }
            })
            .buffer_unordered(CONCURRENCY)
            .try_for_each(|_| async { Ok(()) })
            .await?;
        println!("get:           {}", rate(gets, start.elapsed().as_secs_f64()));

        let start = Instant::now();
        let all = api.list(&ListParams::default()).await?;
        println!(
            "list all:      {} objects in {:.2}s",
            all.items.len(),
            start.elapsed().as_secs_f64()
        );

        let start = Instant::now();
        let mut pages = 0;
        let mut lp = ListParams::default().limit(500);
        loop {
            let page = api.list(&lp).await?;
            pages += 1;
            match page.metadata.continue_ {
                Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
                _ => break,
            }
        }
        println!(
            "paged list:    {pages} pages of 500 in {:.2}s",
            start.elapsed().as_secs_f64()
        );

        let start = Instant::now();
        let shard = api.list(&ListParams::default().labels("shard=3")).await?;
        println!(
            "label select:  {} of {n} in {:.2}s",
            shard.items.len(),
            start.elapsed().as_secs_f64()
        );
        println!("requests counted: {}", server.requests().total());
        anyhow::Ok(())
    })
}
