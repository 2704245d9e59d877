-- The leadership terms (cronq_shared::lease::TermRecord): one row per term that took over,
-- its start and last-known-alive time in milliseconds since the epoch; a renewal moves
-- `alive` in the lease's own transaction. Rows last alive longer than the retention ago
-- are deleted when a new term begins.
CREATE TABLE leader_terms (
    epoch INTEGER PRIMARY KEY,
    instance TEXT NOT NULL,
    start INTEGER NOT NULL,
    alive INTEGER NOT NULL
);
