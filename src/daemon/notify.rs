//! The service manager's readiness protocol (`sd_notify`): when `NOTIFY_SOCKET` is set, state
//! lines are sent as one datagram to that unix socket — a path, or an abstract name written
//! with a leading `@`. Without the variable nothing is sent. A send that fails is logged at
//! debug level and otherwise ignored: the broker runs the same with or without a manager.

use std::os::unix::net::UnixDatagram;

/// The broker serves: `READY=1` with a `STATUS=` line.
pub fn ready(status: &str) {
    send(&format!("READY=1\nSTATUS={status}"));
}

/// A configuration reload begins (`RELOADING=1` with the monotonic time `Type=notify-reload`
/// asks for); [`ready`] follows when it ends, whatever its outcome.
pub fn reloading() {
    send(&format!(
        "RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading the configuration",
        monotonic_usec()
    ));
}

/// The broker is shutting down.
pub fn stopping() {
    send("STOPPING=1\nSTATUS=shutting down");
}

/// Sends `state` to `$NOTIFY_SOCKET`; false when the variable is unset or the send failed.
pub fn send(state: &str) -> bool {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return false;
    };
    match send_to(&target, state) {
        Ok(()) => true,
        Err(error) => {
            tracing::debug!(%error, socket = ?target, "cannot notify the service manager");
            false
        }
    }
}

fn send_to(target: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let socket = UnixDatagram::unbound()?;
    let bytes = target.as_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        return send_abstract(&socket, name, state);
    }
    if !bytes.starts_with(b"/") {
        return Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "NOTIFY_SOCKET is neither an absolute path nor an abstract name",
        ));
    }
    socket.send_to(state.as_bytes(), std::path::Path::new(target))?;
    Ok(())
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn send_abstract(socket: &UnixDatagram, name: &[u8], state: &str) -> std::io::Result<()> {
    #[cfg(target_os = "android")]
    use std::os::android::net::SocketAddrExt;
    #[cfg(target_os = "linux")]
    use std::os::linux::net::SocketAddrExt;
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
    socket.send_to_addr(state.as_bytes(), &address)?;
    Ok(())
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn send_abstract(_: &UnixDatagram, _: &[u8], _: &str) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "abstract socket names exist on Linux only",
    ))
}

/// `CLOCK_MONOTONIC` in microseconds.
fn monotonic_usec() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for clock_gettime to fill.
    let result = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    if result != 0 {
        return 0;
    }
    (now.tv_sec as u64) * 1_000_000 + (now.tv_nsec as u64) / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_reaches_a_path_and_an_abstract_name() {
        let directory =
            std::env::temp_dir().join(format!("ferrobus-notify-{}", std::process::id()));
        std::fs::create_dir_all(&directory).expect("temp dir");
        let path = directory.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixDatagram::bind(&path).expect("bind");
        send_to(path.as_os_str(), "READY=1").expect("send to a path");
        let mut buffer = [0u8; 64];
        let length = listener.recv(&mut buffer).expect("receive");
        assert_eq!(&buffer[..length], b"READY=1");
        let _ = std::fs::remove_dir_all(&directory);

        #[cfg(target_os = "linux")]
        {
            use std::os::linux::net::SocketAddrExt;
            let name = format!("ferrobus-notify-test-{}", std::process::id());
            let address =
                std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("name");
            let listener = UnixDatagram::bind_addr(&address).expect("bind abstract");
            send_to(std::ffi::OsStr::new(&format!("@{name}")), "STOPPING=1")
                .expect("send to an abstract name");
            let length = listener.recv(&mut buffer).expect("receive");
            assert_eq!(&buffer[..length], b"STOPPING=1");
        }
        assert!(send_to(std::ffi::OsStr::new("relative"), "READY=1").is_err());
        assert!(monotonic_usec() > 0);
    }
}
