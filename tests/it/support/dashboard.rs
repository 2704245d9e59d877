//! The dashboard as its tests drive it: a `cronq dashboard` (or a standalone's
//! `--dashboard-addr`) process on a free loopback port, its JSON API through reqwest, and
//! headless Chromium driven through its own chromedriver ([`Browser`]).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use super::data_file::DataFile;
use super::{TestEnv, eventually, free_addr};

/// The admin token the tests configure.
pub const TOKEN: &str = "test-admin-token-0123456789";

/// How long to wait for the dashboard, a run, a page.
pub const WAIT: Duration = Duration::from_secs(60);

/// A running dashboard.
#[derive(Debug, Clone)]
pub struct Dashboard {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Its process.
    pub pid: u32,
}

/// Starts `cronq ARGS ADDR_FLAG ADDR` (the dashboard, or a standalone with
/// `--dashboard-addr`), with the admin token when `token`, logging to `<log>.log`, and
/// waits until it has read the state once.
pub async fn start(
    env: &TestEnv,
    log: &str,
    args: &[&str],
    addr_flag: &str,
    token: bool,
) -> Dashboard {
    start_with(env, log, args, addr_flag, token, &[]).await
}

/// Starts `cronq standalone --config C --data F EXTRA --dashboard-addr ADDR` on `file`,
/// logging to `standalone.log`, as [`start`] does.
pub async fn standalone(file: &DataFile, extra: &[&str], token: bool) -> Dashboard {
    let config = file.config.to_string_lossy().into_owned();
    let data = file.arg();
    let mut args = vec!["standalone", "--config", &config, "--data", &data];
    args.extend_from_slice(extra);
    start(&file.env, "standalone", &args, "--dashboard-addr", token).await
}

/// As [`start`], with these environment variables set too.
pub async fn start_with(
    env: &TestEnv,
    log: &str,
    args: &[&str],
    addr_flag: &str,
    token: bool,
    vars: &[(&str, &str)],
) -> Dashboard {
    let addr = free_addr();
    let mut cmd = env.cronq();
    cmd.envs(vars.iter().copied());
    cmd.env_remove("CRONQ_DASHBOARD_TOKEN_FILE")
        .env_remove("CRONQ_TOKENS_FILE")
        .env_remove("CRONQ_DATA")
        .args(args)
        .args([addr_flag, &addr]);
    if token {
        cmd.env("CRONQ_DASHBOARD_TOKEN", TOKEN);
    } else {
        cmd.env_remove("CRONQ_DASHBOARD_TOKEN");
    }
    let pid = env.spawn_command(log, cmd);
    let d = Dashboard {
        base: format!("http://{addr}"),
        pid,
    };
    let url = d.url("/api/v1/fleet");
    eventually(
        WAIT,
        &format!("the dashboard at {url} ({log}.log)"),
        || async {
            let (status, v) = get(&url).await?;
            (status == StatusCode::OK && !v["taken_at"].is_null()).then_some(())
        },
    )
    .await;
    d
}

impl Dashboard {
    /// The URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// GET `path`, asserting 200, as JSON.
    pub async fn json(&self, path: &str) -> Value {
        let (status, v) = get(&self.url(path))
            .await
            .unwrap_or_else(|| panic!("GET {path}: no answer"));
        assert_eq!(status, StatusCode::OK, "GET {path}: {v}");
        v
    }

    /// POST `body` as JSON to `path`, with `Authorization: Bearer` when `bearer`.
    pub async fn post(&self, path: &str, bearer: Option<&str>, body: Value) -> (StatusCode, Value) {
        let mut req = reqwest::Client::new().post(self.url(path)).json(&body);
        if let Some(token) = bearer {
            req = req.bearer_auth(token);
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }
}

/// GET `url` as text.
pub async fn text(url: &str) -> String {
    reqwest::get(url)
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .text()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

/// GET `url` as JSON; `None` when it does not answer.
pub async fn get(url: &str) -> Option<(StatusCode, Value)> {
    let resp = reqwest::get(url).await.ok()?;
    let status = resp.status();
    let v = resp.json().await.ok()?;
    Some((status, v))
}

/// Headless Chromium through a chromedriver of its own on a free port; both are killed
/// (their whole process group) when it is dropped.
pub struct Browser {
    pub client: fantoccini::Client,
    /// Dropped last: ends chromedriver and Chromium.
    _driver: Driver,
}

/// chromedriver's process; dropping it kills its process group (Chromium with it).
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session.
    pub async fn start() -> Self {
        use std::os::unix::process::CommandExt as _;
        // fantoccini's rustls and lapin's bring two crypto providers: pick one, as main does.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let port = free_addr().rsplit(':').next().unwrap().to_owned();
        let driver = Driver(Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start chromedriver ({e}): install it with `apt-get install -y chromium chromium-driver`")
            }));
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({ "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"] }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let mut last = String::new();
        for _ in 0..100 {
            match fantoccini::ClientBuilder::rustls()
                .expect("rustls client")
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    return Self {
                        client,
                        _driver: driver,
                    };
                }
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("chromedriver at {url} gave no Chromium session: {last}");
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    /// The page's HTML now.
    pub async fn source(&self) -> String {
        self.client.source().await.expect("page source")
    }

    /// Waits until the page's HTML contains `text` (the page refreshes itself).
    pub async fn until_contains(&self, text: &str) -> String {
        let mut last = String::new();
        let deadline = std::time::Instant::now() + WAIT;
        while std::time::Instant::now() < deadline {
            last = self.source().await;
            if last.contains(text) {
                return last;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("the page never showed {text:?}; last seen:\n{last}");
    }

    /// Types `text` into the element `css`.
    pub async fn type_into(&self, css: &str, text: &str) {
        let e = self
            .client
            .find(fantoccini::Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css}: {e}"));
        e.send_keys(text).await.expect("type");
    }

    /// Clicks the element `css`.
    pub async fn click(&self, css: &str) {
        let e = self
            .client
            .find(fantoccini::Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css}: {e}"));
        e.click().await.expect("click");
    }

    /// How many elements match `css`.
    pub async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(fantoccini::Locator::Css(css))
            .await
            .map(|v| v.len())
            .unwrap_or(0)
    }

    /// Saves a PNG of the page as `<dir>/<name>.png`, and also into `$CRONQ_SCREENSHOTS`
    /// when set (docs/dashboard.md's screenshots are made so).
    pub async fn screenshot(&self, env: &TestEnv, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::write(env.dir.join(format!("{name}.png")), &png).expect("write screenshot");
        if let Ok(dir) = std::env::var("CRONQ_SCREENSHOTS") {
            std::fs::write(std::path::Path::new(&dir).join(format!("{name}.png")), &png)
                .expect("write screenshot");
        }
    }

    /// Ends the session, then chromedriver (on drop).
    pub async fn quit(self) {
        let _ = self.client.clone().close().await;
    }
}
