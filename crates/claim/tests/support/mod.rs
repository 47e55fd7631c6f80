//! What the crate's tests share: the test DynamoDB (`AWS_ENDPOINT_URL_DYNAMODB`, or a dynalite
//! started here), uniquely named tables, the claims a table holds, and a plain HTTP/1.1 client over loopback.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use dynamo_claim::{ClaimRecord, ClaimTable};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

static ENDPOINT: OnceLock<String> = OnceLock::new();
static DYNALITE: Mutex<Option<Child>> = Mutex::new(None);
static TABLES: AtomicU64 = AtomicU64::new(0);

/// `AWS_ENDPOINT_URL_DYNAMODB`, or a dynalite started from the workspace's
/// `scripts/dynalite.js` (it exits when this process does: its stdin closes).
pub fn endpoint() -> String {
    ENDPOINT
        .get_or_init(|| {
            if let Ok(e) = std::env::var("AWS_ENDPOINT_URL_DYNAMODB") {
                if !e.is_empty() {
                    return e;
                }
            }
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/dynalite.js");
            let mut child = Command::new("node")
                .arg(script)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("set AWS_ENDPOINT_URL_DYNAMODB, or run `npm ci` at the workspace root");
            let mut line = String::new();
            BufReader::new(child.stdout.take().expect("stdout"))
                .read_line(&mut line)
                .expect("dynalite port");
            *DYNALITE.lock().unwrap() = Some(child);
            format!("http://127.0.0.1:{}", line.trim())
        })
        .clone()
}

/// A client of the test DynamoDB at `endpoint`, with generous timeouts for a loaded machine.
pub fn client_at(endpoint: &str) -> aws_sdk_dynamodb::Client {
    let timeouts = aws_sdk_dynamodb::config::timeout::TimeoutConfig::builder()
        .operation_attempt_timeout(Duration::from_secs(30))
        .operation_timeout(Duration::from_secs(120))
        .build();
    let conf = aws_sdk_dynamodb::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .timeout_config(timeouts)
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
        .build();
    aws_sdk_dynamodb::Client::from_conf(conf)
}

pub fn client() -> aws_sdk_dynamodb::Client {
    client_at(&endpoint())
}

/// A table name no other test (or test process) uses.
pub fn table_name(name: &str) -> String {
    let n = TABLES.fetch_add(1, Ordering::Relaxed);
    format!("claims-{name}-{}-{n}", std::process::id())
}

/// A fresh claim table.
pub async fn table(name: &str) -> ClaimTable {
    let table = ClaimTable::new(&client(), table_name(name));
    table.create_if_missing().await.unwrap();
    table
}

/// Every claim in table `name`, read back whole (a consistent scan).
pub async fn records(name: &str) -> Vec<ClaimRecord> {
    let mut out = Vec::new();
    let mut start = None;
    loop {
        let page = client()
            .scan()
            .table_name(name)
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        for item in page.items() {
            out.push(dynamo_claim::record_of(item, name).unwrap());
        }
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return out;
        }
    }
}

/// One HTTP answer as read off the wire.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One request on its own connection (`Connection: close`), read to its end: no client
/// library, so the bytes compared are the bytes sent.
pub async fn send(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    parse(&raw)
}

fn parse(raw: &[u8]) -> Reply {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of head in {:?}", String::from_utf8_lossy(raw)));
    let head = std::str::from_utf8(&raw[..end]).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_ascii_lowercase(), v.trim().to_owned())
        })
        .collect();
    let rest = &raw[end + 4..];
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        unchunk(rest)
    } else {
        rest.to_vec()
    };
    Reply {
        status,
        headers,
        body,
    }
}

fn unchunk(mut rest: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let size_text = std::str::from_utf8(&rest[..line_end]).unwrap();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
        rest = &rest[line_end + 2..];
        if size == 0 {
            return body;
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}
