//! The write-ahead log: one writer thread appends records of every entity to the current
//! segment and makes them durable with group commit — everything submitted while the
//! previous `fdatasync` ran goes out in the next write and is covered by the next sync, so
//! many messages share one sync. A submission's answer arrives only after its sync.
//! Segments past the first megabyte are prepared ahead (zero-filled, written in blocks with
//! `O_DIRECT`: `store::active`), so a sync only writes the data and flushes the disk.
//!
//! Faults are never hidden: a failed write (disk full) fails the batch and removes what it
//! wrote (the file is cut back), and the log keeps accepting, so it recovers when space
//! returns; a failed sync fails the batch and every later one (after a failed `fsync` the
//! kernel may have dropped the pages: retrying and reporting success would be a lie). A
//! lock file keeps a second process off the same directory.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use tokio::sync::oneshot;

use super::active::{Batch, PLAIN_LIMIT, Preparer, Segment};
use super::segment::{self, MAGIC};

/// Why the log cannot do what was asked.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    /// Another process holds the data directory.
    #[error("the data directory {0} is in use by another ferrobus process")]
    Locked(String),
    /// The disk is full: nothing of the batch was kept.
    #[error("the disk is full: {0}")]
    NoSpace(String),
    /// Writing failed for another reason: nothing of the batch was kept.
    #[error("cannot write the log: {0}")]
    Write(String),
    /// A sync failed: the log accepts nothing more until the broker restarts.
    #[error("the log could not be synced to disk and accepts no more writes: {0}")]
    SyncFailed(String),
    /// The log's files cannot be read back.
    #[error("cannot recover the log: {0}")]
    Recovery(String),
    /// The writer thread is gone.
    #[error("the log is closed")]
    Closed,
}

/// Where and how the log writes.
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// The data directory (created if missing).
    pub directory: PathBuf,
    /// A segment is closed and a new one started past this many bytes.
    pub segment_size: u64,
    /// Injected faults, for tests of the failure paths.
    pub fault: Option<Fault>,
}

impl LogOptions {
    /// Options for `directory` with 64 MiB segments.
    pub fn new(directory: impl Into<PathBuf>) -> LogOptions {
        LogOptions {
            directory: directory.into(),
            segment_size: 64 * 1024 * 1024,
            fault: None,
        }
    }
}

/// A fault to inject into the writer: tests, and the fault harness through the
/// `FERROBUS_FAULT_INJECT` environment variable ([`Fault::parse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Writes fail with "no space" once the segment would exceed this many bytes.
    DiskFullAt(u64),
    /// Every sync fails.
    SyncFails,
    /// Syncs succeed this many times, then every one fails (a disk that dies).
    SyncFailsAfter(u64),
    /// Every sync takes this much longer (a slow disk).
    SlowSync(std::time::Duration),
}

impl Fault {
    /// Reads `sync-fails`, `sync-fails-after=N` or `sync-delay=MS` (milliseconds).
    pub fn parse(text: &str) -> Result<Fault, String> {
        let text = text.trim();
        let number = |value: &str| {
            value
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("{value:?} is not a whole number"))
        };
        match text.split_once('=') {
            None if text == "sync-fails" => Ok(Fault::SyncFails),
            Some(("sync-fails-after", count)) => Ok(Fault::SyncFailsAfter(number(count)?)),
            Some(("sync-delay", millis)) => Ok(Fault::SlowSync(std::time::Duration::from_millis(
                number(millis)?,
            ))),
            _ => Err(format!(
                "{text:?} is not a fault: sync-fails, sync-fails-after=N or sync-delay=MS"
            )),
        }
    }
}

/// Where a record is on disk: its segment's number and its header's byte offset there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// The segment's number.
    pub segment: u64,
    /// The record header's offset in the segment file.
    pub offset: u64,
}

impl Location {
    fn new(segment: u64, offset: u64) -> Location {
        Location { segment, offset }
    }
}

/// Told where a submission's records landed (in order, empty ones left out), once they
/// are durable and before the submission's answer.
pub type Located = Box<dyn FnOnce(Vec<Location>) + Send>;

