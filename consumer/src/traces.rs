//! The consumer's spans of one attempt: `cronq.claim`, `cronq.execute` and `cronq.end`,
//! each a child of the publish span the message's `traceparent` names, so that the
//! producer's publish and every attempt of the occurrence are one trace.
//!
//! Owns: those spans, and the `traceparent` a handler gets ([`Step::for_handler`]).
//! Invariant: with traces off a [`Step`] is empty and costs a branch; a handler then still
//! gets the message's own `traceparent` when it is well formed (the trace passes through
//! a consumer that does not record), and never a malformed one.

use cronq_shared::ledger::ClaimOutcome;
use cronq_shared::message::Occurrence;
use cronq_shared::names::QueueName;
use cronq_shared::runlog::Outcome;
use cronq_shared::traces::{self, CLAIM, END, EXECUTE, attr};
use opentelemetry::KeyValue;
use opentelemetry::global::BoxedSpan;
use opentelemetry::trace::{Span, SpanKind, Status, Tracer};

use crate::outcome::Exit;

/// One span of an attempt, in flight; empty when traces are off. Dropped without its
/// ending call (the task was cancelled), it ends with no status.
pub(crate) struct Step(Option<BoxedSpan>);

impl Step {
    /// `cronq.claim`: this consumer claiming the attempt (kind consumer: the message's
    /// receipt).
    pub(crate) fn claim(occ: &Occurrence, queue: &QueueName, consumer: &str) -> Self {
        Self::start(CLAIM, SpanKind::Consumer, occ, queue, consumer)
    }

    /// `cronq.execute`: the handler running the attempt.
    pub(crate) fn execute(occ: &Occurrence, queue: &QueueName, consumer: &str) -> Self {
        Self::start(EXECUTE, SpanKind::Internal, occ, queue, consumer)
    }

    /// `cronq.end`: recording the attempt's end and sending what follows it.
    pub(crate) fn end(occ: &Occurrence, queue: &QueueName, consumer: &str) -> Self {
        Self::start(END, SpanKind::Internal, occ, queue, consumer)
    }

    fn start(
        name: &'static str,
        kind: SpanKind,
        occ: &Occurrence,
        queue: &QueueName,
        consumer: &str,
    ) -> Self {
        let Some(tracer) = traces::tracer() else {
            return Self(None);
        };
        let builder = tracer.span_builder(name).with_kind(kind).with_attributes([
            KeyValue::new(attr::JOB, occ.job.to_string()),
            KeyValue::new(attr::KEY, occ.key.to_string()),
            KeyValue::new(attr::ATTEMPT, i64::from(occ.attempt)),
            KeyValue::new(attr::QUEUE, queue.to_string()),
            KeyValue::new(attr::CONSUMER, consumer.to_owned()),
        ]);
        let parent = traces::parent(occ.traceparent.as_deref());
        Self(Some(tracer.build_with_context(builder, &parent)))
    }

    /// The occurrence as its handler gets it: its `traceparent` names this span when it
    /// records, else it is the message's own when well formed, else none.
    pub(crate) fn for_handler(&self, occ: &Occurrence) -> Occurrence {
        let mut occ = occ.clone();
        occ.traceparent = match &self.0 {
            Some(span) => traces::traceparent(span.span_context()),
            None => occ
                .traceparent
                .take()
                .filter(|text| traces::parse(text).is_some()),
        };
        occ
    }

    /// Ends a claim span with what the claim decided. When `occ` names no trace (its
    /// leader did not trace, or its `traceparent` is malformed), this span starts one: it
    /// becomes the parent of the attempt's other spans and of its retries.
    pub(crate) fn claimed(self, claimed: &ClaimOutcome, occ: &mut Occurrence) {
        let Some(mut span) = self.0 else { return };
        if occ.traceparent.as_deref().and_then(traces::parse).is_none() {
            occ.traceparent = traces::traceparent(span.span_context());
        }
        let decided = match claimed {
            ClaimOutcome::Claimed { .. } => "claimed",
            ClaimOutcome::Duplicate { .. } => "duplicate",
            ClaimOutcome::Busy { .. } => "busy",
            ClaimOutcome::Waiting { .. } => "waiting",
            ClaimOutcome::Superseded { .. } => "superseded",
        };
        span.set_attribute(KeyValue::new(attr::CLAIM, decided));
        span.end();
    }

    /// Ends an execute span: an error status when the handler failed, panicked or was
    /// stopped.
    pub(crate) fn executed(self, exit: &Exit) {
        let Some(mut span) = self.0 else { return };
        let error = match exit {
            Exit::Returned(Ok(())) => None,
            Exit::Returned(Err(error)) => Some(error.clone()),
            Exit::Panicked(message) => Some(format!("panicked: {message}")),
            Exit::Stopped(why, _) => Some(format!("stopped: {why:?}")),
        };
        span.set_status(error.map_or(Status::Ok, Status::error));
        span.end();
    }

    /// Ends an end span with the attempt's outcome.
    pub(crate) fn ended(self, outcome: Outcome) {
        let Some(mut span) = self.0 else { return };
        span.set_attribute(KeyValue::new(attr::OUTCOME, outcome.as_str()));
        if matches!(
            outcome,
            Outcome::Retrying | Outcome::Failed | Outcome::Interrupted | Outcome::Lost
        ) {
            span.set_status(Status::error(outcome.as_str()));
        }
        span.end();
    }
}
