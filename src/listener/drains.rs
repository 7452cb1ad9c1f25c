//! Draining the connections one address forwards, before the whole broker stops: a cluster
//! member that is stopping asks the leader to drain the client connections it forwards
//! (`docs/cluster.md`, planned stops), so that its clients settle what they hold and are
//! closed as at a shutdown, instead of losing their connections mid-request when the member
//! ends.
//!
//! Each connection the listener accepts gets its own stop signal ([`Drains::signal`]): it
//! turns true when the broker stops, or when the connections from its peer's address that
//! were accepted before a drain request are drained ([`Drains::drain_from`]). A connection
//! accepted after the request (the member started again) is not touched.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::time::{Duration, Instant};

/// How long a drain request is remembered (only connections accepted before it are
/// drained, so an old request only matters to connections older than it).
const REMEMBERED: Duration = Duration::from_secs(3600);

/// The drain requests and how many connections each address has open.
#[derive(Debug)]
pub struct Drains {
    /// Every drain request still remembered: the address and when it was made.
    requests: watch::Sender<Vec<(IpAddr, Instant)>>,
    /// Open connections by peer address.
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Default for Drains {
    fn default() -> Self {
        Drains {
            requests: watch::channel(Vec::new()).0,
            open: Arc::default(),
        }
    }
}

impl Drains {
    /// Starts draining every open connection from `address`; how many there are.
    pub fn drain_from(&self, address: IpAddr) -> usize {
        let now = Instant::now();
        self.requests.send_modify(|requests| {
            requests.retain(|(_, at)| now.duration_since(*at) < REMEMBERED);
            requests.push((address, now));
        });
        self.open
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .get(&address)
            .copied()
            .unwrap_or(0)
    }

    /// The stop signal of a connection from `peer` accepted now: true once `shutdown` is,
    /// or once a drain request for `peer` comes.
    pub fn signal(&self, peer: IpAddr, shutdown: &watch::Receiver<bool>) -> watch::Receiver<bool> {
        let accepted = Instant::now();
        let open = self.open.clone();
        *open
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .entry(peer)
            .or_default() += 1;
        let asked = turns(self.requests.subscribe(), move |requests| {
            requests
                .iter()
                .any(|(address, at)| *address == peer && *at >= accepted)
        });
        stop_signal(shutdown, asked, move || {
            let mut open = open.lock().unwrap_or_else(|poison| poison.into_inner());
            if let Some(count) = open.get_mut(&peer) {
                *count -= 1;
                if *count == 0 {
                    open.remove(&peer);
                }
            }
        })
    }
}

/// Completes once `receiver`'s value satisfies `wanted`; never when its sender is gone.
pub async fn turns<T>(mut receiver: watch::Receiver<T>, wanted: impl FnMut(&T) -> bool) {
    if receiver.wait_for(wanted).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A stop signal of its own: true once `shutdown` is, or once `also` completes. `ended`
/// runs when every receiver of the signal is gone.
pub fn stop_signal(
    shutdown: &watch::Receiver<bool>,
    also: impl Future<Output = ()> + Send + 'static,
    ended: impl FnOnce() + Send + 'static,
) -> watch::Receiver<bool> {
    let (stop, signal) = watch::channel(*shutdown.borrow());
    let stopping = turns(shutdown.clone(), |stopping| *stopping);
    tokio::spawn(async move {
        tokio::select! {
            () = stopping => { let _ = stop.send(true); }
            () = also => { let _ = stop.send(true); }
            () = stop.closed() => {}
        }
        stop.closed().await;
        ended();
    });
    signal
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[tokio::test]
    async fn a_drain_stops_the_connections_from_its_address_accepted_before_it() {
        let drains = Drains::default();
        let (_broker, shutdown) = watch::channel(false);
        let mut from_two = drains.signal(address(2), &shutdown);
        let other = drains.signal(address(3), &shutdown);
        assert_eq!(drains.drain_from(address(2)), 1, "one connection from .2");
        from_two
            .wait_for(|stop| *stop)
            .await
            .expect("the drained connection is told to stop");
        let later = drains.signal(address(2), &shutdown);
        tokio::task::yield_now().await;
        assert!(!*other.borrow(), "another address is not drained");
        assert!(
            !*later.borrow(),
            "a connection accepted after the request is not"
        );
    }

    #[tokio::test]
    async fn every_connection_stops_with_the_broker_and_ended_ones_are_not_counted() {
        let drains = Drains::default();
        let (broker, shutdown) = watch::channel(false);
        let mut first = drains.signal(address(2), &shutdown);
        let ended = drains.signal(address(2), &shutdown);
        drop(ended);
        // The ended connection's task sees it gone and stops counting it.
        for _ in 0..100 {
            if drains.open.lock().unwrap().get(&address(2)) == Some(&1) {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(drains.open.lock().unwrap().get(&address(2)), Some(&1));
        broker.send(true).unwrap();
        first
            .wait_for(|stop| *stop)
            .await
            .expect("told to stop with the broker");
    }
}
