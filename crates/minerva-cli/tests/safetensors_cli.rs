//! `minerva inspect` and `minerva dump` on SafeTensors checkpoints (fixtures/safetensors, written by
//! make_safetensors_fixtures.py with numpy and the `safetensors` package).

mod common;

use std::path::{Path, PathBuf};

use common::{Npy, assert_one_line_error, minerva, root};

fn fixtures() -> PathBuf {
    root().join("fixtures/safetensors")
}

fn manifest() -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(fixtures().join("manifest.json")).unwrap()).unwrap()
}

fn inspect_json(path: &Path) -> serde_json::Value {
    let out = minerva(&["inspect".as_ref(), path.as_os_str(), "--json".as_ref()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn inspect_lists_a_sharded_checkpoint() {
    let dir = fixtures().join("sharded_index");
    let report = inspect_json(&dir);
    assert_eq!(report["format"], "safetensors");
    assert_eq!(report["shards"].as_array().unwrap().len(), 3);
    let expected = &manifest()["sharded_index"]["tensors"];
    let tensors = report["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), expected.as_array().unwrap().len());
    for want in expected.as_array().unwrap() {
        let got = tensors.iter().find(|t| t["name"] == want["name"]).unwrap_or_else(|| panic!("{}", want["name"]));
        assert_eq!(got["type"], want["dtype"]);
        assert_eq!(got["shape"], want["shape"]);
        assert_eq!(got["shard"], want["shard"]);
    }
    let text = minerva(&["inspect".as_ref(), dir.as_os_str()]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("SafeTensors, 3 shard(s)"));
}

#[test]
fn inspect_shows_logical_quantized_tensors() {
    let manifest = manifest();
    for layout in ["gpt_oss_mxfp4", "mlx_affine", "mlx_mxfp4"] {
        let report = inspect_json(&fixtures().join(layout));
        let logical = report["logical_tensors"].as_array().unwrap();
        let expected = manifest[layout]["logical"].as_array().unwrap();
        assert_eq!(logical.len(), expected.len(), "{layout}");
        for want in expected {
            let got = logical.iter().find(|l| l["name"] == want["name"]).unwrap_or_else(|| panic!("{}", want["name"]));
            assert_eq!(got["kind"], want["kind"], "{layout}");
            assert_eq!(got["shape"], want["shape"], "{layout}");
            assert_eq!(got["components"], want["components"], "{layout}");
            if let Some(bits) = want.get("bits") {
                assert_eq!(&got["bits"], bits, "{layout}");
                assert_eq!(&got["group_size"], &want["group_size"], "{layout}");
            }
        }
    }
}

/// Every quantized logical tensor dumps to the values the fixture script computed with numpy.
#[test]
fn dump_dequantizes_logical_tensors_to_the_scripts_values() {
    let manifest = manifest();
    let tmp = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for layout in ["gpt_oss_mxfp4", "mlx_affine", "mlx_mxfp4"] {
        for want in manifest[layout]["logical"].as_array().unwrap() {
            let name = want["name"].as_str().unwrap();
            let npy = tmp.path().join("t.npy");
            let dir = fixtures().join(layout);
            let out = minerva(&["dump".as_ref(), dir.as_os_str(), name.as_ref(), "-o".as_ref(), npy.as_os_str()]);
            assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
            let dumped = Npy::read(&npy);
            let shape: Vec<usize> =
                want["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
            assert_eq!(dumped.shape, shape, "{name}");
            let values = dumped.values();
            let expected: Vec<f32> =
                want["values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
            assert_eq!(values.len(), expected.len(), "{name}");
            for (i, (a, b)) in values.iter().zip(&expected).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{layout} {name}[{i}]: {a} vs numpy {b}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 4, "expected several logical tensors, checked {checked}");
}

#[test]
fn safetensors_errors_are_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.safetensors");
    std::fs::write(&bad, [0xff; 16]).unwrap();
    assert_one_line_error(&minerva(&["inspect".as_ref(), bad.as_os_str()]), "bad.safetensors");

    let empty = tmp.path().join("empty_dir");
    std::fs::create_dir(&empty).unwrap();
    assert_one_line_error(&minerva(&["inspect".as_ref(), empty.as_os_str()]), "empty_dir");

    let npy = tmp.path().join("x.npy");
    let dir = fixtures().join("gpt_oss_mxfp4");
    let out = minerva(&["dump".as_ref(), dir.as_os_str(), "nope".as_ref(), "-o".as_ref(), npy.as_os_str()]);
    assert_one_line_error(&out, "no tensor named \"nope\"");
}
