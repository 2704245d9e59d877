//! [`Call`]: one call of a Lua script of this crate, built straight into its `EVALSHA`
//! command.
//!
//! `redis::ScriptInvocation` keeps each key and argument in a `Vec` of its own and copies
//! them all into a command when it is sent; a claim and a completion carry 13 to 35 of
//! them, once per delivery. A [`Call`] writes them into the command's one buffer as they
//! come. As `ScriptInvocation` does, a server that does not know the script yet (a new
//! master, a restart, `SCRIPT FLUSH`) answers `NOSCRIPT`, nothing ran, and the script is
//! loaded and the call sent again (`RedisConn::write_script` does the same for a guarded
//! write). It runs on any connection: it knows none of this crate's.

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind, ToRedisArgs};

/// One call of `script`: keys first, then arguments, in the order the script reads them.
pub(crate) struct Call<'s> {
    script: &'s Script,
    cmd: Cmd,
    /// Keys still to come before the first argument.
    keys_left: usize,
}

impl<'s> Call<'s> {
    /// A call of `script` with `keys` keys (its `KEYS` table), given next with [`Call::key`].
    pub(crate) fn new(script: &'s Script, keys: usize) -> Self {
        let mut cmd = Cmd::with_capacity(keys + 24, 512);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
        Self {
            script,
            cmd,
            keys_left: keys,
        }
    }

    /// Appends the next key.
    pub(crate) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        debug_assert!(self.keys_left > 0, "a key after the declared count");
        self.keys_left = self.keys_left.saturating_sub(1);
        self.cmd.arg(key);
        self
    }

    /// Appends the next argument (its `ARGV` table), after every key.
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        debug_assert_eq!(self.keys_left, 0, "an argument before every key");
        self.cmd.arg(arg);
        self
    }

    /// The `EVALSHA` command.
    pub(crate) fn cmd(&self) -> &Cmd {
        &self.cmd
    }

    /// The `EVALSHA` command, every key given, for arguments to be appended elsewhere
    /// (`ledger/batch.rs` gathers several claims in one) and run with [`Call::of`].
    pub(crate) fn into_cmd(self) -> Cmd {
        debug_assert_eq!(self.keys_left, 0, "a call with keys still to come");
        self.cmd
    }

    /// A call of `script` whose command [`Call::into_cmd`] gave and was filled since.
    pub(crate) fn of(script: &'s Script, cmd: Cmd) -> Self {
        Self {
            script,
            cmd,
            keys_left: 0,
        }
    }

    /// Loads the script into the server `conn` talks to.
    pub(crate) async fn load<C: ConnectionLike>(&self, conn: &mut C) -> RedisResult<()> {
        self.script.load_async(conn).await.map(drop)
    }

    /// Runs the call, loading the script first when the server does not know it.
    pub(crate) async fn query<T: FromRedisValue, C: ConnectionLike>(
        &self,
        conn: &mut C,
    ) -> RedisResult<T> {
        match self.cmd.query_async(conn).await {
            Err(err) if is_noscript(&err) => {
                self.load(conn).await?;
                self.cmd.query_async(conn).await
            }
            other => other,
        }
    }
}

/// Whether a server answered that it does not know the script (nothing ran).
pub(crate) fn is_noscript(err: &redis::RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}
