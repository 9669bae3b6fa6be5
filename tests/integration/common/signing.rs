//! Signing keys for test fixtures: SSH keys made with `ssh-keygen` and OpenPGP keys made with `gpg`
//! in a throwaway GNUPGHOME, and the `git` configuration that signs commits with them.

use std::path::{Path, PathBuf};
use std::process::Command;

fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} runs (scripts/setup.sh installs it): {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A key pair made by `ssh-keygen`.
pub struct SshKey {
    /// The private key file.
    pub private: PathBuf,
    /// `ssh-ed25519 AAAA… comment`.
    pub public: String,
}

impl SshKey {
    /// A new ed25519 key `dir/name` without a passphrase.
    pub fn new(dir: &Path, name: &str) -> SshKey {
        SshKey::of_type(dir, name, "ed25519")
    }

    /// A new key of `key_type` (`ed25519`, `ecdsa`, `rsa`) at `dir/name` without a passphrase.
    pub fn of_type(dir: &Path, name: &str, key_type: &str) -> SshKey {
        let private = dir.join(name);
        let path = private.display().to_string();
        run(
            "ssh-keygen",
            &["-q", "-t", key_type, "-N", "", "-C", name, "-f", &path],
        );
        let public = std::fs::read_to_string(format!("{path}.pub")).expect("public key");
        SshKey {
            private,
            public: public.trim().to_string(),
        }
    }

    /// `SHA256:…`, as `ssh-keygen -l` prints it.
    pub fn fingerprint(&self) -> String {
        let listed = run(
            "ssh-keygen",
            &["-l", "-f", &format!("{}.pub", self.private.display())],
        );
        listed.split_whitespace().nth(1).expect("fingerprint").to_string()
    }

    /// An allowed_signers line for `principal` with `options` (may be empty).
    pub fn allowed(&self, principal: &str, options: &str) -> String {
        let key: Vec<&str> = self.public.split_whitespace().take(2).collect();
        format!("{principal} {options} {}\n", key.join(" "))
    }

    /// `git config` arguments that sign every commit with this key.
    pub fn git_config(&self) -> Vec<(String, String)> {
        vec![
            ("commit.gpgsign".into(), "true".into()),
            ("gpg.format".into(), "ssh".into()),
            ("user.signingkey".into(), self.private.display().to_string()),
        ]
    }
}

/// A GNUPGHOME in a temp directory and a `gpg` wrapper script git can use as `gpg.program`.
pub struct Gpg {
    home: PathBuf,
    dir: PathBuf,
}

impl Gpg {
    /// An empty key ring under `dir`.
    pub fn new(dir: &Path) -> Gpg {
        let home = dir.join("gnupg");
        std::fs::create_dir_all(&home).expect("mkdir gnupg");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).expect("chmod gnupg");
        Gpg {
            home,
            dir: dir.to_path_buf(),
        }
    }

    fn gpg(&self, extra: &[&str]) -> String {
        let home = self.home.display().to_string();
        let mut args = vec![
            "--homedir",
            &home,
            "--batch",
            "--pinentry-mode",
            "loopback",
            "--passphrase",
            "",
        ];
        args.extend_from_slice(extra);
        run("gpg", &args)
    }

    /// A new ed25519 signing key for `uid`, valid for `expire` (`never`, `1d`), created at `faked_time`
    /// (`20200101T000000`) when given; returns its fingerprint.
    pub fn generate(&self, uid: &str, expire: &str, faked_time: Option<&str>) -> String {
        let mut args = Vec::new();
        if let Some(time) = faked_time {
            args.extend(["--faked-system-time", time]);
        }
        args.extend(["--quick-gen-key", uid, "ed25519", "sign", expire]);
        self.gpg(&args);
        let listed = self.gpg(&["--with-colons", "--list-keys", uid]);
        listed
            .lines()
            .find_map(|l| l.strip_prefix("fpr:::::::::"))
            .map(|f| f.trim_end_matches(':').to_string())
            .expect("the new key's fingerprint")
    }

    /// Revokes the key `fingerprint` with the revocation certificate gpg stored when making it.
    pub fn revoke(&self, fingerprint: &str) {
        let cert = self
            .home
            .join("openpgp-revocs.d")
            .join(format!("{fingerprint}.rev"));
        let text = std::fs::read_to_string(cert).expect("revocation certificate");
        let armored = text.replace(
            ":-----BEGIN PGP PUBLIC KEY BLOCK-----",
            "-----BEGIN PGP PUBLIC KEY BLOCK-----",
        );
        let path = self.dir.join(format!("{fingerprint}.rev.asc"));
        std::fs::write(&path, armored).expect("write revocation");
        self.gpg(&["--import", &path.display().to_string()]);
    }

    /// Writes the public key `fingerprint` into `dir` (armored or binary) and returns the file.
    pub fn export(&self, fingerprint: &str, dir: &Path, armored: bool) -> PathBuf {
        std::fs::create_dir_all(dir).expect("mkdir keys");
        let path = dir.join(format!("{fingerprint}.{}", if armored { "asc" } else { "gpg" }));
        let out = path.display().to_string();
        let mut args = vec!["--yes", "--output", &out];
        if armored {
            args.push("--armor");
        }
        args.extend(["--export", fingerprint]);
        self.gpg(&args);
        path
    }

    /// `git config` arguments that sign every commit with `fingerprint`, at `faked_time` when given.
    pub fn git_config(&self, fingerprint: &str, faked_time: Option<&str>) -> Vec<(String, String)> {
        let script = self.dir.join(format!("gpg-{fingerprint}.sh"));
        let faked = faked_time
            .map(|t| format!("--faked-system-time {t} "))
            .unwrap_or_default();
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nexec gpg --homedir '{}' {faked}\"$@\"\n",
                self.home.display()
            ),
        )
        .expect("write gpg wrapper");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod wrapper");
        vec![
            ("commit.gpgsign".into(), "true".into()),
            ("gpg.format".into(), "openpgp".into()),
            ("gpg.program".into(), script.display().to_string()),
            ("user.signingkey".into(), fingerprint.to_string()),
        ]
    }
}

/// Writes a copy of commit `sha` in the repository at `dir` with `from` replaced by `to` in its
/// content, signature kept, and returns the new object's sha.
pub fn tamper(dir: &Path, sha: &str, from: &str, to: &str) -> String {
    let raw = Command::new("git")
        .args(["cat-file", "commit", sha])
        .current_dir(dir)
        .output()
        .expect("git cat-file");
    let text = String::from_utf8(raw.stdout).expect("commit is UTF-8");
    assert!(text.contains(from), "{from:?} is not in the commit:\n{text}");
    let forged = text.replacen(from, to, 1);
    let path = dir.join(".git").join("forged-commit");
    std::fs::write(&path, forged).expect("write forged commit");
    let out = Command::new("git")
        .args(["hash-object", "-t", "commit", "-w"])
        .arg(&path)
        .current_dir(dir)
        .output()
        .expect("git hash-object");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
