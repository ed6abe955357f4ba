//! Parses arbitrary bytes as a SafeTensors file. Whatever the input, `Checkpoint::from_bytes` must
//! return (no panic, no out-of-bounds read, no allocation the input cannot justify); when it
//! returns `Ok`, every tensor and logical tensor must be readable.

#![no_main]

use libfuzzer_sys::fuzz_target;
use minerva_safetensors::Checkpoint;

fuzz_target!(|data: &[u8]| {
    let checkpoint = match Checkpoint::from_bytes("fuzz.safetensors", data.to_vec()) {
        Ok(c) => c,
        Err(e) => {
            let _ = (e.to_string(), format!("{e:?}"));
            return;
        }
    };
    let mut total = 0usize;
    for t in checkpoint.tensors() {
        // Views must lie inside the input and match their dtype × shape.
        assert!(t.view.bytes.len() <= data.len());
        let elements = t.view.element_count();
        let expected = elements / t.view.dtype.block_elems() * t.view.dtype.block_bytes();
        assert_eq!(t.view.bytes.len(), expected, "{}", t.view.name);
        total += t.view.bytes.len();
        assert!(checkpoint.tensor(t.view.name).is_some());
    }
    assert!(total <= data.len());
    for l in checkpoint.logical_tensors() {
        let _ = (l.encoding.kind(), l.shape.iter().product::<usize>());
        for c in l.encoding.components() {
            assert!(c.bytes.len() <= data.len());
        }
        assert!(checkpoint.logical_tensor(l.name).is_some());
    }
    let _ = checkpoint.shard_metadata(0);
});
