//! The segment being written, and the next one made ready before it is needed.
//!
//! A segment starts *plain*: records are appended and the file ends where they end (the
//! first segment of a directory, one reopened after a clean close, or one made when no
//! prepared segment was ready). Past [`PLAIN_LIMIT`] bytes the writer moves on to a
//! *prepared* segment: a file the preparer thread filled with zeros to the segment's size
//! (after the header) and synced, off the commit path. A prepared segment is written in
//! whole blocks at block offsets — the last partial block rewritten with the new records,
//! padded with zeros — with `O_DIRECT` where the file system allows it. The file's size and
//! extents never change while it fills, so a sync writes the data and flushes the disk's
//! cache and nothing else, and no write copies into the page cache.
//!
//! Invariant: past `length` a segment's file holds zeros (prepared room or padding) or
//! nothing; recovery reads zeros as the end of the records ([`super::segment`]). A write
//! that fails cuts the file back to `length` and syncs that, so nothing of a refused batch
//! can be read back later.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use super::segment::{self, MAGIC, RECORD_HEADER};

/// The unit of a prepared segment's writes: offsets, lengths and the buffer's address are
/// multiples of it (what `O_DIRECT` asks of common file systems and disks).
pub(super) const BLOCK: usize = 4096;
/// A plain segment is left for a prepared one once it holds this many bytes (and one is
/// ready); a broker that writes less never prepares a segment.
pub(super) const PLAIN_LIMIT: u64 = 1024 * 1024;
/// Name suffix of a prepared segment not yet taken into use (never read by recovery).
const PREPARED_SUFFIX: &str = ".prepared";

/// The segment being written.
pub(super) struct Segment {
    /// Its number (the file name).
    pub number: u64,
    file: File,
    /// Bytes of the header and the durable records.
    pub length: u64,
    /// A prepared segment: the bytes of its last partial block (rewritten with the next
    /// batch). `None`: plain, appended to.
    tail: Option<Vec<u8>>,
    /// The file's creation (its directory entry and size) is durable. A new segment's
    /// first commit syncs the file whole and the directory instead of just its data, so
    /// creating one — at start-up too — costs no sync of its own.
    pub created_durably: bool,
}

impl Segment {
    /// A new plain segment `number` in `directory`, holding only the header.
    pub fn create(directory: &Path, number: u64) -> io::Result<Segment> {
        let path = directory.join(segment::file_name(number));
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)?;
        file.write_all(MAGIC)?;
        Ok(Segment {
            number,
            file,
            length: MAGIC.len() as u64,
            tail: None,
            created_durably: false,
        })
    }

    /// Segment `number` as recovery left it: `valid_length` bytes of records, then
    /// `zeroed_length` bytes of zeros (a prepared segment the process died in, kept), or a
    /// torn tail that is cut off here.
    pub fn reopen(
        directory: &Path,
        number: u64,
        valid_length: u64,
        zeroed_length: u64,
    ) -> io::Result<Segment> {
        let path = directory.join(segment::file_name(number));
        // A few zeros are a torn header's or padding, not a prepared segment's room.
        if zeroed_length >= BLOCK as u64 {
            let file = open_direct(&path, false)?;
            let start = valid_length - valid_length % BLOCK as u64;
            let mut tail = vec![0; (valid_length - start) as usize];
            File::open(&path)?.read_exact_at(&mut tail, start)?;
            return Ok(Segment {
                number,
                file,
                length: valid_length,
                tail: Some(tail),
                created_durably: true,
            });
        }
        let file = OpenOptions::new().write(true).open(&path)?;
        file.set_len(valid_length)?;
        file.sync_all()?;
        Ok(Segment {
            number,
            file,
            length: valid_length,
            tail: None,
            created_durably: true,
        })
    }

    /// Takes a prepared file into use as segment `number`.
    pub fn from_prepared(directory: &Path, number: u64, prepared: Prepared) -> io::Result<Segment> {
        std::fs::rename(&prepared.path, directory.join(segment::file_name(number)))?;
        Ok(Segment {
            number,
            file: prepared.file,
            length: MAGIC.len() as u64,
            tail: Some(MAGIC.to_vec()),
            created_durably: false,
        })
    }

    /// Whether this segment was prepared (written in blocks over zeros).
    pub fn is_prepared(&self) -> bool {
        self.tail.is_some()
    }

    /// The bytes a batch written here starts with (the last partial block's).
    pub fn tail(&self) -> &[u8] {
        self.tail.as_deref().unwrap_or(&[])
    }

    /// Writes `batch` (begun with [`Segment::tail`]) after the records. `length` moves
    /// only with [`Segment::written`], once the batch is durable.
    pub fn write(&mut self, batch: &mut Batch) -> io::Result<()> {
        match &self.tail {
            None => self.file.write_all_at(batch.records(), self.length),
            Some(tail) => {
                let offset = self.length - tail.len() as u64;
                self.file.write_all_at(batch.blocks(), offset)
            }
        }
    }

    /// Writes the first `room` bytes of `batch`'s records, as a disk that fills up would
    /// (tests of a full disk; a prepared segment writes nothing).
    pub fn write_partly(&mut self, batch: &Batch, room: usize) {
        if self.tail.is_none() {
            let records = batch.records();
            let _ = self
                .file
                .write_all_at(&records[..room.min(records.len())], self.length);
        }
    }

    /// The batch is durable: the records now end after it.
    pub fn written(&mut self, batch: &Batch) {
        let records = batch.records().len() as u64;
        if let Some(tail) = &mut self.tail {
            let offset = self.length - tail.len() as u64;
            let end = self.length + records;
            let start = end - end % BLOCK as u64;
            let bytes = batch.blocks_unpadded();
            tail.clear();
            tail.extend_from_slice(&bytes[(start - offset) as usize..(end - offset) as usize]);
        }
        self.length += records;
    }

    /// After a failed write: nothing past `length` may be read back later, so the file
    /// is cut back to it and that is synced.
    pub fn cut_back(&mut self) {
        let _ = self.file.set_len(self.length);
        let _ = self.file.sync_all();
    }

    /// Cuts a prepared segment's unused zeros off (when it is left for the next one, or at
    /// close); recovery would read them as room, so this needs no sync of its own.
    pub fn trim(&mut self) {
        if self.tail.is_some() {
            let _ = self.file.set_len(self.length);
        }
    }

    /// Makes what was written durable (the data, and for a new segment the file and its
    /// directory entry).
    pub fn sync(&mut self, directory: &Path) -> io::Result<()> {
        if !self.created_durably {
            self.file.sync_all()?;
            File::open(directory)?.sync_all()?;
            self.created_durably = true;
            return Ok(());
        }
        self.file.sync_data()
    }
}

