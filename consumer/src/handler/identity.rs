//! Who a `command` runs as: a job's `user` and `group`, looked up on the machine that runs
//! it (names or numeric ids), checked once when the consumer starts
//! ([`check_commands`]) and again for each attempt (the user database may change).
//!
//! Invariant: a process that is not root never asks for ids other than its own (the
//! kernel would refuse; the consumer refuses to start instead, naming the job).

use std::path::PathBuf;

use cronq_shared::config::{CommandHandler, Config, Handler};
use nix::unistd::{Gid, Group, Uid, User};

/// The ids and home of `user`/`group`, when either is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) uid: Option<Uid>,
    pub(crate) gid: Option<Gid>,
    /// The user's name and home directory, for `USER`, `LOGNAME` and `HOME`.
    pub(crate) account: Option<(String, PathBuf)>,
}

/// What is wrong with one field of a job's command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandProblem {
    /// The job.
    pub job: String,
    /// The field (`user`, `group`, `cwd`).
    pub field: &'static str,
    /// What is wrong and what to do.
    pub problem: String,
}

impl std::fmt::Display for CommandProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "job {:?}: {}: {}", self.job, self.field, self.problem)
    }
}

fn numeric(text: &str) -> Option<u32> {
    text.parse().ok()
}

/// The ids `handler` runs with.
///
/// # Errors
/// `(field, problem)` when a name is unknown here, or this process is not root and would
/// need other ids than its own.
pub(crate) fn resolve(handler: &CommandHandler) -> Result<Identity, (&'static str, String)> {
    let user = match handler.user.as_deref() {
        None => None,
        Some(name) => {
            let found = match numeric(name) {
                Some(id) => User::from_uid(Uid::from_raw(id)),
                None => User::from_name(name),
            }
            .map_err(|e| ("user", format!("cannot look {name:?} up: {e}")))?;
            match (found, numeric(name)) {
                (Some(user), _) => Some((user.uid, Some(user.gid), Some((user.name, user.dir)))),
                // A uid with no entry (common in containers): its group must be given.
                (None, Some(id)) => Some((Uid::from_raw(id), None, None)),
                (None, None) => {
                    return Err((
                        "user",
                        format!(
                            "no user {name:?} on this machine: create it, give a numeric uid, or change the job's user"
                        ),
                    ));
                }
            }
        }
    };
    let gid = match handler.group.as_deref() {
        Some(name) => Some(match numeric(name) {
            Some(id) => Gid::from_raw(id),
            None => {
                Group::from_name(name)
                    .map_err(|e| ("group", format!("cannot look {name:?} up: {e}")))?
                    .ok_or_else(|| {
                        (
                            "group",
                            format!(
                                "no group {name:?} on this machine: create it, give a numeric gid, or change the job's group"
                            ),
                        )
                    })?
                    .gid
            }
        }),
        None => match &user {
            Some((_, Some(gid), _)) => Some(*gid),
            Some((uid, None, _)) => {
                return Err((
                    "group",
                    format!(
                        "uid {uid} has no entry in this machine's user database, so it has no group of its own: give the job a group"
                    ),
                ));
            }
            None => None,
        },
    };
    let identity = Identity {
        uid: user.as_ref().map(|(uid, _, _)| *uid),
        gid,
        account: user.and_then(|(_, _, account)| account),
    };
    if !Uid::effective().is_root() {
        let me = (Uid::effective(), Gid::effective());
        if identity.uid.is_some_and(|uid| uid != me.0) {
            return Err((
                "user",
                format!(
                    "cronq runs as uid {}, not as root, so it cannot start a command as another user: run cronq as root, or remove the job's user",
                    me.0
                ),
            ));
        }
        if identity.gid.is_some_and(|gid| gid != me.1) {
            return Err((
                "group",
                format!(
                    "cronq runs with gid {}, not as root, so it cannot start a command in another group: run cronq as root, or remove the job's group",
                    me.1
                ),
            ));
        }
    }
    Ok(identity)
}

/// Checks every job with a `command` of `config`: its `user` and `group` exist here and
/// this process may take them, and its `cwd` is a directory. The consumer (and the
/// standalone) call it before they start, so a mistake stops them with the job and the
/// field named instead of failing every attempt.
///
/// # Errors
/// Every problem found.
pub fn check_commands(config: &Config) -> Result<(), Vec<CommandProblem>> {
    let mut problems = Vec::new();
    for job in &config.jobs {
        let Some(Handler::Command(handler)) = &job.handler else {
            continue;
        };
        if let Err((field, problem)) = resolve(handler) {
            problems.push(CommandProblem {
                job: job.name.to_string(),
                field,
                problem,
            });
        }
        if let Some(cwd) = &handler.cwd
            && !cwd.is_dir()
        {
            problems.push(CommandProblem {
                job: job.name.to_string(),
                field: "cwd",
                problem: format!(
                    "{} is not a directory on this machine: create it, or change the job's cwd",
                    cwd.display()
                ),
            });
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::{CommandHandler, resolve};
    use nix::unistd::{Gid, Uid};

    fn with(user: Option<&str>, group: Option<&str>) -> CommandHandler {
        CommandHandler {
            user: user.map(str::to_owned),
            group: group.map(str::to_owned),
            ..CommandHandler::argv(vec!["true".into()])
        }
    }

    #[test]
    fn nothing_set_is_the_consumer_itself() {
        let id = resolve(&with(None, None)).unwrap();
        assert_eq!((id.uid, id.gid, id.account), (None, None, None));
    }

    #[test]
    fn the_consumer_own_user_by_uid_is_allowed_and_takes_its_group() {
        let me = Uid::effective();
        let id = resolve(&with(Some(&me.to_string()), None)).unwrap();
        assert_eq!(id.uid, Some(me));
        assert!(id.gid.is_some());
    }

    #[test]
    fn unknown_names_say_what_to_do() {
        let (field, problem) = resolve(&with(Some("no-such-user-cronq"), None)).unwrap_err();
        assert_eq!(field, "user");
        assert!(
            problem.contains("no user \"no-such-user-cronq\""),
            "{problem}"
        );
        let (field, problem) = resolve(&with(None, Some("no-such-group-cronq"))).unwrap_err();
        assert_eq!(field, "group");
        assert!(problem.contains("no group"), "{problem}");
    }

    #[test]
    fn a_uid_without_an_entry_needs_a_group() {
        let (field, problem) = resolve(&with(Some("4000123"), None)).unwrap_err();
        assert_eq!(field, "group", "{problem}");
        if Uid::effective().is_root() {
            let id = resolve(&with(Some("4000123"), Some("4000123"))).unwrap();
            assert_eq!(id.gid, Some(Gid::from_raw(4_000_123)));
        }
    }
}
