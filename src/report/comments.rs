//! The plan comment of a pull request (`--pr-comments`): one comment per pull request holding the
//! markdown plan, created once and edited in place on each push, found again after a restart by the
//! hidden marker [`COMMENT_MARKER`] at the start of its body.
//!
//! | forge  | list                                  | create                    | edit                                  |
//! |--------|---------------------------------------|---------------------------|---------------------------------------|
//! | GitHub | `GET {repo}/issues/{n}/comments`      | `POST` the same           | `PATCH {repo}/issues/comments/{id}`   |
//! | GitLab | `GET {repo}/merge_requests/{n}/notes` | `POST` the same           | `PUT {repo}/merge_requests/{n}/notes/{id}` |
//! | Gitea  | `GET {repo}/issues/{n}/comments`      | `POST` the same           | `PATCH {repo}/issues/comments/{id}`   |
//!
//! `{repo}` is [`ForgeSink::repository_url`]; bodies are `{"body": "..."}`; the token and headers
//! are the status sink's. Before creating a comment the pull request is read (`GET {repo}/pulls/{n}`,
//! GitLab `{repo}/merge_requests/{n}`): a closed one gets none, since GitHub and Gitea keep the
//! `refs/pull/N/head` of closed pull requests.

use reqwest::Method;
use serde_json::{json, Value};

use super::forge::{Forge, ForgeSink};
use super::status::cut;

/// First line of every plan comment; how kok finds its comment among the others.
pub const COMMENT_MARKER: &str = "<!-- kok/plan -->";

/// Longest comment body kok writes, in characters (GitHub refuses bodies over 65,536).
pub const COMMENT_MAX: usize = 60_000;

/// Comments listed per page (GitHub and GitLab allow 100; Gitea's default maximum is 50).
const PAGE_SIZE: usize = 50;
/// Most pages of comments read when looking for the plan comment.
const MAX_PAGES: usize = 40;

/// kok's comment on one pull request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanComment {
    /// The forge's id of the comment (GitLab: the note id).
    pub id: u64,
    /// Its body as kok last wrote or read it.
    pub body: String,
}

/// A request to the forge's comments API failed; the next poll tries again.
#[derive(Debug, thiserror::Error)]
#[error("{forge}: {request} failed: {}; check that the token may comment on pull requests", crate::redact::scrub(.reason))]
pub struct CommentError {
    /// Forge name.
    pub forge: &'static str,
    /// Method and URL.
    pub request: String,
    /// What went wrong (scrubbed of every secret kok holds).
    pub reason: String,
}

/// Writes plan comments through the forge API a status sink speaks.
#[derive(Debug)]
pub struct PlanComments {
    sink: ForgeSink,
}

impl PlanComments {
    /// Comments through the forge, repository and token of `sink`.
    pub fn new(sink: ForgeSink) -> Self {
        PlanComments { sink }
    }

    /// The body of the plan comment for `markdown`, cut to [`COMMENT_MAX`] with a line saying where
    /// the whole plan is.
    pub fn body(markdown: &str) -> String {
        let whole = format!("{COMMENT_MARKER}\n{markdown}");
        if whole.chars().count() <= COMMENT_MAX {
            return whole;
        }
        let note =
            "\n\n… (the plan is longer than a comment holds; `kok plan --output markdown` prints it whole)\n";
        let mut cut: String = whole.chars().take(COMMENT_MAX - note.chars().count()).collect();
        cut.push_str(note);
        cut
    }

    /// Keeps the plan comment of pull request `number` at `markdown`: edits `known` (or the comment
    /// found by its marker) when its body differs, creates one when there is none and the pull request
    /// is open. Returns the comment, or `None` when the pull request is closed and has none.
    pub async fn keep(
        &self,
        number: u64,
        known: Option<&PlanComment>,
        markdown: &str,
    ) -> Result<Option<PlanComment>, CommentError> {
        let body = Self::body(markdown);
        let existing = match known {
            Some(comment) => Some(comment.clone()),
            None => self.find(number).await?,
        };
        match existing {
            Some(comment) if comment.body == body => Ok(Some(comment)),
            Some(comment) => {
                self.edit(number, comment.id, &body).await?;
                Ok(Some(PlanComment { id: comment.id, body }))
            }
            None if self.is_open(number).await? => Ok(Some(self.create(number, &body).await?)),
            None => Ok(None),
        }
    }

