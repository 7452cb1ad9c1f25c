//! The `ferrobus` binary: `--check-config`, configuration errors, the built-in default and
//! the start-up line that names the listen address.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const BINARY: &str = env!("CARGO_BIN_EXE_ferrobus");

/// A directory of the test's own, removed when the test is done with it.
struct ScratchDir(std::path::PathBuf);

impl std::ops::Deref for ScratchDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch_dir(name: &str) -> ScratchDir {
    let dir = std::env::temp_dir().join(format!("ferrobus-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    ScratchDir(dir)
}

/// Starts the binary on an ephemeral port in `dir` (no `--config`) and returns it with its
/// stderr and the start-up line it logged.
fn start_in(
    dir: &std::path::Path,
) -> (
    std::process::Child,
    BufReader<std::process::ChildStderr>,
    String,
) {
    let mut child = Command::new(BINARY)
        .args(["--listen", "127.0.0.1:0"])
        .current_dir(dir)
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    stderr.read_line(&mut line).expect("a start-up line");
    (child, stderr, line)
}

#[test]
fn check_config_lists_the_entities_and_exits_zero() {
    let output = Command::new(BINARY)
        .args([
            "--check-config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/ferrobus.toml"),
        ])
        .output()
        .expect("runs");
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("queue \"queue.1\""), "{text}");
    assert!(text.contains("subscription \"subscription.1\""), "{text}");
}

#[test]
fn an_unknown_key_is_reported_with_its_line_and_exit_one() {
    let dir = scratch_dir("unknown-key");
    let path = dir.join("bad.toml");
    std::fs::write(&path, "[[queues]]\nname = \"a\"\nlock_duraton = \"1s\"\n").expect("write");
    for flag in ["--check-config", "--config"] {
        let output = Command::new(BINARY)
            .args([flag, path.to_str().expect("utf-8 path")])
            .args(if flag == "--config" {
                vec!["--listen", "127.0.0.1:0"]
            } else {
                vec![]
            })
            .output()
            .expect("runs");
        assert_eq!(output.status.code(), Some(1), "{flag}");
        let text = String::from_utf8_lossy(&output.stderr);
        assert!(
            text.contains("bad.toml:3") && text.contains("lock_duraton"),
            "{flag}: {text}"
        );
    }
}

#[test]
fn invalid_rule_sql_stops_the_broker_with_the_position() {
    let dir = scratch_dir("bad-sql");
    let path = dir.join("rules.toml");
    std::fs::write(
        &path,
        "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\n[[topics.subscriptions.rules]]\nname = \"r\"\nsql_filter = \"color = = 1\"\n",
    )
    .expect("write");
    let output = Command::new(BINARY)
        .args([
            "--config",
            path.to_str().expect("utf-8 path"),
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1));
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(
        text.contains("rule 'r'") && text.contains("column 9"),
        "{text}"
    );
}

#[test]
fn without_a_config_file_the_built_in_default_is_served() {
    // No --config and no config/ferrobus.toml in the working directory.
    let dir = scratch_dir("default");
    let (mut child, _, line) = start_in(&dir);
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.contains("listening on 127.0.0.1:"), "{line}");
    assert!(
        line.contains("with 3 entities") && line.contains("built-in default"),
        "{line}"
    );
}

#[test]
fn sigterm_stops_the_broker_cleanly() {
    let dir = scratch_dir("sigterm");
    let (mut child, mut stderr, _) = start_in(&dir);
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let exit = child.wait().expect("exits");
    assert_eq!(exit.code(), Some(0), "a clean stop exits 0");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).expect("stderr");
    assert!(rest.contains("shutting down"), "{rest}");
}

#[test]
fn a_tls_certificate_that_cannot_be_read_is_reported_by_its_key_and_stops_the_broker() {
    let dir = scratch_dir("tls-files");
    let path = dir.join("tls.toml");
    let missing = dir.join("missing-cert.pem");
    std::fs::write(
        &path,
        format!(
            "[tls]\ncert = \"{}\"\nkey = \"{}\"\n",
            missing.display(),
            dir.join("missing-key.pem").display()
        ),
    )
    .expect("write");
    for flag in ["--check-config", "--config"] {
        let output = Command::new(BINARY)
            .args([flag, path.to_str().expect("utf-8 path")])
            .args(if flag == "--config" {
                vec!["--listen", "127.0.0.1:0", "--memory"]
            } else {
                vec![]
            })
            .output()
            .expect("runs");
        assert_eq!(output.status.code(), Some(1), "{flag}");
        let text = String::from_utf8_lossy(&output.stderr);
        assert!(
            text.contains("tls.cert") && text.contains("missing-cert.pem"),
            "{flag}: {text}"
        );
        assert!(!text.contains("http.tls_cert"), "{flag}: {text}");
    }
}
