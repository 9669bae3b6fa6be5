//! Leader election on a coordination.k8s.io Lease, so that two replicas never both reconcile.
//!
//! The Lease is taken when it is absent, released, or not renewed within its duration; every
//! write carries the resourceVersion that was read, so two candidates racing for an expired
//! Lease cannot both win. The holder renews every third of the duration and gives the Lease
//! up on shutdown, so a standby takes over at once instead of waiting for expiry.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::Api;
use tokio::sync::watch;
use tracing::{info, warn};

/// Name of the Lease kok elects its leader on.
pub const LEASE_NAME: &str = "kok-leader";

/// How a replica takes part in the election.
#[derive(Clone, Debug)]
pub struct LeaderConfig {
    /// Namespace of the Lease (kok's namespace).
    pub namespace: String,
    /// Name of the Lease.
    pub lease_name: String,
    /// This replica's identity, unique among replicas (pod name, or host name and pid).
    pub identity: String,
    /// How long a Lease stays valid without renewal.
    pub lease_duration: Duration,
}

impl LeaderConfig {
    /// A configuration with kok's Lease name and a 15 s duration.
    pub fn new(namespace: impl Into<String>, identity: impl Into<String>) -> Self {
        LeaderConfig {
            namespace: namespace.into(),
            lease_name: LEASE_NAME.to_string(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
        }
    }

    fn retry_period(&self) -> Duration {
        self.lease_duration / 3
    }
}

/// Failure to talk to the API server about the Lease.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// Reading, creating or updating the Lease failed for a reason other than losing a race.
    #[error("updating Lease {namespace}/{name} failed: {source}")]
    UpdateLease {
        /// Namespace of the Lease.
        namespace: String,
        /// Name of the Lease.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// What one election round found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Round {
    /// This replica holds the Lease (newly taken or renewed).
    Leading,
    /// Another replica holds a Lease that has not expired.
    Following {
        /// Identity of the holder.
        holder: String,
    },
}

/// The identity this process uses by default: `$POD_NAME`, else the host name, plus the pid.
pub fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME") {
        if !pod.is_empty() {
            return pod;
        }
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "kok".to_string());
    format!("{host}-{}", std::process::id())
}

fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 409)
}

fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

/// True when `lease` is held by someone who renewed it within its duration, as of `now`.
pub fn is_held(lease: &LeaseSpec, now: jiff::Timestamp) -> bool {
    let holder = lease.holder_identity.as_deref().unwrap_or("");
    if holder.is_empty() {
        return false;
    }
    let Some(renewed) = lease.renew_time.as_ref() else {
        return false;
    };
    let duration = i64::from(lease.lease_duration_seconds.unwrap_or(0));
    match renewed.0.checked_add(jiff::SignedDuration::from_secs(duration)) {
        Ok(expiry) => expiry > now,
        Err(_) => true,
    }
}

/// One election round: create, renew or take over the Lease if possible.
pub async fn try_lead(api: &Api<Lease>, cfg: &LeaderConfig) -> Result<Round, LeaderError> {
    let err = |source| LeaderError::UpdateLease {
        namespace: cfg.namespace.clone(),
        name: cfg.lease_name.clone(),
        source,
    };
    let now = jiff::Timestamp::now();
    let duration = i32::try_from(cfg.lease_duration.as_secs()).unwrap_or(i32::MAX);
    let existing = match api.get(&cfg.lease_name).await {
        Ok(lease) => Some(lease),
        Err(e) if is_not_found(&e) => None,
        Err(e) => return Err(err(e)),
    };
    let Some(mut lease) = existing else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(cfg.lease_name.clone()),
                namespace: Some(cfg.namespace.clone()),
                labels: Some(
                    [(
                        crate::api::LABEL_MANAGED_BY.to_string(),
                        crate::api::MANAGED_BY.to_string(),
                    )]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(cfg.identity.clone()),
                lease_duration_seconds: Some(duration),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(Round::Leading),
            Err(e) if is_conflict(&e) => Ok(Round::Following {
                holder: String::new(),
            }),
            Err(e) => Err(err(e)),
        };
    };
    let mut spec = lease.spec.take().unwrap_or_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder != cfg.identity {
        if is_held(&spec, now) {
            return Ok(Round::Following { holder });
        }
        spec.holder_identity = Some(cfg.identity.clone());
        spec.acquire_time = Some(MicroTime(now));
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.renew_time = Some(MicroTime(now));
    spec.lease_duration_seconds = Some(duration);
    lease.spec = Some(spec);
    // The resourceVersion read above makes this a compare-and-swap: a racing candidate gets 409.
    match api.replace(&cfg.lease_name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(Round::Leading),
        Err(e) if is_conflict(&e) => Ok(Round::Following { holder }),
        Err(e) => Err(err(e)),
    }
}

