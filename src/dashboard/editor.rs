//! The job editor (docs/dashboard.md, "Creating and editing jobs"): `/jobs/new` and
//! `/jobs/{job}/edit` show a form of a runtime job's fields, posted to `/ui/editor` to
//! preview (each problem beside its field, and the next fire times of the edited schedule)
//! or to save; a runtime job's page posts its deletion to `/ui/jobs/{job}/delete`. Saving
//! and deleting go through `super::job_api::write`, as the API's `PUT` and `DELETE` do,
//! with the revision the form was read at: a change made meanwhile is refused, never
//! overwritten. Every page and form here needs the role admin.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use cronq_shared::config::Problem;
use cronq_shared::jobs::{Expect, current};
use cronq_shared::names::JobName;
use maud::{Markup, html};
use toml::{Table, Value};

use super::App;
use super::actions::{self, ApiError};
use super::audit::{self, Act};
use super::auth::Role;
use super::job_api::{self, Change, Refused};
use super::pages::{
    Flash, Viewer, authorize, authorize_act, encode, encode_path, error_page, field, form,
    next_table, render,
};
use super::read::within;

/// The form's fields that are a key of the job's table, in the form's order.
const KEYS: [&str; 9] = [
    "schedule",
    "timezone",
    "handler",
    "payload",
    "queue",
    "overlap",
    "catchup",
    "max_attempts",
    "timeout",
];

/// What the form holds, as text.
#[derive(Debug, Clone, Default)]
struct Fields {
    /// The job's name.
    name: String,
    /// Whether the form creates the job (its name can be chosen).
    new: bool,
    /// The revision the form was read at (0 for a new job).
    revision: u64,
    /// Each of [`KEYS`], as typed (`payload` as a TOML inline table).
    keys: BTreeMap<&'static str, String>,
    /// Any other settings, as TOML.
    extra: String,
    /// Accept a handler no live consumer offers.
    allow_unknown_handler: bool,
}

impl Fields {
    fn key(&self, k: &str) -> &str {
        self.keys.get(k).map_or("", String::as_str)
    }

    /// The fields of a stored spec: the form's keys, the rest as TOML.
    fn of_spec(name: &str, revision: u64, spec: &str) -> Self {
        let mut rest: Table = spec.parse().unwrap_or_default();
        rest.remove("name");
        let mut keys = BTreeMap::new();
        for k in KEYS {
            let text = match rest.get(k) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Integer(i)) if k == "max_attempts" => i.to_string(),
                Some(v @ Value::Table(_)) if k == "payload" => v.to_string(),
                _ => continue,
            };
            rest.remove(k);
            keys.insert(k, text);
        }
        Self {
            name: name.to_owned(),
            new: false,
            revision,
            keys,
            extra: toml::to_string(&rest).unwrap_or_default(),
            allow_unknown_handler: false,
        }
    }

    /// The fields of a posted form.
    fn of_form(form: &[(String, String)]) -> Self {
        let text = |k: &str| field(form, k).unwrap_or_default().trim().to_owned();
        let mut keys = BTreeMap::new();
        for k in KEYS {
            keys.insert(k, text(k));
        }
        // The handler: typed, or chosen among the config's.
        let typed = text("handler_name");
        if !typed.is_empty() {
            keys.insert("handler", typed);
        }
        Self {
            name: text("name"),
            new: field(form, "new").is_some(),
            revision: text("revision").parse().unwrap_or(0),
            keys,
            extra: field(form, "extra").unwrap_or_default().to_owned(),
            allow_unknown_handler: field(form, "allow_unknown_handler").is_some(),
        }
    }

    /// The job's table as TOML text, or the problems of the fields that are not TOML.
    fn spec(&self) -> Result<String, Problems> {
        let mut problems = Problems::default();
        let mut table = match self.extra.parse::<Table>() {
            Ok(t) => t,
            Err(e) => {
                problems.field("extra", format!("not valid TOML: {}", e.message().trim()));
                Table::new()
            }
        };
        for k in KEYS.iter().chain(&["name"]) {
            if table.contains_key(*k) {
                problems.field(
                    "extra",
                    format!("sets {k}, which has a field of its own in this form: set it there"),
                );
            }
        }
        for k in KEYS {
            let text = self.key(k);
            if text.is_empty() {
                continue;
            }
            let value = match k {
                "payload" => match format!("payload = {text}").parse::<Table>() {
                    Ok(mut t) => t.remove("payload").unwrap_or(Value::Table(Table::new())),
                    Err(e) => {
                        problems.field(
                            "payload",
                            format!(
                                "not a TOML inline table such as {{ region = \"cn\" }}: {}",
                                e.message().trim()
                            ),
                        );
                        continue;
                    }
                },
                "max_attempts" => text
                    .parse::<i64>()
                    .map_or_else(|_| Value::String(text.to_owned()), Value::Integer),
                _ => Value::String(text.to_owned()),
            };
            table.insert(k.to_owned(), value);
        }
        if problems.is_empty() {
            Ok(toml::to_string(&table).unwrap_or_default())
        } else {
            Err(problems)
        }
    }
}

