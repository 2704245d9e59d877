//! A form posted to `/ui/...`: its fields, and the check of its session, CSRF token and
//! role (`crate::dashboard::auth`) before anything is done.
//!
//! Invariant: no form changes anything before [`authorize`] accepted it; a refused form
//! that acts is noted in the audit log ([`authorize_act`]).

use std::net::SocketAddr;

use axum::http::HeaderMap;
use axum::response::Response;

use super::layout::{Viewer, error_page};
use crate::dashboard::App;
use crate::dashboard::actions::ApiError;
use crate::dashboard::audit::{self, Act};
use crate::dashboard::auth::{Caller, Refusal, Role};

/// The fields of a posted form (a key may repeat).
pub(in crate::dashboard) fn form(body: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(body).into_owned().collect()
}

pub(in crate::dashboard) fn field<'f>(form: &'f [(String, String)], name: &str) -> Option<&'f str> {
    form.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Refuses a posted form without a valid session and CSRF token, or whose session's role
/// is weaker than `need`.
pub(in crate::dashboard) fn authorize(
    app: &App,
    headers: &HeaderMap,
    form: &[(String, String)],
    need: Role,
) -> Result<Caller, Refusal> {
    app.access.authorize(headers, field(form, "csrf"), need)
}

/// [`authorize`] for a form that acts: when refused, `act` is noted refused in the audit log
/// and the answer is the error page.
pub(in crate::dashboard) async fn authorize_act(
    app: &App,
    peer: SocketAddr,
    headers: &HeaderMap,
    viewer: &Viewer,
    form: &[(String, String)],
    need: Role,
    act: &Act,
) -> Result<Caller, Response> {
    match authorize(app, headers, form, need) {
        Ok(caller) => Ok(caller),
        Err(e) => {
            let e = ApiError::from(e);
            audit::note(app, headers, peer, act.clone(), Some(&e)).await;
            Err(error_page(app, headers, viewer, e))
        }
    }
}
