//! Who a bearer token is and what its user may do: TokenReview and SubjectAccessReview answered as
//! kube-apiserver v1.36 answers them, with RBAC evaluated on the stored Roles, ClusterRoles and bindings.
//!
//! Only these two reviews look at credentials; every other request is allowed, as everywhere in testkit.
//! A review's caller is the user of its bearer token when the token is registered ([`Tokens`]); an
//! unregistered token, or none, is testkit's administrator and may review. The wording of every answer
//! follows `tests/fixtures/realapi/auth-reviews.json`, and `tests/integration/auth_reviews.rs` replays it.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Map, Value};

use crate::api::State;
use crate::errors::{cause, ApiError, Cause};
use crate::selectors::{FieldSelector, LabelSelector};

/// The audience of the API server itself, which a review without `spec.audiences` checks against.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc";
/// How long past its `exp` a token still authenticates (the validator's leeway).
const EXPIRY_LEEWAY: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);
const AUTHENTICATION: &str = "authentication.k8s.io";
const AUTHORIZATION: &str = "authorization.k8s.io";
const RBAC: &str = "rbac.authorization.k8s.io";

/// The user a registered token authenticates as, and what limits the token.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenUser {
    /// `status.user.username`, e.g. `system:serviceaccount:ns:viewer`.
    pub username: String,
    /// `status.user.uid` (omitted when empty).
    pub uid: String,
    /// `status.user.groups`.
    pub groups: Vec<String>,
    /// `status.user.extra`.
    pub extra: BTreeMap<String, Vec<String>>,
    /// The token's `aud` claim; empty means the API server's own audience.
    pub audiences: Vec<String>,
    /// The token's `exp` claim, if it has one.
    pub expires: Option<jiff::Timestamp>,
    /// `(namespace, name)` of the ServiceAccount the token is bound to: it must still exist.
    pub service_account: Option<(String, String)>,
}

impl TokenUser {
    /// The user of a ServiceAccount token, as the API server names it (groups included).
    pub fn service_account(namespace: &str, name: &str) -> TokenUser {
        TokenUser {
            username: format!("system:serviceaccount:{namespace}:{name}"),
            uid: crate::util::uid(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
            extra: [(
                "authentication.kubernetes.io/credential-id".to_string(),
                vec![format!("JTI={}", crate::util::uid())],
            )]
            .into(),
            audiences: Vec::new(),
            expires: None,
            service_account: Some((namespace.into(), name.into())),
        }
    }

    /// The user a ServiceAccount JWT's claims name (`sub`, `aud`, `exp`, `jti`, `kubernetes.io`), as
    /// the API server reads them; `None` when the token is not a JWT with those claims.
    pub fn from_jwt(token: &str) -> Option<TokenUser> {
        let claims = token.split('.').nth(1)?;
        let claims: Value = serde_json::from_slice(&base64url_decode(claims)?).ok()?;
        let sa = claims.pointer("/kubernetes.io/serviceaccount")?;
        let namespace = claims.pointer("/kubernetes.io/namespace")?.as_str()?;
        let name = sa["name"].as_str()?;
        let mut user = TokenUser::service_account(namespace, name);
        user.uid = sa["uid"].as_str().unwrap_or_default().to_string();
        user.extra.clear();
        if let Some(jti) = claims["jti"].as_str() {
            user.extra.insert(
                "authentication.kubernetes.io/credential-id".into(),
                vec![format!("JTI={jti}")],
            );
        }
        user.audiences = match &claims["aud"] {
            Value::String(a) => vec![a.clone()],
            Value::Array(a) => a.iter().filter_map(|a| a.as_str().map(String::from)).collect(),
            _ => Vec::new(),
        };
        user.expires = claims["exp"]
            .as_i64()
            .and_then(|exp| jiff::Timestamp::from_second(exp).ok());
        Some(user)
    }

    fn user_info(&self) -> Value {
        let mut user = json!({"username": self.username});
        if !self.uid.is_empty() {
            user["uid"] = json!(self.uid);
        }
        if !self.groups.is_empty() {
            user["groups"] = json!(self.groups);
        }
        if !self.extra.is_empty() {
            user["extra"] = json!(self.extra);
        }
        user
    }
}

/// The tokens the server knows.
#[derive(Debug, Default)]
pub struct Tokens {
    users: HashMap<String, TokenUser>,
}

impl Tokens {
    /// Registers `token` as `user`'s (replacing an earlier registration).
    pub fn insert(&mut self, token: &str, user: TokenUser) {
        self.users.insert(token.to_string(), user);
    }

    /// Makes `token` expired from now on.
    pub fn expire(&mut self, token: &str) {
        if let Some(user) = self.users.get_mut(token) {
            user.expires = Some(jiff::Timestamp::now() - EXPIRY_LEEWAY - jiff::SignedDuration::from_secs(1));
        }
    }