/// One group commit's bytes, encoded for the segment they go to: a prepared segment's
/// partial last block, then each record (header and payload), then zeros to a whole
/// block. Its memory is kept from batch to batch and starts at a block-aligned address.
#[derive(Default)]
pub(super) struct Batch {
    bytes: Vec<u8>,
    /// Where the aligned part of `bytes` starts.
    start: usize,
    /// Bytes of the segment's tail before the records.
    prefix: usize,
    /// Where the records end (before the padding).
    end: usize,
}

/// Capacity a batch keeps between commits at most (a larger one is given back).
const KEPT_CAPACITY: usize = 32 * 1024 * 1024;

impl Batch {
    /// Starts a batch of records of `payload_bytes` in all (`count` of them) after `tail`.
    pub fn begin(&mut self, tail: &[u8], count: usize, payload_bytes: usize) {
        let needed = tail.len() + count * RECORD_HEADER + payload_bytes + BLOCK;
        if self.bytes.capacity() < needed + BLOCK
            || self.bytes.capacity() > KEPT_CAPACITY.max(needed * 2)
        {
            self.bytes = Vec::with_capacity(needed + BLOCK);
        }
        self.start = self.bytes.as_ptr().align_offset(BLOCK);
        self.bytes.clear();
        self.bytes.resize(self.start, 0);
        self.bytes.extend_from_slice(tail);
        self.prefix = tail.len();
        self.end = self.bytes.len();
    }

    /// Adds one record (never empty: see [`super::segment`]).
    pub fn push(&mut self, payload: &[u8]) {
        let capacity = self.bytes.capacity();
        segment::encode_record(&mut self.bytes, payload);
        debug_assert_eq!(capacity, self.bytes.capacity(), "begin reserved the room");
        self.end = self.bytes.len();
    }

    /// The records' bytes (what a plain segment appends).
    pub fn records(&self) -> &[u8] {
        &self.bytes[self.start + self.prefix..self.end]
    }

    /// The tail and the records, padded with zeros to whole blocks.
    fn blocks(&mut self) -> &[u8] {
        let length = self.end - self.start;
        let padded = length.div_ceil(BLOCK) * BLOCK;
        self.bytes.truncate(self.end);
        self.bytes.resize(self.start + padded, 0);
        &self.bytes[self.start..]
    }

    fn blocks_unpadded(&self) -> &[u8] {
        &self.bytes[self.start..self.end]
    }
}

/// A file filled with zeros and a segment header, synced, waiting to become a segment.
pub(super) struct Prepared {
    file: File,
    path: PathBuf,
}