/// What the form shows of a refusal: each problem beside its field, the others on top.
#[derive(Debug, Clone, Default)]
struct Problems {
    by_field: BTreeMap<String, Vec<String>>,
    top: Vec<String>,
}

impl Problems {
    fn is_empty(&self) -> bool {
        self.by_field.is_empty() && self.top.is_empty()
    }

    fn field(&mut self, field: &str, message: String) {
        self.by_field
            .entry(field.to_owned())
            .or_default()
            .push(message);
    }

    /// `problems` of a job checked with the config's rules: beside the form's field
    /// when it has one; beside the other settings when they set the key; on top else.
    fn of(problems: &[Problem], fields: &Fields) -> Self {
        let extra: Table = fields.extra.parse().unwrap_or_default();
        let mut out = Self::default();
        for p in problems {
            let key = p.field.split(['.', '[']).next().unwrap_or_default();
            if KEYS.contains(&key) || (key == "name" && fields.new) {
                out.field(key, p.message.clone());
            } else if !key.is_empty() && extra.contains_key(key) {
                out.field("extra", format!("{}: {}", p.field, p.message));
            } else {
                out.top.push(p.to_string());
            }
        }
        out
    }

    fn of_refusal(refused: Refused, fields: &Fields) -> Self {
        if refused.problems.is_empty() {
            Self {
                top: vec![refused.error.message],
                ..Self::default()
            }
        } else {
            Self::of(&refused.problems, fields)
        }
    }
}

/// What the form page shows besides the form.
#[derive(Default)]
struct Outcome {
    problems: Problems,
    /// The next fire times of the edited schedule, in its zone.
    fires: Option<(chrono_tz::Tz, Vec<super::answer::NextFire>)>,
    /// Said on top when nothing is wrong (a preview's result).
    note: Option<String>,
    /// The edited job, resolved, when the form is valid.
    job: Option<cronq_shared::config::Job>,
    /// What saving changes in the next [`PLAN_HOURS`] (`crate::ops::plan`, as `cronq
    /// plan`): `Some(None)` when the job's definition does not change.
    plan: Option<Option<crate::ops::plan::JobPlan>>,
}

/// How many hours ahead the editor's plan looks.
const PLAN_HOURS: i64 = 24;

/// Fills `outcome.plan`: the edited job against its current revision (none for a new job).
async fn with_plan(app: &App, fields: &Fields, outcome: &mut Outcome) {
    let Some(new) = &outcome.job else {
        return;
    };
    let old = match (fields.new, JobName::new(&fields.name)) {
        (false, Ok(name)) => within(current(&*app.source.stores.jobs, &name))
            .await
            .ok()
            .flatten()
            .and_then(|rev| rev.spec)
            .and_then(|spec| app.source.config().runtime_job(&spec).ok()),
        _ => None,
    };
    let now = Utc::now();
    outcome.plan = Some(crate::ops::plan::job_plan(
        old.as_ref(),
        Some(new),
        now,
        now + chrono::TimeDelta::hours(PLAN_HOURS),
    ));
}

/// The refusal of a page of the editor to a session without the role admin, if so.
fn refused_page(app: &App, headers: &HeaderMap, viewer: &Viewer) -> Option<Response> {
    if viewer.may(Role::Admin) {
        return None;
    }
    let status = if viewer.csrf.is_none() {
        StatusCode::UNAUTHORIZED
    } else {
        StatusCode::FORBIDDEN
    };
    Some(error_page(
        app,
        headers,
        viewer,
        ApiError {
            status,
            message: "creating, editing and deleting jobs needs a session of a token with the role admin: log in with one".into(),
        },
    ))
}

