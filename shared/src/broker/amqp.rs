//! RabbitMQ implementation of the queue port (lapin). Filled in by the broker work.
