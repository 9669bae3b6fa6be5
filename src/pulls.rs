//! Pull requests in the service: `kok/plan` on every open pull request's head, and with
//! `--pr-comments` one comment per pull request holding the markdown plan.
//!
//! - The poll's one ref listing names the heads (`refs/pull/N/head`, `refs/merge-requests/N/head`);
//!   a `pull_request` / `merge_request` webhook asks for that poll at once and says which pull
//!   requests closed.
//! - A head is planned when it is new or moved, or when the reconciled commit moved: the plan reads
//!   what merging the head into the reconciled commit would give (the head itself when it is a
//!   fast-forward, else a merge commit built in the git cache, as the forge's test merge) and starts
//!   from the live objects (the service's watch caches), so it says what the merge would make kok
//!   write and run.
//! - A pull request is only parsed and rendered: nothing of it is written to the meta-cluster, no
//!   Secret is read and nothing runs. Its statuses go to the same sinks as the others (git notes
//!   and the forge); one that is not delivered is sent again at the next poll.
//! - A pull request whose ref is gone, whose head is already in the reconciled history (merged), or
//!   that a webhook said was closed, is forgotten; a later push to it brings it back.

use std::collections::BTreeMap;
use std::sync::Arc;

use git2::Oid;
use kube::Client;
use tracing::{debug, info, warn};

use crate::api::{CommitStatus, StatusState};
use crate::controller::live::LiveCache;
use crate::plan::{self, Plan, PlanError, Prepared, PLAN_CONTEXT};
use crate::reconcile::{with_source, PassError, SharedSource};
use crate::report::comments::{PlanComment, PlanComments};
use crate::report::Sinks;
use crate::source::trigger::PullEvent;
use crate::source::{in_history, merge_target, MergeTarget, PullRequestHead};

/// Most pull requests planned in one poll round; the rest wait for the next round (which the
/// service asks for at once), so a push to the main branch is never held up for long.
pub const MAX_PLANS_PER_ROUND: usize = 8;

/// What planning a pull request needs to know of the service.
#[derive(Clone, Debug)]
pub struct PullConfig {
    /// kok's namespace.
    pub namespace: String,
    /// Root directory of the cluster directories.
    pub root: String,
    /// Short name of the branch kok reconciles (`main`), as the render names it.
    pub branch: String,
    /// The plan comments, with `--pr-comments`.
    pub comments: Option<Arc<PlanComments>>,
}

/// What planning reads and reports through: the meta-cluster (read only), the git source and the sinks.
#[derive(Clone, Copy)]
pub struct PullIo<'a> {
    /// The meta-cluster, for the live objects a plan starts from.
    pub client: &'a Client,
    /// The service's watch caches of those objects, read instead of listing when given.
    pub live: Option<&'a LiveCache>,
    /// The git source.
    pub source: &'a SharedSource,
    /// Where `kok/plan` goes.
    pub sinks: &'a Sinks,
}

/// What kok last did for one open pull request.
#[derive(Clone, Debug)]
struct Tracked {
    head: Oid,
    base: Option<Oid>,
    /// The `kok/plan` status delivered on `head`.
    delivered: Option<CommitStatus>,
    comment: Option<PlanComment>,
    /// Planned for `(head, base)`, status delivered and comment kept.
    done: bool,
}

/// Why planning one pull request stopped; it is planned again at the next poll.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// Fetching or reading its commits failed.
    #[error(transparent)]
    Source(#[from] PassError),
    /// The plan could not be made.
    #[error(transparent)]
    Plan(#[from] PlanError),
}

/// The plan of one pull request head, ready to report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullPlan {
    /// The `kok/plan` status.
    pub status: CommitStatus,
    /// The markdown for the comment.
    pub markdown: String,
    /// The plan as text (what the web view shows on the head's commit page).
    pub text: String,
}

