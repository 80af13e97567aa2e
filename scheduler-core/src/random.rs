//! The runtime's randomness (fresh holders, jitter, backoff): the thread's own
//! generator, or on a thread that [`seed_thread`] seeded, a generator of that seed,
//! so that a simulation on one thread replays exactly.

use std::cell::RefCell;
use std::ops::RangeInclusive;

use rand::RngExt;
use rand::rngs::StdRng;

thread_local! {
    static SEEDED: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// From now on, randomness drawn on this thread comes from a generator seeded with
/// `seed` (`None`: the thread's own generator again). Tests and simulations only.
#[cfg(feature = "test-util")]
pub fn seed_thread(seed: Option<u64>) {
    use rand::SeedableRng;
    SEEDED.with(|s| *s.borrow_mut() = seed.map(StdRng::seed_from_u64));
}

/// A number within `range`.
pub(crate) fn range(range: RangeInclusive<u64>) -> u64 {
    SEEDED.with(|s| match s.borrow_mut().as_mut() {
        Some(rng) => rng.random_range(range),
        None => rand::random_range(range),
    })
}

/// Any 64-bit number.
pub(crate) fn bits() -> u64 {
    SEEDED.with(|s| match s.borrow_mut().as_mut() {
        Some(rng) => rng.random(),
        None => rand::random(),
    })
}
