//! Validation of plugin names and indices.

use crate::Error;

/// Checks a plugin's base name: non-empty, only `[A-Za-z0-9_.+-]`.
///
/// Runtimes refuse the registration of an external plugin whose name fails
/// this check.
pub fn check_plugin_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::InvalidPluginName {
            name: name.to_owned(),
            reason: "empty",
        });
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'+' | b'-'))
    {
        return Err(Error::InvalidPluginName {
            name: name.to_owned(),
            reason: "only ASCII letters, digits and _ . + - are allowed",
        });
    }
    Ok(())
}

/// Checks a plugin index: exactly two ASCII digits (`"00"` to `"99"`).
pub fn check_plugin_index(index: &str) -> Result<(), Error> {
    if index.len() == 2 && index.bytes().all(|b| b.is_ascii_digit()) {
        Ok(())
    } else {
        Err(Error::InvalidPluginIndex {
            index: index.to_owned(),
        })
    }
}

/// Splits a plugin file name `NN-name` at its first `-` into index and base
/// name, checking both.
///
/// ```
/// assert_eq!(nri_api::parse_plugin_file_name("10-logger")?, ("10", "logger"));
/// assert!(nri_api::parse_plugin_file_name("logger").is_err());
/// # Ok::<(), nri_api::Error>(())
/// ```
pub fn parse_plugin_file_name(file_name: &str) -> Result<(&str, &str), Error> {
    let wrap = |source: Error| Error::InvalidPluginFileName {
        file_name: file_name.to_owned(),
        source: Box::new(source),
    };
    let (idx, name) = file_name.split_once('-').ok_or_else(|| {
        wrap(Error::InvalidPluginIndex {
            index: file_name.to_owned(),
        })
    })?;
    check_plugin_index(idx).map_err(wrap)?;
    check_plugin_name(name).map_err(wrap)?;
    Ok((idx, name))
}