/// Gives the Lease up if this replica holds it, so a standby can take over at once.
pub async fn release(api: &Api<Lease>, cfg: &LeaderConfig) -> Result<(), LeaderError> {
    let err = |source| LeaderError::UpdateLease {
        namespace: cfg.namespace.clone(),
        name: cfg.lease_name.clone(),
        source,
    };
    let mut lease = match api.get(&cfg.lease_name).await {
        Ok(lease) => lease,
        Err(e) if is_not_found(&e) => return Ok(()),
        Err(e) => return Err(err(e)),
    };
    let Some(spec) = lease.spec.as_mut() else {
        return Ok(());
    };
    if spec.holder_identity.as_deref() != Some(cfg.identity.as_str()) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.renew_time = None;
    match api.replace(&cfg.lease_name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(()),
        Err(e) if is_conflict(&e) || is_not_found(&e) => Ok(()),
        Err(e) => Err(err(e)),
    }
}

/// Waits until this replica leads, then keeps renewing in the background.
///
/// The returned receiver turns `false` when leadership is lost (the Lease could not be renewed
/// within its duration, or another replica took it); the service must then stop reconciling.
pub async fn lead(client: kube::Client, cfg: LeaderConfig) -> Result<Leadership, LeaderError> {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut last_holder = None;
    loop {
        match try_lead(&api, &cfg).await {
            Ok(Round::Leading) => break,
            Ok(Round::Following { holder }) => {
                if last_holder.as_ref() != Some(&holder) {
                    info!(lease = %cfg.lease_name, %holder, "another replica leads; standing by");
                    last_holder = Some(holder);
                }
            }
            Err(e) => warn!(error = %e, "leader election round failed"),
        }
        tokio::time::sleep(cfg.retry_period()).await;
    }
    info!(lease = %cfg.lease_name, identity = %cfg.identity, "became leader");
    let (tx, rx) = watch::channel(true);
    let renew_api = api.clone();
    let renew_cfg = cfg.clone();
    let task = tokio::spawn(async move {
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(renew_cfg.retry_period()).await;
            match try_lead(&renew_api, &renew_cfg).await {
                Ok(Round::Leading) => last_renewal = tokio::time::Instant::now(),
                Ok(Round::Following { holder }) => {
                    warn!(%holder, "leadership lost to another replica");
                    let _ = tx.send(false);
                    return;
                }
                Err(e) => {
                    warn!(error = %e, "renewing the leader Lease failed");
                    if last_renewal.elapsed() >= renew_cfg.lease_duration {
                        let _ = tx.send(false);
                        return;
                    }
                }
            }
        }
    });
    Ok(Leadership {
        api,
        cfg,
        leading: rx,
        task,
    })
}

/// Held leadership: renewal runs until [`Leadership::step_down`] or until it is lost.
pub struct Leadership {
    api: Api<Lease>,
    cfg: LeaderConfig,
    leading: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Leadership {
    /// A receiver that turns `false` when leadership is lost.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// Resolves when leadership is lost.
    pub async fn lost(&mut self) {
        while *self.leading.borrow() {
            if self.leading.changed().await.is_err() {
                return;
            }
        }
    }

    /// Stops renewing and releases the Lease.
    pub async fn step_down(self) -> Result<(), LeaderError> {
        self.task.abort();
        release(&self.api, &self.cfg).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: &str, renewed_secs_ago: i64, duration: i32) -> (LeaseSpec, jiff::Timestamp) {
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let renewed = now
            .checked_sub(jiff::SignedDuration::from_secs(renewed_secs_ago))
            .unwrap();
        let spec = LeaseSpec {
            holder_identity: Some(holder.to_string()),
            renew_time: Some(MicroTime(renewed)),
            lease_duration_seconds: Some(duration),
            ..LeaseSpec::default()
        };
        (spec, now)
    }

    #[test]
    fn a_recently_renewed_lease_is_held() {
        let (spec, now) = spec("a", 5, 15);
        assert!(is_held(&spec, now));
    }

    #[test]
    fn a_lease_not_renewed_within_its_duration_is_free() {
        let (spec, now) = spec("a", 16, 15);
        assert!(!is_held(&spec, now));
    }

    #[test]
    fn a_released_lease_is_free() {
        let (mut spec, now) = spec("a", 1, 15);
        spec.holder_identity = None;
        assert!(!is_held(&spec, now));
    }
}
