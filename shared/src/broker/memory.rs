//! In-memory implementation of the queue port. Filled in by the broker work.
