//! G3, crash safety: a killed or stopped process, a dropped connection, a broker restart
//! or a store outage loses no occurrence and creates no second success.

mod broker_restart;
mod consumer_killed;
mod dropped_connections;
mod leader_failover;
mod partitions;
mod store_outage;