/// `GET /jobs/new`.
pub async fn new(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let viewer = Viewer::of(&app, &headers);
    if let Some(r) = refused_page(&app, &headers, &viewer) {
        return r;
    }
    let fields = Fields {
        new: true,
        ..Fields::default()
    };
    form_page(
        &app,
        &headers,
        &viewer,
        &fields,
        &Outcome::default(),
        StatusCode::OK,
    )
}

/// `GET /jobs/{job}/edit`: a runtime job's form, at its current revision.
pub async fn edit(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    if let Some(r) = refused_page(&app, &headers, &viewer) {
        return r;
    }
    let not_runtime = |message: String| {
        error_page(
            &app,
            &headers,
            &viewer,
            ApiError {
                status: StatusCode::NOT_FOUND,
                message,
            },
        )
    };
    let config = app.source.config();
    if config.job(&name).is_some() {
        return error_page(
            &app,
            &headers,
            &viewer,
            ApiError {
                status: StatusCode::CONFLICT,
                message: format!(
                    "job {name:?} is defined in {}: read-only here, change it in the file",
                    config.path.display()
                ),
            },
        );
    }
    let Ok(job) = JobName::new(&name) else {
        return not_runtime(format!("no runtime job {name:?}"));
    };
    let rev = match within(current(&*app.source.stores.jobs, &job)).await {
        Ok(Some(rev)) => rev,
        Ok(None) => return not_runtime(format!("no runtime job {name:?}")),
        Err(e) => {
            return error_page(
                &app,
                &headers,
                &viewer,
                ApiError::unavailable(format!("the job store: {e}")),
            );
        }
    };
    let fields = Fields::of_spec(&name, rev.revision, rev.spec.as_deref().unwrap_or_default());
    let mut outcome = preview(&app, &fields);
    with_plan(&app, &fields, &mut outcome).await;
    form_page(&app, &headers, &viewer, &fields, &outcome, StatusCode::OK)
}

/// The problems and the next fire times of `fields`, nothing written.
fn preview(app: &App, fields: &Fields) -> Outcome {
    let mut outcome = Outcome::default();
    let config = app.source.config();
    if fields.new {
        if let Err(e) = JobName::new(&fields.name) {
            outcome.problems.field("name", e.to_string());
        } else if config.job(&fields.name).is_some() {
            outcome.problems.field(
                "name",
                format!("is a job of {}: choose another name", config.path.display()),
            );
        }
    }
    let spec = match fields.spec() {
        Ok(spec) => spec,
        Err(p) => {
            outcome.problems.by_field.extend(p.by_field);
            outcome.problems.top.extend(p.top);
            return outcome;
        }
    };
    let name = if outcome.problems.is_empty() {
        fields.name.as_str()
    } else {
        "preview"
    };
    match job_api::check(app, name, &spec) {
        Ok(read) => {
            outcome.fires = Some((
                read.job.timezone,
                actions::next_fires(&read.job, Utc::now(), 10),
            ));
            outcome.job = Some(read.job);
        }
        Err(refused) => {
            let p = Problems::of_refusal(refused, fields);
            for (k, v) in p.by_field {
                outcome.problems.by_field.entry(k).or_default().extend(v);
            }
            outcome.problems.top.extend(p.top);
            outcome.fires = schedule_only(app, fields);
        }
    }
    outcome
}

/// The next fire times of the schedule and zone of `fields` alone, when they are valid:
/// shown while other fields have problems.
fn schedule_only(
    app: &App,
    fields: &Fields,
) -> Option<(chrono_tz::Tz, Vec<super::answer::NextFire>)> {
    let mut table = Table::new();
    table.insert(
        "schedule".into(),
        Value::String(fields.key("schedule").into()),
    );
    if !fields.key("timezone").is_empty() {
        table.insert(
            "timezone".into(),
            Value::String(fields.key("timezone").into()),
        );
    }
    table.insert("handler".into(), Value::String("preview".into()));
    let spec = toml::to_string(&table).ok()?;
    let read = app
        .source
        .config()
        .runtime_job_named("preview", &spec)
        .ok()?;
    Some((
        read.job.timezone,
        actions::next_fires(&read.job, Utc::now(), 10),
    ))
}