/// What recovery read back, in the order it was written.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Every durable record.
    pub records: Vec<Vec<u8>>,
    /// Where each record is: its segment's number and its header's offset in the file.
    pub locations: Vec<Location>,
    /// Bytes of a torn or corrupt tail that were cut off.
    pub truncated_bytes: u64,
}

/// Counters of the writer, for benchmarks and metrics.
#[derive(Debug, Default)]
pub struct LogStatistics {
    /// Records made durable.
    pub records: AtomicU64,
    /// Syncs done.
    pub syncs: AtomicU64,
    /// Bytes written.
    pub bytes: AtomicU64,
    /// Bytes in the segment files on disk (what compaction reclaims).
    pub disk_bytes: AtomicU64,
    /// Segment files on disk.
    pub segments: AtomicU64,
    /// Where the writer reports each sync's duration (the broker's metrics), once set.
    pub sync_seconds: std::sync::OnceLock<prometheus::Histogram>,
}

struct Submission {
    records: Vec<Vec<u8>>,
    located: Option<Located>,
    done: oneshot::Sender<Result<(), StoreError>>,
}

/// What the writer thread is asked to do.
enum Request {
    /// Make these records durable.
    Append(Submission),
    /// Finish, release the directory lock, then answer.
    Close(std::sync::mpsc::Sender<()>),
    /// Start a new segment (after what was submitted before); answer its number.
    Rotate(oneshot::Sender<Result<u64, StoreError>>),
    /// Delete every segment numbered below this one (compaction superseded them).
    DeleteBefore(u64),
}

/// A handle on the log; cheap to clone, shared by every entity.
#[derive(Clone)]
pub struct WriteAheadLog {
    submissions: mpsc::Sender<Request>,
    statistics: Arc<LogStatistics>,
}

impl std::fmt::Debug for WriteAheadLog {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("WriteAheadLog")
            .finish_non_exhaustive()
    }
}

impl WriteAheadLog {
    /// Locks the directory, recovers what is in it (cutting off a torn tail) and starts the
    /// writer thread.
    pub fn open(options: LogOptions) -> Result<(WriteAheadLog, Recovered), StoreError> {
        let directory = &options.directory;
        std::fs::create_dir_all(directory).map_err(|error| {
            StoreError::Recovery(format!("cannot create {}: {error}", directory.display()))
        })?;
        let lock = lock_directory(directory)?;
        let (recovered, last) = recover(directory)?;
        let current = match last {
            Some(last) => open_segment(directory, last)?,
            None => create_segment(directory, 0)?,
        };
        let preparer = Preparer::start(directory, options.segment_size).map_err(|error| {
            StoreError::Recovery(format!(
                "cannot start the log's segment preparer in {}: {error}",
                directory.display()
            ))
        })?;
        let statistics = Arc::new(LogStatistics::default());
        let on_disk = segment::list(directory).unwrap_or_default();
        let mut disk_bytes = 0;
        for number in &on_disk {
            disk_bytes += std::fs::metadata(directory.join(segment::file_name(*number)))
                .map(|metadata| metadata.len())
                .unwrap_or(0);
        }
        statistics.disk_bytes.store(disk_bytes, Ordering::Relaxed);
        statistics
            .segments
            .store(on_disk.len().max(1) as u64, Ordering::Relaxed);
        let (submissions, inbox) = mpsc::channel();
        let writer = Writer {
            directory: directory.clone(),
            options: options.clone(),
            current,
            preparer,
            batch: Batch::default(),
            failed: None,
            statistics: statistics.clone(),
            _lock: lock,
        };
        std::thread::Builder::new()
            .name("ferrobus-log".to_string())
            .spawn(move || writer.run(inbox))
            .map_err(|error| StoreError::Write(format!("cannot start the log writer: {error}")))?;
        Ok((
            WriteAheadLog {
                submissions,
                statistics,
            },
            recovered,
        ))
    }

    /// Appends `records`; the answer comes once they are durable (or could not be made so).
    /// An empty record is not stored (it carries nothing, and its encoding would read back
    /// as the end of a segment).
    pub fn append(&self, records: Vec<Vec<u8>>) -> oneshot::Receiver<Result<(), StoreError>> {
        self.append_located(records, None)
    }

