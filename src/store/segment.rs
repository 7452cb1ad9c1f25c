//! The on-disk format of the write-ahead log: numbered segment files, each a header and a
//! sequence of CRC-checked records.
//!
//! ```text
//! segment file  "<16 hex digits>.wal"  (the number of the segment, increasing)
//!   header      b"FBWAL001"                                   8 bytes
//!   record*     length: u32 BE | crc32(payload): u32 BE | payload (length bytes)
//! ```
//!
//! A record is valid only whole: a length that runs past the end of the file, or a CRC
//! that does not match, marks the end of what was written (a torn tail after a crash).
//! Only the last segment may end that way; [`scan`] reports where the valid part ends so
//! the writer can truncate the rest.
//!
//! A header of eight zero bytes also ends the records: segments are preallocated with
//! zeros (the writer overwrites them, so that a sync has no file size to record), and a
//! segment may end in zeros up to its allocated size. That is a clean end when everything
//! after it is zero, a torn tail otherwise. An empty payload would encode as exactly such a
//! header, so the log never writes one. Nothing here keeps state or spawns threads.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// The first bytes of every segment: the format and its version.
pub const MAGIC: &[u8; 8] = b"FBWAL001";
/// Bytes before a record's payload: length and CRC.
pub const RECORD_HEADER: usize = 8;
/// Largest payload a record may carry (a message is at most 100 MiB, plus its metadata).
pub const MAX_RECORD: u32 = 128 * 1024 * 1024;

/// The file name of segment `number`.
pub fn file_name(number: u64) -> String {
    format!("{number:016x}.wal")
}

/// The segment numbers in `directory`, in order.
pub fn list(directory: &Path) -> io::Result<Vec<u64>> {
    let mut numbers = Vec::new();
    for entry in std::fs::read_dir(directory)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(".wal") else {
            continue;
        };
        if stem.len() == 16
            && let Ok(number) = u64::from_str_radix(stem, 16)
        {
            numbers.push(number);
        }
    }
    numbers.sort_unstable();
    Ok(numbers)
}

/// Appends one record (header and payload) to `output`.
pub fn encode_record(output: &mut Vec<u8>, payload: &[u8]) {
    output.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    output.extend_from_slice(&crc32fast::hash(payload).to_be_bytes());
    output.extend_from_slice(payload);
}

/// What a scan of one segment found.
#[derive(Debug)]
pub struct Scanned {
    /// The valid records, in order.
    pub records: Vec<Vec<u8>>,
    /// Where each record's header starts in the file (byte offset), in the same order.
    pub offsets: Vec<u64>,
    /// Bytes of the file that hold the header and the valid records.
    pub valid_length: u64,
    /// Bytes after them (a torn or corrupt tail); 0 for a clean segment.
    pub invalid_length: u64,
    /// Zero bytes after the valid part to the end of the file (preallocated room, not
    /// damage); 0 when there are none or the tail is torn.
    pub zeroed_length: u64,
    /// Why the scan stopped early, when it did.
    pub stopped_because: Option<String>,
}

/// Reads the record whose header starts at `offset` of `file` (checked against its CRC).
pub fn read_record(file: &File, offset: u64) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut header = [0u8; RECORD_HEADER];
    file.read_exact_at(&mut header, offset)?;
    let length = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let crc = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    if length == 0 || length > MAX_RECORD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("no record at byte {offset} (length {length})"),
        ));
    }
    let mut payload = vec![0u8; length as usize];
    file.read_exact_at(&mut payload, offset + RECORD_HEADER as u64)?;
    if crc32fast::hash(&payload) != crc {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the record at byte {offset} fails its CRC"),
        ));
    }
    Ok(payload)
}

