//! Writing numpy `.npy` files (format version 1.0), little-endian f32 only.
//!
//! ```text
//! "\x93NUMPY" · u8 major=1 · u8 minor=0 · u16 header_len (LE)
//! header: "{'descr': '<f4', 'fortran_order': False, 'shape': (6, 512), }" padded with spaces and
//!         ending in '\n' so that the data starts at a multiple of 64 bytes
//! data:   row-major (C order) values
//! ```
//! Source: numpy's `numpy/lib/format.py` documentation of the format.

use std::io::Write;

/// Writes the `.npy` header for a little-endian f32 array of numpy shape `shape`; the values follow
/// with [`write_values`].
pub fn write_f32_header<W: Write>(mut w: W, shape: &[usize]) -> std::io::Result<()> {
    let dims = match shape {
        [] => String::new(),
        [one] => format!("{one},"),
        many => many.iter().map(usize::to_string).collect::<Vec<_>>().join(", "),
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({dims}), }}");
    // 10 bytes of preamble + header + '\n' must be a multiple of 64.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat(total.next_multiple_of(64) - total));
    header.push('\n');
    w.write_all(b"\x93NUMPY\x01\x00")?;
    w.write_all(&(header.len() as u16).to_le_bytes())?;
    w.write_all(header.as_bytes())
}

/// Appends `values` as little-endian f32.
pub fn write_values<W: Write>(mut w: W, values: &[f32]) -> std::io::Result<()> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    w.write_all(&bytes)
}

/// Writes `values` with numpy shape `shape` as a little-endian f32 `.npy` stream.
#[cfg(test)]
pub fn write_f32<W: Write>(mut w: W, shape: &[usize], values: &[f32]) -> std::io::Result<()> {
    write_f32_header(&mut w, shape)?;
    write_values(&mut w, values)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_padded_to_64_and_data_follows() {
        let mut out = Vec::new();
        write_f32(&mut out, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let header_len = u16::from_le_bytes([out[8], out[9]]) as usize;
        assert_eq!((10 + header_len) % 64, 0);
        let header = std::str::from_utf8(&out[10..10 + header_len]).unwrap();
        assert!(header.contains("'shape': (2, 3)"), "{header}");
        assert!(header.ends_with('\n'));
        assert_eq!(out.len(), 10 + header_len + 24);
        assert_eq!(&out[10 + header_len..10 + header_len + 4], &1.0f32.to_le_bytes());
    }

    #[test]
    fn one_dimensional_shape_has_trailing_comma() {
        let mut out = Vec::new();
        write_f32(&mut out, &[3], &[0.0; 3]).unwrap();
        assert!(String::from_utf8_lossy(&out).contains("'shape': (3,)"));
    }
}
