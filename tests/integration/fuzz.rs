//! Structured fuzzing of the running broker (issue 10, "Proof"): client sessions recorded
//! from the official SDK and Qpid Proton (`tests/fuzz/corpus/`, see
//! `scripts/fuzz/record.py`) are split into frames, mutated — frames dropped, repeated,
//! swapped, spliced from other sessions, truncated, resized, bit-flipped, given boundary
//! values and values nested thousands deep — and replayed at a broker *process* in
//! concurrent batches. After every batch the process must still be running and serve a
//! fresh client a message end to end.
//!
//! Short in `cargo test` (`FERROBUS_FUZZ_SECONDS`, default 15); longer on demand:
//! `FERROBUS_FUZZ_SECONDS=600 cargo test --test integration fuzz -- --nocapture`.
//! `FERROBUS_FUZZ_SEED=<n>` replays a run; a failing batch is written to
//! `target/fuzz-failures/` with its seed.

use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::process::BrokerProcess;

/// A small deterministic generator (xorshift64*), seeded per run.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, bound: usize) -> usize {
        if bound == 0 {
            0
        } else {
            (self.next() % bound as u64) as usize
        }
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// A recorded session: its protocol header(s) and frames, in order. A SASL session has
/// two headers; they are kept as "frames" of their own so mutations can move them too.
#[derive(Clone)]
struct Session {
    name: String,
    units: Vec<Vec<u8>>,
}

fn split(name: &str, bytes: &[u8]) -> Session {
    let mut units = Vec::new();
    let mut position = 0;
    while position < bytes.len() {
        let rest = &bytes[position..];
        if rest.starts_with(b"AMQP") && rest.len() >= 8 {
            units.push(rest[..8].to_vec());
            position += 8;
            continue;
        }
        if rest.len() < 8 {
            units.push(rest.to_vec());
            break;
        }
        let size = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let size = size.clamp(8, rest.len());
        units.push(rest[..size].to_vec());
        position += size;
    }
    Session {
        name: name.to_string(),
        units,
    }
}

fn corpus() -> Vec<Session> {
    let directory = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/corpus");
    let mut sessions: Vec<Session> = std::fs::read_dir(&directory)
        .expect("the recorded corpus is committed")
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let bytes = std::fs::read(&path).ok()?;
            let name = path.file_name()?.to_string_lossy().into_owned();
            Some(split(&name, &bytes))
        })
        .collect();
    sessions.sort_by(|left, right| left.name.cmp(&right.name));
    assert!(!sessions.is_empty(), "no corpus in {}", directory.display());
    sessions
}

/// A value nested `depth` levels (lists), the input that once overflowed the stack.
fn deep_value(depth: usize) -> Vec<u8> {
    let mut value = vec![0x40];
    for _ in 0..depth {
        let mut list = vec![0xd0];
        list.extend_from_slice(&((value.len() + 4) as u32).to_be_bytes());
        list.extend_from_slice(&1u32.to_be_bytes());
        list.extend_from_slice(&value);
        value = list;
    }
    value
}

/// Rewrites a frame's size field to its length (after a mutation changed the length).
fn fix_size(frame: &mut [u8]) {
    if frame.len() >= 8 && !frame.starts_with(b"AMQP") {
        let size = (frame.len() as u32).to_be_bytes();
        frame[..4].copy_from_slice(&size);
    }
}