    /// kok's comment on pull request `number`, found by its marker among the listed comments.
    pub async fn find(&self, number: u64) -> Result<Option<PlanComment>, CommentError> {
        for page in 1..=MAX_PAGES {
            let size = match self.sink.forge() {
                Forge::GitHub | Forge::GitLab => format!("per_page={PAGE_SIZE}"),
                Forge::Gitea => format!("limit={PAGE_SIZE}"),
            };
            let url = format!("{}?{size}&page={page}", self.comments_url(number));
            let listed = self.send(Method::GET, &url, None).await?;
            let comments = listed.as_array().cloned().unwrap_or_default();
            let found = comments.iter().find_map(|c| {
                let body = c["body"].as_str()?;
                body.starts_with(COMMENT_MARKER).then(|| PlanComment {
                    id: c["id"].as_u64().unwrap_or_default(),
                    body: body.to_string(),
                })
            });
            if found.is_some() || comments.len() < PAGE_SIZE {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// Creates the plan comment on pull request `number`.
    pub async fn create(&self, number: u64, body: &str) -> Result<PlanComment, CommentError> {
        let url = self.comments_url(number);
        let created = self
            .send(Method::POST, &url, Some(json!({ "body": body })))
            .await?;
        let id = created["id"].as_u64().ok_or_else(|| CommentError {
            forge: self.sink.forge().as_str(),
            request: format!("POST {url}"),
            reason: "the answer has no comment id".to_string(),
        })?;
        Ok(PlanComment {
            id,
            body: body.to_string(),
        })
    }

    /// Replaces the body of comment `id` on pull request `number`.
    pub async fn edit(&self, number: u64, id: u64, body: &str) -> Result<(), CommentError> {
        let repo = self.sink.repository_url();
        let (method, url) = match self.sink.forge() {
            Forge::GitHub | Forge::Gitea => (Method::PATCH, format!("{repo}/issues/comments/{id}")),
            Forge::GitLab => (Method::PUT, format!("{repo}/merge_requests/{number}/notes/{id}")),
        };
        self.send(method, &url, Some(json!({ "body": body }))).await?;
        Ok(())
    }

    /// True when pull request `number` is open on the forge.
    pub async fn is_open(&self, number: u64) -> Result<bool, CommentError> {
        let repo = self.sink.repository_url();
        let url = match self.sink.forge() {
            Forge::GitHub | Forge::Gitea => format!("{repo}/pulls/{number}"),
            Forge::GitLab => format!("{repo}/merge_requests/{number}"),
        };
        let pull = self.send(Method::GET, &url, None).await?;
        Ok(matches!(pull["state"].as_str(), Some("open" | "opened")))
    }

    fn comments_url(&self, number: u64) -> String {
        let repo = self.sink.repository_url();
        match self.sink.forge() {
            Forge::GitHub | Forge::Gitea => format!("{repo}/issues/{number}/comments"),
            Forge::GitLab => format!("{repo}/merge_requests/{number}/notes"),
        }
    }

    async fn send(&self, method: Method, url: &str, body: Option<Value>) -> Result<Value, CommentError> {
        let request_name = format!("{method} {url}");
        let failed = |reason: String| CommentError {
            forge: self.sink.forge().as_str(),
            request: request_name.clone(),
            reason,
        };
        let mut request = self.sink.client().request(method.clone(), url);
        if let Some(body) = &body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| failed(e.without_url().to_string()))?;
        let code = response.status();
        let text = response.text().await.unwrap_or_default();
        if !code.is_success() {
            // A server may echo the request, Authorization header included: scrub before cutting.
            return Err(failed(format!(
                "answered {code}: {}",
                cut(&crate::redact::scrub(text.trim()), 300)
            )));
        }
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|e| failed(format!("the answer is not JSON: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comment_starts_with_the_marker_and_a_long_plan_is_cut_to_what_a_forge_holds() {
        assert_eq!(
            PlanComments::body("### kok plan\n"),
            "<!-- kok/plan -->\n### kok plan\n"
        );
        let long = "| run | x |\n".repeat(10_000);
        let body = PlanComments::body(&long);
        assert_eq!(body.chars().count(), COMMENT_MAX);
        assert!(body.starts_with(COMMENT_MARKER));
        assert!(
            body.ends_with("prints it whole)\n"),
            "{}",
            &body[body.len() - 100..]
        );
    }
}
