//! The broker core's tasks and the signal that stops them: every entity actor, topic,
//! forwarder and the registry's janitor is started here and watches `stopping`. At
//! shutdown — after the front end has closed every connection — [`Lifecycle::shut_down`]
//! signals them and waits for each to finish what it holds (with durable storage, that is
//! where the last changes are flushed).

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long shutdown waits for one task.
const TASK_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// The core's tasks.
#[derive(Debug)]
pub struct Lifecycle {
    stop: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Default for Lifecycle {
    fn default() -> Lifecycle {
        Lifecycle {
            stop: watch::channel(false).0,
            tasks: Mutex::new(Vec::new()),
        }
    }
}

impl Lifecycle {
    /// A receiver that turns true when the broker stops.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Starts a task the broker waits for at shutdown.
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let handle = tokio::spawn(task);
        if let Ok(mut tasks) = self.tasks.lock() {
            // Entities deleted at run time end their tasks: forget those.
            if tasks.len() >= 64 && tasks.len().is_power_of_two() {
                tasks.retain(|task| !task.is_finished());
            }
            tasks.push(handle);
        }
    }

    /// Ends every task at once, without letting it finish what it holds: a cluster
    /// member's entities of a group whose leadership ended (whatever they would still
    /// write, the group's new leader has decided otherwise).
    pub fn abort(&self) {
        for task in self.stop_all() {
            task.abort();
        }
    }

    /// Signals every task to stop and hands their handles over.
    fn stop_all(&self) -> Vec<JoinHandle<()>> {
        let _ = self.stop.send(true);
        self.tasks
            .lock()
            .map(|mut tasks| std::mem::take(&mut *tasks))
            .unwrap_or_default()
    }

    /// Stops every task and waits for each (at most a few seconds apiece).
    pub async fn shut_down(&self) {
        for task in self.stop_all() {
            let _ = tokio::time::timeout(TASK_STOP_TIMEOUT, task).await;
        }
    }
}

/// Resolves once `stopping` turns true; never, if its `Lifecycle` is gone without stopping
/// (tests that start an actor alone).
pub async fn stopped(stopping: &mut watch::Receiver<bool>) {
    if stopping.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn shut_down_stops_every_task_and_waits_for_it() {
        let lifecycle = Lifecycle::default();
        let finished = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            let mut stopping = lifecycle.stopping();
            let finished = finished.clone();
            lifecycle.spawn(async move {
                stopped(&mut stopping).await;
                // Work done after the signal (a flush) is waited for.
                tokio::task::yield_now().await;
                finished.fetch_add(1, Ordering::SeqCst);
            });
        }
        assert_eq!(finished.load(Ordering::SeqCst), 0);
        lifecycle.shut_down().await;
        assert_eq!(finished.load(Ordering::SeqCst), 3);
    }
}