    /// [`WriteAheadLog::append`], telling `located` where the records landed once they are
    /// durable (before the answer).
    pub fn append_located(
        &self,
        records: Vec<Vec<u8>>,
        located: Option<Located>,
    ) -> oneshot::Receiver<Result<(), StoreError>> {
        let (done, answer) = oneshot::channel();
        let request = Request::Append(Submission {
            records,
            located,
            done,
        });
        if let Err(mpsc::SendError(Request::Append(submission))) = self.submissions.send(request) {
            let _ = submission.done.send(Err(StoreError::Closed));
        }
        answer
    }

    /// Stops the writer once what was submitted before is written, and releases the data
    /// directory. Later appends fail with [`StoreError::Closed`].
    pub fn close(&self) {
        let (closed, wait) = mpsc::channel();
        if self.submissions.send(Request::Close(closed)).is_ok() {
            let _ = wait.recv();
        }
    }

    /// The writer's counters.
    pub fn statistics(&self) -> &LogStatistics {
        &self.statistics
    }

    /// Starts a new segment once everything submitted before is written; answers its
    /// number. Records appended after the answer land in it or later segments.
    pub fn rotate(&self) -> oneshot::Receiver<Result<u64, StoreError>> {
        let (done, answer) = oneshot::channel();
        if let Err(mpsc::SendError(Request::Rotate(done))) =
            self.submissions.send(Request::Rotate(done))
        {
            let _ = done.send(Err(StoreError::Closed));
        }
        answer
    }

    /// Deletes every segment numbered below `number`.
    pub fn delete_before(&self, number: u64) {
        let _ = self.submissions.send(Request::DeleteBefore(number));
    }
}

fn lock_directory(directory: &Path) -> Result<File, StoreError> {
    let path = directory.join("LOCK");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|error| {
            StoreError::Recovery(format!("cannot open {}: {error}", path.display()))
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => {
            Err(StoreError::Locked(directory.display().to_string()))
        }
        Err(std::fs::TryLockError::Error(error)) => Err(StoreError::Recovery(format!(
            "cannot lock {}: {error}",
            path.display()
        ))),
    }
}

/// Where recovery left the last segment.
struct LastSegment {
    number: u64,
    /// Bytes of its header and valid records.
    valid_length: u64,
    /// Zero bytes after them (prepared room); 0 when there are none or the tail was torn.
    zeroed_length: u64,
}

/// Reads every segment; cuts a torn tail off the last one. Returns the records and where
/// the last segment ends.
fn recover(directory: &Path) -> Result<(Recovered, Option<LastSegment>), StoreError> {
    let numbers = segment::list(directory).map_err(|error| {
        StoreError::Recovery(format!("cannot list {}: {error}", directory.display()))
    })?;
    let mut recovered = Recovered::default();
    let mut last = None;
    for (index, number) in numbers.iter().enumerate() {
        let path = directory.join(segment::file_name(*number));
        let scanned = segment::scan(&path)
            .map_err(|error| StoreError::Recovery(format!("{}: {error}", path.display())))?;
        let is_last = index + 1 == numbers.len();
        if scanned.invalid_length > 0 {
            let why = scanned.stopped_because.unwrap_or_default();
            if !is_last {
                // Segments are synced before the next one starts: damage here is not a
                // crash's torn write, and skipping it would silently lose messages.
                return Err(StoreError::Recovery(format!(
                    "{} is damaged ({why}); it is not the last segment, so this is not a torn write",
                    path.display()
                )));
            }
            tracing::warn!(
                segment = %path.display(),
                bytes = scanned.invalid_length,
                "cutting off a torn or corrupt log tail: {why}"
            );
            recovered.truncated_bytes = scanned.invalid_length;
        }
        recovered.records.extend(scanned.records);
        recovered.locations.extend(
            scanned
                .offsets
                .iter()
                .map(|offset| Location::new(*number, *offset)),
        );
        last = Some(LastSegment {
            number: *number,
            valid_length: scanned.valid_length,
            zeroed_length: scanned.zeroed_length,
        });
    }
    Ok((recovered, last))
}

fn create_segment(directory: &Path, number: u64) -> Result<Segment, StoreError> {
    Segment::create(directory, number).map_err(|error| {
        StoreError::Write(format!(
            "cannot create {}: {error}",
            directory.join(segment::file_name(number)).display()
        ))
    })
}

