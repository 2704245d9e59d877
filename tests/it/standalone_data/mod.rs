//! `cronq standalone` on a SQLite data file (`--data`): what the file keeps across a
//! restart and a `kill -9`, an attempt's lease while another process holds the file's
//! lock, the operations commands on the file of a running standalone, two standalones on
//! one file, and the start errors that name the file. Real processes,
//! real `command` handlers, real files; every check reads the run history in the file and
//! asserts that each expected occurrence succeeded once and none twice, and every crash
//! test ends with `PRAGMA integrity_check` = `ok`.

mod catch_up;
mod crash;
mod disk_full;
mod locked;
mod operations;
mod reload;
mod restart;
mod standby;
mod start_errors;
