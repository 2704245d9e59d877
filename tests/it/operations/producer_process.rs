//! A `cronq producer` process carries out what an operator asks while it leads: control
//! requests from Redis (pause, trigger, backfill), and a config reloaded on SIGHUP, an
//! invalid one keeping the old.

use nix::sys::signal::Signal;

use crate::support::producer_process::{
    LEADER, WAIT, advance, cursor, producer, stop_and_drain, tick_config, wait_leader,
};
use crate::support::published::{
    assert_contiguous, assert_triggers_and_backfill, keys, seconds_once,
};
use crate::support::{eventually, scoped};

#[tokio::test(flavor = "multi_thread")]
async fn sighup_adds_a_job_and_an_invalid_file_keeps_the_old_config() {
    scoped("prod-reload", |env| async move {
        let config = tick_config(&env, "all");
        let a = producer(&env, "a", &config);
        wait_leader(&env, 0).await;
        advance(&env, "tick", 1).await;
        let two = format!(
            "{LEADER}\n[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\n\n[[job]]\nname = \"tock\"\nschedule = \"@every 1s\"\n"
        );
        env.write_config("cronq.toml", &two);
        env.signal(a, Signal::SIGHUP);
        advance(&env, "tock", 2).await;

        env.write_config("cronq.toml", "[[job]]\nname = \"tick\"\nschedule = \"61 * * * *\"\n");
        env.signal(a, Signal::SIGHUP);
        eventually(WAIT, "the reload to be rejected", || async {
            env.log("a").contains("config reload rejected").then_some(())
        })
        .await;
        // Both jobs keep running under the old config.
        advance(&env, "tock", 2).await;
        advance(&env, "tick", 1).await;
        let msgs = stop_and_drain(&env, &[a]).await;
        let tock = seconds_once(&msgs, "tock");
        assert!(tock.len() >= 3, "{:?}", keys(&msgs));
        assert_contiguous(&tock, &msgs);
        assert_contiguous(&seconds_once(&msgs, "tick"), &msgs);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_leader_carries_out_pause_trigger_and_backfill_requests() {
    use cronq_shared::control::Control;
    use cronq_shared::names::{JobName, Names, Namespace};

    scoped("prod-requests", |env| async move {
        env.track_queue("default");
        let toml = format!(
            "{LEADER}\n[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\n\n[[job]]\nname = \"yearly\"\nschedule = \"0 0 1 1 *\"\npayload = {{ from = \"config\" }}\n"
        );
        let config = env.write_config("cronq.toml", &toml).to_string_lossy().into_owned();
        let a = producer(&env, "a", &config);
        wait_leader(&env, 0).await;
        let names = Names::new(&Namespace::new(&env.namespace).unwrap());
        let redis = cronq_redis::connect(&crate::support::redis_url()).await.unwrap();
        let control = Control::new(cronq_redis::RedisControl::new(redis, &names));
        let (tick, yearly) = (JobName::new("tick").unwrap(), JobName::new("yearly").unwrap());

        // Two triggers in the same second are both honoured, each under its own key.
        let k1 = control.request_trigger(&yearly, None).await.unwrap();
        let k2 = control
            .request_trigger(&yearly, Some(serde_json::json!({"from": "cli"})))
            .await
            .unwrap();
        let (from, to) = ("2020-01-01T00:00:00Z".parse().unwrap(), "2022-01-01T00:00:00Z".parse().unwrap());
        control.request_backfill(&yearly, from, to).await.unwrap();
        eventually(WAIT, "the requests to be settled", || async {
            control.pending().await.unwrap().is_empty().then_some(())
        })
        .await;

        advance(&env, "tick", 1).await;
        control.pause(&tick, Some("test".into())).await.unwrap();
        eventually(WAIT, "the pause to be seen", || async {
            env.log("a").contains("job paused").then_some(())
        })
        .await;
        let paused_at = cursor(&env, "tick").await.unwrap();
        let resumed_at = advance(&env, "tick", 2).await;
        assert!(control.resume(&tick).await.unwrap());
        eventually(WAIT, "the resume to be seen", || async {
            env.log("a").contains("job resumed").then_some(())
        })
        .await;
        advance(&env, "tick", 2).await;

        let msgs = stop_and_drain(&env, &[a]).await;
        assert_triggers_and_backfill(&msgs, &k1, &k2);
        let ticks = seconds_once(&msgs, "tick");
        let during: Vec<i64> = ticks
            .keys()
            .copied()
            .filter(|s| *s * 1000 > paused_at && *s * 1000 <= resumed_at)
            .collect();
        assert!(during.is_empty(), "published while paused: {during:?}");
        assert!(
            ticks.keys().any(|s| *s * 1000 > resumed_at),
            "publishing restarts after resume"
        );
    })
    .await;
}
