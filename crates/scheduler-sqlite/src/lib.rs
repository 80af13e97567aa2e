//! The SQLite store (under construction).
