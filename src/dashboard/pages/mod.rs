//! The HTML pages: Fleet, Jobs, a Job, Runs, Dead letters, Audit, and the login form, one
//! file each, rendered on the server with maud (which escapes every value it inserts),
//! refreshed in place by `assets/app.js` (it asks for the page's `<main>` alone with
//! `X-Cronq-Fragment: 1`). What they share, the frame and the small fragments, is in
//! `layout`; a posted form's fields and checks in `form`. The forms post to `/ui/...`,
//! which checks the session and its CSRF token (`super::auth`) and then calls
//! `super::actions`, like the API.
//!
//! Invariant: a page renders typed values (the snapshot, the views of `super::fleet` and
//! `super::actions`), never keys looked up in JSON, so a misnamed field fails to compile.

mod audit;
mod dead_letters;
mod fleet;
mod form;
mod job;
mod jobs;
mod layout;
mod login;
mod runs;

pub(super) use self::audit::audit;
pub(super) use self::dead_letters::{dead_letters, replay};
pub(super) use self::fleet::fleet;
pub(super) use self::form::{authorize, authorize_act, field, form};
pub(super) use self::job::{job, job_action, next_table};
pub(super) use self::jobs::jobs;
pub(super) use self::layout::{
    Flash, Viewer, encode, encode_path, error_page, not_found, render, script, style,
};
pub(super) use self::login::{login, login_form, logout};
pub(super) use self::runs::runs;