/// One mutation of a frame's body.
fn mutate_frame(random: &mut Random, frame: &mut Vec<u8>) {
    if frame.len() < 8 || frame.starts_with(b"AMQP") {
        let index = random.below(frame.len().max(1));
        if let Some(byte) = frame.get_mut(index) {
            *byte ^= 1 << random.below(8);
        }
        return;
    }
    let body = 8..frame.len();
    match random.below(9) {
        // Flip bits in the body.
        0 => {
            for _ in 0..1 + random.below(4) {
                if body.is_empty() {
                    break;
                }
                let index = body.start + random.below(body.len());
                frame[index] ^= 1 << random.below(8);
            }
        }
        // Truncate the body (size fixed, so the frame is whole but its content is not).
        1 => {
            let keep = 8 + random.below(frame.len() - 8 + 1);
            frame.truncate(keep);
            fix_size(frame);
        }
        // Lie about the size.
        2 => {
            let size: u32 = match random.below(4) {
                0 => 0,
                1 => 7,
                2 => u32::MAX,
                _ => frame.len() as u32 + 1 + random.below(1000) as u32,
            };
            frame[..4].copy_from_slice(&size.to_be_bytes());
        }
        // Another channel or frame type.
        3 => {
            if random.chance(50) {
                frame[6..8].copy_from_slice(&(random.below(70_000) as u16).to_be_bytes());
            } else {
                frame[5] = random.below(8) as u8;
            }
        }
        // Boundary values for every uint found: 0 or u32::MAX.
        4 => {
            let boundary: [u8; 4] = if random.chance(50) { [0; 4] } else { [0xff; 4] };
            let mut index = 8;
            while index + 5 <= frame.len() {
                if frame[index] == 0x70 && random.chance(30) {
                    frame[index + 1..index + 5].copy_from_slice(&boundary);
                }
                index += 1;
            }
        }
        // Huge declared lengths for a string, binary or compound.
        5 => {
            if frame.len() > 9 {
                let index = 8 + random.below(frame.len() - 9);
                let constructor = [0xb1, 0xb0, 0xd0, 0xd1, 0xf0][random.below(5)];
                frame[index] = constructor;
                let end = (index + 5).min(frame.len());
                for byte in &mut frame[index + 1..end] {
                    *byte = 0xff;
                }
            }
        }
        // A deeply nested value spliced in.
        6 => {
            let at = 8 + random.below(frame.len() - 8 + 1);
            let depth = [40, 500, 3_000][random.below(3)];
            let value = deep_value(depth);
            frame.splice(at..at, value);
            fix_size(frame);
        }
        // Random bytes appended.
        7 => {
            for _ in 0..random.below(64) {
                frame.push(random.next() as u8);
            }
            fix_size(frame);
        }
        // A described-type code replaced.
        _ => {
            if let Some(index) = frame.windows(2).position(|window| window == [0x00, 0x53])
                && index + 2 < frame.len()
            {
                frame[index + 2] = random.next() as u8;
            }
        }
    }
}

/// A mutated session: structure first (frames dropped, repeated, swapped, spliced), then
/// the content of a few frames.
fn mutate(random: &mut Random, corpus: &[Session]) -> Vec<u8> {
    let mut units = corpus[random.below(corpus.len())].units.clone();
    for _ in 0..1 + random.below(4) {
        if units.is_empty() {
            break;
        }
        let index = random.below(units.len());
        match random.below(6) {
            0 => {
                units.remove(index);
            }
            1 => {
                let copy = units[index].clone();
                units.insert(index, copy);
            }
            2 => {
                let other = random.below(units.len());
                units.swap(index, other);
            }
            3 => {
                let donor = &corpus[random.below(corpus.len())].units;
                if !donor.is_empty() {
                    let frame = donor[random.below(donor.len())].clone();
                    units.insert(index, frame);
                }
            }
            _ => mutate_frame(random, &mut units[index]),
        }
    }
    units.concat()
}

/// Sends one input and reads what comes back for a moment; every step is bounded in time.
async fn replay(address: std::net::SocketAddr, input: Vec<u8>) {
    let Ok(Ok(mut stream)) =
        tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(address)).await
    else {
        return;
    };
    for chunk in input.chunks(4096) {
        if tokio::time::timeout(Duration::from_millis(500), stream.write_all(chunk))
            .await
            .map_or(true, |written| written.is_err())
        {
            return;
        }
    }
    let mut sink = vec![0u8; 65536];
    let deadline = tokio::time::Instant::now() + Duration::from_millis(300);
    while let Ok(Ok(read)) = tokio::time::timeout_at(deadline, stream.read(&mut sink)).await {
        if read == 0 {
            break;
        }
    }
}

