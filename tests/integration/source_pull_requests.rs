//! Open pull requests are found in the same one-round-trip ref listing as the main poll:
//! `refs/pull/N/head` (GitHub, Gitea) and `refs/merge-requests/N/head` (GitLab); a closed one whose
//! ref is gone is absent.

use crate::gitkit;

use gitkit::{git, RepoBuilder};
use kok::source::{Source, SourceConfig};

#[test]
fn pull_request_heads_are_listed_fetched_and_forgotten_when_their_ref_goes() {
    let mut work = RepoBuilder::new();
    work.cluster("prod-bj");
    work.commit("start");
    work.git(&["checkout", "-q", "-b", "pr1"]);
    work.op("prod-bj", "add-node8", "scale.yml");
    let pr1 = work.commit("add node8");
    work.git(&["checkout", "-q", "-b", "mr2", "main"]);
    work.op("prod-bj", "upgrade", "upgrade-cluster.yml");
    let mr2 = work.commit("upgrade");
    let remote = tempfile::tempdir().unwrap();
    git(
        remote.path(),
        &["clone", "-q", "--bare", &work.url(), "infra.git"],
    );
    let bare = remote.path().join("infra.git");
    git(&bare, &["update-ref", "refs/pull/1/head", &pr1]);
    git(&bare, &["update-ref", "refs/merge-requests/2/head", &mr2]);

    let cache = tempfile::tempdir().unwrap();
    let url = format!("file://{}", bare.display());
    let mut source = Source::open(SourceConfig::new(url, "main", cache.path())).unwrap();
    let listings = source.listing_count();
    let heads = source.pull_request_heads().unwrap();
    assert_eq!(source.listing_count(), listings + 1, "one ref listing");
    assert_eq!(source.fetch_count(), 0, "listing fetches nothing");
    let found: Vec<(u64, String, String)> = heads
        .iter()
        .map(|h| (h.number, h.reference.clone(), h.commit.to_string()))
        .collect();
    assert_eq!(
        found,
        [
            (1, "refs/pull/1/head".to_string(), pr1.clone()),
            (2, "refs/merge-requests/2/head".to_string(), mr2.clone())
        ]
    );
    let fetched = source.fetch_pull_request(&heads[0]).unwrap();
    assert_eq!(fetched.to_string(), pr1);
    assert!(source.repository().find_commit(fetched).is_ok());

    git(&bare, &["update-ref", "-d", "refs/pull/1/head"]);
    let heads = source.pull_request_heads().unwrap();
    let numbers: Vec<u64> = heads.iter().map(|h| h.number).collect();
    assert_eq!(numbers, [2], "the closed pull request is gone");
}

#[test]
fn a_pull_request_is_planned_as_its_merge_into_the_reconciled_commit() {
    use kok::source::{in_history, merge_target, MergeTarget};
    let mut work = RepoBuilder::new();
    work.cluster("prod-bj");
    let base = work.commit("start");
    work.git(&["checkout", "-q", "-b", "pr"]);
    work.op("prod-bj", "add-node8", "scale.yml");
    let head = work.commit("add node8");
    let repo = git2::Repository::open(work.path()).unwrap();
    let oid = |s: &str| git2::Oid::from_str(s).unwrap();

    // Up to date with main: the head itself.
    assert_eq!(
        merge_target(&repo, Some(oid(&base)), oid(&head), 1).unwrap(),
        MergeTarget::Plan {
            commit: oid(&head),
            synthetic: false
        }
    );
    // Already merged: nothing to plan.
    assert_eq!(
        merge_target(&repo, Some(oid(&head)), oid(&base), 1).unwrap(),
        MergeTarget::Merged
    );

    // Main moved on: a merge commit of both, the same one each time, on no ref.
    work.git(&["checkout", "-q", "main"]);
    work.cluster("prod-sh");
    let main2 = work.commit("prod-sh");
    let refs_before = work.git(&["for-each-ref"]);
    let MergeTarget::Plan { commit, synthetic } =
        merge_target(&repo, Some(oid(&main2)), oid(&head), 1).unwrap()
    else {
        panic!("a clean merge is planned");
    };
    assert!(synthetic);
    let merge = repo.find_commit(commit).unwrap();
    assert_eq!(merge.parent_ids().collect::<Vec<_>>(), [oid(&main2), oid(&head)]);
    let tree = merge.tree().unwrap();
    assert!(tree
        .get_path(std::path::Path::new("clusters/prod-sh/hosts.yml"))
        .is_ok());
    assert!(tree
        .get_path(std::path::Path::new("clusters/prod-bj/operations.yml"))
        .is_ok());
    assert_eq!(
        merge_target(&repo, Some(oid(&main2)), oid(&head), 1).unwrap(),
        MergeTarget::Plan {
            commit,
            synthetic: true
        }
    );
    assert_eq!(work.git(&["for-each-ref"]), refs_before, "no ref moved");
    assert_eq!(
        in_history(&repo, Some(oid(&main2)), &[oid(&base), oid(&head), oid(&main2)]),
        [true, false, true],
        "merged heads are told apart from open ones in one pass"
    );
    assert_eq!(in_history(&repo, None, &[oid(&base)]), [false]);

    // Main changed the same lines: a conflict naming the file.
    work.op("prod-bj", "upgrade", "upgrade-cluster.yml");
    let main3 = work.commit("upgrade");
    assert_eq!(
        merge_target(&repo, Some(oid(&main3)), oid(&head), 1).unwrap(),
        MergeTarget::Conflict {
            paths: vec!["clusters/prod-bj/operations.yml".to_string()]
        }
    );
}