    fn get(&self, token: &str) -> Option<&TokenUser> {
        self.users.get(token)
    }
}

/// A JWT-shaped token for `user`, unique, that only this server accepts once registered.
pub fn mint(user: &TokenUser) -> String {
    let header = json!({"alg": "RS256", "kid": "testkit"});
    let claims = json!({
        "aud": if user.audiences.is_empty() { vec![API_AUDIENCE.to_string()] } else { user.audiences.clone() },
        "sub": user.username,
        "jti": crate::util::uid(),
    });
    let signature: [u8; 32] = rand::random();
    format!(
        "{}.{}.{}",
        base64url(header.to_string().as_bytes()),
        base64url(claims.to_string().as_bytes()),
        base64url(&signature)
    )
}

fn base64url(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .ok()
}

/// Go's `%q` of a string slice: `["a" "b"]`.
fn quoted(list: &[String]) -> String {
    let items: Vec<String> = list
        .iter()
        .map(|s| serde_json::to_string(s).unwrap_or_default())
        .collect();
    format!("[{}]", items.join(" "))
}

/// Who `token` is for a request asking for `wanted` audiences (the API audience when empty), with the
/// audiences both share; the review's `status.error` otherwise.
fn authenticate(
    state: &State,
    tokens: &Tokens,
    token: &str,
    wanted: &[String],
) -> Result<(TokenUser, Vec<String>), String> {
    let Some(user) = tokens.get(token) else {
        let jwt = token.split('.').count() == 3 && token.split('.').all(|p| !p.is_empty());
        return Err(if jwt {
            "[invalid bearer token, go-jose/go-jose: error in cryptographic primitive]".into()
        } else {
            "invalid bearer token".into()
        });
    };
    let api = vec![API_AUDIENCE.to_string()];
    let has = if user.audiences.is_empty() {
        &api
    } else {
        &user.audiences
    };
    let wanted = if wanted.is_empty() { &api } else { wanted };
    let shared: Vec<String> = has.iter().filter(|a| wanted.contains(a)).cloned().collect();
    if shared.is_empty() {
        return Err(format!(
            "[invalid bearer token, token audiences {} is invalid for the target audiences {}]",
            quoted(has),
            quoted(wanted)
        ));
    }
    if user
        .expires
        .is_some_and(|exp| jiff::Timestamp::now() > exp + EXPIRY_LEEWAY)
    {
        return Err("[invalid bearer token, service account token has expired]".into());
    }
    if let Some((namespace, name)) = &user.service_account {
        let exists = state
            .registry
            .get("", "v1", "serviceaccounts")
            .is_some_and(|info| state.exists(&info, Some(namespace), name));
        if !exists {
            return Err(format!(
                "[invalid bearer token, serviceaccounts \"{name}\" not found]"
            ));
        }
    }
    Ok((user.clone(), shared))
}

/// Whether the caller of a review (by its bearer token) may create `resource` in `group`; `Err` is the
/// 401 or 403 the API server answers instead.
pub fn admit_reviewer(
    state: &State,
    tokens: &Tokens,
    bearer: Option<&str>,
    group: &str,
    resource: &str,
) -> Result<(), ApiError> {
    let Some(token) = bearer.filter(|t| tokens.get(t).is_some()) else {
        return Ok(());
    };
    let Ok((user, _)) = authenticate(state, tokens, token, &[]) else {
        return Err(ApiError::new(401, "Unauthorized"));
    };
    let attributes = Attributes::Resource {
        namespace: String::new(),
        verb: "create".into(),
        group: group.into(),
        resource: resource.into(),
        subresource: String::new(),
        name: String::new(),
    };
    if authorize(state, &user.username, &user.groups, &attributes).0 {
        return Ok(());
    }
    let mut e = ApiError::new(
        403,
        format!(
            "{resource}.{group} is forbidden: User \"{}\" cannot create resource \"{resource}\" in API group \"{group}\" at the cluster scope",
            user.username
        ),
    );
    e.details.group = group.into();
    e.details.kind = resource.into();
    Err(e)
}

/// Answers `POST /apis/authentication.k8s.io/v1/tokenreviews` (201 with the review's status).
pub fn token_review(state: &State, tokens: &Tokens, body: &Value) -> Result<Value, ApiError> {
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let token = spec["token"].as_str().unwrap_or_default();
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let wanted: Vec<String> = spec["audiences"]
        .as_array()
        .map(|a| a.iter().filter_map(|a| a.as_str().map(String::from)).collect())
        .unwrap_or_default();
    let status = match authenticate(state, tokens, token, &wanted) {
        Ok((user, audiences)) => {
            json!({"authenticated": true, "user": user.user_info(), "audiences": audiences})
        }
        Err(error) => json!({"user": {}, "error": error}),
    };
    Ok(
        json!({"kind": "TokenReview", "apiVersion": format!("{AUTHENTICATION}/v1"), "metadata": {},
        "spec": spec, "status": status}),
    )
}

/// What a SubjectAccessReview asks about.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Attributes {
    Resource {
        namespace: String,
        verb: String,
        group: String,
        resource: String,
        subresource: String,
        name: String,
    },
    NonResource {
        path: String,
        verb: String,
    },
}