/// A well-behaved client sends a message and takes it back.
async fn serves_a_fresh_client(address: std::net::SocketAddr) -> Result<(), String> {
    let url = format!("amqp://{address}");
    let work = async {
        let mut connection = fe2o3_amqp::Connection::open("after-fuzz", url.as_str())
            .await
            .map_err(|error| format!("connect: {error:?}"))?;
        let mut session = fe2o3_amqp::Session::begin(&mut connection)
            .await
            .map_err(|error| format!("session: {error:?}"))?;
        let mut sender = fe2o3_amqp::Sender::attach(&mut session, "check-sender", "check")
            .await
            .map_err(|error| format!("sender: {error:?}"))?;
        sender
            .send("still here")
            .await
            .map_err(|error| format!("send: {error:?}"))?;
        let mut receiver = fe2o3_amqp::Receiver::attach(&mut session, "check-receiver", "check")
            .await
            .map_err(|error| format!("receiver: {error:?}"))?;
        let delivery = receiver
            .recv::<fe2o3_amqp::types::messaging::Body<fe2o3_amqp::types::primitives::Value>>()
            .await
            .map_err(|error| format!("receive: {error:?}"))?;
        receiver
            .accept(&delivery)
            .await
            .map_err(|error| format!("complete: {error:?}"))?;
        let _ = connection.close().await;
        Ok(())
    };
    tokio::time::timeout(Duration::from_secs(10), work)
        .await
        .map_err(|_| "a fresh client was not served within 10 s".to_string())?
}

fn save_failure(seed: u64, batch: usize, inputs: &[Vec<u8>]) -> PathBuf {
    let directory = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/fuzz-failures")
        .join(format!("seed-{seed}-batch-{batch}"));
    let _ = std::fs::create_dir_all(&directory);
    for (index, input) in inputs.iter().enumerate() {
        let _ = std::fs::write(directory.join(format!("input-{index}.bin")), input);
    }
    directory
}

#[tokio::test]
async fn mutated_client_sessions_never_take_the_broker_down() {
    let seconds: u64 = std::env::var("FERROBUS_FUZZ_SECONDS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(15);
    let seed: u64 = std::env::var("FERROBUS_FUZZ_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |elapsed| elapsed.as_nanos() as u64)
                | 1
        });
    let corpus = corpus();
    let mut broker = BrokerProcess::start(
        "[server]\nidle_timeout = \"2s\"\n[[queues]]\nname = \"q\"\n[[queues]]\nname = \"sessions\"\nrequires_session = true\n[[queues]]\nname = \"check\"\n[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = \"s\"\n",
        &[],
    );
    let mut random = Random(seed);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let mut batches = 0;
    let mut inputs_sent = 0;
    while tokio::time::Instant::now() < deadline {
        let inputs: Vec<Vec<u8>> = (0..16).map(|_| mutate(&mut random, &corpus)).collect();
        let replays: Vec<_> = inputs
            .iter()
            .cloned()
            .map(|input| tokio::spawn(replay(broker.address, input)))
            .collect();
        for replay in replays {
            let _ = replay.await;
        }
        inputs_sent += inputs.len();
        batches += 1;
        let alive = broker.alive();
        let served = if alive {
            serves_a_fresh_client(broker.address).await
        } else {
            Err("the broker process died".to_string())
        };
        if let Err(problem) = served {
            let saved = save_failure(seed, batches, &inputs);
            panic!(
                "after batch {batches} (seed {seed}): {problem}; inputs in {}; broker log tail: {:?}",
                saved.display(),
                broker.lines().iter().rev().take(10).collect::<Vec<_>>()
            );
        }
    }
    eprintln!("fuzz: seed {seed}, {batches} batches, {inputs_sent} mutated sessions, broker up");
    assert!(batches > 0);
}

#[test]
fn the_mutator_reaches_every_kind_of_damage() {
    // The fuzzer must be able to produce the inputs that once crashed the broker.
    let corpus = corpus();
    let mut random = Random(7);
    let mut deep = false;
    let mut huge_length = false;
    for _ in 0..2_000 {
        let input = mutate(&mut random, &corpus);
        deep |= input.windows(4).filter(|window| window[0] == 0xd0).count() > 100;
        huge_length |= input
            .windows(5)
            .any(|window| window == [0xb1, 0xff, 0xff, 0xff, 0xff]);
    }
    assert!(deep, "values nested hundreds deep are generated");
    assert!(huge_length, "huge declared lengths are generated");
}