/// The open pull requests kok knows of, in memory: after a restart every head is planned again
/// (equal statuses are harmless to every sink, and the comment is found by its marker).
#[derive(Debug, Default)]
pub struct PullRequests {
    tracked: BTreeMap<u64, Tracked>,
    /// Pull requests a webhook said were closed, with the head it named.
    closed: BTreeMap<u64, Option<String>>,
    /// Heads already in the reconciled history (merged pull requests whose ref the forge keeps),
    /// skipped while they stay the same.
    merged: BTreeMap<u64, Oid>,
}

impl PullRequests {
    /// Nothing known yet.
    pub fn new() -> Self {
        PullRequests::default()
    }

    /// One round: takes the webhook `events`, forgets the pull requests that are gone or closed, sets
    /// the merged ones aside, and plans up to [`MAX_PLANS_PER_ROUND`] heads of `heads` against `base`
    /// (the reconciled commit). Returns true when heads are left and this round made progress, so
    /// another round may follow at once.
    pub async fn round(
        &mut self,
        io: PullIo<'_>,
        cfg: &PullConfig,
        heads: &[PullRequestHead],
        base: Option<Oid>,
        events: Vec<PullEvent>,
    ) -> bool {
        for event in events {
            if event.closed {
                self.closed.insert(event.number, event.head);
            } else {
                self.closed.remove(&event.number);
            }
        }
        let open: BTreeMap<u64, &PullRequestHead> = heads
            .iter()
            .filter(|h| !self.is_closed(h))
            .map(|h| (h.number, h))
            .collect();
        self.closed
            .retain(|number, _| heads.iter().any(|h| h.number == *number));
        let before = self.tracked.len();
        self.tracked.retain(|number, _| open.contains_key(number));
        if self.tracked.len() < before {
            info!(
                forgotten = before - self.tracked.len(),
                "pull requests closed; forgotten"
            );
        }
        self.merged
            .retain(|number, head| open.get(number).is_some_and(|h| h.commit == *head));
        let mut due: Vec<&PullRequestHead> = open
            .values()
            .filter(|h| self.merged.get(&h.number) != Some(&h.commit))
            .filter(|h| {
                self.tracked
                    .get(&h.number)
                    .is_none_or(|t| !t.done || t.head != h.commit || t.base != base)
            })
            .copied()
            .collect();
        // Heads seen for the first time that are already merged are set aside in one pass over the
        // cache, without a fetch each (a forge keeps the refs of every merged pull request).
        let fresh: Vec<Oid> = due
            .iter()
            .filter(|h| !self.tracked.contains_key(&h.number))
            .map(|h| h.commit)
            .collect();
        if !fresh.is_empty() {
            let checked = fresh.clone();
            if let Ok(merged) =
                with_source(io.source, move |s| Ok(in_history(s.repository(), base, &checked))).await
            {
                let merged: Vec<Oid> = fresh
                    .iter()
                    .zip(merged)
                    .filter_map(|(head, merged)| merged.then_some(*head))
                    .collect();
                due.retain(|h| {
                    let is_merged = merged.contains(&h.commit) && !self.tracked.contains_key(&h.number);
                    if is_merged {
                        self.merged.insert(h.number, h.commit);
                    }
                    !is_merged
                });
            }
        }
        // New and moved heads first; one whose plan or delivery failed before waits behind them, so
        // a pull request that keeps failing does not hold the others up.
        due.sort_by_key(|h| {
            let failed = self
                .tracked
                .get(&h.number)
                .is_some_and(|t| !t.done && t.head == h.commit && t.base == base);
            (failed, h.number)
        });
        let mut progressed = false;
        for head in due.iter().take(MAX_PLANS_PER_ROUND) {
            progressed |= self.plan_and_report(io, cfg, head, base).await;
        }
        // Another round at once only while rounds get work done; failures wait for the interval.
        progressed && due.len() > MAX_PLANS_PER_ROUND
    }

    fn is_closed(&self, head: &PullRequestHead) -> bool {
        match self.closed.get(&head.number) {
            Some(Some(sha)) => *sha == head.commit.to_string(),
            Some(None) => true,
            None => false,
        }
    }