/// Reads a segment and every valid record in it. A missing or wrong header is an error (the
/// file is not ours); a torn or corrupt record ends the scan.
pub fn scan(path: &Path) -> io::Result<Scanned> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    if bytes.len() < MAGIC.len() {
        // A segment created but never written whole: nothing in it was acknowledged.
        return Ok(Scanned {
            records: Vec::new(),
            offsets: Vec::new(),
            valid_length: 0,
            invalid_length: bytes.len() as u64,
            zeroed_length: 0,
            stopped_because: Some("the segment header is incomplete".to_string()),
        });
    }
    if &bytes[..MAGIC.len()] != MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a ferrobus log segment", path.display()),
        ));
    }
    let mut records = Vec::new();
    let mut offsets = Vec::new();
    let mut position = MAGIC.len();
    let mut stopped_because = None;
    let mut zeroed_length = 0;
    while position < bytes.len() {
        let rest = &bytes[position..];
        if rest[..rest.len().min(RECORD_HEADER)]
            .iter()
            .all(|byte| *byte == 0)
        {
            // Preallocated room: the end of the records, clean if nothing follows.
            if rest.iter().all(|byte| *byte == 0) {
                zeroed_length = rest.len() as u64;
            } else {
                stopped_because = Some(format!(
                    "a zero record header at byte {position} is followed by data"
                ));
            }
            break;
        }
        if rest.len() < RECORD_HEADER {
            stopped_because = Some(format!("a record header is cut off at byte {position}"));
            break;
        }
        let length = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
        let crc = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
        if length > MAX_RECORD || rest.len() - RECORD_HEADER < length as usize {
            stopped_because = Some(format!(
                "a record of {length} bytes is cut off at byte {position}"
            ));
            break;
        }
        let payload = &rest[RECORD_HEADER..RECORD_HEADER + length as usize];
        if crc32fast::hash(payload) != crc {
            stopped_because = Some(format!("the record at byte {position} fails its CRC"));
            break;
        }
        records.push(payload.to_vec());
        offsets.push(position as u64);
        position += RECORD_HEADER + length as usize;
    }
    Ok(Scanned {
        records,
        offsets,
        valid_length: position as u64,
        invalid_length: (bytes.len() - position) as u64 - zeroed_length,
        zeroed_length,
        stopped_because,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment_with(records: &[&[u8]]) -> Vec<u8> {
        let mut bytes = MAGIC.to_vec();
        for record in records {
            encode_record(&mut bytes, record);
        }
        bytes
    }

    fn scan_bytes(bytes: &[u8]) -> Scanned {
        let directory = std::env::temp_dir().join(format!(
            "ferrobus-segment-{}-{}",
            std::process::id(),
            crate::encoding::ids::unique_u64()
        ));
        std::fs::create_dir_all(&directory).expect("temp dir");
        let path = directory.join(file_name(1));
        std::fs::write(&path, bytes).expect("write");
        let scanned = scan(&path).expect("scan");
        let _ = std::fs::remove_dir_all(&directory);
        scanned
    }

    #[test]
    fn whole_records_are_read_back_in_order() {
        let scanned = scan_bytes(&segment_with(&[b"one", b"t", b"three"]));
        assert_eq!(
            scanned.records,
            vec![b"one".to_vec(), b"t".to_vec(), b"three".to_vec()]
        );
        assert_eq!(scanned.invalid_length, 0);
        assert!(scanned.stopped_because.is_none());
    }

    #[test]
    fn a_zeroed_tail_is_room_not_damage() {
        let whole = segment_with(&[b"one", b"two"]);
        let mut bytes = whole.clone();
        bytes.resize(whole.len() + 5000, 0);
        let scanned = scan_bytes(&bytes);
        assert_eq!(scanned.records, vec![b"one".to_vec(), b"two".to_vec()]);
        assert_eq!(scanned.valid_length, whole.len() as u64);
        assert_eq!(scanned.invalid_length, 0);
        assert_eq!(scanned.zeroed_length, 5000);
        assert!(scanned.stopped_because.is_none());
        // Fewer zeros than a header: room too.
        let mut bytes = whole.clone();
        bytes.resize(whole.len() + 3, 0);
        assert_eq!(scan_bytes(&bytes).zeroed_length, 3);
    }

    #[test]
    fn data_after_zeros_is_a_torn_tail() {
        // A crash can land a later page of a write and not an earlier one: records that
        // follow zeros were never acknowledged, and are not read back.
        let whole = segment_with(&[b"one"]);
        let mut bytes = whole.clone();
        bytes.resize(whole.len() + 4096, 0);
        encode_record(&mut bytes, b"never acknowledged");
        let scanned = scan_bytes(&bytes);
        assert_eq!(scanned.records, vec![b"one".to_vec()]);
        assert_eq!(scanned.zeroed_length, 0);
        assert_eq!(scanned.invalid_length, (bytes.len() - whole.len()) as u64);
        assert!(scanned.stopped_because.expect("stopped").contains("zero"));
    }

    #[test]
    fn a_torn_tail_ends_the_scan_at_the_last_whole_record() {
        let whole = segment_with(&[b"one", b"two"]);
        for cut in 1..RECORD_HEADER + 3 {
            let mut bytes = segment_with(&[b"one", b"two", b"three"]);
            bytes.truncate(bytes.len() - cut);
            let scanned = scan_bytes(&bytes);
            assert_eq!(scanned.records.len(), 2, "cut {cut}");
            assert_eq!(scanned.valid_length, whole.len() as u64);
            // A header cut off within its leading zeros reads as zeros: the same end.
            assert_eq!(
                scanned.invalid_length + scanned.zeroed_length,
                (bytes.len() - whole.len()) as u64
            );
        }
    }

    #[test]
    fn a_flipped_bit_fails_the_crc() {
        let mut bytes = segment_with(&[b"one", b"two"]);
        let last = bytes.len() - 1;
        bytes[last] ^= 0x01;
        let scanned = scan_bytes(&bytes);
        assert_eq!(scanned.records, vec![b"one".to_vec()]);
        assert!(scanned.stopped_because.expect("stopped").contains("CRC"));
    }

    #[test]
    fn a_file_that_is_not_a_segment_is_an_error() {
        let directory = std::env::temp_dir().join(format!(
            "ferrobus-segment-foreign-{}",
            crate::encoding::ids::unique_u64()
        ));
        std::fs::create_dir_all(&directory).expect("temp dir");
        let path = directory.join(file_name(1));
        std::fs::write(&path, b"NOTOURS!and more").expect("write");
        assert!(scan(&path).is_err());
        let _ = std::fs::remove_dir_all(&directory);
    }
}
