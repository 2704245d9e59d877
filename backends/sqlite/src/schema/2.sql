-- The fleet registry (cronq_shared::registry): each instance's last beat (JSON) and when
-- it lapses (ms since the epoch); the per-job digests of each config the instances run,
-- kept until `until`; per-minute counters of published and executed occurrences.
CREATE TABLE instances (
    instance TEXT PRIMARY KEY,
    beat TEXT NOT NULL,
    until INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE digest_sets (
    digest TEXT PRIMARY KEY,
    until INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE job_digests (
    digest TEXT NOT NULL,
    job TEXT NOT NULL,
    job_digest TEXT NOT NULL,
    PRIMARY KEY (digest, job)
) WITHOUT ROWID;
CREATE TABLE counts (
    counter TEXT NOT NULL,
    minute INTEGER NOT NULL,
    n INTEGER NOT NULL,
    until INTEGER NOT NULL,
    PRIMARY KEY (counter, minute)
) WITHOUT ROWID;
