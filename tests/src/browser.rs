//! A headless Chromium driven over W3C WebDriver (Debian's `chromium` and `chromium-driver`),
//! for the web console's end-to-end tests: a `Browser` starts its own chromedriver on a free
//! port with a fresh profile, and offers the few verbs the tests need (open, type, click,
//! read the page through a script, wait, screenshot).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine;
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// How long a wait for something on the page lasts before the test fails.
pub const WAIT: Duration = Duration::from_secs(20);

/// At most two browsers at once: each is several processes, and the machine has two cores.
static SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// The flags the issue and this machine's closed network call for: no sandbox (root), no
/// GPU, nothing that phones home, a window big enough for the console's two columns.
fn chromium_args(profile: &Path) -> Vec<String> {
    [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ]
    .iter()
    .map(|flag| (*flag).to_owned())
    .chain([format!("--user-data-dir={}", profile.display())])
    .collect()
}

pub struct Browser {
    driver: Child,
    http: reqwest::Client,
    session: String,
    base: String,
    _profile: tempfile::TempDir,
    _slot: tokio::sync::SemaphorePermit<'static>,
}

impl Browser {
    /// Starts chromedriver and a Chromium session; fails with the install command when the
    /// packages are missing.
    pub async fn start() -> anyhow::Result<Self> {
        for binary in [CHROMIUM, CHROMEDRIVER] {
            if !Path::new(binary).exists() {
                bail!("{binary} is missing: apt-get install chromium chromium-driver (scripts/test.sh does)");
            }
        }
        let slot = SLOTS.acquire().await?;
        let port = crate::free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start chromedriver")?;
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + WAIT;
        while http.get(format!("{base}/status")).send().await.is_err() {
            if Instant::now() > deadline {
                bail!("chromedriver did not answer on port {port}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir()?;
        let capabilities = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": CHROMIUM, "args": chromium_args(profile.path()) },
        }}});
        let reply: Value = http.post(format!("{base}/session")).json(&capabilities).send().await?.json().await?;
        let Some(session) = reply["value"]["sessionId"].as_str().map(str::to_owned) else {
            bail!("chromedriver refused a session: {reply}");
        };
        Ok(Self { driver, http, session, base, _profile: profile, _slot: slot })
    }

    async fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut request = self.http.request(method, url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let reply: Value = request.send().await?.json().await?;
        if let Some(error) = reply["value"]["error"].as_str() {
            bail!("webdriver {path}: {error}: {}", reply["value"]["message"].as_str().unwrap_or_default());
        }
        Ok(reply["value"].clone())
    }

    pub async fn open(&self, url: &str) -> anyhow::Result<()> {
        self.command(reqwest::Method::POST, "/url", Some(json!({ "url": url }))).await.map(drop)
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page.
    pub async fn script(&self, script: &str, args: Value) -> anyhow::Result<Value> {
        self.command(reqwest::Method::POST, "/execute/sync", Some(json!({ "script": script, "args": args }))).await
    }

    /// The visible text of the first element matching `selector`, or `None`.
    pub async fn text(&self, selector: &str) -> anyhow::Result<Option<String>> {
        let value = self
            .script("const e = document.querySelector(arguments[0]); return e ? e.innerText : null;", json!([selector]))
            .await?;
        Ok(value.as_str().map(str::to_owned))
    }

    /// Waits until `check` (a script returning a truthy value) holds; returns its value.
    pub async fn wait_for(&self, what: &str, check: &str, args: Value) -> anyhow::Result<Value> {
        let deadline = Instant::now() + WAIT;
        loop {
            let value = self.script(check, args.clone()).await?;
            if !(value.is_null() || value == json!(false) || value == json!("") || value == json!(0)) {
                return Ok(value);
            }
            if Instant::now() > deadline {
                let body = self.text("body").await?.unwrap_or_default();
                bail!("timed out waiting for {what}; the page says:\n{body}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the page's text under `selector` contains `needle`.
    pub async fn wait_text(&self, selector: &str, needle: &str) -> anyhow::Result<()> {
        let check = "const e = document.querySelector(arguments[0]); return e && e.innerText.includes(arguments[1]);";
        self.wait_for(&format!("`{needle}` in {selector}"), check, json!([selector, needle])).await.map(drop)
    }

    async fn element(&self, selector: &str) -> anyhow::Result<String> {
        let check = "return document.querySelector(arguments[0]) !== null;";
        self.wait_for(&format!("element {selector}"), check, json!([selector])).await?;
        let found = self
            .command(reqwest::Method::POST, "/element", Some(json!({ "using": "css selector", "value": selector })))
            .await?;
        found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .map(str::to_owned)
            .context("no element id")
    }

    /// Clears the field at `selector` and types `text` into it, as a person would.
    pub async fn fill(&self, selector: &str, text: &str) -> anyhow::Result<()> {
        let id = self.element(selector).await?;
        self.command(reqwest::Method::POST, &format!("/element/{id}/clear"), Some(json!({}))).await?;
        self.command(reqwest::Method::POST, &format!("/element/{id}/value"), Some(json!({ "text": text }))).await?;
        Ok(())
    }

    pub async fn click(&self, selector: &str) -> anyhow::Result<()> {
        let id = self.element(selector).await?;
        self.command(reqwest::Method::POST, &format!("/element/{id}/click"), Some(json!({}))).await.map(drop)
    }

    /// Picks `value` in the `<select>` at `selector`.
    pub async fn select(&self, selector: &str, value: &str) -> anyhow::Result<()> {
        self.element(selector).await?;
        let script = "const e = document.querySelector(arguments[0]); e.value = arguments[1]; \
                      e.dispatchEvent(new Event('change', {bubbles: true})); return e.value === arguments[1];";
        if self.script(script, json!([selector, value])).await? != json!(true) {
            bail!("{selector} has no option {value}");
        }
        Ok(())
    }

    /// A PNG of the window, written to `path`.
    pub async fn screenshot(&self, path: &Path) -> anyhow::Result<()> {
        let data = self.command(reqwest::Method::GET, "/screenshot", None).await?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(data.as_str().unwrap_or_default())?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, bytes)?;
        Ok(())
    }

    /// Ends the session and the driver.
    pub async fn close(mut self) {
        let _ = self.command(reqwest::Method::DELETE, "", None).await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // A failed test drops the browser without `close`: the driver takes Chromium down.
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Where the console tests put screenshots: `target/console-screenshots/`, or the
/// directory `RILL_CONSOLE_SCREENSHOTS` names (`just console-screenshots` gives `docs/console`).
pub fn screenshot_dir() -> PathBuf {
    match std::env::var_os("RILL_CONSOLE_SCREENSHOTS") {
        Some(dir) => crate::workspace_dir().join(dir),
        None => crate::workspace_dir().join("target").join("console-screenshots"),
    }
}
