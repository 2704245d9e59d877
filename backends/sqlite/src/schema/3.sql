-- Runtime jobs (cronq_shared::jobs): every revision of every job, in the order written;
-- `spec` is the job's [[job]] table as TOML text, NULL for a delete; `at` in ms since the
-- epoch. `seq` only grows (AUTOINCREMENT), so its maximum is the store's version.
CREATE TABLE job_revisions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    revision INTEGER NOT NULL,
    spec TEXT,
    by_whom TEXT NOT NULL,
    at INTEGER NOT NULL,
    UNIQUE (job, revision)
);
