//! A small W3C WebDriver client over plain HTTP to a local `chromedriver`, driving Debian's
//! headless Chromium: navigate, find by CSS, read text and attributes, click, screenshot. The
//! protocol is a handful of JSON calls; no crate needed.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Where the browser and its driver are: `PAYHOOK_CHROMIUM` / `PAYHOOK_CHROMEDRIVER`, else
/// Debian's paths. `None` when either is missing.
pub fn browser() -> Option<(PathBuf, PathBuf)> {
    let find = |var: &str, default: &str| {
        let p = PathBuf::from(std::env::var(var).unwrap_or_else(|_| default.to_owned()));
        p.exists().then_some(p)
    };
    Some((
        find("PAYHOOK_CHROMIUM", "/usr/bin/chromium")?,
        find("PAYHOOK_CHROMEDRIVER", "/usr/bin/chromedriver")?,
    ))
}

/// A chromedriver process and one headless session; both end on drop.
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    profile: PathBuf,
}

async fn call(method: &str, url: &str, body: Option<Value>) -> Value {
    let client: Client<_, Full<bytes::Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let req = http::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let res = client.request(req).await.unwrap();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if v["value"].get("error").is_some() {
        panic!("webdriver {method} {url}: {}", v["value"]);
    }
    v["value"].clone()
}

impl Browser {
    pub async fn start(chromium: &Path, chromedriver: &Path) -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let base = format!("http://127.0.0.1:{port}");
        let profile = std::env::temp_dir().join(format!("payhook-chromium-{port}"));
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium.to_str().unwrap(), "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1280,1000", format!("--user-data-dir={}", profile.display())]}}}});
        let session = call("POST", &format!("{base}/session"), Some(caps)).await;
        let session = session["sessionId"].as_str().unwrap().to_owned();
        Browser {
            driver,
            base,
            session,
            profile,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/session/{}{path}", self.base, self.session)
    }

    pub async fn goto(&self, url: &str) {
        call("POST", &self.url("/url"), Some(json!({"url": url}))).await;
    }

    pub async fn current_url(&self) -> String {
        call("GET", &self.url("/url"), None)
            .await
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Element ids matching `css` (empty when none).
    pub async fn all(&self, css: &str) -> Vec<String> {
        let found = call(
            "POST",
            &self.url("/elements"),
            Some(json!({"using": "css selector", "value": css})),
        )
        .await;
        found
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e[ELEMENT].as_str().unwrap().to_owned())
            .collect()
    }

    pub async fn one(&self, css: &str) -> String {
        let all = self.all(css).await;
        assert!(
            !all.is_empty(),
            "no element {css} on {}",
            self.current_url().await
        );
        all[0].clone()
    }

    pub async fn text(&self, css: &str) -> String {
        let e = self.one(css).await;
        call("GET", &self.url(&format!("/element/{e}/text")), None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub async fn texts(&self, css: &str) -> Vec<String> {
        let mut out = Vec::new();
        for e in self.all(css).await {
            let t = call("GET", &self.url(&format!("/element/{e}/text")), None).await;
            out.push(t.as_str().unwrap_or_default().to_owned());
        }
        out
    }

    pub async fn attr(&self, css: &str, name: &str) -> String {
        let e = self.one(css).await;
        call(
            "GET",
            &self.url(&format!("/element/{e}/attribute/{name}")),
            None,
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    pub async fn attrs(&self, css: &str, name: &str) -> Vec<String> {
        let mut out = Vec::new();
        for e in self.all(css).await {
            let v = call(
                "GET",
                &self.url(&format!("/element/{e}/attribute/{name}")),
                None,
            )
            .await;
            out.push(v.as_str().unwrap_or_default().to_owned());
        }
        out
    }

    /// Clicks the element and waits for the page it loads (every click here loads one; the
    /// click's answer can come before the page has).
    /// Types `text` into the field `css` and presses Enter, as an operator submits a form
    /// from the keyboard; returns once the next page has loaded.
    pub async fn type_and_submit(&self, css: &str, text: &str) {
        let before = self.one("html").await;
        let e = self.one(css).await;
        call(
            "POST",
            &self.url(&format!("/element/{e}/value")),
            Some(json!({ "text": format!("{text}\u{E007}") })),
        )
        .await;
        for _ in 0..200 {
            if self.all("html").await.first() != Some(&before) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("submitting {css} loaded no page");
    }

    pub async fn click(&self, css: &str) {
        let before = self.one("html").await;
        let e = self.one(css).await;
        call(
            "POST",
            &self.url(&format!("/element/{e}/click")),
            Some(json!({})),
        )
        .await;
        for _ in 0..200 {
            if self.all("html").await.first() != Some(&before) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("clicking {css} loaded no page");
    }

    pub async fn source(&self) -> String {
        call("GET", &self.url("/source"), None)
            .await
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Sets the window's outer size (a phone: 375 wide).
    pub async fn resize(&self, width: u32, height: u32) {
        let rect = json!({"width": width, "height": height});
        call("POST", &self.url("/window/rect"), Some(rect)).await;
    }

    /// How much wider than the viewport the page is, in CSS pixels (0: nothing to scroll
    /// sideways).
    pub async fn overflow_px(&self) -> i64 {
        let js = "return document.documentElement.scrollWidth - window.innerWidth;";
        let v = call(
            "POST",
            &self.url("/execute/sync"),
            Some(json!({"script": js, "args": []})),
        )
        .await;
        v.as_i64().unwrap_or(i64::MAX)
    }

    /// Saves a PNG of the viewport to `path`.
    pub async fn screenshot(&self, path: &Path) {
        let b64 = call("GET", &self.url("/screenshot"), None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap())
            .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    /// Ends the session first (chromedriver then closes Chromium), then the driver.
    fn drop(&mut self) {
        use std::io::{Read, Write};
        let host = self.base.trim_start_matches("http://");
        if let Ok(mut s) = std::net::TcpStream::connect(host) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = write!(
                s,
                "DELETE /session/{} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                self.session
            );
            let _ = s.read_to_end(&mut Vec::new());
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
