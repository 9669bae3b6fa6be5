//! The plan comment through each forge's comments API, against the fake forge: found by its marker
//! past the first page, edited only when the plan changed, never created on a closed pull request,
//! and a refusal reported without the token.

use crate::forge;

use forge::comments::{Comments, Kind};
use forge::{ForgeServer, Reply};
use kok::report::comments::{PlanComments, COMMENT_MARKER};
use kok::report::{Forge, ForgeSink, Token};

const TOKEN: &str = "comment-token-0123456789";

fn client(kind: Kind, forge: &ForgeServer) -> PlanComments {
    let which = match kind {
        Kind::GitHub => Forge::GitHub,
        Kind::GitLab => Forge::GitLab,
        Kind::Gitea => Forge::Gitea,
    };
    let sink = ForgeSink::new(which, Some(&forge.url()), "acme/infra", &Token::new(TOKEN)).unwrap();
    PlanComments::new(sink)
}

#[tokio::test]
async fn the_comment_is_found_by_its_marker_past_the_first_page_on_every_forge() {
    for kind in [Kind::GitHub, Kind::GitLab, Kind::Gitea] {
        let forge = ForgeServer::start().await;
        let comments = Comments::serve(&forge, kind, TOKEN);
        for i in 0..60 {
            comments.add(4, &format!("review comment {i}"));
        }
        let id = comments.add(4, &format!("{COMMENT_MARKER}\n### kok plan `a..b`\n"));
        let kok = client(kind, &forge);

        let kept = kok.keep(4, None, "### kok plan `a..c`\n").await.unwrap().unwrap();
        assert_eq!(kept.id, id, "{kind:?}");
        let on = comments.on(4);
        assert_eq!(on.len(), 61, "{kind:?}: nothing posted");
        assert_eq!(on[60].1, format!("{COMMENT_MARKER}\n### kok plan `a..c`\n"));
        let paths: Vec<String> = forge
            .requests()
            .iter()
            .filter(|r| r.method == "GET")
            .map(|r| r.path.clone())
            .collect();
        let size = if kind == Kind::Gitea {
            "limit=50"
        } else {
            "per_page=50"
        };
        assert_eq!(
            paths,
            [
                format!("{}?{size}&page=1", kind.comments_path(4)),
                format!("{}?{size}&page=2", kind.comments_path(4)),
            ],
            "{kind:?}"
        );

        // The same plan again: nothing is sent.
        let before = forge.requests().len();
        let again = kok.keep(4, Some(&kept), "### kok plan `a..c`\n").await.unwrap();
        assert_eq!(again, Some(kept));
        assert_eq!(forge.requests().len(), before, "{kind:?}");
    }
}

#[tokio::test]
async fn a_closed_pull_request_gets_no_new_comment() {
    let forge = ForgeServer::start().await;
    let comments = Comments::serve(&forge, Kind::GitHub, TOKEN);
    comments.close(9);
    let kok = client(Kind::GitHub, &forge);
    assert_eq!(kok.keep(9, None, "### kok plan\n").await.unwrap(), None);
    assert!(comments.on(9).is_empty());
    assert!(forge.requests().iter().all(|r| r.method == "GET"));
}

#[tokio::test]
async fn a_refused_comment_names_the_request_and_never_the_token() {
    let forge = ForgeServer::start().await;
    forge.script([Reply::echo(403)]);
    let kok = client(Kind::GitHub, &forge);
    let err = kok.create(3, "body").await.unwrap_err().to_string();
    assert!(
        err.contains("POST http://127.0.0.1") && err.contains("/repos/acme/infra/issues/3/comments"),
        "{err}"
    );
    assert!(err.contains("403"), "{err}");
    assert!(!err.contains(TOKEN), "the token leaks: {err}");
}
