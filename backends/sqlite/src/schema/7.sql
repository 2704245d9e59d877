-- The config file's loads, recorded by the standalone that runs the file
-- (cronq_shared::recorded): each row one record as JSON, the newest the highest `seq`;
-- the operations commands read the jobs of the newest instead of needing the config file.
CREATE TABLE config_loads (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    record TEXT NOT NULL
);