    async fn plan_and_report(
        &mut self,
        io: PullIo<'_>,
        cfg: &PullConfig,
        head: &PullRequestHead,
        base: Option<Oid>,
    ) -> bool {
        let number = head.number;
        let planned = match plan_pull_request(io, cfg, head, base).await {
            Ok(Some(planned)) => planned,
            Ok(None) => {
                debug!(number, head = %head.commit, "pull request head already reconciled; forgotten");
                self.tracked.remove(&number);
                self.merged.insert(number, head.commit);
                return true;
            }
            Err(e) => {
                warn!(number, head = %head.commit, error = %e, "planning the pull request failed; retrying at the next poll");
                if let Some(tracked) = self.tracked.get_mut(&number) {
                    tracked.done = false;
                }
                return false;
            }
        };
        if let Some(live) = io.live {
            live.plans.keep(&head.commit.to_string(), &planned.text);
        }
        let tracked = self.tracked.entry(number).or_insert_with(|| Tracked {
            head: head.commit,
            base,
            delivered: None,
            comment: None,
            done: false,
        });
        if tracked.head != head.commit {
            tracked.delivered = None;
        }
        tracked.head = head.commit;
        tracked.base = base;
        let sha = head.commit.to_string();
        let mut done = true;
        if tracked.delivered.as_ref() != Some(&planned.status) {
            match io.sinks.deliver(&sha, &planned.status).await {
                Ok(()) => tracked.delivered = Some(planned.status.clone()),
                Err(e) => {
                    warn!(number, error = %e, "the kok/plan status was not delivered; retrying at the next poll");
                    done = false;
                }
            }
        }
        if let Some(comments) = &cfg.comments {
            match comments
                .keep(number, tracked.comment.as_ref(), &planned.markdown)
                .await
            {
                Ok(comment) => tracked.comment = comment,
                Err(e) => {
                    warn!(number, error = %e, "the plan comment was not written; retrying at the next poll");
                    // Look the comment up again next time: it may have been deleted.
                    tracked.comment = None;
                    done = false;
                }
            }
        }
        info!(number, head = %sha, state = ?planned.status.state, description = %planned.status.description, "pull request planned");
        tracked.done = done;
        done
    }
}

/// Fetches the head of a pull request and plans the merge of it into `base`; `None` when the head is
/// already in the reconciled history.
pub async fn plan_pull_request(
    io: PullIo<'_>,
    cfg: &PullConfig,
    head: &PullRequestHead,
    base: Option<Oid>,
) -> Result<Option<PullPlan>, PullError> {
    let number = head.number;
    let listed = head.clone();
    let fetched = with_source(io.source, move |s| s.fetch_pull_request(&listed)).await?;
    let (root, namespace, branch) = (cfg.root.clone(), cfg.namespace.clone(), cfg.branch.clone());
    let read = with_source(io.source, move |s| {
        let repo = s.repository();
        let target = merge_target(repo, base, fetched, number)?;
        let subject = repo
            .find_commit(fetched)
            .ok()
            .and_then(|c| c.summary().ok().flatten().map(str::to_string))
            .unwrap_or_default();
        Ok(match target {
            MergeTarget::Merged => Read::Merged,
            MergeTarget::Conflict { paths } => Read::Conflict(paths),
            MergeTarget::Plan { commit, synthetic } => Read::Plan {
                prepared: Box::new(plan::prepare(repo, base, commit, &root, &namespace, &branch)),
                merge: synthetic.then_some(commit),
                subject,
            },
        })
    })
    .await?;
    let (prepared, merge, subject) = match read {
        Read::Merged => return Ok(None),
        Read::Conflict(paths) => return Ok(Some(conflict_plan(&cfg.branch, &paths))),
        Read::Plan {
            prepared,
            merge,
            subject,
        } => ((*prepared)?, merge, subject),
    };
    let baseline = match io.live {
        Some(cache) => plan::cached_baseline(io.client, &cfg.namespace, cache, &prepared).await?,
        None => plan::live_baseline(io.client, &cfg.namespace, &prepared).await?,
    };
    let mut plan = plan::decide(&prepared, &baseline);
    if let Some(merge) = merge {
        attribute_to_head(&mut plan, merge, fetched, &subject);
    }
    let (state, description) = plan::plan_status(&plan);
    Ok(Some(PullPlan {
        status: plan_commit_status(state, description),
        markdown: plan::markdown(&plan),
        text: plan::text(&plan),
    }))
}