/// `POST /ui/editor`: `action=preview` shows the form again with its problems and the
/// next fire times; `action=save` writes the job (as the API's `PUT`) at the form's
/// revision and shows its page, or shows the form again with why not.
pub async fn submit(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let viewer = Viewer::of(&app, &headers);
    let form = form(&body);
    let fields = Fields::of_form(&form);
    let saving = field(&form, "action") == Some("save");
    let mut act = Act::new(
        if fields.new {
            "job.create"
        } else {
            "job.update"
        },
        Some(&fields.name),
    );
    let caller = match authorize(&app, &headers, &form, Role::Admin) {
        Ok(caller) => caller,
        Err(e) => {
            let e = ApiError::from(e);
            if saving {
                audit::note(&app, &headers, peer, act, Some(&e)).await;
            }
            return error_page(&app, &headers, &viewer, e);
        }
    };
    let mut outcome = preview(&app, &fields);
    if !saving {
        with_plan(&app, &fields, &mut outcome).await;
    }
    if !saving || !outcome.problems.is_empty() {
        if outcome.problems.is_empty() {
            outcome.note = Some("Valid: nothing was saved yet.".into());
        }
        let status = if outcome.problems.is_empty() {
            StatusCode::OK
        } else {
            StatusCode::BAD_REQUEST
        };
        if saving {
            let e = ApiError {
                status,
                message: outcome
                    .problems
                    .by_field
                    .iter()
                    .flat_map(|(k, v)| v.iter().map(move |m| format!("{k}: {m}")))
                    .chain(outcome.problems.top.iter().cloned())
                    .collect::<Vec<_>>()
                    .join("; "),
            };
            audit::note(&app, &headers, peer, act, Some(&e)).await;
        }
        return form_page(&app, &headers, &viewer, &fields, &outcome, status);
    }
    let spec = fields.spec().unwrap_or_default();
    let change = Change {
        name: &fields.name,
        spec: Some(&spec),
        expect: Expect::Revision(fields.revision),
        allow_unknown_handler: fields.allow_unknown_handler,
    };
    let written = job_api::write(&app, &caller, &change, &mut act).await;
    audit::note(
        &app,
        &headers,
        peer,
        act,
        written.as_ref().err().map(|r| &r.error),
    )
    .await;
    match written {
        Ok(w) => {
            let message = format!(
                "{} job {:?} (revision {})",
                if w.created { "created" } else { "updated" },
                fields.name,
                w.revision
            );
            Redirect::to(&format!(
                "/jobs/{}?{}",
                encode_path(&fields.name),
                encode(&[("msg", message)])
            ))
            .into_response()
        }
        Err(refused) if refused.error.status == StatusCode::UNPROCESSABLE_ENTITY => {
            // No live consumer offers the handler: said beside it, with this form's way out.
            let message = refused.error.message.replace(
                "add ?allow_unknown_handler=true",
                "tick \"accept a handler no consumer offers now\"",
            );
            outcome.problems = Problems::default();
            outcome.problems.field("handler", message);
            form_page(
                &app,
                &headers,
                &viewer,
                &fields,
                &outcome,
                refused.error.status,
            )
        }
        Err(refused) => {
            let status = refused.error.status;
            outcome.problems = Problems::of_refusal(refused, &fields);
            form_page(&app, &headers, &viewer, &fields, &outcome, status)
        }
    }
}

/// `POST /ui/jobs/{job}/delete` (from the job's page): deletes a runtime job at the
/// revision the page showed, once confirmed.
pub async fn delete(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    delete_job(&app, peer, &headers, &name, &body).await
}

