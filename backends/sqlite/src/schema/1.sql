-- Schema version 1 of a cronq data file (backends/sqlite/src/schema.rs applies it).
-- Times are milliseconds since the Unix epoch (wall clock, shared by every process).

-- The queue: one row per message, ready (owner NULL) or delivered to a subscriber.
CREATE TABLE queues (
    name TEXT PRIMARY KEY
) WITHOUT ROWID;

CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused: with `delivery` it fences acks
    queue TEXT NOT NULL,
    body BLOB NOT NULL,
    ready_at INTEGER NOT NULL,            -- not deliverable before (retry delays, jitter)
    redelivered INTEGER NOT NULL DEFAULT 0,
    owner TEXT,                           -- the subscriber it is delivered to
    delivery INTEGER                      -- random per delivery
);
CREATE INDEX messages_ready ON messages (queue, id) WHERE owner IS NULL;
CREATE INDEX messages_due ON messages (ready_at) WHERE owner IS NULL;
CREATE INDEX messages_owner ON messages (owner) WHERE owner IS NOT NULL;

-- Processes consuming from the file; a message delivered to one that stopped renewing is
-- given back to its queue.
CREATE TABLE subscribers (
    instance TEXT PRIMARY KEY,
    alive_until INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE dead_letters (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT,
    job TEXT,
    queue TEXT,
    attempts INTEGER NOT NULL,
    reason TEXT NOT NULL,
    last_error TEXT,
    dead_lettered_at TEXT NOT NULL,       -- RFC 3339
    body BLOB NOT NULL
);

-- The ledger: one record per occurrence key (cronq_shared::ledger).
CREATE TABLE records (
    key TEXT PRIMARY KEY,
    job TEXT NOT NULL,
    state TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    next INTEGER NOT NULL,                -- the lowest attempt that may claim it
    token TEXT NOT NULL,                  -- the live claim's, or ''
    queue TEXT NOT NULL,
    body BLOB,                            -- the message a reaper republishes
    lease_until INTEGER NOT NULL,
    cancel TEXT,                          -- the key of the occurrence replacing it
    exclusive INTEGER NOT NULL,
    sched INTEGER NOT NULL,               -- scheduled instant
    error TEXT,
    expires INTEGER NOT NULL,             -- end of retention
    due INTEGER                           -- when the reaper looks at it
) WITHOUT ROWID;
CREATE INDEX records_due ON records (due) WHERE due IS NOT NULL;
CREATE INDEX records_waiting ON records (job, sched, key) WHERE state = 'waiting';
CREATE INDEX records_expires ON records (expires);

-- One lock per exclusive job (overlap skip, queue, replace).
CREATE TABLE job_locks (
    job TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    token TEXT NOT NULL,
    until INTEGER NOT NULL
) WITHOUT ROWID;

-- The run history, newest last.
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    at INTEGER NOT NULL,                  -- when it was appended
    run TEXT NOT NULL                     -- JSON (cronq_shared::runlog::Run)
);
CREATE INDEX runs_job ON runs (job, id);
CREATE INDEX runs_at ON runs (at);

-- The producers' leader lease; `epoch` only grows.
CREATE TABLE leader (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    epoch INTEGER NOT NULL,
    token TEXT,
    instance TEXT,
    until INTEGER
);
INSERT INTO leader (id, epoch) VALUES (1, 0);

-- The control store (cronq_shared::control): cursors as microseconds since the epoch (so
-- that "never backwards" is one max()), pauses and requests as JSON.
CREATE TABLE cursors (
    job TEXT PRIMARY KEY,
    at_us INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE pauses (
    job TEXT PRIMARY KEY,
    pause TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE requests (
    id TEXT PRIMARY KEY,
    request TEXT NOT NULL
) WITHOUT ROWID;
