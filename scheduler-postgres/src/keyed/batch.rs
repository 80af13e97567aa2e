//! [`Batch`]: a batch of keys as it is processed: checked before anything runs, and
//! each distinct key once.

use std::borrow::Cow;
use std::collections::HashSet;

/// A batch ready to process: every key valid PostgreSQL `text`, and each distinct key
/// once, at its first occurrence, in input order (a later item with the same key is
/// dropped).
#[derive(Debug)]
pub(super) struct Batch<'k, K: Clone> {
    /// The distinct keys: the input itself when no key repeats.
    keys: Cow<'k, [K]>,
    /// The position in the input of each distinct key's first occurrence, when some
    /// key repeats (otherwise positions are the same).
    first: Option<Vec<usize>>,
    /// How many keys the input has.
    input: usize,
}

/// The position of the first key of a batch that holds a NUL byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NulAt(pub(super) usize);

impl<'k, K: AsRef<str> + Clone> Batch<'k, K> {
    /// Checks `input` and keeps each distinct key once. No I/O.
    pub(super) fn new(input: &'k [K]) -> Result<Self, NulAt> {
        let mut seen = HashSet::with_capacity(input.len());
        let mut first = Vec::with_capacity(input.len());
        for (index, key) in input.iter().enumerate() {
            let key = key.as_ref();
            // PostgreSQL text cannot hold NUL; the server would refuse the whole
            // statement, after `BEGIN` and possibly after earlier chunks committed.
            if key.as_bytes().contains(&0) {
                return Err(NulAt(index));
            }
            if seen.insert(key) {
                first.push(index);
            }
        }
        Ok(if first.len() == input.len() {
            Batch {
                keys: Cow::Borrowed(input),
                first: None,
                input: input.len(),
            }
        } else {
            Batch {
                keys: first.iter().map(|&i| input[i].clone()).collect(),
                first: Some(first),
                input: input.len(),
            }
        })
    }

    /// The distinct keys, in order of first occurrence.
    pub(super) fn keys(&self) -> &[K] {
        &self.keys
    }

    /// How many keys of the input, from its start, are done once the first `distinct`
    /// keys of [`keys`](Self::keys) are: up to the next distinct key's first
    /// occurrence (every key before it is one of those or a repeat of one).
    pub(super) fn done_through(&self, distinct: usize) -> usize {
        match &self.first {
            None => distinct.min(self.input),
            Some(first) => first.get(distinct).copied().unwrap_or(self.input),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_distinct_key_once_in_order_of_first_occurrence() {
        let input = ["c", "a", "c", "b", "a", "d", "c", "e"];
        let batch = Batch::new(&input).expect("valid");
        assert_eq!(batch.keys(), ["c", "a", "b", "d", "e"]);
        // Done through a distinct prefix: the input up to the next new key.
        assert_eq!(batch.done_through(0), 0);
        assert_eq!(batch.done_through(1), 1); // "c"; "a" is next, at 1
        assert_eq!(batch.done_through(2), 3); // "c", "a" (and the repeat at 2)
        assert_eq!(batch.done_through(3), 5); // up to "d" at 5
        assert_eq!(batch.done_through(4), 7); // up to "e" at 7
        assert_eq!(batch.done_through(5), input.len());
    }

    #[test]
    fn a_batch_without_repeats_is_the_input_itself() {
        let input = vec!["x".to_owned(), "y".to_owned(), "z".to_owned()];
        let batch = Batch::new(&input).expect("valid");
        assert!(matches!(batch.keys, Cow::Borrowed(_)));
        assert_eq!(batch.keys(), input.as_slice());
        assert_eq!(batch.done_through(2), 2);
        assert_eq!(batch.done_through(3), 3);
    }

    #[test]
    fn the_first_key_holding_nul_is_named_by_position() {
        let input = ["ok", "also ok", "bad\0key", "ok", "\0"];
        assert_eq!(Batch::new(&input).map(|_| ()), Err(NulAt(2)));
        // Other control characters and any Unicode are valid text.
        let fine = ["tab\there", "\u{1}", "ünïcödé ✓"];
        assert_eq!(Batch::new(&fine).expect("valid").keys(), fine);
    }

    #[test]
    fn an_empty_batch_is_empty() {
        let batch = Batch::<&str>::new(&[]).expect("valid");
        assert!(batch.keys().is_empty());
        assert_eq!(batch.done_through(0), 0);
    }
}
