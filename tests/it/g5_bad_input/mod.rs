//! G5, bad input never crashes or silently drops: a bad config is rejected with the file,
//! job and field; a bad message is dead-lettered with its reason; bad connection settings
//! are usage errors that name the variable; a Redis Cluster is refused at start.

mod config;
mod messages;
mod record_type;
mod redis_cluster;
mod settings;
mod volume;
