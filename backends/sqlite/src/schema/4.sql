-- The outputs of attempts (cronq_shared::runlog::RunOutput as JSON), beside their runs and
-- under the same bounds (crate::runlog::trim); `at` in ms since the epoch. `id` only grows,
-- so the oldest are dropped first when there are more than the runs' cap.
CREATE TABLE outputs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    at INTEGER NOT NULL,
    output TEXT NOT NULL,
    UNIQUE (key, attempt)
);
