//! Preview: the next ticks of a job, in UTC and in its zone.
