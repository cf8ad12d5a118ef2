//! A minimal HTTP endpoint for the server's statistics (`--metrics ADDR`).
//!
//! `GET /metrics` answers the Prometheus text format; `GET /stats` the `nfsstat -s`-like text
//! that `sluice stats ADDR` prints. Anything else is 404. One request per connection, requests
//! bounded to 8 KiB, so a scraper cannot make the server hold memory.

use crate::stats::Stats;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const REQUEST_BYTES_MAX: usize = 8 * 1024;

pub async fn serve(listener: TcpListener, stats: Arc<Stats>) -> std::io::Result<()> {
    loop {
        let (mut sock, _) = listener.accept().await?;
        let stats = stats.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; REQUEST_BYTES_MAX];
            let mut n = 0;
            let read = tokio::time::timeout(Duration::from_secs(5), async {
                while n < buf.len() {
                    let k = sock.read(&mut buf[n..]).await?;
                    if k == 0 {
                        break;
                    }
                    n += k;
                    if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                Ok::<_, std::io::Error>(())
            })
            .await;
            if !matches!(read, Ok(Ok(()))) {
                return;
            }
            let line = String::from_utf8_lossy(&buf[..n]);
            let path = line.split_whitespace().nth(1).unwrap_or("");
            let (status, ctype, body) = match path {
                "/metrics" => (
                    "200 OK",
                    "text/plain; version=0.0.4",
                    stats.render_prometheus(),
                ),
                "/stats" => ("200 OK", "text/plain", stats.render()),
                _ => (
                    "404 Not Found",
                    "text/plain",
                    "try /metrics or /stats\n".to_string(),
                ),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = sock.write_all(head.as_bytes()).await;
            let _ = sock.write_all(body.as_bytes()).await;
            let _ = sock.shutdown().await;
        });
    }
}

/// Fetches `/stats` from a server's metrics endpoint (for `sluice stats ADDR`).
pub async fn fetch(addr: std::net::SocketAddr, path: &str) -> Result<String, String> {
    let mut sock = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot reach the metrics endpoint {addr}: {e} (start the server with --metrics {addr})"))?;
    sock.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    sock.read_to_end(&mut out)
        .await
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out);
    match text.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_string()),
        _ => Err(format!(
            "{addr}: unexpected answer from the metrics endpoint"
        )),
    }
}
