//! A label map packed after decoding (`kerf_api::slim_meta::packed`) takes fewer bytes than the
//! map as decoded and holds the same entries. The bytes are counted by this test binary's
//! allocator, per thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;

use kerf_api::slim_meta::packed;

/// The system allocator, counting the bytes each thread holds.
struct Counting;

thread_local! {
    static HELD: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // A thread being torn down has no counter left; its frees are not this test's.
    let _ = HELD.try_with(|h| h.set(h.get() + delta));
}

// SAFETY: every call is passed to the system allocator as it came; the counter is a plain
// thread-local integer, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn held() -> isize {
    HELD.with(Cell::get)
}

/// A Node's labels as the API server sends them (keys in order).
fn node_labels_json(count: usize) -> String {
    let entries: Vec<String> =
        (0..count).map(|i| format!(r#""karpenter.k8s.aws/instance-label-{i:02}":"value-{i}""#)).collect();
    format!("{{{}}}", entries.join(","))
}

#[test]
fn twenty_two_labels_packed_take_a_map_node_fewer_than_decoded() {
    let json = node_labels_json(22);
    let before = held();
    let decoded: BTreeMap<String, String> = serde_json::from_str(&json).unwrap();
    let as_decoded = held() - before;
    let packed = packed(decoded);
    let as_packed = held() - before;
    assert_eq!(packed.len(), 22);
    assert_eq!(packed.get("karpenter.k8s.aws/instance-label-21").map(String::as_str), Some("value-21"));
    // Decoded, the entries fill three leaves (and their parent); packed, two. A leaf of a
    // `BTreeMap<String, String>` is over 500 bytes whatever it holds.
    assert!(as_packed + 500 <= as_decoded, "decoded: {as_decoded} bytes, packed: {as_packed}");
}

#[test]
fn a_packed_map_holds_the_same_entries_whatever_its_size() {
    for n in 0..60 {
        let decoded: BTreeMap<String, String> = serde_json::from_str(&node_labels_json(n)).unwrap();
        assert_eq!(packed(decoded.clone()), decoded, "{n} entries");
    }
}
