//! The leader's publish spans: one `cronq.publish` span per occurrence, the root of its
//! trace, whose `traceparent` goes into the message before its body is built.
//!
//! Owns: starting those spans and ending them on the batch's fate. Invariant: with traces
//! off ([`cronq_shared::traces::tracer`] is `None`), nothing is started, copied or written:
//! the messages go out without a `traceparent`.

use std::time::SystemTime;

use chrono::{DateTime, Utc};
use cronq_shared::broker::Outgoing;
use cronq_shared::traces::{self, PUBLISH, attr};
use opentelemetry::global::BoxedSpan;
use opentelemetry::trace::{Span, SpanKind, Status, Tracer};
use opentelemetry::{Context, KeyValue};

use crate::publisher::Abandoned;

/// The publish spans of one batch, in flight until the broker confirms it or it is given
/// up. Dropped without [`Publishing::end`] (a sibling batch failed first), they end unset.
pub struct Publishing {
    spans: Vec<BoxedSpan>,
}

impl Publishing {
    /// Starts a publish span for each message of `batch` and writes its `traceparent` into
    /// the message; `None` (and `batch` untouched) when traces are off. `at`, when given, is
    /// the instant the publishing is planned to start (a batch built ahead of its fire).
    pub fn start(batch: &mut [Outgoing], at: Option<DateTime<Utc>>) -> Option<Self> {
        let tracer = traces::tracer()?;
        let root = Context::new();
        let spans = batch
            .iter_mut()
            .map(|out| {
                let occ = &out.occurrence;
                let mut builder = tracer
                    .span_builder(PUBLISH)
                    .with_kind(SpanKind::Producer)
                    .with_attributes([
                        KeyValue::new(attr::JOB, occ.job.to_string()),
                        KeyValue::new(attr::KEY, occ.key.to_string()),
                        KeyValue::new(attr::ATTEMPT, i64::from(occ.attempt)),
                        KeyValue::new(attr::QUEUE, out.queue.to_string()),
                        KeyValue::new(attr::TRIGGER, occ.trigger.as_str()),
                        KeyValue::new(attr::EPOCH, i64::try_from(occ.epoch).unwrap_or(i64::MAX)),
                    ]);
                if let Some(at) = at {
                    builder = builder.with_start_time(SystemTime::from(at));
                }
                let span = tracer.build_with_context(builder, &root);
                out.occurrence.traceparent = traces::traceparent(span.span_context());
                span
            })
            .collect();
        Some(Self { spans })
    }

    /// Ends every span: ok once confirmed, an error naming why the batch was given up.
    pub fn end(self, published: &Result<(), Abandoned>) {
        for mut span in self.spans {
            match published {
                Ok(()) => span.set_status(Status::Ok),
                Err(why) => span.set_status(Status::error(match why {
                    Abandoned::LostLeadership => "given up unconfirmed: leadership lost",
                    Abandoned::Cancelled => "given up unconfirmed: shutdown",
                })),
            }
            span.end();
        }
    }
}