fn open_segment(directory: &Path, last: LastSegment) -> Result<Segment, StoreError> {
    if last.valid_length < MAGIC.len() as u64 {
        return create_segment(directory, last.number);
    }
    Segment::reopen(
        directory,
        last.number,
        last.valid_length,
        last.zeroed_length,
    )
    .map_err(|error| {
        StoreError::Recovery(format!(
            "cannot reopen {}: {error}",
            directory.join(segment::file_name(last.number)).display()
        ))
    })
}

/// The writer thread's state.
struct Writer {
    directory: PathBuf,
    options: LogOptions,
    current: Segment,
    /// Makes the next segment ready (zero-filled) before it is needed.
    preparer: Preparer,
    /// The batch being written; its memory is kept from commit to commit.
    batch: Batch,
    /// Set after a failed sync: every later batch fails with it.
    failed: Option<StoreError>,
    statistics: Arc<LogStatistics>,
    /// Held for the life of the writer: the directory's lock.
    _lock: File,
}

/// Bytes gathered into one write at most (a group commit's size).
const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;

impl Writer {
    fn run(mut self, inbox: mpsc::Receiver<Request>) {
        let mut closing = None;
        let mut rotations = Vec::new();
        while closing.is_none() {
            let Ok(first) = inbox.recv() else { break };
            let mut batch = Vec::new();
            let mut bytes = 0usize;
            let mut next = Some(first);
            while let Some(request) = next.take() {
                match request {
                    Request::Append(submission) => {
                        bytes += submission.records.iter().map(Vec::len).sum::<usize>();
                        batch.push(submission);
                    }
                    Request::Close(closed) => {
                        closing = Some(closed);
                        break;
                    }
                    Request::Rotate(done) => {
                        rotations.push(done);
                        break;
                    }
                    Request::DeleteBefore(number) => self.delete_before(number),
                }
                if bytes < MAX_BATCH_BYTES {
                    next = inbox.try_recv().ok();
                }
            }
            let records = batch
                .iter()
                .flat_map(|submission| &submission.records)
                .filter(|record| !record.is_empty());
            let count = records.clone().count();
            self.batch.begin(self.current.tail(), count, bytes);
            for record in records {
                self.batch.push(record);
            }
            let (segment, mut offset) = (self.current.number, self.current.length);
            let result = self.commit(count as u64);
            for submission in batch {
                let records = submission
                    .records
                    .iter()
                    .filter(|record| !record.is_empty());
                if result.is_ok()
                    && let Some(located) = submission.located
                {
                    let mut at = offset;
                    located(
                        records
                            .clone()
                            .map(|record| {
                                let location = Location::new(segment, at);
                                at += (segment::RECORD_HEADER + record.len()) as u64;
                                location
                            })
                            .collect(),
                    );
                }
                offset += records
                    .map(|record| (segment::RECORD_HEADER + record.len()) as u64)
                    .sum::<u64>();
                let _ = submission.done.send(result.clone());
            }
            for done in rotations.drain(..) {
                let rotated = self.rotate();
                let _ = done.send(rotated);
            }
        }
        self.current.trim();
        let _ = self.current.sync(&self.directory);
        self.preparer.stop();
        let Writer { _lock, .. } = self;
        drop(_lock);
        if let Some(closed) = closing {
            let _ = closed.send(());
        }
    }

