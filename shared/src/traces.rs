//! Traces: what the producer and the consumer agree on to put one occurrence in one
//! OpenTelemetry trace (`docs/observability.md`, "Traces").
//!
//! Owns: the process's tracer ([`install`], [`tracer`]), the span names and attribute keys,
//! and the W3C `traceparent` text the message carries ([`traceparent`], [`parse`]).
//! Leaves to others: the exporter and its settings (the binary, `src/telemetry.rs`, from
//! the `OTEL_*` variables), and where each span starts and ends (the producer's publisher,
//! the consumer's worker).
//!
//! Invariants: with no tracer installed, traces cost one branch ([`tracer`] is `None`) and
//! no `traceparent` is written into a message; a `traceparent` is only ever taken from a
//! message after [`parse`] found it well formed, so a malformed one never reaches a
//! handler's environment or headers (it starts no trace, and the occurrence runs as usual).
//!
//! The tracer is process-wide, as OpenTelemetry's own provider is: installed once by the
//! binary (or an embedding program) before the producer or the consumer starts.

use std::sync::OnceLock;

use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags, TraceState};
use opentelemetry::{Context, SpanId, TraceId};

/// The leader's publish of one occurrence, from its send to the broker's confirm (kind
/// producer); the root of the occurrence's trace.
pub const PUBLISH: &str = "cronq.publish";
/// A consumer claiming one attempt in the ledger (kind consumer).
pub const CLAIM: &str = "cronq.claim";
/// The handler running one attempt; a handler's own spans are its children.
pub const EXECUTE: &str = "cronq.execute";
/// Recording an attempt's end (and sending what follows it: a retry, a dead letter).
pub const END: &str = "cronq.end";

/// The attribute keys of cronq's spans.
pub mod attr {
    /// The job's name.
    pub const JOB: &str = "cronq.job";
    /// The occurrence key `JOB@SCHEDULED_UTC`.
    pub const KEY: &str = "cronq.key";
    /// The attempt number, 1 for the first.
    pub const ATTEMPT: &str = "cronq.attempt";
    /// The logical queue.
    pub const QUEUE: &str = "cronq.queue";
    /// Why it was published (`schedule`, `catchup`, `manual`, `backfill`, `replay`).
    pub const TRIGGER: &str = "cronq.trigger";
    /// The publishing leader's epoch.
    pub const EPOCH: &str = "cronq.epoch";
    /// The consumer instance (its name in the run history).
    pub const CONSUMER: &str = "cronq.consumer";
    /// What the claim decided (`claimed`, `duplicate`, `busy`, `waiting`, `superseded`).
    pub const CLAIM: &str = "cronq.claim";
    /// The attempt's outcome, as in `cronq_attempts_total{outcome}`.
    pub const OUTCOME: &str = "cronq.outcome";
}

static TRACER: OnceLock<BoxedTracer> = OnceLock::new();

/// Turns traces on for this process with `tracer`. Returns `false` when a tracer was
/// installed already (the first one stays).
pub fn install(tracer: BoxedTracer) -> bool {
    TRACER.set(tracer).is_ok()
}

/// The process's tracer; `None` when traces are off, the one branch they cost then.
#[inline]
pub fn tracer() -> Option<&'static BoxedTracer> {
    TRACER.get()
}

/// The `traceparent` (W3C Trace Context, version 00) naming `span` as the parent; `None`
/// for an invalid context (a tracer that records nothing).
pub fn traceparent(span: &SpanContext) -> Option<String> {
    span.is_valid().then(|| {
        format!(
            "00-{:032x}-{:016x}-{:02x}",
            span.trace_id(),
            span.span_id(),
            span.trace_flags().to_u8()
        )
    })
}

/// The remote span context a `traceparent` names; `None` unless it is well formed:
/// version 00 exactly `00-TRACE-SPAN-FLAGS`, a later version at least that (fields it adds
/// are ignored), lowercase hex, neither id all zeros, version `ff` refused.
pub fn parse(text: &str) -> Option<SpanContext> {
    let mut fields = text.split('-');
    let version = fields.next()?;
    let (trace, span, flags) = (fields.next()?, fields.next()?, fields.next()?);
    let more = fields.next().is_some();
    let hex = |s: &str, len: usize| {
        s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    if !hex(version, 2) || version == "ff" || (version == "00" && more) {
        return None;
    }
    if !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let cx = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    );
    cx.is_valid().then_some(cx)
}

/// The parent context of a span continuing the trace `traceparent` names; a root context
/// (a new trace) when there is none or it is malformed.
pub fn parent(traceparent: Option<&str>) -> Context {
    match traceparent.and_then(parse) {
        Some(remote) => Context::new().with_remote_span_context(remote),
        None => Context::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W3C_EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_round_trips() {
        let cx = parse(W3C_EXAMPLE).unwrap();
        assert_eq!(
            cx.trace_id(),
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
        );
        assert!(cx.is_remote() && cx.is_sampled());
        assert_eq!(traceparent(&cx).as_deref(), Some(W3C_EXAMPLE));
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert_eq!(
            traceparent(&parse(unsampled).unwrap()).as_deref(),
            Some(unsampled)
        );
        assert_eq!(traceparent(&SpanContext::empty_context()), None);
        // A later version may add fields.
        assert!(parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra").is_some());
    }

    #[test]
    fn a_malformed_traceparent_is_no_parent() {
        for bad in [
            "",
            "garbage",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\nX-Injected: 1",
        ] {
            assert!(parse(bad).is_none(), "{bad:?}");
            assert!(!parent(Some(bad)).has_active_span(), "{bad:?}");
        }
        assert!(parent(Some(W3C_EXAMPLE)).has_active_span());
        assert!(!parent(None).has_active_span());
    }
}
