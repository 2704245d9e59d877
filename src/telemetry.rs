//! Tracing set-up: human or JSON lines on stderr, filtered by `RUST_LOG` (default below);
//! human lines are coloured only on a terminal, and never with `NO_COLOR` set. And the
//! daemons' OpenTelemetry traces ([`traces`]): off unless the standard `OTEL_*` variables
//! ask, exported over OTLP/HTTP (protobuf) by the SDK's own batch thread, and flushed when
//! the process ends (`docs/observability.md`, "Traces").

use std::io::IsTerminal;
use std::time::Duration;

use cronq_shared::redacted::Redacted;
use opentelemetry::global;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// How long the process waits at its end for the last spans to be sent: a collector that
/// does not answer must not hold up a shutdown.
const TRACES_FLUSH: Duration = Duration::from_secs(5);

/// The filter when `RUST_LOG` is unset: lifecycle at info for the daemons; `standalone`,
/// a one-machine and demo tool, also shows each attempt and a command's output.
pub fn default_filter(standalone: bool) -> &'static str {
    if standalone {
        "info,lapin=warn,opentelemetry=warn,opentelemetry_sdk=warn,opentelemetry_otlp=warn,cronq_consumer::worker=debug,cronq_consumer::handler=debug"
    } else {
        // rustls-platform-verifier logs each refused certificate as an error of its own;
        // cronq returns it, with what to do, as the connection's error. OpenTelemetry's
        // own lines only when an export fails.
        "info,lapin=warn,rustls_platform_verifier=off,opentelemetry=warn,opentelemetry_sdk=warn,opentelemetry_otlp=warn"
    }
}

/// Installs the global subscriber once.
pub fn init(format: LogFormat, default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// The trace exporter of a daemon; [`Traces::shutdown`] sends its last spans.
pub struct Traces(Option<SdkTracerProvider>);

impl Traces {
    /// Traces off: nothing to shut down.
    pub fn off() -> Self {
        Self(None)
    }

    /// Sends the spans still buffered (waiting up to [`TRACES_FLUSH`]) and stops the
    /// exporter. Called once the runtime has returned, on every exit path but a second
    /// signal's.
    pub fn shutdown(self) {
        let Some(provider) = self.0 else { return };
        if let Err(err) = provider.shutdown_with_timeout(TRACES_FLUSH) {
            tracing::warn!(error = %err, "cannot send the last spans");
        }
    }
}

/// Turns traces on when the `OTEL_*` variables ask ([`wanted`]): builds the OTLP/HTTP
/// exporter (which reads its endpoint, headers, timeout and compression from them), the
/// provider (batching and sampling from `OTEL_BSP_*` and `OTEL_TRACES_SAMPLER*`), and
/// installs its tracer for the producer and the consumer (`cronq_shared::traces`). A
/// variable cronq cannot follow is a warning, and traces stay off.
pub fn traces() -> Traces {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    match wanted(env) {
        Ok(false) => Traces::off(),
        Ok(true) => match start(env) {
            Ok(provider) => Traces(Some(provider)),
            Err(err) => {
                tracing::warn!(error = %err, "cannot start the trace exporter: traces off");
                Traces::off()
            }
        },
        Err(why) => {
            tracing::warn!(problem = %why, "traces off");
            Traces::off()
        }
    }
}

/// Whether the variables ask for traces: `OTEL_TRACES_EXPORTER=otlp`, or, with it unset,
/// an OTLP endpoint (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`);
/// never with `OTEL_TRACES_EXPORTER=none` or `OTEL_SDK_DISABLED=true`.
///
/// # Errors
/// What cronq cannot do that they ask for: another exporter, another OTLP protocol than
/// `http/protobuf`.
fn wanted(env: impl Fn(&str) -> Option<String>) -> Result<bool, String> {
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(false);
    }
    let exporters = env("OTEL_TRACES_EXPORTER");
    let on = match exporters.as_deref() {
        None => {
            env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
                || env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
        }
        Some(list) => {
            let names: Vec<&str> = list.split(',').map(str::trim).collect();
            if names.contains(&"none") {
                return Ok(false);
            }
            if let Some(other) = names.iter().find(|n| **n != "otlp") {
                return Err(format!(
                    "OTEL_TRACES_EXPORTER: cronq exports traces with \"otlp\" only, got {other:?}; set it to \"otlp\" or \"none\""
                ));
            }
            true
        }
    };
    if on {
        for var in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(protocol) = env(var) {
                if protocol.trim() != "http/protobuf" {
                    return Err(format!(
                        "{var}: cronq speaks OTLP over HTTP with protobuf only (\"http/protobuf\", port 4318), got {protocol:?}"
                    ));
                }
                // The traces' own variable wins over the general one.
                break;
            }
        }
    }
    Ok(on)
}

/// Builds and installs the exporter and the provider.
fn start(
    env: impl Fn(&str) -> Option<String>,
) -> Result<SdkTracerProvider, opentelemetry_otlp::ExporterBuildError> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()?;
    let named = env("OTEL_SERVICE_NAME").is_some()
        || env("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| a.contains("service.name="));
    let resource = if named {
        Resource::builder().build()
    } else {
        Resource::builder().with_service_name("cronq").build()
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    global::set_tracer_provider(provider.clone());
    cronq_shared::traces::install(global::tracer("cronq"));
    let endpoint = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))
        .unwrap_or_else(|| "http://localhost:4318".to_owned());
    tracing::info!(endpoint = %Redacted(&endpoint), "exporting traces over OTLP/HTTP");
    Ok(provider)
}

/// Whether log lines are coloured: only on a terminal, and not when `NO_COLOR` is set to
/// anything but the empty string (no-color.org's rule).
fn colour(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::{colour, wanted};

    fn with(vars: &[(&str, &str)]) -> Result<bool, String> {
        wanted(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn traces_only_when_the_otel_variables_ask() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        assert_eq!(with(&[]), Ok(false));
        assert_eq!(with(&[("OTEL_SERVICE_NAME", "cronq-a")]), Ok(false));
        assert_eq!(with(&[endpoint]), Ok(true));
        assert_eq!(
            with(&[(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://c:4318/v1/traces"
            )]),
            Ok(true)
        );
        assert_eq!(with(&[("OTEL_TRACES_EXPORTER", "otlp")]), Ok(true));
        assert_eq!(
            with(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]),
            Ok(false)
        );
        assert_eq!(with(&[endpoint, ("OTEL_SDK_DISABLED", "true")]), Ok(false));
        assert_eq!(
            with(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]),
            Ok(true)
        );
        // The traces' own protocol wins over the general one.
        assert_eq!(
            with(&[
                endpoint,
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ]),
            Ok(true)
        );
        assert_eq!(
            with(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]),
            Err("OTEL_EXPORTER_OTLP_PROTOCOL: cronq speaks OTLP over HTTP with protobuf only (\"http/protobuf\", port 4318), got \"grpc\"".to_owned())
        );
        assert_eq!(
            with(&[("OTEL_TRACES_EXPORTER", "zipkin")]),
            Err("OTEL_TRACES_EXPORTER: cronq exports traces with \"otlp\" only, got \"zipkin\"; set it to \"otlp\" or \"none\"".to_owned())
        );
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some("".into())));
        assert!(!colour(true, Some("1".into())));
        assert!(!colour(false, None));
    }
}
