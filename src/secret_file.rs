//! A secret read from a file named on the command line (the signing keys, the dashboard's
//! tokens): the error names the flag and the file, and a file that other users may read is
//! warned of, never refused (the operator may share it with a group on purpose).

use std::path::Path;

use crate::settings::UsageError;

/// The text of `file`, given as `flag` (such as `--signing-key-file
/// (CRONQ_SIGNING_KEY_FILE)`); `what` names it in the warning (such as `the signing key
/// file`).
///
/// # Errors
/// [`UsageError`] naming the flag and the file when it cannot be read.
pub fn read(file: &Path, flag: &str, what: &str) -> Result<String, UsageError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| UsageError(format!("{flag} {}: cannot read it: {e}", file.display())))?;
    warn_if_readable_by_others(file, what);
    Ok(text)
}

/// A secret file others may read gives its secrets away: say so.
fn warn_if_readable_by_others(file: &Path, what: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    if let Ok(meta) = std::fs::metadata(file)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            file = %file.display(),
            mode = format!("{:o}", meta.permissions().mode() & 0o777),
            "{what} is readable by its group or others: `chmod 600 {}` it",
            file.display()
        );
    }
}