fn text(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_default().to_string()
}

/// Answers `POST /apis/authorization.k8s.io/v1/subjectaccessreviews` (201 with `allowed` and the RBAC
/// reason), or 422 for a spec the API server refuses.
pub fn subject_access_review(state: &State, body: &Value) -> Result<Value, ApiError> {
    let mut spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let user = text(&spec, "user");
    let groups: Vec<String> = spec["groups"]
        .as_array()
        .map(|a| a.iter().filter_map(|g| g.as_str().map(String::from)).collect())
        .unwrap_or_default();
    let mut causes: Vec<Cause> = Vec::new();
    if user.is_empty() && groups.is_empty() {
        causes.push(cause(
            "FieldValueInvalid",
            "spec.user",
            "Invalid value: \"\": at least one of user or group must be specified",
        ));
    }
    let resource = spec.get("resourceAttributes").filter(|v| v.is_object());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| v.is_object());
    let attributes = match (resource, non_resource) {
        (Some(r), None) => Some(Attributes::Resource {
            namespace: text(r, "namespace"),
            verb: text(r, "verb"),
            group: text(r, "group"),
            resource: text(r, "resource"),
            subresource: text(r, "subresource"),
            name: text(r, "name"),
        }),
        (None, Some(n)) => Some(Attributes::NonResource {
            path: text(n, "path"),
            verb: text(n, "verb"),
        }),
        _ => {
            let shown = if resource.is_some() { "{...}" } else { "null" };
            causes.push(cause(
                "FieldValueInvalid",
                "spec.resourceAttributes",
                format!("Invalid value: {shown}: exactly one of nonResourceAttributes or resourceAttributes must be specified"),
            ));
            None
        }
    };
    let Some(attributes) = attributes.filter(|_| causes.is_empty()) else {
        return Err(invalid_review(causes));
    };
    let (allowed, reason) = authorize(state, &user, &groups, &attributes);
    prune_empty(&mut spec);
    let mut status = json!({"allowed": allowed});
    if let Some(reason) = reason {
        status["reason"] = json!(reason);
    }
    Ok(
        json!({"kind": "SubjectAccessReview", "apiVersion": format!("{AUTHORIZATION}/v1"), "metadata": {},
        "spec": spec, "status": status}),
    )
}

/// The 422 of an invalid review, worded as the API server words it (a kind and a name both empty).
fn invalid_review(causes: Vec<Cause>) -> ApiError {
    let parts: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    let joined = match parts.as_slice() {
        [one] => one.clone(),
        _ => format!("[{}]", parts.join(", ")),
    };
    let mut e = ApiError::new(422, format!(".{AUTHORIZATION} \"\" is invalid: {joined}"));
    e.details.group = AUTHORIZATION.into();
    e.details.causes = causes;
    e
}

/// Drops the empty strings, lists and maps of a spec (and of its attributes), as Go's `omitempty` does.
fn prune_empty(spec: &mut Value) {
    fn prune(map: &mut Map<String, Value>) {
        map.retain(|_, v| match v {
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
            Value::Null => false,
            _ => true,
        });
    }
    if let Some(map) = spec.as_object_mut() {
        for key in ["resourceAttributes", "nonResourceAttributes"] {
            if let Some(attributes) = map.get_mut(key).and_then(Value::as_object_mut) {
                prune(attributes);
            }
        }
        prune(map);
    }
}

