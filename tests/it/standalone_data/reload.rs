//! A standalone reloads both halves on SIGHUP: a job added to its config runs (once per
//! occurrence), through a named handler (`[handlers.NAME]`), instead of being
//! dead-lettered by the consumer half as unknown.

use crate::support::data_file::{DataFile, LEADER, job, keys};
use crate::support::deployment::argv;
use crate::support::{TestEnv, scoped};

/// `[handlers.append]`: appends `$CRONQ_KEY` to `<dir>/<job>.ran`.
fn append_handler(env: &TestEnv) -> String {
    let script = format!(
        "echo \"$CRONQ_KEY\" >> '{}'/\"$CRONQ_JOB\".ran",
        env.dir.display()
    );
    format!(
        "\n[handlers.append]\ncommand = {}\n",
        argv(&["/bin/sh", "-c", &script])
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_added_on_sighup_runs_through_a_named_handler_and_is_not_dead_lettered() {
    scoped("sd-reload-added", |env: TestEnv| async move {
        let before = [
            LEADER.to_owned(),
            job(&env, "tick", "@every 1s", ""),
            // Served by no handler from the start: warned of at the start, not again.
            "\n[[job]]\nname = \"old-unserved\"\nschedule = \"0 0 29 2 *\"\nhandler = \"nowhere\"\n".to_owned(),
        ]
        .concat();
        let file = DataFile::new(&env, &before);
        let s = file.start("standalone", &["--lease", "2s"]);
        file.leading(&s).await;
        file.advance("tick", 1).await;

        let after = [
            before,
            append_handler(&env),
            "\n[[job]]\nname = \"added-live\"\nschedule = \"@every 1s\"\nhandler = \"append\"\npayload = { region = \"eu\" }\n".to_owned(),
            // Added too, served by no handler: the reload warns of it alone.
            "\n[[job]]\nname = \"added-unserved\"\nschedule = \"0 0 29 2 *\"\nhandler = \"nowhere\"\n".to_owned(),
        ]
        .concat();
        file.rewrite_config(&after);
        env.signal(s.pid, nix::sys::signal::Signal::SIGHUP);
        let published = file.advance("added-live", 3).await;
        let ran = file.once_each("added-live", &keys(&published)).await;
        assert!(!ran.is_empty());
        let ran_keys = crate::support::data_file::ran(&env, "added-live");
        for key in keys(&published) {
            assert!(
                ran_keys.contains(&key),
                "{key} has a success but its handler did not append it: {ran_keys:?}{}",
                file.logs()
            );
        }
        let warned: Vec<String> = env
            .log("standalone")
            .lines()
            .filter(|l| l.contains("neither defines") || l.contains("no handler in the config"))
            .map(str::to_owned)
            .collect();
        assert!(
            warned.len() == 2
                && warned[0].contains("old-unserved")
                && warned[1].contains("added-unserved"),
            "one warning at the start and one at the reload, each of the jobs it brought that no handler serves: {warned:?}{}",
            file.logs()
        );
        let letters = file.json(&["dlq", "list", "--json"]);
        assert_eq!(
            letters["letters"].as_array().map(Vec::len),
            Some(0),
            "nothing is dead-lettered: {letters}{}",
            file.logs()
        );
        file.stop(&s);
    })
    .await;
}
