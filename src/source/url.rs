//! Remote addresses: classification, ssh host and port, password redaction, cache directory names.

use sha2::{Digest, Sha256};

use super::SourceError;

/// A remote address, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RemoteUrl {
    /// `https://` or `http://`.
    Http(String),
    /// `ssh://[user@]host[:port]/path` or scp-like `[user@]host:path`.
    Ssh {
        /// The address as libgit2 receives it.
        url: String,
        /// Host name or address.
        host: String,
        /// Port (22 unless given).
        port: u16,
        /// Login from the URL.
        user: Option<String>,
    },
    /// `file://` or a plain path (made absolute).
    Local(String),
}

impl RemoteUrl {
    /// Classifies `url`; plain relative paths are made absolute against the current directory.
    pub fn parse(url: &str) -> Result<RemoteUrl, SourceError> {
        let invalid = |reason: &str| SourceError::InvalidUrl {
            url: redact(url),
            reason: reason.to_string(),
        };
        if url.is_empty() {
            return Err(invalid("it is empty"));
        }
        if let Some((scheme, rest)) = url.split_once("://") {
            return match scheme {
                "http" | "https" => Ok(RemoteUrl::Http(url.to_string())),
                "file" => Ok(RemoteUrl::Local(url.to_string())),
                "ssh" | "git+ssh" | "ssh+git" => {
                    let authority = rest.split('/').next().unwrap_or_default();
                    let (user, hostport) = match authority.rsplit_once('@') {
                        Some((u, h)) => (Some(u.to_string()), h),
                        None => (None, authority),
                    };
                    let (host, port) =
                        split_host_port(hostport).ok_or_else(|| invalid("bad host or port"))?;
                    if host.is_empty() {
                        return Err(invalid("no host"));
                    }
                    Ok(RemoteUrl::Ssh {
                        url: url.to_string(),
                        host,
                        port,
                        user,
                    })
                }
                "git" => Ok(RemoteUrl::Http(url.to_string())),
                other => Err(invalid(&format!("unsupported scheme {other:?}"))),
            };
        }
        if let Some((before, _)) = url.split_once(':') {
            if !before.contains('/') && !before.is_empty() {
                let (user, host) = match before.rsplit_once('@') {
                    Some((u, h)) => (Some(u.to_string()), h.to_string()),
                    None => (None, before.to_string()),
                };
                return Ok(RemoteUrl::Ssh {
                    url: url.to_string(),
                    host,
                    port: 22,
                    user,
                });
            }
        }
        let path = std::path::Path::new(url);
        let absolute = if path.is_absolute() {
            path.to_path_buf()
        } else {
            std::env::current_dir()
                .map_err(|e| invalid(&format!("cannot resolve relative path: {e}")))?
                .join(path)
        };
        Ok(RemoteUrl::Local(absolute.to_string_lossy().into_owned()))
    }

    /// The address handed to libgit2.
    pub fn as_str(&self) -> &str {
        match self {
            RemoteUrl::Http(u) | RemoteUrl::Local(u) => u,
            RemoteUrl::Ssh { url, .. } => url,
        }
    }

    /// True for `file://` and plain paths.
    pub fn is_local(&self) -> bool {
        matches!(self, RemoteUrl::Local(_))
    }

    /// For local remotes, the repository directory on disk.
    pub fn local_path(&self) -> Option<std::path::PathBuf> {
        match self {
            RemoteUrl::Local(u) => Some(std::path::PathBuf::from(u.strip_prefix("file://").unwrap_or(u))),
            _ => None,
        }
    }
}

/// `host[:port]` or `[v6]:port` → (host, port).
fn split_host_port(hostport: &str) -> Option<(String, u16)> {
    if let Some(rest) = hostport.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None => 22,
        };
        return Some((host.to_string(), port));
    }
    match hostport.rsplit_once(':') {
        Some((h, p)) if !p.is_empty() => Some((h.to_string(), p.parse().ok()?)),
        Some((h, _)) => Some((h.to_string(), 22)),
        None => Some((hostport.to_string(), 22)),
    }
}

/// The URL with any `user:password@` password replaced by `***`, for messages and logs.
pub fn redact(url: &str) -> String {
    replace_password(url, Some("***"))
}

/// The URL with the password of a `user:password@` replaced by `with` (`None`: dropped, the user kept);
/// any other URL, an scp-like `git@host:path` or a local path as it is.
pub fn replace_password(url: &str, with: Option<&str>) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or_default();
            let userinfo = match with {
                Some(mask) if userinfo.contains(':') => format!("{user}:{mask}"),
                _ => user.to_string(),
            };
            format!("{scheme}://{userinfo}@{host}{path}")
        }
        None => url.to_string(),
    }
}

/// Directory name of the bare cache for `url`: 16 hex digits of its sha256, plus `.git`.
pub fn cache_dir_name(url: &str) -> String {
    let digest = Sha256::digest(url.as_bytes());
    format!("{}.git", &hex::encode(digest)[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_urls_give_host_and_port() {
        match RemoteUrl::parse("ssh://git@127.0.0.1:2222/srv/repo.git").unwrap() {
            RemoteUrl::Ssh { host, port, user, .. } => {
                assert_eq!(
                    (host.as_str(), port, user.as_deref()),
                    ("127.0.0.1", 2222, Some("git"))
                )
            }
            other => panic!("{other:?}"),
        }
        match RemoteUrl::parse("git@github.com:org/repo.git").unwrap() {
            RemoteUrl::Ssh { host, port, .. } => assert_eq!((host.as_str(), port), ("github.com", 22)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn plain_relative_paths_become_absolute_local_remotes() {
        let url = RemoteUrl::parse("some/repo").unwrap();
        assert!(url.is_local());
        assert!(url.as_str().starts_with('/'));
        assert!(RemoteUrl::parse("file:///srv/repo").unwrap().is_local());
    }

    #[test]
    fn passwords_are_redacted_from_urls() {
        assert_eq!(
            redact("https://bob:hunter2@example.com/r.git"),
            "https://bob:***@example.com/r.git"
        );
        assert_eq!(redact("https://example.com/r.git"), "https://example.com/r.git");
    }

    #[test]
    fn cache_names_differ_per_url() {
        assert_ne!(cache_dir_name("a"), cache_dir_name("b"));
        assert!(cache_dir_name("a").ends_with(".git"));
    }
}