async fn delete_job(
    app: &App,
    peer: SocketAddr,
    headers: &HeaderMap,
    name: &str,
    body: &[u8],
) -> Response {
    let viewer = Viewer::of(app, headers);
    let form = form(body);
    let mut act = Act::new("job.delete", Some(name));
    let caller = match authorize_act(app, peer, headers, &viewer, &form, Role::Admin, &act).await {
        Ok(caller) => caller,
        Err(page) => return page,
    };
    let page = format!("/jobs/{}", encode_path(name));
    if field(&form, "confirm").is_none() {
        let message = "not deleted: tick the confirmation box first".to_owned();
        return Redirect::to(&format!("{page}?{}", encode(&[("err", message)]))).into_response();
    }
    let Some(revision) = field(&form, "revision").and_then(|r| r.trim().parse().ok()) else {
        return error_page(
            app,
            headers,
            &viewer,
            ApiError::bad_request("the form has no revision: reload the job's page"),
        );
    };
    let change = Change {
        name,
        spec: None,
        expect: Expect::Revision(revision),
        allow_unknown_handler: false,
    };
    let written = job_api::write(app, &caller, &change, &mut act).await;
    audit::note(
        app,
        headers,
        peer,
        act,
        written.as_ref().err().map(|r| &r.error),
    )
    .await;
    match written {
        Ok(_) => {
            let message = format!("deleted job {name:?}; its queued occurrences end cancelled");
            Redirect::to(&format!("/jobs?{}", encode(&[("msg", message)]))).into_response()
        }
        Err(r) if r.error.status == StatusCode::NOT_FOUND => {
            error_page(app, headers, &viewer, r.error)
        }
        Err(r) => {
            Redirect::to(&format!("{page}?{}", encode(&[("err", r.error.message)]))).into_response()
        }
    }
}