/// What the git side of a pull request's plan found.
enum Read {
    Merged,
    Conflict(Vec<String>),
    Plan {
        prepared: Box<Result<Prepared, PlanError>>,
        merge: Option<Oid>,
        subject: String,
    },
}

fn plan_commit_status(state: StatusState, description: String) -> CommitStatus {
    CommitStatus {
        context: PLAN_CONTEXT.to_string(),
        state,
        description,
        target_url: None,
        run: None,
    }
}

/// The status and comment of a head that does not merge cleanly: kok cannot say what the merge does.
fn conflict_plan(branch: &str, paths: &[String]) -> PullPlan {
    let description = format!(
        "does not merge cleanly into {branch} (conflicts in {}); merge {branch} into the branch to get a plan",
        paths.join(", ")
    );
    PullPlan {
        markdown: format!("### kok plan\n\n:x: This pull request {description}.\n"),
        text: format!("This pull request {description}.\n"),
        status: plan_commit_status(StatusState::Error, description),
    }
}

/// The merge commit built for the plan exists only in kok's cache: what it introduces is shown as
/// the pull request's head, which a reviewer can find.
fn attribute_to_head(plan: &mut Plan, merge: Oid, head: Oid, subject: &str) {
    let (merge, head) = (merge.to_string(), head.to_string());
    if plan.to == merge {
        plan.to = head.clone();
    }
    for op in plan.clusters.iter_mut().flat_map(|c| c.operations.iter_mut()) {
        if op.commit == merge {
            op.commit = head.clone();
            op.subject = subject.to_string();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{ClusterPlan, PlannedOperation};

    #[test]
    fn what_the_plans_merge_commit_introduces_is_shown_as_the_pull_requests_head() {
        let merge = Oid::from_str(&"a".repeat(40)).unwrap();
        let head = Oid::from_str(&"b".repeat(40)).unwrap();
        let planned = |commit: &str| PlannedOperation {
            id: "add-node8".into(),
            name: "prod-bj-add-node8-12345678".into(),
            action: "scale.yml".into(),
            commit: commit.into(),
            subject: "Merge pull request #7".into(),
            commit_index: 0,
            facts_playbook: None,
            rollout: None,
            wave: None,
            preflight_skipped: false,
            allow_release_skip: false,
        };
        let mut plan = Plan {
            from: Some("c".repeat(40)),
            to: merge.to_string(),
            commits: 1,
            full_resync: false,
            clusters: vec![ClusterPlan {
                name: "prod-bj".into(),
                operations: vec![planned(&merge.to_string()), planned(&"d".repeat(40))],
                ..ClusterPlan::default()
            }],
            invalid: Vec::new(),
            rollouts: Vec::new(),
            repo_diagnostics: Vec::new(),
            signatures: Vec::new(),
        };
        attribute_to_head(&mut plan, merge, head, "prod-bj: add node8");
        assert_eq!(plan.to, head.to_string());
        let ops = &plan.clusters[0].operations;
        assert_eq!(
            (ops[0].commit.as_str(), ops[0].subject.as_str()),
            (head.to_string().as_str(), "prod-bj: add node8")
        );
        assert_eq!(
            ops[1].commit,
            "d".repeat(40),
            "a real commit keeps its own attribution"
        );
    }

    #[test]
    fn a_head_that_does_not_merge_is_an_error_naming_the_files() {
        let planned = conflict_plan("main", &["clusters/prod-bj/hosts.yml".to_string()]);
        assert_eq!(planned.status.context, "kok/plan");
        assert_eq!(planned.status.state, StatusState::Error);
        assert_eq!(
            planned.status.description,
            "does not merge cleanly into main (conflicts in clusters/prod-bj/hosts.yml); merge main into the \
             branch to get a plan"
        );
        assert!(planned
            .markdown
            .contains(":x: This pull request does not merge cleanly"));
    }
}
