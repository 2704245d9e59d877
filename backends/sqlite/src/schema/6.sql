-- Fencing tokens and cancel requests of the ledger (cronq_shared::ledger): each record
-- keeps the fence of the claim that runs or ran it; `fences` holds the last fence issued
-- per job and is never trimmed (a fence must outgrow every earlier one of its job, whatever
-- expired since); `cancel_count` counts operators' cancels, which consumers poll to renew
-- their claims at once.
ALTER TABLE records ADD COLUMN fence INTEGER NOT NULL DEFAULT 0;
CREATE TABLE fences (
    job TEXT PRIMARY KEY,
    fence INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE cancel_count (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    n INTEGER NOT NULL
);