    /// Writes and syncs the batch.
    fn commit(&mut self, count: u64) -> Result<(), StoreError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        let length = self.batch.records().len() as u64;
        if length == 0 {
            return Ok(());
        }
        if let Err(error) = self.write() {
            // Keep nothing of a batch that was not acknowledged.
            self.current.cut_back();
            return Err(error);
        }
        let sync_started = std::time::Instant::now();
        let synced = self.sync();
        if let Some(histogram) = self.statistics.sync_seconds.get() {
            histogram.observe(sync_started.elapsed().as_secs_f64());
        }
        if let Err(error) = synced {
            let error = StoreError::SyncFailed(error.to_string());
            tracing::error!(%error, "the write-ahead log stops accepting writes");
            self.failed = Some(error.clone());
            return Err(error);
        }
        self.current.written(&self.batch);
        self.statistics.records.fetch_add(count, Ordering::Relaxed);
        self.statistics.bytes.fetch_add(length, Ordering::Relaxed);
        self.statistics
            .disk_bytes
            .fetch_add(length, Ordering::Relaxed);
        self.after_commit()
    }

    /// Asks for a prepared segment once a plain one has a quarter of [`PLAIN_LIMIT`] (a
    /// broker that writes less never prepares one), and moves on to a new segment when the
    /// current one is full — or is a plain one past [`PLAIN_LIMIT`] and a prepared one is
    /// ready. Once one is taken into use the next is asked for at once, so that one is
    /// ready when the current segment fills or compaction starts a new one.
    fn after_commit(&mut self) -> Result<(), StoreError> {
        let length = self.current.length;
        let size = self.options.segment_size;
        let plain = !self.current.is_prepared();
        if plain && length >= PLAIN_LIMIT / 4 {
            self.preparer.request();
        }
        let plain_done = plain && length >= PLAIN_LIMIT.min(size);
        if length >= size {
            self.rotate()?;
        } else if plain_done && let Some(prepared) = self.preparer.take() {
            self.rotate_into(Some(prepared))?;
        }
        Ok(())
    }

    /// Starts the next segment (the current one is synced already).
    fn rotate(&mut self) -> Result<u64, StoreError> {
        let prepared = self.preparer.take();
        self.rotate_into(prepared)
    }

    fn rotate_into(
        &mut self,
        prepared: Option<super::active::Prepared>,
    ) -> Result<u64, StoreError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        let number = self.current.number + 1;
        let next = match prepared {
            Some(prepared) => match Segment::from_prepared(&self.directory, number, prepared) {
                Ok(next) => {
                    self.preparer.request();
                    next
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot take a prepared log segment into use");
                    create_segment(&self.directory, number)?
                }
            },
            None => create_segment(&self.directory, number)?,
        };
        self.current.trim();
        self.current = next;
        self.statistics
            .disk_bytes
            .fetch_add(MAGIC.len() as u64, Ordering::Relaxed);
        self.statistics.segments.fetch_add(1, Ordering::Relaxed);
        Ok(self.current.number)
    }

    /// Deletes the segments below `number` (never the current one).
    fn delete_before(&mut self, number: u64) {
        let numbers = segment::list(&self.directory).unwrap_or_default();
        let mut deleted = false;
        for old in numbers
            .into_iter()
            .filter(|old| *old < number && *old < self.current.number)
        {
            let path = self.directory.join(segment::file_name(old));
            let length = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    deleted = true;
                    self.statistics
                        .disk_bytes
                        .fetch_sub(length, Ordering::Relaxed);
                    self.statistics.segments.fetch_sub(1, Ordering::Relaxed);
                }
                Err(error) => {
                    tracing::warn!(segment = %path.display(), %error, "cannot delete a compacted log segment");
                }
            }
        }
        if deleted && let Ok(directory) = File::open(&self.directory) {
            let _ = directory.sync_all();
        }
    }

    fn write(&mut self) -> Result<(), StoreError> {
        let length = self.batch.records().len() as u64;
        if let Some(Fault::DiskFullAt(limit)) = self.options.fault
            && self.current.length + length > limit
        {
            // Write what fits, as a full disk would, before failing.
            let room = limit.saturating_sub(self.current.length) as usize;
            self.current.write_partly(&self.batch, room);
            return Err(StoreError::NoSpace(
                "injected: no space left on device".into(),
            ));
        }
        self.current.write(&mut self.batch).map_err(|error| {
            if error.raw_os_error() == Some(28) {
                StoreError::NoSpace(error.to_string())
            } else {
                StoreError::Write(error.to_string())
            }
        })
    }

    fn sync(&mut self) -> io::Result<()> {
        let done = self.statistics.syncs.fetch_add(1, Ordering::Relaxed);
        match self.options.fault {
            Some(Fault::SyncFails) => return Err(io::Error::other("injected: fsync failed")),
            Some(Fault::SyncFailsAfter(count)) if done >= count => {
                return Err(io::Error::other("injected: fsync failed"));
            }
            // The writer's own thread: a slow disk holds every group commit behind it.
            Some(Fault::SlowSync(delay)) => std::thread::sleep(delay),
            _ => {}
        }
        self.current.sync(&self.directory)
    }
}
