//! Tracing set-up: human or JSON lines on stderr, filtered by `RUST_LOG` (default below);
//! human lines are coloured only on a terminal, and never with `NO_COLOR` set.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// The filter when `RUST_LOG` is unset: lifecycle at info for the daemons; `standalone`,
/// a one-machine and demo tool, also shows each attempt and a command's output.
pub fn default_filter(standalone: bool) -> &'static str {
    if standalone {
        "info,lapin=warn,cronq_consumer::worker=debug,cronq_consumer::handler=debug"
    } else {
        // rustls-platform-verifier logs each refused certificate as an error of its own;
        // cronq returns it, with what to do, as the connection's error.
        "info,lapin=warn,rustls_platform_verifier=off"
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

/// Whether log lines are coloured: only on a terminal, and not when `NO_COLOR` is set to
/// anything but the empty string (no-color.org's rule).
fn colour(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::colour;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some("".into())));
        assert!(!colour(true, Some("1".into())));
        assert!(!colour(false, None));
    }
}
