-- The config file's loads, recorded by the standalone that runs the file
-- (cronq_shared::recorded): each row one record as JSON, the newest the highest `seq`,
-- with its digest and since beside it (so a record of megabytes is not read to compare);
-- the operations commands read the jobs of the newest instead of needing the config file.
CREATE TABLE config_loads (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    digest TEXT NOT NULL,
    since TEXT NOT NULL,
    record TEXT NOT NULL
);
