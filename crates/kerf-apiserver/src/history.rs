//! The changes a serving cluster keeps for HTTP watches to replay (and resume from after a
//! break): the latest ones, at most so many and at most so many bytes of objects, so that
//! clients writing large objects again and again cannot grow the server without bound. A
//! watch that needs a change no longer kept gets `410 Expired` and relists.

use std::collections::VecDeque;

use crate::stored::Stored;
use crate::writes::ChangeType;

/// How many bytes of objects (as JSON) a serving cluster's history keeps at most.
pub const HISTORY_BYTES: usize = 128 << 20;

/// One change in the store's history (what HTTP watches replay).
#[derive(Debug, Clone)]
pub struct Change {
    pub resource_version: u64,
    pub kind: &'static str,
    pub type_: ChangeType,
    pub object: Stored,
    /// For a modification, the object before it (a filtered watch turns an object entering
    /// its selector into ADDED and one leaving it into DELETED).
    pub previous: Option<Stored>,
}

/// A watch asked to resume from a resourceVersion the history no longer holds: relist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too old resource version: {requested} ({oldest})")]
pub struct Expired {
    pub requested: u64,
    /// The oldest resourceVersion a watch can still resume from.
    pub oldest: u64,
}

/// The kept changes, oldest first. Keeps nothing until enabled (the simulator does not serve).
#[derive(Debug, Default)]
pub(crate) struct History {
    changes: VecDeque<Change>,
    /// Each kept change's object as JSON, in bytes (same order), and their sum.
    sizes: VecDeque<usize>,
    bytes: usize,
    /// At most this many changes (0: keep none) ...
    cap: usize,
    /// ... and at most this many bytes.
    byte_cap: usize,
    /// Every change after this resourceVersion is still kept.
    floor: u64,
}

impl History {
    /// Keeps the last `capacity` changes (and [`HISTORY_BYTES`]) from resourceVersion `rv` on.
    pub fn enable(&mut self, capacity: usize, rv: u64) {
        self.cap = capacity.max(1);
        self.byte_cap = HISTORY_BYTES;
        self.floor = rv;
    }

    pub fn limit_bytes(&mut self, bytes: usize) {
        self.byte_cap = bytes;
    }

    pub fn push(&mut self, change: Change) {
        if self.cap == 0 {
            return;
        }
        let size = json_size(&change.object);
        while (self.changes.len() >= self.cap || self.bytes.saturating_add(size) > self.byte_cap)
            && let Some(old) = self.changes.pop_front()
        {
            self.floor = old.resource_version;
            self.bytes -= self.sizes.pop_front().unwrap_or_default();
        }
        self.changes.push_back(change);
        self.sizes.push_back(size);
        self.bytes += size;
    }

    /// Changes after `since`, oldest first; `Expired` when some are no longer kept.
    pub fn since(&self, since: u64) -> Result<Vec<Change>, Expired> {
        if since < self.floor {
            return Err(Expired { requested: since, oldest: self.floor });
        }
        let start = self.changes.partition_point(|c| c.resource_version <= since);
        Ok(self.changes.iter().skip(start).cloned().collect())
    }
}

/// Counts what is written to it.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The size of an object as JSON, counted without building the text.
fn json_size(obj: &Stored) -> usize {
    let mut n = ByteCount(0);
    let _ = match obj {
        Stored::Typed(a) => serde_json::to_writer(&mut n, a),
        Stored::Dynamic(d) => {
            serde_json::to_writer(&mut n, &d.metadata).and_then(|()| serde_json::to_writer(&mut n, &d.body))
        }
    };
    n.0
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kerf_api::clock::ManualClock;

    use crate::SimCluster;

    fn class(name: &str, note_bytes: usize) -> PriorityClass {
        PriorityClass {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                annotations: Some([("note".to_string(), "x".repeat(note_bytes))].into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn large_objects_push_the_oldest_changes_out_of_a_history_kept_under_its_byte_cap() {
        let c = SimCluster::new(ManualClock::new(), 1);
        c.enable_serving(1000);
        c.limit_history_bytes(1 << 20);
        let start = c.resource_version();
        for i in 0..10 {
            c.create_obj(class(&format!("c{i}"), 300 << 10)).unwrap();
        }
        // Three 300 KiB objects fit in 1 MiB, four do not.
        let kept = c.changes_since(c.resource_version() - 3).unwrap();
        assert_eq!(kept.len(), 3);
        let e = c.changes_since(start).unwrap_err();
        assert_eq!(e.oldest, c.resource_version() - 3, "{e}");
        // Small changes stay far under the byte cap: they are kept by count.
        for i in 0..20 {
            c.create_obj(class(&format!("s{i}"), 10)).unwrap();
        }
        assert_eq!(c.changes_since(c.resource_version() - 20).unwrap().len(), 20);
    }
}
