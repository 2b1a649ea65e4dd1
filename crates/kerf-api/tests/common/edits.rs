//! Random edits of a text, for fuzzing decoders with inputs close to valid ones (shared by
//! the fuzz targets of kerf-api and kerf-sim through `#[path]`).

use proptest::prelude::*;

/// One edit of a text: overwrite, insert or delete a byte, or duplicate or drop a line.
#[derive(Debug, Clone)]
pub enum Edit {
    Overwrite(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    DuplicateLine(usize),
    DropLine(usize),
}

pub fn edit() -> impl Strategy<Value = Edit> {
    // Bytes that matter to YAML and to the fields: structure, digits, signs, letters.
    let byte = prop_oneof![
        Just(b':'),
        Just(b'-'),
        Just(b' '),
        Just(b'\n'),
        Just(b'{'),
        Just(b'['),
        Just(b'"'),
        Just(b'&'),
        Just(b'*'),
        Just(b'!'),
        Just(b'%'),
        b'0'..=b'9',
        b'a'..=b'z',
        any::<u8>(),
    ];
    prop_oneof![
        (any::<usize>(), byte.clone()).prop_map(|(i, b)| Edit::Overwrite(i, b)),
        (any::<usize>(), byte).prop_map(|(i, b)| Edit::Insert(i, b)),
        any::<usize>().prop_map(Edit::Delete),
        any::<usize>().prop_map(Edit::DuplicateLine),
        any::<usize>().prop_map(Edit::DropLine),
    ]
}

/// `seed` with `edits` applied (invalid UTF-8 replaced, as a reader of text would).
pub fn mutate(seed: &str, edits: &[Edit]) -> String {
    let mut bytes = seed.as_bytes().to_vec();
    for e in edits {
        match *e {
            Edit::Overwrite(i, b) if !bytes.is_empty() => {
                let n = bytes.len();
                bytes[i % n] = b;
            }
            Edit::Insert(i, b) => {
                let at = i % (bytes.len() + 1);
                bytes.insert(at, b);
            }
            Edit::Delete(i) if !bytes.is_empty() => {
                let n = bytes.len();
                bytes.remove(i % n);
            }
            Edit::DuplicateLine(i) | Edit::DropLine(i) => {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let mut lines: Vec<&str> = text.lines().collect();
                if !lines.is_empty() {
                    let k = i % lines.len();
                    if matches!(e, Edit::DuplicateLine(_)) {
                        lines.insert(k, lines[k]);
                    } else {
                        lines.remove(k);
                    }
                }
                bytes = lines.join("\n").into_bytes();
            }
            _ => {}
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}
