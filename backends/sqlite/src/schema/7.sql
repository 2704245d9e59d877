-- Concurrency limits of the ledger (cronq_shared::ledger::rules): a gate (an exclusive
-- job's, named after it, or a pool's, `pool:NAME`) has slots, one row per holder; it
-- replaces the one-row-per-job `job_locks`. A record keeps how many slots its job's gate
-- and its pool's have, its pool, and the gate whose wait list it is on while waiting.
DROP TABLE job_locks;
CREATE TABLE slots (
    gate TEXT NOT NULL,
    holder TEXT NOT NULL,
    token TEXT NOT NULL,
    until INTEGER NOT NULL,
    PRIMARY KEY (gate, holder)
) WITHOUT ROWID;
ALTER TABLE records ADD COLUMN cap INTEGER NOT NULL DEFAULT 1;
ALTER TABLE records ADD COLUMN pool TEXT;
ALTER TABLE records ADD COLUMN pool_cap INTEGER NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN gate TEXT NOT NULL DEFAULT '';
UPDATE records SET gate = job;
DROP INDEX records_waiting;
CREATE INDEX records_waiting ON records (gate, sched, key) WHERE state = 'waiting';
