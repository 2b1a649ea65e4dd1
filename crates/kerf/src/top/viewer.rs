//! What the person at `kerf top`'s keyboard has chosen: the sort, the filter (typed after `/`),
//! the row under the cursor (kept by node name, so it stays on its node when the list re-sorts)
//! and whether the selected node's pane is open. Keys arrive as [`Key`]s, free of the terminal.

use super::view::{Options, Sort};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    Enter,
    Esc,
    Backspace,
    /// Ctrl-C.
    Interrupt,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Quit,
    /// The view changed: draw again.
    Changed,
    Nothing,
}

#[derive(Debug, Clone)]
pub struct Viewer {
    pub opts: Options,
    /// Index of the cursor's row in the last frame's node list.
    pub cursor: usize,
    pub detail: bool,
    /// The filter being typed (after `/`, until enter or esc).
    pub typing: Option<String>,
    /// Rows of the node list on screen (a page for page up / down).
    pub page: usize,
}

impl Viewer {
    pub fn new(opts: Options) -> Viewer {
        Viewer { opts, cursor: 0, detail: false, typing: None, page: 20 }
    }

    /// Puts the cursor on the selected node in the new list (or keeps its place when the node
    /// is gone) and selects the node under it.
    pub fn follow(&mut self, names: &[&str]) {
        if let Some(i) = self.opts.selected.as_deref().and_then(|s| names.iter().position(|n| *n == s)) {
            self.cursor = i;
        }
        self.cursor = self.cursor.min(names.len().saturating_sub(1));
        self.opts.selected = names.get(self.cursor).map(|n| n.to_string());
    }

    fn move_to(&mut self, to: usize, names: &[&str]) -> Outcome {
        self.cursor = to.min(names.len().saturating_sub(1));
        self.opts.selected = names.get(self.cursor).map(|n| n.to_string());
        Outcome::Changed
    }

    /// Applies a key to the view; `names` is the node list as last drawn.
    pub fn key(&mut self, key: Key, names: &[&str]) -> Outcome {
        if key == Key::Interrupt {
            return Outcome::Quit;
        }
        if let Some(typed) = &mut self.typing {
            match key {
                Key::Char(c) => typed.push(c),
                Key::Backspace => drop(typed.pop()),
                Key::Enter => {
                    self.opts.filter = std::mem::take(typed);
                    self.typing = None;
                    self.cursor = 0;
                }
                Key::Esc => self.typing = None,
                _ => return Outcome::Nothing,
            }
            return Outcome::Changed;
        }
        match key {
            Key::Char('q') => Outcome::Quit,
            Key::Up | Key::Char('k') => self.move_to(self.cursor.saturating_sub(1), names),
            Key::Down | Key::Char('j') => self.move_to(self.cursor + 1, names),
            Key::PageUp => self.move_to(self.cursor.saturating_sub(self.page), names),
            Key::PageDown => self.move_to(self.cursor + self.page, names),
            Key::Home | Key::Char('g') => self.move_to(0, names),
            Key::End | Key::Char('G') => self.move_to(usize::MAX, names),
            Key::Enter => {
                self.detail = !self.detail;
                Outcome::Changed
            }
            Key::Esc if self.detail => {
                self.detail = false;
                Outcome::Changed
            }
            Key::Esc if !self.opts.filter.is_empty() => {
                self.opts.filter.clear();
                Outcome::Changed
            }
            Key::Char('s') => {
                let cycle = Sort::cycle(&self.opts.resources);
                let at = cycle.iter().position(|s| *s == self.opts.sort).map_or(0, |i| i + 1);
                self.opts.sort = cycle[at % cycle.len()].clone();
                self.opts.reverse = false;
                Outcome::Changed
            }
            Key::Char('r') => {
                self.opts.reverse = !self.opts.reverse;
                Outcome::Changed
            }
            Key::Char('/') => {
                self.typing = Some(self.opts.filter.clone());
                Outcome::Changed
            }
            _ => Outcome::Nothing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_moves_within_the_list_and_stays_on_its_node_when_the_list_reorders() {
        let mut v = Viewer::new(Options::default());
        let names = ["a", "b", "c"];
        v.follow(&names);
        assert_eq!(v.opts.selected.as_deref(), Some("a"));
        assert_eq!(v.key(Key::Down, &names), Outcome::Changed);
        assert_eq!(v.key(Key::Down, &names), Outcome::Changed);
        assert_eq!(v.key(Key::Down, &names), Outcome::Changed);
        assert_eq!((v.cursor, v.opts.selected.as_deref()), (2, Some("c")));
        v.follow(&["c", "a", "b"]);
        assert_eq!(v.cursor, 0, "still on c");
        v.follow(&["a"]);
        assert_eq!((v.cursor, v.opts.selected.as_deref()), (0, Some("a")), "c is gone");
        assert_eq!(v.key(Key::Enter, &names), Outcome::Changed);
        assert!(v.detail);
        assert_eq!(v.key(Key::Esc, &names), Outcome::Changed);
        assert!(!v.detail);
        assert_eq!(v.key(Key::Char('q'), &names), Outcome::Quit);
    }

    #[test]
    fn s_cycles_the_sort_through_the_resources_and_slash_types_a_filter() {
        let mut v = Viewer::new(Options::default());
        let mut seen = Vec::new();
        for _ in 0..Sort::cycle(&v.opts.resources).len() {
            v.key(Key::Char('s'), &[]);
            seen.push(v.opts.sort.name());
        }
        assert_eq!(
            seen,
            ["nodepool", "type", "zone", "capacity", "price", "cpu", "memory", "pods", "age", "state", "name"]
        );
        v.key(Key::Char('r'), &[]);
        assert!(v.opts.reverse);
        v.key(Key::Char('/'), &[]);
        for c in "spox".chars() {
            v.key(Key::Char(c), &[]);
        }
        v.key(Key::Backspace, &[]);
        v.key(Key::Char('t'), &[]);
        assert_eq!(v.key(Key::Char('q'), &[]), Outcome::Changed, "q is typed, not quit, in the filter");
        v.key(Key::Backspace, &[]);
        v.key(Key::Enter, &[]);
        assert_eq!((v.opts.filter.as_str(), v.typing.is_none()), ("spot", true));
        v.key(Key::Esc, &[]);
        assert_eq!(v.opts.filter, "", "esc clears the filter");
    }
}