/// RBAC's answer for `user` in `groups`: allowed, with the binding that allows it. `system:masters` is
/// allowed without a reason; ClusterRoleBindings are consulted before the RoleBindings of the namespace.
fn authorize(
    state: &State,
    user: &str,
    groups: &[String],
    attributes: &Attributes,
) -> (bool, Option<String>) {
    if groups.iter().any(|g| g == "system:masters") {
        return (true, None);
    }
    for binding in objects(state, "clusterrolebindings", None) {
        let role_name = binding
            .pointer("/roleRef/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(subject) = matching_subject(&binding, "", user, groups) else {
            continue;
        };
        let Some(role) = object(state, "clusterroles", None, role_name) else {
            continue;
        };
        if rules_allow(&role, attributes) {
            let reason = format!(
                "RBAC: allowed by ClusterRoleBinding \"{}\" of ClusterRole \"{role_name}\" to {subject}",
                text(&binding["metadata"], "name")
            );
            return (true, Some(reason));
        }
    }
    let namespace = match attributes {
        Attributes::Resource { namespace, .. } if !namespace.is_empty() => namespace,
        _ => return (false, None),
    };
    for binding in objects(state, "rolebindings", Some(namespace)) {
        let kind = binding
            .pointer("/roleRef/kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let role_name = binding
            .pointer("/roleRef/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(subject) = matching_subject(&binding, namespace, user, groups) else {
            continue;
        };
        let role = match kind {
            "Role" => object(state, "roles", Some(namespace), role_name),
            _ => object(state, "clusterroles", None, role_name),
        };
        if role.is_some_and(|role| rules_allow(&role, attributes)) {
            let reason = format!(
                "RBAC: allowed by RoleBinding \"{}/{namespace}\" of {kind} \"{role_name}\" to {subject}",
                text(&binding["metadata"], "name")
            );
            return (true, Some(reason));
        }
    }
    (false, None)
}

fn objects(state: &State, resource: &str, namespace: Option<&str>) -> Vec<Value> {
    let Some(info) = state.registry.get(RBAC, "v1", resource) else {
        return Vec::new();
    };
    state
        .list(
            &info,
            namespace,
            &LabelSelector::default(),
            &FieldSelector::default(),
            None,
            None,
        )
        .map(|page| page.values(&info).iter().map(|v| (**v).clone()).collect())
        .unwrap_or_default()
}

fn object(state: &State, resource: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
    let info = state.registry.get(RBAC, "v1", resource)?;
    state.get(&info, namespace, name).ok().map(|v| (*v).clone())
}

/// The subject of `binding` that is `user` or one of `groups`, as RBAC's reason names it
/// (`ServiceAccount "name/namespace"`, `User "name"`, `Group "name"`).
fn matching_subject(
    binding: &Value,
    binding_namespace: &str,
    user: &str,
    groups: &[String],
) -> Option<String> {
    binding["subjects"].as_array()?.iter().find_map(|s| {
        let name = s["name"].as_str().unwrap_or_default();
        match s["kind"].as_str()? {
            "User" if name == user => Some(format!("User \"{name}\"")),
            "Group" if groups.iter().any(|g| g == name) => Some(format!("Group \"{name}\"")),
            "ServiceAccount" => {
                let namespace = s["namespace"]
                    .as_str()
                    .filter(|n| !n.is_empty())
                    .unwrap_or(binding_namespace);
                (user == format!("system:serviceaccount:{namespace}:{name}"))
                    .then(|| format!("ServiceAccount \"{name}/{namespace}\""))
            }
            _ => None,
        }
    })
}

fn strings(rule: &Value, key: &str) -> Vec<String> {
    rule[key]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

/// Whether a rule of `role` allows `attributes`, matched as RBAC matches verbs, groups, resources
/// (`*`, `pods/log`, `pods/*`, `*/log`), resource names and non-resource URLs (`/healthz`, `/api/*`).
fn rules_allow(role: &Value, attributes: &Attributes) -> bool {
    let rules = role["rules"].as_array().cloned().unwrap_or_default();
    rules.iter().any(|rule| {
        let has = |key: &str, wanted: &str| strings(rule, key).iter().any(|s| s == "*" || s == wanted);
        match attributes {
            Attributes::Resource {
                verb,
                group,
                resource,
                subresource,
                name,
                ..
            } => {
                let combined = if subresource.is_empty() {
                    resource.clone()
                } else {
                    format!("{resource}/{subresource}")
                };
                let resource_matches = strings(rule, "resources").iter().any(|r| {
                    r == "*"
                        || *r == combined
                        || (!subresource.is_empty()
                            && (*r == format!("{resource}/*") || *r == format!("*/{subresource}")))
                });
                let names = strings(rule, "resourceNames");
                has("verbs", verb)
                    && has("apiGroups", group)
                    && resource_matches
                    && (names.is_empty() || names.contains(name))
            }
            Attributes::NonResource { path, verb } => {
                has("verbs", verb)
                    && strings(rule, "nonResourceURLs").iter().any(|u| {
                        u == "*" || u == path || u.strip_suffix('*').is_some_and(|p| path.starts_with(p))
                    })
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minted_token_reads_back_as_a_jwt() {
        let user = TokenUser::service_account("ns", "viewer");
        let token = mint(&user);
        assert_eq!(token.split('.').count(), 3);
        let claims = base64url_decode(token.split('.').nth(1).unwrap()).unwrap();
        let claims: Value = serde_json::from_slice(&claims).unwrap();
        assert_eq!(claims["sub"], "system:serviceaccount:ns:viewer");
        assert_eq!(claims["aud"], json!([API_AUDIENCE]));
    }

    #[test]
    fn audiences_are_quoted_as_go_quotes_a_slice() {
        assert_eq!(quoted(&["a".into(), "b".into()]), r#"["a" "b"]"#);
    }
}
