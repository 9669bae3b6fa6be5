//! Headless Chromium driven over WebDriver (Debian's `chromium` and `chromium-driver`): the one browser
//! the tests use. Each [`Browser`] has its own chromedriver on a loopback port and a fresh profile; dropping
//! it ends the session (which closes Chromium) and stops the driver.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

/// The flags Chromium runs with: headless, no sandbox (tests may run as root), and nothing that reaches
/// beyond loopback (no updates, sync, QUIC or background requests).
pub const FLAGS: [&str; 8] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];

/// Longest wait for the driver to answer, and for what a page shows.
pub const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);
/// The W3C key of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A WebDriver session of a headless Chromium.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

/// An element found on the current page.
#[derive(Clone, Debug)]
pub struct Element(String);

fn program(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

impl Browser {
    /// Starts chromedriver and a Chromium session with a fresh profile and a `width`×`height` window.
    /// When `chromium` or `chromedriver` is not installed (`scripts/setup.sh` installs them with apt), in CI
    /// (`CI=true`) the test fails saying what to install; elsewhere it prints why it skips and gets `None`.
    pub async fn start_or_skip(test: &str, width: u32, height: u32) -> Option<Browser> {
        let (Some(chromium), Some(driver)) = (program("chromium"), program("chromedriver")) else {
            let missing = [("chromium", "chromium"), ("chromedriver", "chromium-driver")]
                .into_iter()
                .filter(|(name, _)| program(name).is_none())
                .map(|(name, package)| format!("{name} (Debian's {package})"))
                .collect::<Vec<_>>()
                .join(" and ");
            let problem = format!("{missing} not found on PATH");
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!(
                    "{test}: {problem}. CI=true: `bash scripts/setup.sh` installs chromium and \
                     chromium-driver with apt; run it first"
                );
            }
            eprintln!(
                "skipping {test}: {problem} (`bash scripts/setup.sh` installs chromium and chromium-driver \
                 with apt)"
            );
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let driver = Command::new(driver)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let profile = tempfile::tempdir().expect("profile dir");
        let mut args: Vec<String> = FLAGS.iter().map(|f| f.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        args.push(format!("--window-size={width},{height}"));
        let mut browser = Browser {
            driver,
            port,
            session: String::new(),
            http: reqwest::Client::new(),
            _profile: profile,
        };
        let deadline = Instant::now() + WAIT;
        while browser.call("GET", "/status", None).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not answer on port {port}"
            );
            tokio::time::sleep(POLL).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
        }}});
        let created = browser
            .call("POST", "/session", Some(caps))
            .await
            .expect("a Chromium session starts");
        browser.session = created["sessionId"].as_str().expect("a session id").to_string();
        Some(browser)
    }

    /// One WebDriver command; its `value`, or the driver's error.
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut request = self.http.request(method, url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.map_err(|e| e.to_string())?;
        let ok = response.status().is_success();
        let value: Value = response.json().await.map_err(|e| e.to_string())?;
        let value = value.get("value").cloned().unwrap_or(Value::Null);
        if ok {
            Ok(value)
        } else {
            Err(value.to_string())
        }
    }

    async fn session(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        self.call(method, &format!("/session/{}{path}", self.session), body)
            .await
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.session("POST", "/url", Some(json!({ "url": url })))
            .await
            .unwrap_or_else(|e| panic!("opening {url}: {e}"));
    }

    /// The address of the page shown.
    pub async fn url(&self) -> String {
        let value = self.session("GET", "/url", None).await.expect("current url");
        value.as_str().unwrap_or_default().to_string()
    }

    /// The first element matching the CSS `selector`, if any.
    pub async fn find(&self, selector: &str) -> Option<Element> {
        let body = json!({"using": "css selector", "value": selector});
        let value = self.session("POST", "/element", Some(body)).await.ok()?;
        value[ELEMENT].as_str().map(|id| Element(id.to_string()))
    }

    /// Waits for an element matching `selector`.
    pub async fn wait_for(&self, selector: &str) -> Element {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(element) = self.find(selector).await {
                return element;
            }
            assert!(
                Instant::now() < deadline,
                "no {selector:?} on {} after {WAIT:?}:\n{}",
                self.url().await,
                self.page_text().await
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// The rendered text of `element`; an error when it is gone (the page was replaced).
    pub async fn text(&self, element: &Element) -> Result<String, String> {
        let value = self
            .session("GET", &format!("/element/{}/text", element.0), None)
            .await?;
        Ok(value.as_str().unwrap_or_default().to_string())
    }

    /// The rendered text of the whole page.
    pub async fn page_text(&self) -> String {
        match self.find("body").await {
            Some(body) => self.text(&body).await.unwrap_or_default(),
            None => String::new(),
        }
    }

    /// Waits until `element` shows `needle`; returns its text. Panics when the element goes away.
    pub async fn wait_for_text(&self, element: &Element, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let text = self
                .text(element)
                .await
                .unwrap_or_else(|e| panic!("the element went away while waiting for {needle:?}: {e}"));
            if text.contains(needle) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "{needle:?} did not appear after {WAIT:?}:\n{text}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Clicks `element`, as a person would.
    pub async fn click(&self, element: &Element) -> Result<(), String> {
        self.session("POST", &format!("/element/{}/click", element.0), Some(json!({})))
            .await
            .map(drop)
    }

    /// Waits for an element matching `selector` and clicks it; found again when the page replaced it
    /// before the click (live pages update in place).
    pub async fn click_on(&self, selector: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let element = self.wait_for(selector).await;
            match self.click(&element).await {
                Ok(()) => return,
                Err(e) if e.contains("stale element") && Instant::now() < deadline => {}
                Err(e) => panic!("clicking {selector:?}: {e}"),
            }
        }
    }

    /// Resizes the window to `width`×`height`.
    pub async fn resize(&self, width: u32, height: u32) {
        let rect = json!({"width": width, "height": height});
        self.session("POST", "/window/rect", Some(rect))
            .await
            .expect("resize");
    }

    /// The value of the JavaScript `expression` on the current page (run by the driver, not the page).
    pub async fn eval(&self, expression: &str) -> Value {
        let body = json!({"script": format!("return {expression};"), "args": []});
        self.session("POST", "/execute/sync", Some(body))
            .await
            .expect("script")
    }

    /// Writes a PNG of the window to `path`.
    pub async fn screenshot(&self, path: &Path) {
        let value = self
            .session("GET", "/screenshot", None)
            .await
            .expect("screenshot");
        let png = base64::engine::general_purpose::STANDARD
            .decode(value.as_str().unwrap_or_default())
            .expect("a base64 PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("screenshot dir");
        }
        std::fs::write(path, png).expect("write screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ending the session closes Chromium; the driver goes after it.
        if !self.session.is_empty() {
            if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let _ = write!(
                    stream,
                    "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                    self.session
                );
                let _ = std::io::Read::read_to_end(&mut stream, &mut Vec::new());
            }
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
