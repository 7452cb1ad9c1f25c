//! `ferrobus health [--url URL]`: asks a running broker's `GET /health` and exits 0 when it
//! answers 200, 1 otherwise (refused, timed out, not HTTP, or any other status).
//!
//! It exists for the container image, which is built `FROM scratch`: there is no shell and no
//! curl in it, so the image's `HEALTHCHECK` runs the broker's own binary. It speaks plain
//! HTTP/1.1 over one `std::net::TcpStream` with a deadline (no runtime, no new dependency);
//! HTTPS is not supported — the health route is served on the plain HTTP port (5300).
//!
//! Owns the request and the reading of the status line only; the route itself is the admin
//! plane's (`docs/admin-api.md`).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How long the whole check may take: connecting, writing, and reading the status line.
/// Container runtimes give a health check 30 s by default; a broker that needs more than a
/// few seconds to answer is not healthy.
const DEADLINE: Duration = Duration::from_secs(5);

/// The URL checked when `--url` is not given: `http://127.0.0.1:PORT/health`, PORT being
/// `EMULATOR_HTTP_PORT` when set (the broker binds its HTTP listener there too), else 5300.
pub fn default_url() -> String {
    let port = std::env::var("EMULATOR_HTTP_PORT")
        .ok()
        .and_then(|text| text.trim().parse::<u16>().ok())
        .unwrap_or(ferrobus::config::DEFAULT_HTTP_PORT);
    format!("http://127.0.0.1:{port}/health")
}

/// Runs the check, prints one line (stdout when healthy, stderr otherwise) and returns the
/// exit code.
pub fn run(url: Option<&str>) -> ExitCode {
    let url = url.map_or_else(default_url, str::to_string);
    match check(&url) {
        Ok(()) => {
            println!("{url}: healthy");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("ferrobus health: {url}: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `http://HOST[:PORT][/PATH]` split into the address to connect to, the `Host` header and
/// the path.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    authority: String,
    address: String,
    path: String,
}

fn parse_url(url: &str) -> Result<Target, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| "only http:// URLs are supported".to_string())?;
    let (authority, path) = match rest.find('/') {
        Some(index) => (&rest[..index], &rest[index..]),
        None => (rest, "/health"),
    };
    if authority.is_empty() {
        return Err("the URL names no host".to_string());
    }
    let has_port = match authority.rfind(':') {
        Some(index) => !authority[index..].contains(']'),
        None => false,
    };
    let address = if has_port {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    Ok(Target {
        authority: authority.to_string(),
        address,
        path: path.to_string(),
    })
}

/// GETs the URL and succeeds on a 200 status line.
fn check(url: &str) -> Result<(), String> {
    let target = parse_url(url)?;
    let started = Instant::now();
    let remaining = || {
        DEADLINE
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(1))
    };
    let addresses = target
        .address
        .to_socket_addrs()
        .map_err(|error| format!("cannot resolve {}: {error}", target.address))?;
    let mut last_error = format!("{} resolves to no address", target.address);
    let mut stream = None;
    for address in addresses {
        match TcpStream::connect_timeout(&address, remaining()) {
            Ok(connected) => {
                stream = Some(connected);
                break;
            }
            Err(error) => last_error = format!("cannot connect to {address}: {error}"),
        }
    }
    let mut stream = stream.ok_or(last_error)?;
    let io_error = |error: std::io::Error| error.to_string();
    stream
        .set_write_timeout(Some(remaining()))
        .map_err(io_error)?;
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nUser-Agent: ferrobus-health\r\n\r\n",
        target.path, target.authority
    );
    stream.write_all(request.as_bytes()).map_err(io_error)?;
    let mut head = Vec::new();
    let mut buffer = [0_u8; 256];
    while !head.contains(&b'\n') && head.len() < 4096 {
        stream
            .set_read_timeout(Some(remaining()))
            .map_err(io_error)?;
        match stream.read(&mut buffer).map_err(io_error)? {
            0 => break,
            read => head.extend_from_slice(&buffer[..read]),
        }
    }
    let status_line = String::from_utf8_lossy(&head);
    let status_line = status_line.lines().next().unwrap_or("").trim();
    match status_line.split_whitespace().nth(1) {
        Some("200") => Ok(()),
        Some(_) if status_line.starts_with("HTTP/") => Err(format!("answered {status_line:?}")),
        _ => Err(format!("not an HTTP answer: {status_line:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn urls_are_split_into_address_host_and_path() {
        assert_eq!(
            parse_url("http://127.0.0.1:5300/health"),
            Ok(Target {
                authority: "127.0.0.1:5300".into(),
                address: "127.0.0.1:5300".into(),
                path: "/health".into()
            })
        );
        assert_eq!(
            parse_url("http://broker").map(|target| (target.address, target.path)),
            Ok(("broker:80".into(), "/health".into()))
        );
        assert_eq!(
            parse_url("http://[::1]/x").map(|target| target.address),
            Ok("[::1]:80".into())
        );
        assert!(parse_url("https://127.0.0.1:5300/health").is_err());
        assert!(parse_url("http:///health").is_err());
    }

    /// Serves one connection with `answer` and returns the URL to check.
    fn serve_once(answer: &'static str) -> std::io::Result<String> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://{}/health", listener.local_addr()?);
        std::thread::spawn(move || {
            if let Ok((mut stream, _)) = listener.accept() {
                let mut request = [0_u8; 1024];
                let _ = stream.read(&mut request);
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        Ok(url)
    }

    #[test]
    fn a_200_is_healthy_and_anything_else_is_not() -> std::io::Result<()> {
        let healthy = serve_once("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")?;
        assert_eq!(check(&healthy), Ok(()));
        let starting = serve_once("HTTP/1.1 503 Service Unavailable\r\n\r\n")?;
        assert_eq!(
            check(&starting),
            Err("answered \"HTTP/1.1 503 Service Unavailable\"".to_string())
        );
        let garbage = serve_once("AMQP\0\x01\0\0")?;
        assert!(check(&garbage).is_err_and(|error| error.starts_with("not an HTTP answer")));
        Ok(())
    }

    #[test]
    fn nothing_listening_is_unhealthy() -> std::io::Result<()> {
        let address = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let error = check(&format!("http://{address}/health"));
        assert!(error.is_err_and(|error| error.starts_with("cannot connect")));
        Ok(())
    }
}