/// The preparer thread's handle: asks for the next prepared segment, takes it when ready.
pub(super) struct Preparer {
    requests: Option<mpsc::Sender<()>>,
    ready: mpsc::Receiver<io::Result<Prepared>>,
    /// Requests out whose answers are not taken yet (at most [`PREPARED_AHEAD`]).
    pending: usize,
}

/// Prepared segments kept ahead of the writer: two, so that a segment started by
/// compaction and the one after it both find one ready, while the disk also takes the
/// writer's records (with one, a segment started while it was still being zero-filled
/// stayed plain, written through the page cache, until it was ready).
const PREPARED_AHEAD: usize = 2;

impl Preparer {
    /// Starts the thread that prepares segments of `size` bytes in `directory`, after
    /// removing what an earlier process left prepared.
    pub fn start(directory: &Path, size: u64) -> io::Result<Preparer> {
        for entry in std::fs::read_dir(directory)? {
            let path = entry?.path();
            if path
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.ends_with(PREPARED_SUFFIX))
            {
                let _ = std::fs::remove_file(&path);
            }
        }
        let (requests, inbox) = mpsc::channel::<()>();
        let (done, ready) = mpsc::channel();
        let directory = directory.to_path_buf();
        let size = (size.max(BLOCK as u64) + size / 8).div_ceil(BLOCK as u64) * BLOCK as u64;
        std::thread::Builder::new()
            .name("ferrobus-log-prepare".to_string())
            .spawn(move || {
                let mut count = 0u64;
                while inbox.recv().is_ok() {
                    let path = directory.join(format!("{count:016x}{PREPARED_SUFFIX}"));
                    count += 1;
                    let prepared = prepare(&path, size);
                    if prepared.is_err() {
                        let _ = std::fs::remove_file(&path);
                    }
                    if done.send(prepared).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Preparer {
            requests: Some(requests),
            ready,
            pending: 0,
        })
    }

    /// Asks for prepared segments until [`PREPARED_AHEAD`] are on their way or waiting.
    pub fn request(&mut self) {
        while self.pending < PREPARED_AHEAD
            && let Some(requests) = &self.requests
            && requests.send(()).is_ok()
        {
            self.pending += 1;
        }
    }

    /// The oldest prepared segment, if it is ready.
    pub fn take(&mut self) -> Option<Prepared> {
        if self.pending == 0 {
            return None;
        }
        match self.ready.try_recv() {
            Ok(Ok(prepared)) => {
                self.pending -= 1;
                Some(prepared)
            }
            Ok(Err(error)) => {
                self.pending -= 1;
                tracing::warn!(%error, "cannot prepare a log segment; the next one is appended to");
                None
            }
            Err(_) => None,
        }
    }

    /// Stops the thread and removes the prepared segments nobody took.
    pub fn stop(&mut self) {
        self.requests = None;
        while self.pending > 0 {
            self.pending -= 1;
            if let Ok(Ok(prepared)) = self.ready.recv() {
                let _ = std::fs::remove_file(&prepared.path);
            }
        }
    }
}

/// Opens `path` for writing with `O_DIRECT`, or without where the file system refuses it
/// (tmpfs).
fn open_direct(path: &Path, create: bool) -> io::Result<File> {
    let options = |direct: bool| {
        let mut options = OpenOptions::new();
        options.write(true);
        if create {
            options.create(true).truncate(true);
        }
        if direct {
            options.custom_flags(libc::O_DIRECT);
        }
        options
    };
    match options(true).open(path) {
        Ok(file) => Ok(file),
        Err(error) if error.raw_os_error() == Some(libc::EINVAL) => options(false).open(path),
        Err(error) => Err(error),
    }
}

/// Writes the header and zeros to `size` bytes at `path`, and syncs the file.
fn prepare(path: &Path, size: u64) -> io::Result<Prepared> {
    const CHUNK: usize = 1024 * 1024;
    let file = open_direct(path, true)?;
    let mut bytes = vec![0u8; CHUNK + BLOCK];
    let start = bytes.as_ptr().align_offset(BLOCK);
    let chunk = &mut bytes[start..start + CHUNK];
    chunk[..MAGIC.len()].copy_from_slice(MAGIC);
    let mut offset = 0u64;
    while offset < size {
        let length = (size - offset).min(CHUNK as u64) as usize;
        file.write_all_at(&chunk[..length], offset)?;
        if offset == 0 {
            chunk[..MAGIC.len()].fill(0);
        }
        offset += length as u64;
    }
    file.sync_all()?;
    Ok(Prepared {
        file,
        path: path.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempDirectory(PathBuf);

    impl TempDirectory {
        fn new(label: &str) -> TempDirectory {
            let path = std::env::temp_dir().join(format!(
                "ferrobus-active-{label}-{}-{}",
                std::process::id(),
                crate::encoding::ids::unique_u64()
            ));
            std::fs::create_dir_all(&path).expect("temp dir");
            TempDirectory(path)
        }
    }

    impl Drop for TempDirectory {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn record(index: usize) -> Vec<u8> {
        // Sizes that end batches inside blocks, on block edges and across several blocks.
        let length = 1 + (index * 997) % 5000;
        vec![(index % 251) as u8 + 1; length]
    }

    fn commit(segment: &mut Segment, batch: &mut Batch, directory: &Path, records: &[Vec<u8>]) {
        let bytes = records.iter().map(Vec::len).sum();
        batch.begin(segment.tail(), records.len(), bytes);
        for payload in records {
            batch.push(payload);
        }
        segment.write(batch).expect("write");
        segment.sync(directory).expect("sync");
        segment.written(batch);
    }

    fn prepared(directory: &Path, size: u64) -> Prepared {
        let mut preparer = Preparer::start(directory, size).expect("preparer");
        preparer.request();
        loop {
            if let Some(prepared) = preparer.take() {
                return prepared;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn a_prepared_segment_reads_back_whole_and_ends_in_zeros() {
        let directory = TempDirectory::new("prepared");
        let mut segment =
            Segment::from_prepared(&directory.0, 7, prepared(&directory.0, 256 * 1024))
                .expect("into use");
        let mut batch = Batch::default();
        let records: Vec<Vec<u8>> = (0..40).map(record).collect();
        for chunk in records.chunks(3) {
            commit(&mut segment, &mut batch, &directory.0, chunk);
        }
        let path = directory.0.join(segment::file_name(7));
        let scanned = segment::scan(&path).expect("scan");
        assert_eq!(scanned.records, records);
        assert_eq!(scanned.valid_length, segment.length);
        assert_eq!(scanned.invalid_length, 0);
        assert!(scanned.zeroed_length >= BLOCK as u64, "{scanned:?}");

        // As after a crash: reopened on its zeros, written on where the records end.
        drop(segment);
        let mut segment =
            Segment::reopen(&directory.0, 7, scanned.valid_length, scanned.zeroed_length)
                .expect("reopen");
        assert!(segment.is_prepared());
        let more: Vec<Vec<u8>> = (40..55).map(record).collect();
        commit(&mut segment, &mut batch, &directory.0, &more);
        segment.trim();
        let scanned = segment::scan(&path).expect("scan");
        assert_eq!(scanned.records, [records, more].concat());
        assert_eq!(scanned.zeroed_length, 0, "trimmed");
        assert_eq!(
            std::fs::metadata(&path).expect("stat").len(),
            segment.length
        );
    }

    #[test]
    fn a_failed_write_leaves_nothing_past_the_records() {
        let directory = TempDirectory::new("cut");
        let mut segment =
            Segment::from_prepared(&directory.0, 0, prepared(&directory.0, 64 * 1024))
                .expect("into use");
        let mut batch = Batch::default();
        commit(
            &mut segment,
            &mut batch,
            &directory.0,
            &[record(1), record(2)],
        );
        // A batch written but refused (as after a failed write): cut back.
        batch.begin(segment.tail(), 1, record(3).len());
        batch.push(&record(3));
        segment.write(&mut batch).expect("write");
        segment.cut_back();
        let path = directory.0.join(segment::file_name(0));
        let scanned = segment::scan(&path).expect("scan");
        assert_eq!(scanned.records, vec![record(1), record(2)]);
        assert_eq!(scanned.invalid_length + scanned.zeroed_length, 0);
        // Writing goes on past the file's end.
        commit(&mut segment, &mut batch, &directory.0, &[record(4)]);
        let scanned = segment::scan(&path).expect("scan");
        assert_eq!(scanned.records, vec![record(1), record(2), record(4)]);
    }

    #[test]
    fn leftover_prepared_files_are_removed_at_start() {
        let directory = TempDirectory::new("leftover");
        let leftover = directory.0.join(format!("{:016x}{PREPARED_SUFFIX}", 3));
        std::fs::write(&leftover, b"zeros").expect("write");
        let mut preparer = Preparer::start(&directory.0, 4096).expect("preparer");
        assert!(!leftover.exists());
        preparer.request();
        preparer.stop();
        let names: Vec<_> = std::fs::read_dir(&directory.0)
            .expect("list")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        assert!(names.is_empty(), "{names:?}");
    }
}
