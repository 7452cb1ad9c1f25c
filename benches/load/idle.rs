//! The `idle` command (S7): opens many connections, each with a session and a sender link,
//! leaves them idle, and reports how much the broker's resident set grew per connection.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fe2o3_amqp::Sender;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::connect::{self, Endpoint};
use crate::options::IdleOptions;
use crate::process_stats::{Process, Snapshot};

/// Builds a runtime and runs.
pub fn main(options: IdleOptions) -> ExitCode {
    let runtime = match crate::run::build_runtime(1) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("load: cannot start the runtime: {error}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(run(Arc::new(options)))
}

async fn run(options: Arc<IdleOptions>) -> ExitCode {
    let Some(pid) = options.connect.broker_pid else {
        eprintln!("load: idle needs --broker-pid");
        return ExitCode::from(2);
    };
    let broker = Process::Pid(pid);
    let before = Snapshot::take(broker);
    let started = Instant::now();
    let permits = Arc::new(Semaphore::new(options.parallel.max(1)));
    let mut opening = JoinSet::new();
    for index in 0..options.connections {
        let options = options.clone();
        let permits = permits.clone();
        opening.spawn(async move {
            let _permit = permits.acquire_owned().await;
            open_idle(&options, index).await
        });
    }
    let mut open = Vec::with_capacity(options.connections);
    let mut first_error = None;
    while let Some(joined) = opening.join_next().await {
        match joined {
            Ok(Ok(held)) => open.push(held),
            Ok(Err(error)) => {
                first_error.get_or_insert(error);
            }
            Err(error) => {
                first_error.get_or_insert(error.to_string());
            }
        }
    }
    let open_seconds = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs_f64(options.settle)).await;
    let after = Snapshot::take(broker);
    let grown = after.resident_kib.saturating_sub(before.resident_kib);
    let opened = open.len();
    println!(
        "result scenario={} target={} connections={} opened={} open_s={:.2} \
         broker_rss_before_kib={} broker_rss_after_kib={} kib_per_connection={:.1} \
         broker_cpu_s={:.2}",
        options.connect.scenario,
        options.connect.target,
        options.connections,
        opened,
        open_seconds,
        before.resident_kib,
        after.resident_kib,
        if opened == 0 {
            0.0
        } else {
            grown as f64 / opened as f64
        },
        after.cpu_seconds - before.cpu_seconds,
    );
    if let Some(error) = &first_error {
        eprintln!("load: {error}");
    }
    let mut closing = JoinSet::new();
    for (endpoint, sender) in open {
        closing.spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(5), sender.close()).await;
            endpoint.close().await;
        });
    }
    while closing.join_next().await.is_some() {}
    if first_error.is_none() && opened == options.connections {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

async fn open_idle(options: &IdleOptions, index: usize) -> Result<(Endpoint, Sender), String> {
    let name = format!("load-idle-{index}");
    let mut endpoint = connect::open(&options.connect, &name)
        .await
        .map_err(|error| error.to_string())?;
    let sender = Sender::attach(&mut endpoint.session, name, options.address.as_str())
        .await
        .map_err(|error| format!("attach {}: {error}", options.address))?;
    Ok((endpoint, sender))
}
