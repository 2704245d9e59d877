//! Logging in and out (`/login`, `/logout`): the login form, bound to a login cookie by
//! its CSRF token, and the session cookie it sets. Every cookie the dashboard sets is set
//! here, by [`set_cookies`].
//!
//! Invariant: after logging in, only a path of this dashboard is followed ([`local_path`]).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::form::{authorize, field, form};
use super::layout::{Viewer, error_page, render};
use crate::dashboard::App;
use crate::dashboard::actions::ApiError;
use crate::dashboard::audit::{self, Act};
use crate::dashboard::auth::{
    LOGIN_COOKIE, Role, SESSION_COOKIE, SESSION_SECONDS, cookie, set_cookie,
};

/// The query of `/login`.
#[derive(Debug, Default, Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
}

/// Only a path of this dashboard (no `//host`): where to go after logging in.
fn local_path(next: Option<&str>) -> String {
    next.filter(|n| n.starts_with('/') && !n.starts_with("//") && !n.contains('\\'))
        .unwrap_or("/")
        .to_owned()
}

/// `GET /login`.
pub async fn login_form(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Query<LoginQuery>,
) -> Response {
    login_page(&app, &headers, q.next.as_deref(), None)
}

/// Why the login form is shown again: the status it answers with and what it says.
type LoginRefusal<'a> = (StatusCode, &'a str);

/// The login page, shown again after a refused login with its status (401 for a wrong
/// token, 403 for a form that did not come from this dashboard, as for every other form).
fn login_page(
    app: &App,
    headers: &HeaderMap,
    next: Option<&str>,
    refusal: Option<LoginRefusal<'_>>,
) -> Response {
    let error = refusal.map(|(_, message)| message);
    let viewer = Viewer::of(app, headers);
    let nonce = app.access.new_login();
    let csrf = app.access.login_csrf(&nonce);
    let main = html! {
        h1 { "Log in" }
        @if let Some(e) = error { div.banner.bad role="alert" { (e) } }
        @if viewer.read_only {
            p { "This dashboard is read-only: no token is configured (" code { "--tokens-file" } ", " code { "CRONQ_DASHBOARD_TOKEN" } " or " code { "--dashboard-token-file" } ")." }
        } @else {
            form #login method="post" action="/login" {
                input type="hidden" name="csrf" value=(csrf);
                input type="hidden" name="next" value=(local_path(next));
                label { "Token " input #token type="password" name="token" autocomplete="current-password" required; }
                button #login-submit type="submit" { "Log in" }
            }
        }
    };
    let mut response = render(app, headers, &viewer, ("Log in", ""), main, false);
    if let Some((status, _)) = refusal {
        *response.status_mut() = status;
    }
    set_cookies(&mut response, &[(LOGIN_COOKIE, &nonce, 600)]);
    response
}

/// `POST /login`.
pub async fn login(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let form = form(&body);
    let next = local_path(field(&form, "next"));
    let nonce = cookie(&headers, LOGIN_COOKIE).unwrap_or_default();
    let csrf_ok = !nonce.is_empty()
        && app
            .access
            .is_login_csrf(&nonce, field(&form, "csrf").unwrap_or_default());
    let refuse = |status: StatusCode, audited: &str, shown: &'static str| {
        let e = ApiError {
            status,
            message: audited.into(),
        };
        let (app, headers, next) = (&app, &headers, &next);
        async move {
            audit::note_as(app, "-", peer, Act::new("login", None), Some(&e)).await;
            login_page(app, headers, Some(next), Some((status, shown)))
        }
    };
    if !csrf_ok {
        return refuse(
            StatusCode::FORBIDDEN,
            "the login form's CSRF token is wrong or missing",
            "the login form expired or did not come from this dashboard: try again",
        )
        .await;
    }
    let Some(caller) = app.access.token(field(&form, "token").unwrap_or_default()) else {
        tracing::warn!("dashboard: a login with a wrong token");
        return refuse(
            StatusCode::UNAUTHORIZED,
            "wrong token",
            "wrong token: none of the dashboard's tokens",
        )
        .await;
    };
    tracing::info!(token = %caller.name, role = %caller.role, "dashboard: logged in");
    let mut act = Act::new("login", None);
    act.detail = Some(format!("role {}", caller.role));
    audit::note_as(&app, &caller.name, peer, act, None).await;
    let session = app.access.new_session(&caller);
    let mut response = Redirect::to(&next).into_response();
    set_cookies(
        &mut response,
        &[
            (SESSION_COOKIE, &session, SESSION_SECONDS),
            (LOGIN_COOKIE, "", 0),
        ],
    );
    response
}

/// `POST /logout`.
pub async fn logout(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    let form = form(&body);
    if let Err(e) = authorize(&app, &headers, &form, Role::Viewer) {
        return error_page(&app, &headers, &viewer, ApiError::from(e));
    }
    let mut response = Redirect::to("/").into_response();
    set_cookies(&mut response, &[(SESSION_COOKIE, "", 0)]);
    response
}

/// Sets each of `cookies` (name, value, max age in seconds; 0 removes it) on `response`,
/// as `crate::dashboard::auth::set_cookie` writes one.
fn set_cookies(response: &mut Response, cookies: &[(&str, &str, i64)]) {
    for (name, value, max_age) in cookies {
        if let Ok(v) = set_cookie(name, value, *max_age).parse() {
            response.headers_mut().append(header::SET_COOKIE, v);
        }
    }
}