/// The editor's page: the form with each problem beside its field, and the next fire
/// times when the schedule is valid.
fn form_page(
    app: &App,
    headers: &HeaderMap,
    viewer: &Viewer,
    fields: &Fields,
    outcome: &Outcome,
    status: StatusCode,
) -> Response {
    let problems = &outcome.problems;
    let beside = |k: &str| -> Markup {
        html! {
            @for m in problems.by_field.get(k).into_iter().flatten() {
                span.field-error data-field=(k) role="alert" { (m) }
            }
        }
    };
    let config = app.source.config();
    let handlers: Vec<&str> = config.handlers.keys().map(|h| &**h).collect();
    let handler = fields.key("handler");
    let chosen = handlers.contains(&handler);
    let title = if fields.new {
        "New job".to_owned()
    } else {
        format!("Edit {}", fields.name)
    };
    let text = |k: &'static str, label: &str, hint: &str| -> Markup {
        html! {
            label for=(k) { (label) }
            input id=(k) type="text" name=(k) value=(fields.key(k)) placeholder=(hint);
            (beside(k))
        }
    };
    let choice = |k: &'static str, label: &str, options: &[&str]| -> Markup {
        html! {
            label for=(k) { (label) }
            select id=(k) name=(k) {
                option value="" selected[fields.key(k).is_empty()] { "(default)" }
                @for o in options {
                    option value=(o) selected[fields.key(k) == *o] { (o) }
                }
            }
            (beside(k))
        }
    };
    let flash = Flash {
        msg: outcome.note.clone(),
        err: None,
    };
    let main = html! {
        h1 { (title) }
        @if let Some(m) = &flash.msg { div.banner.good role="status" { (m) } }
        @if !problems.is_empty() {
            div.banner.bad #problems role="alert" {
                "Not saved: fix the fields marked below."
                @for t in &problems.top { br; (t) }
            }
        }
        form #job-form .editor method="post" action="/ui/editor" {
            (viewer.csrf_field())
            input type="hidden" name="revision" value=(fields.revision);
            @if fields.new {
                input type="hidden" name="new" value="1";
                label for="name" { "Name" }
                input #name type="text" name="name" value=(fields.name) required placeholder="nightly-report";
                (beside("name"))
            } @else {
                input type="hidden" name="name" value=(fields.name);
                p { "Job " code { (fields.name) } ", revision " strong #form-revision { (fields.revision) } }
            }
            (text("schedule", "Schedule", "0 3 * * * or @every 10m"))
            (text("timezone", "Time zone", "UTC or Europe/Berlin"))
            label for="handler" { "Handler" }
            select #handler name="handler" {
                option value="" selected[!chosen] { "(typed below)" }
                @for h in &handlers { option value=(h) selected[*h == handler] { (h) } }
            }
            input #handler_name type="text" name="handler_name" value=(if chosen { "" } else { handler }) placeholder="or a handler registered in Rust";
            (beside("handler"))
            (text("payload", "Payload", "{ region = \"cn\" }"))
            (text("queue", "Queue", "default"))
            (choice("overlap", "Overlap", &["allow", "skip", "queue", "replace"]))
            (choice("catchup", "Catch-up", &["none", "latest", "all"]))
            (text("max_attempts", "Max attempts", "3"))
            (text("timeout", "Timeout", "10m"))
            label for="extra" { "Other settings (TOML)" }
            textarea #extra name="extra" rows="6" placeholder="retry_backoff = \"30s\"" { (fields.extra) }
            (beside("extra"))
            label { input type="checkbox" name="allow_unknown_handler" value="1" checked[fields.allow_unknown_handler]; " accept a handler no consumer offers now (registered in Rust)" }
            div.buttons {
                button #preview type="submit" name="action" value="preview" { "Preview" }
                button #save type="submit" name="action" value="save" { "Save" }
                @if !fields.new { " " a href=(format!("/jobs/{}", encode_path(&fields.name))) { "Cancel" } }
            }
        }
        @if let Some(plan) = &outcome.plan {
            section #preview-plan {
                h2 { "What saving changes in the next " (PLAN_HOURS) " hours" }
                @match plan {
                    None => p { "Nothing: the job's definition is unchanged." },
                    Some(j) => {
                        p { "Job " code { (j.job) } " is " strong.plan-change { (j.change.as_str()) } "; a reload publishes no catch-up: the change starts when it is saved." }
                        ul {
                            @for line in crate::ops::plan::job_lines(j) { li { (line) } }
                        }
                    }
                }
            }
        }
        @if let Some((zone, next)) = &outcome.fires {
            section #preview-fires {
                h2 { "Next 10 fire times of this schedule" }
                (next_table(*zone, next))
            }
        }
    };
    let mut response = render(app, headers, viewer, (&title, "Jobs"), main, false);
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn posted(pairs: &[(&str, &str)]) -> Fields {
        let form: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Fields::of_form(&form)
    }

    #[test]
    fn a_form_becomes_the_jobs_table_and_back() {
        let fields = posted(&[
            ("name", "eu"),
            ("new", "1"),
            ("schedule", "30 3 * * *"),
            ("handler", "report"),
            ("handler_name", ""),
            ("payload", "{ region = \"eu\" }"),
            ("max_attempts", "4"),
            ("extra", "catchup_window = \"2h\"\n"),
        ]);
        let spec = fields.spec().unwrap();
        let table: Table = spec.parse().unwrap();
        assert_eq!(table["schedule"].as_str(), Some("30 3 * * *"));
        assert_eq!(table["handler"].as_str(), Some("report"));
        assert_eq!(table["max_attempts"].as_integer(), Some(4));
        assert_eq!(table["payload"]["region"].as_str(), Some("eu"));
        assert_eq!(table["catchup_window"].as_str(), Some("2h"));
        assert!(
            !table.contains_key("timezone"),
            "an empty field is left out: {spec}"
        );
        let back = Fields::of_spec("eu", 3, &spec);
        assert_eq!(back.key("payload"), "{ region = \"eu\" }");
        assert_eq!(back.key("max_attempts"), "4");
        assert_eq!(back.extra.trim(), "catchup_window = \"2h\"");
        assert_eq!(back.revision, 3);
    }

    #[test]
    fn a_typed_handler_wins_over_the_chosen_one() {
        let fields = posted(&[("handler", "report"), ("handler_name", "rust-one")]);
        assert_eq!(fields.key("handler"), "rust-one");
    }

    #[test]
    fn fields_that_are_not_toml_are_named() {
        let fields = posted(&[
            ("payload", "region = eu"),
            ("extra", "schedule = \"@daily\"\n"),
        ]);
        let problems = fields.spec().unwrap_err();
        assert!(
            problems.by_field["payload"][0].contains("inline table"),
            "{problems:?}"
        );
        assert!(
            problems.by_field["extra"][0].contains("sets schedule"),
            "{problems:?}"
        );
    }

    #[test]
    fn problems_go_beside_their_field_or_on_top() {
        let fields = posted(&[("extra", "retry_backoff = \"x\"\n")]);
        let problems = [
            Problem::new("job \"a\"", "schedule", "bad minute"),
            Problem::new("job \"a\"", "retry_backoff", "not a duration"),
            Problem::new("", "", "not valid TOML"),
        ];
        let p = Problems::of(&problems, &fields);
        assert_eq!(p.by_field["schedule"], ["bad minute"]);
        assert_eq!(p.by_field["extra"], ["retry_backoff: not a duration"]);
        assert_eq!(p.top, ["not valid TOML"]);
    }
}
