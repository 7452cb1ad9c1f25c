//! The write-ahead log: one writer thread appends records of every entity to the current
//! segment and makes them durable with group commit — everything submitted while the
//! previous `fdatasync` ran goes out in the next write and is covered by the next sync, so
//! many messages share one sync. A submission's answer arrives only after its sync.
//!
//! Faults are never hidden: a failed write (disk full) fails the batch and removes what it
//! wrote (the file is cut back), and the log keeps accepting, so it recovers when space
//! returns; a failed sync fails the batch and every later one (after a failed `fsync` the
//! kernel may have dropped the pages: retrying and reporting success would be a lie). A
//! lock file keeps a second process off the same directory.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use tokio::sync::oneshot;

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

/// A fault to inject into the writer (tests only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Writes fail with "no space" once the segment would exceed this many bytes.
    DiskFullAt(u64),
    /// Every sync fails.
    SyncFails,
}

/// What recovery read back, in the order it was written.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Every durable record.
    pub records: Vec<Vec<u8>>,
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
        let (recovered, next_number) = recover(directory)?;
        let current = match next_number {
            Some((number, length)) => open_segment(directory, number, length)?,
            None => create_segment(directory, 0)?,
        };
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
    pub fn append(&self, records: Vec<Vec<u8>>) -> oneshot::Receiver<Result<(), StoreError>> {
        let (done, answer) = oneshot::channel();
        let request = Request::Append(Submission { records, done });
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

/// Reads every segment; cuts a torn tail off the last one. Returns the records and the
/// last segment's number and valid length.
fn recover(directory: &Path) -> Result<(Recovered, Option<(u64, u64)>), StoreError> {
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
        last = Some((*number, scanned.valid_length));
    }
    Ok((recovered, last))
}

/// The segment being written.
struct Segment {
    number: u64,
    file: File,
    length: u64,
    /// The file's creation (its directory entry and size) is durable. A new segment's
    /// first commit syncs the file whole and the directory instead of just its data, so
    /// creating one — at start-up too — costs no sync of its own.
    created_durably: bool,
}

fn create_segment(directory: &Path, number: u64) -> Result<Segment, StoreError> {
    let path = directory.join(segment::file_name(number));
    let write = || -> io::Result<File> {
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)?;
        file.write_all(MAGIC)?;
        Ok(file)
    };
    let file = write()
        .map_err(|error| StoreError::Write(format!("cannot create {}: {error}", path.display())))?;
    Ok(Segment {
        number,
        file,
        length: MAGIC.len() as u64,
        created_durably: false,
    })
}

fn open_segment(directory: &Path, number: u64, valid_length: u64) -> Result<Segment, StoreError> {
    if valid_length < MAGIC.len() as u64 {
        return create_segment(directory, number);
    }
    let path = directory.join(segment::file_name(number));
    let open = || -> io::Result<File> {
        let file = OpenOptions::new().write(true).open(&path)?;
        file.set_len(valid_length)?;
        file.sync_all()?;
        Ok(file)
    };
    let mut file = open().map_err(|error| {
        StoreError::Recovery(format!("cannot reopen {}: {error}", path.display()))
    })?;
    use std::io::Seek;
    file.seek(io::SeekFrom::Start(valid_length))
        .map_err(|error| StoreError::Recovery(format!("{}: {error}", path.display())))?;
    Ok(Segment {
        number,
        file,
        length: valid_length,
        created_durably: true,
    })
}

/// The writer thread's state.
struct Writer {
    directory: PathBuf,
    options: LogOptions,
    current: Segment,
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
        let mut buffer = Vec::with_capacity(1024 * 1024);
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
            buffer.clear();
            let mut count = 0u64;
            for submission in &batch {
                for record in &submission.records {
                    segment::encode_record(&mut buffer, record);
                    count += 1;
                }
            }
            let result = self.commit(&buffer, count);
            for submission in batch {
                let _ = submission.done.send(result.clone());
            }
            for done in rotations.drain(..) {
                let rotated = self.rotate();
                let _ = done.send(rotated);
            }
        }
        let Writer { _lock, .. } = self;
        drop(_lock);
        if let Some(closed) = closing {
            let _ = closed.send(());
        }
    }

    /// Writes and syncs one batch.
    fn commit(&mut self, buffer: &[u8], count: u64) -> Result<(), StoreError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        if buffer.is_empty() {
            return Ok(());
        }
        if let Err(error) = self.write(buffer) {
            // Keep nothing of a batch that was not acknowledged.
            let _ = self.current.file.set_len(self.current.length);
            use std::io::Seek;
            let _ = self
                .current
                .file
                .seek(io::SeekFrom::Start(self.current.length));
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
        self.current.length += buffer.len() as u64;
        self.statistics.records.fetch_add(count, Ordering::Relaxed);
        self.statistics
            .bytes
            .fetch_add(buffer.len() as u64, Ordering::Relaxed);
        self.statistics
            .disk_bytes
            .fetch_add(buffer.len() as u64, Ordering::Relaxed);
        if self.current.length >= self.options.segment_size {
            self.rotate()?;
        }
        Ok(())
    }

    /// Starts the next segment (the current one is synced already).
    fn rotate(&mut self) -> Result<u64, StoreError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        self.current = create_segment(&self.directory, self.current.number + 1)?;
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

    fn write(&mut self, buffer: &[u8]) -> Result<(), StoreError> {
        if let Some(Fault::DiskFullAt(limit)) = self.options.fault
            && self.current.length + buffer.len() as u64 > limit
        {
            // Write what fits, as a full disk would, before failing.
            let room = limit.saturating_sub(self.current.length) as usize;
            let _ = self
                .current
                .file
                .write_all(&buffer[..room.min(buffer.len())]);
            return Err(StoreError::NoSpace(
                "injected: no space left on device".into(),
            ));
        }
        self.current.file.write_all(buffer).map_err(|error| {
            if error.raw_os_error() == Some(28) {
                StoreError::NoSpace(error.to_string())
            } else {
                StoreError::Write(error.to_string())
            }
        })
    }

    fn sync(&mut self) -> io::Result<()> {
        self.statistics.syncs.fetch_add(1, Ordering::Relaxed);
        if self.options.fault == Some(Fault::SyncFails) {
            return Err(io::Error::other("injected: fsync failed"));
        }
        if !self.current.created_durably {
            self.current.file.sync_all()?;
            File::open(&self.directory)?.sync_all()?;
            self.current.created_durably = true;
            return Ok(());
        }
        self.current.file.sync_data()
    }
}
