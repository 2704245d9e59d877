//! An OTLP/HTTP trace receiver inside the test: `POST /v1/traces` with a protobuf
//! `ExportTraceServiceRequest` (the official definitions of `opentelemetry-proto`), served
//! by axum on a loopback port; it keeps every span it is sent, with its service name, for
//! the test to read. It runs on a thread and a runtime of its own, so that a test blocking
//! its own runtime (waiting for a process to exit) never holds up an export, and it stops
//! when dropped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;

/// One span as received, its ids in lowercase hex as a `traceparent` writes them.
#[derive(Debug, Clone)]
pub struct Span {
    /// `service.name` of the resource that sent it.
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// OTLP's `SpanKind` number (2 server, 3 client, 4 producer, 5 consumer, 1 internal).
    pub kind: i32,
    /// Every attribute as text.
    pub attributes: BTreeMap<String, String>,
    /// OTLP's status code (0 unset, 1 ok, 2 error).
    pub status: i32,
}

impl Span {
    /// The attribute `key` as text, empty when absent.
    pub fn attr(&self, key: &str) -> &str {
        self.attributes.get(key).map_or("", String::as_str)
    }
}

#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    requests: usize,
}

/// The receiver; its endpoint goes into `OTEL_EXPORTER_OTLP_ENDPOINT`.
pub struct Receiver {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    received: Arc<Mutex<Received>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Receiver {
    /// Listens on a free loopback port.
    pub fn start() -> Self {
        let received = Arc::new(Mutex::new(Received::default()));
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(export))
            .with_state(Arc::clone(&received));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the OTLP receiver");
        listener.set_nonblocking(true).unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the OTLP receiver's runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await
                    .expect("the OTLP receiver");
            });
        });
        Self {
            endpoint,
            received,
            stop: Some(stop),
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.received.lock().unwrap().spans.clone()
    }

    /// How many export requests arrived.
    pub fn requests(&self) -> usize {
        self.received.lock().unwrap().requests
    }
}

async fn export(State(received): State<Arc<Mutex<Received>>>, body: Bytes) -> impl IntoResponse {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new()).into_response();
    };
    let mut received = received.lock().unwrap();
    received.requests += 1;
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .map(|r| attributes(&r.attributes))
            .and_then(|a| a.get("service.name").cloned())
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                received.spans.push(Span {
                    service: service.clone(),
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    kind: span.kind,
                    attributes: attributes(&span.attributes),
                    status: span.status.map_or(0, |s| s.code),
                });
            }
        }
    }
    let response = ExportTraceServiceResponse::default().encode_to_vec();
    ([(header::CONTENT_TYPE, "application/x-protobuf")], response).into_response()
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(text).unwrap_or_default(),
            )
        })
        .collect()
}

fn text(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
