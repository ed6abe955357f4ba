//! `Checkpoint::release` on a mapped shard: the pages of a range leave the process's resident
//! set (the CPU backend calls it after repacking a tensor), and the bytes read the same after.

use minerva_core::DType;
use minerva_safetensors::{Checkpoint, SafetensorsWriter};

/// The process's resident file-backed memory in KiB (`RssFile` of /proc/self/status).
fn resident_file_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with("RssFile:")).expect("RssFile line");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a number of kB")
}

/// A 64 MiB tensor read whole (its pages resident), then released: resident file memory drops
/// by at least 56 MiB (each of its whole pages leaves; allowing for 8 MiB of pages other threads
/// map meanwhile), and every byte reads the same afterwards (faulted in again). Ranges past the
/// end, empty ones, a shard that does not exist and an owned checkpoint change nothing.
#[test]
fn released_pages_leave_the_process_and_read_the_same_again() {
    const LEN: usize = 64 << 20;
    let data: Vec<u8> = (0..LEN as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let mut w = SafetensorsWriter::new();
    w.add_tensor("t", DType::U8, &[LEN]).unwrap();
    let mut bytes = Vec::new();
    w.write_header(&mut bytes).unwrap().write_chunk(&data).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    std::fs::write(&path, &bytes).unwrap();

    let mapped = Checkpoint::open(&path).unwrap();
    let shard = || mapped.shard_bytes(0).unwrap();
    assert!(shard() == &bytes[..], "the map reads the file");
    let before = resident_file_kib();
    mapped.release(0, 0..bytes.len());
    let after = resident_file_kib();
    assert!(before >= after + (56 << 10), "resident file memory {before} KiB -> {after} KiB");
    assert!(shard() == &bytes[..], "after releasing");
    for range in [bytes.len()..bytes.len() + 10_000, 5..6, 0..0] {
        mapped.release(0, range);
        mapped.release(1, 0..bytes.len());
    }
    assert!(shard() == &bytes[..]);

    let owned = Checkpoint::from_bytes("model.safetensors", bytes.clone()).unwrap();
    owned.release(0, 0..bytes.len());
    assert!(owned.shard_bytes(0).unwrap() == &bytes[..]);
}
