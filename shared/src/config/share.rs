//! Sharing what jobs have in common while loading a config: one [`Settings`] value per
//! distinct resolved settings, one command handler per distinct command.
//!
//! A million jobs written from a few templates resolve to a few distinct settings and
//! commands; each job then holds an `Arc` of the one copy instead of a copy of its own.
//! Invariant: sharing never changes a value: a job gets an `Arc` of a value equal to the
//! one it resolved, so a config loads to equal jobs with or without it.

use std::sync::Arc;

// Hashed once per job of a load: a fast hash (the values are the config file's own).
use foldhash::HashSet;

use super::{CommandHandler, Handler, Settings};

/// The distinct values seen so far in one load.
#[derive(Debug, Default)]
pub(super) struct Sharing {
    settings: HashSet<Arc<Settings>>,
    commands: HashSet<Arc<CommandHandler>>,
}

impl Sharing {
    /// `value`, shared with every earlier equal one.
    pub(super) fn settings(&mut self, value: Settings) -> Arc<Settings> {
        share(&mut self.settings, value)
    }

    /// `handler`, with a command shared with every earlier equal command. An `http`
    /// handler is kept as it is: its URL and headers are secrets, read per job.
    pub(super) fn handler(&mut self, handler: Handler) -> Handler {
        match handler {
            Handler::Command(command) => {
                let command = Arc::unwrap_or_clone(command);
                Handler::Command(share(&mut self.commands, command))
            }
            http @ Handler::Http(_) => http,
        }
    }
}

fn share<T: Eq + std::hash::Hash>(seen: &mut HashSet<Arc<T>>, value: T) -> Arc<T> {
    if let Some(shared) = seen.get(&value) {
        return shared.clone();
    }
    let shared = Arc::new(value);
    seen.insert(shared.clone());
    shared
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn settings(timeout: u64) -> Settings {
        Settings {
            timeout: Duration::from_secs(timeout),
            ..Settings::builtin()
        }
    }

    #[test]
    fn equal_values_share_one_copy() {
        let mut sharing = Sharing::default();
        let a = sharing.settings(settings(1));
        let b = sharing.settings(settings(1));
        let c = sharing.settings(settings(2));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(*c, settings(2));
        let command = || Handler::Command(Arc::new(CommandHandler::argv(vec!["true".into()])));
        let (Handler::Command(x), Handler::Command(y)) =
            (sharing.handler(command()), sharing.handler(command()))
        else {
            panic!("a command stays a command");
        };
        assert!(Arc::ptr_eq(&x, &y));
        assert_eq!(x.argv, ["true"]);
    }
}
